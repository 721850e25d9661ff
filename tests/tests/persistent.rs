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
