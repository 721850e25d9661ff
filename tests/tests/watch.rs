//! `prova watch`: an edit re-runs exactly the affected task, a task's own outputs do not start
//! a cycle, a long-lived persistent task restarts only when its inputs change, and Ctrl-C
//! leaves nothing behind. Every wait reads the watch's stdout (`watch: waiting for changes`
//! ends each cycle) or looks at processes, bounded; nothing sleeps to synchronise.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use prova_tests::{GONE_TIMEOUT, Running, TempWorkspace, is_alive, read_pids, wait_all_gone};

/// The whole watch's deadline: a few cycles on a loaded machine.
const WATCH_TIMEOUT: Duration = Duration::from_secs(180);

const WAITING: &str = "watch: waiting for changes";

/// Three projects whose `build` appends a line to `<counts>/<project>.count` (outside the
/// workspace, so the count itself is no change the watch sees) and writes its output
/// `out.txt`; `srv` also has a long-lived `serve` that appends its pid to `serve.pids`.
fn workspace(counts: &Path) -> TempWorkspace {
    let counts = counts.display();
    let root = format!(
        r#"[workspace]
projects = ["a", "b", "srv"]

[tasks.build]
command = "echo run >> {counts}/$PROVA_PROJECT.count; echo built > out.txt"
outputs = ["out.txt"]
"#
    );
    let srv = format!(
        r#"[tasks.serve]
command = "echo $$ >> {counts}/serve.pids; echo serving; while :; do sleep 1; done"
persistent = true
cache = false
deps = ["build"]
"#
    );
    TempWorkspace::new()
        .file("prova.toml", &root)
        .file("srv/prova.toml", &srv)
        .file("a/src.txt", "1\n")
        .file("b/src.txt", "1\n")
        .file("srv/src.txt", "1\n")
}

/// Lines in `<counts>/<name>` (0 when absent).
fn count(counts: &Path, name: &str) -> usize {
    std::fs::read_to_string(counts.join(name)).map_or(0, |t| t.lines().count())
}

fn waits(watch: &mut Running, n: usize) {
    watch.wait_for_lines(&format!("cycle {n} to end"), n, |l| l == WAITING);
}

/// The `watch: … changed (…), re-running` lines so far.
fn cycle_lines(watch: &Running) -> Vec<String> {
    watch
        .stdout_so_far()
        .iter()
        .filter(|l| l.starts_with("watch: ") && l.ends_with(", re-running"))
        .cloned()
        .collect()
}

#[test]
fn an_edit_reruns_exactly_the_affected_task_and_outputs_do_not_start_a_cycle() {
    let counts = tempfile::tempdir().unwrap();
    let c = counts.path();
    let ws = workspace(c);
    let mut watch = ws.prova(["watch", "build", "--all"]).timeout(WATCH_TIMEOUT).spawn();
    waits(&mut watch, 1);
    assert_eq!([count(c, "a.count"), count(c, "b.count"), count(c, "srv.count")], [1, 1, 1]);

    // An edit of a's input: a#build executes again, the others are hits.
    ws.write("a/src.txt", "2\n");
    waits(&mut watch, 2);
    assert_eq!(
        [count(c, "a.count"), count(c, "b.count"), count(c, "srv.count")],
        [2, 1, 1],
        "{:#?}",
        watch.stdout_so_far()
    );
    assert_eq!(cycle_lines(&watch), ["watch: 1 file changed (a/src.txt), re-running"]);

    // A write into a's declared output is no change; the edit of b after it is the next
    // cycle, and the only one: had the output started a cycle, it would be that one (or be
    // named beside b's file).
    ws.write("a/out.txt", "scribbled\n");
    ws.write("b/src.txt", "2\n");
    waits(&mut watch, 3);
    assert_eq!(
        [count(c, "a.count"), count(c, "b.count"), count(c, "srv.count")],
        [2, 2, 1],
        "{:#?}",
        watch.stdout_so_far()
    );
    assert_eq!(
        cycle_lines(&watch),
        [
            "watch: 1 file changed (a/src.txt), re-running",
            "watch: 1 file changed (b/src.txt), re-running"
        ]
    );

    watch.signal(Signal::SIGINT);
    let out = watch.wait();
    out.assert_code(1).assert_stdout_contains("watch: stopping");
}

#[test]
fn a_server_restarts_only_when_its_inputs_change_and_ctrl_c_leaves_nothing() {
    let counts = tempfile::tempdir().unwrap();
    let c = counts.path();
    let ws = workspace(c);
    let mut watch = ws.prova(["watch", "build", "serve", "--all"]).timeout(WATCH_TIMEOUT).spawn();
    waits(&mut watch, 1);
    let serving = |l: &str| l.starts_with("srv#serve") && l.ends_with("| serving");
    watch.wait_for_lines("the server to start", 1, serving);
    let first = read_pids(&c.join("serve.pids"));
    assert_eq!(first.len(), 1, "{first:?}");

    // a is not upstream of the server: it keeps running (a restart stops it before the
    // cycle, so by the cycle's end it would be gone).
    ws.write("a/src.txt", "2\n");
    waits(&mut watch, 2);
    assert_eq!(count(c, "a.count"), 2);
    assert!(is_alive(first[0]), "the server was stopped\n{:#?}", watch.stdout_so_far());
    assert_eq!(read_pids(&c.join("serve.pids")), first);

    // srv's own input: the server stops, srv#build runs again, a new server starts.
    ws.write("srv/src.txt", "2\n");
    waits(&mut watch, 3);
    assert_eq!([count(c, "a.count"), count(c, "b.count"), count(c, "srv.count")], [2, 1, 2]);
    assert!(!is_alive(first[0]), "the old server still runs\n{:#?}", watch.stdout_so_far());
    watch.wait_for_lines("the server to start again", 2, serving);
    let pids = read_pids(&c.join("serve.pids"));
    assert_eq!(pids.len(), 2, "{pids:?}");

    // Ctrl-C: the watch stops its runs, which stop their tasks; nothing is left.
    watch.signal(Signal::SIGINT);
    let out = watch.wait();
    out.assert_code(1);
    if let Err(left) = wait_all_gone(&pids, GONE_TIMEOUT) {
        panic!("the server outlived the watch: {left:?}\n{out}");
    }
    if let Err(left) = prova_tests::wait_none_under(ws.root(), GONE_TIMEOUT) {
        panic!("processes in the workspace outlived the watch: {left:?}\n{out}");
    }
}
