//! The warm path (issue 15): a run of hits resolves them in one batch before the first
//! dispatch, so a hit whose outputs are current finishes without a restore — but never when
//! something of the same run may have changed them since (a task that ran in its project), or
//! when they changed before the run (then it restores as always). And however the file list
//! is made, a file git does not track but that matches an input glob is an input.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::Command;

use prova_tests::{Output, TempWorkspace};

fn run(ws: &TempWorkspace, what: &[&str]) -> Output {
    let mut args = vec!["run"];
    args.extend_from_slice(what);
    args.extend(["--all", "--json"]);
    let out = ws.prova(args).run();
    out.assert_code(0);
    out
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
        .args(args)
        .status()
        .expect("running git");
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

/// `app` and `lib` (which `app` depends on), each `build` concatenating its `src/`.
fn two_projects() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app", "lib"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "app\n")
        .file("lib/src/l.txt", "lib\n")
}

#[test]
fn a_warm_no_op_run_hits_everything_and_leaves_the_outputs_alone() {
    let ws = two_projects();
    let cold = run(&ws, &["build"]);
    assert_eq!(cold.cache_of("app#build"), "saved", "{cold}");
    let before = std::fs::metadata(ws.path("app/dist/out.txt")).expect("the output");
    for _ in 0..2 {
        let warm = run(&ws, &["build"]);
        for t in ["app#build", "lib#build"] {
            assert_eq!(warm.cache_of(t), "hit", "{t}\n{warm}");
        }
        let after = std::fs::metadata(ws.path("app/dist/out.txt")).expect("the output");
        assert_eq!((after.ino(), after.mtime_nsec()), (before.ino(), before.mtime_nsec()));
    }
}

#[test]
fn outputs_changed_before_the_run_are_restored_not_taken_as_current() {
    let ws = two_projects();
    run(&ws, &["build"]);
    // Three ways the outputs stop being the entry's: gone, rewritten, an extra file.
    std::fs::remove_file(ws.path("lib/dist/out.txt")).expect("removing an output");
    ws.write("app/dist/out.txt", "tampered\n");
    ws.write("app/dist/extra.txt", "not the entry's\n");
    let warm = run(&ws, &["build"]);
    assert_eq!(warm.cache_of("lib#build"), "hit", "{warm}");
    assert_eq!(warm.cache_of("app#build"), "hit", "{warm}");
    assert_eq!(ws.read("lib/dist/out.txt"), "lib\n");
    assert_eq!(ws.read("app/dist/out.txt"), "app\n");
    assert!(!ws.exists("app/dist/extra.txt"), "the extra output was left");
}

/// `build` depends on `scrub`, an uncached task of the same project that removes and
/// rewrites `build`'s outputs when it runs: the batch saw them current before the run
/// started, but by the time `build` is dispatched they are not.
fn scrubbed(scrub: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                r#"[workspace]
projects = ["app"]

[tasks.scrub]
command = "{scrub}"
inputs = ["src/**"]
cache = false

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
deps = ["scrub"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#
            ),
        )
        .file("app/src/a.txt", "app\n")
}

#[test]
fn a_hit_whose_outputs_a_task_of_the_same_run_changed_is_restored() {
    for scrub in [
        "rm -f dist/out.txt",
        "if [ -d dist ]; then echo scrubbed > dist/out.txt; fi",
        "if [ -d dist ]; then echo extra > dist/extra.txt; fi",
    ] {
        let ws = scrubbed(scrub);
        let cold = run(&ws, &["build"]);
        assert_eq!(cold.cache_of("app#build"), "saved", "{scrub}\n{cold}");
        let warm = run(&ws, &["build"]);
        assert_eq!(warm.status_of("app#scrub"), "succeeded", "{scrub}\n{warm}");
        assert_eq!(warm.cache_of("app#build"), "hit", "{scrub}\n{warm}");
        assert_eq!(ws.read("app/dist/out.txt"), "app\n", "{scrub}: the hit left changed outputs");
        assert!(!ws.exists("app/dist/extra.txt"), "{scrub}: the extra output was left");
    }
}

/// A git work tree with `prova.toml` and `app/src/a.txt` committed and `*.log` ignored.
fn committed() -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app"]
fingerprint = ["tool.cfg"]

[tasks.build]
command = "mkdir -p dist && find src -type f | sort | xargs cat > dist/out.txt"
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file(".gitignore", "dist/\n*.log\n.prova/\n")
        .file("app/src/a.txt", "a\n");
    git(ws.root(), &["init", "-q"]);
    git(ws.root(), &["add", "-A"]);
    git(ws.root(), &["commit", "-q", "-m", "init"]);
    ws
}

