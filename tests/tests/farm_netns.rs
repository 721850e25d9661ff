//! The farm under faults on separate hosts (issue 13): a coordinator, three bubblewrap workers
//! and a client, each in its own network namespace ([`prova_tests::netns`]). A worker stalled
//! (SIGSTOP) or partitioned (its link down) for 20 s — longer than a lease (15 s), shorter
//! than its connection's idle timeout (30 s, the pause tolerance) — then back; a worker cut
//! for good; a worker whose work dir is a tiny tmpfs;
//! a coordinator SIGKILLed mid-run and restarted. Every run ends green with no task failed,
//! or, for the lost coordinator, with its one line naming what a re-run reuses.
//!
//! Where namespaces cannot be made (not root, no `ip`), each test prints why and returns; CI
//! runs as root with iproute2 installed (`.ci/run`), so there they run.
//!
//! The 20 s stalls are the faults themselves, not synchronisation: every step waits on what
//! the client prints (`--json` events) or what `prova farm status` shows.

use std::collections::BTreeSet;
use std::time::Duration;

use prova_tests::cluster::{blocking_command, release, waiting_dirs, waiting_line, workers_of};
use prova_tests::netns::{NetFarm, unavailable};
use prova_tests::{Output, Running, TempWorkspace};

/// How long a stall or a temporary partition lasts: beyond the 15 s lease.
const STALL: Duration = Duration::from_secs(20);

/// The client's deadline for one faulted run: the work (a few seconds), the stall, and room
/// for a loaded machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Bound on waiting for a state of the farm (a worker running something, rejoining).
const WAIT: Duration = Duration::from_secs(30);

/// Bound on waiting for a silent worker's connection to idle out: the 30 s pause tolerance
/// and a loaded machine's share.
const IDLE_OUT: Duration = Duration::from_secs(60);

/// Projects `p00`… and `gate`. `early` (every project) takes a second and writes
/// `dist/early.txt`; `late` needs `early` and `gate#hold`, which blocks (see
/// [`blocking_command`]) while `gate/hold` exists, so the test decides when the second half
/// of the run may start.
const PROJECTS: usize = 24;

fn workspace() -> TempWorkspace {
    let mut projects: Vec<String> = (0..PROJECTS).map(|i| format!("\"p{i:02}\"")).collect();
    projects.push("\"gate\"".into());
    let block = blocking_command("true");
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        &format!(
            "[workspace]\nprojects = [{}]\n\n\
             [tasks.early]\ncommand = 'mkdir -p dist && sleep 1 && cat src.txt > dist/early.txt'\n\
             inputs = [\"src.txt\"]\noutputs = [\"dist/early.txt\"]\n\n\
             [tasks.hold]\ncommand = 'if [ -e hold ]; then {block}; fi; mkdir -p dist && \
             echo held > dist/hold.txt'\noutputs = [\"dist/hold.txt\"]\n\n\
             [tasks.late]\ncommand = 'sleep 0.5 && cat dist/early.txt > dist/late.txt'\n\
             deps = [\"early\", \"gate#hold\"]\ninputs = [\"src.txt\"]\n\
             outputs = [\"dist/late.txt\"]\n",
            projects.join(", ")
        ),
    );
    for i in 0..PROJECTS {
        ws = ws.file(&format!("p{i:02}/src.txt"), &format!("p{i:02}\n"));
    }
    ws.file("gate/src.txt", "gate\n").file("gate/hold", "")
}

/// Every task of the run: `early` and `late` of every project, and `gate#hold`.
fn every_task() -> BTreeSet<String> {
    let mut all: BTreeSet<String> = ["gate#hold".to_owned()].into();
    let projects = (0..PROJECTS).map(|i| format!("p{i:02}")).chain(["gate".to_owned()]);
    for p in projects {
        all.insert(format!("{p}#early"));
        all.insert(format!("{p}#late"));
    }
    all
}

/// Skips (printing why) where namespaced hosts cannot be made.
fn lab_or_skip() -> bool {
    match unavailable() {
        Some(why) => {
            prova_tests::skip_for_missing(&why);
            false
        }
        None => true,
    }
}

/// Starts `late --all`, waits until `gate#hold` blocks and some worker other than the gate's
/// runs an `early` task; returns the run and that worker.
fn start_and_pick_victim(farm: &NetFarm, ws: &TempWorkspace) -> (Running, usize) {
    let mut run = farm.run_cmd(ws, ["late", "--all", "--json"]).timeout(RUN_TIMEOUT).spawn();
    run.wait_for_lines("gate#hold to block", 1, waiting_line);
    let s = farm
        .wait_for_status("a worker busy with early tasks only", WAIT, |s| victim_of(s).is_some());
    let victim = farm.worker_index(&victim_of(&s).expect("just seen"));
    (run, victim)
}

