import { positive } from "@acme/core";

/** `s` repeated `n` times. */
export function repeat(s: string, n: number): string {
  return s.repeat(positive(n));
}

export function pad(s: string, width: number): string {
  return s.length >= width ? s : s + " ".repeat(width - s.length);
}
