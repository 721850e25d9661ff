//! Ctrl-C (SIGINT) and SIGTERM on a real `prova run`: every task is aborted, the run exits 1
//! with an interrupted summary, and no process the tasks started is left behind.

use nix::sys::signal::Signal;
use prova_tests::{
    GONE_TIMEOUT, TempWorkspace, read_pids, wait_all_gone, wait_group_empty, wait_none_under,
};

const PROJECTS: usize = 3;

/// Each `slow` task records its shell's pid (which leads the task's process group) and the pid
/// of a backgrounded grandchild, says `armed`, then sleeps in the foreground.
fn ws() -> TempWorkspace {
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        r#"[workspace]
projects = ["p*"]

[tasks.slow]
command = "echo $$ >> ../leaders; sleep 300 & echo $! >> ../pids; echo $$ >> ../pids; echo armed; sleep 300"
cache = false
"#,
    );
    for i in 0..PROJECTS {
        ws = ws.dir(&format!("p{i}"));
    }
    ws
}

/// Starts the run, waits (on prova's stdout, a pipe) until every task is armed, sends `sig`,
/// and checks the run and the processes.
fn interrupt(sig: Signal, json: bool) {
    let ws = ws();
    let jobs = PROJECTS.to_string();
    let mut args = vec!["run", "slow", "--all", "-j", &jobs];
    if json {
        args.push("--json");
    }
    let mut running = ws.prova(args).spawn();
    running.wait_for_lines("every task to be armed", PROJECTS, |l| {
        if json { l.contains(r#""text":"armed\n""#) } else { l.ends_with("| armed") }
    });
    // `armed` is printed after both pids were written.
    let pids = read_pids(&ws.path("pids"));
    let leaders = read_pids(&ws.path("leaders"));
    assert_eq!(pids.len(), 2 * PROJECTS, "{pids:?}");
    assert_eq!(leaders.len(), PROJECTS, "{leaders:?}");
    assert!(prova_tests::is_alive(pids[0]), "tasks are running before the signal");

    running.signal(sig);
    let out = running.wait();
    out.assert_code(1);

    if json {
        let summary = out.summary();
        assert_eq!(summary["interrupted"], true, "{out}");
        assert_eq!(summary["ok"], false, "{out}");
        for i in 0..PROJECTS {
            assert_eq!(out.status_of(&format!("p{i}#slow")), "aborted", "{out}");
        }
    } else {
        assert_eq!(
            out.tasks_line(),
            format!(
                "Tasks:   0 succeeded, 0 failed, 0 skipped, {PROJECTS} aborted ({PROJECTS} total, {PROJECTS} ran)"
            ),
            "{out}"
        );
        out.assert_stdout_contains("(interrupted)");
        for i in 0..PROJECTS {
            out.assert_stdout_contains(&format!("p{i}#slow | aborted"));
        }
    }

    if let Err(left) = wait_all_gone(&pids, GONE_TIMEOUT) {
        panic!("still alive after prova exited: {left:?}\n{out}");
    }
    // Nothing else (the foreground `sleep`s) survives in any task's process group, nor
    // anywhere in the workspace.
    for leader in leaders {
        if let Err(left) = wait_group_empty(leader, GONE_TIMEOUT) {
            panic!("members of task group {leader} survived: {left:?}\n{out}");
        }
    }
    if let Err(left) = wait_none_under(ws.root(), GONE_TIMEOUT) {
        panic!("processes of the workspace survived: {left:?}\n{out}");
    }
}

#[test]
fn sigint_aborts_every_task_and_leaves_nothing_behind() {
    interrupt(Signal::SIGINT, false);
}

#[test]
fn sigterm_aborts_every_task_and_leaves_nothing_behind() {
    interrupt(Signal::SIGTERM, false);
}

#[test]
fn sigint_json_summary_reports_aborted() {
    interrupt(Signal::SIGINT, true);
}

#[test]
fn sigterm_json_summary_reports_aborted() {
    interrupt(Signal::SIGTERM, true);
}

#[test]
fn interrupt_skips_what_had_not_started() {
    // One slot: `first` runs, `second` (which depends on it) waits. An interrupt aborts the one
    // and skips the other, which must never start.
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app"]

[tasks.first]
command = "echo $$ > ../first.pid; echo armed; sleep 300"
[tasks.second]
command = "echo ran > ../second.ran"
deps = ["first"]
"#,
        )
        .dir("app");
    let mut running = ws.prova(["run", "second", "--all", "--json"]).spawn();
    running.wait_for_lines("first to be armed", 1, |l| l.contains(r#""text":"armed\n""#));
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.assert_code(1);
    assert_eq!(out.status_of("app#first"), "aborted", "{out}");
    assert_eq!(out.status_of("app#second"), "skipped", "{out}");
    assert_eq!(out.report("app#second")["note"], "the run was interrupted", "{out}");
    assert!(!ws.exists("second.ran"));
    let first: i32 = ws.read("first.pid").trim().parse().unwrap();
    if let Err(left) = wait_group_empty(first, GONE_TIMEOUT) {
        panic!("first's process group survived: {left:?}\n{out}");
    }
}

#[test]
fn a_task_that_ignores_sigterm_is_killed_after_the_grace() {
    // `trap '' TERM` is inherited by the loop's `sleep`s: only SIGKILL ends this group.
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app"]

[tasks.stubborn]
command = "trap '' TERM; echo $$ > ../leader; sleep 300 & echo $! > ../child; echo armed; while :; do sleep 1; done"
"#,
        )
        .dir("app");
    let mut running = ws.prova(["run", "stubborn", "--all", "--json"]).spawn();
    running.wait_for_lines("the task to be armed", 1, |l| l.contains(r#""text":"armed\n""#));
    running.signal(Signal::SIGTERM);
    let out = running.wait();
    out.assert_code(1);
    assert_eq!(out.status_of("app#stubborn"), "aborted", "{out}");
    let leader: i32 = ws.read("leader").trim().parse().unwrap();
    let child: i32 = ws.read("child").trim().parse().unwrap();
    if let Err(left) = wait_all_gone(&[leader, child], GONE_TIMEOUT) {
        panic!("survived SIGKILL after the grace: {left:?}\n{out}");
    }
    if let Err(left) = wait_group_empty(leader, GONE_TIMEOUT) {
        panic!("members of the task's group survived: {left:?}\n{out}");
    }
}
