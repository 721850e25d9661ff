import invariant from "tiny-invariant";
import { name } from "@acme/core";

/**
 * Kept on an older tiny-invariant (1.3.1) than the root's (1.3.3): npm installs it in
 * this package's own node_modules.
 */
export function legacyName(s: string): string {
  invariant(!s.includes("/"), `a legacy name has no slash: ${s}`);
  return `legacy:${name(s)}`;
}
