//! Declared outputs inside the sandbox (issue 27): an output file at the project's root
//! (`tsconfig.tsbuildinfo`) leaves the project's `node_modules` and sources as they are; a
//! declared output directory can be removed and made again (`rm -rf dist && build`), nested
//! ones too; and what is not a declared output stays read-only and never reaches the
//! workspace. Also the `/etc` files a task may read on any host (`/etc/hostname`,
//! `/etc/machine-id`). Each holds under `--verify=all` locally and on a farm of bubblewrap
//! workers, with the bytes of a plain local run.

use prova_tests::cluster::Cluster;
use prova_tests::monorepo;
use prova_tests::tsmono::node_present;
use prova_tests::verify::{name, prova, sandbox_or_skip, verdict_names, verdicts};
use prova_tests::{Output, TempWorkspace};

/// `packages/p`, with its own `node_modules/y`, and a `build` running `command` with
/// `outputs`.
fn project(command: &str, outputs: &[&str]) -> TempWorkspace {
    let outputs: Vec<String> = outputs.iter().map(|o| format!("{o:?}")).collect();
    let ws = monorepo::root()
        .file("packages/p/package.json", "{ \"name\": \"p\", \"version\": \"1.0.0\" }\n")
        .file("packages/p/src/a.txt", "hello\n")
        .file(
            "packages/p/src/build.js",
            "const fs = require('fs');\n\
             const y = require('y');\n\
             fs.mkdirSync('dist', { recursive: true });\n\
             fs.writeFileSync('dist/out.txt', y + ':' + fs.readFileSync('src/a.txt', 'utf8'));\n",
        )
        .file(
            "packages/p/prova.toml",
            &format!(
                "[tasks.build]\ncommand = '{command}'\ninputs = [\"src/**\", \"package.json\"]\n\
                 outputs = [{}]\n",
                outputs.join(", ")
            ),
        );
    let ws = monorepo::installed(ws, "packages/p/node_modules/y", "y", "3");
    monorepo::link(&ws, "../packages/p", "node_modules/p");
    monorepo::git_init(&ws);
    ws
}

/// What a plain (in-place) local run of `ws`'s tasks leaves in its outputs: `files`, by path.
fn plain_bytes(ws: &TempWorkspace, files: &[&str]) -> Vec<(String, String)> {
    prova(ws, ["run", "build", "--all"]).run().assert_code(0);
    files.iter().map(|f| ((*f).to_owned(), ws.read(f))).collect()
}

#[track_caller]
fn assert_green(out: &Output, task: &str) {
    out.assert_code(0);
    let names = verdict_names(out, task);
    for want in ["proven-complete", "proven-deterministic"] {
        assert!(names.contains(&want.to_owned()), "{task}: {names:?}\n{out}");
    }
}

/// The cases: command, outputs, files to compare.
fn cases() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    vec![
        // tsc -b beside dist: an output file at the project's root.
        (
            "node src/build.js && echo built > tsconfig.tsbuildinfo",
            vec!["dist/**", "tsconfig.tsbuildinfo"],
            vec!["packages/p/dist/out.txt", "packages/p/tsconfig.tsbuildinfo"],
        ),
        // The common clean build.
        ("rm -rf dist && node src/build.js", vec!["dist/**"], vec!["packages/p/dist/out.txt"]),
        // A nested output directory, removed and made again.
        (
            "rm -rf build/out && mkdir -p build/out && cp src/a.txt build/out/a.txt",
            vec!["build/out/**"],
            vec!["packages/p/build/out/a.txt"],
        ),
        // Both at once, and the output file replaced by a rename rather than written.
        (
            "rm -rf dist && node src/build.js && echo 1 > dist/.info.tmp && mv dist/.info.tmp info.json",
            vec!["dist/**", "info.json"],
            vec!["packages/p/dist/out.txt", "packages/p/info.json"],
        ),
    ]
}

#[test]
fn an_output_file_at_the_project_root_keeps_its_node_modules_in_the_sandbox() {
    // Before: the project directory was bound writable over the root, hiding the tree
    // mounted at packages/p/node_modules: `Cannot find module 'y'`.
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let (cmd, outputs, files) = &cases()[0];
    let plain = plain_bytes(&project(cmd, outputs), files);
    let ws = project(cmd, outputs);
    let out = prova(&ws, ["run", "build", "--all", "--verify=all", "--json"]).run();
    assert_green(&out, "p#build");
    for (f, bytes) in &plain {
        assert_eq!(&ws.read(f), bytes, "{f}\n{out}");
    }
}

