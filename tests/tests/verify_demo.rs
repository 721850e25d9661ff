//! A proof run of the bundled `examples/demo` (copied to a temporary directory): with
//! `--verify=all` every task is proven complete and deterministic, or has no outputs, or is
//! a group. This guards the demo's declared inputs: a script that starts reading an
//! undeclared file, or writing a timestamp, turns this red.

use std::time::Duration;

use prova_tests::verify::{name, prova, sandbox_or_skip, verdicts, verify_line};
use prova_tests::{TempWorkspace, repo_root};

/// Build products and prova's state: the copy must start clean.
const PRODUCTS: &[&str] = &["dist", "gen", ".prova"];

#[test]
fn the_demo_is_proven_under_verify_all() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = TempWorkspace::copy_of(&repo_root().join("examples/demo"), PRODUCTS);
    // Every exec root is sandboxed and traced, and every task with outputs runs twice.
    let out =
        prova(&ws, ["run", "build", "test", "lint", "check", "--all", "--verify=all", "--json"])
            .timeout(Duration::from_secs(300))
            .run();
    out.assert_code(0);
    let summary = out.summary();
    assert_eq!(summary["ok"], true, "{out}");
    let tasks = summary["tasks"].as_array().expect("tasks");
    assert!(tasks.len() >= 29, "7 projects × build/test/lint/check, plus codegen\n{out}");
    let mut proven = 0;
    for t in tasks {
        let id = t["task"].as_str().expect("a task id");
        let names: Vec<String> = verdicts(&out, id).iter().map(name).collect();
        let expected: &[&str] = if id.ends_with("#check") {
            &["not-verified"]
        } else if id.ends_with("#build") || id.ends_with("#codegen") {
            proven += 1;
            &["proven-complete", "proven-deterministic"]
        } else {
            &["proven-complete", "no-outputs"]
        };
        assert_eq!(names, expected, "{id}\n{out}");
    }
    assert_eq!(proven, 8, "seven bundles and the schema code generator\n{out}");

    // The warm graph is all hits, none of them claimed proven.
    let warm = prova(&ws, ["run", "build", "test", "lint", "check", "--all", "--verify=all"])
        .timeout(Duration::from_secs(300))
        .run();
    warm.assert_code(0);
    let line = verify_line(&warm);
    assert!(
        line.starts_with("Verify:") && line.ends_with(" not verified") && !line.contains('·'),
        "{warm}"
    );
}
