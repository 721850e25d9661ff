//! `examples/tsmono`, a TypeScript monorepo of six npm-workspace packages built by the real
//! `tsc` and tested by `node --test`, copied to a temporary directory with its installed
//! `node_modules` (from the fixture's own `npm ci`, which CI runs, else `npm ci --offline`
//! from the npm cache) and run with the real binary.

use std::path::Path;
use std::process::Command;

use prova_tests::{Output, TempWorkspace, repo_root};

/// Build products and prova's state: never copied, so what a test finds was made by its run.
const PRODUCTS: &[&str] = &["dist", ".prova", "node_modules"];

/// The fixture's packages, in dependency order.
const PACKAGES: &[&str] = &["core", "strings", "math", "fmt", "report", "app"];

/// Whether node is on this machine; when it is not, the suite prints why and passes
/// vacuously (CI installs it, see `.ci/run`).
fn node_present() -> bool {
    let found = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipping: node is not installed (CI installs nodejs and npm)");
    }
    found
}

/// A copy of the fixture with its dependencies installed.
fn tsmono() -> TempWorkspace {
    let src = repo_root().join("examples/tsmono");
    let ws = TempWorkspace::copy_of(&src, PRODUCTS);
    install(&src, ws.root());
    ws
}

/// Installs the fixture's `node_modules` into `dst`: a copy of the fixture's own (symlinks
/// kept: npm links workspace packages and `.bin` entries), else `npm ci --offline`.
fn install(src: &Path, dst: &Path) {
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
fn ran(out: &Output) -> Vec<String> {
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

fn all_tasks() -> Vec<String> {
    let mut v: Vec<String> =
        PACKAGES.iter().flat_map(|p| [format!("{p}#build"), format!("{p}#test")]).collect();
    v.sort();
    v
}

#[test]
fn cold_run_builds_and_tests_every_package_and_a_warm_run_hits_them_all() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    let cold = ws.prova(["run", "build", "test", "--all", "--json"]).run();
    cold.assert_code(0);
    assert_eq!(ran(&cold), all_tasks(), "{cold}");
    for p in PACKAGES {
        assert!(ws.exists(&format!("packages/{p}/dist/index.js")), "{p} was not compiled\n{cold}");
        assert!(ws.exists(&format!("packages/{p}/dist/index.d.ts")), "{p}: no declarations");
        assert!(cold.output_of(&format!("{p}#test")).contains("# fail 0"), "{cold}");
    }
    // tsc compiled app against report's and strings' declarations, which it could only read
    // because their builds ran first.
    assert!(ws.read("packages/app/dist/index.js").contains("require(\"report\")"));

    let warm = ws.prova(["run", "build", "test", "--all", "--json"]).run();
    warm.assert_code(0);
    assert!(ran(&warm).is_empty(), "a warm run executed tasks\n{warm}");
    for t in all_tasks() {
        assert_eq!(warm.cache_of(&t), "hit", "{t}\n{warm}");
    }
}
