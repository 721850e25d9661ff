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

/// `a#build` (cacheable, prints `built-a`) and `b#fail` (prints `oops`, exits 1: never
/// cached, so it runs on every run).
fn logs_ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\", \"b\"]\n")
        .file(
            "a/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && echo built-a | tee dist/out\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("a/src/x", "x\n")
        .file("b/prova.toml", "[tasks.build]\ncommand = \"echo oops; exit 1\"\n")
}

/// `prova run build --all --continue --output-logs MODE` twice: `--force` (every task
/// executes: uncached), then plain (`a#build` hits).
fn both_runs(
    ws: &TempWorkspace,
    mode: &str,
    extra: &[&str],
) -> (prova_tests::Output, prova_tests::Output) {
    let base = ["run", "build", "--all", "--continue", "--output-logs", mode];
    let uncached = ws.prova(base.iter().chain(extra).chain(&["--force"]).copied()).run();
    uncached.assert_code(1);
    let cached = ws.prova(base.iter().chain(extra).copied()).run();
    cached.assert_code(1);
    (uncached, cached)
}

/// The 12 hex digits after `prefix` on `task`'s lines.
fn hash_after(out: &prova_tests::Output, task: &str, prefix: &str) -> String {
    let lines = out.task_lines(task);
    let line = lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line for {task}\n{out}"));
    assert!(line.len() == 12 && line.chars().all(|c| c.is_ascii_hexdigit()), "{line:?}\n{out}");
    line.to_owned()
}

#[test]
fn full_shows_executions_and_replays_with_a_marker_per_hit() {
    let ws = logs_ws();
    let (uncached, cached) = both_runs(&ws, "full", &[]);
    assert_eq!(uncached.task_lines("a#build"), ["built-a"], "{uncached}");
    assert_eq!(uncached.task_lines("b#build"), ["oops", "failed: exit code 1"], "{uncached}");
    assert_eq!(
        cached.task_lines("a#build"),
        ["cache hit (local), replaying logs", "built-a"],
        "{cached}"
    );
    assert_eq!(cached.task_lines("b#build"), ["oops", "failed: exit code 1"], "{cached}");
    // The default is `full`.
    let plain = ws.prova(["run", "build", "-p", "a"]).run();
    plain.assert_code(0);
    assert_eq!(plain.task_lines("a#build"), ["cache hit (local), replaying logs", "built-a"]);
}

#[test]
fn new_only_shows_executions_and_one_line_per_hit() {
    let ws = logs_ws();
    let (uncached, cached) = both_runs(&ws, "new-only", &[]);
    assert_eq!(uncached.task_lines("a#build"), ["built-a"], "{uncached}");
    assert_eq!(uncached.task_lines("b#build"), ["oops", "failed: exit code 1"], "{uncached}");
    assert_eq!(cached.task_lines("a#build"), ["cache hit (local), suppressing logs"], "{cached}");
    assert_eq!(cached.task_lines("b#build"), ["oops", "failed: exit code 1"], "{cached}");
    // Grouped, the same choice in blocks.
    let (_, grouped) = both_runs(&ws, "new-only", &["--output", "grouped"]);
    grouped.assert_stdout_contains("── a#build\ncache hit (local), suppressing logs\n");
    grouped.assert_stdout_contains("── b#build\noops\n");
    assert!(!grouped.stdout.contains("built-a"), "{grouped}");
}

#[test]
fn errors_only_shows_only_what_failed() {
    let ws = logs_ws();
    let (uncached, cached) = both_runs(&ws, "errors-only", &[]);
    for out in [&uncached, &cached] {
        assert_eq!(out.task_lines("a#build"), Vec::<String>::new(), "{out}");
        assert_eq!(out.task_lines("b#build"), ["oops", "failed: exit code 1"], "{out}");
        assert!(!out.stdout.contains("built-a") && !out.stdout.contains("cache hit"), "{out}");
        assert!(out.tasks_line().contains("1 failed"), "{out}");
    }
}

