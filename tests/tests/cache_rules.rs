//! What is never cached (brief §6) and the cache policy flags: a failure, a timeout, a missing
//! declared literal output, a task whose input changed while it ran, a task downstream of a
//! failure; `--no-cache`, `--force`, `--cache=local:r|w`.

use std::fs;
use std::io::Write as _;

use prova_tests::cache::entry_count;
use prova_tests::{Output, TempWorkspace};
use serde_json::Value;

/// One project whose `build` reads `src/**`, counts its executions in `../runs.log` (outside
/// its inputs) and runs `body`.
fn ws_with(body: &str, extra: &str) -> TempWorkspace {
    let config = format!(
        r#"[workspace]
projects = ["app"]

[tasks.build]
command = '''
echo run >> ../runs.log
{body}
'''
inputs = ["src/**"]
outputs = ["dist/**"]
{extra}
"#
    );
    TempWorkspace::new().file("prova.toml", &config).file("app/src/a.txt", "source\n")
}

const BUILD: &str = "mkdir -p dist && cp src/a.txt dist/out.txt";

fn runs(ws: &TempWorkspace) -> usize {
    fs::read_to_string(ws.path("runs.log")).map_or(0, |s| s.lines().count())
}

fn run(ws: &TempWorkspace, extra: &[&str]) -> Output {
    let mut args = vec!["run", "build", "--all", "--json"];
    args.extend_from_slice(extra);
    ws.prova(args).run()
}

/// `prova why TASK --json`.
fn why(ws: &TempWorkspace, task: &str) -> Value {
    let out = ws.prova(["why", task, "--json"]).run();
    out.assert_code(0);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("no JSON: {e}\n{out}"))
}

#[track_caller]
fn assert_no_entry(ws: &TempWorkspace, task: &str) {
    let why = why(ws, task);
    let verdict = why["verdict"].as_str().unwrap_or_default();
    // `pending`: its key waits on an upstream's outputs that no entry holds (it cannot have
    // an entry of its current key either; `entry_count` counts the rest).
    assert!(
        verdict.starts_with("no cache entry") || verdict.starts_with("pending"),
        "{task} has an entry: {why}"
    );
}

#[test]
fn a_failed_task_is_not_cached() {
    let ws = ws_with(&format!("{BUILD}; exit 3"), "");
    let out = run(&ws, &[]);
    out.assert_code(1);
    assert_eq!(out.status_of("app#build"), "failed", "{out}");
    assert_eq!(out.not_saved_reason("app#build"), "exit code 3", "{out}");
    assert_eq!(entry_count(&ws, &[]), 0);
    assert_no_entry(&ws, "app#build");
    // The outputs it left do not make the next run a hit: it executes again.
    let again = run(&ws, &[]);
    again.assert_code(1);
    assert_eq!(again.report("app#build")["attempts"], 1, "{again}");
    assert_eq!(runs(&ws), 2);
}

