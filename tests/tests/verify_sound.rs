//! The inputs proof cannot be fooled (issue 11): every way a task can touch an undeclared
//! path — a shell glob, `find`, `ls`, `test -f`/`test -d`, a failed probe of a path that
//! does not exist — is named, and a task that fails with only its declared inputs visible is
//! never "proven complete". Also: `--verify --json`'s `task_finished` carries the verdicts.
//!
//! Each test asserts the verdict word, the path it names and the exit code. Every test that
//! needs the sandbox starts with [`sandbox_or_skip`].

use prova_tests::verify::{
    complete, name, only_verdict, prova, sandbox_or_skip, task, task_with, verdict_names, workspace,
};
use serde_json::json;

/// A workspace with `p/src/a.txt` (declared) and `p/src/b.txt` (not), and `tasks`.
fn with_undeclared_sibling(tasks: &str) -> prova_tests::TempWorkspace {
    workspace(tasks).file("p/src/b.txt", "bee\n")
}

/// Runs `task_name` with `--force --verify=inputs --json` and returns its one verdict, asserting the
/// exit code.
#[track_caller]
fn inputs_verdict(
    ws: &prova_tests::TempWorkspace,
    task_name: &str,
    code: i32,
) -> (prova_tests::Output, serde_json::Value) {
    let out = prova(ws, ["run", task_name, "--all", "--force", "--verify=inputs", "--json"]).run();
    out.assert_code(code);
    let v = only_verdict(&out, &format!("p#{task_name}"));
    (out, v)
}

#[test]
fn an_undeclared_file_reached_only_through_a_shell_glob_is_named_as_its_directory() {
    if !sandbox_or_skip() {
        return;
    }
    // In the sandbox the glob sees only `a.txt`, succeeds, and writes different bytes.
    let ws = with_undeclared_sibling(&task(
        "glob",
        "mkdir -p out && cat src/*.txt > out/all.txt",
        &["out/all.txt"],
    ));
    let (out, v) = inputs_verdict(&ws, "glob", 1);
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    // The listing, and (named by the survey run, which sees the workspace) the file read.
    assert_eq!(v["paths"], json!(["p/src/", "p/src/b.txt"]), "{out}");
    assert_eq!(out.summary()["ok"], false, "{out}");

    let text = prova(&ws, ["run", "glob", "--all", "--force", "--verify=inputs"]).run();
    text.assert_code(1);
    text.assert_stdout_contains("✗ p#glob — undeclared-inputs: p/src/");

    // Declared as a glob, the listing is complete.
    ws.write(
        "p/prova.toml",
        &task("glob", "mkdir -p out && cat src/*.txt > out/all.txt", &["out/all.txt"])
            .replace("inputs = [\"src/a.txt\"]", "inputs = [\"src/*.txt\"]"),
    );
    let (out, v) = inputs_verdict(&ws, "glob", 0);
    assert_eq!(name(&v), "proven-complete", "{out}");
}

#[test]
fn an_undeclared_file_reached_only_through_find_is_named() {
    if !sandbox_or_skip() {
        return;
    }
    // `find` walks `src/`: the undeclared `src/extra/` is missing from its listing.
    let ws =
        workspace(&task("walk", "mkdir -p out && find src | sort > out/list.txt", &["out/**"]))
            .file("p/src/extra/b.txt", "bee\n");
    let (out, v) = inputs_verdict(&ws, "walk", 1);
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    // The survey run sees `find` walk on into `src/extra/`, which the sandbox lacked.
    assert_eq!(v["paths"], json!(["p/src/", "p/src/extra/"]), "{out}");
}

#[test]
fn an_undeclared_file_reached_only_through_ls_is_named() {
    if !sandbox_or_skip() {
        return;
    }
    let ws =
        with_undeclared_sibling(&task("list", "mkdir -p out && ls src > out/ls.txt", &["out/**"]));
    let (out, v) = inputs_verdict(&ws, "list", 1);
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], json!(["p/src/"]), "{out}");
    // A task listing its own output directory only is not reading an input.
    let own = task("own", "mkdir -p out && touch out/x && ls out > out/ls.txt", &["out/**"]);
    let ws = with_undeclared_sibling(&own);
    let (out, v) = inputs_verdict(&ws, "own", 0);
    assert_eq!(name(&v), "proven-complete", "{out}");
}

