//! The `examples/tscomposite` fixture in a temporary directory: a composite TypeScript
//! monorepo of seven npm-workspace packages (`tsc -b` per package, `tsconfig.tsbuildinfo` at
//! each package's root, a package with its own `node_modules`), installed — the fixture's
//! own trees (root and per-package, from the `npm ci` CI runs) copied with their links, else
//! `npm ci --offline` from the npm cache — for suites that run the real binary on it
//! (`ts_composite.rs`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::{TempWorkspace, repo_root};

/// The packages (directories under `packages/`), dependencies first.
pub const PACKAGES: &[&str] = &["core", "strings", "math", "legacy", "fmt", "report", "app"];

/// The package every other one depends on, and the two nothing depends on.
pub const HUB: &str = "core";
pub const LEAVES: &[&str] = &["app", "legacy"];

/// The package whose `node_modules` holds its own version of an external package.
pub const OWN_TREE: &str = "legacy";

/// `@acme/<package>#<task>`.
pub fn id(package: &str, task: &str) -> String {
    format!("@acme/{package}#{task}")
}

/// Every task of `build test --all`, sorted.
pub fn all_tasks() -> Vec<String> {
    let mut v: Vec<String> =
        PACKAGES.iter().flat_map(|p| [id(p, "build"), id(p, "test")]).collect();
    v.sort();
    v
}

/// A copy of the fixture with its dependencies installed.
pub fn tscomposite() -> TempWorkspace {
    let src = repo_root().join("examples/tscomposite");
    let ws = TempWorkspace::copy_of(&src, crate::tsmono::PRODUCTS);
    install(&src, ws.root());
    ws
}

/// The installed trees of the fixture: the root's and each package's `node_modules`.
fn trees(src: &Path) -> Vec<String> {
    let mut out = vec!["node_modules".to_owned()];
    out.extend(
        PACKAGES
            .iter()
            .map(|p| format!("packages/{p}/node_modules"))
            .filter(|t| src.join(t).is_dir()),
    );
    out
}

/// Copies the fixture's installed trees into `dst` (symlinks kept: npm links the workspace
/// packages and `.bin` entries), else runs `npm ci --offline` there.
pub fn install(src: &Path, dst: &Path) {
    if src.join("node_modules/.package-lock.json").is_file()
        && src.join(format!("packages/{OWN_TREE}/node_modules")).is_dir()
    {
        for tree in trees(src) {
            let to = dst.join(&tree);
            let parent = to.parent().expect("a tree has a parent");
            let status = Command::new("cp")
                .arg("-a")
                .arg(src.join(&tree))
                .arg(parent)
                .status()
                .expect("running cp -a");
            assert!(status.success(), "copying {tree} failed");
        }
        return;
    }
    let out = Command::new("npm")
        .args(["ci", "--offline", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dst)
        .output()
        .expect("running npm");
    assert!(
        out.status.success(),
        "npm ci --offline failed; run `npm ci` in examples/tscomposite once (CI does):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every output file of every package (`dist/**` and `tsconfig.tsbuildinfo`), by
/// workspace path → sha256 (hex, from `sha256sum`).
pub fn outputs_sha256(root: &Path) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    for p in PACKAGES {
        let dir = format!("packages/{p}");
        collect(root, &format!("{dir}/dist"), &mut files);
        let info = format!("{dir}/tsconfig.tsbuildinfo");
        if root.join(&info).is_file() {
            files.push(info);
        }
    }
    if files.is_empty() {
        return BTreeMap::new();
    }
    let out = Command::new("sha256sum").args(&files).current_dir(root).output().expect("sha256sum");
    assert!(out.status.success(), "sha256sum failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(h, f)| (f.to_owned(), h.to_owned())))
        .collect()
}

fn collect(root: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(root.join(rel)) else { return };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let child = format!("{rel}/{}", e.file_name().to_string_lossy());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect(root, &child, out);
        } else {
            out.push(child);
        }
    }
}
