//! Per-task `sandbox = true` (issue 19): the task's every execution runs as the inputs proof
//! runs it — in an exec root with only its declared inputs, under bubblewrap, traced — with or
//! without `--verify`, and an undeclared read, a write outside its outputs, or a failure with
//! only its declared inputs visible fails it; nothing of it is saved. Its outputs come back
//! into the workspace through the cache; it is not keyed.

use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip, task, task_with, workspace};

/// Reads `src/secret.txt`, which it does not declare, and succeeds without it.
fn tolerant_sandboxed() -> String {
    task_with(
        "sneaky",
        "mkdir -p out && (cat src/secret.txt 2>/dev/null || true) && cat src/a.txt > out/s.txt",
        &["out/s.txt"],
        "sandbox = true",
    )
}

fn note(out: &prova_tests::Output, task: &str) -> String {
    out.report(task)["note"].as_str().unwrap_or_default().to_owned()
}

/// What a run without `--verify` says of `p#sneaky`, locally and on the farm alike: failed,
/// the undeclared read named in its note, no verdicts.
#[track_caller]
fn assert_sneaky_failed(out: &prova_tests::Output) {
    out.assert_code(1);
    assert_eq!(out.status_of("p#sneaky"), "failed", "{out}");
    let why = note(out, "p#sneaky");
    assert_eq!(
        why,
        "`sandbox = true`: it read undeclared inputs: `p/src/secret.txt` (declare them in `inputs`)",
        "{out}"
    );
    assert!(out.report("p#sneaky")["verdicts"].as_array().is_none_or(Vec::is_empty), "{out}");
    assert!(!out.events().iter().any(|e| e["event"] == "verdict"), "{out}");
}

#[test]
fn an_undeclared_read_fails_a_sandboxed_task_in_a_plain_run_and_nothing_is_saved() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&tolerant_sandboxed()).file("p/src/secret.txt", "s3cret\n");
    for _ in 0..2 {
        // Nothing saved: the second run fails the same way.
        let out = prova(&ws, ["run", "sneaky", "--all", "--json"]).run();
        assert_sneaky_failed(&out);
    }
    // The same task without the flag is not judged in a plain run.
    let plain = workspace(&tolerant_sandboxed().replace("sandbox = true\n", ""))
        .file("p/src/secret.txt", "s3cret\n");
    prova(&plain, ["run", "sneaky", "--all"]).run().assert_code(0);
}

#[test]
fn a_sandboxed_task_that_declares_its_inputs_runs_saves_and_lands_in_the_workspace() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&task_with(
        "build",
        "mkdir -p out && cat src/a.txt > out/b.txt",
        &["out/b.txt"],
        "sandbox = true",
    ));
    let out = prova(&ws, ["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    assert_eq!(ws.read("p/out/b.txt"), "hello\n", "the outputs came back into the workspace");
    let again = prova(&ws, ["run", "build", "--all", "--json"]).run();
    again.assert_code(0);
    assert_eq!(again.cache_of("p#build"), "hit", "{again}");
}

#[test]
fn a_sandboxed_task_writing_outside_its_outputs_or_failing_in_the_sandbox_fails() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&format!(
        "{}{}",
        task_with(
            "stray",
            "mkdir -p out stray && cat src/a.txt > out/o.txt && echo x > stray/x.txt",
            &["out/o.txt"],
            "sandbox = true",
        ),
        task_with(
            "needs",
            "mkdir -p out && cat src/secret.txt > out/n.txt",
            &["out/n.txt"],
            "sandbox = true",
        ),
    ))
    .file("p/src/secret.txt", "s3cret\n");
    let out = prova(&ws, ["run", "stray", "needs", "--all", "--continue", "--json"]).run();
    out.assert_code(1);
    let stray = note(&out, "p#stray");
    assert!(stray.contains("outside its declared outputs") && stray.contains("p/stray"), "{stray}");
    assert_eq!(out.status_of("p#needs"), "failed", "{out}");
    let needs = note(&out, "p#needs");
    assert!(needs.contains("`sandbox = true`") && needs.contains("secret"), "{needs}");
    assert!(!ws.path("p/stray").exists(), "an exec root's stray write never reaches the workspace");
}

/// Probes `local.env` (gitignored, present in the workspace) and goes on without it; with
/// `then` appended (a failure, or nothing).
fn probes_ignored(then: &str) -> prova_tests::TempWorkspace {
    let command = format!(
        "mkdir -p out && (cat local.env 2>/dev/null || true) && cat src/a.txt > out/s.txt{then}"
    );
    workspace(&task_with("probe", &command, &["out/s.txt"], "sandbox = true"))
        .file(".gitignore", "p/local.env\n")
        .file("p/local.env", "TOKEN=1\n")
}

