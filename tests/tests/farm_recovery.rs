//! The farm under faults, recovery half (issue 13): a client whose coordinator goes away and
//! stays away past its `--reattach-timeout` says so within seconds of that, in one line that
//! says what a re-run will reuse (exit 2, an infrastructure error); workers rejoin a restarted
//! coordinator within seconds, and a re-run hits what the lost run saved; a worker stopped with
//! SIGTERM leaves the farm at once and its task runs elsewhere; Ctrl-C lists the tasks still
//! queued on the farm as skipped. (A client re-attaching to a restarted coordinator:
//! `farm_restart`.)
//!
//! Every bound here is a test deadline, not a measurement: a client or worker that waited out
//! its 30 s idle timeout (the pause tolerance) instead of probing the closed port or taking
//! the new coordinator's stateless reset misses it.

use std::time::Duration;

use prova_tests::TempWorkspace;
use prova_tests::cluster::{
    Cluster, READY_TIMEOUT, blocking_command, in_roots_of, release, waiting_dirs, waiting_line,
    worker_of,
};

/// The whole client run's deadline when its coordinator dies mid-run: the start of the run on
/// a loaded machine plus the few seconds a lost coordinator may take to be noticed — well
/// under the 30 s the client used to wait.
const LOST_RUN_TIMEOUT: Duration = Duration::from_secs(25);

/// How long workers may take to rejoin a coordinator restarted after a SIGKILL (not the 30 s
/// idle timeout: the restarted coordinator resets their old connections).
const REJOIN_TIMEOUT: Duration = Duration::from_secs(15);

/// Projects `fast` and `slow`; `build` writes `dist/out.txt`, then, where a `hold` file is (in
/// `slow`), waits for a `release` file that never comes (see [`blocking_command`]).
fn workspace(with_slow: bool) -> TempWorkspace {
    let block = blocking_command("true");
    let projects = if with_slow { "\"fast\", \"slow\"" } else { "\"fast\"" };
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [{projects}]\n[tasks.build]\n\
                 command = 'mkdir -p dist; echo built > dist/out.txt; \
                 if [ -e hold ]; then {block}; fi'\noutputs = [\"dist/**\"]\n"
            ),
        )
        .file("fast/src.txt", "fast\n");
    if with_slow { ws.file("slow/src.txt", "slow\n").file("slow/hold", "") } else { ws }
}

/// How long these clients redial a lost coordinator: briefly (a coordinator that is not
/// coming back is reported), or not at all where it comes back (the loss is the subject).
const REATTACH: &str = "2";

/// Starts `build --all` on `farm`, waits until `slow#build` blocks and (when `fast` is in the
/// plan) `fast#build` finished; then `lose` takes the coordinator away. Returns the client's
/// end. The client re-attaches for `reattach` seconds.
fn lose_coordinator_mid_run(
    farm: &mut Cluster,
    ws: &TempWorkspace,
    fast_done: bool,
    reattach: &str,
    lose: impl FnOnce(&mut Cluster),
) -> prova_tests::Output {
    let args = ["build", "--all", "--json", "--reattach-timeout", reattach];
    let mut run = farm.run_cmd(ws, &farm.ci_certs(), args).timeout(LOST_RUN_TIMEOUT).spawn();
    run.wait_for_lines("slow#build to block", 1, waiting_line);
    if fast_done {
        run.wait_for_lines("fast#build to finish", 1, |l| {
            l.contains("\"task_finished\"") && l.contains("fast#build")
        });
    }
    lose(farm);
    run.wait()
}

/// The stderr lines that speak of the coordinator going away.
fn went_away_lines(out: &prova_tests::Output) -> Vec<String> {
    out.stderr.lines().filter(|l| l.contains("went away")).map(str::to_owned).collect()
}

#[test]
fn a_coordinator_killed_mid_run_is_one_line_naming_what_was_saved() {
    let mut farm = Cluster::start(1);
    let addr = farm.addr().to_owned();
    let ws = workspace(true);
    let out = lose_coordinator_mid_run(&mut farm, &ws, true, REATTACH, Cluster::stop_coordinator);
    assert_eq!(out.code(), Some(2), "a lost coordinator is an infrastructure error: {out}");
    assert_eq!(
        went_away_lines(&out),
        [format!("prova: coordinator {addr} went away; 1 task saved, re-run to reuse them")],
        "{out}"
    );
    assert!(!out.stderr.contains("connection lost"), "the transport's words stay out: {out}");
}

#[test]
fn a_coordinator_stopped_mid_run_is_the_same_line() {
    // SIGTERM: the coordinator closes its connections (an application close, not a timeout).
    let mut farm = Cluster::start(1);
    let addr = farm.addr().to_owned();
    let ws = workspace(true);
    let out =
        lose_coordinator_mid_run(&mut farm, &ws, true, REATTACH, Cluster::terminate_coordinator);
    assert_eq!(out.code(), Some(2), "{out}");
    assert_eq!(
        went_away_lines(&out),
        [format!("prova: coordinator {addr} went away; 1 task saved, re-run to reuse them")],
        "{out}"
    );
}

