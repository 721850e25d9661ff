import test from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { legacyName } from "./index";

test("legacyName", () => assert.equal(legacyName(" x "), "legacy:x"));
test("legacyName refuses a slash", () => assert.throws(() => legacyName("a/b")));
test("this package resolves its own tiny-invariant, 1.3.1 (the root has 1.3.3)", () => {
  // <package>/dist/tiny-invariant.cjs.js
  const main = require.resolve("tiny-invariant");
  const manifest = JSON.parse(readFileSync(join(dirname(dirname(main)), "package.json"), "utf8"));
  assert.equal(manifest.version, "1.3.1", main);
});
