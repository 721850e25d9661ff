//! Operating a farm: `prova farm status` (workers, slots, sandbox, running tasks), and the
//! coordinator restarting under its workers (they redial; the farm cache survives; work a
//! worker was still doing for the old coordinator cannot answer for the new one's).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prova_tests::cluster::{
    Cluster, POLL, READY_TIMEOUT, Sandbox, WorkerSpec, blocking_workspace, demo, products, release,
    waiting_dirs, waiting_line, worker_of, workers_of,
};

#[test]
fn farm_status_shows_workers_slots_sandbox_and_a_running_task() {
    let spec = |name: &str, slots, sandbox| WorkerSpec {
        name: name.to_owned(),
        slots,
        sandbox,
        labels: BTreeMap::from([("pool".to_owned(), "e2e".to_owned())]),
    };
    let farm =
        Cluster::with_workers(vec![spec("w1", 3, Sandbox::Bwrap), spec("w2", 1, Sandbox::None)]);

    let idle = farm.status();
    let ws = workers_of(&idle);
    assert_eq!(ws.len(), 2, "{idle:#}");
    let (w1, w2) = (worker_of(&idle, "w1").expect("w1"), worker_of(&idle, "w2").expect("w2"));
    assert_eq!((w1["slots"].as_u64(), w2["slots"].as_u64()), (Some(3), Some(1)), "{idle:#}");
    assert!(w1["sandbox"].as_str().is_some_and(|s| s.starts_with("bwrap")), "{idle:#}");
    assert_eq!(w2["sandbox"], "none", "{idle:#}");
    assert_eq!(w1["labels"]["pool"], "e2e");
    let platform = format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH);
    assert_eq!(w1["platform"], platform.as_str());
    assert_eq!(
        (w1["busy"].as_u64(), idle["queued"].as_u64(), idle["runs"].as_u64()),
        (Some(0), Some(0), Some(0))
    );

    let ws = blocking_workspace("mkdir -p dist; echo built > dist/out.txt");
    let mut run = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).spawn();
    run.wait_for_lines("the task to start", 1, waiting_line);
    let on = farm.wait_running("p#build", READY_TIMEOUT);
    let busy = farm.status();
    let worker = worker_of(&busy, farm.worker_name(on)).expect("the worker running it");
    assert_eq!(worker["busy"], 1, "{busy:#}");
    assert_eq!(worker["running"], serde_json::json!(["p#build"]), "{busy:#}");
    assert_eq!(busy["runs"], 1, "{busy:#}");

    // The text form says the same.
    let mut args = vec!["farm".to_owned(), "status".to_owned()];
    args.extend(farm.remote_args(&farm.ci_certs()));
    let text = prova_tests::ProvaCmd::new(farm.root(), args).run();
    text.assert_code(0)
        .assert_stdout_contains("2 workers, 0 queued, 1 runs")
        .assert_stdout_contains("sandbox bwrap")
        .assert_stdout_contains("sandbox none")
        .assert_stdout_contains("running p#build")
        .assert_stdout_contains("pool=e2e");

    release(&waiting_dirs(run.stdout_so_far(), "p#build")[0]);
    run.wait().assert_code(0);
    farm.wait_for_status("the farm to be idle again", READY_TIMEOUT, |s| {
        s["runs"] == 0
            && workers_of(s).iter().all(|w| w["busy"] == 0 && w["running"] == serde_json::json!([]))
    });
}

