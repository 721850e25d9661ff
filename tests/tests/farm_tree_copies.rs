//! A worker without a sandbox (`--sandbox=none`) mirrors an installed tree into each exec
//! root with symlinks to its copy of the tree, and nothing stops a task from writing through
//! them (a tool's cache under `node_modules/.cache`, a patch, a postinstall). The worker kept
//! one copy per tree digest, so every later task on it read the changed copy under the
//! tree's digest, and its outputs were saved under keys of the right inputs: wrong bytes.
//!
//! Now each running task has a copy of its own, checked at its end (`worker::treecopies`): a
//! task that wrote into it wrote outside its declared outputs and fails naming the path, the
//! copy is removed, and the next task reads the tree as keyed.

use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, Sandbox};

/// What `q`'s build writes: the listing and bytes of `node_modules/dep` as it sees them.
const READ: &str = "mkdir -p dist && (cd ../node_modules/dep && ls -lR --time-style=+ . && \
                    cat index.js) > dist/out.txt 2>&1; true";

/// Projects `w0…` (each writing into the tree in its own way) and `q` (reading it), beside a
/// root `node_modules` (a tree: there is a root `package.json`).
fn workspace(writers: &[&str]) -> TempWorkspace {
    let names: Vec<String> = (0..writers.len()).map(|i| format!("\"w{i}\"")).collect();
    let mut ws = TempWorkspace::new()
        .file("package.json", r#"{ "name": "root", "private": true }"#)
        .file("prova.toml", &format!("[workspace]\nprojects = [{}, \"q\"]\n", names.join(", ")))
        .file("node_modules/dep/index.js", "one\n")
        .file("node_modules/dep/package.json", r#"{ "name": "dep" }"#)
        .file("node_modules/.cache/keep", "")
        .file("q/src/a.txt", "q\n")
        .file("q/prova.toml", &task(READ));
    for (i, w) in writers.iter().enumerate() {
        ws = ws.file(&format!("w{i}/src/a.txt",), &format!("{i}\n")).file(
            &format!("w{i}/prova.toml"),
            &task(&format!("{w} && mkdir -p dist && echo done > dist/out.txt")),
        );
    }
    ws
}

fn task(command: &str) -> String {
    format!(
        "[tasks.build]\ncommand = \"{}\"\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        command.replace('"', "\\\"")
    )
}

#[test]
fn a_task_writing_through_its_tree_mirror_fails_and_later_tasks_read_the_tree_as_keyed() {
    // As root (this CI) a read-only file is written all the same; a user `chmod`s it first.
    let writers = [
        "chmod u+w ../node_modules/dep/index.js && echo two > ../node_modules/dep/index.js",
        "echo x > ../node_modules/dep/late.js",
        "chmod 600 ../node_modules/dep/index.js",
        "rm ../node_modules/dep/package.json",
        "mv ../node_modules/dep/index.js ../node_modules/dep/moved.js",
        "mkdir -p ../node_modules/.cache/tool && echo c > ../node_modules/.cache/tool/x",
    ];
    let ws = workspace(&writers);
    // One worker, one slot: every task meets the copies the one before it left.
    let farm = Cluster::builder().workers(1).slots(1).sandbox(Sandbox::None).start();
    farm.run(&ws, ["build", "-p", "q"]).assert_code(0);
    let keyed = ws.read("q/dist/out.txt");
    assert!(keyed.ends_with("one\n") && keyed.contains("package.json"), "{keyed}");
    for (i, how) in writers.iter().enumerate() {
        let out = farm.run(&ws, ["build", "-p", &format!("w{i}")]);
        out.assert_code(1);
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            said.contains("wrote outside its declared outputs") && said.contains("`node_modules/"),
            "`{how}`:\n{out}"
        );
        let after = farm.run(&ws, ["build", "-p", "q", "--force"]);
        after.assert_code(0);
        assert_eq!(ws.read("q/dist/out.txt"), keyed, "after `{how}`, q read a changed tree");
    }
}

#[test]
fn tasks_running_beside_a_writer_read_the_tree_as_keyed() {
    // Two slots: the writer and the readers run at once, each on a copy of its own.
    let writers =
        ["chmod u+w ../node_modules/dep/index.js && echo two > ../node_modules/dep/index.js"];
    let ws = workspace(&writers);
    let farm = Cluster::builder().workers(1).slots(2).sandbox(Sandbox::None).start();
    farm.run(&ws, ["build", "-p", "q"]).assert_code(0);
    let keyed = ws.read("q/dist/out.txt");
    for round in 0..3 {
        let out = farm.run(&ws, ["build", "--all", "--force"]);
        out.assert_code(1);
        assert_eq!(ws.read("q/dist/out.txt"), keyed, "round {round}: q read the writer's bytes");
    }
}
