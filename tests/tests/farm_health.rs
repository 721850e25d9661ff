//! The farm under faults, worker side (issue 13): a task's declared environment is the
//! client's, whatever the worker's own process has; a task whose outputs cannot be packed is
//! never `succeeded`; a worker short of disk refuses work, and the task runs elsewhere.

use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, Sandbox};

/// A value only the worker's own process has: it must never reach a task.
const WORKER_ONLY: &str = "sentinel-worker-only-4b1e93";

/// `app#stamp` writes what it sees of `TZ`, `LANG` (both declared) and `WORKER_ONLY_TOKEN`
/// (never declared) into its output.
fn env_workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n\n[tasks.stamp]\n\
             command = \"mkdir -p dist && echo tz=${TZ-unset} lang=${LANG-unset} \
             only=${WORKER_ONLY_TOKEN-unset} > dist/env.txt\"\n\
             env = [\"TZ\", \"LANG\"]\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/src/in.txt", "x\n")
}

/// A farm of one worker whose own environment has `TZ`, `LANG` and a token.
fn farm_with_worker_env(sandbox: Sandbox) -> Cluster {
    Cluster::builder()
        .workers(1)
        .sandbox(sandbox)
        .worker_env("TZ", "Asia/Tokyo")
        .worker_env("LANG", "ja_JP.UTF-8")
        .worker_env("WORKER_ONLY_TOKEN", WORKER_ONLY)
        .start()
}

/// What `app#stamp` saw, never echoing the worker's token.
fn seen(ws: &TempWorkspace) -> String {
    let text = ws.read("app/dist/env.txt");
    assert!(!text.contains(WORKER_ONLY), "the worker's own token reached the task");
    text.trim().to_owned()
}

fn declared_env_is_the_clients(sandbox: Sandbox) {
    let farm = farm_with_worker_env(sandbox);
    let ws = env_workspace();
    let certs = farm.ci_certs();

    // Declared, left unset by the client: unset on the worker too.
    let out = farm
        .run_cmd(&ws, &certs, ["stamp", "--all", "--json"])
        .env_remove("TZ")
        .env_remove("LANG")
        .env_remove("WORKER_ONLY_TOKEN")
        .run();
    out.assert_code(0);
    assert_eq!(out.status_of("app#stamp"), "succeeded", "{out}");
    assert_eq!(seen(&ws), "tz=unset lang=unset only=unset", "{out}");

    // Declared and set by the client: the client's value, not the worker's.
    let out = farm
        .run_cmd(&ws, &certs, ["stamp", "--all", "--json"])
        .env("TZ", "UTC")
        .env_remove("LANG")
        .env_remove("WORKER_ONLY_TOKEN")
        .run();
    out.assert_code(0);
    assert_eq!(seen(&ws), "tz=UTC lang=unset only=unset", "{out}");

    let out = farm
        .run_cmd(&ws, &certs, ["stamp", "--all", "--json"])
        .env_remove("TZ")
        .env("LANG", "C.UTF-8")
        .env_remove("WORKER_ONLY_TOKEN")
        .run();
    out.assert_code(0);
    assert_eq!(seen(&ws), "tz=unset lang=C.UTF-8 only=unset", "{out}");
}

#[test]
fn a_declared_variable_the_client_leaves_unset_is_unset_on_a_sandboxed_worker() {
    declared_env_is_the_clients(Sandbox::Bwrap);
}

#[test]
fn a_declared_variable_the_client_leaves_unset_is_unset_on_an_unsandboxed_worker() {
    declared_env_is_the_clients(Sandbox::None);
}

/// A tmpfs of `size` mounted on `dir` for the test's lifetime (lazily unmounted on drop).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// `None` (with the reason printed) where this process may not mount one.
    fn mount(dir: &std::path::Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).expect("the mount point");
        let opts = format!("size={size}");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Self(dir.to_owned())),
            Ok(o) => {
                eprintln!("skipped: cannot mount a tmpfs: {}", String::from_utf8_lossy(&o.stderr));
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Bytes of incompressible output each `gen` task writes: fits the small work dir once,
/// not twice, so the task runs there and its packing runs out of space.
const BIG: usize = 1_500_000;

/// Three projects whose `gen` writes `BIG` random bytes to `dist/blob.bin`.
fn big_outputs_workspace() -> TempWorkspace {
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        &format!(
            "[workspace]\nprojects = [\"a\", \"b\", \"c\"]\n\n[tasks.gen]\n\
             command = \"mkdir -p dist && head -c {BIG} /dev/urandom > dist/blob.bin\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n"
        ),
    );
    for p in ["a", "b", "c"] {
        ws = ws.file(&format!("{p}/src/in.txt"), p);
    }
    ws
}

