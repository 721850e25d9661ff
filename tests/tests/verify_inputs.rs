//! The input-completeness proof (`--verify=inputs`, and `--verify=all` with determinism) in
//! local mode: each cacheable task runs in an exec root holding only its declared inputs
//! (and upstream outputs), under bubblewrap and strace; every workspace path it tried to read
//! that is not there is named. Where the sandbox cannot run, the proof is an error, never a
//! silent pass.
//!
//! Every test that needs the sandbox starts with [`sandbox_or_skip`]: it fails when bubblewrap
//! or strace cannot run, unless `PROVA_ALLOW_NO_SANDBOX=1`.

use prova_tests::verify::{
    cache_word, complete, key, name, only_verdict, path_with_failing, prova, sandbox_or_skip, task,
    task_with, tolerant, verdict_events, verdict_names, verify_line, workspace,
};

/// Reads `src/secret.txt`, which it does not declare (and fails without it).
fn sneaky() -> String {
    task("sneaky", "mkdir -p out && cat src/secret.txt > out/sneaky.txt", &["out/sneaky.txt"])
}

/// Looks for a file that does not exist anywhere but is declared (its appearance would
/// change the key), then reads what it declares. An undeclared probe is a finding
/// (`verify_sound.rs`).
fn probe() -> String {
    task(
        "probe",
        "mkdir -p out && (test -f maybe.txt || true) && cat src/a.txt > out/probe.txt",
        &["out/probe.txt"],
    )
    .replace("inputs = [\"src/a.txt\"]", "inputs = [\"src/a.txt\", \"maybe.txt\"]")
}

#[test]
fn a_task_reading_an_undeclared_sibling_names_that_exact_path() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&format!("{}{}", sneaky(), tolerant())).file("p/src/secret.txt", "s3cret\n");
    let out = prova(
        &ws,
        ["run", "sneaky", "tolerant", "--all", "--verify=inputs", "--continue", "--json"],
    )
    .run();
    out.assert_code(1);
    assert_eq!(out.summary()["ok"], false, "{out}");
    for t in ["p#sneaky", "p#tolerant"] {
        let v = only_verdict(&out, t);
        assert_eq!(name(&v), "undeclared-inputs", "{t}\n{out}");
        assert_eq!(v["paths"], serde_json::json!(["p/src/secret.txt"]), "{t}\n{out}");
        assert_eq!(v["traced"], true, "{out}");
        assert_eq!(verdict_events(&out, t), vec![v], "{out}");
    }
    // Without the file the sandboxed task fails; one that tolerates its absence succeeds —
    // and is still caught.
    assert_eq!(out.status_of("p#sneaky"), "failed", "{out}");
    assert_eq!(out.status_of("p#tolerant"), "succeeded", "{out}");

    let text = prova(&ws, ["run", "tolerant", "--all", "--force", "--verify=inputs"]).run();
    text.assert_code(1);
    assert_eq!(verify_line(&text), "Verify:  1 undeclared inputs");
    text.assert_stdout_contains("✗ p#tolerant — undeclared-inputs: p/src/secret.txt");
    let lines = text.task_lines("p#tolerant");
    assert!(lines.iter().any(|l| l.starts_with("verify: read undeclared inputs")), "{text}");
    assert!(lines.iter().any(|l| l.trim() == "p/src/secret.txt"), "{text}");

    // Declared, the same read is complete.
    let declared = task_with(
        "sneaky",
        "mkdir -p out && cat src/secret.txt > out/sneaky.txt",
        &["out/sneaky.txt"],
        "",
    )
    .replace("inputs = [\"src/a.txt\"]", "inputs = [\"src/a.txt\", \"src/secret.txt\"]");
    ws.write("p/prova.toml", &declared);
    let fixed = prova(&ws, ["run", "sneaky", "--all", "--verify=inputs", "--json"]).run();
    fixed.assert_code(0);
    assert_eq!(verdict_names(&fixed, "p#sneaky"), ["proven-complete"], "{fixed}");
    assert_eq!(ws.read("p/out/sneaky.txt"), "s3cret\n");
}

#[test]
fn a_read_of_another_projects_file_is_named_workspace_relative() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = prova_tests::TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"apps/*\", \"libs/*\"]\n")
        .file("libs/shared/data.txt", "shared\n")
        .file(
            "apps/web/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && cat ../../libs/shared/data.txt > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("apps/web/src/main.txt", "main\n");
    let out = prova(&ws, ["run", "build", "-p", "web", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "web#build");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(["libs/shared/data.txt"]), "{out}");
}

