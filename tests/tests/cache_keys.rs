//! Key sensitivity at the workspace level (brief §5): each test changes exactly one thing and
//! checks, through `prova show TASK --json` (or `--dry-run --json`), that the key moved and
//! that the component that moved is the one changed — or that the key did not move at all.

use std::time::Duration;

use prova_tests::cache::{Shown, chmod, edit, mtime, set_mtime};
use prova_tests::{ProvaCmd, TempWorkspace};
use serde_json::Value;

/// `app` depends on `lib`; `other` is unrelated to both. Every `build` reads its `src/**` and
/// the workspace's `//shared/**`; every task reads `toolchain.txt` (fingerprint) and
/// `//tools/**` (workspace inputs).
const CONFIG: &str = r#"[workspace]
projects = ["lib", "app", "other"]
fingerprint = ["toolchain.txt"]
inputs = ["//tools/**"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
deps = ["^build"]
inputs = ["src/**", "//shared/**"]
outputs = ["dist/**"]
env = ["MODE", "FLAVOR"]
pass_env = ["PASSED"]
timeout = "5m"
retries = 0
"#;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", CONFIG)
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "alpha\n")
        .file("app/README.md", "not an input of app#build\n")
        .file("lib/src/l.txt", "lib\n")
        .file("other/src/o.txt", "other\n")
        .file("toolchain.txt", "toolchain 1\n")
        .file("tools/gen.sh", "echo gen\n")
        .file("shared/common.txt", "common\n")
        .file("unrelated.txt", "nobody reads this\n")
}

/// `prova show TASK --json` with a fixed environment for the declared and passed variables.
fn show_cmd(ws: &TempWorkspace, task: &str) -> ProvaCmd {
    ws.prova(["show", task, "--json"])
        .env("MODE", "release")
        .env("FLAVOR", "vanilla")
        .env("PASSED", "one")
}

/// `app#build`'s key folds lib's key and output fingerprint: known once lib's entry for its
/// current key is in the cache, so lib is built (or hits) first.
fn app(ws: &TempWorkspace) -> Shown {
    prime(ws);
    Shown::of(show_cmd(ws, "app#build"))
}

/// Builds `lib` with the same environment `show_cmd` uses.
fn prime(ws: &TempWorkspace) {
    ws.prova(["run", "build", "-p", "lib"])
        .env("MODE", "release")
        .env("FLAVOR", "vanilla")
        .env("PASSED", "one")
        .run()
        .assert_code(0);
}

/// `other#build`: no upstream, so a change to the tasks' shared config moves only its own
/// components.
fn other(ws: &TempWorkspace) -> Shown {
    Shown::of(show_cmd(ws, "other#build"))
}

#[track_caller]
fn assert_moved(before: &Shown, after: &Shown, expected: &[&str]) {
    assert_ne!(before.key(), after.key(), "the key did not move\nbefore {}", before.json);
    assert_eq!(
        after.moved(before),
        expected,
        "other components moved too\nbefore {}\nafter {}",
        before.json,
        after.json
    );
}

#[track_caller]
fn assert_same(before: &Shown, after: &Shown) {
    assert_eq!(
        before.key(),
        after.key(),
        "the key moved ({:?})\nbefore {}\nafter {}",
        after.moved(before),
        before.json,
        after.json
    );
}

#[test]
fn show_dry_run_and_run_agree_on_the_key() {
    let ws = ws();
    // Once the cache exists: declared env values fold keyed by its salt, which the first
    // run makes (before it, `show` says "no cache yet" — tests/tests/cache_commands.rs).
    ws.prova(["run", "build", "-p", "other"]).env("MODE", "release").run().assert_code(0);
    let shown = app(&ws);
    let dry = dry_run_keys(&ws, &[]);
    assert_eq!(dry["app#build"], shown.key());
    let out = ws
        .prova(["run", "build", "-p", "app", "--json"])
        .env("MODE", "release")
        .env("FLAVOR", "vanilla")
        .env("PASSED", "one")
        .run();
    out.assert_code(0);
    assert_eq!(out.report("app#build")["key"], shown.key(), "{out}");
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    assert!(app(&ws).cached(), "show sees the entry the run saved");
}

#[test]
fn an_input_files_content_moves_the_key() {
    let ws = ws();
    let before = app(&ws);
    ws.write("app/src/a.txt", "beta\n");
    let after = app(&ws);
    assert_moved(&before, &after, &["inputs"]);
    assert_ne!(before.input("app/src/a.txt"), after.input("app/src/a.txt"));
}

#[test]
fn an_input_files_exec_bit_moves_the_key() {
    let ws = ws();
    chmod(&ws, "app/src/a.txt", 0o644);
    let before = app(&ws);
    chmod(&ws, "app/src/a.txt", 0o755);
    let after = app(&ws);
    assert_moved(&before, &after, &["inputs"]);
    assert_eq!(before.input("app/src/a.txt").unwrap()["exec"], false);
    assert_eq!(after.input("app/src/a.txt").unwrap()["exec"], true);
}

