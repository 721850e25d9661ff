//! The task graph end to end: `deps` resolution (`^task`, `task`, `project#task`), located
//! errors, cycles, selection (`--all`, `-p`, `--filter`, cwd, ids), `--affected` on real git
//! repositories, topological order and the text renderings.
//!
//! Workspaces are built by hand where only the shape matters, and loaded from temporary
//! directories where the message must name a real `file:line:col` or git must see files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use prova_protocol::TaskId;
use prova_protocol::spec::CommandLine;
use tempfile::TempDir;

use crate::graph::filter::FilterError;
use crate::graph::{GraphError, TaskGraph, build_graph, render};
use crate::location::{Located, Location};
use crate::selection::affected::{self, AffectedError};
use crate::selection::{ProjectFilter, SelectError, Selection, closure, select};
use crate::workspace::{Project, TaskDef, Workspace, WorkspaceSettings};

// ---------------------------------------------------------------------------------------------
// Hand-built workspaces.

const ROOT: &str = "/ws";

fn loc(file: &str, line: u32, col: u32) -> Location {
    Location::new(Path::new(ROOT), &Path::new(ROOT).join(file), line, col)
}

/// A task as a workspace default would give it: each dep located on its own line of the root
/// `prova.toml`.
pub(super) fn task(name: &str, deps: &[&str]) -> TaskDef {
    let mut t = TaskDef::new(name, loc("prova.toml", 1, 1));
    t.deps = deps
        .iter()
        .zip(1u32..)
        .map(|(d, line)| Located::new((*d).to_owned(), loc("prova.toml", line, 9)))
        .collect();
    t
}

/// The same task with its deps written in the project's own `prova.toml`.
fn own(mut t: TaskDef) -> TaskDef {
    t.deps_from_project = true;
    t
}

pub(super) fn project(name: &str, dir: &str, deps: &[&str], tasks: Vec<TaskDef>) -> Project {
    let file = format!("{dir}/prova.toml");
    Project {
        name: name.to_owned(),
        dir: dir.to_owned(),
        deps: deps.iter().map(|d| Located::new((*d).to_owned(), loc(&file, 2, 8))).collect(),
        tasks: tasks.into_iter().map(|t| (t.name.clone(), t)).collect(),
        config_file: None,
    }
}

pub(super) fn workspace(mut projects: Vec<Project>) -> Workspace {
    projects.sort_by(|a, b| a.dir.cmp(&b.dir));
    Workspace {
        root: PathBuf::from(ROOT),
        config_file: PathBuf::from(ROOT).join("prova.toml"),
        settings: WorkspaceSettings::default(),
        projects,
    }
}

fn id(s: &str) -> TaskId {
    TaskId::parse(s).unwrap_or_else(|| panic!("bad id {s}"))
}

/// Node ids in node order.
pub(super) fn ids(g: &TaskGraph) -> Vec<&str> {
    g.nodes.iter().map(|n| n.id.as_str()).collect()
}

/// Ids of the requested nodes, in node order.
pub(super) fn requested(g: &TaskGraph) -> Vec<&str> {
    g.nodes.iter().filter(|n| n.requested).map(|n| n.id.as_str()).collect()
}

/// The ids `task` waits for, in edge order (node order).
fn deps_of<'g>(g: &'g TaskGraph, task: &str) -> Vec<&'g str> {
    let n = g.get(&id(task)).unwrap_or_else(|| panic!("no node {task}"));
    n.deps.iter().map(|&d| g.nodes[d].id.as_str()).collect()
}

/// Checks the graph's own invariants: the index agrees with the nodes, `dep_at` is parallel
/// to `deps`, and deps are sorted without duplicates.
pub(super) fn check_consistent(g: &TaskGraph) {
    assert_eq!(g.index.len(), g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        assert_eq!(g.index.get(&n.id), Some(&i), "index of {}", n.id);
        assert_eq!(n.deps.len(), n.dep_at.len(), "dep_at of {}", n.id);
        assert!(n.deps.windows(2).all(|w| w[0] < w[1]), "deps of {} sorted", n.id);
        assert!(n.deps.iter().all(|&d| d < g.nodes.len()));
    }
}

pub(super) fn graph(ws: &Workspace) -> TaskGraph {
    let g = build_graph(ws).unwrap_or_else(|e| panic!("graph failed: {e}"));
    check_consistent(&g);
    g
}

// ---------------------------------------------------------------------------------------------
// Workspaces on disk.

struct Disk(TempDir);

impl Disk {
    fn new(root_toml: &str) -> Self {
        let d = Self(tempfile::tempdir().unwrap());
        d.file("prova.toml", root_toml);
        d
    }

