import pc from "picocolors";
import { name } from "@acme/core";
import { pad } from "@acme/strings";

/** A label padded to `width`, bold when colours are on. */
export function label(s: string, width: number): string {
  return pc.bold(pad(name(s), width));
}
