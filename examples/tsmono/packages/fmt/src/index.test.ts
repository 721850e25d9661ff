import test from "node:test";
import assert from "node:assert/strict";
import { label } from "./index";

test("label pads", () => assert.ok(label("x", 4).includes("x   ")));