    fn file(&self, rel: &str, text: &str) -> &Self {
        let path = self.0.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    fn load(&self) -> Workspace {
        Workspace::load(self.0.path()).unwrap_or_else(|e| panic!("load failed: {e}"))
    }

    fn graph_err(&self) -> GraphError {
        build_graph(&self.load()).expect_err("graph should fail")
    }
}

// ---------------------------------------------------------------------------------------------
// Edges.

#[test]
fn caret_deps_follow_the_project_chain() {
    let ws = workspace(vec![
        project("app", "apps/app", &["lib"], vec![task("build", &["^build"])]),
        project("lib", "libs/lib", &["core"], vec![task("build", &["^build"])]),
        project("core", "libs/core", &[], vec![task("build", &["^build"])]),
    ]);
    let g = graph(&ws);
    assert_eq!(ids(&g), ["app#build", "core#build", "lib#build"]);
    assert_eq!(deps_of(&g, "app#build"), ["lib#build"]);
    assert_eq!(deps_of(&g, "lib#build"), ["core#build"]);
    assert_eq!(deps_of(&g, "core#build"), [] as [&str; 0]);
    // The edge remembers where `^build` was written.
    assert_eq!(g.get(&id("app#build")).unwrap().dep_at, [loc("prova.toml", 1, 9)]);
    // Nothing is requested until a selection says so.
    assert!(requested(&g).is_empty());
}

#[test]
fn caret_deps_pass_through_a_project_without_the_task() {
    // app -> types (no build) -> lib -> core; app also names lib directly (one edge only).
    let ws = workspace(vec![
        project("app", "apps/app", &["types"], vec![task("build", &["^build"])]),
        project("types", "libs/types", &["lib"], vec![task("check", &[])]),
        project("lib", "libs/lib", &["core"], vec![task("build", &["^build"])]),
        project("core", "libs/core", &[], vec![task("build", &[])]),
        project("both", "apps/both", &["types", "lib"], vec![task("build", &["^build"])]),
    ]);
    let g = graph(&ws);
    assert_eq!(g.get(&id("types#build")).map(|n| n.id.clone()), None);
    assert_eq!(deps_of(&g, "app#build"), ["lib#build"]);
    assert_eq!(deps_of(&g, "both#build"), ["lib#build"]);
    assert_eq!(deps_of(&g, "lib#build"), ["core#build"]);
    // A project whose only dependency lacks the task, through a chain of such projects.
    let ws = workspace(vec![
        project("app", "apps/app", &["t1"], vec![task("build", &["^build"])]),
        project("t1", "libs/t1", &["t2"], vec![task("check", &[])]),
        project("t2", "libs/t2", &["core"], vec![task("check", &[])]),
        project("core", "libs/core", &[], vec![task("build", &[])]),
    ]);
    assert_eq!(deps_of(&graph(&ws), "app#build"), ["core#build"]);
}

#[test]
fn same_project_and_explicit_project_deps() {
    let ws = workspace(vec![
        project(
            "web",
            "apps/web",
            &[],
            vec![own(task("build", &["codegen", "ui#lint", "ui#build"])), task("codegen", &[])],
        ),
        project("ui", "libs/ui", &[], vec![task("build", &[]), task("lint", &[])]),
    ]);
    let g = graph(&ws);
    assert_eq!(ids(&g), ["web#build", "web#codegen", "ui#build", "ui#lint"]);
    // Edges in node order, each with the place its dep was written.
    let web = g.get(&id("web#build")).unwrap();
    assert_eq!(deps_of(&g, "web#build"), ["web#codegen", "ui#build", "ui#lint"]);
    assert_eq!(
        web.dep_at,
        [loc("prova.toml", 1, 9), loc("prova.toml", 3, 9), loc("prova.toml", 2, 9)]
    );
    assert_eq!(deps_of(&g, "ui#build"), [] as [&str; 0]);
}

#[test]
fn duplicate_deps_make_one_edge_at_the_first_place() {
    let ws = workspace(vec![
        project("a", "a", &["b"], vec![own(task("build", &["^build", "b#build", "^build"]))]),
        project("b", "b", &[], vec![task("build", &[])]),
    ]);
    let g = graph(&ws);
    assert_eq!(deps_of(&g, "a#build"), ["b#build"]);
    assert_eq!(g.get(&id("a#build")).unwrap().dep_at, [loc("prova.toml", 1, 9)]);
}

#[test]
fn workspace_default_dep_on_a_task_some_projects_lack_is_skipped_for_them() {
    // `[tasks.test] deps = ["lint"]` at the workspace level; only `a` defines `lint`.
    let ws = workspace(vec![
        project("a", "libs/a", &[], vec![task("test", &["lint"]), own(task("lint", &[]))]),
        project("b", "libs/b", &[], vec![task("test", &["lint"])]),
    ]);
    let g = graph(&ws);
    assert_eq!(deps_of(&g, "a#test"), ["a#lint"]);
    assert_eq!(deps_of(&g, "b#test"), [] as [&str; 0]);
}

#[test]
fn project_dep_on_a_task_it_lacks_is_an_error() {
    let ws = workspace(vec![
        project("a", "libs/a", &[], vec![task("test", &["lint"]), task("lint", &[])]),
        project("b", "libs/b", &[], vec![own(task("test", &["lint"]))]),
    ]);
    match build_graph(&ws) {
        Err(GraphError::MissingTask { at, dep, project, name, help }) => {
            assert_eq!(*at, loc("prova.toml", 1, 9));
            assert_eq!((dep.as_str(), project.as_str(), name.as_str()), ("lint", "b", "lint"));
            assert_eq!(help, None);
        }
        other => panic!("expected MissingTask, got {other:?}"),
    }
    // `project#task` naming a real project without that task.
    let ws = workspace(vec![
        project("a", "libs/a", &[], vec![task("build", &[]), task("lint", &[])]),
        project("b", "libs/b", &[], vec![task("build", &["a#lnt"])]),
    ]);
    match build_graph(&ws) {
        Err(GraphError::MissingTask { dep, project, name, help, .. }) => {
            assert_eq!((dep.as_str(), project.as_str(), name.as_str()), ("a#lnt", "a", "lnt"));
            assert_eq!(help.as_deref(), Some("lint"));
        }
        other => panic!("expected MissingTask, got {other:?}"),
    }
}

#[test]
fn self_dependency_is_a_cycle() {
    let ws = workspace(vec![project("x", "x", &[], vec![own(task("build", &["build"]))])]);
    match build_graph(&ws) {
        Err(GraphError::Cycle { cycle, edges }) => {
            assert_eq!(cycle, [id("x#build"), id("x#build")]);
            assert_eq!(edges, ["  x#build depends on x#build (prova.toml:1:9)"]);
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
}

#[test]
fn cycle_excludes_the_path_that_leads_into_it() {
    // a -> b -> c -> b: the cycle is b, c only.
    let ws = workspace(vec![project(
        "x",
        "x",
        &[],
        vec![own(task("a", &["b"])), own(task("b", &["c"])), own(task("c", &["b"]))],
    )]);
    match build_graph(&ws) {
        Err(GraphError::Cycle { cycle, edges }) => {
            assert_eq!(cycle, [id("x#b"), id("x#c"), id("x#b")]);
            assert_eq!(edges.len(), 2);
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Located errors, from real files.

const TWO_TASKS: &str = "[workspace]
projects = [\"libs/*\"]

[tasks.build]
command = \"make\"

[tasks.test]
command = \"make test\"
";

#[test]
fn unknown_task_in_deps_names_the_file_line_and_a_suggestion() {
    let d = Disk::new(&format!("{TWO_TASKS}deps = [\"biuld\"]\n"));
    d.file("libs/a/prova.toml", "");
    let err = d.graph_err();
    assert!(
        matches!(&err, GraphError::UnknownTask { name, help, .. }
            if name == "biuld" && help.as_deref() == Some("build")),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "prova.toml:9:9: unknown task `biuld` in deps of a#test\n  help: did you mean `build`?"
    );

    // `^name` is checked the same way.
    let d = Disk::new(&format!("{TWO_TASKS}deps = [\"build\", \"^tets\"]\n"));
    d.file("libs/a/prova.toml", "");
    assert_eq!(
        d.graph_err().to_string(),
        "prova.toml:9:18: unknown task `tets` in deps of a#test\n  help: did you mean `test`?"
    );
}

#[test]
fn unknown_project_in_deps_names_the_file_line_and_a_suggestion() {
    let d = Disk::new(TWO_TASKS);
    d.file("libs/a/prova.toml", "[tasks.build]\ndeps = [\"uii#build\"]\n")
        .file("libs/ui/prova.toml", "");
    let err = d.graph_err();
    assert!(matches!(&err, GraphError::UnknownProject { name, .. } if name == "uii"), "{err:?}");
    assert_eq!(
        err.to_string(),
        "libs/a/prova.toml:2:9: unknown project `uii` in deps of a#build\n  \
         help: did you mean `ui`?"
    );
}

#[test]
fn missing_task_in_own_config_names_the_file_line_and_a_suggestion() {
    let d = Disk::new(TWO_TASKS);
    d.file("libs/a/prova.toml", "[tasks.lint]\ncommand = \"eslint\"\n").file(
        "libs/b/prova.toml",
        "[tasks.test]\ndeps = [\"lint\"]\n\n[tasks.lints]\ncommand = \"x\"\n",
    );
    let err = d.graph_err();
    assert!(
        matches!(&err, GraphError::MissingTask { project, name, .. }
            if project == "b" && name == "lint"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "libs/b/prova.toml:2:9: dependency `lint`: project `b` has no task `lint`\n  \
         help: did you mean `lints`?"
    );

    // The same dep as a workspace default is fine: `a#test` waits for `a#lint`, `b` skips it.
    let d = Disk::new(&format!("{TWO_TASKS}deps = [\"lint\"]\n"));
    d.file("libs/a/prova.toml", "[tasks.lint]\ncommand = \"eslint\"\n").file("libs/b/x.txt", "");
    let ws = d.load();
    let g = graph(&ws);
    assert_eq!(deps_of(&g, "a#test"), ["a#lint"]);
    assert_eq!(deps_of(&g, "b#test"), [] as [&str; 0]);
}

#[test]
fn did_you_mean_in_deps_does_not_depend_on_hash_order() {
    // `lin` is one edit from both `link` and `lint`, equally similar: the tie must go the same
    // way on every build (the first candidate in name order), as `suggest` asks of callers.
    let ws = workspace(vec![project(
        "a",
        "a",
        &[],
        vec![task("link", &[]), task("lint", &[]), own(task("build", &["lin"]))],
    )]);
    for _ in 0..32 {
        match build_graph(&ws) {
            Err(GraphError::UnknownTask { help, .. }) => assert_eq!(help.as_deref(), Some("link")),
            other => panic!("expected UnknownTask, got {other:?}"),
        }
    }
    // The same for projects: `web` ties between `web2` and `web1`; the first in workspace
    // (directory) order wins.
    let ws = workspace(vec![
        project("web2", "apps/a", &[], vec![task("build", &[])]),
        project("web1", "apps/b", &[], vec![task("build", &[])]),
        project("c", "c", &[], vec![own(task("build", &["web#build"]))]),
    ]);
    for _ in 0..32 {
        match build_graph(&ws) {
            Err(GraphError::UnknownProject { help, .. }) => {
                assert_eq!(help.as_deref(), Some("web2"));
            }
            other => panic!("expected UnknownProject, got {other:?}"),
        }
    }
}

/// `cycle` without its repeated last element, rotated to start at its smallest id.
fn normalized(cycle: &[TaskId]) -> Vec<&str> {
    assert!(cycle.len() >= 2, "{cycle:?}");
    assert_eq!(cycle.first(), cycle.last(), "a cycle ends where it starts");
    let body = &cycle[..cycle.len() - 1];
    let start = (0..body.len()).min_by_key(|&i| body[i].as_str()).unwrap();
    (0..body.len()).map(|k| body[(start + k) % body.len()].as_str()).collect()
}

#[test]
fn two_project_cycle_through_caret_deps() {
    let d = Disk::new(
        "[workspace]\nprojects = [\"libs/*\"]\n\n[tasks.build]\ncommand = \"make\"\ndeps = [\"^build\"]\n",
    );
    d.file("libs/a/prova.toml", "[project]\ndeps = [\"b\"]\n")
        .file("libs/b/prova.toml", "[project]\ndeps = [\"a\"]\n")
        .file("libs/c/prova.toml", "[project]\ndeps = [\"a\"]\n");
    let err = d.graph_err();
    let GraphError::Cycle { cycle, .. } = &err else { panic!("expected a cycle, got {err:?}") };
    assert_eq!(normalized(cycle), ["a#build", "b#build"]);
    let msg = err.to_string();
    let first = msg.lines().next().unwrap();
    assert!(
        first == "dependency cycle: a#build -> b#build -> a#build"
            || first == "dependency cycle: b#build -> a#build -> b#build",
        "{msg}"
    );
    assert!(msg.contains("\n  a#build depends on b#build (prova.toml:6:9)"), "{msg}");
    assert!(msg.contains("\n  b#build depends on a#build (prova.toml:6:9)"), "{msg}");
    assert_eq!(msg.lines().count(), 3, "{msg}");
}

#[test]
fn three_task_cycle_inside_one_project() {
    let d = Disk::new("[workspace]\nprojects = [\"libs/*\"]\n");
    d.file(
        "libs/x/prova.toml",
        "[tasks.a]\ndeps = [\"b\"]\n\n[tasks.b]\ndeps = [\"c\"]\n\n[tasks.c]\ndeps = [\"a\"]\n\n\
         [tasks.d]\ndeps = [\"a\"]\n",
    );
    let err = d.graph_err();
    let GraphError::Cycle { cycle, edges } = &err else { panic!("expected a cycle, got {err:?}") };
    assert_eq!(normalized(cycle), ["x#a", "x#b", "x#c"]);
    assert_eq!(edges.len(), 3);
    let msg = err.to_string();
    let rotations =
        ["x#a -> x#b -> x#c -> x#a", "x#b -> x#c -> x#a -> x#b", "x#c -> x#a -> x#b -> x#c"];
    assert!(
        rotations.iter().any(|r| msg.starts_with(&format!("dependency cycle: {r}\n"))),
        "{msg}"
    );
    for edge in [
        "  x#a depends on x#b (libs/x/prova.toml:2:9)",
        "  x#b depends on x#c (libs/x/prova.toml:5:9)",
        "  x#c depends on x#a (libs/x/prova.toml:8:9)",
    ] {
        assert!(msg.lines().any(|l| l == edge), "missing `{edge}` in:\n{msg}");
    }
    assert!(!msg.contains("x#d"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Selection.

/// docs (alone); web -> ui -> core; @acme/cli -> core. Every project has `build` (`^build`)
/// and `test` (`build`); web and core also have `lint`.
fn sel_ws() -> Workspace {
    let base = || vec![task("build", &["^build"]), task("test", &["build"])];
    let linted = || {
        let mut t = base();
        t.push(own(task("lint", &[])));
        t
    };
    workspace(vec![
        project("web", "apps/web", &["ui"], linted()),
        project("docs", "apps/docs", &[], base()),
        project("core", "libs/core", &[], linted()),
        project("ui", "libs/ui", &["core"], base()),
        project("@acme/cli", "tools/cli", &["core"], base()),
    ])
}

fn run(
    ws: &Workspace,
    tasks: &[&str],
    projects: ProjectFilter,
    cwd: &str,
) -> Result<TaskGraph, SelectError> {
    let full = graph(ws);
    let sel = Selection {
        tasks: tasks.iter().map(|t| (*t).to_owned()).collect(),
        projects,
        cwd: cwd.to_owned(),
        allow_empty: false,
    };
    let g = select(ws, &full, &sel)?;
    check_consistent(&g);
    Ok(g)
}

fn ok(ws: &Workspace, tasks: &[&str], projects: ProjectFilter, cwd: &str) -> TaskGraph {
    run(ws, tasks, projects, cwd).unwrap_or_else(|e| panic!("select failed: {e}"))
}

fn some(names: &[&str], globs: &[&str]) -> ProjectFilter {
    ProjectFilter::Some {
        names: names.iter().map(|s| (*s).to_owned()).collect(),
        all: false,
        filters: globs.iter().map(|s| (*s).to_owned()).collect(),
        affected: None,
    }
}

const ALL_BUILDS: [&str; 5] =
    ["docs#build", "web#build", "core#build", "ui#build", "@acme/cli#build"];

#[test]
fn task_names_over_all_projects() {
    let ws = sel_ws();
    let g = ok(&ws, &["build"], ProjectFilter::All, "libs/ui");
    assert_eq!(ids(&g), ALL_BUILDS);
    assert_eq!(requested(&g), ALL_BUILDS);

    // Only the projects that have `lint` get it; `test` pulls in every build, unrequested.
    let g = ok(&ws, &["lint", "test"], ProjectFilter::All, "");
    assert_eq!(
        requested(&g),
        [
            "docs#test",
            "web#lint",
            "web#test",
            "core#lint",
            "core#test",
            "ui#test",
            "@acme/cli#test"
        ]
    );
    assert_eq!(g.len(), 12);
    assert!(g.nodes.iter().filter(|n| n.name == "build").all(|n| !n.requested));
}

#[test]
fn dash_p_by_name_and_by_dir() {
    let ws = sel_ws();
    let g = ok(&ws, &["build"], some(&["web"], &[]), "");
    assert_eq!(ids(&g), ["web#build", "core#build", "ui#build"]);
    assert_eq!(requested(&g), ["web#build"]);

    let g = ok(&ws, &["build"], some(&["libs/ui"], &[]), "");
    assert_eq!(ids(&g), ["core#build", "ui#build"]);
    assert_eq!(requested(&g), ["ui#build"]);

    let g = ok(&ws, &["test"], some(&["docs", "tools/cli"], &[]), "");
    assert_eq!(requested(&g), ["docs#test", "@acme/cli#test"]);
    assert_eq!(
        ids(&g),
        ["docs#build", "docs#test", "core#build", "@acme/cli#build", "@acme/cli#test"]
    );
}

#[test]
fn dash_p_unknown_project_suggests() {
    let ws = sel_ws();
    let err = run(&ws, &["build"], some(&["wbe"], &[]), "").expect_err("unknown project");
    assert!(
        matches!(&err, SelectError::UnknownProject { name, help }
            if name == "wbe" && help.as_deref() == Some("web")),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "unknown project `wbe`\n  help: did you mean `web`?");

    let err = run(&ws, &["build"], some(&["zzzzzz"], &[]), "").expect_err("unknown project");
    assert_eq!(err.to_string(), "unknown project `zzzzzz`");
}

#[test]
fn filter_globs_match_dirs_and_names() {
    let ws = sel_ws();
    for glob in ["libs/*", "libs/*/"] {
        let g = ok(&ws, &["build"], some(&[], &[glob]), "");
        assert_eq!(requested(&g), ["core#build", "ui#build"], "{glob}");
        assert_eq!(ids(&g), ["core#build", "ui#build"], "{glob}");
    }
    // A glob matches a whole dir or name, not a prefix of one: `libs` names no project.
    let err = run(&ws, &["build"], some(&[], &["libs"]), "").expect_err("no project `libs`");
    assert!(matches!(err, SelectError::Filter(FilterError::NoSuchProject { .. })), "{err:?}");
    // By name, scoped names included.
    let g = ok(&ws, &["build"], some(&[], &["@acme/*"]), "");
    assert_eq!(requested(&g), ["@acme/cli#build"]);
    assert_eq!(ids(&g), ["core#build", "@acme/cli#build"]);
    let g = ok(&ws, &["build"], some(&[], &["d*"]), "");
    assert_eq!(requested(&g), ["docs#build"]);
    // Union with `-p`.
    let g = ok(&ws, &["build"], some(&["docs"], &["libs/c*"]), "");
    assert_eq!(requested(&g), ["docs#build", "core#build"]);
    // A glob that does not compile.
    let err = run(&ws, &["build"], some(&[], &["libs/[a"]), "").expect_err("bad glob");
    assert!(
        matches!(&err, SelectError::Filter(FilterError::BadGlob { glob, .. }) if glob == "libs/[a"),
        "{err:?}"
    );
}

#[test]
fn cwd_picks_the_enclosing_project_or_all() {
    let ws = sel_ws();
    for cwd in ["libs/ui", "libs/ui/src/deep", "libs/ui/"] {
        let g = ok(&ws, &["build"], ProjectFilter::Cwd, cwd);
        assert_eq!(requested(&g), ["ui#build"], "cwd {cwd}");
        assert_eq!(ids(&g), ["core#build", "ui#build"], "cwd {cwd}");
    }
    // The root, a directory holding projects, and a sibling whose name only starts alike.
    for cwd in ["", "libs", "libs/uiextra", "elsewhere/x"] {
        let g = ok(&ws, &["build"], ProjectFilter::Cwd, cwd);
        assert_eq!(requested(&g), ALL_BUILDS, "cwd {cwd:?}");
    }

    // The deepest project wins; the root project never counts as "containing" the cwd.
    let ws = workspace(vec![
        project("//", "", &[], vec![task("build", &[])]),
        project("a", "a", &[], vec![task("build", &[])]),
        project("inner", "a/inner", &[], vec![task("build", &[])]),
    ]);
    assert_eq!(requested(&ok(&ws, &["build"], ProjectFilter::Cwd, "a/inner/src")), ["inner#build"]);
    assert_eq!(requested(&ok(&ws, &["build"], ProjectFilter::Cwd, "a/src")), ["a#build"]);
    assert_eq!(
        requested(&ok(&ws, &["build"], ProjectFilter::Cwd, "")),
        ["//#build", "a#build", "inner#build"]
    );
    assert_eq!(requested(&ok(&ws, &["build"], ProjectFilter::Cwd, "docs")).len(), 3);
}

#[test]
fn task_ids_select_exactly_that_task() {
    let ws = sel_ws();
    let g = ok(&ws, &["web#test"], ProjectFilter::All, "");
    assert_eq!(requested(&g), ["web#test"]);
    assert_eq!(ids(&g), ["web#build", "web#test", "core#build", "ui#build"]);

    // Mixed with a plain name over `-p docs`: the name follows the filter, the id does not.
    let g = ok(&ws, &["test", "web#lint"], some(&["docs"], &[]), "");
    assert_eq!(requested(&g), ["docs#test", "web#lint"]);

    // Scoped names: the project part is everything before the last `#`.
    let g = ok(&ws, &["@acme/cli#build"], ProjectFilter::Cwd, "apps/docs");
    assert_eq!(requested(&g), ["@acme/cli#build"]);

    let err = run(&ws, &["wbe#build"], ProjectFilter::All, "").expect_err("unknown project");
    assert!(
        matches!(&err, SelectError::UnknownProject { name, help }
            if name == "wbe" && help.as_deref() == Some("web")),
        "{err:?}"
    );
    let err = run(&ws, &["web#tset"], ProjectFilter::All, "").expect_err("unknown task");
    assert!(
        matches!(&err, SelectError::UnknownTask { name, help }
            if name == "web#tset" && help.as_deref() == Some("test")),
        "{err:?}"
    );
    // A task other projects have: the help must not echo the name back (`lint` would select
    // the same nothing); it suggests among the named project's own tasks.
    let err = run(&ws, &["docs#lint"], ProjectFilter::All, "").expect_err("unknown task");
    assert!(
        matches!(&err, SelectError::UnknownTask { name, help }
            if name == "docs#lint" && help.is_none()),
        "{err:?}"
    );
    let err = run(&ws, &["docs#tets"], ProjectFilter::All, "").expect_err("unknown task");
    assert_eq!(err.to_string(), "no project has a task `docs#tets`\n  help: did you mean `test`?");
}

#[test]
fn unknown_task_name_suggests() {
    let ws = sel_ws();
    let err = run(&ws, &["build", "biuld"], ProjectFilter::All, "").expect_err("unknown task");
    assert!(
        matches!(&err, SelectError::UnknownTask { name, help }
            if name == "biuld" && help.as_deref() == Some("build")),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "no project has a task `biuld`\n  help: did you mean `build`?");
    let err = run(&ws, &["deploy"], ProjectFilter::All, "").expect_err("unknown task");
    assert_eq!(err.to_string(), "no project has a task `deploy`");
    let err = run(&ws, &[], ProjectFilter::All, "").expect_err("no tasks");
    assert!(matches!(err, SelectError::NoTasks), "{err:?}");
}

#[test]
fn closure_holds_transitive_deps_and_reindexes_edges() {
    let ws = sel_ws();
    let full = graph(&ws);
    // web#test -> web#build -> ui#build -> core#build: core is two projects away.
    let g = ok(&ws, &["test"], some(&["web"], &[]), "");
    assert_eq!(ids(&g), ["web#build", "web#test", "core#build", "ui#build"]);
    assert_eq!(requested(&g), ["web#test"]);
    assert_eq!(g.nodes[0].deps, [3]); // web#build -> ui#build
    assert_eq!(g.nodes[1].deps, [0]); // web#test -> web#build
    assert_eq!(g.nodes[2].deps, [] as [usize; 0]);
    assert_eq!(g.nodes[3].deps, [2]); // ui#build -> core#build
    // Same edges, by id, and same locations as in the full graph.
    for n in &g.nodes {
        let f = full.get(&n.id).unwrap();
        assert_eq!(deps_of(&g, n.id.as_str()), deps_of(&full, n.id.as_str()), "{}", n.id);
        assert_eq!(n.dep_at, f.dep_at, "{}", n.id);
        assert_eq!(n.project, f.project);
    }

    // Directly, from the full graph's indices.
    let ui = full.index[&id("ui#build")];
    let cli = full.index[&id("@acme/cli#test")];
    let g = closure(&full, &BTreeSet::from([ui, cli]));
    check_consistent(&g);
    assert_eq!(ids(&g), ["core#build", "ui#build", "@acme/cli#build", "@acme/cli#test"]);
    assert_eq!(requested(&g), ["ui#build", "@acme/cli#test"]);
    assert_eq!(g.nodes[1].deps, [0]);
    assert_eq!(g.nodes[2].deps, [0]);
    assert_eq!(g.nodes[3].deps, [2]);
    assert!(closure(&full, &BTreeSet::new()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Order and rendering.

#[test]
fn topo_order_puts_deps_first_and_is_stable() {
    let ws = sel_ws();
    let g = graph(&ws);
    let order = g.topo_order();
    let by_id: Vec<&str> = order.iter().map(|&i| g.nodes[i].id.as_str()).collect();
    // Ready nodes go lowest index first.
    assert_eq!(
        by_id,
        [
            "docs#build",
            "docs#test",
            "web#lint",
            "core#build",
            "core#lint",
            "core#test",
            "ui#build",
            "web#build",
            "web#test",
            "ui#test",
            "@acme/cli#build",
            "@acme/cli#test",
        ]
    );
    let mut pos = vec![usize::MAX; g.len()];
    for (k, &n) in order.iter().enumerate() {
        pos[n] = k;
    }
    for (i, n) in g.nodes.iter().enumerate() {
        for &d in &n.deps {
            assert!(pos[d] < pos[i], "{} before {}", g.nodes[d].id, n.id);
        }
    }
    assert_eq!(g.topo_order(), order);
    assert_eq!(graph(&sel_ws()).topo_order(), order);
    assert!(TaskGraph::default().topo_order().is_empty());

    let dependents = g.dependents();
    let core = g.index[&id("core#build")];
    let mut of_core: Vec<&str> = dependents[core].iter().map(|&i| g.nodes[i].id.as_str()).collect();
    of_core.sort_unstable();
    assert_eq!(of_core, ["@acme/cli#build", "core#test", "ui#build"]);
}

#[test]
fn dot_has_every_node_and_edge() {
    let ws = sel_ws();
    let g = ok(&ws, &["build"], some(&["web"], &[]), "");
    let dot = render::to_dot(&g);
    assert!(dot.starts_with("digraph prova {\n"), "{dot}");
    assert!(dot.ends_with("}\n"), "{dot}");
    for line in [
        "  \"web#build\" [label=\"web#build\", style=bold];",
        "  \"ui#build\" [label=\"ui#build\"];",
        "  \"core#build\" [label=\"core#build\"];",
        "  \"web#build\" -> \"ui#build\";",
        "  \"ui#build\" -> \"core#build\";",
    ] {
        assert!(dot.lines().any(|l| l == line), "missing `{line}` in:\n{dot}");
    }
    assert_eq!(dot.matches(" -> ").count(), 2, "{dot}");
}

#[test]
fn json_lists_tasks_in_topological_order() {
    let mut ws = sel_ws();
    let web = ws.projects.iter_mut().find(|p| p.name == "web").unwrap();
    web.tasks.get_mut("build").unwrap().command = Some(CommandLine::Shell("npm run build".into()));
    let ui = ws.projects.iter_mut().find(|p| p.name == "ui").unwrap();
    ui.tasks.get_mut("build").unwrap().command =
        Some(CommandLine::Argv(vec!["tsc".into(), "-b".into()]));
    let g = ok(&ws, &["build"], some(&["web"], &[]), "");
    let json = render::to_json(&ws, &g);
    assert_eq!(
        json,
        serde_json::json!({ "tasks": [
            { "id": "core#build", "project": "core", "project_dir": "libs/core", "task": "build",
              "command": null, "requested": false, "deps": [] },
            { "id": "ui#build", "project": "ui", "project_dir": "libs/ui", "task": "build",
              "command": "tsc -b", "requested": false, "deps": ["core#build"] },
            { "id": "web#build", "project": "web", "project_dir": "apps/web", "task": "build",
              "command": "npm run build", "requested": true, "deps": ["ui#build"] },
        ]})
    );
}

// ---------------------------------------------------------------------------------------------
// `--affected`, on real git repositories.

/// A git repository in a temporary directory, isolated from the user's and the system's git
/// configuration; the workspace lives at `ws` below it.
pub(super) struct Repo {
    dir: TempDir,
    ws: String,
}

const AFFECTED_ROOT: &str = "[workspace]
projects = [\"libs/*\", \"apps/*\"]
fingerprint = [\"pnpm-lock.yaml\"]
inputs = [\"//tsconfig.base.json\"]

[tasks.build]
command = \"make\"
deps = [\"^build\"]
";

impl Repo {
    /// docs (alone), utils (alone), web -> ui -> core; committed, with the ref `base` at
    /// that commit.
    pub(super) fn new(ws: &str) -> Self {
        let repo = Self { dir: tempfile::tempdir().unwrap(), ws: ws.to_owned() };
        repo.file("prova.toml", AFFECTED_ROOT)
            .file(".gitignore", "*.log\n")
            .file("pnpm-lock.yaml", "lock v1\n")
            .file("tsconfig.base.json", "{}\n")
            .file("README.md", "readme\n")
            .file("libs/core/src/lib.rs", "core v1\n")
            .file("libs/ui/prova.toml", "[project]\ndeps = [\"core\"]\n")
            .file("libs/ui/src/lib.rs", "ui v1\n")
            .file("libs/utils/src/lib.rs", "utils v1\n")
            .file("apps/web/prova.toml", "[project]\ndeps = [\"ui\"]\n")
            .file("apps/docs/index.md", "docs v1\n");
        std::fs::write(repo.dir.path().join("outside.txt"), "outside v1\n").unwrap();
        repo.git(&["init", "-q"]);
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "base"]);
        repo.git(&["branch", "base"]);
        repo
    }

    pub(super) fn ws_path(&self) -> PathBuf {
        if self.ws.is_empty() {
            self.dir.path().to_path_buf()
        } else {
            self.dir.path().join(&self.ws)
        }
    }

    /// Writes `rel` (workspace-relative).
    pub(super) fn file(&self, rel: &str, text: &str) -> &Self {
        let path = self.ws_path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    pub(super) fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(self.dir.path())
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(["-c", "init.defaultBranch=main", "-c", "core.autocrlf=false"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub(super) fn commit_all(&self, msg: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", msg]);
    }

    pub(super) fn load(&self) -> Workspace {
        Workspace::load(&self.ws_path()).unwrap_or_else(|e| panic!("load failed: {e}"))
    }

    /// Names of the projects affected since `base`, in directory order.
    fn affected(&self) -> Vec<String> {
        let ws = self.load();
        let set = affected::affected_projects(&ws, "base")
            .unwrap_or_else(|e| panic!("affected failed: {e}"));
        set.into_iter().map(|i| ws.projects[i].name.clone()).collect()
    }
}

const ALL_PROJECTS: [&str; 5] = ["docs", "web", "core", "ui", "utils"];

#[test]
fn affected_is_the_changed_project_and_its_dependents() {
    let repo = Repo::new("");
    assert_eq!(repo.load().project_names().collect::<Vec<_>>(), ALL_PROJECTS);
    // Nothing changed yet.
    assert_eq!(repo.affected(), [] as [&str; 0]);

    // Committed since `base`: core, ui (depends on core), web (depends on ui); not docs/utils.
    repo.file("libs/core/src/lib.rs", "core v2\n");
    repo.commit_all("core v2");
    assert_eq!(repo.affected(), ["web", "core", "ui"]);

    // Through `select`: the build of each affected project is requested.
    let ws = repo.load();
    let full = graph(&ws);
    let sel = Selection {
        tasks: vec!["build".to_owned()],
        projects: ProjectFilter::Some {
            names: Vec::new(),
            all: false,
            filters: Vec::new(),
            affected: Some("base".to_owned()),
        },
        cwd: String::new(),
        allow_empty: false,
    };
    let g = select(&ws, &full, &sel).unwrap();
    assert_eq!(requested(&g), ["web#build", "core#build", "ui#build"]);
    assert_eq!(ids(&g), ["web#build", "core#build", "ui#build"]);
}

#[test]
fn affected_counts_unstaged_staged_untracked_and_deleted_files() {
    // Unstaged edit in a leaf that nobody depends on.
    let repo = Repo::new("");
    repo.file("apps/web/src/main.rs", "web\n");
    repo.commit_all("web file");
    repo.git(&["branch", "-f", "base"]);
    repo.file("apps/web/src/main.rs", "web v2\n");
    assert_eq!(repo.affected(), ["web"]);

    // An untracked new file; an ignored one does not count.
    let repo = Repo::new("");
    repo.file("apps/docs/new.md", "new\n").file("libs/utils/debug.log", "noise\n");
    assert_eq!(repo.affected(), ["docs"]);
    let files = affected::changed_files(&repo.load().root, "base").unwrap();
    assert_eq!(files, BTreeSet::from(["apps/docs/new.md".to_owned()]));

    // A staged new file, and a deleted one.
    let repo = Repo::new("");
    repo.file("libs/utils/src/extra.rs", "x\n");
    repo.git(&["add", "libs/utils/src/extra.rs"]);
    assert_eq!(repo.affected(), ["utils"]);
    std::fs::remove_file(repo.ws_path().join("apps/docs/index.md")).unwrap();
    assert_eq!(repo.affected(), ["docs", "utils"]);

    // A committed move counts for both ends.
    let repo = Repo::new("");
    repo.git(&["mv", "libs/utils/src/lib.rs", "apps/docs/lib.rs"]);
    repo.commit_all("move");
    assert_eq!(repo.affected(), ["docs", "utils"]);
    let files = affected::changed_files(&repo.load().root, "base").unwrap();
    assert_eq!(
        files,
        BTreeSet::from(["apps/docs/lib.rs".to_owned(), "libs/utils/src/lib.rs".to_owned()])
    );
}

#[test]
fn affected_workspace_wide_files_affect_every_project() {
    for (file, text) in [
        ("prova.toml", "# touched\n"),
        ("pnpm-lock.yaml", "lock v2\n"),
        ("tsconfig.base.json", "{ \"x\": 1 }\n"),
    ] {
        let repo = Repo::new("");
        let path = repo.ws_path().join(file);
        let mut old = std::fs::read_to_string(&path).unwrap();
        old.push_str(text);
        repo.file(file, &old);
        assert_eq!(repo.affected(), ALL_PROJECTS, "changing {file}");
    }
    // A root file that is neither config nor fingerprint nor input belongs to no project.
    let repo = Repo::new("");
    repo.file("README.md", "readme v2\n");
    assert_eq!(repo.affected(), [] as [&str; 0]);
    // A project's own prova.toml is that project's file.
    let repo = Repo::new("");
    repo.file("libs/ui/prova.toml", "[project]\ndeps = [\"core\"]\n# touched\n");
    assert_eq!(repo.affected(), ["web", "ui"]);
}

#[test]
fn affected_in_a_workspace_below_the_repository_root() {
    let repo = Repo::new("ws");
    // Outside the workspace: not ours.
    std::fs::write(repo.dir.path().join("outside.txt"), "outside v2\n").unwrap();
    std::fs::write(repo.dir.path().join("new-outside.txt"), "new\n").unwrap();
    assert_eq!(repo.affected(), [] as [&str; 0]);
    // Inside it: paths are workspace-relative, so owners and the root config are found.
    repo.file("libs/ui/src/lib.rs", "ui v2\n").file("apps/docs/new.md", "new\n");
    let files = affected::changed_files(&repo.load().root, "base").unwrap();
    assert_eq!(
        files,
        BTreeSet::from(["apps/docs/new.md".to_owned(), "libs/ui/src/lib.rs".to_owned()])
    );
    assert_eq!(repo.affected(), ["docs", "web", "ui"]);
    repo.file("prova.toml", &format!("{AFFECTED_ROOT}# touched\n"));
    assert_eq!(repo.affected(), ALL_PROJECTS);
}

#[test]
fn affected_bad_ref_names_the_ref() {
    let repo = Repo::new("");
    let ws = repo.load();
    let err = affected::affected_projects(&ws, "no-such-ref").expect_err("bad ref");
    assert!(
        matches!(&err, AffectedError::UnknownRef { git_ref, .. } if git_ref == "no-such-ref"),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("--affected no-such-ref: git knows no commit"), "{err}");

    let full = graph(&ws);
    let sel = Selection {
        tasks: vec!["build".to_owned()],
        projects: ProjectFilter::Some {
            names: Vec::new(),
            all: false,
            filters: Vec::new(),
            affected: Some("no-such-ref".to_owned()),
        },
        cwd: String::new(),
        allow_empty: false,
    };
    let err = select(&ws, &full, &sel).expect_err("bad ref");
    assert!(matches!(err, SelectError::Affected(_)), "{err:?}");
    assert!(err.to_string().contains("--affected no-such-ref"), "{err}");
}

/// `AFFECTED_ROOT` with declared inputs: `build` reads `src/**` (and depends on its
/// dependencies' builds), `docs` reads `README.md` only.
const PER_TASK_ROOT: &str = "[workspace]
projects = [\"libs/*\", \"apps/*\"]
fingerprint = [\"pnpm-lock.yaml\"]

[tasks.build]
command = \"make\"
deps = [\"^build\"]
inputs = [\"src/**\"]

[tasks.docs]
command = \"make docs\"
inputs = [\"README.md\"]
";

impl Repo {
    /// [`Repo::new`] with [`PER_TASK_ROOT`] and a README in core and web, at `base`.
    fn per_task() -> Self {
        let repo = Self::new("");
        repo.file("prova.toml", PER_TASK_ROOT)
            .file("libs/core/README.md", "core docs\n")
            .file("apps/web/README.md", "web docs\n");
        repo.commit_all("per-task inputs");
        repo.git(&["branch", "-f", "base"]);
        repo
    }

    /// The requested tasks of `tasks` over the projects `names` plus those affected.
    fn select_affected(&self, tasks: &[&str], names: &[&str]) -> Vec<String> {
        let ws = self.load();
        let full = graph(&ws);
        let sel = Selection {
            tasks: tasks.iter().map(|t| (*t).to_owned()).collect(),
            projects: ProjectFilter::Some {
                names: names.iter().map(|n| (*n).to_owned()).collect(),
                all: false,
                filters: Vec::new(),
                affected: Some("base".to_owned()),
            },
            cwd: String::new(),
            allow_empty: false,
        };
        requested(&select(&ws, &full, &sel).unwrap()).into_iter().map(str::to_owned).collect()
    }
}

#[test]
fn affected_is_per_task_a_change_outside_a_tasks_inputs_does_not_select_it() {
    let repo = Repo::per_task();
    // A README edit: core is an affected project, but only its docs task reads the file.
    repo.file("libs/core/README.md", "core docs v2\n");
    assert_eq!(repo.affected(), ["web", "core", "ui"], "project level, as before");
    assert_eq!(repo.select_affected(&["build", "docs"], &[]), ["core#docs"]);
    assert_eq!(repo.select_affected(&["build"], &[]), [] as [&str; 0]);

    // A source edit: core's build and the builds that depend on it, not web's docs (which
    // has no edge to any build: its key cannot see core).
    let repo = Repo::per_task();
    repo.file("libs/core/src/lib.rs", "core v2\n");
    assert_eq!(
        repo.select_affected(&["build", "docs"], &[]),
        ["web#build", "core#build", "ui#build"]
    );
    // A deleted input counts as a change to it — and this one was the only file of `src/`,
    // a name in the project directory, which docs's key folds too.
    let repo = Repo::per_task();
    std::fs::remove_file(repo.ws_path().join("libs/utils/src/lib.rs")).unwrap();
    assert_eq!(repo.select_affected(&["build", "docs"], &[]), ["utils#build", "utils#docs"]);
}

#[test]
fn affected_per_task_a_name_that_came_or_went_in_the_project_directory_selects_it() {
    // The key of a task that declares inputs folds the names in its project directory: a
    // new file there (a `.babelrc` a tool would discover) moves it, an edit does not.
    let repo = Repo::per_task();
    repo.file("libs/core/.babelrc", "{}\n");
    assert_eq!(
        repo.select_affected(&["build", "docs"], &[]),
        ["web#build", "core#build", "core#docs", "ui#build"]
    );
    // Committed, and then a removal: each counts.
    repo.commit_all("babel");
    repo.git(&["branch", "-f", "base"]);
    std::fs::remove_file(repo.ws_path().join("libs/core/.babelrc")).unwrap();
    assert_eq!(
        repo.select_affected(&["build", "docs"], &[]),
        ["web#build", "core#build", "core#docs", "ui#build"]
    );
    // A file added inside a directory already there selects it too: whether it brought a
    // new name is not asked of git (selecting too much is never a stale result).
    let repo = Repo::per_task();
    repo.file("libs/core/src/new.rs", "x\n");
    assert_eq!(repo.select_affected(&["docs"], &[]), ["core#docs"]);
}

#[test]
fn affected_per_task_config_changes_select_every_task_of_the_project() {
    // A project's own prova.toml can change any of its commands.
    let repo = Repo::per_task();
    repo.file("libs/ui/prova.toml", "[project]\ndeps = [\"core\"]\n# touched\n");
    assert_eq!(repo.select_affected(&["build", "docs"], &[]), ["web#build", "ui#build", "ui#docs"]);
    // The root config and a workspace fingerprint file reach every task.
    let repo = Repo::per_task();
    repo.file("prova.toml", &format!("{PER_TASK_ROOT}# touched\n"));
    assert_eq!(repo.select_affected(&["docs"], &[]).len(), ALL_PROJECTS.len());
    let repo = Repo::per_task();
    repo.file("pnpm-lock.yaml", "lock v2\n");
    assert_eq!(repo.select_affected(&["docs"], &[]).len(), ALL_PROJECTS.len());
}

#[test]
fn affected_per_task_leaves_projects_named_otherwise_whole() {
    // `-p utils` selects utils' tasks whatever changed; the affected part is refined.
    let repo = Repo::per_task();
    repo.file("libs/core/README.md", "core docs v2\n");
    assert_eq!(
        repo.select_affected(&["build", "docs"], &["utils"]),
        ["core#docs", "utils#build", "utils#docs"]
    );
    // A task id asked for by name is never refined away.
    assert_eq!(repo.select_affected(&["web#build"], &[]), ["web#build"]);
}
