//! Proof policy on an in-process farm (issue 19): the farm's run (driven by the farm actor) re-runs tasks, so an
//! exemption (`verify = false`), an ignored output (`verify_ignore`) and a sample
//! (`--verify-sample`) must hold there as they do locally — the policy travels in the task's
//! spec, the sample in the run's options.

use prova_tests::inproc::InProcessFarm;
use prova_tests::verify::{name, only_verdict, task, task_with, workspace};

#[test]
fn exemptions_ignores_and_samples_hold_on_the_farm() {
    let farm = InProcessFarm::start(2);
    let mark = tempfile::Builder::new().prefix("prova-e2e-effects-").tempdir().expect("tempdir");
    let mark = mark.path().join("ran").display().to_string();
    let ws = workspace(&format!(
        "{}{}{}",
        task_with(
            "publish",
            &format!("(echo x >> {mark}) 2>/dev/null; mkdir -p out && cat src/a.txt > out/p.txt"),
            &["out/p.txt"],
            "verify = false",
        ),
        task_with(
            "build",
            "mkdir -p out && cat src/a.txt > out/app.txt && date +%s%N > out/build-info.json",
            &["out/app.txt", "out/build-info.json"],
            "verify_ignore = [\"out/build-info.json\"]",
        ),
        task("det", "mkdir -p out && cat src/a.txt > out/det.txt", &["out/det.txt"]),
    ));
    let out = farm.run(&ws, ["publish", "build", "det", "--all", "--verify", "--json"]);
    out.assert_code(0);
    let v = only_verdict(&out, "p#publish");
    assert_eq!(name(&v), "exempt", "{out}");
    let runs = std::fs::read_to_string(&mark).map_or(0, |s| s.lines().count());
    assert!(runs <= 1, "an exempt task ran {runs} times on the farm\n{out}");
    let v = only_verdict(&out, "p#build");
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    assert_eq!(v["ignored"], serde_json::json!(["p/out/build-info.json"]), "{v}");
    assert_eq!(name(&only_verdict(&out, "p#det")), "proven-deterministic", "{out}");

    // An empty sample proves nothing and says so, on the farm too.
    let out = farm.run(&ws, ["det", "--all", "--force", "--verify", "--verify-sample=0", "--json"]);
    out.assert_code(0);
    let v = only_verdict(&out, "p#det");
    assert_eq!(name(&v), "not-sampled", "{out}");
    assert_eq!(v["fraction_ppm"], 0, "{v}");
}
