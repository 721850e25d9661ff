//! Exit codes (0 ok, 1 a task failed, 2 usage/config) and the messages that go with them.

use prova_tests::TempWorkspace;

const ROOT: &str = r#"[workspace]
projects = ["app"]

[tasks.build]
command = "echo building"

[tasks.broken]
command = "echo about to fail; echo 'the reason' >&2; exit 3"
"#;

fn ws() -> TempWorkspace {
    TempWorkspace::new().file("prova.toml", ROOT).dir("app")
}

#[test]
fn success_is_zero() {
    ws().prova(["run", "build", "--all"]).run().assert_code(0).assert_stdout_contains("building");
}

#[test]
fn failing_task_is_one_and_named_in_the_summary() {
    let out = ws().prova(["run", "broken", "--all"]).run();
    out.assert_code(1);
    // Its output (stdout and stderr) is shown, with the failure.
    let lines = out.task_lines("app#broken");
    assert!(lines.contains(&"about to fail".to_owned()), "{out}");
    assert!(lines.contains(&"the reason".to_owned()), "{out}");
    assert!(lines.contains(&"failed: exit code 3".to_owned()), "{out}");
    assert_eq!(
        out.tasks_line(),
        "Tasks:   0 succeeded, 1 failed, 0 skipped, 0 aborted (1 total, 1 ran)"
    );
    out.assert_stdout_contains(" Failed:  app#broken (exit code 3)");
}

#[test]
fn failing_task_json_summary_is_not_ok() {
    let out = ws().prova(["run", "broken", "--all", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.summary()["ok"], false);
    let report = out.report("app#broken");
    assert_eq!(report["status"], "failed");
    assert_eq!(report["exit"]["code"], 3);
    assert_eq!(report["note"], "exit code 3");
}

#[test]
fn unknown_key_in_the_root_config_is_two_with_its_location() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"app\"]\n\n[tasks.build]\ncommand = \"true\"\n  comand = \"x\"\n")
        .dir("app");
    let out = ws.prova(["run", "build", "--all"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("prova.toml:6:3: unknown key `comand` in [tasks.build]");
    out.assert_stderr_contains("did you mean `command`?");
    assert!(out.stdout.is_empty(), "nothing ran, nothing is summarised\n{out}");
}

#[test]
fn unknown_key_in_a_project_config_names_that_file() {
    let ws = TempWorkspace::new().file("prova.toml", ROOT).file(
        "app/prova.toml",
        "[project]\nname = \"app\"\n\n[tasks.build]\ndeps = []\ntimout = \"1s\"\n",
    );
    let out = ws.prova(["run", "build", "--all"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("app/prova.toml:6:1: unknown key `timout`");
    out.assert_stderr_contains("did you mean `timeout`?");
}

#[test]
fn unknown_task_is_two_with_did_you_mean() {
    let out = ws().prova(["run", "biuld", "--all"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("no project has a task `biuld`");
    out.assert_stderr_contains("did you mean `build`?");
}

#[test]
fn bad_usage_is_two() {
    // No task named: clap's usage error.
    ws().prova(["run"]).run().assert_code(2);
    ws().prova(["run", "build", "--no-such-flag"]).run().assert_code(2);
}

#[test]
fn missing_workspace_is_two() {
    let out = TempWorkspace::new().dir("empty").prova(["run", "build"]).cwd("empty").run();
    out.assert_code(2);
    assert!(!out.stderr.is_empty(), "says why\n{out}");
}
