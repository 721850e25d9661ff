import test from "node:test";
import assert from "node:assert/strict";
import { name, positive } from "./index";

test("positive accepts 3", () => assert.equal(positive(3), 3));
test("positive refuses 0", () => assert.throws(() => positive(0)));
test("name trims", () => assert.equal(name("  build "), "build"));
