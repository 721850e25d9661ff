//! `--filter` speaks Turborepo's grammar (issue 28, "turbo habits"): a CI job moved from turbo
//! with `--filter 'web...'` runs web and what it depends on — before, it printed one warning,
//! ran nothing and passed. Dependents, `^`, exclusion, directories and git ranges, on the
//! real binary; a selection that matches nothing exits 2 unless `--allow-empty`; `--affected`
//! with nothing changed is an empty run that passes; an unknown ref says how to pass one.
//! The grammar case by case (Turborepo's documented cases) is in
//! `coordinator/src/selection/filter_tests.rs`.

use std::collections::BTreeSet;
use std::process::Command;

use prova_tests::{Output, TempWorkspace};

/// docs (alone); web -> ui -> math; `build` echoes its project and depends on `^build`,
/// `test` on its own `build`.
fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"libs/*\", \"apps/*\"]\n\n\
             [tasks.build]\ncommand = \"echo built $PROVA_PROJECT\"\ndeps = [\"^build\"]\n\
             inputs = [\"src/**\"]\n\n[tasks.test]\ncommand = \"echo tested\"\ndeps = [\"build\"]\n\
             inputs = [\"src/**\"]\n",
        )
        .file("libs/math/src/m.txt", "m\n")
        .file("libs/ui/prova.toml", "[project]\ndeps = [\"math\"]\n")
        .file("libs/ui/src/u.txt", "u\n")
        .file("apps/web/prova.toml", "[project]\ndeps = [\"ui\"]\n")
        .file("apps/web/src/w.txt", "w\n")
        .file("apps/docs/src/d.txt", "d\n")
}

/// The tasks a `--json` run reported, sorted.
fn ran(out: &Output) -> BTreeSet<String> {
    let summary = out.summary();
    summary["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks\n{out}"))
        .iter()
        .filter_map(|t| t["task"].as_str().map(str::to_owned))
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn run(ws: &TempWorkspace, args: &[&str]) -> Output {
    let mut all = vec!["run"];
    all.extend(args);
    all.push("--json");
    ws.prova(all).run()
}

#[test]
fn turbo_filters_run_what_turbo_runs() {
    let ws = ws();
    let cases: &[(&[&str], &[&str])] = &[
        (&["build", "--filter", "web..."], &["web#build", "ui#build", "math#build"]),
        (
            &["test", "--filter", "...math"],
            &["math#test", "ui#test", "web#test", "math#build", "ui#build", "web#build"],
        ),
        (&["test", "--filter", "...^ui"], &["web#test", "web#build", "ui#build", "math#build"]),
        (&["test", "--filter", "web^..."], &["ui#test", "math#test", "ui#build", "math#build"]),
        (&["build", "--filter", "!libs/*"], &["web#build", "docs#build", "ui#build", "math#build"]),
        (&["test", "--filter", "!./libs/*", "--filter", "!web"], &["docs#test", "docs#build"]),
        (&["build", "--filter", "{./apps/*}", "--filter", "!web"], &["docs#build"]),
        (&["build", "--filter", "docs", "--filter", "math"], &["docs#build", "math#build"]),
        (&["build", "--all", "--filter", "!web", "--filter", "!docs"], &["ui#build", "math#build"]),
        // prova's globs on dir or name keep working.
        (&["build", "--filter", "libs/*"], &["ui#build", "math#build"]),
        (&["build", "-p", "docs", "--filter", "m*"], &["docs#build", "math#build"]),
    ];
    for (args, want) in cases {
        let out = run(&ws, args);
        out.assert_code(0);
        assert_eq!(ran(&out), set(want), "{args:?}\n{out}");
        assert!(!out.stderr.contains("warning"), "{args:?}: no warning\n{out}");
    }
    // `prova graph` reads the same grammar.
    let out = ws.prova(["graph", "build", "--filter", "...^ui", "--json"]).run();
    out.assert_code(0);
    assert!(out.stdout.contains("web#build") && !out.stdout.contains("docs#build"), "{out}");
}

