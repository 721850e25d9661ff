//! Helpers for the proof suites (`tests/tests/verify_*.rs`): small workspaces of one project
//! whose tasks are or are not pure functions of their declared inputs, a `prova` command with
//! a pinned environment, and readers for verdicts (`--json` summary and events, the text
//! summary's `Verify:` line) and for the fingerprint ledger (`prova hermeticity --json`).
//!
//! # The sandbox
//! `--verify=inputs` needs bubblewrap (and strace to name paths); both are installed here and
//! in CI. A suite that needs them calls [`sandbox_or_skip`] first: it **fails** the test when
//! they cannot run, unless `PROVA_ALLOW_NO_SANDBOX=1` is set, in which case the test returns
//! early with a note on stderr.

use serde_json::Value;

use crate::{Output, ProvaCmd, TempWorkspace};

/// The project every [`workspace`] holds its tasks in.
pub const PROJECT: &str = "p";

/// A workspace with one project, `p`, holding `p/src/a.txt` (`hello`) and the tasks in
/// `tasks_toml` (the text of `p/prova.toml`, e.g. built with [`task`]).
pub fn workspace(tasks_toml: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/src/a.txt", "hello\n")
        .file("p/prova.toml", tasks_toml)
}

/// `[tasks.<name>]` running `command` (under `sh -c`, in `p/`), reading `src/a.txt` and
/// writing `outputs` (none: a lint-like task). `command` must not contain `"` or `\`.
pub fn task(name: &str, command: &str, outputs: &[&str]) -> String {
    task_with(name, command, outputs, "")
}

/// [`task`] with extra TOML lines (`env = ["TZ"]`, `deps = [...]`, …) appended.
pub fn task_with(name: &str, command: &str, outputs: &[&str], extra: &str) -> String {
    assert!(!command.contains(['"', '\\']), "keep test commands free of quotes: {command}");
    let outputs: Vec<String> = outputs.iter().map(|o| format!("{o:?}")).collect();
    let mut s = format!(
        "[tasks.{name}]\ncommand = \"{command}\"\ninputs = [\"src/a.txt\"]\noutputs = [{}]\n",
        outputs.join(", ")
    );
    if !extra.is_empty() {
        s.push_str(extra);
        if !extra.ends_with('\n') {
            s.push('\n');
        }
    }
    s
}

/// `p#tolerant`: reads `src/secret.txt` if it is there (it is not declared), and succeeds
/// either way.
pub fn tolerant() -> String {
    task(
        "tolerant",
        "mkdir -p out && (cat src/secret.txt 2>/dev/null || true) && cat src/a.txt > out/tolerant.txt",
        &["out/tolerant.txt"],
    )
}

/// `p#complete`: reads only what it declares.
pub fn complete() -> String {
    task("complete", "mkdir -p out && cat src/a.txt > out/complete.txt", &["out/complete.txt"])
}

/// `prova -C <ws> args…` with the variables a determinism re-run perturbs pinned to known
/// values (`USER=prova-e2e`, `TZ=UTC`, `LANG=C.UTF-8`), so a caught dependency never depends
/// on how the test runner was started. `LC_ALL` is removed (it would override `LANG`).
pub fn prova<I, S>(ws: &TempWorkspace, args: I) -> ProvaCmd
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    ws.prova(args)
        .env("USER", "prova-e2e")
        .env("LOGNAME", "prova-e2e")
        .env("TZ", "UTC")
        .env("LANG", "C.UTF-8")
        .env_remove("LC_ALL")
}

