//! Installed trees of upstream projects (issue 27): a task that requires a workspace package
//! resolves that package's own dependencies from the package's `node_modules`, so every
//! project it can reach upstream — transitively — brings its tree into the task's exec root
//! (sandbox, `--verify=inputs`, farm) and its digest into the task's key. A read inside a
//! tree the task cannot see is named, and the advice given is one that works.
//!
//! The workspace is `monorepo::upstream`: `c → a → b`, `b` with its own `x@2` while the
//! root holds `x@1` — without `b`'s tree node quietly loads the wrong `x`.

use prova_tests::cluster::Cluster;
use prova_tests::monorepo::{self, upstream};
use prova_tests::tsmono::{node_present, ran};
use prova_tests::verify::{name, only_verdict, prova, sandbox_or_skip, verdict_names};
use prova_tests::{Output, TempWorkspace};

/// What every task printed, when each tree it reaches is there.
const C_OUT: &str = "c:a+b+x2\n";
const A_OUT: &str = "a+b+x2\n";

#[track_caller]
fn assert_proven_complete(out: &Output, tasks: &[&str]) {
    for t in tasks {
        let names = verdict_names(out, t);
        assert!(names.contains(&"proven-complete".to_owned()), "{t}: {names:?}\n{out}");
    }
}

#[test]
fn an_upstream_projects_tree_is_in_the_exec_root_of_every_task_that_reaches_it() {
    // Before: a#build and c#build ran without packages/b/node_modules; node loaded the
    // root's x@1 and the proof named b's tree "undeclared inputs".
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let ws = upstream();
    let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_proven_complete(&out, &["a#build", "b#build", "c#build"]);
    assert_eq!(ws.read("packages/a/dist/out.txt"), A_OUT, "{out}");
    assert_eq!(ws.read("packages/c/dist/out.txt"), C_OUT, "{out}");
}

