//! `--filter`: Turborepo's selector grammar, checked against the cases Turborepo documents
//! (the parse table and the resolver's package fixture of `turborepo-lib`'s
//! `run/scope/{target_selector,filter}.rs`), then through [`select`] the way prova uses it:
//! union with `-p`, exclusions after inclusions, empty selections.

use std::collections::{BTreeSet, HashMap};

use super::graph_tests::{Repo, graph, project, requested, task, workspace};
use crate::graph::TaskGraph;
use crate::graph::filter::{FilterError, GitRange, ResolveError, Selector, resolve};
use crate::selection::{ProjectFilter, SelectError, Selection, select};
use crate::workspace::Workspace;

fn parse(raw: &str) -> Selector {
    Selector::parse(raw, "").unwrap_or_else(|e| panic!("{raw}: {e}"))
}

fn sel(raw: &str) -> Selector {
    Selector { raw: raw.to_owned(), ..Selector::default() }
}

fn range(from: &str, to: Option<&str>) -> Option<GitRange> {
    Some(GitRange { from: from.to_owned(), to: to.map(str::to_owned) })
}

#[test]
fn the_selectors_turborepo_documents_parse() {
    let name = |n: &str| Some(n.to_owned());
    let cases: Vec<(&str, Selector)> = vec![
        ("foo", Selector { name: name("foo"), ..sel("foo") }),
        ("foo...", Selector { name: name("foo"), dependencies: true, ..sel("foo...") }),
        ("...foo", Selector { name: name("foo"), dependents: true, ..sel("...foo") }),
        (
            "...foo...",
            Selector {
                name: name("foo"),
                dependencies: true,
                dependents: true,
                ..sel("...foo...")
            },
        ),
        (
            "foo^...",
            Selector {
                name: name("foo"),
                dependencies: true,
                exclude_self: true,
                ..sel("foo^...")
            },
        ),
        (
            "...^foo",
            Selector { name: name("foo"), dependents: true, exclude_self: true, ..sel("...^foo") },
        ),
        ("./foo", Selector { dir: name("foo"), ..sel("./foo") }),
        ("...{./foo}", Selector { dir: name("foo"), dependents: true, ..sel("...{./foo}") }),
        (".", Selector { dir: name(""), ..sel(".") }),
        ("[master]", Selector { changed: range("master", None), ..sel("[master]") }),
        ("[from...to]", Selector { changed: range("from", Some("to")), ..sel("[from...to]") }),
        (
            "{foo}[master]",
            Selector { dir: name("foo"), changed: range("master", None), ..sel("{foo}[master]") },
        ),
        (
            "pattern{foo}[master]",
            Selector {
                name: name("pattern"),
                dir: name("foo"),
                changed: range("master", None),
                ..sel("pattern{foo}[master]")
            },
        ),
        (
            "[master]...",
            Selector { changed: range("master", None), dependencies: true, ..sel("[master]...") },
        ),
        (
            "...[master]",
            Selector { changed: range("master", None), dependents: true, ..sel("...[master]") },
        ),
        (
            "...[master]...",
            Selector {
                changed: range("master", None),
                dependents: true,
                dependencies: true,
                ..sel("...[master]...")
            },
        ),
        (
            "...[from...to]...",
            Selector {
                changed: range("from", Some("to")),
                dependents: true,
                dependencies: true,
                ..sel("...[from...to]...")
            },
        ),
        (
            "foo...[master]",
            Selector {
                name: name("foo"),
                changed: range("master", None),
                changed_in_dependencies: true,
                ..sel("foo...[master]")
            },
        ),
        (
            "foo...[master]...",
            Selector {
                name: name("foo"),
                changed: range("master", None),
                changed_in_dependencies: true,
                dependencies: true,
                ..sel("foo...[master]...")
            },
        ),
        (
            "{foo}...[master]",
            Selector {
                dir: name("foo"),
                changed: range("master", None),
                changed_in_dependencies: true,
                ..sel("{foo}...[master]")
            },
        ),
        ("!foo", Selector { name: name("foo"), exclude: true, ..sel("!foo") }),
        ("!./libs/*", Selector { dir: name("libs/*"), exclude: true, ..sel("!./libs/*") }),
        (
            "...[HEAD^1]",
            Selector { changed: range("HEAD^1", None), dependents: true, ..sel("...[HEAD^1]") },
        ),
        (
            "{./apps/*}[main]",
            Selector {
                dir: name("apps/*"),
                changed: range("main", None),
                ..sel("{./apps/*}[main]")
            },
        ),
        // Nested braces stay the directory's glob; a comma at the top is a name alternation.
        (
            "{./apps/{web,docs}}",
            Selector { dir: name("apps/{web,docs}"), ..sel("{./apps/{web,docs}}") },
        ),
        ("{web,docs}", Selector { name: name("{web,docs}"), ..sel("{web,docs}") }),
        // prova's old globs on dir or name still read as names.
        ("libs/*", Selector { name: name("libs/*"), ..sel("libs/*") }),
        ("@acme/*", Selector { name: name("@acme/*"), ..sel("@acme/*") }),
    ];
    for (raw, want) in cases {
        assert_eq!(parse(raw), want, "{raw}");
    }
}