/// Whether the inputs proof can run here (bubblewrap can sandbox, strace can trace). When it
/// cannot, the test fails — unless `PROVA_ALLOW_NO_SANDBOX=1`, where this returns `false` and
/// the caller returns early.
#[track_caller]
pub fn sandbox_or_skip() -> bool {
    let sandbox = prova_worker::sandbox::detect();
    let strace = prova_worker::sandbox::strace_available(sandbox.is_available());
    if sandbox.is_available() && strace.is_some() {
        return true;
    }
    let why = format!("sandbox: {sandbox:?}; strace can trace: {strace:?}");
    let allowed = std::env::var("PROVA_ALLOW_NO_SANDBOX").is_ok_and(|v| v == "1");
    assert!(
        allowed,
        "--verify=inputs needs bubblewrap and strace, and they cannot run here ({why}); \
         install them, or set PROVA_ALLOW_NO_SANDBOX=1 to skip these tests"
    );
    eprintln!("skipped: PROVA_ALLOW_NO_SANDBOX=1 and {why}");
    false
}

/// The verdicts in the `--json` summary's report of `task`, in order.
#[track_caller]
pub fn verdicts(out: &Output, task: &str) -> Vec<Value> {
    out.report(task)["verdicts"]
        .as_array()
        .unwrap_or_else(|| panic!("{task}: no verdicts array\n{out}"))
        .clone()
}

/// The names of [`verdicts`] (`proven-deterministic`, …).
#[track_caller]
pub fn verdict_names(out: &Output, task: &str) -> Vec<String> {
    verdicts(out, task).iter().map(name).collect()
}

/// The one verdict of `task`; panics unless it has exactly one.
#[track_caller]
pub fn only_verdict(out: &Output, task: &str) -> Value {
    let v = verdicts(out, task);
    assert_eq!(v.len(), 1, "{task}: expected one verdict, got {v:?}\n{out}");
    v.into_iter().next().unwrap_or_default()
}

/// The verdicts of `task` as `verdict` events in the `--json` stream, in order.
#[track_caller]
pub fn verdict_events(out: &Output, task: &str) -> Vec<Value> {
    out.events()
        .into_iter()
        .filter(|e| e["event"] == "verdict" && e["task"] == task)
        .map(|e| e["verdict"].clone())
        .collect()
}

/// A verdict's name.
pub fn name(v: &Value) -> String {
    v["verdict"].as_str().unwrap_or("?").to_owned()
}

/// The `cache` word of `task` in the `--json` summary (`hit`, `saved`, `not_saved`,
/// `uncached`).
#[track_caller]
pub fn cache_word(out: &Output, task: &str) -> String {
    out.report(task)["cache"]["cache"].as_str().unwrap_or("?").to_owned()
}

/// The key of `task` in the `--json` summary.
#[track_caller]
pub fn key(out: &Output, task: &str) -> String {
    out.report(task)["key"]
        .as_str()
        .unwrap_or_else(|| panic!("{task} has no key\n{out}"))
        .to_owned()
}

/// The text summary's ` Verify:  …` line, trimmed; panics when there is none.
#[track_caller]
pub fn verify_line(out: &Output) -> &str {
    out.stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Verify:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no `Verify:` summary line\n{out}"))
}

/// Whether the text output has a ` Verify:` line at all.
pub fn has_verify_line(out: &Output) -> bool {
    out.stdout.lines().any(|l| l.trim_start().starts_with("Verify:"))
}

/// `prova hermeticity --json`: the run, and the parsed report.
#[track_caller]
pub fn hermeticity(ws: &TempWorkspace) -> (Output, Value) {
    let out = ws.prova(["hermeticity", "--json"]).run();
    let report = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("`prova hermeticity --json` is not JSON: {e}\n{out}"));
    (out, report)
}

/// A directory of stand-ins for `tools` (e.g. `bwrap`, `strace`) that print
/// `fake <tool>: refused` and exit 1, and a `PATH` that finds them first: how a host without
/// a working sandbox or tracer looks to prova. Keep the directory alive while prova runs.
pub fn path_with_failing(tools: &[&str]) -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix("prova-e2e-fakebin-")
        .tempdir()
        .expect("creating a temporary directory");
    for tool in tools {
        let path = dir.path().join(tool);
        let script = format!("#!/bin/sh\necho \"fake {tool}: refused\" >&2\nexit 1\n");
        std::fs::write(&path, script).unwrap_or_else(|e| panic!("writing {tool}: {e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {tool}: {e}"));
    }
    let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
    (dir, path)
}
