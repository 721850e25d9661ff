import { positive } from "@acme/core";

export function sum(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

export function mean(xs: number[]): number {
  return sum(xs) / positive(xs.length);
}
