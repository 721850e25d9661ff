//! `examples/demo`, copied to a temporary directory and built with the real binary.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use nix::sys::signal::Signal;
use prova_tests::{GONE_TIMEOUT, TempWorkspace, repo_root, wait_none_under};

/// Directories of build products (and prova's own state) that a copy must not carry over, so
/// everything the test finds afterwards was produced by this run.
const PRODUCTS: &[&str] = &["dist", "gen", ".prova"];

fn demo() -> TempWorkspace {
    TempWorkspace::copy_of(&repo_root().join("examples/demo"), PRODUCTS)
}

/// The demo's project directories (`libs/*`, `apps/*`), relative to its root.
fn projects(ws: &TempWorkspace) -> Vec<String> {
    let mut out = Vec::new();
    for group in ["libs", "apps"] {
        for entry in std::fs::read_dir(ws.path(group)).expect("listing the demo's projects") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                out.push(format!("{group}/{}", basename(path.to_str().expect("a UTF-8 path"))));
            }
        }
    }
    out.sort();
    out
}

fn basename(dir: &str) -> &str {
    Path::new(dir).file_name().and_then(|n| n.to_str()).expect("a directory name")
}

#[test]
fn build_all_produces_every_bundle() {
    let ws = demo();
    let projects = projects(&ws);
    assert_eq!(projects.len(), 7, "the demo has four libraries and three apps: {projects:?}");
    for p in &projects {
        assert!(!ws.exists(&format!("{p}/dist")), "{p}/dist was copied");
    }

    let out = ws.prova(["run", "build", "--all"]).run();
    out.assert_code(0);

    for p in &projects {
        let bundle = format!("{p}/dist/{}.sh", basename(p));
        assert!(ws.exists(&bundle), "{bundle} was not produced\n{out}");
        let mode = std::fs::metadata(ws.path(&bundle)).unwrap().permissions().mode();
        assert!(mode & 0o111 != 0, "{bundle} is not executable ({mode:o})");
        assert!(ws.exists(&format!("{p}/dist/checksum.txt")), "{p}: no checksum\n{out}");
        out.assert_stdout_contains(&format!("bundled dist/{}.sh", basename(p)));
    }
    // The schema library's codegen ran before its build, which bundled the generated code.
    assert!(ws.exists("libs/schema/gen/user.sh") && ws.exists("libs/schema/gen/order.sh"));
    assert!(ws.read("libs/schema/dist/schema.sh").contains("# --- gen/user.sh"));
    // An app's bundle starts with the bundles of the libraries it depends on.
    let api = ws.read("apps/api/dist/api.sh");
    for lib in ["schema", "strings", "math", "format"] {
        assert!(api.contains(&format!("# bundle of {lib}")), "api lacks {lib}:\n{api}");
    }

    // One build per project, plus schema#codegen; every one executed.
    let n = projects.len() + 1;
    assert_eq!(
        out.tasks_line(),
        format!("Tasks:   {n} succeeded, 0 failed, 0 skipped, 0 aborted ({n} total, {n} ran)")
    );
}

#[test]
fn check_all_lints_and_tests_every_project() {
    let ws = demo();
    let projects = projects(&ws);
    let out = ws.prova(["run", "check", "--all"]).run();
    out.assert_code(0);
    for p in &projects {
        let name = basename(p);
        for (task, said) in [("lint", "lint ok"), ("test", "tests passed")] {
            let lines = out.task_lines(&format!("{name}#{task}"));
            assert!(lines.iter().any(|l| l.contains(said)), "{name}#{task}: no {said:?}\n{out}");
        }
    }
    // Per project: check (a group, not executed), lint, test and build; plus schema#codegen.
    let p = projects.len();
    let total = 4 * p + 1;
    let ran = total - p;
    assert_eq!(
        out.tasks_line(),
        format!(
            "Tasks:   {total} succeeded, 0 failed, 0 skipped, 0 aborted ({total} total, {ran} ran)"
        )
    );
}

#[test]
fn check_all_json_reports_every_task_once() {
    let ws = demo();
    let out = ws.prova(["run", "check", "--all", "--json"]).run();
    out.assert_code(0);
    let summary = out.summary();
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["interrupted"], false);
    let tasks = summary["tasks"].as_array().unwrap();
    let mut ids: Vec<&str> = tasks.iter().map(|t| t["task"].as_str().unwrap()).collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "a task was reported twice: {ids:?}");
    for t in tasks {
        assert_eq!(t["status"], "succeeded", "{t}");
        let group = t["task"].as_str().unwrap().ends_with("#check");
        assert_eq!(t["attempts"], if group { 0 } else { 1 }, "{t}");
    }
    // One task_finished event per task, matching the summary.
    let finished = out.events().into_iter().filter(|e| e["event"] == "task_finished").count();
    assert_eq!(finished, n);
}

#[test]
fn dev_server_serves_until_interrupted() {
    // `prova run dev -p web`: a persistent task nothing depends on runs until Ctrl-C.
    let ws = demo();
    let mut running = ws.prova(["run", "dev", "-p", "web"]).spawn();
    running.wait_for_lines("the dev server to be ready", 1, |l| l == "web#dev | ready");
    running.wait_for_lines("the server's banner", 1, |l| l.starts_with("web#dev | serving on"));
    assert!(!prova_tests::alive_under(&ws.path("apps/web")).is_empty(), "the server runs");
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.assert_code(1);
    out.assert_stdout_contains("web#dev | aborted");
    out.assert_stdout_contains("(interrupted)");
    if let Err(left) = wait_none_under(ws.root(), GONE_TIMEOUT) {
        panic!("processes of the workspace survived: {left:?}\n{out}");
    }
}
