import invariant from "tiny-invariant";

/** A checked positive integer. */
export function positive(n: number): number {
  invariant(Number.isInteger(n) && n > 0, `not a positive integer: ${n}`);
  return n;
}

export const VERSION = "1.0.0";
