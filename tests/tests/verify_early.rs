//! A local run starts each determinism re-run beside its first execution — under
//! `--verify=all` both run in exec roots of the same declared inputs and upstream artifacts;
//! under `--verify` the first runs in the workspace when its outputs lie apart from its
//! inputs — and counts the re-run only once the first execution is saved. On the real
//! binary: a nondeterministic task is still caught, with the first execution's bytes kept;
//! a chain is proven link by link; a first execution that fails drops a re-run that
//! succeeded — no verdict, no ledger row, nothing left staged.

use prova_tests::verify::{
    cache_word, hermeticity, name, prova, sandbox_or_skip, task, task_with, verdict_names,
    verdicts, workspace,
};

/// Staged artifacts left in the cache's `tmp/` (packed executions never saved or dropped).
fn staged(ws: &prova_tests::TempWorkspace) -> Vec<String> {
    let tmp = ws.path(".prova/cache/tmp");
    let Ok(dir) = std::fs::read_dir(&tmp) else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tar.zst"))
        .collect()
}

#[test]
fn a_task_appending_the_time_is_caught_with_its_first_bytes_kept() {
    if !sandbox_or_skip() {
        return;
    }
    let clock = task("clock", "mkdir -p out && date +%s%N >> out/clock.txt", &["out/clock.txt"]);
    let ws = workspace(&clock);
    let out = prova(&ws, ["run", "clock", "--all", "--verify=all", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#clock"), "succeeded", "the proof failed, not the task\n{out}");
    assert_eq!(cache_word(&out, "p#clock"), "saved", "{out}");
    let v = verdicts(&out, "p#clock");
    let nondet: Vec<_> = v.iter().filter(|v| name(v) == "nondeterministic").collect();
    assert_eq!(nondet.len(), 1, "{out}");
    assert_eq!(nondet[0]["changed"], serde_json::json!(["p/out/clock.txt"]), "{out}");
    // The workspace holds the first execution's bytes: one line, the diff's first-run side.
    let canonical = ws.read("p/out/clock.txt");
    assert_eq!(canonical.lines().count(), 1, "{canonical}");
    let diff = nondet[0]["files"][0]["diff"].as_str().unwrap_or_default();
    assert!(diff.contains(&format!("-{}", canonical.trim_end())), "{diff}\n{out}");
    assert!(staged(&ws).is_empty(), "{:?}", staged(&ws));
    // Both executions are in the ledger, once each.
    let (_, h) = hermeticity(&ws);
    let fps = h["keys"][0]["fingerprints"].as_array().cloned().unwrap_or_default();
    assert_eq!(fps.len(), 2, "the first execution and the re-run: {h}");
    assert!(fps.iter().all(|g| g["executions"] == 1), "{h}");
}

#[test]
fn a_chain_is_proven_link_by_link() {
    if !sandbox_or_skip() {
        return;
    }
    let a = task("a", "mkdir -p out && cat src/a.txt > out/a.txt", &["out/a.txt"]);
    // b reads a's output: its exec roots (first execution and re-run) hold a's artifact.
    let b = task_with(
        "b",
        "mkdir -p gen && tr a-z A-Z < out/a.txt > gen/b.txt",
        &["gen/b.txt"],
        "deps = [\"a\"]",
    );
    let ws = workspace(&format!("{a}{b}"));
    let out = prova(&ws, ["run", "b", "--all", "--verify=all", "--json"]).run();
    out.assert_code(0);
    for t in ["p#a", "p#b"] {
        assert_eq!(
            verdict_names(&out, t),
            ["proven-complete", "proven-deterministic"],
            "{t}: every verdict, once\n{out}"
        );
    }
    assert_eq!(ws.read("p/gen/b.txt"), "HELLO\n");
    assert!(staged(&ws).is_empty(), "{:?}", staged(&ws));
}

#[test]
fn a_failed_first_execution_drops_a_rerun_that_succeeded() {
    if !sandbox_or_skip() {
        return;
    }
    // Fails unless it runs as the re-run's user: the first execution fails, the re-run
    // beside it succeeds and packs its outputs. The first execution takes its time to fail,
    // so the re-run has usually ended by then (its result held, then dropped); either way
    // nothing of the re-run may remain.
    let only_rerun = task(
        "picky",
        "mkdir -p out && echo x > out/x.txt && { test $USER = prova-rerun || { sleep 2; exit 1; }; }",
        &["out/x.txt"],
    );
    // `--verify` alone: the first execution runs in the workspace (its outputs apart from
    // its inputs), the re-run beside it all the same.
    for mode in ["--verify=all", "--verify"] {
        let ws = workspace(&only_rerun);
        let out = prova(&ws, ["run", "picky", "--all", mode, "--json"]).run();
        out.assert_code(1);
        assert_eq!(out.status_of("p#picky"), "failed", "{mode}\n{out}");
        let v = verdict_names(&out, "p#picky");
        assert!(
            !v.iter().any(|n| n.contains("deterministic")),
            "{mode}: no determinism verdict for a failed execution: {v:?}\n{out}"
        );
        let left = staged(&ws);
        assert!(left.is_empty(), "{mode}: the dropped re-run's artifact is removed: {left:?}");
        // Nothing of the re-run reached the ledger: a task never saved has no row that passed.
        let (_, h) = hermeticity(&ws);
        assert_eq!(h["keys"], serde_json::json!([]), "{mode}: {h}");
    }
}