#[test]
fn an_undeclared_file_tested_with_test_f_or_test_d_is_named() {
    if !sandbox_or_skip() {
        return;
    }
    // The task behaves differently when the file exists, but succeeds either way.
    let flag = task(
        "flag",
        "mkdir -p out && if test -f src/flag.txt; then echo on; else echo off; fi > out/f.txt",
        &["out/f.txt"],
    );
    let ws = workspace(&flag).file("p/src/flag.txt", "x\n");
    let (out, v) = inputs_verdict(&ws, "flag", 1);
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], json!(["p/src/flag.txt"]), "{out}");

    // A directory that exists in the workspace but holds nothing declared (below the
    // project directory: there, the key folds the names and the root shows them,
    // verify_entries.rs).
    let dir = task(
        "dir",
        "mkdir -p out && if test -d src/docs; then echo docs; else echo none; fi > out/d.txt",
        &["out/d.txt"],
    );
    let ws = workspace(&dir).file("p/src/docs/guide.md", "g\n");
    let (out, v) = inputs_verdict(&ws, "dir", 1);
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], json!(["p/src/docs"]), "{out}");
}

#[test]
fn a_failed_probe_of_a_path_that_does_not_exist_is_an_undeclared_input() {
    if !sandbox_or_skip() {
        return;
    }
    // Creating `etc/config.local` would change what the task writes, but not its key (the
    // key folds the entry names of the project directory, not of `etc/`: verify_entries.rs).
    let command = "mkdir -p out && if test -e etc/config.local; then echo custom; else echo default; fi > out/c.txt";
    let ws = workspace(&task("probe", command, &["out/c.txt"])).file("p/etc/other.txt", "o\n");
    let (out, v) = inputs_verdict(&ws, "probe", 1);
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], json!(["p/etc/config.local"]), "{out}");
    assert!(!ws.exists("p/etc/config.local"));

    // Declared (here as a glob that matches nothing yet), its appearance changes the key:
    // the probe is covered.
    let declared = task("probe", command, &["out/c.txt"])
        .replace("inputs = [\"src/a.txt\"]", "inputs = [\"src/a.txt\", \"etc/*.local\"]");
    ws.write("p/prova.toml", &declared);
    let (out, v) = inputs_verdict(&ws, "probe", 0);
    assert_eq!(name(&v), "proven-complete", "{out}");

    // An ignored path is never an input, so probing it is not a finding.
    ws.write("p/prova.toml", &task("probe", command, &["out/c.txt"]));
    ws.write(".gitignore", "*.local\n");
    let (out, v) = inputs_verdict(&ws, "probe", 0);
    assert_eq!(name(&v), "proven-complete", "{out}");
}

#[test]
fn a_task_that_fails_in_the_sandbox_with_no_nameable_path_is_not_proven() {
    if !sandbox_or_skip() {
        return;
    }
    // The task reads a file outside the workspace that the sandbox hides: no workspace path
    // can be named, but the task only works with more than its declared inputs visible.
    let outside = tempfile::tempdir().expect("a temporary directory");
    let marker = outside.path().join("marker.txt");
    std::fs::write(&marker, "m\n").expect("writing the marker");
    let command =
        format!("echo checking the marker && mkdir -p out && cat {} > out/m.txt", marker.display());
    let ws = workspace(&task("outside", &command, &["out/m.txt"]));
    // Unsandboxed it succeeds.
    prova(&ws, ["run", "outside", "--all"]).run().assert_code(0);

    let out = prova(&ws, ["run", "outside", "--all", "--force", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#outside"), "failed", "{out}");
    let v = only_verdict(&out, "p#outside");
    assert_eq!(name(&v), "sandbox-failed", "{out}");
    assert_eq!(v["reason"], "exit code 1", "{out}");
    let tail: Vec<String> = v["log_tail"]
        .as_array()
        .unwrap_or_else(|| panic!("no log tail\n{out}"))
        .iter()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect();
    assert!(tail.iter().any(|l| l == "checking the marker"), "{tail:?}");
    assert!(tail.iter().any(|l| l.contains("No such file or directory")), "{tail:?}");

    let text = prova(&ws, ["run", "outside", "--all", "--force", "--verify=inputs"]).run();
    text.assert_code(1);
    text.assert_stdout_contains(
        "✗ p#outside — sandbox-failed: fails with only its declared inputs visible (exit code 1)",
    );
    let lines = text.task_lines("p#outside");
    assert!(
        lines.iter().any(|l| l.starts_with("verify: FAILS with only its declared inputs visible")),
        "{text}"
    );
    assert!(lines.iter().any(|l| l.trim() == "| checking the marker"), "{text}");
    assert!(!text.stdout.contains("proven complete"), "{text}");
}

#[test]
fn a_task_that_times_out_in_the_sandbox_is_not_proven() {
    if !sandbox_or_skip() {
        return;
    }
    // Waits for a file outside the workspace that the sandbox hides: it times out there.
    let outside = tempfile::tempdir().expect("a temporary directory");
    let marker = outside.path().join("ready");
    std::fs::write(&marker, "").expect("writing the marker");
    let command = format!(
        "mkdir -p out && until test -e {}; do sleep 0.05; done && echo ok > out/t.txt",
        marker.display()
    );
    let ws = workspace(&task_with("wait", &command, &["out/t.txt"], "timeout = \"2s\""));
    prova(&ws, ["run", "wait", "--all"]).run().assert_code(0);
    let out = prova(&ws, ["run", "wait", "--all", "--force", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#wait");
    assert_eq!(name(&v), "sandbox-failed", "{out}");
    assert!(v["reason"].as_str().is_some_and(|r| r.contains("timed out")), "{v}");
}

#[test]
fn a_task_that_fails_in_the_sandbox_on_an_undeclared_read_shows_its_log() {
    if !sandbox_or_skip() {
        return;
    }
    let sneaky = task("sneaky", "mkdir -p out && cat src/b.txt > out/s.txt", &["out/s.txt"]);
    let ws = with_undeclared_sibling(&sneaky);
    let (out, v) = inputs_verdict(&ws, "sneaky", 1);
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], json!(["p/src/b.txt"]), "{out}");
    assert_eq!(v["failed"], "exit code 1", "{out}");
    let tail = v["log_tail"].as_array().unwrap_or_else(|| panic!("no log tail\n{out}"));
    assert!(tail.iter().any(|l| l.as_str().is_some_and(|l| l.contains("src/b.txt"))), "{tail:?}");
}

#[test]
fn json_task_finished_carries_the_tasks_verdicts() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&complete());
    for (mode, expect) in [
        ("--verify", vec!["proven-deterministic"]),
        ("--verify=inputs", vec!["proven-complete"]),
        ("--verify=all", vec!["proven-complete", "proven-deterministic"]),
    ] {
        let out = prova(&ws, ["run", "complete", "--all", "--force", mode, "--json"]).run();
        out.assert_code(0);
        assert_eq!(verdict_names(&out, "p#complete"), expect, "{mode}\n{out}");
        let finished: Vec<_> = out
            .events()
            .into_iter()
            .filter(|e| e["event"] == "task_finished" && e["task"] == "p#complete")
            .collect();
        assert_eq!(finished.len(), 1, "{mode}\n{out}");
        let names: Vec<String> = finished[0]["verdicts"]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: no verdicts\n{out}"))
            .iter()
            .map(name)
            .collect();
        assert_eq!(names, expect, "{mode}: task_finished\n{out}");
    }
}