#[test]
fn a_timed_out_task_is_not_cached() {
    let ws = ws_with(&format!("{BUILD}; sleep 300"), r#"timeout = "1s""#);
    let out = run(&ws, &[]);
    out.assert_code(1);
    assert_eq!(out.report("app#build")["exit"]["timed_out"], true, "{out}");
    assert_eq!(out.not_saved_reason("app#build"), "timed out", "{out}");
    assert_eq!(entry_count(&ws, &[]), 0);
    assert_no_entry(&ws, "app#build");
}

#[test]
fn a_missing_declared_literal_output_is_not_cached() {
    let ws = ws_with(BUILD, "")
        .file("prova.toml", &ws_config_with_outputs(r#"["dist/out.txt", "dist/missing.txt"]"#));
    let out = run(&ws, &[]);
    out.assert_code(0);
    assert_eq!(out.status_of("app#build"), "succeeded", "{out}");
    let reason = out.not_saved_reason("app#build");
    assert!(reason.contains("dist/missing.txt"), "the reason names the output: {reason}");
    assert_eq!(entry_count(&ws, &[]), 0);
    let again = run(&ws, &[]);
    assert_eq!(again.report("app#build")["attempts"], 1, "not a hit\n{again}");
    assert_eq!(runs(&ws), 2);

    // The text form says why on the task's status line.
    let text = ws.prova(["run", "build", "--all"]).run();
    text.assert_code(0);
    let lines = text.task_lines("app#build");
    assert!(
        lines.iter().any(|l| l.starts_with("not cached:") && l.contains("dist/missing.txt")),
        "{text}"
    );
}

fn ws_config_with_outputs(outputs: &str) -> String {
    format!(
        r#"[workspace]
projects = ["app"]

[tasks.build]
command = "echo run >> ../runs.log; {BUILD}"
inputs = ["src/**"]
outputs = {outputs}
"#
    )
}

#[test]
fn no_cache_neither_reads_nor_writes() {
    let ws = ws_with(BUILD, "");
    let out = run(&ws, &["--no-cache"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("app#build"), "uncached", "{out}");
    assert_eq!(entry_count(&ws, &[]), 0, "--no-cache wrote an entry");
    // So the next plain run misses, executes and saves.
    let plain = run(&ws, &[]);
    assert_eq!(plain.cache_of("app#build"), "saved", "{plain}");
    assert_eq!(runs(&ws), 2);
    // And with an entry present, --no-cache does not read it.
    let out = run(&ws, &["--no-cache"]);
    assert_eq!(out.cache_of("app#build"), "uncached", "{out}");
    assert_eq!(out.report("app#build")["attempts"], 1, "{out}");
    assert_eq!(runs(&ws), 3);
    assert_eq!(entry_count(&ws, &[]), 1);
    assert_eq!(run(&ws, &[]).cache_of("app#build"), "hit");
}

#[test]
fn force_executes_everything_and_overwrites_the_entry() {
    // The output carries the execution count (not an input), so an overwritten entry shows.
    let ws = ws_with("mkdir -p dist && wc -l < ../runs.log > dist/out.txt", "");
    let first = run(&ws, &[]);
    assert_eq!(first.cache_of("app#build"), "saved", "{first}");
    assert_eq!(ws.read("app/dist/out.txt").trim(), "1");
    let forced = run(&ws, &["--force"]);
    forced.assert_code(0);
    assert_eq!(forced.cache_of("app#build"), "saved", "{forced}");
    assert_eq!(forced.report("app#build")["attempts"], 1, "{forced}");
    assert_eq!(forced.report("app#build")["key"], first.report("app#build")["key"]);
    assert_eq!(ws.read("app/dist/out.txt").trim(), "2");
    assert_eq!(entry_count(&ws, &[]), 1, "the entry was replaced, not duplicated");
    fs::remove_dir_all(ws.path("app/dist")).unwrap();
    let hit = run(&ws, &[]);
    assert_eq!(hit.cache_of("app#build"), "hit", "{hit}");
    assert_eq!(ws.read("app/dist/out.txt").trim(), "2", "the forced execution's outputs");
    assert_eq!(runs(&ws), 2);
}

#[test]
fn cache_local_r_reads_but_does_not_write() {
    let ws = ws_with(BUILD, "");
    let out = run(&ws, &["--cache=local:r"]);
    out.assert_code(0);
    assert_eq!(out.report("app#build")["attempts"], 1, "{out}");
    assert_ne!(out.cache_of("app#build"), "saved", "{out}");
    assert_eq!(entry_count(&ws, &[]), 0, "local:r wrote an entry");
    run(&ws, &[]).assert_code(0);
    fs::remove_dir_all(ws.path("app/dist")).unwrap();
    let out = run(&ws, &["--cache=local:r"]);
    assert_eq!(out.cache_of("app#build"), "hit", "{out}");
    assert_eq!(ws.read("app/dist/out.txt"), "source\n");
    assert_eq!(runs(&ws), 2);
}

#[test]
fn cache_local_w_writes_but_does_not_read() {
    let ws = ws_with(BUILD, "");
    let out = run(&ws, &["--cache=local:w"]);
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    assert_eq!(entry_count(&ws, &[]), 1);
    let out = run(&ws, &["--cache=local:w"]);
    assert_eq!(out.cache_of("app#build"), "saved", "executed again, not a hit\n{out}");
    assert_eq!(out.report("app#build")["attempts"], 1, "{out}");
    assert_eq!(runs(&ws), 2);
    assert_eq!(run(&ws, &[]).cache_of("app#build"), "hit", "what local:w wrote is readable");
}

#[test]
fn a_task_downstream_of_a_failure_is_skipped_and_not_cached() {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"bad\", \"good\"]\n")
        .file(
            "bad/prova.toml",
            r#"[tasks.fail]
command = "mkdir -p dist && echo f > dist/f.txt; exit 1"
outputs = ["dist/f.txt"]
[tasks.after]
command = "mkdir -p out && echo a > out/a.txt"
outputs = ["out/**"]
deps = ["fail"]
[tasks.all]
deps = ["after"]
"#,
        )
        .file(
            "good/prova.toml",
            r#"[tasks.one]
command = "mkdir -p dist && echo one > dist/one.txt"
outputs = ["dist/**"]
[tasks.all]
deps = ["one"]
"#,
        );
    let out = ws.prova(["run", "all", "--all", "--continue", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("bad#fail"), "failed", "{out}");
    assert_eq!(out.status_of("bad#after"), "skipped", "{out}");
    assert_eq!(out.cache_of("bad#after"), "uncached", "{out}");
    assert_eq!(out.cache_of("good#one"), "saved", "{out}");
    assert_eq!(entry_count(&ws, &[]), 1, "only good#one has an entry");
    assert_no_entry(&ws, "bad#after");
    assert_no_entry(&ws, "bad#fail");
    assert!(!ws.exists("bad/out"));
}

#[test]
fn an_input_edited_while_its_task_runs_withholds_the_entry() {
    // The task opens the gate (a FIFO) first, says it is waiting, and blocks reading it. The
    // test holds the gate open read-write from before prova starts, so the task's open never
    // blocks and the bytes the test writes are not lost whenever the task gets to read.
    let ws = ws_with(
        "if [ -p ../gate ]; then exec 3< ../gate; echo waiting; cat <&3 > /dev/null; fi\n\
         mkdir -p dist && cp src/a.txt dist/out.txt",
        "",
    );
    ws.fifo("gate");
    let gate = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ws.path("gate"))
        .expect("opening the gate");
    let mut running = ws.prova(["run", "build", "--all", "--json"]).spawn();
    running
        .wait_for_lines("the task to wait at the gate", 1, |l| l.contains(r#""text":"waiting\n""#));
    ws.write("app/src/a.txt", "edited while the task ran\n");
    (&gate).write_all(b"go\n").expect("opening the gate");
    drop(gate); // the last writer: the task's `cat` sees the end of the file
    let out = running.wait();
    out.assert_code(0);
    assert_eq!(out.status_of("app#build"), "succeeded", "{out}");
    let reason = out.not_saved_reason("app#build");
    assert!(
        reason.contains("app/src/a.txt") && reason.contains("changed"),
        "the reason names the input: {reason}"
    );
    assert_eq!(entry_count(&ws, &[]), 0);
    // Back to the original input (the withheld run's key), without the gate: there is no
    // entry under that key, so the next run executes.
    fs::remove_file(ws.path("gate")).expect("removing the gate");
    ws.write("app/src/a.txt", "source\n");
    let next = run(&ws, &[]);
    next.assert_code(0);
    assert_eq!(next.report("app#build")["key"], out.report("app#build")["key"]);
    assert_eq!(next.cache_of("app#build"), "saved", "it executed again\n{next}");
    assert_eq!(runs(&ws), 2);
    assert_eq!(ws.read("app/dist/out.txt"), "source\n");
}

/// Makes the workspace a git work tree (inputs are then listed by `git ls-files`).
fn git_init(ws: &TempWorkspace) {
    let status = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.root())
        .status()
        .expect("running git");
    assert!(status.success(), "git init failed");
}

/// A file added to a task's inputs while it runs: the stamps of the inputs it had cannot
/// show it, so the save lists the inputs again.
fn input_added_while_running(git: bool) {
    // The output is every `src/` file: an entry filed under the key-time inputs (without the
    // added file) would serve bytes that include the added file once it is gone again.
    let ws = ws_with(
        "if [ -p ../gate ]; then exec 3< ../gate; echo waiting; cat <&3 > /dev/null; fi\n\
         mkdir -p dist && cat src/* > dist/out.txt",
        "",
    );
    if git {
        git_init(&ws);
    }
    ws.fifo("gate");
    let gate = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ws.path("gate"))
        .expect("opening the gate");
    let mut running = ws.prova(["run", "build", "--all", "--json"]).spawn();
    running
        .wait_for_lines("the task to wait at the gate", 1, |l| l.contains(r#""text":"waiting\n""#));
    ws.write("app/src/added.txt", "added while the task ran\n");
    (&gate).write_all(b"go\n").expect("opening the gate");
    drop(gate);
    let out = running.wait();
    out.assert_code(0);
    assert_eq!(ws.read("app/dist/out.txt"), "source\nadded while the task ran\n");
    assert_eq!(
        out.not_saved_reason("app#build"),
        "input `app/src/added.txt` was added while the task ran",
        "{out}"
    );
    assert_eq!(entry_count(&ws, &[]), 0);

    // Back to the key-time inputs: no entry may serve the bytes built with the added file.
    fs::remove_file(ws.path("gate")).expect("removing the gate");
    fs::remove_file(ws.path("app/src/added.txt")).expect("removing the added input");
    let next = run(&ws, &[]);
    next.assert_code(0);
    assert_eq!(next.report("app#build")["key"], out.report("app#build")["key"]);
    assert_eq!(next.cache_of("app#build"), "saved", "it executed again\n{next}");
    assert_eq!(ws.read("app/dist/out.txt"), "source\n");
}

#[test]
fn an_input_added_while_its_task_runs_withholds_the_entry() {
    input_added_while_running(false);
}

#[test]
fn an_input_added_while_its_task_runs_withholds_the_entry_in_a_git_work_tree() {
    input_added_while_running(true);
}

/// What appears in a task's input directories during a run without being an added input —
/// its own outputs, an upstream task's outputs, a nested project's files, ignored files —
/// withholds nothing.
fn nothing_spurious(git: bool) {
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"app\", \"app/plugin\"]\n")
        .file(".gitignore", "*.log\n")
        .file(
            "app/prova.toml",
            r#"[project]
deps = ["plugin"]

[tasks.gen]
command = "mkdir -p gen && echo generated > gen/g.txt"
inputs = ["prova.toml"]
outputs = ["gen/**"]

# Default inputs: every file of the project, minus outputs (its own and gen's) and the
# nested project.
[tasks.build]
command = "mkdir -p dist && cat src/* gen/* > dist/out.txt && echo noise > build.log"
deps = ["gen", "^build"]
outputs = ["dist/**"]
"#,
        )
        .file("app/src/a.txt", "a\n")
        .file(
            "app/plugin/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && echo p > dist/p.txt\"\noutputs = [\"dist/**\"]\n",
        );
    if git {
        git_init(&ws);
    }
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    for t in ["app#gen", "app#build", "plugin#build"] {
        assert_eq!(out.cache_of(t), "saved", "{t}\n{out}");
    }
    let again = ws.prova(["run", "build", "--all", "--json"]).run();
    for t in ["app#gen", "app#build", "plugin#build"] {
        assert_eq!(again.cache_of(t), "hit", "{t}\n{again}");
    }
}

#[test]
fn outputs_upstream_outputs_nested_projects_and_ignored_files_are_not_added_inputs() {
    nothing_spurious(false);
}

#[test]
fn outputs_upstream_outputs_nested_projects_and_ignored_files_are_not_added_inputs_in_git() {
    nothing_spurious(true);
}

#[test]
fn every_demo_task_is_saved_then_hit() {
    for git in [false, true] {
        let ws = TempWorkspace::copy_of(
            &prova_tests::repo_root().join("examples/demo"),
            &["dist", "gen", ".prova"],
        );
        if git {
            git_init(&ws);
        }
        let out = ws.prova(["run", "build", "test", "lint", "--all", "--json"]).run();
        out.assert_code(0);
        let summary = out.summary();
        let tasks = summary["tasks"].as_array().unwrap();
        assert!(tasks.len() > 10, "{out}");
        for t in tasks {
            let want = if t["cache"]["cache"] == "uncached" { "uncached" } else { "saved" };
            assert_eq!(t["cache"]["cache"], want, "git: {git}: {t}");
        }
        let again = ws.prova(["run", "build", "test", "lint", "--all", "--json"]).run();
        again.assert_code(0);
        for t in again.summary()["tasks"].as_array().unwrap() {
            let want = if t["cache"]["cache"] == "uncached" { "uncached" } else { "hit" };
            assert_eq!(t["cache"]["cache"], want, "git: {git}: {t}");
        }
    }
}

/// A workspace whose `[workspace]` declares a fingerprint file and a `//` input, and whose
/// build may rewrite one of them while it runs (an install inside a build).
fn ws_workspace_inputs(body: &str) -> TempWorkspace {
    let config = format!(
        r#"[workspace]
projects = ["app"]
fingerprint = ["lock.txt"]
inputs = ["//tools/**"]

[tasks.build]
command = '''
echo run >> ../runs.log
mkdir -p dist && cat src/a.txt ../lock.txt ../tools/gen.txt > dist/out.txt
{body}
'''
inputs = ["src/**"]
outputs = ["dist/**"]
"#
    );
    TempWorkspace::new()
        .file("prova.toml", &config)
        .file("app/src/a.txt", "source\n")
        .file("lock.txt", "v1\n")
        .file("tools/gen.txt", "gen 1\n")
}

#[test]
fn a_workspace_input_rewritten_while_a_task_runs_withholds_its_entry() {
    // The fingerprint file, and a `//` workspace input, each rewritten by the running task
    // (as `npm install` inside a build rewrites the lockfile): an entry under the key-time
    // digest would serve outputs built from the old lockfile once it is back.
    for (file, rewrite) in
        [("lock.txt", "echo v2 > ../lock.txt"), ("tools/gen.txt", "echo gen 2 > ../tools/gen.txt")]
    {
        let ws = ws_workspace_inputs(&format!("[ -f ../once ] || {{ touch ../once; {rewrite}; }}"));
        let out = run(&ws, &[]);
        out.assert_code(0);
        assert_eq!(
            out.not_saved_reason("app#build"),
            format!("input `{file}` changed while the task ran"),
            "{out}"
        );
        assert_eq!(entry_count(&ws, &[]), 0, "{file}: nothing filed under the old digest");
        // The next run sees the rewritten file under its own key: it executes and saves.
        let next = run(&ws, &[]);
        next.assert_code(0);
        assert_eq!(next.cache_of("app#build"), "saved", "{file}\n{next}");
        assert_eq!(runs(&ws), 2);
    }
}

#[test]
fn a_fingerprint_matching_no_file_is_warned_about_with_its_line_and_keyed_as_absent() {
    let ws = ws_workspace_inputs("").file("tools/gen.txt", "gen 1\n");
    fs::remove_file(ws.path("lock.txt")).expect("removing the lockfile");
    ws.write(
        "app/prova.toml",
        "[tasks.build]\ncommand = \"mkdir -p dist && cat src/a.txt > dist/out.txt\"\n",
    );
    let out = run(&ws, &[]);
    out.assert_code(0);
    let warned: Vec<String> = out
        .events()
        .iter()
        .filter(|e| e["event"] == "notice" && e["level"] == "warn")
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        warned
            .iter()
            .any(|m| m.starts_with("prova.toml:3:16: fingerprint `lock.txt` matches no file")),
        "{warned:?}"
    );
    let text = ws.prova(["run", "build", "--all"]).run();
    assert!(
        text.stderr.contains("prova.toml:3:16") || text.stdout.contains("prova.toml:3:16"),
        "{text}"
    );
    // When it appears, every key changes: a miss, not a hit on the absent-lockfile entry.
    ws.write("lock.txt", "v1\n");
    let after = run(&ws, &[]);
    after.assert_code(0);
    assert_ne!(after.report("app#build")["key"], out.report("app#build")["key"]);
    assert_eq!(after.cache_of("app#build"), "saved", "{after}");
    assert!(
        !after.events().iter().any(|e| e["event"] == "notice" && e["level"] == "warn"),
        "no warning once it exists\n{after}"
    );
}

#[test]
fn outputs_with_fewer_files_than_the_previous_entry_are_warned_about() {
    // An incremental build whose state (`../state`, like an undeclared tsconfig.tsbuildinfo)
    // survives the outputs' clean: the second run writes only what it thinks changed.
    let ws = ws_with(
        "mkdir -p dist && cp src/a.txt dist/a.txt\n\
         [ -f ../state ] || cp src/b.txt dist/b.txt\n\
         touch ../state",
        "",
    )
    .file("app/src/b.txt", "bee\n");
    let first = run(&ws, &[]);
    first.assert_code(0);
    assert!(first.notices_of("app#build").is_empty(), "{first}");
    ws.write("app/src/a.txt", "edited\n");
    let out = run(&ws, &[]);
    out.assert_code(0);
    let notices = out.notices_of("app#build");
    assert!(
        notices.iter().any(|n| n.contains("came out with 1 files, 2 in its previous entry")),
        "{notices:?}\n{out}"
    );
    // The same count again: no warning.
    ws.write("app/src/a.txt", "edited twice\n");
    let again = run(&ws, &[]);
    assert!(!again.notices_of("app#build").iter().any(|n| n.contains("came out with")), "{again}");
}

/// `git` on prova's `PATH` as a wrapper that logs each call's arguments to `log` before it
/// runs the real one.
fn logging_git(dir: &std::path::Path, log: &std::path::Path) -> String {
    let real = std::process::Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .expect("looking git up");
    let real = String::from_utf8_lossy(&real.stdout).trim().to_owned();
    assert!(real.starts_with('/'), "no git on PATH: {real:?}");
    let wrapper = dir.join("git");
    fs::write(
        &wrapper,
        format!("#!/bin/sh\necho \"$*\" >> '{}'\nexec '{real}' \"$@\"\n", log.display()),
    )
    .expect("writing the wrapper");
    fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("making the wrapper executable");
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// How many `git ls-files` listings with untracked files `log` holds (the workspace's, or
/// a save's recheck of one task's inputs).
fn listings(log: &std::path::Path) -> usize {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ls-files") && l.contains("--others"))
        .count()
}

/// A run that executes many tasks lists the workspace with git once: each save's recheck
/// of the task's inputs walks them instead, where the walk finds what the listing held
/// (issue 31: a git process per executed task was a third of a rebuild's CPU). Where
/// something moved, the recheck still asks git, and withholds.
#[test]
fn a_run_that_executes_tasks_starts_git_once_unless_an_input_directory_moved() {
    let mut ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["p/*"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt && echo scratch > build.log"
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file(".gitignore", "dist/\n*.log\n");
    for p in ["a", "b", "c", "d", "e"] {
        ws = ws.file(&format!("p/{p}/src/main.txt"), p);
    }
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm one",
        ])
        .current_dir(ws.root())
        .status()
        .expect("running git");
    assert!(status.success());
    let bin = tempfile::tempdir().expect("a directory for the wrapper");
    let log = bin.path().join("calls.log");
    let path = logging_git(bin.path(), &log);
    let run =
        |ws: &TempWorkspace| ws.prova(["run", "build", "--all", "--json"]).env("PATH", &path).run();

    let cold = run(&ws);
    cold.assert_code(0);
    for p in ["a", "b", "c", "d", "e"] {
        assert_eq!(cold.cache_of(&format!("{p}#build")), "saved", "{cold}");
    }
    assert_eq!(listings(&log), 1, "five tasks executed and saved, one listing\n{cold}");

    fs::remove_file(&log).ok();
    ws.write("p/c/src/main.txt", "c, edited");
    let edit = run(&ws);
    assert_eq!(edit.cache_of("c#build"), "saved", "{edit}");
    assert_eq!(listings(&log), 1, "{edit}");

    // A task that leaves a file git would list in its project directory: the walk finds it,
    // git is asked, and the entry is withheld as before.
    fs::remove_file(&log).ok();
    ws.write(
        "prova.toml",
        &fs::read_to_string(ws.path("prova.toml"))
            .unwrap()
            .replace("echo scratch > build.log", "echo scratch > notes.txt"),
    );
    let moved = run(&ws);
    moved.assert_code(0);
    let reason = moved.not_saved_reason("a#build");
    assert!(reason.contains("entries of its project directory changed"), "{reason}\n{moved}");
    assert_eq!(listings(&log), 1 + 5, "one listing, then git for each task's recheck\n{moved}");
}
