//! A traced run sees every lookup its task makes, io_uring's too. A lookup submitted through
//! io_uring (`IORING_OP_OPENAT`, `IORING_OP_STATX`) is done by the kernel's io_uring workers,
//! not by a call of the task's process, so strace never saw it: an undeclared read or probe
//! made that way passed the inputs proof, and a `sandbox = true` task read an empty stand-in
//! (or nothing) and was saved. libuv does this under `UV_USE_IO_URING=1`, as may any tool on
//! tokio-uring or liburing. A traced task's `io_uring_setup` now fails with `ENOSYS`, so it
//! falls back to the calls the trace follows, as those libraries do.
//!
//! The tool here is `tests/helpers/uring_read.c`, built with the system's C compiler.

use std::path::Path;

use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip, workspace};

/// `tests/helpers/uring_read.c` built into `dest`; `None` (the suite skipped) without a C
/// compiler.
fn build_tool(dest: &Path) -> Option<()> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("helpers/uring_read.c");
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("creating {parent:?}: {e}"));
    }
    let built = std::process::Command::new("cc").arg("-O1").arg("-o").arg(dest).arg(&src).status();
    match built {
        Ok(s) if s.success() => Some(()),
        other => {
            prova_tests::skip_for_missing(&format!(
                "a C compiler (`cc`) to build {src:?}: {other:?}"
            ));
            None
        }
    }
}

/// A workspace whose `p#task` runs `command` with the helper at `p/tool/uring_read`, declared
/// as an input beside `src/a.txt`, writing `out/**`.
fn uring_workspace(command: &str, extra: &str) -> Option<prova_tests::TempWorkspace> {
    let toml = format!(
        "[tasks.task]\ncommand = \"{command}\"\ninputs = [\"src/a.txt\", \"tool/uring_read\"]\n\
         outputs = [\"out/**\"]\n{extra}\n"
    );
    let ws = workspace(&toml);
    build_tool(&ws.path("p/tool/uring_read"))?;
    Some(ws)
}

fn note(out: &prova_tests::Output, task: &str) -> String {
    out.report(task)["note"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_sandboxed_task_reading_an_undeclared_file_through_io_uring_fails() {
    if !sandbox_or_skip() {
        return;
    }
    // `secret.txt` directly in the project directory (an empty stand-in in the root: its name
    // is keyed), and `src/secret.txt` (absent from the root).
    for secret in ["secret.txt", "src/secret.txt"] {
        let command = format!("mkdir -p out && tool/uring_read cat {secret} > out/s.txt");
        let Some(ws) = uring_workspace(&command, "sandbox = true") else { return };
        ws.write(&format!("p/{secret}"), "s3cret\n");
        let out = prova(&ws, ["run", "task", "--all", "--json"]).run();
        out.assert_code(1);
        assert_eq!(out.status_of("p#task"), "failed", "{secret}\n{out}");
        assert_eq!(
            note(&out, "p#task"),
            format!(
                "`sandbox = true`: it read undeclared inputs: `p/{secret}` (declare them in \
                 `inputs`)"
            ),
            "{out}"
        );
        assert!(!ws.exists("p/out/s.txt"), "nothing of it was saved or restored: {secret}");
    }
}

#[test]
fn a_probe_and_a_read_through_io_uring_are_named_by_the_inputs_proof() {
    if !sandbox_or_skip() {
        return;
    }
    // A probe of an absent path, a read of a present one, and a read of another project's file.
    let cases = [
        ("tool/uring_read test src/local.cfg > out/o.txt", "p/src/local.cfg", None),
        (
            "tool/uring_read cat src/secret.txt > out/o.txt",
            "p/src/secret.txt",
            Some("p/src/secret.txt"),
        ),
        ("tool/uring_read cat ../q/data.txt > out/o.txt", "q/data.txt", Some("q/data.txt")),
    ];
    for (command, named, present) in cases {
        let command = format!("mkdir -p out && {command}");
        let Some(ws) = uring_workspace(&command, "") else { return };
        ws.write("prova.toml", "[workspace]\nprojects = [\"p\", \"q\"]\n");
        ws.write("q/prova.toml", "");
        if let Some(p) = present {
            ws.write(p, "s3cret\n");
        }
        for verify in ["--verify=inputs", "--verify=all"] {
            let out = prova(&ws, ["run", "task", "-p", "p", "--force", verify, "--json"]).run();
            out.assert_code(1);
            let v = prova_tests::verify::verdicts(&out, "p#task");
            let inputs = v.iter().find(|v| name(v) == "undeclared-inputs");
            let inputs = inputs.unwrap_or_else(|| panic!("{command} {verify}: {v:?}\n{out}"));
            assert_eq!(inputs["paths"], serde_json::json!([named]), "{command}\n{out}");
        }
    }
}

#[test]
fn node_with_libuv_io_uring_reading_an_undeclared_file_is_named() {
    if !sandbox_or_skip() {
        return;
    }
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        prova_tests::skip_for_missing("node");
        return;
    }
    // libuv submits file reads through io_uring when `UV_USE_IO_URING=1` (the variable is
    // declared, so it reaches the task).
    let ws = workspace(
        &"[tasks.task]\ncommand = \"mkdir -p out && node -e 'require(`fs`).readFile(`src/secret.txt`, \
         `utf8`, (e, d) => require(`fs`).writeFileSync(`out/o.txt`, e ? `absent` : d))'\"\n\
         inputs = [\"src/a.txt\"]\noutputs = [\"out/**\"]\nenv = [\"UV_USE_IO_URING\"]\n"
            .replace('`', "\\\""),
    )
    .file("p/src/secret.txt", "s3cret\n");
    let out = prova(&ws, ["run", "task", "--all", "--verify=inputs", "--json"])
        .env("UV_USE_IO_URING", "1")
        .run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#task");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(["p/src/secret.txt"]), "{out}");
}