/// A worker running an `early` task and not `gate#hold`.
fn victim_of(status: &serde_json::Value) -> Option<String> {
    workers_of(status).into_iter().find_map(|w| {
        let running: Vec<&str> =
            w["running"].as_array()?.iter().filter_map(|t| t.as_str()).collect();
        let early = running.iter().any(|t| t.ends_with("#early"));
        let gate = running.contains(&"gate#hold");
        (early && !gate).then(|| w["id"].as_str().map(str::to_owned)).flatten()
    })
}

/// Whether worker `name` is listed idle and heard from again. Its slots free up when its
/// leases expire, during the fault; it is back only once it is no longer `silent`: a
/// connection that lived through a partition may take seconds to carry a heartbeat again
/// (its retransmissions back off), and placement passes a silent worker over meanwhile.
fn back_and_idle(status: &serde_json::Value, name: &str) -> bool {
    workers_of(status)
        .iter()
        .any(|w| w["id"] == name && w["busy"] == 0 && !w["silent"].as_bool().unwrap_or(false))
}

/// Lets `gate#hold` finish (every attempt of it that blocked so far).
fn open_gate(run: &Running) {
    for dir in waiting_dirs(run.stdout_so_far(), "gate#hold") {
        if dir.exists() {
            release(&dir);
        }
    }
}

