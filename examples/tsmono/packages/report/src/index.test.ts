import test from "node:test";
import assert from "node:assert/strict";
import { report } from "./index";

test("report", () => {
  const lines = report({ b: [1, 3], a: [4] });
  assert.equal(lines.length, 2);
  assert.ok(lines[0].includes("a") && lines[0].endsWith(" 4"));
});
