//! `prova graph` (dot and JSON) and `prova run --dry-run`.

use std::collections::{BTreeMap, BTreeSet};

use prova_tests::TempWorkspace;
use serde_json::Value;

/// `app` → `lib` → `base` (by `[project] deps`), `build` depends on `^build`.
fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["base", "lib", "app"]

[tasks.build]
command = "mkdir -p dist && echo built > dist/out.txt"
deps = ["^build"]
outputs = ["dist/**"]
"#,
        )
        .dir("base")
        .file("lib/prova.toml", "[project]\ndeps = [\"base\"]\n")
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
}

fn edges(tasks: &[Value]) -> BTreeSet<(String, String)> {
    tasks
        .iter()
        .flat_map(|t| {
            let from = t["id"].as_str().expect("a task id").to_owned();
            t["deps"]
                .as_array()
                .expect("a deps array")
                .iter()
                .map(move |d| (from.clone(), d.as_str().expect("a dep id").to_owned()))
        })
        .collect()
}

fn assert_dependency_order(ids: &[String], edges: &BTreeSet<(String, String)>) {
    let pos: BTreeMap<&str, usize> =
        ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    for (from, to) in edges {
        assert!(pos[to.as_str()] < pos[from.as_str()], "{to} must come before {from}: {ids:?}");
    }
}

#[test]
fn graph_json_lists_every_task_and_edge() {
    let out = ws().prova(["graph", "build", "--all", "--json"]).run();
    out.assert_code(0);
    let graph: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let tasks = graph["tasks"].as_array().unwrap();
    let ids: Vec<String> = tasks.iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    let edges = edges(tasks);
    let want: BTreeSet<(String, String)> =
        [("app#build", "lib#build"), ("lib#build", "base#build")]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into();
    assert_eq!(edges, want, "{out}");
    assert_eq!(ids.len(), 3, "{out}");
    assert_dependency_order(&ids, &edges);
    for t in tasks {
        assert_eq!(t["requested"], true, "{t}");
        assert_eq!(t["task"], "build");
    }
}

#[test]
fn graph_dot_has_the_edges() {
    let out = ws().prova(["graph", "build", "--all", "--dot"]).run();
    out.assert_code(0);
    assert!(out.stdout.starts_with("digraph"), "{out}");
    out.assert_stdout_contains(r#""app#build" -> "lib#build""#);
    out.assert_stdout_contains(r#""lib#build" -> "base#build""#);
    assert_eq!(out.stdout.matches("->").count(), 2, "{out}");
    // Dot is the default.
    let default = ws().prova(["graph", "build", "--all"]).run();
    default.assert_code(0);
    assert_eq!(default.stdout, out.stdout);
}

#[test]
fn dry_run_runs_nothing_and_lists_in_dependency_order() {
    let ws = ws();
    let out = ws.prova(["run", "build", "-p", "app", "--dry-run"]).run();
    out.assert_code(0);
    for p in ["base", "lib", "app"] {
        assert!(!ws.exists(&format!("{p}/dist")), "{p}/dist exists: the dry run ran something");
    }
    out.assert_stdout_contains("3 tasks would run, in this order:");
    let order: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| {
            l.trim_start().split_once(". ").map(|(_, rest)| rest.split_whitespace().next().unwrap())
        })
        .collect();
    assert_eq!(order, ["base#build", "lib#build", "app#build"], "{out}");

    let out = ws.prova(["run", "build", "-p", "app", "--dry-run", "--json"]).run();
    out.assert_code(0);
    let plan: Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let tasks = plan["tasks"].as_array().unwrap();
    let ids: Vec<String> = tasks.iter().map(|t| t["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids, ["base#build", "lib#build", "app#build"], "{out}");
    assert_dependency_order(&ids, &edges(tasks));
    assert!(!ws.exists("app/dist"));

    // The real run then does build everything, in that order.
    ws.prova(["run", "build", "-p", "app"]).run().assert_code(0);
    for p in ["base", "lib", "app"] {
        assert_eq!(ws.read(&format!("{p}/dist/out.txt")), "built\n");
    }
}

#[test]
fn run_in_a_project_dir_selects_that_project_and_what_it_needs() {
    let ws = ws();
    let out = ws.prova(["run", "build", "--json"]).cwd("lib").run();
    out.assert_code(0);
    let summary = out.summary();
    let mut ids: Vec<&str> =
        summary["tasks"].as_array().unwrap().iter().map(|t| t["task"].as_str().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["base#build", "lib#build"], "{out}");
    assert!(ws.exists("lib/dist/out.txt") && ws.exists("base/dist/out.txt"));
    assert!(!ws.exists("app/dist"), "app depends on lib, not the other way round");
}
