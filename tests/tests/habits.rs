//! The habits the tools enforce, checked against the tree itself: clippy rejects a raw spawn
//! (`clippy.toml` lists every raw spawn, the workspace lint level denies it, every crate
//! inherits the workspace lints, and the one `allow` is in `protocol/src/task.rs`). `.ci/run`
//! runs `cargo clippy --workspace --all-targets -- -D warnings`, so together these mean a raw
//! `tokio::spawn` anywhere fails CI; this suite fails if any link of that chain is removed.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (this package is `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_owned()
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The `path = "…"` values of `clippy.toml`'s `disallowed-methods` (one table per line).
fn disallowed_methods() -> Vec<String> {
    let text = read("clippy.toml");
    let start = text.find("disallowed-methods").expect("clippy.toml has disallowed-methods");
    let list = &text[start..];
    let end = list.find("\n]").expect("disallowed-methods is a closed list");
    list[..end]
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("path = \"")? + "path = \"".len()..];
            Some(rest[..rest.find('"')?].to_owned())
        })
        .collect()
}

#[test]
fn clippy_disallows_every_raw_spawn() {
    let listed = disallowed_methods();
    for path in [
        "tokio::spawn",
        "tokio::task::spawn",
        "tokio::task::spawn_blocking",
        "tokio::runtime::Handle::spawn",
        "tokio::runtime::Handle::spawn_blocking",
    ] {
        assert!(
            listed.iter().any(|p| p == path),
            "clippy.toml does not disallow {path}: {listed:?}"
        );
    }
}

#[test]
fn the_lint_is_denied_for_every_crate_and_target() {
    let workspace = read("Cargo.toml");
    let lints = &workspace[workspace.find("[workspace.lints.clippy]").expect("clippy lints")..];
    let lints = &lints[..lints[1..].find("\n[").map_or(lints.len(), |i| i + 1)];
    assert!(
        lints.lines().any(|l| l.replace(' ', "") == "disallowed_methods=\"deny\""),
        "the workspace must deny the disallowed_methods lint:\n{lints}"
    );
    let members = &workspace[workspace.find("members = [").expect("members")..];
    let members = &members[..members.find(']').expect("closed members")];
    let names: Vec<&str> = members.split('"').skip(1).step_by(2).collect();
    assert!(names.len() >= 5, "{names:?}");
    for member in names {
        let manifest = read(&format!("{member}/Cargo.toml"));
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "{member}/Cargo.toml must inherit the workspace lints ([lints] workspace = true)"
        );
    }
}

/// Every `.rs` file under `dir`, recursively (skipping `target`).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lint's name, split so that this file does not name it whole.
const LINT: &str = concat!("clippy::", "disallowed_methods");

#[test]
fn only_the_task_helper_may_allow_a_raw_spawn() {
    let root = root();
    let mut files = Vec::new();
    for member in ["protocol", "coordinator", "worker", "cli", "tests"] {
        rust_files(&root.join(member), &mut files);
    }
    assert!(files.len() > 50, "found only {} Rust files", files.len());
    let allowing: Vec<String> = files
        .iter()
        .filter(|f| fs::read_to_string(f).is_ok_and(|t| t.contains(LINT)))
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert_eq!(allowing, ["protocol/src/task.rs"], "raw spawns allowed outside the helper");
}

/// The signature of each `pub fn` (and each actor message's `type Reply`) of a file: from
/// the item's start to its body or `;`, on one line.
fn public_signatures(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) =
        ["pub fn ", "pub async fn ", "type Reply ="].iter().filter_map(|k| rest.find(k)).min()
    {
        let tail = &rest[at..];
        let end = tail.find(['{', ';']).unwrap_or(tail.len());
        out.push(tail[..end].split_whitespace().collect::<Vec<_>>().join(" "));
        rest = &tail[end..];
    }
    out
}

#[test]
fn no_string_error_crosses_a_library_boundary() {
    // The network edge and the libraries speak typed errors (thiserror); a peer-facing
    // message is derived from them. `pub(crate)` and private functions may use a String.
    let root = root();
    let mut files = Vec::new();
    for member in ["protocol/src", "coordinator/src", "worker/src"] {
        rust_files(&root.join(member), &mut files);
    }
    let mut found = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap_or_default();
        for sig in public_signatures(&text) {
            let squashed: String = sig.chars().filter(|c| !c.is_whitespace()).collect();
            if squashed.contains(",String>") && squashed.contains("Result<") {
                found.push(format!("{}: {sig}", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    assert!(found.is_empty(), "Result<_, String> in a public signature:\n{}", found.join("\n"));
    // The check itself sees one.
    let sample = "pub fn parse(s: &str) -> Result<u32,\n    String> { todo() }";
    assert_eq!(public_signatures(sample), ["pub fn parse(s: &str) -> Result<u32, String>"]);
}
