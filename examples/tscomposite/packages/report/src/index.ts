import { label } from "@acme/fmt";
import { mean } from "@acme/math";

/** One line per series: its name and mean. */
export function report(series: Record<string, number[]>): string[] {
  return Object.keys(series)
    .sort()
    .map((k) => `${label(k, 8)} ${mean(series[k])}`);
}
