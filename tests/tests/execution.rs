//! How one task is executed: its environment, forwarded arguments, retries and timeout.

use prova_tests::{GONE_TIMEOUT, TempWorkspace, wait_all_gone};

/// Prints how the shell sees a variable: its value, or `<unset>` (distinct from empty).
fn show(var: &str) -> String {
    format!("echo \\\"{var}=${{{var}-<unset>}}\\\"")
}

#[test]
fn only_declared_and_passed_variables_reach_a_task() {
    let command =
        ["UNDECLARED", "DECLARED", "PASSED", "DECLARED_BUT_UNSET", "PATH"].map(show).join("; ");
    let config = format!(
        "[workspace]\nprojects = [\"app\"]\n\n[tasks.env]\ncommand = \"{{ {command}; }} > ../env.out\"\nenv = [\"DECLARED\", \"DECLARED_BUT_UNSET\"]\npass_env = [\"PASSED\"]\n"
    );
    let ws = TempWorkspace::new().file("prova.toml", &config).dir("app");
    ws.prova(["run", "env", "--all"])
        .env("UNDECLARED", "leaked")
        .env("DECLARED", "declared value")
        .env("PASSED", "passed value")
        .env_remove("DECLARED_BUT_UNSET")
        .run()
        .assert_code(0);
    let seen = ws.read("env.out");
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[0], "UNDECLARED=<unset>", "{seen}");
    assert_eq!(lines[1], "DECLARED=declared value", "{seen}");
    assert_eq!(lines[2], "PASSED=passed value", "{seen}");
    assert_eq!(lines[3], "DECLARED_BUT_UNSET=<unset>", "unset stays unset, not empty: {seen}");
    assert!(lines[4].starts_with("PATH=/"), "the baseline keeps PATH: {seen}");
}

#[test]
fn forwarded_args_reach_only_the_requested_task() {
    // app#lint depends on app#prep (same project) and lib#lint (`^lint`: the same task name
    // in a dependency). Only the requested app#lint gets the arguments after `--`.
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app", "lib"]

[tasks.lint]
command = "printf '%s\n' \"n=$#\" \"$@\" > lint.args"
deps = ["^lint", "prep"]

[tasks.prep]
command = "printf '%s\n' \"n=$#\" \"$@\" > prep.args"
"#,
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .dir("lib");
    ws.prova(["run", "lint", "-p", "app", "--", "--fix", "two words"]).run().assert_code(0);
    assert_eq!(ws.read("app/lint.args"), "n=2\n--fix\ntwo words\n", "each argument whole");
    assert_eq!(ws.read("app/prep.args"), "n=0\n", "a same-project dependency gets none");
    assert_eq!(ws.read("lib/lint.args"), "n=0\n", "the same task of a dependency gets none");
    assert_eq!(ws.read("lib/prep.args"), "n=0\n");
}

#[test]
fn forwarded_args_are_appended_to_a_string_command() {
    // `command = "eslint ."` with `-- --fix` runs `eslint . --fix` (npm and turbo semantics):
    // the README's example. Arguments stay whole words and are never run as shell code.
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n\n[tasks.lint]\ncommand = \"./lint.sh .\"\n",
        )
        .file("app/lint.sh", "#!/bin/sh\nprintf '%s\\n' \"n=$#\" \"$@\" > lint.args\n")
        .dir("app");
    std::fs::set_permissions(
        ws.path("app/lint.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    ws.prova(["run", "lint", "--", "--fix", "two words", "$(touch pwned)"]).run().assert_code(0);
    assert_eq!(ws.read("app/lint.args"), "n=4\n.\n--fix\ntwo words\n$(touch pwned)\n");
    assert!(!ws.path("app/pwned").exists(), "an argument ran as shell code");
    // Without arguments the command is as written.
    ws.prova(["run", "lint"]).run().assert_code(0);
    assert_eq!(ws.read("app/lint.args"), "n=1\n.\n");
}

fn flaky(retries: u32) -> TempWorkspace {
    // Fails on its first attempt, succeeds on the second: the counter file outlives attempts.
    let config = format!(
        r#"[workspace]
projects = ["app"]

[tasks.flaky]
command = "n=$(cat ../count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > ../count; echo attempt $n; [ $n -ge 2 ]"
retries = {retries}
"#
    );
    TempWorkspace::new().file("prova.toml", &config).dir("app")
}

#[test]
fn a_retry_turns_a_flaky_failure_into_success() {
    let ws = flaky(1);
    let out = ws.prova(["run", "flaky", "--all", "--json"]).run();
    out.assert_code(0);
    let report = out.report("app#flaky");
    assert_eq!(report["status"], "succeeded", "{out}");
    assert_eq!(report["attempts"], 2, "{out}");
    assert_eq!(ws.read("count").trim(), "2");
    // Both attempts were announced.
    let started: Vec<u64> = out
        .events()
        .iter()
        .filter(|e| e["event"] == "task_started" && e["task"] == "app#flaky")
        .map(|e| e["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(started, [1, 2], "{out}");

    // The text form says it retried.
    let ws = flaky(1);
    let out = ws.prova(["run", "flaky", "--all"]).run();
    out.assert_code(0);
    let lines = out.task_lines("app#flaky");
    assert_eq!(lines, ["attempt 1", "retrying (attempt 2)", "attempt 2"], "{out}");
}

#[test]
fn without_retries_the_first_failure_is_final() {
    let ws = flaky(0);
    let out = ws.prova(["run", "flaky", "--all", "--json"]).run();
    out.assert_code(1);
    let report = out.report("app#flaky");
    assert_eq!(report["status"], "failed", "{out}");
    assert_eq!(report["attempts"], 1, "{out}");
    assert_eq!(ws.read("count").trim(), "1");
}

#[test]
fn a_timeout_kills_the_task_and_what_it_started() {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app"]

[tasks.hang]
command = "sleep 300 & echo $! > ../grandchild.pid; echo $$ > ../task.pid; sleep 300"
timeout = "1s"
"#,
        )
        .dir("app");
    let out = ws.prova(["run", "hang", "--all", "--json"]).run();
    out.assert_code(1);
    let report = out.report("app#hang");
    assert_eq!(report["status"], "failed", "{out}");
    assert_eq!(report["exit"], serde_json::json!({"timed_out": true}), "{out}");
    assert_eq!(report["note"], "timed out", "{out}");
    assert_eq!(report["attempts"], 1, "a timeout is not retried without retries\n{out}");

    let pids: Vec<i32> =
        ["grandchild.pid", "task.pid"].map(|f| ws.read(f).trim().parse().unwrap()).to_vec();
    if let Err(left) = wait_all_gone(&pids, GONE_TIMEOUT) {
        panic!("still running after the timeout: {left:?}\n{out}");
    }
    // The task's process group (led by the task's shell) is empty too.
    if let Err(left) = prova_tests::wait_group_empty(pids[1], GONE_TIMEOUT) {
        panic!("members of the task's process group survived: {left:?}\n{out}");
    }

    // And in text form the failure says why.
    let out = ws.prova(["run", "hang", "--all"]).run();
    out.assert_code(1);
    out.assert_stdout_contains("app#hang | failed: timed out");
    out.assert_stdout_contains(" Failed:  app#hang (timed out)");
}
