import test from "node:test";
import assert from "node:assert/strict";
import { mean, sum } from "./index";

test("sum", () => assert.equal(sum([1, 2, 3]), 6));
test("mean", () => assert.equal(mean([2, 4]), 3));
test("mean of nothing", () => assert.throws(() => mean([])));
