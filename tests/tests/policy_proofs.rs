//! Proof policy on the real binary (issue 19): `verify = false` and `side_effects = true`
//! exempt a task from `--verify` (it runs once; the verdict says `exempt` and why),
//! `verify_ignore` leaves a legitimately varying output out of the determinism comparison
//! (the rest stays proven, the verdict names what was left out), `--verify-sample` proves a
//! subset chosen by key and seed (the same keys twice), and none of these changes a key.

use prova_tests::verify::{
    cache_word, key, name, only_verdict, prova, sandbox_or_skip, task_with, verdicts, verify_line,
    workspace,
};

/// A directory outside the workspace where a side effect leaves its mark, one line per
/// execution, and the path of that mark.
fn counter() -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new().prefix("prova-e2e-effects-").tempdir().expect("tempdir");
    let path = dir.path().join("ran").display().to_string();
    (dir, path)
}

fn runs(path: &str) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[test]
fn a_side_effecting_task_runs_once_under_verify_and_is_exempt() {
    let (_dir, mark) = counter();
    let ws = workspace(&task_with(
        "deploy",
        &format!("echo deployed >> {mark} && mkdir -p out && cat src/a.txt > out/d.txt"),
        &["out/d.txt"],
        "side_effects = true",
    ));
    let out = prova(&ws, ["run", "deploy", "--all", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(runs(&mark), 1, "a side-effecting task ran twice under --verify\n{out}");
    let v = only_verdict(&out, "p#deploy");
    assert_eq!(name(&v), "exempt", "{out}");
    assert!(v["reason"].as_str().unwrap_or("").contains("side_effects"), "{v}");
    // `side_effects` implies `cache = false`: nothing was saved, and the next run runs it.
    assert_eq!(cache_word(&out, "p#deploy"), "uncached", "{out}");
    prova(&ws, ["run", "deploy", "--all"]).run().assert_code(0);
    assert_eq!(runs(&mark), 2, "a side-effecting task is never a cache hit");
}

#[test]
fn verify_false_keeps_a_cached_task_out_of_every_proof() {
    let (_dir, mark) = counter();
    let ws = workspace(&task_with(
        "publish",
        &format!("echo published >> {mark} && mkdir -p out && cat src/a.txt > out/p.txt"),
        &["out/p.txt"],
        "verify = false",
    ));
    let out = prova(&ws, ["run", "publish", "--all", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(runs(&mark), 1, "an exempt task was re-run\n{out}");
    assert_eq!(cache_word(&out, "p#publish"), "saved", "still cached: {out}");
    let v = only_verdict(&out, "p#publish");
    assert_eq!(name(&v), "exempt", "{out}");
    assert!(v["reason"].as_str().unwrap_or("").contains("verify = false"), "{v}");
    // `--force --verify` again: still once per run.
    let out = prova(&ws, ["run", "publish", "--all", "--force", "--verify=determinism"]).run();
    out.assert_code(0);
    assert_eq!(runs(&mark), 2, "{out}");
    out.assert_stdout_contains("verify: exempt");
    assert!(verify_line(&out).contains("1 exempt"), "{out}");
}

#[test]
fn verify_false_also_skips_the_inputs_proof() {
    if !sandbox_or_skip() {
        return;
    }
    let (_dir, mark) = counter();
    // Reads an undeclared file: a traced run would report it.
    let ws = workspace(&task_with(
        "publish",
        &format!("echo x >> {mark}; cat src/b.txt; mkdir -p out && cat src/a.txt > out/p.txt"),
        &["out/p.txt"],
        "verify = false",
    ))
    .file("p/src/b.txt", "b\n");
    let out = prova(&ws, ["run", "publish", "--all", "--verify=all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(runs(&mark), 1, "{out}");
    let names: Vec<String> = verdicts(&out, "p#publish").iter().map(name).collect();
    assert_eq!(names, ["exempt"], "one exempt verdict, no proof ran\n{out}");
}

#[test]
fn an_ignored_varying_output_leaves_the_rest_proven_and_is_named() {
    let ws = workspace(&task_with(
        "build",
        "mkdir -p out && cat src/a.txt > out/app.txt && date +%s%N > out/build-info.json",
        &["out/**"],
        "verify_ignore = [\"out/build-info.json\"]",
    ));
    let out = prova(&ws, ["run", "build", "--all", "--verify", "--json"]).run();
    out.assert_code(0);
    let v = only_verdict(&out, "p#build");
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    assert_eq!(v["ignored"], serde_json::json!(["p/out/build-info.json"]), "{v}");
    // The text form names it too.
    let out = prova(&ws, ["run", "build", "--all", "--force", "--verify"]).run();
    out.assert_code(0);
    out.assert_stdout_contains("not compared (verify_ignore): p/out/build-info.json");
}

#[test]
fn an_ignore_pattern_does_not_hide_another_varying_output() {
    let ws = workspace(&task_with(
        "build",
        "mkdir -p out && date +%s%N > out/app.txt && date +%s%N > out/build-info.json",
        &["out/**"],
        "verify_ignore = [\"out/build-info.json\"]",
    ));
    let out = prova(&ws, ["run", "build", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#build");
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/app.txt"]), "{v}");
    assert_eq!(v["ignored"], serde_json::json!(["p/out/build-info.json"]), "{v}");
}

#[test]
fn no_policy_field_changes_a_key() {
    let build = |extra: &str| {
        task_with("build", "mkdir -p out && cat src/a.txt > out/b.txt", &["out/b.txt"], extra)
    };
    let ws = workspace(&build(""));
    let first = prova(&ws, ["run", "build", "--all", "--json"]).run();
    first.assert_code(0);
    for extra in ["verify = false", "verify_ignore = [\"out/b.txt\"]", "verify = true"] {
        ws.write("p/prova.toml", &build(extra));
        let out = prova(&ws, ["run", "build", "--all", "--json"]).run();
        out.assert_code(0);
        assert_eq!(key(&out, "p#build"), key(&first, "p#build"), "{extra} moved the key\n{out}");
        assert_eq!(cache_word(&out, "p#build"), "hit", "{extra}: {out}");
    }
    // `side_effects = true` is `cache = false` for the key: the same key as that.
    ws.write("p/prova.toml", &build("cache = false"));
    let uncached = prova(&ws, ["run", "build", "--all", "--json"]).run();
    ws.write("p/prova.toml", &build("side_effects = true"));
    let effects = prova(&ws, ["run", "build", "--all", "--json"]).run();
    effects.assert_code(0);
    assert_eq!(uncached.report("p#build")["key"], effects.report("p#build")["key"], "{effects}");
    // And the run-level knobs change no key either.
    ws.write("p/prova.toml", &build(""));
    let out =
        prova(&ws, ["run", "build", "--all", "--json", "--retry", "2", "--timeout", "1h"]).run();
    out.assert_code(0);
    assert_eq!(cache_word(&out, "p#build"), "hit", "--retry/--timeout moved the key\n{out}");
}

#[test]
fn side_effects_refuses_an_explicit_cache_or_verify() {
    for extra in ["side_effects = true\ncache = true", "side_effects = true\nverify = true"] {
        let ws = workspace(&task_with("deploy", "true", &[], extra));
        let out = prova(&ws, ["run", "deploy", "--all"]).run();
        out.assert_code(2);
        out.assert_stderr_contains("side_effects = true");
    }
}

/// Twenty projects `p00`…`p19`, each with a deterministic `build`: twenty keys.
fn many() -> prova_tests::TempWorkspace {
    let mut ws = prova_tests::TempWorkspace::new().file(
        "prova.toml",
        "[workspace]\nprojects = [\"p*\"]\n[tasks.build]\n\
         command = \"mkdir -p out && cat src/a.txt > out/a.txt\"\n\
         inputs = [\"src/a.txt\"]\noutputs = [\"out/a.txt\"]\n",
    );
    for i in 0..20 {
        ws = ws.file(&format!("p{i:02}/src/a.txt"), &format!("{i}\n"));
    }
    ws
}

fn sampled_out(out: &prova_tests::Output) -> Vec<String> {
    let summary = out.summary();
    let tasks = summary["tasks"].as_array().cloned().unwrap_or_default();
    tasks
        .iter()
        .filter(|t| {
            t["verdicts"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v["verdict"] == "not-sampled"))
        })
        .map(|t| t["task"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn the_same_key_is_sampled_the_same_way_twice() {
    let ws = many();
    let args =
        ["run", "build", "--all", "--force", "--verify", "--verify-sample=0.5", "--verify-seed=3"];
    let json: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let first = prova(&ws, json.clone()).run();
    first.assert_code(0);
    let second = prova(&ws, json).run();
    second.assert_code(0);
    let (x, y) = (sampled_out(&first), sampled_out(&second));
    assert_eq!(x, y, "the sample moved between runs of the same keys");
    assert!(!x.is_empty() && x.len() < 20, "half of 20 keys, got {} left out", x.len());
    let summary = first.summary();
    let tasks = summary["tasks"].as_array().cloned().unwrap_or_default();
    let proven =
        tasks.iter().filter(|t| t["verdicts"][0]["verdict"] == "proven-deterministic").count();
    assert_eq!(proven + x.len(), 20, "every task is proven or left out\n{first}");
    // The text summary says how many were sampled.
    let text = prova(&ws, args).run();
    text.assert_code(0);
    let line = verify_line(&text);
    assert!(line.contains(&format!("({proven} of 20 sampled)")), "{line}");
    assert!(line.contains(&format!("{} not sampled", x.len())), "{line}");
    // Another seed is another sample of the same keys (fixed keys: a fixed outcome).
    let other = prova(
        &ws,
        [
            "run",
            "build",
            "--all",
            "--force",
            "--verify",
            "--verify-sample=0.5",
            "--verify-seed=4",
            "--json",
        ],
    )
    .run();
    other.assert_code(0);
    assert_ne!(sampled_out(&other), x, "--verify-seed rotates the sample");
}

#[test]
fn a_sample_needs_verify_and_a_fraction() {
    let ws = many();
    let out = prova(&ws, ["run", "build", "--all", "--verify-sample=0.5"]).run();
    out.assert_code(2);
    let out = prova(&ws, ["run", "build", "--all", "--verify", "--verify-sample=1.5"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("between 0 and 1");
}