#[test]
fn a_selection_that_matches_nothing_exits_2_unless_allowed() {
    let ws = ws();
    for args in [
        &["build", "--filter", "nothing-*"][..],
        &["build", "--filter", "!*"],
        &["build", "--filter", "libs/*", "--filter", "!./libs/*"],
    ] {
        let out = run(&ws, args);
        out.assert_code(2);
        assert!(out.stderr.contains("nothing to run"), "{args:?}\n{out}");
        assert!(out.stderr.contains("--allow-empty"), "{args:?}\n{out}");
        assert!(!out.stdout.contains("task_finished"), "{args:?}: nothing ran\n{out}");
        let mut allowed = args.to_vec();
        allowed.push("--allow-empty");
        let out = run(&ws, &allowed);
        out.assert_code(0);
        assert!(ran(&out).is_empty(), "{allowed:?}\n{out}");
        assert_eq!(out.stderr.matches("prova: warning: nothing to run").count(), 1, "{out}");
    }
    // A project with no such task: from its directory, or named.
    let lint = ws.prova(["run", "lint"]);
    let lint = lint.run();
    lint.assert_code(2);
    let ws2 = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"a\", \"b\"]\n")
        .file("a/prova.toml", "[tasks.lint]\ncommand = \"true\"\n")
        .file("b/prova.toml", "[tasks.build]\ncommand = \"true\"\n");
    let out = ws2.prova(["run", "lint"]).cwd("b").run();
    out.assert_code(2);
    assert!(out.stderr.contains("no selected project has a task `lint` (selected: b"), "{out}");
    let out = ws2.prova(["run", "lint", "--filter", "b"]).run();
    out.assert_code(2);
    // A typo is an error with a suggestion, also under --allow-empty; `-p` as before.
    let out = run(&ws, &["build", "--filter", "wbe...", "--allow-empty"]);
    out.assert_code(2);
    assert!(out.stderr.contains("did you mean `web`?"), "{out}");
    let out = run(&ws, &["build", "-p", "wbe"]);
    out.assert_code(2);
    assert!(out.stderr.contains("unknown project `wbe`"), "{out}");
}

fn git(ws: &TempWorkspace, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(ws.root())
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn repo() -> TempWorkspace {
    let ws = ws().file(".gitignore", ".prova/\n");
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    ws
}

#[test]
fn git_ranges_select_changed_projects() {
    let ws = repo();
    // Nothing changed: an empty run that passes, as `turbo --filter=[HEAD]` and `--affected`.
    for args in [&["build", "--filter", "[HEAD]"][..], &["build", "--affected", "HEAD"]] {
        let out = run(&ws, args);
        out.assert_code(0);
        assert!(ran(&out).is_empty(), "{args:?}\n{out}");
    }
    ws.write("libs/ui/src/u.txt", "u2\n");
    git(&ws, &["commit", "-q", "-am", "ui"]);
    let cases: &[(&[&str], &[&str])] = &[
        (&["build", "--filter", "[HEAD^1]"], &["ui#build", "math#build"]),
        (
            &["test", "--filter", "...[HEAD^1]"],
            &["ui#test", "web#test", "ui#build", "web#build", "math#build"],
        ),
        (&["build", "--filter", "{./apps/*}[HEAD^1]"], &[]),
        (
            &["test", "--filter", "web...[HEAD^1]"],
            &["web#test", "web#build", "ui#build", "math#build"],
        ),
        (&["test", "--filter", "[HEAD~1...HEAD]"], &["ui#test", "ui#build", "math#build"]),
    ];
    for (args, want) in cases {
        let out = run(&ws, args);
        out.assert_code(0);
        let want = set(want);
        // `^build` brings math#build in as a dependency of ui#build.
        assert_eq!(ran(&out), want, "{args:?}\n{out}");
    }
}

#[test]
fn an_unknown_ref_says_how_to_pass_one() {
    let ws = repo();
    for (args, example) in [
        (&["build", "--affected", "origin/main"][..], "`--affected HEAD~1`"),
        (&["build", "--filter", "...[origin/main]"], "`--filter '[HEAD~1]'`"),
    ] {
        let out = run(&ws, args);
        out.assert_code(2);
        assert!(out.stderr.contains("git knows no commit `origin/main`"), "{out}");
        assert!(out.stderr.contains("no remote `origin`"), "{out}");
        assert!(out.stderr.contains("its local branch is `main`"), "{out}");
        assert!(out.stderr.contains(example), "{out}");
    }
    let out = run(&ws, &["build", "--affected", "no-such-branch"]);
    out.assert_code(2);
    assert!(out.stderr.contains("`--affected main`"), "{out}");
}
