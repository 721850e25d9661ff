//! A task that names a workspace file by its absolute path (a declared variable holding it, a
//! config file with an absolute `extends`) is judged as if it had named the same path in its
//! exec root. Before, such a lookup failed in the root (the sandbox shows the root, not the
//! workspace), and the trace counted a path outside the root as a system file: a task that
//! went on without the file was proven complete, while a run in place read it. And a
//! workspace under `/usr` (`/usr/src/app`, a container's usual `WORKDIR`) was shown by the
//! sandbox's read-only `/usr`: a `sandbox = true` task read an undeclared file there and
//! was saved. Such a place is now covered by an empty tmpfs inside the sandbox.

use prova_tests::TempWorkspace;
use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip};

fn with_task(ws: TempWorkspace, command: &str, extra: &str) -> TempWorkspace {
    ws.file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/src/a.txt", "hello\n")
        .file("p/secret.txt", "TOPSECRET\n")
        .file(
            "p/prova.toml",
            &format!(
                "[tasks.abs]\ncommand = \"mkdir -p out && {command}\"\ninputs = [\"src/**\"]\n\
                 outputs = [\"out/**\"]\n{extra}\n"
            ),
        )
}

#[test]
fn a_read_of_the_workspace_by_its_absolute_path_is_named_by_the_inputs_proof() {
    if !sandbox_or_skip() {
        return;
    }
    // The path arrives through a declared variable; the task goes on without the file.
    let ws = with_task(
        TempWorkspace::new(),
        "(cat $CONFIG || echo none) > out/o.txt && (test -e $PROBE || echo absent) >> out/o.txt",
        "env = [\"CONFIG\", \"PROBE\"]",
    );
    let config = ws.path("p/secret.txt").to_string_lossy().into_owned();
    let probe = ws.path("p/conf/local.cfg").to_string_lossy().into_owned();
    let out = prova(&ws, ["run", "abs", "--all", "--verify=inputs", "--json"])
        .env("CONFIG", &config)
        .env("PROBE", &probe)
        .run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#abs");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    // The read, and the probe of an absent path the task acts on.
    assert_eq!(v["paths"], serde_json::json!(["p/conf/local.cfg", "p/secret.txt"]), "{out}");
}

#[test]
fn a_workspace_under_usr_is_not_readable_inside_the_sandbox() {
    if !sandbox_or_skip() {
        return;
    }
    let Some(ws) = TempWorkspace::new_in(std::path::Path::new("/usr/src")) else {
        prova_tests::skip_for_missing("a writable /usr/src (this test runs as root in CI)");
        return;
    };
    let abs = ws.root().join("p/secret.txt").to_string_lossy().into_owned();
    let ws = with_task(ws, &format!("cat {abs} > out/o.txt"), "sandbox = true");
    let out = prova(&ws, ["run", "abs", "--all", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#abs"), "failed", "{out}");
    let note = out.report("p#abs")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("`p/secret.txt`"), "{note}\n{out}");
    assert!(!ws.exists("p/out/o.txt"), "nothing saved or restored");
}

/// The same reads through a symlink to the workspace, or to a directory in it (a checkout
/// reached through `~/src -> /data/src`, a variable set from a logical `$PWD`): the trace
/// sees a path outside both the root and the workspace, which the sandbox does not show
/// either. Where it leads on this machine decides.
#[test]
fn a_read_of_the_workspace_through_a_symlink_to_it_is_named_by_the_inputs_proof() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = with_task(
        TempWorkspace::new(),
        "(cat $CONFIG || echo none) > out/o.txt && (test -e $PROBE || echo absent) >> out/o.txt",
        "env = [\"CONFIG\", \"PROBE\"]",
    );
    let links = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(ws.root(), links.path().join("ws")).unwrap();
    std::os::unix::fs::symlink(ws.path("p"), links.path().join("p")).unwrap();
    let config = links.path().join("ws/p/secret.txt").to_string_lossy().into_owned();
    let probe = links.path().join("p/conf/local.cfg").to_string_lossy().into_owned();
    let out = prova(&ws, ["run", "abs", "--all", "--verify=inputs", "--json"])
        .env("CONFIG", &config)
        .env("PROBE", &probe)
        .run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#abs");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(["p/conf/local.cfg", "p/secret.txt"]), "{out}");

    // `sandbox = true`: the confined run fails rather than save without the file.
    let confined = with_task(
        TempWorkspace::new(),
        "cat $CONFIG > out/o.txt || true",
        "sandbox = true\nenv = [\"CONFIG\"]",
    );
    std::os::unix::fs::symlink(confined.root(), links.path().join("confined")).unwrap();
    let config = links.path().join("confined/p/secret.txt").to_string_lossy().into_owned();
    let out = prova(&confined, ["run", "abs", "--all", "--json"]).env("CONFIG", &config).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#abs"), "failed", "{out}");
    let note = out.report("p#abs")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("`p/secret.txt`"), "{note}\n{out}");
}
