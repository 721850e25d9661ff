//! The `--json` event contract (issue 16): every line a run emits — misses, hits, failures
//! (an exit code, a signal, a timeout), skips, groups, a proof run, `prova last --json` and
//! the `--summarize` file — validates against `schemas/events.json`, carries `v`, one run id
//! and an RFC 3339 timestamp, and every task that did not skip has a `task_started` before
//! its `task_finished`, hits included. (Every other suite that reads events checks the
//! schema as well: `Output::events` validates each line.)

use std::collections::HashSet;

use prova_tests::schema::check_event;
use prova_tests::{Output, TempWorkspace};
use serde_json::Value;

/// `a#build` (cacheable, outputs), `a#lint` (reads, writes nothing), `b#boom` (exit 3),
/// `b#killed` (SIGKILLs itself), `b#slow` (times out), `c#after` (after `b#boom`: skipped),
/// `c#all` (a group).
fn workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\", \"b\", \"c\"]\n")
        .file(
            "a/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && cat src/x > dist/x && echo built\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n\
             [tasks.lint]\ncommand = \"cat src/x\"\ninputs = [\"src/**\"]\n",
        )
        .file("a/src/x", "x\n")
        .file(
            "b/prova.toml",
            "[tasks.boom]\ncommand = \"echo going down; exit 3\"\n\
             [tasks.killed]\ncommand = \"kill -9 $$\"\n\
             [tasks.slow]\ncommand = \"sleep 30\"\ntimeout = \"1s\"\n",
        )
        .file(
            "c/prova.toml",
            "[tasks.after]\ncommand = \"echo never\"\ndeps = [\"b#boom\"]\n\
             [tasks.all]\ndeps = [\"a#build\", \"a#lint\"]\n",
        )
}

