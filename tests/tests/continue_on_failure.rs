//! `--continue`: after a failure, independent work goes on only when asked; what depends on
//! the failure is skipped either way.

use prova_tests::TempWorkspace;

/// Two independent chains in two projects. `bad`: `fail` → `after` → `last` (the failure
/// and its dependents). `good`: `one` → `two`, independent of `bad`. With `-j 1` and
/// critical-path-first scheduling the longer `bad` chain starts first, so the failure is
/// known before `good#two` could start.
const CONFIG: &str = r#"[workspace]
projects = ["bad", "good"]
"#;

const BAD: &str = r#"[tasks.fail]
command = "echo ran > ../bad-fail.ran; exit 1"
[tasks.after]
command = "echo ran > ../bad-after.ran"
deps = ["fail"]
[tasks.last]
command = "echo ran > ../bad-last.ran"
deps = ["after"]
[tasks.all]
deps = ["last"]
"#;

const GOOD: &str = r#"[tasks.one]
command = "echo ran > ../good-one.ran"
[tasks.two]
command = "echo ran > ../good-two.ran"
deps = ["one"]
[tasks.all]
deps = ["two"]
"#;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", CONFIG)
        .file("bad/prova.toml", BAD)
        .file("good/prova.toml", GOOD)
}

#[test]
fn without_continue_independent_work_stops() {
    let ws = ws();
    let out = ws.prova(["run", "all", "--all", "-j", "1", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("bad#fail"), "failed");
    // Dependents of the failure: skipped, naming it.
    for t in ["bad#after", "bad#last", "bad#all"] {
        assert_eq!(out.status_of(t), "skipped", "{t}\n{out}");
        assert_eq!(out.report(t)["note"], "bad#fail failed", "{t}\n{out}");
        assert_eq!(out.report(t)["attempts"], 0);
    }
    // The independent later task did not run.
    assert_eq!(out.status_of("good#two"), "skipped", "{out}");
    let note = out.report("good#two")["note"].as_str().unwrap().to_owned();
    assert!(note.contains("--continue"), "the note says how to keep going: {note}");
    assert!(!ws.exists("good-two.ran"));
    assert!(!ws.exists("bad-after.ran") && !ws.exists("bad-last.ran"));
    assert_eq!(out.summary()["ok"], false);
}

#[test]
fn with_continue_independent_work_runs() {
    let ws = ws();
    let out = ws.prova(["run", "all", "--all", "-j", "1", "--continue", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("bad#fail"), "failed");
    for t in ["bad#after", "bad#last", "bad#all"] {
        assert_eq!(out.status_of(t), "skipped", "{t}\n{out}");
    }
    for t in ["good#one", "good#two", "good#all"] {
        assert_eq!(out.status_of(t), "succeeded", "{t}\n{out}");
    }
    assert!(ws.exists("good-one.ran") && ws.exists("good-two.ran"));
    assert!(!ws.exists("bad-after.ran") && !ws.exists("bad-last.ran"));
    assert_eq!(out.summary()["ok"], false);
}

#[test]
fn with_continue_in_parallel_dependents_are_still_skipped() {
    // Any concurrency: `--continue` never runs what depends on a failure.
    let ws = ws();
    let out = ws.prova(["run", "all", "--all", "-j", "4", "--continue"]).run();
    out.assert_code(1);
    assert_eq!(
        out.tasks_line(),
        "Tasks:   3 succeeded, 1 failed, 3 skipped, 0 aborted (7 total, 3 ran)"
    );
    out.assert_stdout_contains(" Failed:  bad#fail (exit code 1)");
    assert!(ws.exists("good-two.ran"));
    assert!(!ws.exists("bad-after.ran"));
}
