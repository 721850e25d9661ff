//! `prova … | head` (issue 28): no command may panic when its stdout is closed. Every command
//! that prints is run with a stdout whose reader is gone — from the start (every write fails
//! with `EPIPE`), and after one line, as `head -1` leaves it — and must exit with its usual
//! code and no panic text. The binary's source keeps no `println!`, the macro that panics
//! on a closed pipe.

use std::path::Path;

use prova_tests::{ProvaCmd, TempWorkspace};

/// lib (alone) and app -> lib; `build` caches a file, so `show`, `why`, `runs`, `last` and
/// `cache stats` have something to say once it ran.
fn ws() -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"lib\", \"app\"]\n\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/* > dist/out.txt && echo built\"\n\
             deps = [\"^build\"]\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "a\n")
        .file("lib/src/l.txt", "l\n");
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    ws
}

/// No panic, and the exit code the command has with a reader.
#[track_caller]
fn assert_quiet(out: &prova_tests::Output, args: &[&str], code: i32) {
    assert!(!out.stderr.contains("panicked"), "{args:?} panicked\n{out}");
    assert!(!out.stderr.contains("Broken pipe"), "{args:?} complained\n{out}");
    assert_ne!(out.code(), Some(101), "{args:?}: a panic's exit code\n{out}");
    assert_eq!(out.code(), Some(code), "{args:?}\n{out}");
}

/// The commands that print, each with its exit code.
const PRINTERS: &[(&[&str], i32)] = &[
    (&["completions", "bash"], 0),
    (&["completions", "zsh"], 0),
    (&["completions", "fish"], 0),
    (&["completions", "elvish"], 0),
    (&["completions", "powershell"], 0),
    (&["schema", "config"], 0),
    (&["schema", "events"], 0),
    (&["ls"], 0),
    (&["ls", "--json"], 0),
    (&["graph", "build", "--all"], 0),
    (&["graph", "build", "--all", "--json"], 0),
    (&["run", "build", "--all"], 0),
    (&["run", "build", "--all", "--json"], 0),
    (&["run", "build", "--all", "--force", "--verify"], 0),
    (&["run", "build", "--all", "--dry-run"], 0),
    (&["run", "build", "--filter", "app..."], 0),
    (&["runs"], 0),
    (&["runs", "--json"], 0),
    (&["last"], 0),
    (&["last", "--json"], 0),
    (&["show", "app#build"], 0),
    (&["show", "app#build", "--json"], 0),
    (&["why", "app#build"], 0),
    (&["cache", "stats"], 0),
    (&["cache", "stats", "--json"], 0),
    (&["hermeticity"], 0),
    (&["hermeticity", "--json"], 0),
    (&["--help"], 0),
    (&["run", "--help"], 0),
    (&["--version"], 0),
];

#[test]
fn every_command_exits_quietly_on_a_closed_stdout() {
    let ws = ws();
    for (args, code) in PRINTERS {
        let out = ws.prova(args.iter().copied()).stdout_closed().run();
        assert_quiet(&out, args, *code);
    }
}

#[test]
fn a_reader_that_stops_after_one_line_is_no_panic() {
    let ws = ws();
    let some: &[(&[&str], i32)] = &[
        (&["completions", "bash"], 0),
        (&["completions", "zsh"], 0),
        (&["completions", "powershell"], 0),
        (&["schema", "config"], 0),
        (&["schema", "events"], 0),
        (&["ls", "--json"], 0),
        (&["graph", "build", "--all", "--json"], 0),
        (&["run", "build", "--all"], 0),
        (&["run", "build", "--all", "--json"], 0),
        (&["runs", "--json"], 0),
        (&["--help"], 0),
    ];
    for (args, code) in some {
        let out = ws.prova(args.iter().copied()).head(1).run();
        assert_quiet(&out, args, *code);
        assert!(out.stdout.lines().count() <= 1, "{args:?}: read one line\n{out}");
    }
    // The completion scripts are larger than a pipe's buffer: the closed pipe is met
    // mid-write, which is where clap_complete panicked.
    let out = ws.prova(["completions", "bash"]).head(1).run();
    assert!(out.stdout.starts_with("_prova()"), "{out}");
}

#[test]
fn init_and_schema_write_say_what_they_wrote_even_into_a_closed_pipe() {
    let fresh = TempWorkspace::new().file("package.json", "{\"name\": \"solo\"}\n");
    let out = fresh.prova(["init"]).stdout_closed().run();
    assert_quiet(&out, &["init"], 0);
    assert!(fresh.exists("prova.toml"), "{out}");
    let out = fresh.prova(["schema", "config", "--write"]).stdout_closed().run();
    assert_quiet(&out, &["schema", "config", "--write"], 0);
    // Outside any workspace, a closed stdout changes nothing either.
    let out = ProvaCmd::new(Path::new("/"), ["completions", "bash"]).stdout_closed().run();
    assert_quiet(&out, &["completions", "bash"], 0);
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_binary_writes_stdout_only_where_a_closed_pipe_is_handled() {
    let cli = prova_tests::repo_root().join("cli/src");
    let mut files = Vec::new();
    rust_files(&cli, &mut files);
    assert!(files.len() > 20, "{files:?}");
    // `commands/common.rs` holds `print` (a closed pipe is not an error); the run's renderer
    // in `commands/run.rs` stops writing once stdout is gone and keeps draining events.
    let allowed = ["commands/common.rs", "commands/run.rs"];
    let mut stray = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&cli).unwrap_or(f).to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(f).unwrap_or_default();
        // Test modules may print; they end the file.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            let prints = l.contains("println!(") || l.contains("print!(");
            let raw = l.replace("io::stdout().is_terminal()", "").contains("io::stdout()")
                && !allowed.contains(&rel.as_str());
            if prints || raw {
                stray.push(format!("cli/src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        stray.is_empty(),
        "stdout written where a closed pipe panics or errors (use commands::common::print):\n{}",
        stray.join("\n")
    );
}

#[test]
fn farm_commands_exit_quietly_on_a_closed_stdout() {
    // The client side of a farm: a remote run's relayed events and summary, status, the
    // hermeticity report.
    let farm = prova_tests::cluster::Cluster::start(1);
    let ws = ws();
    let remote = farm.remote_args(&farm.ci_certs());
    let cases: &[(&[&str], i32)] = &[
        (&["run", "build", "--all", "--force"], 0),
        (&["run", "build", "--all", "--force", "--json"], 0),
        (&["farm", "status"], 0),
        (&["farm", "status", "--json"], 0),
        (&["hermeticity", "--json"], 0),
    ];
    for (args, code) in cases {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(remote.iter().cloned());
        let out = ws.prova(all).stdout_closed().run();
        assert_quiet(&out, args, *code);
    }
}
