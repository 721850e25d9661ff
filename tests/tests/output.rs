//! How task output is shown: prefixed lines, grouped blocks, JSON events.

use std::io::Write as _;

use prova_tests::TempWorkspace;

/// Two tasks whose lines interleave in time: they meet on two FIFOs, so `a` prints `a1`, then
/// `b` prints `b1`, then `a` prints the rest while `b` does too. No sleeping: opening a FIFO
/// blocks until the other side opens it. Each also writes one line to stderr; its order relative
/// to stdout is not asserted (two pipes have no common order).
fn ws() -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["a", "b"]

[tasks.talk]
command = "sh ./talk.sh"
"#,
        )
        .file(
            "a/talk.sh",
            "echo a1\necho go > ../a-to-b\nread x < ../b-to-a\necho a2\necho a3\necho a-err >&2\n",
        )
        .file(
            "b/talk.sh",
            "read x < ../a-to-b\necho b1\necho go > ../b-to-a\necho b2\necho b3\necho b-err >&2\n",
        );
    ws.fifo("a-to-b");
    ws.fifo("b-to-a");
    ws
}

#[test]
fn grouped_output_keeps_each_tasks_lines_together() {
    let out = ws().prova(["run", "talk", "--all", "-j", "2", "--output", "grouped"]).run();
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    for task in ["a", "b"] {
        let header = format!("── {task}#talk");
        let at =
            lines.iter().position(|l| *l == header).unwrap_or_else(|| panic!("no {header}\n{out}"));
        // The next four lines are the task's own: its stdout in order, and its stderr line.
        let block = &lines[at + 1..at + 5];
        let stdout: Vec<&str> = block.iter().copied().filter(|l| !l.ends_with("-err")).collect();
        assert_eq!(stdout, [1, 2, 3].map(|i| format!("{task}{i}")), "{task}'s block\n{out}");
        assert!(block.contains(&format!("{task}-err").as_str()), "{task}'s block\n{out}");
    }
    // Nothing of a task leaks outside its block: no prefixed lines.
    assert!(!out.stdout.contains(" | a") && !out.stdout.contains(" | b"), "{out}");
}

#[test]
fn prefixed_output_names_the_task_on_every_line() {
    let out = ws().prova(["run", "talk", "--all", "-j", "2"]).run();
    out.assert_code(0);
    for task in ["a", "b"] {
        let mut lines = out.task_lines(&format!("{task}#talk"));
        let err = lines.iter().position(|l| *l == format!("{task}-err"));
        lines.remove(err.unwrap_or_else(|| panic!("{task}'s stderr line is missing\n{out}")));
        assert_eq!(lines, [1, 2, 3].map(|i| format!("{task}{i}")), "{out}");
    }
}

#[test]
fn prefixed_output_streams_lines_while_the_task_runs() {
    // The task prints `first`, then blocks on a FIFO the test writes to only once it has read
    // `first` from prova's stdout: were output held back until the task ends, neither would
    // ever happen (and the run's deadline fails the test).
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"a\"]\n[tasks.gate]\ncommand = \"echo first; read x < ../gate; echo got $x\"\n",
        )
        .dir("a");
    ws.fifo("gate");
    let mut running = ws.prova(["run", "gate", "--all"]).spawn();
    running.wait_for_lines("the task's first line", 1, |l| l == "a#gate | first");
    // Read-write: the open never blocks, and the data stays until the task reads it.
    let mut gate =
        std::fs::OpenOptions::new().read(true).write(true).open(ws.path("gate")).unwrap();
    gate.write_all(b"go\n").unwrap();
    let out = running.wait();
    drop(gate);
    out.assert_code(0);
    assert_eq!(out.task_lines("a#gate"), ["first", "got go"], "{out}");
}

#[test]
fn json_output_is_one_event_per_line_then_the_summary() {
    let out = ws().prova(["run", "talk", "--all", "-j", "2", "--json"]).run();
    out.assert_code(0);
    let events = out.events();
    for e in &events {
        let kind = e["event"].as_str().unwrap_or_else(|| panic!("no event kind: {e}"));
        assert!(
            ["task_started", "output", "task_finished", "task_ready", "notice"].contains(&kind),
            "{e}"
        );
    }
    let text: String = events
        .iter()
        .filter(|e| e["event"] == "output" && e["task"] == "a#talk")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(text.replace("a-err\n", ""), "a1\na2\na3\n", "{out}");
    assert!(text.contains("a-err\n"), "{out}");
    let summary = out.summary();
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["tasks"].as_array().unwrap().len(), 2);
}

/// `prova … | head`: once the reader is gone, prova finishes its work and exits as it would
/// have, quietly — a closed pipe is not an error worth a message or a different exit code.
#[test]
fn a_closed_stdout_is_not_an_error() {
    let ws = ws();
    for args in [
        &["run", "talk", "--all", "-j", "2"][..],
        &["run", "talk", "--all", "-j", "2", "--json"],
        &["run", "talk", "--all", "--dry-run"],
        &["run", "talk", "--all", "--dry-run", "--json"],
        &["graph", "talk", "--all"],
        &["graph", "talk", "--all", "--json"],
    ] {
        let out = ws.prova(args.iter().copied()).stdout_closed().run();
        out.assert_code(0);
        assert!(out.stderr.is_empty(), "{args:?}: no error message\n{out}");
    }
}
