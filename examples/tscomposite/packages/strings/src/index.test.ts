import test from "node:test";
import assert from "node:assert/strict";
import { pad, repeat } from "./index";

test("repeat", () => assert.equal(repeat("ab", 2), "abab"));
test("pad", () => assert.equal(pad("a", 3), "a  "));
