import test from "node:test";
import assert from "node:assert/strict";
import { report } from "./index";

test("report", () => {
  const lines = report({ test: [1], build: [2, 4] });
  assert.equal(lines.length, 2);
  assert.ok(lines[0].includes("build") && lines[0].endsWith(" 3"), lines[0]);
});
