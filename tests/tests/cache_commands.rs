//! `prova why`, `prova show` and `prova cache stats | prune | clean` on a real cache.

use prova_protocol::Digest;
use prova_tests::cache::{Shown, cache_stats, chmod, entry_count};
use prova_tests::{Output, TempWorkspace};
use serde_json::Value;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["lib", "app"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
env = ["MODE"]
"#,
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "alpha\n")
        .file("app/src/b.txt", "beta\n")
        .file("lib/src/l.txt", "lib\n")
}

fn run(ws: &TempWorkspace) -> Output {
    let out = ws.prova(["run", "build", "--all", "--json"]).env("MODE", "one").run();
    out.assert_code(0);
    out
}

/// `prova why app#build` in text and JSON (with `MODE`).
fn why(ws: &TempWorkspace, mode: &str) -> (String, Value) {
    let text = ws.prova(["why", "app#build"]).env("MODE", mode).run();
    text.assert_code(0);
    let json = ws.prova(["why", "app#build", "--json"]).env("MODE", mode).run();
    json.assert_code(0);
    (text.stdout.clone(), serde_json::from_str(&json.stdout).expect("`why --json` prints JSON"))
}

#[test]
fn why_names_what_moved_and_says_when_the_next_run_is_a_hit() {
    let ws = ws();
    // app folds lib's outputs: before lib has an entry, app's key waits on it.
    let (text, _) = why(&ws, "one");
    assert_eq!(
        text,
        "app#build: pending: its key folds the outputs of an upstream that is not in the cache (it runs first)\n  - waits on `lib#build`\n"
    );
    ws.prova(["run", "build", "-p", "lib"]).env("MODE", "one").run().assert_code(0);
    let (text, _) = why(&ws, "one");
    assert_eq!(text, "app#build: no cache entry yet: the next run executes it\n");

    run(&ws);
    let (text, json) = why(&ws, "one");
    assert_eq!(text, "app#build: unchanged since its newest entry: the next run is a hit\n");
    assert_eq!(json["changes"], serde_json::json!([]));
    assert_eq!(json["key"], json["entry_key"]);

    ws.write("app/src/a.txt", "alpha, edited\n");
    let (text, json) = why(&ws, "one");
    assert_eq!(
        text,
        "app#build: changed since its newest entry\n  - input `app/src/a.txt` changed\n"
    );
    assert_eq!(json["changes"], serde_json::json!(["input `app/src/a.txt` changed"]));
    assert_ne!(json["key"], json["entry_key"]);

    // Several things at once: each is named.
    ws.write("app/src/c.txt", "new\n");
    ws.write("lib/src/l.txt", "lib, edited\n");
    let (text, _) = why(&ws, "other");
    assert!(text.contains("pending") && text.contains("waits on `lib#build`"), "{text}");
    // Once lib has run, the files of its outputs that moved are named, and — since in place
    // app can read more of lib than its outputs (its sources), so app's key folds lib's
    // key — what moved in lib's key too.
    ws.prova(["run", "build", "-p", "lib"]).env("MODE", "other").run().assert_code(0);
    let (_, json) = why(&ws, "other");
    let changes: Vec<&str> =
        json["changes"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    for want in [
        "env `MODE` changed",
        "input `app/src/a.txt` changed",
        "input `app/src/c.txt` was added",
        // lib's MODE is named above: the line names what else moved in lib's key.
        "upstream `lib#build` key changed: input `lib/src/l.txt` changed",
        "upstream `lib#build` outputs changed: `lib/dist/out.txt`",
    ] {
        assert!(changes.contains(&want), "{want:?} missing from {changes:?}");
    }
    assert_eq!(changes.len(), 5, "{changes:?}");

    // After a run of the edited workspace, it is a hit again.
    ws.prova(["run", "build", "--all"]).env("MODE", "other").run().assert_code(0);
    let (text, _) = why(&ws, "other");
    assert!(text.ends_with("the next run is a hit\n"), "{text}");
}

#[test]
fn why_and_show_answer_for_the_current_key_after_a_revert() {
    // A → B → A: the task's newest entry is B's, but the current key (A's) has an entry, and
    // the run hits it. `why` and `show` must say so, not diff against B.
    let ws = ws();
    run(&ws);
    let a_key = show_json(&ws).key().to_owned();
    ws.write("app/src/a.txt", "alpha, edited\n");
    run(&ws);
    ws.write("app/src/a.txt", "alpha\n");

    let (text, json) = why(&ws, "one");
    assert!(text.ends_with("the next run is a hit\n"), "{text}");
    assert!(!text.contains("changed"), "{text}");
    assert_eq!(json["changes"], serde_json::json!([]));
    assert_eq!(json["key"], json["entry_key"], "the entry named is the current key's");
    let shown = show_json(&ws);
    assert_eq!(shown.key(), a_key);
    assert!(shown.cached(), "show says (not in the cache) for a key that hits");
    let text = ws.prova(["show", "app#build"]).env("MODE", "one").run();
    assert!(text.stdout.contains("(in the cache)"), "{}", text.stdout);

    // And the run agrees: a hit.
    let out = ws.prova(["run", "build", "--all", "--json"]).env("MODE", "one").run();
    out.assert_code(0);
    assert!(out.stdout.contains("\"hit\""), "{}", out.stdout);
}

fn show_json(ws: &TempWorkspace) -> Shown {
    Shown::of(ws.prova(["show", "app#build", "--json"]).env("MODE", "one"))
}

#[test]
fn show_lists_the_key_components_and_inputs_with_digests() {
    let ws = ws();
    chmod(&ws, "app/src/b.txt", 0o755);
    // Before any cache exists the key of an env-declaring task cannot be the run's: declared
    // env values fold keyed by the cache's salt, which the first run makes. Show says so.
    let unsalted = ws.prova(["show", "lib#build"]).env("MODE", "one").run();
    unsalted.assert_code(0);
    assert!(unsalted.stdout.contains("(no cache yet: "), "{unsalted}");
    // app folds lib's outputs, which nothing has produced yet.
    let pending = ws.prova(["show", "app#build"]).env("MODE", "one").run();
    pending.assert_code(0);
    assert!(pending.stdout.contains("key       (pending)"), "{pending}");
    assert!(
        pending.stdout.contains("upstream  lib#build outputs (pending: not in the cache)"),
        "{pending}"
    );
    assert!(!ws.path(".prova").exists(), "show made a cache");
    let lib = ws.prova(["run", "build", "-p", "lib"]).env("MODE", "one").run();
    lib.assert_code(0);
    let before = ws.prova(["show", "app#build"]).env("MODE", "one").run();
    before.assert_code(0);
    let shown = show_json(&ws);
    let key = shown.key().to_owned();
    assert!(!shown.cached());
    let text = &before.stdout;
    assert!(text.starts_with("task      app#build\n"), "{text}");
    assert!(text.contains(&format!("key       {key}  (not in the cache)\n")), "{text}");
    assert!(text.contains("inputs    2 files\n"), "{text}");
    assert!(text.contains("upstream  lib#build outputs "), "{text}");
    assert!(text.contains("env       MODE sha:"), "an env value is shown as a digest: {text}");
    for (path, mark) in [("app/src/a.txt", " "), ("app/src/b.txt", "x")] {
        let digest = Digest::of(ws.read(path).as_bytes());
        let line = format!("  {} {mark} {path}\n", digest.short());
        assert!(text.contains(&line), "no {line:?} in\n{text}");
        assert_eq!(shown.input(path).unwrap()["digest"], digest.to_hex());
    }

    run(&ws);
    let after = ws.prova(["show", "app#build"]).env("MODE", "one").run();
    after.assert_code(0);
    assert!(after.stdout.contains(&format!("key       {key}  (in the cache)\n")), "{after}");
    assert!(show_json(&ws).cached());
}

#[test]
fn cache_stats_prune_and_clean() {
    let ws = ws();
    run(&ws);
    let stats = cache_stats(&ws, &[]);
    assert_eq!(entry_count(&ws, &[]), 2, "{stats}");
    assert!(stats["blob_files"].as_u64().unwrap() >= 2, "{stats}");
    let text = ws.prova(["cache", "stats"]).run();
    text.assert_code(0);
    text.assert_stdout_contains("entries     2\n");

    // A generous bound prunes nothing.
    let out = ws.prova(["cache", "prune", "--max-size", "1G"]).run();
    out.assert_code(0);
    out.assert_stdout_contains("pruned 0 entries");
    assert_eq!(run(&ws).cache_of("app#build"), "hit");

    // Size 0: every entry and its blobs go; the next run misses.
    let out = ws.prova(["cache", "prune", "--max-size", "0"]).run();
    out.assert_code(0);
    out.assert_stdout_contains("pruned 2 entries");
    let stats = cache_stats(&ws, &[]);
    assert_eq!(entry_count(&ws, &[]), 0, "{stats}");
    assert_eq!(stats["blob_files"], 0, "{stats}");
    let after_prune = run(&ws);
    for t in ["lib#build", "app#build"] {
        assert_eq!(after_prune.cache_of(t), "saved", "{after_prune}");
    }
    assert_eq!(entry_count(&ws, &[]), 2);

    // Clean: entries, blobs and the memo all go; the next run misses.
    let out = ws.prova(["cache", "clean"]).run();
    out.assert_code(0);
    out.assert_stdout_contains("cleaned ");
    let stats = cache_stats(&ws, &[]);
    assert_eq!(entry_count(&ws, &[]), 0, "{stats}");
    assert_eq!(stats["blob_files"], 0, "{stats}");
    assert_eq!(stats["memo_rows"], 0, "{stats}");
    let after_clean = run(&ws);
    assert_eq!(after_clean.cache_of("app#build"), "saved", "{after_clean}");
    assert!(after_clean.key_stats()["hashed"].as_u64().unwrap() > 0, "the memo was cleaned");
}
