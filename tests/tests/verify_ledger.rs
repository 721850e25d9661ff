//! The fingerprint ledger in local mode: every execution (first runs and determinism re-runs)
//! is recorded with its output fingerprint; `prova hermeticity` lists the keys whose
//! executions disagree (exit 1, so CI can gate on it) and `prova diff` shows a divergence
//! again from the two kept artifacts.

use prova_tests::verify::{hermeticity, key, only_verdict, prova, task, verdict_names, workspace};

fn det() -> String {
    task("det", "mkdir -p out && cat src/a.txt > out/det.txt", &["out/det.txt"])
}

fn clock() -> String {
    task("clock", "mkdir -p out && date +%s%N >> out/clock.txt", &["out/clock.txt"])
}

#[test]
fn hermeticity_lists_a_nondeterministic_key_with_both_fingerprints_and_the_file() {
    let ws = workspace(&format!("{}{}", clock(), det()));
    let run = prova(&ws, ["run", "clock", "det", "--all", "--verify", "--json"]).run();
    run.assert_code(1);

    let (out, report) = hermeticity(&ws);
    out.assert_code(1);
    let keys = report["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1, "only p#clock disagrees\n{out}");
    let k = &keys[0];
    assert_eq!(k["task"], "p#clock", "{out}");
    assert_eq!(k["key"], key(&run, "p#clock"), "the ledger's key is the run's\n{out}");
    assert_eq!(k["nondeterministic"], true, "{out}");
    assert_eq!(k["flaky"], false, "{out}");
    assert_eq!(k["changed"], serde_json::json!(["p/out/clock.txt"]), "{out}");
    let fps = k["fingerprints"].as_array().expect("fingerprints");
    assert_eq!(fps.len(), 2, "the first run and the re-run\n{out}");
    assert_ne!(fps[0]["fingerprint"], fps[1]["fingerprint"]);
    for g in fps {
        assert_eq!(g["workers"], serde_json::json!(["local"]), "{out}");
        assert_eq!(g["executions"], 1, "{out}");
    }

    let text = ws.prova(["hermeticity"]).run();
    text.assert_code(1);
    text.assert_stdout_contains("1 key whose executions disagree");
    text.assert_stdout_contains("p#clock (nondeterministic) key");
    text.assert_stdout_contains("changed: p/out/clock.txt");
    assert!(!text.stdout.contains("p#det"), "{text}");
}

#[test]
fn hermeticity_with_only_deterministic_tasks_lists_nothing() {
    let lint = task("lint", "cat src/a.txt", &[]);
    let ws = workspace(&format!("{}{lint}", det()));
    prova(&ws, ["run", "det", "lint", "--all", "--verify"]).run().assert_code(0);
    // Executing again (first run and re-run) agrees with what is recorded.
    prova(&ws, ["run", "det", "lint", "--all", "--verify", "--force"]).run().assert_code(0);
    prova(&ws, ["run", "det", "lint", "--all", "--force"]).run().assert_code(0);

    let (out, report) = hermeticity(&ws);
    out.assert_code(0);
    assert_eq!(report["keys"], serde_json::json!([]), "{out}");
    let text = ws.prova(["hermeticity"]).run();
    text.assert_code(0);
    text.assert_stdout_contains("every recorded execution agrees");
}

#[test]
fn hermeticity_on_a_fresh_workspace_lists_nothing() {
    let ws = workspace(&det());
    let (out, report) = hermeticity(&ws);
    out.assert_code(0);
    assert_eq!(report["keys"], serde_json::json!([]), "{out}");
}

#[test]
fn a_re_run_that_fails_is_listed_but_not_called_flaky() {
    // Flaky is the same environment giving different exit codes; a perturbed re-run that
    // fails is evidence the task depends on a perturbation (issue 11).
    let ws = workspace(&task(
        "picky",
        "mkdir -p out && echo ok > out/picky.txt && test x$USER != xprova-rerun",
        &["out/picky.txt"],
    ));
    let run = prova(&ws, ["run", "picky", "--all", "--verify", "--json"]).run();
    run.assert_code(1);
    assert_eq!(verdict_names(&run, "p#picky"), ["rerun-failed"], "{run}");
    let (out, report) = hermeticity(&ws);
    out.assert_code(1);
    let k = &report["keys"][0];
    assert_eq!(k["task"], "p#picky", "{out}");
    assert_eq!(k["flaky"], false, "{out}");
    assert_eq!(k["nondeterministic"], false, "{out}");
    assert_eq!(k["failed_on"], serde_json::json!([]), "{out}");
    assert_eq!(k["rerun_failed_on"], serde_json::json!(["local"]), "{out}");
    assert_eq!(k["fingerprints"].as_array().map(Vec::len), Some(1), "{out}");
}

#[test]
fn an_allowed_divergence_is_still_in_the_ledger() {
    // `--verify-allow` keeps the run green; the evidence is still recorded.
    let ws = workspace(&clock());
    prova(&ws, ["run", "clock", "--all", "--verify", "--verify-allow", "p#clock"])
        .run()
        .assert_code(0);
    let (out, report) = hermeticity(&ws);
    out.assert_code(1);
    assert_eq!(report["keys"][0]["task"], "p#clock", "{out}");
}

#[test]
fn prova_diff_shows_the_divergence_again() {
    let ws = workspace(&format!("{}{}", clock(), det()));
    let run = prova(&ws, ["run", "clock", "det", "--all", "--verify", "--json"]).run();
    run.assert_code(1);
    let verdict = only_verdict(&run, "p#clock");
    let diff = verdict["files"][0]["diff"].as_str().expect("a diff").to_owned();
    let canonical = ws.read("p/out/clock.txt");

    let out = ws.prova(["diff", "p#clock"]).run();
    out.assert_code(0);
    let short = &key(&run, "p#clock")[..12];
    out.assert_stdout_contains(&format!("p#clock key {short}: first run vs re-run on local"));
    out.assert_stdout_contains("changed: p/out/clock.txt");
    // The same unified diff as the run showed: first run (the workspace's bytes) → re-run.
    for line in diff.lines() {
        assert!(
            out.stdout.lines().any(|l| l.trim_start() == line),
            "`prova diff` lacks {line:?}\n{out}"
        );
    }
    assert!(diff.contains(&format!("\n-{}", canonical.trim_end())), "{diff}");
    // It still works after the outputs are gone from the workspace (both sides are kept).
    std::fs::remove_dir_all(ws.path("p/out")).expect("removing the outputs");
    let again = ws.prova(["diff", "p#clock"]).run();
    again.assert_code(0);
    assert_eq!(again.stdout, out.stdout);

    let none = ws.prova(["diff", "p#det"]).run();
    none.assert_code(0);
    none.assert_stdout_contains("p#det: no recorded divergence");
}