#[test]
fn a_coordinator_restart_is_not_fatal_to_workers_or_the_farm_cache() {
    let mut farm = Cluster::start(2);
    let first = demo();
    farm.run(&first, ["build", "--all"]).assert_code(0);
    let before = farm.addr().to_owned();

    farm.restart_coordinator(); // returns once both workers have redialled and registered
    assert_eq!(farm.addr(), before, "the new coordinator did not get the old port back");
    assert_eq!(workers_of(&farm.status()).len(), 2);

    // The farm cache is the same directory: a second machine hits it.
    let second = demo();
    let out = farm.run(&second, ["build", "--all", "--json"]);
    out.assert_code(0);
    for r in out.summary()["tasks"].as_array().expect("tasks") {
        assert_eq!(r["cache"]["layer"], "farm", "{r}\n{out}");
    }
    assert!(products(&second) == products(&first));

    // And new work runs on the redialled workers.
    second.write("libs/math/src/extra.sh", "# a new file\n");
    let out = farm.run(&second, ["build", "--all", "--json"]);
    out.assert_code(0);
    let math = out.report("math#build");
    assert_eq!(math["cache"]["cache"], "saved", "{out}");
    assert!(math["worker"] == "w1" || math["worker"] == "w2", "{out}");
}

#[test]
fn a_task_left_running_across_a_coordinator_restart_cannot_answer_for_new_work() {
    // One worker, so the new coordinator's work lands where the old task still runs.
    let mut farm = Cluster::builder().workers(1).slots(2).start();
    let old = blocking_workspace("mkdir -p dist; echo from the old coordinator > dist/out.txt");
    // A client that does not re-attach (`farm_restart.rs` has the ones that do): its run
    // ends with the coordinator, its task is left running on the worker.
    let args = ["build", "--all", "--json", "--reattach-timeout", "0"];
    let mut old_run = farm.run_cmd(&old, &farm.ci_certs(), args).spawn();
    old_run.wait_for_lines("the old task to start", 1, waiting_line);
    let old_dir = waiting_dirs(old_run.stdout_so_far(), "p#build")[0].clone();

    farm.restart_coordinator();
    // The old run's client lost its coordinator.
    let gone = old_run.wait();
    assert_ne!(gone.code(), Some(0), "{gone}");

    // New work for the same worker: it must run for real, whatever the old task does.
    let new = blocking_workspace("mkdir -p dist; echo from the new coordinator > dist/out.txt");
    let mut new_run = farm
        .run_cmd(&new, &farm.ci_certs(), ["build", "--all", "--json"])
        .timeout(Duration::from_secs(60))
        .spawn();
    new_run.wait_for_lines("the new task to start", 1, waiting_line);
    let new_dir = waiting_dirs(new_run.stdout_so_far(), "p#build")[0].clone();
    assert_ne!(new_dir, old_dir);

    // The worker told the new coordinator it still ran the old attempt: that attempt is no
    // lease of the new one, so it was cancelled (its exec root goes), and its report refused.
    let deadline = Instant::now() + READY_TIMEOUT;
    while old_dir.exists() || !farm.worker_log(0).contains("report refused") {
        assert!(Instant::now() < deadline, "the old attempt lives on\n{}", farm.logs());
        std::thread::sleep(POLL);
    }
    release(&new_dir);
    let out = new_run.wait();
    out.assert_code(0);
    assert_eq!(new.read("p/dist/out.txt"), "from the new coordinator\n", "{out}");
    assert_eq!(out.report("p#build")["cache"]["cache"], "saved", "{out}");
}

#[test]
fn a_task_asking_for_labels_runs_only_on_a_worker_that_carries_them() {
    let spec = |name: &str, pool: &str| WorkerSpec {
        name: name.to_owned(),
        slots: 2,
        sandbox: Sandbox::None,
        labels: BTreeMap::from([("pool".to_owned(), pool.to_owned())]),
    };
    let farm = Cluster::with_workers(vec![spec("w1", "cpu"), spec("w2", "gpu")]);
    let ws = prova_tests::TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"a\", \"b\", \"c\", \"d\"]\n[tasks.build]\n\
             command = \"mkdir -p dist && echo built > dist/out.txt\"\n\
             outputs = [\"dist/**\"]\nlabels = { pool = \"gpu\" }\n",
        )
        .file("a/src.txt", "a\n")
        .file("b/src.txt", "b\n")
        .file("c/src.txt", "c\n")
        .file("d/src.txt", "d\n");
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    out.assert_code(0);
    for p in ["a", "b", "c", "d"] {
        assert_eq!(out.report(&format!("{p}#build"))["worker"], "w2", "{out}");
    }
}