#[test]
fn complete_tasks_and_probes_of_missing_files_are_proven_complete() {
    if !sandbox_or_skip() {
        return;
    }
    // `down` reads its upstream's output: an upstream artifact, not an undeclared input.
    let down = task_with(
        "down",
        "mkdir -p dn && cat out/complete.txt > dn/down.txt",
        &["dn/**"],
        "deps = [\"complete\"]",
    );
    let lint = task("lint", "cat src/a.txt", &[]);
    let ws = workspace(&format!("{}{}{down}{lint}", complete(), probe()));
    let out = prova(
        &ws,
        ["run", "complete", "probe", "down", "lint", "--all", "--verify=inputs", "--json"],
    )
    .run();
    out.assert_code(0);
    for t in ["p#complete", "p#probe", "p#down", "p#lint"] {
        assert_eq!(verdict_names(&out, t), ["proven-complete"], "{t}\n{out}");
        assert_eq!(cache_word(&out, t), "saved", "{out}");
    }
    let text = prova(
        &ws,
        ["run", "complete", "probe", "down", "lint", "--all", "--force", "--verify=inputs"],
    )
    .run();
    text.assert_code(0);
    assert_eq!(verify_line(&text), "Verify:  4 inputs complete");
}

#[test]
fn verify_all_gives_the_inputs_verdict_first_then_determinism() {
    if !sandbox_or_skip() {
        return;
    }
    let clock = task("clock", "mkdir -p out && date +%s%N >> out/clock.txt", &["out/clock.txt"]);
    let lint = task("lint", "cat src/a.txt", &[]);
    let ws = workspace(&format!("{}{clock}{lint}{}", complete(), sneaky()))
        .file("p/src/secret.txt", "s3cret\n");
    let out = prova(
        &ws,
        [
            "run",
            "complete",
            "clock",
            "lint",
            "sneaky",
            "--all",
            "--verify=all",
            "--continue",
            "--json",
        ],
    )
    .run();
    out.assert_code(1);
    let expect = [
        ("p#complete", vec!["proven-complete", "proven-deterministic"]),
        ("p#clock", vec!["proven-complete", "nondeterministic"]),
        ("p#lint", vec!["proven-complete", "no-outputs"]),
        // Failed in the sandbox: nothing saved, so no determinism proof.
        ("p#sneaky", vec!["undeclared-inputs"]),
    ];
    for (t, names) in expect {
        assert_eq!(verdict_names(&out, t), names, "{t}\n{out}");
        let streamed: Vec<String> = verdict_events(&out, t).iter().map(name).collect();
        assert_eq!(streamed, names, "{t}: the stream's order\n{out}");
    }
    let v = &prova_tests::verify::verdicts(&out, "p#clock")[1];
    assert_eq!(v["changed"], serde_json::json!(["p/out/clock.txt"]), "{out}");
    // The canonical bytes are the sandboxed first run's, restored into the workspace.
    let canonical = ws.read("p/out/clock.txt");
    let diff = v["files"][0]["diff"].as_str().expect("a diff");
    assert!(diff.lines().any(|l| l == format!("-{}", canonical.trim_end())), "{diff}");

    let text =
        prova(&ws, ["run", "complete", "clock", "lint", "--all", "--force", "--verify=all"]).run();
    text.assert_code(1);
    assert_eq!(
        verify_line(&text),
        "Verify:  1 proven deterministic · 3 inputs complete · 1 nondeterministic · 1 no outputs"
    );
}

