//! How `--verify` reads in the text stream (issue 28): a proof that passed is one line under
//! its task — the verdict and a short reason (where it re-ran, how many perturbations, what
//! could not be perturbed) — where it was ~400 characters of perturbation details; a failed
//! proof keeps every detail (the paths, the diff, the perturbations). `--json` keeps
//! everything in both cases.

use prova_tests::verify::{only_verdict, prova, task, workspace};

/// A pure task and one whose output carries the time.
fn ws() -> prova_tests::TempWorkspace {
    workspace(&format!(
        "{}{}",
        task("det", "mkdir -p out && cat src/a.txt > out/det.txt", &["out/det.txt"]),
        task("clock", "mkdir -p out && date +%s%N > out/clock.txt", &["out/clock.txt"])
    ))
}

#[test]
fn a_passed_proof_is_one_short_line_and_a_failed_one_keeps_its_details() {
    let ws = ws();
    let text = prova(&ws, ["run", "det", "clock", "--all", "--force", "--verify"]).run();
    text.assert_code(1);
    let det: Vec<String> =
        text.task_lines("p#det").into_iter().filter(|l| l.starts_with("verify")).collect();
    assert_eq!(det.len(), 1, "one verify line for a passed proof\n{text}");
    let line = &det[0];
    assert!(line.starts_with("verify: proven deterministic (single machine, "), "{text}");
    assert!(line.contains(" perturbations"), "{line}");
    assert!(line.len() <= 160, "{} characters: {line}", line.len());
    // No perturbation details under it: the next line of the task is not indented detail.
    let all = text.task_lines("p#det");
    assert!(!all.iter().any(|l| l.starts_with("  perturbed:")), "{text}");
    // The failure keeps its details: the changed path, the diff, the perturbations.
    let clock = text.task_lines("p#clock");
    assert!(clock.iter().any(|l| l.starts_with("verify: NONDETERMINISTIC")), "{text}");
    assert!(clock.iter().any(|l| l.starts_with("  changed: p/out/clock.txt")), "{text}");
    assert!(clock.iter().any(|l| l.starts_with("  perturbed: ")), "{text}");
    // JSON still carries every perturbation of the passed proof.
    let json = prova(&ws, ["run", "det", "--all", "--force", "--verify", "--json"]).run();
    json.assert_code(0);
    let v = only_verdict(&json, "p#det");
    let applied = v["perturbations"]["applied"].as_array().map_or(0, Vec::len);
    assert!(applied >= 5, "{v}");
    assert!(line.contains(&format!("{applied} perturbations")), "{line} vs {v}");
}
