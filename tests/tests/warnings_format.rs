//! Every warning a user's command prints reads `prova: warning: …` (issue 28: "warnings come
//! in two formats"): tracing's `2025-…Z  WARN prova_coordinator::graph::select: …` lines and
//! the run's bare `warning: …` notices are gone. On the real binary, warnings raised in the
//! coordinator's code, the CLI's own and the run's notices; and a scan of the source for the
//! formats that must not come back.

use std::path::{Path, PathBuf};

use prova_tests::{Output, TempWorkspace};

const WARNING: &str = "prova: warning: ";

/// Every stderr line that speaks of a warning is in the one format, and there is at least
/// `at_least` of them.
#[track_caller]
fn stderr_warnings(out: &Output, at_least: usize) -> Vec<String> {
    let lines: Vec<String> = out
        .stderr
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("warn"))
        .map(str::to_owned)
        .collect();
    for l in &lines {
        assert!(l.starts_with(WARNING), "a warning in another format: {l:?}\n{out}");
        assert!(!l.contains(" WARN "), "tracing's format: {l:?}\n{out}");
    }
    assert!(lines.len() >= at_least, "expected {at_least} warnings\n{out}");
    lines
}

#[test]
fn warnings_from_every_layer_read_the_same() {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"a\", \"gone/*\"]\nfingerprint = [\"nope.lock\"]\n\n\
             [tasks.build]\ncommand = \"echo built\"\ninputs = [\"nothing/**\"]\n",
        )
        .dir("a");
    // The config's (a project glob that matches nothing), the selection's (a filter glob
    // that matches nothing), the CLI's (a farm cache layer without a farm), and the run's
    // notices on stdout (a fingerprint and inputs that match no file).
    let out = ws
        .prova(["run", "build", "--filter", "a", "--filter", "zz*", "--cache", "local:rw,farm:r"])
        .run();
    out.assert_code(0);
    let lines = stderr_warnings(&out, 3);
    assert!(lines.iter().any(|l| l.contains("gone/*")), "{out}");
    assert!(lines.iter().any(|l| l.contains("--filter `zz*`")), "{out}");
    assert!(lines.iter().any(|l| l.contains("no --remote")), "{out}");
    let notices: Vec<&str> = out.stdout.lines().filter(|l| l.contains("warning")).collect();
    assert!(notices.len() >= 2, "{out}");
    for l in notices {
        assert!(l.contains(WARNING), "a run notice in another format: {l:?}\n{out}");
    }
    assert!(out.stdout.contains("a#build | prova: warning: its declared inputs match no file"));
    // With --allow-empty, the empty selection's warning; and from -v on, the same format
    // (info lines keep their diagnostics format).
    let out = ws.prova(["run", "build", "--filter", "zz*", "--allow-empty", "-v"]).run();
    out.assert_code(0);
    stderr_warnings(&out, 2);
    assert!(out.stderr.contains(" INFO "), "-v keeps tracing's lines for info\n{out}");
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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
fn the_source_holds_no_other_warning_format() {
    let root = prova_tests::repo_root();
    let mut files = Vec::new();
    for krate in ["cli", "coordinator", "worker", "protocol"] {
        rust_files(&root.join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 100, "{}", files.len());
    let mut stray = Vec::new();
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        for (n, line) in code.lines().enumerate() {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            let mut why = None;
            // `eprintln!` panics on a closed stderr and bypasses the format.
            if l.contains("eprintln!(") || l.contains("eprint!(") {
                why = Some("eprintln! (use tracing::warn! or stdio::eprint_line)");
            }
            // A warning written by hand must carry the prefix.
            for (i, _) in l.match_indices("warning:") {
                if !l[..i].ends_with("prova: ") {
                    why = Some("`warning:` without `prova: ` before it");
                }
            }
            for bad in ["\"WARN", "\"Warning", "\"warn:", " WARNING "] {
                if l.contains(bad) {
                    why = Some("another warning spelling");
                }
            }
            if let Some(why) = why {
                stray.push(format!("{rel}:{}: {why}: {}", n + 1, l));
            }
        }
    }
    assert!(stray.is_empty(), "warnings in another format:\n{}", stray.join("\n"));
}