#[test]
fn a_changed_file_in_an_upstream_projects_tree_reruns_every_task_that_reaches_it() {
    // Before: only b#build folded packages/b/node_modules; a and c hit with the old bytes.
    if !node_present() {
        return;
    }
    let ws = upstream();
    prova(&ws, ["run", "build", "--all"]).run().assert_code(0);
    assert_eq!(ws.read("packages/c/dist/out.txt"), C_OUT);
    ws.write("packages/b/node_modules/x/index.js", "module.exports = 'x2-patched';\n");
    let out = prova(&ws, ["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), ["a#build", "b#build", "c#build"], "{out}");
    assert_eq!(ws.read("packages/c/dist/out.txt"), "c:a+b+x2-patched\n");
    let show = prova(&ws, ["show", "c#build", "--json"]).run();
    assert!(show.stdout.contains("tree:packages/b/node_modules"), "transitive: {show}");
}

#[test]
fn a_pnpm_layout_links_each_package_to_its_trees_and_every_one_is_present() {
    // pnpm: every package has a node_modules of links, into the root's `.pnpm` store.
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let ws = monorepo::root();
    let ws = monorepo::package(
        ws,
        "packages/b",
        "b",
        &[],
        "mkdir -p dist && cp src/index.js dist/index.js",
    )
    .file("packages/b/src/index.js", "module.exports = 'b+' + require('x');\n");
    let ws = monorepo::package(
        ws,
        "packages/a",
        "a",
        &["b"],
        "mkdir -p dist && node src/print.js > dist/out.txt",
    )
    .file("packages/a/src/print.js", "console.log(require('b'));\n");
    let ws = monorepo::installed(ws, "node_modules/.pnpm/x@2.0.0/node_modules/x", "x", "2");
    let ws = monorepo::installed(ws, "node_modules/.pnpm/x@1.0.0/node_modules/x", "x", "1");
    monorepo::link(
        &ws,
        "../../../node_modules/.pnpm/x@2.0.0/node_modules/x",
        "packages/b/node_modules/x",
    );
    monorepo::link(&ws, "../../b", "packages/a/node_modules/b");
    monorepo::link(&ws, ".pnpm/x@1.0.0/node_modules/x", "node_modules/x");
    monorepo::git_init(&ws);
    let out = prova(&ws, ["run", "build", "--all", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_proven_complete(&out, &["a#build", "b#build"]);
    assert_eq!(ws.read("packages/a/dist/out.txt"), "b+x2\n", "{out}");
}

/// `d`, which does not depend on `b`, reads a file of `b`'s tree (and copes without it).
fn reader_of_a_tree_it_cannot_see(ws: TempWorkspace, extra_inputs: &str) -> TempWorkspace {
    let ws = monorepo::package(
        ws,
        "packages/d",
        "d",
        &[],
        "mkdir -p dist && (cat ../b/node_modules/x/index.js || echo none) > dist/out.txt",
    );
    let toml = ws.read("packages/d/prova.toml");
    ws.file(
        "packages/d/prova.toml",
        &toml.replace("\"package.json\"]", &format!("\"package.json\"{extra_inputs}]")),
    )
    .file("packages/d/src/.keep", "")
}

#[test]
fn a_read_inside_a_tree_the_task_cannot_see_is_named_with_advice_that_works() {
    // Before: the verdict said `add to inputs: "//packages/b/node_modules/x/**"`; doing so
    // turned it green while the file was still missing from the root, and unkeyed.
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let ws = reader_of_a_tree_it_cannot_see(upstream(), "");
    let out = prova(&ws, ["run", "build", "-p", "d", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "d#build");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(["packages/b/node_modules/x/index.js"]), "{v}");
    let suggest = v["suggest"].as_array().cloned().unwrap_or_default();
    assert!(
        !suggest.iter().any(|s| s.as_str().is_some_and(|s| s.contains("node_modules"))),
        "inputs cannot bring an installed tree into the root: {v}"
    );
    let advice = v["advice"].to_string();
    assert!(advice.contains("`b`") && advice.contains("depend"), "{v}");

    // The advice prova used to give does not turn the proof green.
    let ws = reader_of_a_tree_it_cannot_see(upstream(), ", \"//packages/b/node_modules/x/**\"");
    let out = prova(&ws, ["run", "build", "-p", "d", "--verify=inputs", "--json"]).run();
    let v = only_verdict(&out, "d#build");
    assert_eq!(name(&v), "undeclared-inputs", "still missing from the root: {out}");

    // The advice given does: d depends on b.
    let ws = reader_of_a_tree_it_cannot_see(upstream(), "");
    let pj = ws.read("packages/d/package.json").replace("{  }", "{ \"b\": \"1.0.0\" }");
    ws.write("packages/d/package.json", &pj);
    let out = prova(&ws, ["run", "build", "-p", "d", "--verify=inputs", "--json"]).run();
    out.assert_code(0);
    assert_proven_complete(&out, &["d#build"]);
    assert_eq!(ws.read("packages/d/dist/out.txt"), "module.exports = 'x2';\n");
}

#[test]
fn an_upstream_tree_is_present_and_proven_on_a_bwrap_farm_with_the_local_bytes() {
    // Before: the farm dropped lookups inside trees and mounted only the task's own: node
    // loaded x@1, exited 0, and `--verify=all` proved the wrong bytes.
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let local = upstream();
    prova(&local, ["run", "build", "--all"]).run().assert_code(0);
    assert_eq!(local.read("packages/c/dist/out.txt"), C_OUT);

    let farm = Cluster::builder().workers(2).start();
    let ws = upstream();
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--force", "--verify=all", "--json"])
        .timeout(std::time::Duration::from_secs(180))
        .run();
    out.assert_code(0);
    assert_proven_complete(&out, &["a#build", "b#build", "c#build"]);
    for t in ["a#build", "b#build", "c#build"] {
        let names = verdict_names(&out, t);
        assert!(names.contains(&"proven-deterministic".to_owned()), "{t}: {names:?}\n{out}");
    }
    for f in ["packages/a/dist/out.txt", "packages/c/dist/out.txt", "packages/b/dist/index.js"] {
        assert_eq!(ws.read(f), local.read(f), "{f}: the farm's bytes are local bytes\n{out}");
    }
}
