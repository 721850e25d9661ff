//! No command leaves anything behind in the temporary directory: a read-only cache's staging
//! directory, a `--no-cache` scratch store or a proof's exec root is removed before the
//! process exits, whichever command opened it (a `show` once leaked one per call); one a
//! killed run could not remove is removed by the next run that makes one.

use nix::sys::signal::Signal;
use prova_tests::TempWorkspace;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["lib", "app"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "alpha\n")
        .file("lib/src/l.txt", "lib\n")
}

/// What `dir` holds, by name.
fn left_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the temporary directory")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

#[test]
fn no_command_leaves_a_temporary_directory_behind() {
    let ws = ws();
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let tmpdir = tmp.path().to_string_lossy().into_owned();
    let commands: &[&[&str]] = &[
        &["run", "build", "--all"],
        &["show", "app#build"],
        &["why", "app#build"],
        &["show", "app#build", "--json"],
        &["run", "build", "--all", "--cache", "local:r"],
        &["run", "build", "--all", "--no-cache"],
        &["run", "build", "--all", "--dry-run"],
        &["run", "build", "--all", "--force", "--verify"],
        &["cache", "stats"],
    ];
    for args in commands {
        let out = ws.prova(args.iter().copied()).env("TMPDIR", &tmpdir).run();
        out.assert_code(0);
        let left = left_in(tmp.path());
        assert!(left.is_empty(), "`prova {}` left {left:?} in $TMPDIR", args.join(" "));
    }
}

/// A run killed outright (SIGKILL: nothing of it is dropped) leaves its private directory in
/// `$TMPDIR` — a `--no-cache` scratch store holds the blobs of everything the run executed; a
/// read-only open's staging, what it restored — and the next run that makes one removes it,
/// its process being gone, and leaves nothing of its own.
#[test]
fn a_killed_runs_temporary_directory_is_removed_by_the_next_run() {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app"]

[tasks.build]
command = "mkdir -p dist && echo built > dist/out.txt && echo armed && sleep 300"
outputs = ["dist/**"]

[tasks.quick]
command = "echo quick"
"#,
        )
        .dir("app");
    // An index to open read-only.
    ws.prova(["run", "quick", "--all"]).run().assert_code(0);
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let tmpdir = tmp.path().to_string_lossy().into_owned();
    for (flags, kind) in
        [(&["--no-cache"][..], "prova-scratch-"), (&["--cache", "local:r"][..], "prova-readonly-")]
    {
        let mut args = vec!["run", "build", "--all", "--json"];
        args.extend(flags);
        let mut running = ws.prova(args).env("TMPDIR", &tmpdir).spawn();
        running.wait_for_lines("the task to be armed", 1, |l| l.contains(r#""text":"armed\n""#));
        running.signal(Signal::SIGKILL);
        drop(running.wait());
        let left = left_in(tmp.path());
        assert!(
            left.len() == 1 && left[0].starts_with(kind),
            "{flags:?}: the killed run should have left its {kind}… directory: {left:?}"
        );
        let mut args = vec!["run", "quick", "--all"];
        args.extend(flags);
        ws.prova(args).env("TMPDIR", &tmpdir).run().assert_code(0);
        let left = left_in(tmp.path());
        assert!(left.is_empty(), "{flags:?}: the next run left {left:?} in $TMPDIR");
    }
}
