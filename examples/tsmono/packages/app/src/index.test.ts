import test from "node:test";
import assert from "node:assert/strict";
import { main } from "./index";

test("main prints a header and two rows", () => assert.equal(main().split("\n").length, 3));