#[test]
fn a_confined_run_that_succeeds_answers_for_its_exec_root_only_and_a_failure_is_surveyed() {
    if !sandbox_or_skip() {
        return;
    }
    // A confined task never sees `local.env`, in any execution: what it produced follows
    // from its exec root, which its key folds. A success is not surveyed (the inputs
    // proof's survey would name the file), so it succeeds.
    let ws = probes_ignored("");
    let out = prova(&ws, ["run", "probe", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("p#probe"), "saved", "{out}");
    // A failed one is surveyed after it failed: the note names every read of the workspace
    // it made, the gitignored file included.
    let ws = probes_ignored(" && cat src/missing.txt");
    let out = prova(&ws, ["run", "probe", "--all", "--json"]).run();
    out.assert_code(1);
    let why = note(&out, "p#probe");
    assert!(why.contains("`p/local.env`") && why.contains("`p/src/missing.txt`"), "{why}\n{out}");
    // Under --verify=inputs the failed lookup of a workspace file leads to the survey,
    // which names it for the succeeding task.
    let ws = probes_ignored("");
    let out = prova(&ws, ["run", "probe", "--all", "--json", "--verify=inputs"]).run();
    out.assert_code(1);
    assert_eq!(name(&only_verdict(&out, "p#probe")), "undeclared-inputs", "{out}");
    assert!(note(&out, "p#probe").contains("`p/local.env`"), "{out}");
}

/// Sandboxed tasks that write beside their `dist-<name>/**` (whose parent, `p`, the sandbox
/// makes writable so that `rm -rf dist-<name>` works): a file, a new directory, a symlink;
/// and the path each must be named by.
fn routes_out() -> (String, [(&'static str, &'static str); 3]) {
    let t = |name: &str, command: &str| {
        let dist = format!("dist-{name}");
        let command = format!("mkdir -p {dist} && {command}");
        task_with(name, &command, &[&format!("{dist}/**")], "sandbox = true")
    };
    let toml = [
        t("file", "echo x > notes.txt"),
        t("dir", "mkdir -p cache/deep && echo x > cache/deep/x.txt"),
        t("link", "ln -s src/a.txt alias"),
    ]
    .concat();
    (toml, [("p#file", "`p/notes.txt`"), ("p#dir", "`p/cache"), ("p#link", "`p/alias`")])
}

/// Each of [`routes_out`] failed, named what it wrote, saved nothing and left the workspace
/// as it was: locally and on the farm alike.
#[track_caller]
fn assert_routes_failed(ws: &prova_tests::TempWorkspace, out: &prova_tests::Output) {
    for (t, path) in routes_out().1 {
        assert_eq!(out.status_of(t), "failed", "{t} wrote outside its outputs\n{out}");
        let n = note(out, t);
        assert!(
            n.starts_with("`sandbox = true`: it wrote outside its declared outputs: ")
                && n.contains(path),
            "{t}: {n}\n{out}"
        );
        assert_ne!(out.cache_of(t), "saved", "{out}");
    }
    for leaked in ["p/notes.txt", "p/cache", "p/alias"] {
        assert!(!ws.exists(leaked), "{leaked} reached the workspace");
    }
}

#[test]
fn every_route_beside_the_outputs_fails_a_sandboxed_task() {
    if !sandbox_or_skip() {
        return;
    }
    let (toml, routes) = routes_out();
    let ws = workspace(&toml);
    let mut args = vec!["run"];
    args.extend(routes.map(|(t, _)| t.trim_start_matches("p#")));
    args.extend(["--all", "--continue", "--json"]);
    let out = prova(&ws, args).run();
    out.assert_code(1);
    assert_routes_failed(&ws, &out);
}

#[test]
fn under_verify_inputs_the_verdicts_come_with_the_failure() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = workspace(&tolerant_sandboxed()).file("p/src/secret.txt", "s3cret\n");
    let out = prova(&ws, ["run", "sneaky", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#sneaky");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(["p/src/secret.txt"]), "{out}");
}

#[test]
fn a_run_that_cannot_save_refuses_a_sandboxed_task_rather_than_run_it_unsandboxed() {
    let ws = workspace(&tolerant_sandboxed()).file("p/src/secret.txt", "s3cret\n");
    for flags in [&["--no-cache"][..], &["--cache", "local:r"][..]] {
        let mut args = vec!["run", "sneaky", "--all", "--json"];
        args.extend_from_slice(flags);
        let out = prova(&ws, args).run();
        out.assert_code(1);
        assert_eq!(out.report("p#sneaky")["attempts"], 0, "it must not run\n{out}");
        assert!(note(&out, "p#sneaky").contains("`sandbox = true`"), "{out}");
    }
    assert!(!ws.path("p/out").exists(), "nothing ran in place");
}

#[test]
fn sandbox_needs_a_cached_task_and_is_not_keyed() {
    for extra in ["sandbox = true\ncache = false", "sandbox = true\npersistent = true"] {
        let ws = workspace(&task_with("t", "true", &["out/t.txt"], extra));
        let out = prova(&ws, ["run", "t", "--all"]).run();
        out.assert_code(2);
        assert!(out.stderr.contains("`sandbox = true` needs the cache"), "{out}");
    }
    // Not keyed: the entry of a plain run is a hit once the flag is set.
    let plain = task("build", "mkdir -p out && cat src/a.txt > out/b.txt", &["out/b.txt"]);
    let ws = workspace(&plain);
    prova(&ws, ["run", "build", "--all"]).run().assert_code(0);
    ws.write("p/prova.toml", &format!("{plain}sandbox = true\n"));
    let out = prova(&ws, ["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
}

#[test]
fn a_task_running_its_package_json_script_may_be_sandboxed_and_a_group_may_not() {
    // The command of a task without one comes from package.json after the merge: the
    // check must see it (before, `sandbox = true` on such a task was "not cached").
    let ws = prova_tests::TempWorkspace::new()
        .file("package.json", r#"{"private": true, "workspaces": ["p"]}"#)
        .file(
            "p/package.json",
            r#"{"name": "p", "scripts": {"build": "mkdir -p out && cat src/a.txt > out/b.txt"}}"#,
        )
        .file("p/src/a.txt", "hello\n")
        .file(
            "prova.toml",
            "[workspace]\n[tasks.build]\nsandbox = true\ninputs = [\"src/**\"]\noutputs = [\"out/**\"]\n\
             [tasks.all]\ndeps = [\"build\"]\n",
        );
    prova(&ws, ["ls"]).run().assert_code(0);
    // A group runs nothing a sandbox could confine: still refused.
    ws.write("prova.toml", &format!("{}sandbox = true\n", ws.read("prova.toml")));
    let out = prova(&ws, ["ls"]).run();
    out.assert_code(2);
    assert!(out.stderr.contains("p#all") && out.stderr.contains("needs the cache"), "{out}");
}

#[test]
fn on_the_farm_a_sandboxed_task_is_judged_the_same_way() {
    if !sandbox_or_skip() {
        return;
    }
    let farm = prova_tests::cluster::Cluster::start(1);
    let ws = workspace(&format!(
        "{}{}{}",
        tolerant_sandboxed(),
        task_with(
            "clean",
            "mkdir -p out && cat src/a.txt > out/c.txt",
            &["out/c.txt"],
            "sandbox = true"
        ),
        routes_out().0,
    ))
    .file("p/src/secret.txt", "s3cret\n");
    let out =
        farm.run(&ws, ["sneaky", "clean", "file", "dir", "link", "--all", "--continue", "--json"]);
    // The same words as locally: the client judges what the farm saw against its workspace.
    assert_sneaky_failed(&out);
    assert_routes_failed(&ws, &out);
    assert_eq!(out.status_of("p#clean"), "succeeded", "no false finding on the farm\n{out}");
    assert_eq!(ws.read("p/out/c.txt"), "hello\n");
}

/// Writes the sandbox's `HOME` and the update-check switches it sees into `out/env.txt`;
/// with `extra` TOML lines.
fn env_dump(extra: &str) -> prova_tests::TempWorkspace {
    let command = "mkdir -p out && env | grep -e ^HOME= -e ^npm_config_update_notifier= \
                   -e ^NO_UPDATE_NOTIFIER= | sort > out/env.txt";
    workspace(&task_with("dump", command, &["out/env.txt"], &format!("sandbox = true\n{extra}")))
}

#[test]
fn a_sandbox_turns_tools_update_checks_off_unless_the_task_declares_the_switch() {
    if !sandbox_or_skip() {
        return;
    }
    // A fresh, empty HOME and no network: npm would look for its own update in every
    // execution (and fail). The switches are set for it, never keyed.
    let ws = env_dump("");
    prova(&ws, ["run", "dump", "--all"]).run().assert_code(0);
    assert_eq!(
        ws.read("p/out/env.txt"),
        "HOME=/tmp\nNO_UPDATE_NOTIFIER=1\nnpm_config_update_notifier=false\n"
    );
    // A declared name keeps its value: the host's, or unset when the host has none.
    let ws = env_dump("env = [\"npm_config_update_notifier\", \"NO_UPDATE_NOTIFIER\"]");
    let out = prova(&ws, ["run", "dump", "--all"])
        .env("npm_config_update_notifier", "true")
        .env_remove("NO_UPDATE_NOTIFIER")
        .run();
    out.assert_code(0);
    assert_eq!(ws.read("p/out/env.txt"), "HOME=/tmp\nnpm_config_update_notifier=true\n", "{out}");
}

/// A directory outside the system paths holding `tool` (as `~/.nvm/…/bin` holds `node`):
/// it copies `src/a.txt` to `out/a.txt`.
fn toolchain() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new().prefix("prova-e2e-toolchain-").tempdir().expect("dir");
    let tool = dir.path().join("tool");
    std::fs::write(&tool, "#!/bin/sh\nmkdir -p out && cat src/a.txt > out/a.txt\n").expect("w");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

#[test]
fn a_sandboxed_task_runs_the_program_its_path_names_outside_the_system_paths() {
    if !sandbox_or_skip() {
        return;
    }
    // Before, the sandbox showed only /usr and the system paths: `tool` was not found inside
    // (and a `node` both there and in /usr/bin ran Debian's, under a key folding the other).
    let tools = toolchain();
    let path = format!("{}:{}", tools.path().display(), std::env::var("PATH").unwrap_or_default());
    let ws = workspace(&task_with("t", "tool", &["out/a.txt"], "sandbox = true"));
    let out = prova(&ws, ["run", "t", "--all", "--json"]).env("PATH", &path).run();
    out.assert_code(0);
    assert_eq!(ws.read("p/out/a.txt"), "hello\n", "{out}");
    // Under the inputs proof too, and its determinism re-run.
    let ws = workspace(&task("t", "tool", &["out/a.txt"]));
    let out = prova(&ws, ["run", "t", "--all", "--json", "--verify=all"]).env("PATH", &path).run();
    out.assert_code(0);
    assert_eq!(ws.read("p/out/a.txt"), "hello\n", "{out}");
}

#[test]
fn a_path_naming_the_workspace_does_not_show_it_in_the_sandbox() {
    if !sandbox_or_skip() {
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    // `tool` lives in the workspace's own `bin/`, which the task does not declare: on the
    // host PATH it runs, in the sandbox the directory is not there.
    let ws = workspace(&task_with("t", "tool", &["out/a.txt"], "sandbox = true"))
        .file("bin/tool", "#!/bin/sh\nmkdir -p out && cat src/a.txt > out/a.txt\n");
    std::fs::set_permissions(ws.path("bin/tool"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    for dir in [ws.path("bin"), ws.path("")] {
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
        let out = prova(&ws, ["run", "t", "--all", "--json"]).env("PATH", &path).run();
        out.assert_code(1);
        assert_eq!(out.status_of("p#t"), "failed", "{}: {out}", dir.display());
    }
}

#[test]
fn the_survey_after_a_divergence_runs_the_same_toolchain() {
    if !sandbox_or_skip() {
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    // `chain`, from a toolchain outside the system paths, reads an undeclared list and then
    // the file it names: the sandboxed run sees only the first lookup fail; the survey (the
    // whole workspace visible) must run `chain` too to name the second.
    let tools = tempfile::Builder::new().prefix("prova-e2e-toolchain-").tempdir().expect("dir");
    let chain = tools.path().join("chain");
    std::fs::write(
        &chain,
        "#!/bin/sh\nf=$(cat src/list.txt 2>/dev/null) && cat \"src/$f\" >/dev/null\n\
         mkdir -p out && cat src/a.txt > out/a.txt\n",
    )
    .expect("w");
    std::fs::set_permissions(&chain, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", tools.path().display(), std::env::var("PATH").unwrap_or_default());
    let ws = workspace(&task("t", "chain", &["out/a.txt"]))
        .file("p/src/list.txt", "b.txt")
        .file("p/src/b.txt", "b\n");
    let out =
        prova(&ws, ["run", "t", "--all", "--json", "--verify=inputs"]).env("PATH", &path).run();
    let v = only_verdict(&out, "p#t");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(["p/src/b.txt", "p/src/list.txt"]), "{out}");
}
