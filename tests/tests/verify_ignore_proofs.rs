//! `verify_ignore` never makes a false proof (issue 27). A proof that compared nothing —
//! every output ignored, or only the directories that held the ignored files left — is
//! `not-verified`, naming the patterns, never `proven-deterministic`. And the ledger judges
//! what the proof judged: a task whose outputs differ only in an ignored file (a build
//! stamp), proven by `--verify`, is no hermeticity defect locally or on the farm, and under
//! `--trust proven` its entry is promoted and served like any proven one.

use prova_tests::cluster::Cluster;
use prova_tests::verify::{
    cache_word, hermeticity, name, only_verdict, prova, sandbox_or_skip, task_with, verdict_names,
    verdicts, workspace,
};

/// `p#stamp`: writes only a timestamp, and ignores it.
fn stamp_only(ignore: &str) -> String {
    task_with(
        "stamp",
        "mkdir -p out/meta && date +%s%N > out/meta/stamp.txt",
        &["out/**"],
        &format!("verify_ignore = [{ignore}]"),
    )
}

/// `p#build`: a real output and a timestamp it ignores.
fn stamped_build() -> String {
    task_with(
        "build",
        "mkdir -p out && cat src/a.txt > out/app.txt && date +%s%N > out/build-info.json",
        &["out/**"],
        "verify_ignore = [\"out/build-info.json\"]",
    )
}

#[test]
fn an_ignore_that_covers_every_output_proves_nothing() {
    for ignore in ["\"out/**\"", "\"out/meta/stamp.txt\"", "\"**/*.txt\", \"nothing/**\""] {
        let ws = workspace(&stamp_only(ignore));
        let out = prova(&ws, ["run", "stamp", "--all", "--verify", "--json"]).run();
        out.assert_code(0);
        let v = only_verdict(&out, "p#stamp");
        assert_eq!(name(&v), "not-verified", "{ignore}: nothing was compared\n{out}");
        let reason = v["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("verify_ignore"), "{reason}");
        for p in ignore.split(", ") {
            let p = p.trim_matches('"');
            assert!(reason.contains(&format!("`{p}`")), "the reason names {p}: {reason}");
        }
        // The text summary does not call it proven either.
        let text = prova(&ws, ["run", "stamp", "--all", "--verify", "--force"]).run();
        text.assert_code(0);
        assert!(!text.stdout.contains("proven deterministic"), "{text}");
    }
}

#[test]
fn an_ignore_that_leaves_a_real_output_still_proves_it() {
    let ws = workspace(&stamped_build());
    let out = prova(&ws, ["run", "build", "--all", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(name(&only_verdict(&out, "p#build")), "proven-deterministic", "{out}");
}

#[test]
fn with_the_inputs_proof_too_the_determinism_side_is_not_proven() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&stamp_only("\"out/**\""));
    let out = prova(&ws, ["run", "stamp", "--all", "--verify=all", "--json"]).run();
    out.assert_code(0);
    let names = verdict_names(&out, "p#stamp");
    assert!(names.contains(&"proven-complete".to_owned()), "{names:?}\n{out}");
    assert!(names.contains(&"not-verified".to_owned()), "{names:?}\n{out}");
    assert!(!names.contains(&"proven-deterministic".to_owned()), "{names:?}\n{out}");
}

#[test]
fn a_failed_rerun_still_fails_whatever_is_ignored() {
    let ws = workspace(&task_with(
        "picky",
        "mkdir -p out && date +%s%N > out/stamp.txt && test x$USER != xprova-rerun",
        &["out/**"],
        "verify_ignore = [\"out/**\"]",
    ));
    let out = prova(&ws, ["run", "picky", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let v = verdicts(&out, "p#picky");
    assert_eq!(v.len(), 1, "{out}");
    assert_eq!(name(&v[0]), "rerun-failed", "{out}");
}

#[test]
fn a_task_proven_with_ignored_outputs_is_no_hermeticity_defect() {
    let ws = workspace(&stamped_build());
    prova(&ws, ["run", "build", "--all", "--verify", "--json"]).run().assert_code(0);
    // Again, executing: four executions, four stamps, one thing compared.
    prova(&ws, ["run", "build", "--all", "--verify", "--force"]).run().assert_code(0);
    let (out, report) = hermeticity(&ws);
    out.assert_code(0);
    assert_eq!(report["keys"], serde_json::json!([]), "{out}");
    // What the proof compares still counts: the real output varying is reported.
    ws.write(
        "p/prova.toml",
        &task_with(
            "build",
            "mkdir -p out && date +%s%N > out/app.txt && date +%s%N > out/build-info.json",
            &["out/**"],
            "verify_ignore = [\"out/build-info.json\"]",
        ),
    );
    prova(&ws, ["run", "build", "--all", "--verify"]).run().assert_code(1);
    let (out, report) = hermeticity(&ws);
    out.assert_code(1);
    assert_eq!(report["keys"].as_array().map(Vec::len), Some(1), "{out}");
}

#[test]
fn on_the_farm_a_task_proven_with_ignored_outputs_is_trusted_and_served() {
    let farm = Cluster::builder().workers(2).coordinator_args(["--trust", "proven"]).start();
    let ws = workspace(&stamped_build());
    let proof = farm.run(&ws, ["build", "--all", "--verify", "--json"]);
    proof.assert_code(0);
    let v = only_verdict(&proof, "p#build");
    assert_eq!(name(&v), "proven-deterministic", "{proof}");
    assert_eq!(v["single_machine"], false, "{proof}");
    let stats = farm.farm_cache_stats();
    let n = |ns: &str| stats["entries"][ns].as_u64().unwrap_or(0);
    assert_eq!((n(""), n("pending")), (1, 0), "(trusted, pending): proven, promoted\n{stats}");
    // A fresh clone is served the proven entry.
    let fresh = workspace(&stamped_build());
    let hit = farm.run(&fresh, ["build", "--all", "--json"]);
    hit.assert_code(0);
    assert_eq!(cache_word(&hit, "p#build"), "hit", "{hit}");
    assert_eq!(fresh.read("p/out/app.txt"), "hello\n");
    // And the farm's ledger reports no defect.
    let (h, report) = farm.hermeticity();
    h.assert_code(0);
    assert_eq!(report["keys"], serde_json::json!([]), "{h}");
}