#[test]
fn the_outputs_of_an_inputs_proof_run_are_in_the_workspace() {
    if !sandbox_or_skip() {
        return;
    }
    // `show` is not cached, so it runs in place: it reads the proven task's output from the
    // workspace, where the exec root's outputs must have been brought back.
    let show =
        "[tasks.show]\ncommand = \"cat out/complete.txt\"\ndeps = [\"complete\"]\ncache = false\n";
    let ws = workspace(&format!("{}{show}", complete()));
    let out = prova(&ws, ["run", "show", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_eq!(verdict_names(&out, "p#complete"), ["proven-complete"], "{out}");
    assert_eq!(ws.read("p/out/complete.txt"), "hello\n");
    assert_eq!(out.status_of("p#show"), "succeeded", "{out}");
    assert_eq!(out.output_of("p#show"), "hello\n", "{out}");
}

#[test]
fn inputs_and_all_runs_share_entries_and_keys_with_plain_runs() {
    if !sandbox_or_skip() {
        return;
    }
    let tasks = ["p#complete", "p#probe"];
    let ws = workspace(&format!("{}{}", complete(), probe()));
    // A proof run's entries serve a plain run …
    let proof = prova(&ws, ["run", "complete", "probe", "--all", "--verify=all", "--json"]).run();
    proof.assert_code(0);
    let plain = prova(&ws, ["run", "complete", "probe", "--all", "--json"]).run();
    plain.assert_code(0);
    for t in tasks {
        assert_eq!(cache_word(&proof, t), "saved", "{proof}");
        assert_eq!(cache_word(&plain, t), "hit", "{plain}");
        assert_eq!(key(&plain, t), key(&proof, t), "{t}");
    }
    // … and a plain run's serve a proof run (which says it did not verify them).
    let ws2 = workspace(&format!("{}{}", complete(), probe()));
    let plain2 = prova(&ws2, ["run", "complete", "probe", "--all", "--json"]).run();
    plain2.assert_code(0);
    for mode in ["--verify=inputs", "--verify=all"] {
        let proof2 = prova(&ws2, ["run", "complete", "probe", "--all", mode, "--json"]).run();
        proof2.assert_code(0);
        for t in tasks {
            assert_eq!(cache_word(&proof2, t), "hit", "{mode}\n{proof2}");
            assert_eq!(key(&proof2, t), key(&plain2, t), "{mode} {t}");
            assert_eq!(verdict_names(&proof2, t), ["not-verified"], "{mode}\n{proof2}");
        }
    }
    assert_eq!(key(&plain2, "p#complete"), key(&plain, "p#complete"), "same inputs, same key");
}

#[test]
fn without_a_sandbox_the_inputs_proof_is_an_error() {
    // A host where bubblewrap cannot run: `--verify=inputs` must refuse, not pass.
    let (_bin, path) = path_with_failing(&["bwrap"]);
    let ws = workspace(&complete());
    for mode in ["--verify=inputs", "--verify=all"] {
        let out = prova(&ws, ["run", "complete", "--all", mode]).env("PATH", &path).run();
        out.assert_code(2);
        out.assert_stderr_contains("--verify=inputs needs the bubblewrap sandbox");
        out.assert_stderr_contains("fake bwrap: refused");
        assert!(!ws.exists("p/out/complete.txt"), "nothing may run\n{out}");
    }
}

#[test]
fn without_strace_an_undeclared_read_is_caught_but_not_named() {
    if !sandbox_or_skip() {
        return;
    }
    // A host with the sandbox but no working tracer: the sandbox still denies the read (the
    // task fails), and the verdict says how to get the paths; a task that succeeds is not
    // claimed complete.
    let (_bin, path) = path_with_failing(&["strace"]);
    let ws = workspace(&format!("{}{}", sneaky(), complete())).file("p/src/secret.txt", "s\n");
    let out = prova(
        &ws,
        ["run", "sneaky", "complete", "--all", "--verify=inputs", "--continue", "--json"],
    )
    .env("PATH", &path)
    .run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#sneaky");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["traced"], false, "{out}");
    assert_eq!(v["paths"], serde_json::json!([]), "{out}");
    let v = only_verdict(&out, "p#complete");
    assert_eq!(name(&v), "not-verified", "{out}");
    assert!(v["reason"].as_str().is_some_and(|r| r.contains("strace")), "{v}");

    let text = prova(&ws, ["run", "sneaky", "--all", "--force", "--verify=inputs"])
        .env("PATH", &path)
        .run();
    text.assert_code(1);
    text.assert_stdout_contains("✗ p#sneaky — undeclared-inputs: an undeclared input was read, install strace for the paths");
}

#[test]
fn a_gitignored_file_an_input_pattern_matches_is_no_input_and_its_read_is_named() {
    // `inputs = ["src/**"]` beside a gitignored `src/cfg.local`: the key folds listed files
    // only, so an edit of it was served stale, and the proof passed (the pattern "matched").
    // `cat src/*` takes it in place (a listing); `cat src/cfg.local`, a direct read.
    if !sandbox_or_skip() {
        return;
    }
    for (cmd, outputs) in [
        ("mkdir -p out && (cat src/* || true) > out/all.txt", "out/all.txt"),
        ("mkdir -p out && (cat src/cfg.local 2>/dev/null || true) > out/one.txt", "out/one.txt"),
    ] {
        let t = task("build", cmd, &[outputs]).replace("[\"src/a.txt\"]", "[\"src/**\"]");
        let ws = workspace(&t).file(".gitignore", "*.local\n").file("p/src/cfg.local", "local\n");
        let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
        let v = only_verdict(&out, "p#build");
        assert_eq!(name(&v), "undeclared-inputs", "{cmd}\n{out}");
        assert!(v["paths"].to_string().contains("p/src/cfg.local"), "{cmd}: {v}");
        // Declared by name, an ignored file is listed and keyed: proven complete.
        let named = t.replace("[\"src/**\"]", "[\"src/**\", \"src/cfg.local\"]");
        ws.write("p/prova.toml", &named);
        let fixed =
            prova(&ws, ["run", "build", "--all", "--force", "--verify=inputs", "--json"]).run();
        assert_eq!(verdict_names(&fixed, "p#build"), ["proven-complete"], "{cmd}\n{fixed}");
    }
}