#[test]
fn an_untracked_file_matching_an_input_glob_is_an_input_in_a_git_work_tree() {
    let ws = committed();
    let first = run(&ws, &["build"]);
    assert_eq!(first.cache_of("app#build"), "saved", "{first}");
    let key = |o: &Output| o.report("app#build")["key"].clone();

    // Untracked, not ignored, under `src/`: an input (the key moves, the task runs).
    ws.write("app/src/new.txt", "new\n");
    let added = run(&ws, &["build"]);
    assert_ne!(key(&added), key(&first), "an untracked input did not move the key\n{added}");
    assert_eq!(added.cache_of("app#build"), "saved", "{added}");
    assert_eq!(ws.read("app/dist/out.txt"), "a\nnew\n");

    // Untracked in a directory git has never seen.
    ws.write("app/src/deeper/more.txt", "more\n");
    let deeper = run(&ws, &["build"]);
    assert_ne!(key(&deeper), key(&added), "{deeper}");

    // Ignored: not an input.
    ws.write("app/src/noise.log", "noise\n");
    let ignored = run(&ws, &["build"]);
    assert_eq!(key(&ignored), key(&deeper), "an ignored file moved the key\n{ignored}");
    assert_eq!(ignored.cache_of("app#build"), "hit", "{ignored}");

    // An untracked workspace fingerprint file appearing moves every key.
    ws.write("tool.cfg", "x\n");
    let fingerprinted = run(&ws, &["build"]);
    assert_ne!(key(&fingerprinted), key(&ignored), "{fingerprinted}");
}

#[test]
fn an_untracked_input_counts_in_a_project_that_is_its_own_repository() {
    let ws = committed();
    // `app` becomes a repository of its own (a project cloned inside the workspace).
    git(&ws.path("app"), &["init", "-q"]);
    let first = run(&ws, &["build"]);
    ws.write("app/src/new.txt", "new\n");
    let added = run(&ws, &["build"]);
    assert_ne!(
        added.report("app#build")["key"],
        first.report("app#build")["key"],
        "an untracked input of a nested repository did not move the key\n{added}"
    );
    assert_eq!(ws.read("app/dist/out.txt"), "a\nnew\n");
}

/// A warm no-op waits on no disk flush: the cache index is only read, and the run's record in
/// the history is a WAL append (`synchronous = NORMAL`, no checkpoint on close). Four fsyncs
/// of the history's rollback journal were a no-op's largest wait. (Once every few runs, when
/// the WAL passes its bound, the run that finds it so checkpoints it: not this one.)
#[test]
fn a_warm_no_op_run_flushes_nothing_to_disk() {
    let Ok(strace) = which("strace") else {
        prova_tests::skip_for_missing("strace is not on PATH (Debian package strace)");
        return;
    };
    let ws = two_projects();
    run(&ws, &["build"]);
    // A file whose ctime is within 2 s of a run is never memoised by its stat (a later
    // write in the same tick would go unseen), so a run right after the files were written
    // stores their rows again. An hour later (libfaketime) they are a checkout's old files:
    // one run memoises them, the next is the no-op measured.
    let Some(clock) = prova_tests::FakeClock::new("+1h") else {
        prova_tests::skip_for_missing("libfaketime is not installed (Debian package faketime)");
        return;
    };
    let later = |strace_log: Option<&Path>| {
        let mut cmd = match strace_log {
            Some(log) => {
                let mut c = Command::new(&strace);
                c.args(["-f", "-qq", "-e", "trace=fsync,fdatasync,sync_file_range,syncfs,sync"]);
                c.arg("-o").arg(log).arg(prova_tests::locate::prova_bin());
                c
            }
            None => Command::new(prova_tests::locate::prova_bin()),
        };
        // libfaketime preloaded, not the `faketime` wrapper (see `prova_tests::libfaketime`).
        cmd.envs(clock.vars())
            .arg("-C")
            .arg(ws.path(""))
            .args(["run", "build", "--all"])
            .status()
            .expect("running prova an hour later")
    };
    assert!(later(None).success(), "the run an hour later failed");
    let log = ws.path(".prova-strace.log");
    let status = later(Some(&log));
    assert!(status.success(), "the warm run failed");
    let calls = std::fs::read_to_string(&log).expect("the strace log");
    let flushes: Vec<&str> = calls.lines().filter(|l| l.contains("sync")).collect();
    assert!(flushes.is_empty(), "a warm no-op flushed:\n{}", flushes.join("\n"));
    // The record is there all the same.
    let runs = ws.prova(["runs"]).run();
    runs.assert_code(0);
    assert_eq!(runs.stdout.lines().filter(|l| l.contains(" run build --all")).count(), 3, "{runs}");
}

fn which(tool: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or(())
}
