//! Runtime inputs on the real binary (issue 19): `runtime = ["node --version"]` folds the
//! command's output into the key, so a toolchain upgrade on `PATH` is a miss and `why` names
//! it with the old and new versions; `[workspace] runtime` does the same for every task; a
//! secret-looking output is keyed but never shown; on a farm whose worker gives another
//! result the task fails with a clear error instead of caching the worker's toolchain.

use std::os::unix::fs::PermissionsExt as _;

use prova_tests::TempWorkspace;
use prova_tests::inproc::InProcessFarm;

/// A directory holding a fake `node` that prints `version`, and a `PATH` finding it first.
struct FakeNode {
    dir: tempfile::TempDir,
}

impl FakeNode {
    fn new(version: &str) -> Self {
        let dir = tempfile::Builder::new().prefix("prova-e2e-node-").tempdir().expect("tempdir");
        let me = Self { dir };
        me.set(version);
        me
    }

    /// Installs a new `node` (a new file, as an upgrade writes one).
    fn set(&self, version: &str) {
        let tmp = self.dir.path().join(".node.tmp");
        let script = format!("#!/bin/sh\n[ \"$1\" = --version ] && echo {version}\n");
        std::fs::write(&tmp, script).expect("write node");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, self.dir.path().join("node")).expect("install node");
    }

    fn path(&self) -> String {
        format!("{}:{}", self.dir.path().display(), std::env::var("PATH").unwrap_or_default())
    }
}

fn ws(workspace_extra: &str, task_extra: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", &format!("[workspace]\nprojects = [\"p\"]\n{workspace_extra}"))
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            &format!(
                "[tasks.build]\ncommand = \"mkdir -p out && cat src/a.txt > out/a.txt\"\n\
                 inputs = [\"src/a.txt\"]\noutputs = [\"out/a.txt\"]\n{task_extra}"
            ),
        )
}

fn run(ws: &TempWorkspace, node: &FakeNode) -> prova_tests::Output {
    ws.prova(["run", "build", "--all", "--json"]).env("PATH", &node.path()).run()
}

fn why(ws: &TempWorkspace, node: &FakeNode) -> Vec<String> {
    let out = ws.prova(["why", "p#build", "--json"]).env("PATH", &node.path()).run();
    out.assert_code(0);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("why --json is not JSON: {e}\n{out}"));
    v["changes"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[track_caller]
fn assert_upgrade_is_a_miss(ws: &TempWorkspace) {
    let node = FakeNode::new("v20.11.0");
    let out = run(ws, &node);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    let out = run(ws, &node);
    assert_eq!(out.cache_of("p#build"), "hit", "the same node: a hit\n{out}");
    node.set("v22.1.0");
    assert_eq!(why(ws, &node), ["runtime `node --version` changed: v20.11.0 → v22.1.0"]);
    let out = run(ws, &node);
    out.assert_code(0);
    assert_eq!(out.cache_of("p#build"), "saved", "an upgraded node is a miss\n{out}");
    // Back to the old node: its entry is still there.
    node.set("v20.11.0");
    assert_eq!(run(ws, &node).cache_of("p#build"), "hit");
}

#[test]
fn a_task_runtime_input_makes_a_toolchain_upgrade_a_miss_named_by_why() {
    assert_upgrade_is_a_miss(&ws("", "runtime = [\"node --version\"]"));
}

#[test]
fn a_workspace_runtime_input_covers_every_task() {
    assert_upgrade_is_a_miss(&ws("runtime = [\"node --version\"]\n", ""));
}

#[test]
fn a_secret_looking_output_is_keyed_but_never_shown() {
    let ws = ws("", "runtime = [\"node --version\"]");
    let token = "ghp_aaaabbbbccccddddeeeeffffgggghhhh1111";
    let node = FakeNode::new(token);
    run(&ws, &node).assert_code(0);
    node.set("ghp_zzzzbbbbccccddddeeeeffffgggghhhh2222");
    let changes = why(&ws, &node);
    assert_eq!(changes, ["runtime `node --version` changed (its output differs)"]);
    let out = run(&ws, &node);
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");
    assert!(!out.stdout.contains("ghp_"), "a runtime output leaked into the run's output");
    // Not stored in words either: no file under `.prova` (index, WAL, blobs) holds it.
    let mut stack = vec![ws.path(".prova")];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                seen += 1;
                let hit = bytes.windows(token.len()).any(|w| w == token.as_bytes());
                assert!(!hit, "the token is stored in {}", p.display());
            }
        }
    }
    assert!(seen > 0, "no cache files to look at");
}

#[test]
fn a_runtime_command_that_is_not_installed_is_keyed_as_such() {
    let ws = ws("", "runtime = [\"prova-e2e-no-such-tool --version\"]");
    let node = FakeNode::new("v1");
    let out = run(&ws, &node);
    out.assert_code(0);
    assert_eq!(run(&ws, &node).cache_of("p#build"), "hit");
}

#[test]
fn a_farm_worker_with_another_toolchain_refuses_the_task() {
    let farm = InProcessFarm::start(1);
    let ws = ws("", "runtime = [\"node --version\"]");
    // The client has a `node` the worker (this process's PATH) lacks or has another of.
    let node = FakeNode::new("v20.11.0-prova-e2e");
    let out = farm.run_cmd(&ws, ["build", "--all", "--json"]).env("PATH", &node.path()).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#build"), "failed", "{out}");
    let note = out.report("p#build")["note"].as_str().unwrap_or("").to_owned();
    assert!(
        note.contains("runtime input `node --version` differs on this worker")
            && note.contains("v20.11.0-prova-e2e"),
        "{out}"
    );
    assert_eq!(out.cache_of("p#build"), "not_saved", "{out}");
}
