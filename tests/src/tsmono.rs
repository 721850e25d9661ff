//! The `examples/tsmono` fixture in a temporary directory: a TypeScript monorepo of six
//! npm-workspace packages with its `node_modules` installed (the fixture's own, from the
//! `npm ci` CI runs, else `npm ci --offline` from the npm cache), for suites that run the
//! real binary on it (`ts_monorepo.rs`, `installed_trees.rs`).

use std::path::Path;
use std::process::Command;

use crate::{Output, TempWorkspace, repo_root};

/// Build products and prova's state: never copied, so what a test finds was made by its run.
pub const PRODUCTS: &[&str] = &["dist", ".prova", "node_modules"];

/// The fixture's packages, in dependency order.
pub const PACKAGES: &[&str] = &["core", "strings", "math", "fmt", "report", "app"];

/// Whether node is on this machine; when it is not, the suite prints why and passes
/// vacuously (CI installs it, see `.ci/run`).
pub fn node_present() -> bool {
    let found = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        crate::skip_for_missing("node is not installed (CI installs nodejs and npm)");
    }
    found
}

/// A copy of the fixture with its dependencies installed.
pub fn tsmono() -> TempWorkspace {
    let src = repo_root().join("examples/tsmono");
    let ws = TempWorkspace::copy_of(&src, PRODUCTS);
    install(&src, ws.root());
    ws
}

/// Installs the fixture's `node_modules` into `dst`: a copy of the fixture's own (symlinks
/// kept: npm links workspace packages and `.bin` entries), else `npm ci --offline`.
pub fn install(src: &Path, dst: &Path) {
    let installed = src.join("node_modules");
    if installed.join(".package-lock.json").is_file() {
        let status =
            Command::new("cp").arg("-a").arg(&installed).arg(dst).status().expect("running cp -a");
        assert!(status.success(), "copying {} failed", installed.display());
        return;
    }
    let out = Command::new("npm")
        .args(["ci", "--offline", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dst)
        .output()
        .expect("running npm");
    assert!(
        out.status.success(),
        "npm ci --offline failed; run `npm ci` in examples/tsmono once (CI does):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Tasks that executed in a `--json` run, sorted.
pub fn ran(out: &Output) -> Vec<String> {
    let summary = out.summary();
    let mut v: Vec<String> = summary["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks\n{out}"))
        .iter()
        .filter(|t| t["cache"]["cache"] != "hit")
        .filter_map(|t| t["task"].as_str().map(str::to_owned))
        .collect();
    v.sort();
    v
}

pub fn all_tasks() -> Vec<String> {
    let mut v: Vec<String> =
        PACKAGES.iter().flat_map(|p| [format!("{p}#build"), format!("{p}#test")]).collect();
    v.sort();
    v
}
