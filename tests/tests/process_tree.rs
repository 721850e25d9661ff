//! A task's whole process tree dies on every exit path: SIGKILL of prova, Ctrl-C, and the
//! task's own end — including processes that left the task's process group (`setsid`, a
//! double fork), which a group kill does not reach.
//!
//! Every task here starts the same tree and records each member's pid in its own file:
//! - `leader`: the task's shell (leads the task's process group);
//! - `child`: a backgrounded `sleep` in the group (its parent is the leader);
//! - `grandchild`: a `sleep` started by a backgrounded subshell, still in the group;
//! - `setsid`: `setsid sh daemon.sh` — a new session, parent still the leader;
//! - `double`: started by an intermediate shell that exits at once (`sh -c 'setsid … &'`),
//!   so it is orphaned from the start, in its own session.
//!
//! The shell then waits (a poll inside the task, not in the test) until every pid file is
//! written, prints `armed`, and sleeps. The test waits on prova's stdout for `armed`.

use std::path::Path;

use nix::sys::signal::Signal;
use prova_tests::cluster::Cluster;
use prova_tests::{GONE_TIMEOUT, TempWorkspace, is_alive, wait_all_gone};

/// The pid files the tree writes, relative to the directory given to [`tree`].
const MEMBERS: [&str; 5] = ["leader", "child", "grandchild", "setsid", "double"];

/// `daemon.sh PIDFILE`: records its pid, then becomes a long sleep (same pid).
const DAEMON: &str = "echo $$ > \"$1\"; exec sleep 300\n";

/// Shell that starts the tree described in the module docs, writing pid files into `dir`
/// (absolute, or relative to the task's directory), running `daemon.sh` from `script`.
fn tree(dir: &str, script: &str) -> String {
    let d = |m: &str| format!("{dir}/{m}.pid");
    format!(
        "echo $$ > {leader}; \
         sleep 300 & echo $! > {child}; \
         (sh {script} {grandchild}; :) & \
         setsid sh {script} {setsid} & \
         sh -c 'setsid sh {script} {double} &'; \
         until [ -s {child} ] && [ -s {grandchild} ] && [ -s {setsid} ] && [ -s {double} ]; do sleep 0.01; done; ",
        leader = d("leader"),
        child = d("child"),
        grandchild = d("grandchild"),
        setsid = d("setsid"),
        double = d("double"),
    )
}

fn read_pid(path: &Path) -> i32 {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.trim().parse().unwrap_or_else(|e| panic!("bad pid in {}: {text:?}: {e}", path.display()))
}

fn pids_in(dir: &Path) -> Vec<i32> {
    MEMBERS.iter().map(|m| read_pid(&dir.join(format!("{m}.pid")))).collect()
}

/// A workspace with one project `app` whose `hang` task starts the tree and sleeps.
fn hanging_ws() -> TempWorkspace {
    let cmd = format!("{} echo armed; sleep 300", tree("..", "daemon.sh"));
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"app\"]\n\n[tasks.hang]\ncommand = {cmd:?}\ncache = false\n"
            ),
        )
        .file("app/daemon.sh", DAEMON)
}