/// The run succeeded with every task succeeded and its outputs in the workspace; returns the
/// workers that ran `late` tasks.
#[track_caller]
fn assert_all_succeeded(out: &Output, ws: &TempWorkspace, farm: &NetFarm) -> BTreeSet<String> {
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    for task in every_task() {
        assert_eq!(out.status_of(&task), "succeeded", "{task}\n{out}\n{}", farm.logs());
    }
    for i in 0..PROJECTS {
        let p = format!("p{i:02}");
        assert_eq!(ws.read(&format!("{p}/dist/late.txt")), format!("{p}\n"), "{out}");
    }
    (0..PROJECTS)
        .filter_map(|i| out.report(&format!("p{i:02}#late"))["worker"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_worker_stopped_for_longer_than_its_lease_comes_back_and_nothing_fails() {
    if !lab_or_skip() {
        return;
    }
    let farm = NetFarm::builder().start();
    let ws = workspace();
    let (mut run, victim) = start_and_pick_victim(&farm, &ws);
    farm.pause_worker(victim);
    std::thread::sleep(STALL); // the fault: a GC pause, a stalled disk
    farm.resume_worker(victim);
    // Back and listed idle (its expired leases cancelled on both sides) before the second
    // half of the run is let go, so it is offered work again.
    let name = farm.worker_name(victim).to_owned();
    farm.wait_for_status("the stopped worker back and idle", WAIT, |s| back_and_idle(s, &name));
    run.wait_for_lines("the early tasks", PROJECTS + 1, |l| {
        l.contains("\"task_finished\"") && l.contains("#early")
    });
    open_gate(&run);
    let out = run.wait();
    // The stall was felt: the worker's leases expired meanwhile (its connection, silent for
    // less than the pause tolerance, lived on).
    let log = farm.coordinator_log();
    assert!(log.contains("lease expired"), "the stall went unnoticed:\n{}", farm.logs());
    let late_on = assert_all_succeeded(&out, &ws, &farm);
    assert!(late_on.contains(&name), "{name} took no work after it came back: {late_on:?}");
}

#[test]
fn a_worker_cut_off_for_longer_than_its_lease_comes_back_and_nothing_fails() {
    if !lab_or_skip() {
        return;
    }
    let farm = NetFarm::builder().start();
    let ws = workspace();
    let (mut run, victim) = start_and_pick_victim(&farm, &ws);
    farm.cut(victim);
    std::thread::sleep(STALL); // the fault: a partition
    farm.mend(victim);
    let name = farm.worker_name(victim).to_owned();
    farm.wait_for_status("the cut-off worker back and idle", WAIT, |s| back_and_idle(s, &name));
    run.wait_for_lines("the early tasks", PROJECTS + 1, |l| {
        l.contains("\"task_finished\"") && l.contains("#early")
    });
    open_gate(&run);
    let out = run.wait();
    let log = farm.coordinator_log();
    assert!(log.contains("lease expired"), "the cut went unnoticed:\n{}", farm.logs());
    let late_on = assert_all_succeeded(&out, &ws, &farm);
    assert!(late_on.contains(&name), "{name} took no work after it came back: {late_on:?}");
}

#[test]
fn a_worker_cut_off_for_good_loses_nothing() {
    if !lab_or_skip() {
        return;
    }
    let farm = NetFarm::builder().start();
    let ws = workspace();
    let (mut run, victim) = start_and_pick_victim(&farm, &ws);
    farm.cut(victim);
    let name = farm.worker_name(victim).to_owned();
    // The farm notices (its connection idles out, after the 30 s pause tolerance) and lists
    // it no more.
    farm.wait_for_status("the cut-off worker to leave the farm", IDLE_OUT, |s| {
        workers_of(s).iter().all(|w| w["id"] != name.as_str())
    });
    run.wait_for_lines("the early tasks", PROJECTS + 1, |l| {
        l.contains("\"task_finished\"") && l.contains("#early")
    });
    open_gate(&run);
    let out = run.wait();
    let late_on = assert_all_succeeded(&out, &ws, &farm);
    assert!(!late_on.contains(&name), "{name} is cut off, yet ran: {late_on:?}");
}

#[test]
fn a_drained_worker_finishes_its_tasks_takes_no_more_and_leaves() {
    if !lab_or_skip() {
        return;
    }
    let mut farm = NetFarm::builder().start();
    let ws = workspace();
    let (mut run, victim) = start_and_pick_victim(&farm, &ws);
    let name = farm.worker_name(victim).to_owned();
    // Only an admin may drain, and only a worker the farm has.
    let refused = farm.farm_cmd("ci", &["drain", &name]);
    assert_ne!(refused.code(), Some(0), "{refused}");
    assert!(refused.stderr.contains("cannot drain workers"), "{refused}");
    let unknown = farm.farm_cmd("admin", &["drain", "nobody"]);
    assert!(unknown.stderr.contains("no worker nobody on the farm"), "{unknown}");
    let before = farm.status();
    let held: Vec<String> = workers_of(&before)
        .iter()
        .find(|w| w["id"] == name.as_str())
        .and_then(|w| w["running"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    let drained = farm.farm_cmd("admin", &["drain", &name]);
    assert_eq!(drained.code(), Some(0), "{drained}\n{}", farm.logs());
    assert!(drained.stdout.contains(&format!("draining {name}")), "{drained}");
    // It finishes what it runs, is told to leave, leaves the farm and exits cleanly.
    farm.wait_for_status("the drained worker to leave the farm", WAIT, |s| {
        workers_of(s).iter().all(|w| w["id"] != name.as_str())
    });
    assert_eq!(farm.wait_worker_exit(victim, WAIT), Some(0), "{}", farm.logs());
    run.wait_for_lines("the early tasks", PROJECTS + 1, |l| {
        l.contains("\"task_finished\"") && l.contains("#early")
    });
    open_gate(&run);
    let out = run.wait();
    let late_on = assert_all_succeeded(&out, &ws, &farm);
    assert!(!late_on.contains(&name), "{name} was drained, yet took new work: {late_on:?}");
    // What it ran when the drain came finished there: nothing was taken away or requeued.
    assert!(!held.is_empty(), "{before:#}");
    for task in &held {
        assert_eq!(out.report(task)["worker"], name.as_str(), "{task} was moved\n{out}");
    }
    let log = farm.coordinator_log();
    assert!(!log.contains(&format!("worker {name} was lost")), "{log}");
}

/// Staging files (packed artifacts) anywhere under `dir`.
fn staging_files(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with("artifact-") {
                found.push(e.path().display().to_string());
            }
        }
    }
    found
}

/// Bytes of incompressible output each `gen` task writes: the small work dir holds the
/// output once, not the output and its packed archive too.
const BIG: usize = 5_000_000;

#[test]
fn a_worker_on_a_small_tmpfs_hands_its_tasks_back_and_they_run_elsewhere() {
    if !lab_or_skip() {
        return;
    }
    // w1's work dir is an 8 MiB tmpfs above its floor (1 MiB); one slot, so its tasks'
    // outputs fit there one at a time, and their archives never do.
    let farm = NetFarm::builder()
        .slots(1)
        .tmpfs(0, "8m")
        .worker_args(0, ["--min-free-disk", "1M"])
        .start();
    let (ws, projects) = gen_workspace(BIG);
    let out = farm.run_cmd(&ws, ["gen", "--all", "--json"]).timeout(RUN_TIMEOUT).run();
    assert_ran_elsewhere(&out, &ws, &projects, BIG, &farm);
    let log = farm.worker_log(0);
    assert!(log.contains("handing the assignment back"), "w1 never had to hand back:\n{log}");
}

#[test]
fn a_task_whose_writes_fill_the_work_dir_is_handed_back_not_failed() {
    if !lab_or_skip() {
        return;
    }
    // Each task writes more than w1's whole 8 MiB work dir: its own write meets ENOSPC and
    // it exits non-zero — the disk's failure, not the task's.
    let farm = NetFarm::builder()
        .slots(1)
        .tmpfs(0, "8m")
        .worker_args(0, ["--min-free-disk", "1M"])
        .start();
    let (ws, projects) = gen_workspace(HUGE);
    let out = farm.run_cmd(&ws, ["gen", "--all", "--json"]).timeout(RUN_TIMEOUT).run();
    assert_ran_elsewhere(&out, &ws, &projects, HUGE, &farm);
    let log = farm.worker_log(0);
    assert!(log.contains("handing the assignment back: short of disk"), "w1:\n{log}");
}

#[test]
fn a_worker_below_its_disk_floor_takes_no_work_until_space_returns() {
    if !lab_or_skip() {
        return;
    }
    // w1's 8 MiB work dir is below the default floor (256 MiB) from the start: it says so,
    // joins, and hands back every assignment; nothing of the run is lost or failed.
    let farm = NetFarm::builder().slots(1).tmpfs(0, "8m").start();
    let log = farm.worker_log(0);
    assert!(log.contains("starting short of disk"), "no word at start-up:\n{log}");
    let (ws, projects) = gen_workspace(1000);
    let out = farm.run_cmd(&ws, ["gen", "--all", "--json"]).timeout(RUN_TIMEOUT).run();
    assert_ran_elsewhere(&out, &ws, &projects, 1000, &farm);
}

/// Bytes a task writes that no 8 MiB work dir holds.
const HUGE: usize = 10_000_000;

/// Projects `g0`…`g3` whose `gen` writes `size` random bytes to `dist/blob.bin`.
fn gen_workspace(size: usize) -> (TempWorkspace, Vec<String>) {
    let projects: Vec<String> = (0..4).map(|i| format!("g{i}")).collect();
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        &format!(
            "[workspace]\nprojects = [{}]\n\n[tasks.gen]\n\
             command = \"mkdir -p dist && head -c {size} /dev/urandom > dist/blob.bin\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
            projects.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ")
        ),
    );
    for p in &projects {
        ws = ws.file(&format!("{p}/src/in.txt"), p);
    }
    (ws, projects)
}

/// Every `gen` succeeded on a worker other than w1, its `size` bytes reached the client, and
/// w1's work dir holds no staging file.
#[track_caller]
fn assert_ran_elsewhere(
    out: &Output,
    ws: &TempWorkspace,
    projects: &[String],
    size: usize,
    farm: &NetFarm,
) {
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    for p in projects {
        let task = format!("{p}#gen");
        assert_eq!(out.status_of(&task), "succeeded", "{out}");
        assert_ne!(out.report(&task)["worker"], "w1", "w1 has no room for it\n{out}");
        let got = std::fs::metadata(ws.path(&format!("{p}/dist/blob.bin")))
            .unwrap_or_else(|e| panic!("{task}'s output never reached the client: {e}\n{out}"));
        assert_eq!(got.len(), size as u64, "{task}");
    }
    let left = staging_files(farm.work_dir(0));
    assert!(left.is_empty(), "staging files left on the full worker: {left:?}");
}

#[test]
fn a_coordinator_killed_mid_run_is_reported_and_its_restart_serves_what_was_saved() {
    if !lab_or_skip() {
        return;
    }
    let mut farm = NetFarm::builder().start();
    let addr = farm.addr().to_owned();
    let ws = workspace();
    // Not re-attaching (`farm_restart` covers that): the loss itself is what is reported.
    let args = ["late", "--all", "--json", "--reattach-timeout", "0"];
    let mut run = farm.run_cmd(&ws, args).timeout(RUN_TIMEOUT).spawn();
    run.wait_for_lines("gate#hold to block", 1, waiting_line);
    run.wait_for_lines("the early tasks", PROJECTS + 1, |l| {
        l.contains("\"task_finished\"") && l.contains("#early")
    });
    farm.kill_coordinator();
    let lost = run.wait();
    assert_eq!(lost.code(), Some(2), "a lost coordinator is an infrastructure error: {lost}");
    let said: Vec<&str> = lost.stderr.lines().filter(|l| l.contains("went away")).collect();
    assert_eq!(
        said,
        [format!(
            "prova: coordinator {addr} went away; {} tasks saved, re-run to reuse them",
            PROJECTS + 1
        )],
        "{lost}"
    );

    farm.restart_coordinator();
    farm.wait_for_workers(Duration::from_secs(15));
    assert_eq!(workers_of(&farm.status()).len(), 3);
    std::fs::remove_file(ws.path("gate/hold")).expect("removing gate/hold");
    let out = farm.run_cmd(&ws, ["late", "--all", "--json"]).timeout(RUN_TIMEOUT).run();
    assert_all_succeeded(&out, &ws, &farm);
    for i in 0..PROJECTS {
        let task = format!("p{i:02}#early");
        assert_eq!(out.cache_of(&task), "hit", "{task} was saved before the crash\n{out}");
    }
}
