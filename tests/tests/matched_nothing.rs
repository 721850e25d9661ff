//! Configs and flags that match nothing say so (issue 16): a `projects` glob that matches no
//! directory is a warning naming the glob and where it was written (the prova.toml line, or
//! package.json `workspaces`), on every command that loads the workspace.

use prova_tests::TempWorkspace;

fn typo_workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"libs/*\", \"aps/*\"]\n[tasks.build]\ncommand = \"echo b\"\n")
        .file("libs/a/prova.toml", "")
        .file("apps/web/prova.toml", "")
}

#[test]
fn a_projects_glob_matching_no_directory_is_named_with_its_line() {
    let ws = typo_workspace();
    for args in [vec!["run", "build", "--all"], vec!["ls"], vec!["graph", "build", "--all"]] {
        let out = ws.prova(args.clone()).run();
        out.assert_code(0);
        out.assert_stderr_contains("prova.toml:2:");
        out.assert_stderr_contains("projects glob `aps/*` matches no directory");
        assert!(!out.stderr.contains("`libs/*` matches no"), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn a_glob_matching_only_excluded_or_ignored_dirs_is_named_too() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"libs/*\", \"!libs/old\", \"gen/*\"]\n")
        .file(".gitignore", "gen/\n")
        .file("libs/a/prova.toml", "")
        .file("gen/x/prova.toml", "");
    let out = ws.prova(["ls"]).run();
    out.assert_code(0);
    out.assert_stderr_contains("projects glob `gen/*` matches no directory");
    assert!(!out.stderr.contains("`libs/*` matches no"), "{}", out.stderr);
}

#[test]
fn a_package_json_workspaces_glob_matching_nothing_names_package_json() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\n")
        .file("package.json", r#"{"private": true, "workspaces": ["packages/*", "tools/*"]}"#)
        .file("packages/a/package.json", r#"{"name": "a"}"#);
    let out = ws.prova(["ls"]).run();
    out.assert_code(0);
    out.assert_stderr_contains("projects glob `tools/*` matches no directory");
    out.assert_stderr_contains("package.json workspaces");
    assert!(!out.stderr.contains("`packages/*` matches no"), "{}", out.stderr);
}

#[test]
fn every_glob_matching_something_prints_no_warning() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\".\", \"libs/*\", \"libs/**\"]\n")
        .file("libs/a/prova.toml", "");
    let out = ws.prova(["ls"]).run();
    out.assert_code(0);
    assert!(!out.stderr.contains("matches no directory"), "{}", out.stderr);
}

fn git(ws: &TempWorkspace, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(ws.root())
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "git {args:?}");
}

/// Outside git, or with a ref git does not know: one clear line (and, for a ref, one help
/// line saying how to pass one), exit 2 (git's usage text or its "Use '--' to separate
/// paths" advice are noise here).
#[test]
fn affected_outside_git_or_with_an_unknown_ref_is_one_line_exit_2() {
    let ws = typo_workspace();
    for args in
        [vec!["run", "build", "--affected", "HEAD"], vec!["graph", "build", "--affected", "main"]]
    {
        let out = ws.prova(args.clone()).run();
        out.assert_code(2);
        out.assert_stderr_contains("not inside a git repository");
        let lines = out.stderr.lines().filter(|l| !l.contains("matches no directory")).count();
        assert_eq!(lines, 1, "{args:?}: {}", out.stderr);
    }
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-qm", "init"]);
    for r in ["nosuchref", "HEAD~5", "origin/main"] {
        let out = ws.prova(["run", "build", "--affected", r]).run();
        out.assert_code(2);
        out.assert_stderr_contains(&format!("--affected {r}: git knows no commit `{r}`"));
        let lines: Vec<&str> =
            out.stderr.lines().filter(|l| !l.contains("matches no directory")).collect();
        assert_eq!(lines.len(), 2, "{r}: {}", out.stderr);
        assert!(lines[1].starts_with("  help: pass a ref"), "{r}: {}", out.stderr);
    }
    ws.prova(["run", "build", "--affected", "HEAD"]).run().assert_code(0);
}

/// `--filter` globs and `--affected` that select nothing: a warning naming the flag; the run
/// goes on with what else was selected. Nothing selected at all is `nothing to run`, exit 2
/// (issue 28: a CI job passing having run nothing) unless git decided it; a name that is
/// no project is an error with a did-you-mean, as Turborepo's.
#[test]
fn a_filter_or_affected_selecting_nothing_is_named() {
    let ws = typo_workspace();
    let out = ws.prova(["run", "build", "--filter", "lib/*"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("--filter `lib/*` matches no project");
    out.assert_stderr_contains("nothing to run");
    let out = ws.prova(["run", "build", "--filter", "libs/*", "--filter", "wb*", "--json"]).run();
    out.assert_code(0);
    out.assert_stderr_contains("--filter `wb*` matches no project");
    assert!(!out.stderr.contains("`libs/*` matches no project"), "{}", out.stderr);
    assert_eq!(out.status_of("a#build"), "succeeded");
    let out = ws.prova(["run", "build", "--filter", "libs/*", "--filter", "wbe"]).run();
    out.assert_code(2);
    // (`aps/*` is the typo that left web out: there is nothing to suggest.)
    out.assert_stderr_contains("--filter `wbe`: no project is named or lives at `wbe`");
    let out = ws.prova(["graph", "build", "--filter", "nope*"]).run();
    out.assert_code(2);
    out.assert_stderr_contains("--filter `nope*` matches no project");
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-qm", "init"]);
    let out = ws.prova(["run", "build", "--affected", "HEAD"]).run();
    out.assert_code(0);
    out.assert_stderr_contains("--affected HEAD: no project changed since HEAD");
    ws.write("libs/a/src.txt", "new\n");
    let out = ws.prova(["run", "build", "--affected", "HEAD"]).run();
    out.assert_code(0);
    assert!(!out.stderr.contains("no project changed"), "{}", out.stderr);
}

#[test]
fn a_declared_output_that_no_file_matched_is_a_warning_naming_it() {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"web\"]\n[tasks.build]\ncommand = \"mkdir -p dist && echo x > dist/a.js\"\noutputs = [\"dist/**\", \"dsit/**\"]\n",
        )
        .dir("web");
    let out = ws.prova(["run", "build", "--all"]).run();
    out.assert_code(0);
    // A task's notice, on its prefixed lines.
    out.assert_stdout_contains(
        "web#build | prova: warning: declared output `dsit/**` matched no file after it ran",
    );
    assert!(!out.stdout.contains("`dist/**`"), "{}", out.stdout);
    // In the event stream too, as the task's notice.
    let ws2 = ws.prova(["run", "build", "--all", "--force", "--json"]).run();
    let notices = ws2.notices_of("web#build");
    assert!(notices.iter().any(|n| n.contains("`dsit/**` matched no file")), "{notices:?}");
    // A hit ran nothing: no warning.
    let hit = ws.prova(["run", "build", "--all"]).run();
    assert!(!hit.stdout.contains("matched no file"), "{}", hit.stdout);
}