/// Staging files (packed artifacts) left anywhere under `dir`.
fn staging_files(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else if name.starts_with("artifact-") {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[test]
fn outputs_a_full_worker_cannot_pack_are_run_again_elsewhere_and_reach_the_client() {
    // A floor below the 2 MiB it has: w1 takes work, then finds it cannot pack the outputs.
    let mut farm = Cluster::builder()
        .workers(2)
        .slots(1)
        .sandbox(Sandbox::None)
        .started(0)
        .worker_args(0, ["--min-free-disk", "1K"])
        .roots_in_work_dirs()
        .start();
    let Some(_small) = Tmpfs::mount(&farm.work_dir(0), "2m") else { return };
    // w1 (on the small work dir) is preferred on ties, so it gets work first.
    farm.start_worker(0);
    farm.start_worker(1);
    let ws = big_outputs_workspace();
    let out = farm.run(&ws, ["gen", "--all", "--json"]);
    out.assert_code(0);
    for p in ["a", "b", "c"] {
        let task = format!("{p}#gen");
        assert_eq!(out.status_of(&task), "succeeded", "{out}");
        assert_eq!(out.cache_of(&task), "saved", "{task} was not saved\n{out}");
        let got = std::fs::metadata(ws.path(&format!("{p}/dist/blob.bin")))
            .unwrap_or_else(|e| panic!("{task}'s output never reached the client: {e}\n{out}"));
        assert_eq!(got.len(), BIG as u64, "{task}");
        assert_eq!(out.report(&task)["worker"], "w2", "only w2 can store outputs\n{out}");
    }
    let log = farm.worker_log(0);
    assert!(log.contains("handing the assignment back"), "w1 never had to hand back:\n{log}");
    let left = staging_files(&farm.work_dir(0));
    assert!(left.is_empty(), "staging files left on the full worker: {left:?}");
}

#[test]
fn a_task_that_exits_0_on_the_farm_without_outputs_for_the_client_is_not_succeeded() {
    // The worker cannot store these outputs (a symlink out of the project is refused by
    // every restore), so nothing reaches the client: locally the files are in the
    // workspace, remotely they are not, and the run must say so.
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::None).start();
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n\n[tasks.gen]\n\
             command = \"mkdir -p dist && echo x > dist/a.txt && ln -sf /etc/hostname dist/link\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/src/in.txt", "x\n");
    let out = farm.run(&ws, ["gen", "--all", "--json"]);
    out.assert_code(1);
    assert_eq!(out.status_of("app#gen"), "failed", "{out}");
    let note = out.report("app#gen")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("outputs were not brought home"), "{note}\n{out}");
    assert!(!ws.exists("app/dist/a.txt"), "nothing was brought home\n{out}");
}

#[test]
fn staging_files_a_worker_left_behind_are_cleaned_when_it_starts() {
    let mut farm = Cluster::builder().workers(1).sandbox(Sandbox::None).started(0).start();
    let dir = farm.work_dir(0);
    std::fs::create_dir_all(&dir).expect("the work dir");
    // What a worker killed mid-pack leaves: partial archives of leases of a past run.
    let stale = ["artifact-1764600000000001.tar.zst", "artifact-1764600000000002.tar.zst"];
    for name in stale {
        std::fs::write(dir.join(name), vec![0u8; 4096]).expect("a stale staging file");
    }
    std::fs::write(dir.join("keep.txt"), "not prova's").expect("another file");
    farm.start_worker(0);
    let left = staging_files(&dir);
    assert!(left.is_empty(), "stale staging files survived the start-up: {left:?}");
    assert!(dir.join("keep.txt").exists(), "only staging files are removed");
}