#[test]
fn a_coordinator_lost_before_anything_was_saved_says_none_was() {
    let mut farm = Cluster::start(1);
    let addr = farm.addr().to_owned();
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"slow\"]\n[tasks.build]\ncommand = '{}'\n",
                blocking_command("true")
            ),
        )
        .file("slow/src.txt", "slow\n");
    let out = lose_coordinator_mid_run(&mut farm, &ws, false, REATTACH, Cluster::stop_coordinator);
    assert_eq!(out.code(), Some(2), "{out}");
    assert_eq!(
        went_away_lines(&out),
        [format!("prova: coordinator {addr} went away; 0 tasks saved, re-run to reuse them")],
        "{out}"
    );
}

#[test]
fn a_coordinator_restarted_on_its_address_meets_the_run_it_lost() {
    // The coordinator dies and a new one takes its address while the client still waits: the
    // new one knows nothing of the connection (a stateless reset, or silence) — the same line
    // for a client that does not re-attach.
    let mut farm = Cluster::start(1);
    let addr = farm.addr().to_owned();
    let ws = workspace(true);
    let out = lose_coordinator_mid_run(&mut farm, &ws, true, "0", |farm| {
        farm.kill_coordinator_expecting_rejoin_within(REJOIN_TIMEOUT);
    });
    assert_eq!(out.code(), Some(2), "{out}");
    assert_eq!(
        went_away_lines(&out),
        [format!("prova: coordinator {addr} went away; 1 task saved, re-run to reuse them")],
        "{out}"
    );
}

#[test]
fn workers_rejoin_a_restarted_coordinator_and_a_rerun_hits_what_was_saved() {
    let mut farm = Cluster::start(2);
    let ws = workspace(true);
    let lost = lose_coordinator_mid_run(&mut farm, &ws, true, "0", |farm| {
        farm.kill_coordinator_expecting_rejoin_within(REJOIN_TIMEOUT);
    });
    assert_eq!(lost.code(), Some(2), "{lost}");
    // Both workers are back (the harness waited for them within the bound); a re-run without
    // the blocking task reuses what the lost run saved.
    std::fs::remove_file(ws.path("slow/hold")).expect("remove slow/hold");
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert_eq!(out.cache_of("fast#build"), "hit", "{out}");
    assert_eq!(out.cache_of("slow#build"), "saved", "{out}");
}

#[test]
fn workers_rejoin_a_coordinator_killed_while_idle() {
    let mut farm = Cluster::start(2);
    farm.kill_coordinator_expecting_rejoin_within(REJOIN_TIMEOUT);
    // And again: a second crash is met the same way (the backoff was reset on rejoining).
    farm.kill_coordinator_expecting_rejoin_within(REJOIN_TIMEOUT);
    let ws = workspace(false);
    farm.run(&ws, ["build", "--all"]).assert_code(0);
}

#[test]
fn an_interrupt_lists_the_tasks_still_queued_on_the_farm_as_skipped() {
    // One slot: `a` runs and blocks, `b` and `c` wait in the farm's queue. Ctrl-C aborts `a`;
    // `b` and `c` never ran — skipped, not failed.
    let farm = Cluster::builder().workers(1).slots(1).start();
    let block = blocking_command("true");
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            &format!("[workspace]\nprojects = [\"a\", \"b\", \"c\"]\n[tasks.build]\ncommand = '{block}'\n"),
        )
        .file("a/src.txt", "a\n")
        .file("b/src.txt", "b\n")
        .file("c/src.txt", "c\n");
    let mut run = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).spawn();
    run.wait_for_lines("a task to block", 1, waiting_line);
    run.signal(nix::sys::signal::Signal::SIGINT);
    let out = run.wait();
    assert_eq!(out.code(), Some(1), "an interrupted run: {out}");
    let statuses: Vec<String> =
        ["a#build", "b#build", "c#build"].iter().map(|t| out.status_of(t)).collect();
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, ["aborted", "skipped", "skipped"], "{statuses:?}\n{out}");
    assert_eq!(out.summary()["interrupted"], true, "{out}");
}

#[test]
fn a_worker_stopped_with_sigterm_leaves_the_farm_at_once_and_its_task_runs_elsewhere() {
    let mut farm = Cluster::start(2);
    let ws = workspace_blocking_one();
    let mut run = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"])
        .timeout(LOST_RUN_TIMEOUT * 2)
        .spawn();
    run.wait_for_lines("the task to block", 1, waiting_line);
    let victim = farm.wait_running("p#build", READY_TIMEOUT);
    let other = 1 - victim;
    let name = farm.worker_name(victim).to_owned();
    farm.terminate_worker(victim);
    // At once: the worker exited after the farm took its leaving — no waiting on a timeout.
    let status = farm.status();
    assert!(worker_of(&status, &name).is_none(), "{name} still listed:\n{status:#}");
    // What it held was handed back and runs on the other worker.
    run.wait_for_lines("the task to start again", 2, waiting_line);
    let dirs = waiting_dirs(run.stdout_so_far(), "p#build");
    assert!(in_roots_of(&dirs[1], &farm.work_dir(other)), "{dirs:?}");
    release(&dirs[1]);
    let out = run.wait();
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert_eq!(out.status_of("p#build"), "succeeded", "{out}");
    // And it is never given work again: the farm lists only the other worker.
    let workers: Vec<String> = prova_tests::cluster::workers_of(&farm.status())
        .iter()
        .filter_map(|w| w["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(workers, [farm.worker_name(other)]);
}

/// One project `p` whose `build` blocks until released, then writes `dist/out.txt`.
fn workspace_blocking_one() -> TempWorkspace {
    prova_tests::cluster::blocking_workspace("mkdir -p dist; echo built > dist/out.txt")
}
