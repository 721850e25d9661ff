//! Run-level retries and timeouts (issue 19): `[workspace] retry` / `timeout` apply to every
//! task that sets none, `--retry` / `--timeout` override the workspace, and a task's own
//! `retries` / `timeout` win over both. None of them is keyed.

use prova_tests::TempWorkspace;

/// A task that fails until its third attempt (the counter outlives attempts), and a task
/// that sets `retries = 0` itself; `workspace` lines go into `[workspace]`.
fn flaky(workspace: &str) -> TempWorkspace {
    let count = "n=$(cat ../count-$T 2>/dev/null || echo 0); n=$((n + 1)); echo $n > ../count-$T; [ $n -ge 3 ]";
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"app\"]\n{workspace}\n\
                 [tasks.flaky]\ncommand = \"T=flaky; {count}\"\ncache = false\n\
                 [tasks.own]\ncommand = \"T=own; {count}\"\ncache = false\nretries = 0\n"
            ),
        )
        .dir("app")
}

fn attempts(out: &prova_tests::Output, task: &str) -> u64 {
    out.report(task)["attempts"].as_u64().unwrap_or(0)
}

#[test]
fn a_workspace_retry_default_applies_where_a_task_sets_none() {
    let ws = flaky("retry = 2");
    let out = ws.prova(["run", "flaky", "own", "--all", "--json", "--continue"]).run();
    assert_eq!(out.status_of("app#flaky"), "succeeded", "{out}");
    assert_eq!(attempts(&out, "app#flaky"), 3, "{out}");
    assert_eq!(out.status_of("app#own"), "failed", "a task's own retries = 0 wins\n{out}");
    assert_eq!(attempts(&out, "app#own"), 1, "{out}");
}

#[test]
fn retry_on_the_command_line_overrides_the_workspace() {
    let ws = flaky("retry = 5");
    let out = ws.prova(["run", "flaky", "--all", "--json", "--retry", "1"]).run();
    out.assert_code(1);
    assert_eq!(attempts(&out, "app#flaky"), 2, "--retry 1: two attempts\n{out}");
    let ws = flaky("");
    let out =
        ws.prova(["run", "flaky", "own", "--all", "--json", "--retry", "2", "--continue"]).run();
    assert_eq!(out.status_of("app#flaky"), "succeeded", "{out}");
    assert_eq!(attempts(&out, "app#own"), 1, "the task's own value wins over --retry\n{out}");
}

fn sleepy(workspace: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"app\"]\n{workspace}\n\
                 [tasks.hang]\ncommand = \"sleep 120\"\ncache = false\n\
                 [tasks.patient]\ncommand = \"sleep 2\"\ncache = false\ntimeout = \"10m\"\n"
            ),
        )
        .dir("app")
}

#[test]
fn a_workspace_timeout_default_applies_where_a_task_sets_none() {
    let ws = sleepy("timeout = \"1s\"");
    let out = ws.prova(["run", "hang", "patient", "--all", "--json", "--continue"]).run();
    assert_eq!(out.report("app#hang")["exit"], serde_json::json!({ "timed_out": true }), "{out}");
    assert_eq!(out.status_of("app#patient"), "succeeded", "its own timeout wins\n{out}");
}

#[test]
fn timeout_on_the_command_line_overrides_the_workspace() {
    let ws = sleepy("timeout = \"1h\"");
    let out = ws
        .prova(["run", "hang", "patient", "--all", "--json", "--continue", "--timeout", "1s"])
        .run();
    assert_eq!(out.report("app#hang")["exit"], serde_json::json!({ "timed_out": true }), "{out}");
    assert_eq!(out.status_of("app#patient"), "succeeded", "{out}");
    let out = ws.prova(["run", "hang", "--all", "--timeout", "0s"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("longer than zero");
}
