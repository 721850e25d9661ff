import pc from "picocolors";
import { pad } from "strings";

/** A label padded to `width`, bold when colours are on. */
export function label(s: string, width: number): string {
  return pc.bold(pad(s, width));
}
