//! Farm runs on a real coordinator and real workers (subprocesses, bubblewrap): the same
//! outputs as local mode, then the farm cache serving a second run, a second machine, and —
//! through the local entries the download filed — a later local run there.

use prova_tests::cluster::{Cluster, demo, products};
use prova_tests::{Output, TempWorkspace};
use serde_json::Value;

/// The summary's task reports.
fn reports(out: &Output) -> Vec<Value> {
    out.summary()["tasks"].as_array().cloned().unwrap_or_else(|| panic!("no tasks\n{out}"))
}

/// Deletes every project's `dist/` and `gen/`.
fn remove_products(ws: &TempWorkspace) {
    for group in ["libs", "apps"] {
        for project in std::fs::read_dir(ws.path(group)).expect("the demo's projects") {
            let project = project.expect("a directory entry").path();
            for dir in ["dist", "gen"] {
                let _ = std::fs::remove_dir_all(project.join(dir));
            }
        }
    }
}

/// The demo's `build --all`: one build per project plus `schema#codegen`.
const DEMO_TASKS: usize = 8;

#[test]
fn a_remote_run_produces_the_same_outputs_as_a_local_run() {
    let farm = Cluster::start(2);
    let local = demo();
    let remote = demo();

    local.prova(["run", "build", "--all"]).run().assert_code(0);
    let out = farm.run(&remote, ["build", "--all", "--json"]);
    out.assert_code(0);

    // Every task ran on a worker of the farm and was filed there.
    let reports = reports(&out);
    assert_eq!(reports.len(), DEMO_TASKS, "{out}");
    for r in &reports {
        assert_eq!(r["status"], "succeeded", "{r}");
        assert_eq!(r["cache"]["cache"], "saved", "{r}\n{out}");
        let worker = r["worker"].as_str().unwrap_or_default();
        assert!(worker == "w1" || worker == "w2", "{} ran on {worker:?}\n{out}", r["task"]);
    }
    assert_eq!(farm.farm_entries(), DEMO_TASKS as u64);

    // Byte for byte and mode for mode, every file under every dist/ and gen/.
    let want = products(&local);
    let got = products(&remote);
    assert_eq!(
        want.len(),
        7 * 2 + 2,
        "7 bundles + 7 checksums + 2 generated files: {:?}",
        want.keys()
    );
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "the remote run produced other files"
    );
    for (path, (bytes, mode)) in &want {
        let (rbytes, rmode) = &got[path];
        assert!(
            rbytes == bytes,
            "{path} differs:\nlocal:\n{}\nremote:\n{}",
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(rbytes)
        );
        assert_eq!(rmode, mode, "{path}: mode {rmode:o} remotely, {mode:o} locally");
    }
}

#[test]
fn the_farm_cache_serves_a_second_run_and_a_second_machine() {
    let farm = Cluster::start(2);
    let first = demo();
    farm.run(&first, ["build", "--all", "--json"]).assert_code(0);
    let built = products(&first);
    assert!(!built.is_empty());

    // A second run, its outputs deleted first: all hits, outputs restored — from the local
    // layer, probed first, which the first run's download filled (the farm is not asked).
    remove_products(&first);
    assert!(products(&first).is_empty(), "the outputs were deleted");
    let again = farm.run(&first, ["build", "--all", "--json"]);
    again.assert_code(0);
    for r in reports(&again) {
        assert_eq!(r["cache"]["cache"], "hit", "{r}\n{again}");
        assert_eq!(r["cache"]["layer"], "local", "{r}\n{again}");
        assert!(r["worker"].is_null(), "a hit ran nowhere: {r}");
    }
    assert!(products(&first) == built, "the restored outputs differ from the built ones");
    assert_eq!(farm.farm_entries(), DEMO_TASKS as u64, "a hit files nothing new");

    // A second machine (another clone, its own local cache): all hits from the farm.
    let second = demo();
    let out = farm.run(&second, ["build", "--all", "--json"]);
    out.assert_code(0);
    let reports2 = reports(&out);
    assert_eq!(reports2.len(), DEMO_TASKS);
    for r in &reports2 {
        assert_eq!(r["cache"]["cache"], "hit", "{r}\n{out}");
        assert_eq!(r["cache"]["layer"], "farm", "{r}\n{out}");
    }
    assert!(products(&second) == built, "the second machine got other outputs");

    // The download filed local entries there: a local run (no farm) is all local hits.
    let _ = std::fs::remove_dir_all(second.path("apps/web/dist"));
    let local = second.prova(["run", "build", "--all", "--json"]).run();
    local.assert_code(0);
    for r in reports(&local) {
        assert_eq!(r["cache"]["cache"], "hit", "{r}\n{local}");
        assert_eq!(r["cache"]["layer"], "local", "{r}\n{local}");
    }
    assert!(products(&second) == built, "the local restore differs");
}
