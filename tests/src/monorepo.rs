//! Small npm-workspace monorepos written by hand, for the suites about installed trees and
//! sandboxed outputs (`trees_upstream.rs`, `sandbox_outputs.rs`, `farm_inputs_agree.rs`):
//! real `node` resolution through `node_modules` links and per-package trees, without an
//! `npm install`.
//!
//! [`upstream`]: `c → a → b`, where `b` has its **own** `node_modules/x` (version 2, a
//! hoisting conflict) and the root's `node_modules/x` is version 1. A task that requires `b`
//! resolves `x` from `packages/b/node_modules`; with that tree missing, node silently picks
//! the root's `x@1` and the task succeeds with wrong bytes (`b+x1` instead of `b+x2`).

use std::os::unix::fs::symlink;
use std::process::Command;

use crate::TempWorkspace;

/// Runs `git init` (and an identity) in the workspace: real monorepos are git checkouts,
/// and the file list and ignore rules follow git there.
pub fn git_init(ws: &TempWorkspace) {
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.root())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "git init");
}

/// A symlink `rel -> target` in the workspace (parents created).
pub fn link(ws: &TempWorkspace, target: &str, rel: &str) {
    let path = ws.path(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("creating {rel}'s parent: {e}"));
    }
    symlink(target, &path).unwrap_or_else(|e| panic!("symlink {rel} -> {target}: {e}"));
}

/// A package `name` at `dir` in the workspace: `package.json` (with `main` and workspace
/// `dependencies`) and a `prova.toml` whose `build` runs `command`.
pub fn package(
    ws: TempWorkspace,
    dir: &str,
    name: &str,
    deps: &[&str],
    command: &str,
) -> TempWorkspace {
    let deps: Vec<String> = deps.iter().map(|d| format!("\"{d}\": \"1.0.0\"")).collect();
    ws.file(
        &format!("{dir}/package.json"),
        &format!(
            "{{ \"name\": \"{name}\", \"version\": \"1.0.0\", \"main\": \"dist/index.js\", \
             \"dependencies\": {{ {} }} }}\n",
            deps.join(", ")
        ),
    )
    .file(
        &format!("{dir}/prova.toml"),
        &format!("[tasks.build]\ncommand = '{command}'\ninputs = [\"src/**\", \"package.json\"]\n"),
    )
}

/// The installed package `name` (version `version`) at `dir` (a `node_modules/<name>`).
pub fn installed(ws: TempWorkspace, dir: &str, name: &str, version: &str) -> TempWorkspace {
    ws.file(
        &format!("{dir}/package.json"),
        &format!("{{ \"name\": \"{name}\", \"version\": \"{version}\" }}\n"),
    )
    .file(&format!("{dir}/index.js"), &format!("module.exports = '{name}{version}';\n"))
}

/// The root of an npm-workspaces repo: `package.json` with `workspaces`, `.gitignore`
/// (`node_modules`, `dist`), and `prova.toml` whose `build` waits for `^build` and outputs
/// `dist/**`.
pub fn root() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "package.json",
            "{ \"name\": \"mono\", \"private\": true, \"workspaces\": [\"packages/*\"] }\n",
        )
        .file(".gitignore", "node_modules/\ndist/\n")
        .file(
            "prova.toml",
            "[workspace]\n\n[tasks.build]\ndeps = [\"^build\"]\noutputs = [\"dist/**\"]\n",
        )
}

/// The workspace described in the module docs, git-initialised. `packages/c/dist/out.txt`
/// is `c:a+b+x2` when every tree the tasks reach is present.
pub fn upstream() -> TempWorkspace {
    let ws = root();
    // b: a library with its own x@2 (the root's x is 1: npm could not hoist it).
    let ws = package(ws, "packages/b", "b", &[], "mkdir -p dist && cp src/index.js dist/index.js")
        .file("packages/b/src/index.js", "module.exports = 'b+' + require('x');\n");
    let ws = installed(ws, "packages/b/node_modules/x", "x", "2");
    // a: requires b; prints what it got.
    let ws = package(
        ws,
        "packages/a",
        "a",
        &["b"],
        "mkdir -p dist && cp src/index.js dist/index.js && node src/print.js > dist/out.txt",
    )
    .file("packages/a/src/index.js", "module.exports = 'a+' + require('b');\n")
    .file("packages/a/src/print.js", "console.log(require('../dist/index.js'));\n");
    // c: requires a (and so, two links away, b and b's x).
    let ws =
        package(ws, "packages/c", "c", &["a"], "mkdir -p dist && node src/print.js > dist/out.txt")
            .file("packages/c/src/print.js", "console.log('c:' + require('a'));\n");
    let ws = installed(ws, "node_modules/x", "x", "1");
    for p in ["a", "b", "c"] {
        link(&ws, &format!("../packages/{p}"), &format!("node_modules/{p}"));
    }
    git_init(&ws);
    ws
}
