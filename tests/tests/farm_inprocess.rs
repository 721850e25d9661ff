//! The farm inside the test process ([`InProcessFarm`]): the demo's graph run remotely gives
//! the same outputs as local mode, a second run and a second machine hit the farm cache, and a
//! worker stopped mid-task loses its task to another worker while the run carries on.

use prova_tests::cluster::{blocking_command, demo, in_roots_of, products, release, waiting_dirs};
use prova_tests::inproc::InProcessFarm;
use prova_tests::{Output, TempWorkspace};
use serde_json::Value;

fn reports(out: &Output) -> Vec<Value> {
    out.summary()["tasks"].as_array().cloned().unwrap_or_else(|| panic!("no tasks\n{out}"))
}

fn cache_words(out: &Output) -> Vec<String> {
    reports(out).iter().map(|r| r["cache"]["cache"].as_str().unwrap_or("").to_owned()).collect()
}

#[test]
fn the_demo_on_an_in_process_farm_matches_local_mode_and_then_hits() {
    let farm = InProcessFarm::start(2);
    let local = demo();
    local.prova(["run", "build", "--all"]).run().assert_code(0);

    let first = demo();
    let out = farm.run(&first, ["build", "--all", "--json"]);
    out.assert_code(0);
    assert!(cache_words(&out).iter().all(|w| w == "saved"), "{out}");
    for r in reports(&out) {
        let w = r["worker"].as_str().unwrap_or_default();
        assert!(w == "w1" || w == "w2", "{} ran on {w:?}\n{out}", r["task"]);
    }
    assert_eq!(products(&first), products(&local), "the farm built other bytes or modes");

    // A second machine: every task is a farm hit and the outputs arrive.
    let second = demo();
    let out = farm.run(&second, ["build", "--all", "--json"]);
    out.assert_code(0);
    let words = cache_words(&out);
    assert_eq!(words.len(), 8, "{out}");
    assert!(words.iter().all(|w| w == "hit"), "{words:?}\n{out}");
    assert_eq!(products(&second), products(&local));
}

#[test]
fn a_worker_stopped_mid_task_loses_it_to_the_other_and_the_run_succeeds() {
    let mut farm = InProcessFarm::start(2);
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p\"]\n[tasks.build]\ncommand = '{}'\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
                blocking_command("mkdir -p dist && cp src/in.txt dist/out.txt")
            ),
        )
        .file("p/src/in.txt", "payload\n");
    let mut run = farm.run_cmd(&ws, ["build", "--all", "--json"]).spawn();
    let waiting = |l: &str| l.contains("\"output\"") && l.contains("waiting in ");

    // The first attempt starts on some worker; stop that worker while the task waits.
    run.wait_for_lines("the task to start", 1, waiting);
    let first = waiting_dirs(run.stdout_so_far(), "p#build")[0].clone();
    let victim = (0..2)
        .find(|&i| in_roots_of(&first, &farm.work_dir(i)))
        .unwrap_or_else(|| panic!("{} is under no worker's work dir", first.display()));
    farm.stop_worker(victim);

    // Its connection is gone at once: the retry lands on the survivor.
    run.wait_for_lines("the task to start on the other worker", 2, waiting);
    let second = waiting_dirs(run.stdout_so_far(), "p#build")[1].clone();
    let survivor = farm.work_dir(1 - victim);
    assert!(in_roots_of(&second, &survivor), "retried in {}", second.display());
    release(&second);
    // The first attempt's process, if it outlived its worker, may end too.
    let _ = std::fs::write(first.join("release"), "");
    let out = run.wait();
    out.assert_code(0);
    assert_eq!(ws.read("p/dist/out.txt"), "payload\n");
    let r = &reports(&out)[0];
    assert_eq!(r["worker"], format!("w{}", 2 - victim), "{out}");

    // The stopped worker comes back under its name.
    farm.restart_worker(victim);
    assert_eq!(farm.status()["workers"].as_array().map_or(0, Vec::len), 2);
}