#[test]
fn a_task_asking_who_and_where_it_is_can_be_proven_deterministic() {
    if !sandbox_or_skip() {
        return;
    }
    // The re-run's user (uid 4242 under the sandbox) has a name, and its hostname resolves;
    // the task's outputs do not depend on either, so it is deterministic.
    let command = "mkdir -p out && whoami > /dev/null && id -gn > /dev/null && getent hosts $(hostname) > /dev/null && test $(cat /etc/hostname) = $(hostname) && cat src/a.txt > out/w.txt";
    let ws = workspace(&task("who", command, &["out/w.txt"]));
    let out = prova(&ws, ["run", "who", "--all", "--force", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(verdict_names(&out, "p#who"), ["proven-deterministic"], "{out}");
}

#[test]
fn an_absolute_symlink_into_the_workspace_is_an_input_like_any_other() {
    if !sandbox_or_skip() {
        return;
    }
    // `p/src/link.txt -> <workspace>/p/src/a.txt`: it was refused as "leads outside the
    // workspace" in exec roots, and its key held the checkout's absolute path.
    let make = |ws: &prova_tests::TempWorkspace| {
        std::os::unix::fs::symlink(ws.path("p/src/a.txt"), ws.path("p/src/link.txt")).unwrap();
    };
    let toml = task("cat", "mkdir -p out && cat src/link.txt > out/x.txt", &["out/x.txt"])
        .replace("inputs = [\"src/a.txt\"]", "inputs = [\"src/a.txt\", \"src/link.txt\"]");
    let ws = workspace(&toml);
    make(&ws);
    let (out, v) = inputs_verdict(&ws, "cat", 0);
    assert_eq!(name(&v), "proven-complete", "{out}");
    assert_eq!(ws.read("p/out/x.txt"), "hello\n");
    let (out, _) = {
        let o = prova(&ws, ["run", "cat", "--all", "--force", "--verify", "--json"]).run();
        o.assert_code(0);
        (o, ())
    };
    assert_eq!(verdict_names(&out, "p#cat"), ["proven-deterministic"], "{out}");

    // The same workspace checked out elsewhere has the same key.
    let other = workspace(&toml);
    make(&other);
    let a = prova(&ws, ["show", "p#cat", "--json"]).run();
    let b = prova(&other, ["show", "p#cat", "--json"]).run();
    let key = |o: &prova_tests::Output| -> String {
        let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("show --json");
        v["key"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(key(&a), key(&b), "the key depends on where the workspace is");
}