#[test]
fn directories_are_read_from_the_invocation_dir() {
    let p = |raw: &str, cwd: &str| Selector::parse(raw, cwd).map(|s| s.dir);
    assert_eq!(p("./web", "apps").unwrap().as_deref(), Some("apps/web"));
    assert_eq!(p("..", "apps/web").unwrap().as_deref(), Some("apps"));
    assert_eq!(p("../../libs/*", "apps/web").unwrap().as_deref(), Some("libs/*"));
    assert_eq!(p("{../ui}", "libs/core").unwrap().as_deref(), Some("libs/ui"));
    assert_eq!(p(".", "").unwrap().as_deref(), Some(""));
    let e = Selector::parse("../foo", "").expect_err("above the root");
    assert!(matches!(e, FilterError::OutsideWorkspace { .. }), "{e:?}");
}

#[test]
fn selectors_turborepo_refuses_are_refused() {
    for raw in ["{}", "......[master]", "", "!", "...", "[]", "...^", "!...[x]..."] {
        let got = Selector::parse(raw, "");
        if raw == "!...[x]..." {
            // Turborepo reads this one: changed since x, its dependents and dependencies.
            assert!(got.is_ok(), "{raw}: {got:?}");
            continue;
        }
        let e = got.expect_err(raw);
        assert!(
            matches!(
                e,
                FilterError::Empty { .. }
                    | FilterError::EmptyPart { .. }
                    | FilterError::BareDependencyChange { .. }
            ),
            "{raw}: {e:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Resolution on Turborepo's own fixture.

/// Turborepo's resolver fixture: project-0 → project-1, project-5; project-1 → project-2,
/// project-4; project-3 alone; project-6 nested under project-5.
fn turbo_ws() -> Workspace {
    let t = || vec![task("build", &["^build"])];
    workspace(vec![
        project("project-0", "packages/project-0", &["project-1", "project-5"], t()),
        project("project-1", "packages/project-1", &["project-2", "project-4"], t()),
        project("project-2", "project-2", &[], t()),
        project("project-3", "project-3", &[], t()),
        project("project-4", "project-4", &[], t()),
        project("project-5", "project-5", &[], t()),
        project("project-6", "project-5/packages/project-6", &[], t()),
    ])
}

fn names(ws: &Workspace, set: &BTreeSet<usize>) -> Vec<String> {
    let mut v: Vec<String> = set.iter().map(|&i| ws.projects[i].name.clone()).collect();
    v.sort();
    v
}

/// The projects `filters` select (no `-p`, no `--affected`), with `changes` answering git.
fn chosen_with(
    ws: &Workspace,
    filters: &[&str],
    changes: &HashMap<(&str, &str), Vec<&str>>,
) -> Result<Vec<String>, ResolveError<String>> {
    let selectors: Vec<Selector> = filters.iter().map(|f| parse(f)).collect();
    let mut answer = |r: &GitRange| {
        let key = (r.from.as_str(), r.to.as_deref().unwrap_or("HEAD"));
        let changed = changes.get(&key).ok_or_else(|| format!("unexpected range {r}"))?;
        Ok(ws
            .projects
            .iter()
            .enumerate()
            .filter(|(_, p)| changed.contains(&p.name.as_str()))
            .map(|(i, _)| i)
            .collect())
    };
    let r = resolve(ws, &selectors, &mut answer)?;
    Ok(names(ws, &r.apply(&BTreeSet::new(), false, ws.projects.len())))
}

fn chosen(ws: &Workspace, filters: &[&str]) -> Vec<String> {
    chosen_with(ws, filters, &HashMap::new()).unwrap_or_else(|e| panic!("{filters:?}: {e}"))
}

#[test]
fn the_resolutions_turborepo_documents() {
    let ws = turbo_ws();
    let cases: &[(&[&str], &[&str])] = &[
        (&["project-1^..."], &["project-2", "project-4"]),
        (&["project-1..."], &["project-1", "project-2", "project-4"]),
        (&["...^project-1..."], &["project-0", "project-1", "project-2", "project-4", "project-5"]),
        (&["...project-2"], &["project-0", "project-1", "project-2"]),
        (&["...^project-2"], &["project-0", "project-1"]),
        (
            &["...^project-2", "project-1^..."],
            &["project-0", "project-1", "project-2", "project-4"],
        ),
        (&["project-2"], &["project-2"]),
        (&["./packages/*"], &["project-0", "project-1"]),
        (&["{./packages/*}"], &["project-0", "project-1"]),
        (&["./project-5/**"], &["project-5", "project-6"]),
        (&["./project-5"], &["project-5"]),
        (
            &["!project-1"],
            &["project-0", "project-2", "project-3", "project-4", "project-5", "project-6"],
        ),
        (&["./packages/*", "!*-1"], &["project-0"]),
        // Dependencies are transitive (Turborepo's "dependencies filter should match
        // transitive deps").
        (&["project-0..."], &["project-0", "project-1", "project-2", "project-4", "project-5"]),
        (&["project-0^..."], &["project-1", "project-2", "project-4", "project-5"]),
        // An exclusion of the dependencies.
        (&["project-0...", "!project-1^..."], &["project-0", "project-1", "project-5"]),
    ];
    for (filters, want) in cases {
        assert_eq!(chosen(&ws, filters), *want, "{filters:?}");
    }
}

#[test]
fn names_match_exactly_then_a_lone_scoped_package() {
    let t = || vec![task("build", &[])];
    let ws = workspace(vec![
        project("@foo/bar", "packages/@foo/bar", &[], t()),
        project("bar", "packages/bar", &[], t()),
    ]);
    assert_eq!(chosen(&ws, &["bar"]), ["bar"]);
    let ws = workspace(vec![project("@foo/bar", "packages/bar/@foo/bar", &[], t())]);
    assert_eq!(chosen(&ws, &["bar"]), ["@foo/bar"]);
    // Two scoped candidates: ambiguous, so `bar` is no project (an error with a literal).
    let ws = workspace(vec![
        project("@foo/bar", "packages/@foo/bar", &[], t()),
        project("@types/bar", "packages/@types/bar", &[], t()),
    ]);
    let e = chosen_with(&ws, &["bar"], &HashMap::new()).expect_err("ambiguous");
    assert!(matches!(e, ResolveError::Filter(FilterError::NoSuchProject { .. })), "{e:?}");
}

/// Turborepo's source-control fixture: package-3 → package-20; HEAD~1..HEAD changed
/// package-1, package-2 and the root; HEAD~2..HEAD~1 package-3.
fn scm_ws() -> (Workspace, HashMap<(&'static str, &'static str), Vec<&'static str>>) {
    let t = || vec![task("build", &["^build"])];
    let ws = workspace(vec![
        project("//", "", &[], t()),
        project("package-1", "package-1", &[], t()),
        project("package-2", "package-2", &[], t()),
        project("package-20", "package-20", &[], t()),
        project("package-3", "package-3", &["package-20"], t()),
    ]);
    let changes = HashMap::from([
        (("HEAD~1", "HEAD"), vec!["package-1", "package-2", "//"]),
        (("HEAD~2", "HEAD~1"), vec!["package-3"]),
        (("HEAD~2", "HEAD"), vec!["package-1", "package-2", "package-3", "//"]),
    ]);
    (ws, changes)
}

#[test]
fn the_git_ranges_turborepo_documents() {
    let (ws, changes) = scm_ws();
    let cases: &[(&[&str], &[&str])] = &[
        (&["[HEAD~1]"], &["//", "package-1", "package-2"]),
        (&["{.}[HEAD~1]"], &["//"]),
        (&["{package-2}[HEAD~1]"], &["package-2"]),
        (&["package-2*[HEAD~1]"], &["package-2"]),
        (&["package-1...[HEAD~1]"], &["package-1"]),
        (&["[HEAD~2]"], &["//", "package-1", "package-2", "package-3"]),
        (&["[HEAD~2...HEAD~1]"], &["package-3"]),
        (&["{package-*}...[HEAD~1]"], &["package-1", "package-2"]),
        // Changed since HEAD~2...HEAD~1 with dependencies: package-3 and what it depends on.
        (&["[HEAD~2...HEAD~1]..."], &["package-20", "package-3"]),
        // `name...[ref]`: package-3 is selected when package-20 (its dependency) changed.
        (&["package-3...[HEAD~2...HEAD~1]"], &["package-3"]),
        (&["!package-1", "[HEAD~1]"], &["//", "package-2"]),
    ];
    for (filters, want) in cases {
        let got = chosen_with(&ws, filters, &changes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, *want, "{filters:?}");
    }
    // A dependency's change selects its dependent through `name...[ref]`, not through
    // `name[ref]`.
    let only_dep = HashMap::from([(("base", "HEAD"), vec!["package-20"])]);
    let got = chosen_with(&ws, &["package-3...[base]"], &only_dep).unwrap();
    assert_eq!(got, ["package-3"]);
    let got = chosen_with(&ws, &["package-3[base]"], &only_dep).unwrap();
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn a_literal_that_is_no_project_is_an_error_and_a_glob_a_warning() {
    let ws = turbo_ws();
    let e = chosen_with(&ws, &["project-9"], &HashMap::new()).expect_err("no such project");
    let ResolveError::Filter(e) = e else { panic!("{e:?}") };
    assert!(
        matches!(&e, FilterError::NoSuchProject { help: Some(h), .. } if h.starts_with("project-")),
        "{e:?}"
    );
    assert!(e.to_string().contains("did you mean"), "{e}");
    // The same typo in an exclusion, a dependency walk or a directory.
    for raw in ["!projetc-1", "projetc-1...", "./packages/project-9"] {
        let e = chosen_with(&ws, &[raw], &HashMap::new()).expect_err(raw);
        assert!(
            matches!(e, ResolveError::Filter(FilterError::NoSuchProject { .. })),
            "{raw}: {e:?}"
        );
    }
    // A glob that matches nothing is not an error here (the selection may still be empty).
    let selectors = vec![parse("nothing-*"), parse("project-2")];
    let r = resolve(&ws, &selectors, &mut |_: &GitRange| Ok::<_, String>(BTreeSet::new())).unwrap();
    assert_eq!(r.unmatched, ["nothing-*"]);
    // A git range that matches nothing is an answer, not a typo.
    let r = resolve(&ws, &[parse("project-2[main]")], &mut |_: &GitRange| {
        Ok::<_, String>(BTreeSet::new())
    })
    .unwrap();
    assert!(r.unmatched.is_empty() && r.reads_git, "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// Through `select`.

/// docs (alone); web -> ui -> math; @acme/cli -> math. Every project has `build`
/// (`^build`) and `test` (its own `build`).
fn sel_ws() -> Workspace {
    let t = || vec![task("build", &["^build"]), task("test", &["build"])];
    workspace(vec![
        project("web", "apps/web", &["ui"], t()),
        project("docs", "apps/docs", &[], t()),
        project("math", "libs/math", &[], t()),
        project("ui", "libs/ui", &["math"], t()),
        project("@acme/cli", "tools/cli", &["math"], t()),
    ])
}

fn selection(tasks: &[&str], names: &[&str], filters: &[&str]) -> Selection {
    Selection {
        tasks: tasks.iter().map(|t| (*t).to_owned()).collect(),
        projects: ProjectFilter::Some {
            all: false,
            names: names.iter().map(|s| (*s).to_owned()).collect(),
            filters: filters.iter().map(|s| (*s).to_owned()).collect(),
            affected: None,
        },
        cwd: String::new(),
        allow_empty: false,
    }
}

fn select_ok(ws: &Workspace, s: &Selection) -> TaskGraph {
    select(ws, &graph(ws), s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

#[test]
fn turbo_habits_select_what_turbo_would() {
    let ws = sel_ws();
    // `test` depends on its own build only, so the requested tests show the projects.
    let cases: &[(&[&str], &[&str])] = &[
        (&["web..."], &["web#test", "math#test", "ui#test"]),
        (&["...math"], &["web#test", "math#test", "ui#test", "@acme/cli#test"]),
        (&["...^math"], &["web#test", "ui#test", "@acme/cli#test"]),
        (&["web^..."], &["math#test", "ui#test"]),
        (&["!libs/*"], &["docs#test", "web#test", "@acme/cli#test"]),
        (&["!./libs/*", "!docs"], &["web#test", "@acme/cli#test"]),
        (&["{./apps/*}"], &["docs#test", "web#test"]),
        (&["web", "docs"], &["docs#test", "web#test"]),
        (&["...ui", "!web"], &["ui#test"]),
        (&["cli"], &["@acme/cli#test"]),
        // prova's globs on dir or name, as before.
        (&["libs/*"], &["math#test", "ui#test"]),
        (&["libs/*/"], &["math#test", "ui#test"]),
        (&["@acme/*"], &["@acme/cli#test"]),
        (&["{web,docs}"], &["docs#test", "web#test"]),
        // A name glob's `*` spans a scope, as Turborepo's does; a dir glob's does not.
        (&["*cli"], &["@acme/cli#test"]),
    ];
    for (filters, want) in cases {
        let g = select_ok(&ws, &selection(&["test"], &[], filters));
        assert_eq!(requested(&g), *want, "{filters:?}");
    }
    // `-p` is part of the union; exclusions apply to it too.
    let g = select_ok(&ws, &selection(&["test"], &["docs"], &["libs/*"]));
    assert_eq!(requested(&g), ["docs#test", "math#test", "ui#test"]);
    let g = select_ok(&ws, &selection(&["test"], &["docs", "web"], &["!docs"]));
    assert_eq!(requested(&g), ["web#test"]);
    // `--all` with an exclusion: everything but it.
    let mut s = selection(&["test"], &[], &["!apps/*"]);
    if let ProjectFilter::Some { all, .. } = &mut s.projects {
        *all = true;
    }
    assert_eq!(requested(&select_ok(&ws, &s)), ["math#test", "ui#test", "@acme/cli#test"]);
}

#[test]
fn a_selection_with_nothing_to_run_is_an_error_unless_allowed() {
    let ws = sel_ws();
    let full = graph(&ws);
    let cases: &[(&[&str], &str)] = &[
        // Every project excluded.
        (&["!*"], "matches no project"),
        // A glob that matches nothing.
        (&["nothing-*"], "matches no project"),
        (&["libs/*", "!./libs/*"], "matches no project"),
    ];
    for (filters, says) in cases {
        let s = selection(&["build"], &[], filters);
        let e = select(&ws, &full, &s).expect_err("nothing to run");
        assert!(matches!(&e, SelectError::Empty { why } if why.contains(says)), "{filters:?}: {e}");
        assert!(e.to_string().contains("--allow-empty"), "{e}");
        let allowed = Selection { allow_empty: true, ..s };
        assert!(select_ok(&ws, &allowed).is_empty(), "{filters:?}");
    }
    // Projects selected, none with the task.
    let lint_ws = workspace(vec![
        project("web", "apps/web", &[], vec![task("build", &[]), task("lint", &[])]),
        project("docs", "apps/docs", &[], vec![task("build", &[])]),
    ]);
    let s = selection(&["lint"], &["docs"], &[]);
    let e = select(&lint_ws, &graph(&lint_ws), &s).expect_err("docs has no lint");
    assert!(
        e.to_string().contains("no selected project has a task `lint` (selected: docs)"),
        "{e}"
    );
    // From inside that project, with no flag.
    let s = Selection {
        tasks: vec!["lint".into()],
        projects: ProjectFilter::Cwd,
        cwd: "apps/docs/src".into(),
        allow_empty: false,
    };
    let e = select(&lint_ws, &graph(&lint_ws), &s).expect_err("docs has no lint");
    assert!(e.to_string().contains("from the current directory"), "{e}");
    // `-p` with an unknown project stays its own error.
    let e = select(&ws, &full, &selection(&["build"], &["wbe"], &[])).expect_err("unknown");
    assert!(matches!(e, SelectError::UnknownProject { .. }), "{e:?}");
    // A literal typo in a filter is an error even with --allow-empty.
    let s = Selection { allow_empty: true, ..selection(&["build"], &[], &["wbe..."]) };
    let e = select(&ws, &full, &s).expect_err("typo");
    assert!(e.to_string().contains("did you mean `web`"), "{e}");
}

#[test]
fn git_ranges_in_filters_read_the_repository() {
    let repo = Repo::new("");
    // Nothing changed since `base`: an empty answer, not an error.
    let ws = repo.load();
    let g = select_ok(&ws, &selection(&["build"], &[], &["[base]"]));
    assert!(g.is_empty(), "{:?}", requested(&g));
    // core changed: `[base]` is core alone, `...[base]` its dependents too.
    repo.file("libs/core/src/lib.rs", "core v2\n");
    repo.commit_all("core v2");
    let ws = repo.load();
    let g = select_ok(&ws, &selection(&["build"], &[], &["[base]"]));
    assert_eq!(requested(&g), ["core#build"]);
    let g = select_ok(&ws, &selection(&["build"], &[], &["...[base]"]));
    assert_eq!(requested(&g), ["web#build", "core#build", "ui#build"]);
    // `web...[base]`: web, because something it depends on changed.
    let g = select_ok(&ws, &selection(&["build"], &[], &["web...[base]"]));
    assert_eq!(requested(&g), ["web#build"]);
    // A range between two refs: the change is in it, an uncommitted one is not.
    repo.git(&["branch", "after-core"]);
    repo.file("apps/docs/index.md", "docs v2\n");
    let ws = repo.load();
    let g = select_ok(&ws, &selection(&["build"], &[], &["[base...after-core]"]));
    assert_eq!(requested(&g), ["core#build"]);
    let g = select_ok(&ws, &selection(&["build"], &[], &["{./apps/*}[base]"]));
    assert_eq!(requested(&g), ["docs#build"]);
    // An unknown ref says how to pass one.
    let e = select(&ws, &graph(&ws), &selection(&["build"], &[], &["[origin/main]"]))
        .expect_err("no remote");
    let text = e.to_string();
    assert!(text.contains("no remote `origin`"), "{text}");
    assert!(text.contains("its local branch is `main`"), "{text}");
    assert!(text.contains("--filter '[HEAD~1]'"), "{text}");
}