/// Starts `prova run hang`, waits until the tree is armed, delivers `sig` to prova alone and
/// checks that no member of the tree outlives it.
fn end_prova_with(sig: Signal) {
    let ws = hanging_ws();
    let mut running = ws.prova(["run", "hang", "--all", "--json"]).spawn();
    running.wait_for_lines("the tree to be armed", 1, |l| l.contains(r#""text":"armed\n""#));
    let pids = pids_in(ws.root());
    assert!(pids.iter().all(|&p| is_alive(p)), "the whole tree runs before the signal: {pids:?}");
    running.signal(sig);
    let out = running.wait();
    if let Err(left) = wait_all_gone(&pids, GONE_TIMEOUT) {
        let named: Vec<_> = MEMBERS
            .iter()
            .zip(&pids)
            .filter(|(_, p)| left.contains(p))
            .map(|(m, p)| format!("{m}={p}"))
            .collect();
        panic!("after {sig} of prova, still alive: {named:?}\n{out}");
    }
}

#[test]
fn sigkill_of_prova_leaves_no_process_of_the_task_tree() {
    end_prova_with(Signal::SIGKILL);
}

#[test]
fn ctrl_c_leaves_no_process_of_the_task_tree() {
    end_prova_with(Signal::SIGINT);
}

#[test]
fn sigterm_leaves_no_process_of_the_task_tree() {
    end_prova_with(Signal::SIGTERM);
}

/// A task that ends normally, leaving daemons behind: they are killed when the task ends —
/// before the next task starts — and the task's output says so.
#[test]
fn daemons_left_by_a_finished_task_are_killed_at_its_end_with_a_warning() {
    // `check` runs after `leak` ended and fails if any pid `leak` recorded is still running
    // (a zombie, reaped by nobody yet, is not running).
    let leak = format!("{} echo leaked", tree("..", "daemon.sh"));
    let check = "for m in child grandchild setsid double; do \
                 s=$(sed 's/.*) //' /proc/$(cat ../$m.pid)/stat 2>/dev/null | cut -c1); \
                 if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo \"$m still running\"; exit 1; fi; \
                 done; echo all gone";
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"app\"]\n\n[tasks.leak]\ncommand = {leak:?}\ncache = false\n\n\
                 [tasks.check]\ncommand = {check:?}\ndeps = [\"leak\"]\ncache = false\n"
            ),
        )
        .file("app/daemon.sh", DAEMON);
    let out = ws.prova(["run", "check", "--all", "--json"]).run();
    let pids = pids_in(ws.root());
    let left = wait_all_gone(&pids[1..], GONE_TIMEOUT);
    out.assert_code(0);
    assert_eq!(out.status_of("app#leak"), "succeeded", "{out}");
    assert!(out.output_of("app#check").contains("all gone"), "{out}");
    let leak_out = out.output_of("app#leak");
    // child, the subshell, grandchild, setsid, double: five, each named up to five.
    assert!(
        leak_out.contains("prova: warning: the task left 5 processes running after it exited (")
            && leak_out.contains("; killed them"),
        "the task's output names the leak: {leak_out:?}\n{out}"
    );
    for m in ["setsid", "double"] {
        let pid = read_pid(&ws.path(&format!("{m}.pid")));
        assert!(leak_out.contains(&format!("sleep {pid}")), "{m} is named: {leak_out:?}");
    }
    assert!(left.is_ok(), "still alive: {left:?}\n{out}");
}

/// A worker daemon (`prova worker`, the same executor) SIGKILLed while its task runs leaves
/// no process of the task tree.
#[test]
fn sigkill_of_a_worker_leaves_no_process_of_the_task_tree() {
    let mut farm =
        Cluster::builder().workers(1).sandbox(prova_tests::cluster::Sandbox::None).start();
    let marks = tempfile::tempdir().expect("tempdir");
    let dir = marks.path().to_str().expect("utf-8 temp path").to_owned();
    std::fs::write(marks.path().join("daemon.sh"), DAEMON).expect("write daemon.sh");
    let cmd = format!("{} echo armed; sleep 300", tree(&dir, &format!("{dir}/daemon.sh")));
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"app\"]\n\n[tasks.hang]\ncommand = {cmd:?}\ncache = false\n"
            ),
        )
        .dir("app");
    let mut running = farm.run_cmd(&ws, &farm.ci_certs(), ["hang", "--all", "--json"]).spawn();
    running.wait_for_lines("the tree to be armed", 1, |l| l.contains(r#""text":"armed\n""#));
    let pids = pids_in(marks.path());
    assert!(pids.iter().all(|&p| is_alive(p)), "the whole tree runs: {pids:?}");
    farm.kill_worker(0);
    let left = wait_all_gone(&pids, GONE_TIMEOUT);
    drop(running);
    if let Err(left) = left {
        panic!("after SIGKILL of the worker, still alive: {left:?}\n{}", farm.logs());
    }
}