#[test]
fn hash_only_shows_each_tasks_key_and_no_output() {
    let ws = logs_ws();
    let (uncached, cached) = both_runs(&ws, "hash-only", &[]);
    let missed = hash_after(&uncached, "a#build", "cache miss, executed ");
    let hit = hash_after(&cached, "a#build", "cache hit (local), suppressing logs ");
    assert_eq!(missed, hit, "the hit is of the key the execution saved");
    for out in [&uncached, &cached] {
        assert!(!out.stdout.contains("built-a") && !out.stdout.contains("oops"), "{out}");
        assert_eq!(out.task_lines("a#build").len(), 1, "{out}");
    }
}

#[test]
fn none_shows_no_task_output_at_all() {
    let ws = logs_ws();
    let (uncached, cached) = both_runs(&ws, "none", &[]);
    for out in [&uncached, &cached] {
        assert!(
            out.task_lines("a#build").is_empty() && out.task_lines("b#build").is_empty(),
            "{out}"
        );
        assert!(out.tasks_line().contains("1 failed"), "the summary still says it\n{out}");
        out.assert_stdout_contains(" Failed:  b#build (exit code 1)");
    }
}

#[test]
fn output_logs_applies_to_json_output_events_not_to_the_start_finish_pairs() {
    let ws = logs_ws();
    let (_, cached) = both_runs(&ws, "new-only", &["--json"]);
    assert_eq!(cached.cache_of("a#build"), "hit", "{cached}");
    assert_eq!(cached.output_of("a#build"), "", "the hit's log is not replayed\n{cached}");
    assert_eq!(cached.output_of("b#build"), "oops\n", "{cached}");
    let kinds: Vec<String> = cached
        .events()
        .iter()
        .filter(|e| e["task"] == "a#build")
        .map(|e| e["event"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kinds, ["task_started", "task_finished"], "{cached}");
    let (_, errors) = both_runs(&ws, "errors-only", &["--json"]);
    assert_eq!(errors.output_of("a#build"), "", "{errors}");
    assert_eq!(errors.output_of("b#build"), "oops\n", "{errors}");
}

#[test]
fn a_dry_run_says_a_hit_would_be_restored_not_run() {
    let ws = logs_ws();
    let fresh = ws.prova(["run", "build", "-p", "a", "--dry-run"]).run();
    fresh.assert_code(0);
    fresh.assert_stdout_contains("1 task would run, in this order:");
    assert!(!fresh.stdout.contains("restore"), "{fresh}");
    ws.prova(["run", "build", "-p", "a"]).run().assert_code(0);
    let warm = ws.prova(["run", "build", "--all", "--dry-run"]).run();
    warm.assert_code(0);
    warm.assert_stdout_contains(
        "2 tasks, in this order: 1 would run, 1 would restore from the cache",
    );
    let line = |task: &str| {
        warm.stdout
            .lines()
            .find(|l| l.contains(&format!(" {task} ")))
            .unwrap_or_else(|| panic!("no line for {task}\n{warm}"))
            .to_owned()
    };
    assert!(line("a#build").ends_with(" hit: would restore"), "{warm}");
    assert!(line("b#build").ends_with(" miss"), "{warm}");
    assert!(!warm.stdout.contains("2 tasks would run"), "{warm}");
}

/// An error whose message embeds its cause (`cannot open the cache at …: cache: …: <io
/// error>`) says the cause once, not again after itself.
#[test]
fn an_error_says_its_cause_once() {
    let ws = logs_ws().file("not-a-dir", "x\n");
    for args in [
        &["run", "build", "--all", "--cache-dir", "not-a-dir/cache"][..],
        &["cache", "stats", "--cache-dir", "not-a-dir/cache"],
    ] {
        let out = ws
            .prova(args.iter().copied().map(|a| {
                if a.starts_with("not-a-dir") {
                    ws.path(a).display().to_string()
                } else {
                    a.to_owned()
                }
            }))
            .run();
        out.assert_code(2);
        let line = out.stderr.lines().find(|l| l.starts_with("prova: ")).unwrap_or_default();
        let cause = "Not a directory (os error 20)";
        assert_eq!(line.matches(cause).count(), 1, "{args:?}: {line}\n{out}");
    }
}
