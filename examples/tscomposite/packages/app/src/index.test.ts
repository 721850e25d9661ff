import test from "node:test";
import assert from "node:assert/strict";
import { main } from "./index";

test("main", () => assert.ok(main().startsWith("============\n"), main()));
