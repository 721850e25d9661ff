//! Persistent tasks (dev servers): dependents start once the server is ready, the server is
//! stopped when they are done, and a server that never becomes ready fails the run.

use prova_tests::{GONE_TIMEOUT, TempWorkspace, wait_all_gone, wait_group_empty};

fn ws(server_command: &str) -> TempWorkspace {
    let config = format!(
        r#"[workspace]
projects = ["srv", "app"]

[tasks.server]
command = "{server_command}"
persistent = true
cache = false
ready_when = "listening"

[tasks.e2e]
# The server is up while its dependent runs: its pid (written before `listening`) is alive.
command = "kill -0 $(cat ../server.pid) && echo server is up && echo ran > ../e2e.ran"
deps = ["srv#server"]
"#
    );
    TempWorkspace::new().file("prova.toml", &config).dir("srv").dir("app")
}

#[test]
fn a_ready_server_serves_its_dependent_then_is_stopped() {
    let ws = ws("echo $$ > ../server.pid; echo booting; echo listening on 1234; \
                 while :; do sleep 1; done");
    let out = ws.prova(["run", "e2e", "-p", "app", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.status_of("srv#server"), "succeeded", "{out}");
    assert_eq!(out.status_of("app#e2e"), "succeeded", "{out}");
    assert!(ws.exists("e2e.ran"));
    let events = out.events();
    let ready = events.iter().position(|e| e["event"] == "task_ready" && e["task"] == "srv#server");
    let e2e_started =
        events.iter().position(|e| e["event"] == "task_started" && e["task"] == "app#e2e");
    assert!(
        ready.is_some() && ready < e2e_started,
        "e2e started before the server was ready\n{out}"
    );

    // The server (and the `sleep` of its loop, in its process group) is gone.
    let server: i32 = ws.read("server.pid").trim().parse().unwrap();
    if let Err(left) = wait_all_gone(&[server], GONE_TIMEOUT) {
        panic!("the server outlived the run: {left:?}\n{out}");
    }
    if let Err(left) = wait_group_empty(server, GONE_TIMEOUT) {
        panic!("processes of the server's group outlived the run: {left:?}\n{out}");
    }
}

#[test]
fn a_server_that_exits_with_an_error_before_ready_fails_the_run() {
    let ws = ws("echo starting; echo 'cannot bind' >&2; exit 3");
    let out = ws.prova(["run", "e2e", "-p", "app", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("srv#server"), "failed", "{out}");
    assert_eq!(out.status_of("app#e2e"), "skipped", "{out}");
    assert_eq!(out.report("app#e2e")["note"], "srv#server failed", "{out}");
    assert!(!ws.exists("e2e.ran"), "the dependent must not run without its server");
    assert_eq!(out.summary()["ok"], false);
}

#[test]
fn a_server_that_exits_cleanly_before_ready_fails_the_run() {
    // Exit code 0 but never printed `listening`: nothing is serving, so the dependent must not
    // run against it.
    let ws = ws("echo starting; echo giving up");
    let out = ws.prova(["run", "e2e", "-p", "app", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("srv#server"), "failed", "{out}");
    let note = out.report("srv#server")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("before it was ready"), "the note says why: {note:?}\n{out}");
    assert_eq!(out.status_of("app#e2e"), "skipped", "{out}");
    assert!(!ws.exists("e2e.ran"), "the dependent must not run without its server");
}

/// An api server and a web server over it, each saying `up` when ready and recording its
/// shell's pid (which leads its process group).
fn servers() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["api", "web"]

[tasks.serve]
command = "echo $$ >> ../leaders; echo up; while :; do sleep 1; done"
persistent = true
ready_when = "^up$"
deps = ["^serve"]
"#,
        )
        .file("web/prova.toml", "[project]\ndeps = [\"api\"]\n")
        .dir("api")
}

#[test]
fn a_persistent_task_over_a_persistent_task_runs_both_until_ctrl_c() {
    // Seen hanging: the api was stopped the moment it was ready (no regular task was left),
    // web never started, and after Ctrl-C the api was "succeeded".
    for jobs in ["1", "4"] {
        let ws = servers();
        let mut running = ws.prova(["run", "serve", "-p", "web", "-j", jobs, "--json"]).spawn();
        running.wait_for_lines("both servers up", 2, |l| l.contains(r#""event":"task_ready""#));
        let leaders = prova_tests::read_pids(&ws.path("leaders"));
        assert_eq!(leaders.len(), 2, "-j {jobs}: {leaders:?}");
        assert!(leaders.iter().all(|&p| prova_tests::is_alive(p)), "-j {jobs}: both serve");
        running.signal(nix::sys::signal::Signal::SIGINT);
        let out = running.wait();
        out.assert_code(1);
        assert_eq!(out.status_of("api#serve"), "aborted", "-j {jobs}\n{out}");
        assert_eq!(out.status_of("web#serve"), "aborted", "-j {jobs}\n{out}");
        for &leader in &leaders {
            if let Err(left) = wait_group_empty(leader, GONE_TIMEOUT) {
                panic!("-j {jobs}: a server's processes outlived the run: {left:?}\n{out}");
            }
        }
    }
}

#[test]
fn persistent_tasks_do_not_count_against_minus_j() {
    // Two servers and a regular task under -j 1 (seen failing: "worker has no free slot").
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["a"]

[tasks.one]
command = "echo $$ >> ../leaders; echo up; while :; do sleep 1; done"
persistent = true
ready_when = "^up$"

[tasks.two]
command = "echo $$ >> ../leaders; echo up; while :; do sleep 1; done"
persistent = true
ready_when = "^up$"

[tasks.build]
command = "echo built > ../built"
cache = false
"#,
        )
        .dir("a");
    let mut running =
        ws.prova(["run", "one", "two", "build", "-p", "a", "-j", "1", "--json"]).spawn();
    running.wait_for_lines("both servers up and the build done", 3, |l| {
        l.contains(r#""event":"task_ready""#)
            || (l.contains(r#""event":"task_finished""#) && l.contains(r#""task":"a#build""#))
    });
    assert!(ws.exists("built"));
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    assert_eq!(out.status_of("a#build"), "succeeded", "{out}");
    assert_eq!(out.status_of("a#one"), "aborted", "{out}");
    assert_eq!(out.status_of("a#two"), "aborted", "{out}");
    assert!(!out.to_string().contains("no free slot"), "{out}");
}