/// Checks the contract on one run's stdout; returns its lines.
#[track_caller]
fn contract(out: &Output) -> Vec<Value> {
    let lines = out.json_lines();
    assert!(!lines.is_empty(), "no output\n{out}");
    let run_id = lines[0]["run_id"].as_str().unwrap_or_else(|| panic!("no run id\n{out}"));
    assert!(run_id.starts_with('r'), "{run_id}");
    let mut started = HashSet::new();
    for l in &lines {
        if let Err(e) = check_event(l) {
            panic!("breaks schemas/events.json: {e}\nline: {l}\n{out}");
        }
        assert_eq!(l["run_id"], run_id, "one run id per run: {l}");
        let ts = l["ts"].as_str().unwrap_or_default();
        assert!(ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
        let task = l["task"].as_str().unwrap_or_default().to_owned();
        match l["event"].as_str() {
            Some("task_started") => {
                started.insert(task);
            }
            Some("task_finished") if l["status"] != "skipped" => {
                assert!(started.contains(&task), "{task} finished without a start\n{out}");
            }
            Some("task_finished") => {
                assert!(!started.contains(&task), "a skipped task never starts\n{out}");
            }
            _ => {}
        }
    }
    let last = lines.last().cloned().unwrap_or_default();
    assert_eq!(last["event"], "summary", "{out}");
    let totals = &last["summary"]["totals"];
    assert_eq!(totals["tasks"], last["summary"]["tasks"].as_array().map_or(0, Vec::len), "{out}");
    lines
}

fn exit_of(out: &Output, task: &str) -> Value {
    out.report(task)["exit"].clone()
}

#[test]
fn misses_hits_failures_skips_and_groups_keep_the_contract() {
    let ws = workspace();
    let all = ["run", "build", "lint", "boom", "killed", "slow", "after", "all", "--all"];
    let first = ws.prova(all.iter().copied().chain(["--continue", "--json"])).run();
    first.assert_code(1);
    contract(&first);
    assert_eq!(exit_of(&first, "a#build"), serde_json::json!({"code": 0}), "{first}");
    assert_eq!(exit_of(&first, "b#boom"), serde_json::json!({"code": 3}), "{first}");
    assert_eq!(exit_of(&first, "b#killed"), serde_json::json!({"signal": "SIGKILL"}), "{first}");
    assert_eq!(exit_of(&first, "b#slow"), serde_json::json!({"timed_out": true}), "{first}");
    assert_eq!(exit_of(&first, "c#after"), Value::Null, "{first}");
    assert_eq!(first.status_of("c#after"), "skipped", "{first}");
    let totals =
        first.json_lines().last().cloned().unwrap_or_default()["summary"]["totals"].clone();
    assert_eq!(totals["failed"], 3, "{first}");
    assert_eq!(totals["skipped"], 1, "{first}");
    assert_eq!(totals["misses"], 5, "{first}");

    // Warm: the hits get the same start/finish pair as executions did, flagged `hit`.
    let warm = ws.prova(["run", "build", "lint", "all", "--all", "--json"]).run();
    warm.assert_code(0);
    let lines = contract(&warm);
    for task in ["a#build", "a#lint"] {
        assert_eq!(warm.cache_of(task), "hit", "{warm}");
        let kinds: Vec<&str> = lines
            .iter()
            .filter(|l| l["task"] == task)
            .filter_map(|l| l["event"].as_str())
            .collect();
        assert_eq!(kinds, ["task_started", "output", "task_finished"], "{task}\n{warm}");
        let start = lines.iter().find(|l| l["task"] == task).cloned().unwrap_or_default();
        assert_eq!(start["hit"], true, "{start}");
    }
    let totals = &lines.last().cloned().unwrap_or_default()["summary"]["totals"];
    assert_eq!(totals["hits"], 2, "{warm}");

    // `prova last --json` prints that summary again, in the same shape.
    let last = ws.prova(["last", "--json"]).run();
    last.assert_code(0);
    let again = last.json_lines();
    assert_eq!(again.len(), 1, "{last}");
    assert_eq!(check_event(&again[0]), Ok(()), "{last}");
    assert_eq!(again[0]["run_id"], lines[0]["run_id"], "{last}");
    assert_eq!(again[0]["summary"], lines.last().cloned().unwrap_or_default()["summary"], "{last}");
}

#[test]
fn a_proof_run_and_the_summary_file_keep_the_contract() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            "[tasks.det]\ncommand = \"mkdir -p out && cat src/a.txt > out/det.txt\"\n\
             inputs = [\"src/a.txt\"]\noutputs = [\"out/det.txt\"]\n\
             [tasks.clock]\ncommand = \"mkdir -p out && date +%s%N > out/clock.txt\"\n\
             inputs = [\"src/a.txt\"]\noutputs = [\"out/clock.txt\"]\n\
             [tasks.lint]\ncommand = \"cat src/a.txt\"\ninputs = [\"src/a.txt\"]\n",
        );
    let summary_file = ws.path("reports/summary.json");
    let summarize = format!("--summarize={}", summary_file.display());
    let out = ws
        .prova(["run", "det", "clock", "lint", "--all", "--verify", "--json", summarize.as_str()])
        .run();
    out.assert_code(1);
    let lines = contract(&out);
    let verdicts: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "verdict")
        .filter_map(|l| l["verdict"]["verdict"].as_str())
        .collect();
    for want in ["proven-deterministic", "nondeterministic", "no-outputs"] {
        assert!(verdicts.contains(&want), "no {want} verdict in {verdicts:?}\n{out}");
    }
    // A warm proof run: hits are not verified, and say so in the schema's terms.
    let warm = ws.prova(["run", "det", "--all", "--verify", "--json"]).run();
    contract(&warm);
    let text = std::fs::read_to_string(&summary_file).expect("the --summarize file");
    let file: Value = serde_json::from_str(&text).expect("the summary file is JSON");
    assert_eq!(check_event(&file), Ok(()), "{text}");
    assert_eq!(file, lines.last().cloned().unwrap_or_default(), "the file is the summary line");
}
