import invariant from "tiny-invariant";

/** The hub every other package builds on: checked numbers and names. */

/** A checked positive integer. */
export function positive(n: number): number {
  invariant(Number.isInteger(n) && n > 0, `not a positive integer: ${n}`);
  return n;
}

/** A checked non-empty name, trimmed. */
export function name(s: string): string {
  const t = s.trim();
  invariant(t.length > 0, "an empty name");
  return t;
}

export const VERSION = "1.0.0";