#[test]
fn adding_an_input_file_moves_the_key() {
    let ws = ws();
    let before = app(&ws);
    ws.write("app/src/b.txt", "new\n");
    let after = app(&ws);
    assert_moved(&before, &after, &["inputs"]);
    assert!(before.input("app/src/b.txt").is_none() && after.input("app/src/b.txt").is_some());
}

#[test]
fn a_declared_env_value_moves_the_key() {
    let ws = ws();
    let before = other(&ws);
    let after = Shown::of(show_cmd(&ws, "other#build").env("MODE", "debug"));
    assert_moved(&before, &after, &["env"]);
}

#[test]
fn a_declared_env_unset_and_empty_are_different_keys() {
    let ws = ws();
    let unset = Shown::of(show_cmd(&ws, "other#build").env_remove("MODE"));
    let empty = Shown::of(show_cmd(&ws, "other#build").env("MODE", ""));
    assert_moved(&unset, &empty, &["env"]);
    let env = |s: &Shown| s.component("env").clone();
    assert!(env(&unset).to_string().contains(r#"["MODE",null]"#), "{}", env(&unset));
}

#[test]
fn the_command_moves_the_key() {
    let ws = ws();
    let before = other(&ws);
    edit(&ws, "prova.toml", "cat src/* > dist/out.txt", "cat src/* >> dist/out.txt");
    assert_moved(&before, &other(&ws), &["command"]);
}

#[test]
fn the_timeout_moves_the_key() {
    let ws = ws();
    let before = other(&ws);
    edit(&ws, "prova.toml", r#"timeout = "5m""#, r#"timeout = "6m""#);
    assert_moved(&before, &other(&ws), &["config"]);
}

#[test]
fn the_outputs_move_the_key() {
    let ws = ws();
    let before = other(&ws);
    edit(&ws, "prova.toml", r#"outputs = ["dist/**"]"#, r#"outputs = ["dist/**", "out/**"]"#);
    assert_moved(&before, &other(&ws), &["config"]);
}

#[test]
fn a_workspace_fingerprint_file_moves_every_key() {
    let ws = ws();
    let (app_before, other_before) = (app(&ws), Shown::of(show_cmd(&ws, "other#build")));
    ws.write("toolchain.txt", "toolchain 2\n");
    // lib re-runs with the same bytes, but its key moved, and app (not confined) folds it.
    assert_moved(&app_before, &app(&ws), &["workspace", "upstream"]);
    assert_moved(&other_before, &Shown::of(show_cmd(&ws, "other#build")), &["workspace"]);
}

#[test]
fn a_workspace_input_moves_every_key() {
    let ws = ws();
    let other_before = Shown::of(show_cmd(&ws, "other#build"));
    ws.write("tools/gen.sh", "echo gen v2\n");
    assert_moved(&other_before, &Shown::of(show_cmd(&ws, "other#build")), &["workspace"]);
}

#[test]
fn a_tasks_own_workspace_input_moves_its_key() {
    // `//shared/**` in the task's `inputs`: a workspace-relative input of this task.
    let ws = ws();
    let before = Shown::of(show_cmd(&ws, "other#build"));
    ws.write("shared/common.txt", "common v2\n");
    let after = Shown::of(show_cmd(&ws, "other#build"));
    assert_moved(&before, &after, &["inputs"]);
    assert!(after.input("shared/common.txt").is_some(), "{}", after.json);
}

#[test]
fn an_upstream_input_moves_the_downstream_key_through_the_upstream_outputs() {
    let ws = ws();
    let (app_before, lib_before) = (app(&ws), Shown::of(show_cmd(&ws, "lib#build")));
    ws.write("lib/src/l.txt", "lib v2\n");
    let (app_after, lib_after) = (app(&ws), Shown::of(show_cmd(&ws, "lib#build")));
    assert_moved(&lib_before, &lib_after, &["inputs"]);
    // app reads no lib file itself: what it folds of lib moved, its key and its outputs.
    assert_moved(&app_before, &app_after, &["upstream", "upstream_outputs"]);
    // A lib edit that leaves its outputs as they were (an input its command ignores) does
    // not move app's key at all.
    ws.write("lib/src/l.txt", "lib v2\n");
    assert_same(&app_after, &app(&ws));
}

/// `prova run build -p app --dry-run --json [-- args]`: every planned task's key, by id.
fn dry_run_keys(ws: &TempWorkspace, forward: &[&str]) -> serde_json::Map<String, Value> {
    prime(ws);
    let mut args = vec!["run", "build", "-p", "app", "--dry-run", "--json"];
    if !forward.is_empty() {
        args.push("--");
        args.extend_from_slice(forward);
    }
    let out =
        ws.prova(args).env("MODE", "release").env("FLAVOR", "vanilla").env("PASSED", "one").run();
    out.assert_code(0);
    let plan: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("the dry run printed no JSON: {e}\n{out}"));
    plan["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks\n{out}"))
        .iter()
        .map(|t| (t["id"].as_str().expect("a task id").to_owned(), t["key"].clone()))
        .collect()
}

#[test]
fn forwarded_args_move_the_requested_tasks_key_only() {
    let ws = ws();
    let plain = dry_run_keys(&ws, &[]);
    let with_x = dry_run_keys(&ws, &["--x"]);
    let with_y = dry_run_keys(&ws, &["--y"]);
    assert_ne!(plain["app#build"], with_x["app#build"], "forwarded args are keyed");
    assert_ne!(with_x["app#build"], with_y["app#build"]);
    // lib#build is a dependency, not requested: it gets no args, so its key stays.
    assert_eq!(plain["lib#build"], with_x["lib#build"]);
}

#[test]
fn portable_drops_the_platform() {
    let ws = ws();
    let before = app(&ws);
    let platform = before.component("platform").as_str().unwrap_or_default().to_owned();
    assert!(platform.contains('/'), "a non-portable key folds os/arch: {platform:?}");
    edit(&ws, "prova.toml", "retries = 0\n", "retries = 0\nportable = true\n");
    let after = app(&ws);
    // `portable` is also part of the hashed config; the platform is gone (lib's too, whose key
    // app folds).
    assert_moved(&before, &after, &["config", "upstream", "platform"]);
    assert!(after.component("platform").is_null(), "{}", after.json);
}

#[test]
fn placement_labels_move_the_config_component() {
    let ws = ws();
    let before = app(&ws);
    edit(&ws, "prova.toml", "retries = 0\n", "retries = 0\nlabels = { pool = \"gpu\" }\n");
    let after = app(&ws);
    // lib's labels moved its key, which app folds.
    assert_moved(&before, &after, &["config", "upstream"]);
    assert!(after.component("config").to_string().contains("pool=gpu"), "{}", after.json);
    edit(&ws, "prova.toml", "pool = \"gpu\"", "pool = \"cpu\"");
    assert_moved(&after, &app(&ws), &["config", "upstream"]);
}

#[test]
fn unrelated_files_do_not_move_the_key() {
    let ws = ws();
    let before = app(&ws);
    ws.write("app/README.md", "edited, still not an input\n");
    ws.write("unrelated.txt", "edited\n");
    ws.write("other/src/o.txt", "another project's input\n");
    assert_same(&before, &app(&ws));
}

#[test]
fn a_new_name_in_the_project_directory_moves_only_the_config() {
    // The key folds the names in the project directory (what a listing there sees), not
    // the bytes of files outside the inputs: a new directory there moves `config` alone.
    let ws = ws();
    let before = app(&ws);
    ws.write("app/notes/n.txt", "a new file outside src/\n");
    let after = app(&ws);
    assert_moved(&before, &after, &["config"]);
    assert!(after.component("config").to_string().contains("notes"), "{}", after.json);
    // A file added inside it is not a new name.
    ws.write("app/notes/m.txt", "another\n");
    assert_same(&after, &app(&ws));
}

#[test]
fn touching_an_input_does_not_move_the_key() {
    let ws = ws();
    let path = ws.path("app/src/a.txt");
    let before = app(&ws);
    let then = mtime(&path);
    set_mtime(&path, then + Duration::from_secs(3600));
    assert_ne!(mtime(&path), then);
    assert_same(&before, &app(&ws));
}

#[test]
fn a_pass_env_value_does_not_move_the_key() {
    let ws = ws();
    let before = app(&ws);
    assert_same(&before, &Shown::of(show_cmd(&ws, "app#build").env("PASSED", "two")));
    assert_same(&before, &Shown::of(show_cmd(&ws, "app#build").env_remove("PASSED")));
}

#[test]
fn the_order_of_env_declarations_does_not_move_the_key() {
    let ws = ws();
    let before = app(&ws);
    edit(&ws, "prova.toml", r#"env = ["MODE", "FLAVOR"]"#, r#"env = ["FLAVOR", "MODE"]"#);
    assert_same(&before, &app(&ws));
}

#[test]
fn retries_do_not_move_the_key() {
    let ws = ws();
    let before = app(&ws);
    edit(&ws, "prova.toml", "retries = 0", "retries = 3");
    assert_same(&before, &app(&ws));
}

#[test]
fn an_edited_input_makes_the_next_run_execute() {
    let ws = ws();
    let run = || ws.prova(["run", "build", "-p", "app", "--json"]).env("MODE", "m").run();
    let first = run();
    first.assert_code(0);
    assert_eq!(first.cache_of("app#build"), "saved", "{first}");
    let warm = run();
    assert_eq!(warm.cache_of("app#build"), "hit", "{warm}");
    ws.write("app/src/a.txt", "beta\n");
    let edited = run();
    edited.assert_code(0);
    assert_eq!(edited.cache_of("lib#build"), "hit", "{edited}");
    assert_eq!(edited.cache_of("app#build"), "saved", "{edited}");
    assert_ne!(edited.report("app#build")["key"], first.report("app#build")["key"]);
    assert_eq!(ws.read("app/dist/out.txt"), "beta\n");
}