#[test]
fn a_declared_output_directory_can_be_removed_and_made_again_in_the_sandbox() {
    // Before: `rm: cannot remove 'dist': Read-only file system` (or busy: a mount point).
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    for (cmd, outputs, files) in &cases()[1..] {
        let plain = plain_bytes(&project(cmd, outputs), files);
        let ws = project(cmd, outputs);
        let out = prova(&ws, ["run", "build", "--all", "--verify=all", "--json"]).run();
        assert_green(&out, "p#build");
        for (f, bytes) in &plain {
            assert_eq!(&ws.read(f), bytes, "{cmd}: {f}\n{out}");
        }
    }
}

#[test]
fn what_is_not_a_declared_output_stays_read_only_and_out_of_the_workspace() {
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    // A write beside the outputs (the project's root is writable for tsconfig.tsbuildinfo):
    // reported, the task failed with the path named, and nothing of it in the workspace.
    let ws = project(
        "node src/build.js && echo built > tsconfig.tsbuildinfo && echo x > stray.txt",
        &["dist/**", "tsconfig.tsbuildinfo"],
    );
    let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let found: Vec<String> = verdicts(&out, "p#build").iter().map(name).collect();
    assert!(found.contains(&"undeclared-outputs".to_owned()), "{found:?}\n{out}");
    assert!(!ws.exists("packages/p/stray.txt"), "an undeclared write reached the workspace");
    assert_eq!(out.status_of("p#build"), "failed", "{out}");
    let note = out.report("p#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("outside its declared outputs: `packages/p/stray.txt`"), "{note}");
    assert!(!ws.exists("packages/p/tsconfig.tsbuildinfo"), "a failed task saved its outputs");

    // Sources, the project's tree and the manifest beside a writable output stay read-only:
    // each write fails in the sandbox, and the workspace keeps its bytes.
    for target in ["src/a.txt", "package.json", "node_modules/y/index.js"] {
        let ws = project(
            &format!(
                "echo built > tsconfig.tsbuildinfo && (echo tampered >> {target}) && mkdir -p dist"
            ),
            &["dist/**", "tsconfig.tsbuildinfo"],
        );
        let before = ws.read(&format!("packages/p/{target}"));
        let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
        assert_eq!(out.status_of("p#build"), "failed", "{target} was writable\n{out}");
        assert_eq!(ws.read(&format!("packages/p/{target}")), before, "{target}");
        // Nor can the output arrangement remove them.
        let ws = project(
            &format!("rm -rf dist && rm -rf {target} && mkdir -p dist"),
            &["dist/**", "tsconfig.tsbuildinfo"],
        );
        let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
        assert_eq!(out.status_of("p#build"), "failed", "{target} was removable\n{out}");
        assert!(ws.exists(&format!("packages/p/{target}")), "{target}");
    }
}

/// Reads the `/etc` files every host has, and embeds none of them.
const READS_ETC: &str = "mkdir -p dist && cat /etc/hostname /etc/machine-id > /dev/null && \
                         test \"$(cat /etc/hostname)\" = \"$(hostname)\" && cp src/a.txt dist/a.txt";

#[test]
fn etc_hostname_and_machine_id_are_there_in_the_sandbox_and_the_rerun_perturbs_them() {
    // Before: neither file existed in the sandbox (the re-run had /etc/hostname only).
    if !sandbox_or_skip() {
        return;
    }
    let ws = project(READS_ETC, &["dist/**"]);
    let out = prova(&ws, ["run", "build", "--all", "--verify=all", "--json"]).run();
    assert_green(&out, "p#build");

    // A task that embeds the machine's identity is not a function of its inputs: the
    // re-run, perturbed, says so (as it does for the hostname).
    for file in ["/etc/machine-id", "/etc/hostname"] {
        let ws = project(&format!("mkdir -p dist && cat {file} > dist/id.txt"), &["dist/**"]);
        let out = prova(&ws, ["run", "build", "--all", "--verify", "--json"]).run();
        out.assert_code(1);
        let names = verdict_names(&out, "p#build");
        assert!(names.contains(&"nondeterministic".to_owned()), "{file}: {names:?}\n{out}");
    }
}

#[test]
fn every_output_arrangement_and_the_etc_files_prove_on_a_bwrap_farm_with_local_bytes() {
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let farm = Cluster::builder().workers(2).start();
    let mut all = cases();
    all.push((
        "mkdir -p dist && cat /etc/hostname /etc/machine-id > /dev/null && cp src/a.txt dist/a.txt",
        vec!["dist/**"],
        vec!["packages/p/dist/a.txt"],
    ));
    for (cmd, outputs, files) in &all {
        let plain = plain_bytes(&project(cmd, outputs), files);
        let ws = project(cmd, outputs);
        let out = farm
            .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--force", "--verify=all", "--json"])
            .run();
        assert_green(&out, "p#build");
        for (f, bytes) in &plain {
            assert_eq!(&ws.read(f), bytes, "{cmd}: {f}\n{out}");
        }
    }
}
