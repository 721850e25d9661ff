import test from "node:test";
import assert from "node:assert/strict";
import { label } from "./index";

test("label pads", () => assert.ok(label("ab", 4).includes("ab  ")));
