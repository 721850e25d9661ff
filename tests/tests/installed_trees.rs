//! Installed trees (issue 12): a gitignored `node_modules` is keyed, mounted into exec roots
//! and shipped to the farm as one content-addressed tree, so a real TypeScript monorepo
//! (`examples/tsmono`, built by the real `tsc`) proves and hits on the farm as it does
//! locally; and the inputs proof names every undeclared read, gitignored or not.

use std::collections::BTreeMap;
use std::path::Path;

use prova_tests::cluster::Cluster;
use prova_tests::tsmono::{PACKAGES, node_present, ran, tsmono};
use prova_tests::verify::{name, only_verdict, sandbox_or_skip, verdict_names};
use prova_tests::{Output, TempWorkspace};

/// Every file under each package's `dist`, by workspace path → bytes.
fn dist_of(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for p in PACKAGES {
        let dist = root.join("packages").join(p).join("dist");
        let Ok(rd) = std::fs::read_dir(&dist) else { continue };
        for e in rd.flatten() {
            let rel = format!("packages/{p}/dist/{}", e.file_name().to_string_lossy());
            out.insert(rel, std::fs::read(e.path()).unwrap_or_default());
        }
    }
    out
}

#[track_caller]
fn assert_all_proven(out: &Output) {
    for p in PACKAGES {
        let build = verdict_names(out, &format!("{p}#build"));
        assert!(build.contains(&"proven-deterministic".to_owned()), "{p}#build: {build:?}\n{out}");
        assert!(build.contains(&"proven-complete".to_owned()), "{p}#build: {build:?}\n{out}");
        let test = verdict_names(out, &format!("{p}#test"));
        assert!(test.contains(&"proven-complete".to_owned()), "{p}#test: {test:?}\n{out}");
    }
}

/// The deadline of a run that proves every task of the TypeScript fixture.
const PROOF_DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);

#[test]
fn every_task_of_the_ts_monorepo_proves_with_its_installed_tree_mounted() {
    // Before: tsc was "not found" (exit 127) in every exec root — node_modules is gitignored.
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let ws = tsmono();
    // Twelve tsc and node runs, each run three times (traced, re-run): minutes on a loaded
    // 2-core CI machine, not the default minute (seen: killed at 60 s in CI).
    let out = ws
        .prova(["run", "build", "test", "--all", "--verify=all", "--json"])
        .timeout(PROOF_DEADLINE)
        .run();
    out.assert_code(0);
    assert_all_proven(&out);
    let warm = ws.prova(["run", "build", "test", "--all", "--json"]).run();
    warm.assert_code(0);
    assert!(ran(&warm).is_empty(), "{warm}");
}

#[test]
fn a_changed_installed_file_reruns_its_readers_instead_of_a_stale_hit() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    let pkg = "node_modules/picocolors/picocolors.js";
    let before = ws.read(pkg);
    // A patched dependency (patch-package, a postinstall) with the lockfile unchanged.
    ws.write(pkg, &format!("{before}\n// patched\n"));
    let patched = ws.prova(["run", "build", "--all", "--json"]).run();
    patched.assert_code(0);
    assert_eq!(ran(&patched).len(), PACKAGES.len(), "the root tree is every task's\n{patched}");
    ws.write(pkg, &before);
    let back = ws.prova(["run", "build", "--all", "--json"]).run();
    assert!(ran(&back).is_empty(), "the same bytes again: the first entries hit\n{back}");
}

#[test]
fn a_project_tree_is_folded_only_into_that_projects_tasks() {
    if !node_present() {
        return;
    }
    let ws = tsmono();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    // A package installed in one project only (npm puts conflicting versions there).
    ws.write("packages/app/node_modules/local-only/index.js", "module.exports = 1;\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), ["app#build"], "{out}");
    let show = ws.prova(["show", "app#build", "--json"]).run();
    show.assert_code(0);
    assert!(show.stdout.contains("tree:packages/app/node_modules"), "{show}");
    assert!(show.stdout.contains("tree:node_modules"), "{show}");
}

#[test]
fn trees_set_to_nothing_leaves_node_modules_out_and_the_proof_names_what_it_read() {
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let ws = tsmono();
    let toml = ws.read("prova.toml");
    ws.write("prova.toml", &toml.replace("[workspace]\n", "[workspace]\ntrees = []\n"));
    let out = ws.prova(["run", "build", "-p", "core", "--verify=inputs", "--json"]).run();
    out.assert_code(1);
    // Gitignored, undeclared, and read all the same (the survey run saw the workspace's).
    let v = only_verdict(&out, "core#build");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    let paths = v["paths"].as_array().cloned().unwrap_or_default();
    assert!(paths.iter().any(|p| p == "node_modules/typescript/bin/tsc"), "{v}");
}

#[test]
fn an_undeclared_shared_tsconfig_is_named_by_the_inputs_proof() {
    // The planted read: the base compiler options every package extends, left out.
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let ws = tsmono();
    let toml = ws.read("prova.toml");
    let planted = toml.replace("\"//tsconfig.base.json\", ", "");
    assert_ne!(planted, toml);
    ws.write("prova.toml", &planted);
    let out = ws.prova(["run", "build", "-p", "core", "--verify=inputs", "--json"]).run();
    let v = only_verdict(&out, "core#build");
    let paths = v["paths"].as_array().cloned().unwrap_or_default();
    assert!(paths.iter().any(|p| p == "tsconfig.base.json"), "{v}\n{out}");
    assert!(
        !paths.iter().any(|p| p.as_str().is_some_and(|p| p.starts_with("node_modules/"))),
        "reads inside the mounted tree are declared: {v}"
    );
}

#[test]
fn a_gitignored_file_read_is_an_undeclared_input() {
    // Before: a read of a gitignored path was never named (the file list leaves it out), so
    // a task reading another project's build output without a dep passed the proof.
    if !sandbox_or_skip() {
        return;
    }
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file(".gitignore", "gen/\n")
        .file("gen/made.txt", "made by hand\n")
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            "[tasks.t]\ncommand = \"mkdir -p out && cat ../gen/made.txt src/a.txt > out/t.txt\"\n\
             inputs = [\"src/a.txt\"]\noutputs = [\"out/t.txt\"]\n",
        );
    let git =
        std::process::Command::new("git").args(["init", "-q"]).current_dir(ws.root()).status();
    assert!(git.is_ok_and(|s| s.success()), "git init");
    let out = ws.prova(["run", "t", "--all", "--verify=inputs", "--json"]).run();
    let v = only_verdict(&out, "p#t");
    assert_eq!(name(&v), "undeclared-inputs", "{out}");
    assert_eq!(v["paths"], serde_json::json!(["gen/made.txt"]), "{out}");
}

#[test]
fn the_ts_monorepo_builds_proves_and_hits_on_a_bwrap_farm_as_locally() {
    if !node_present() || !sandbox_or_skip() {
        return;
    }
    let local = tsmono();
    local.prova(["run", "build", "--all"]).run().assert_code(0);

    let farm = Cluster::builder().workers(2).start();
    let ws = tsmono();
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "test", "--all", "--verify=all", "--json"])
        .timeout(PROOF_DEADLINE)
        .run();
    out.assert_code(0);
    assert_all_proven(&out);
    assert_eq!(dist_of(ws.root()), dist_of(local.root()), "farm outputs are local outputs");
    assert!(dist_of(ws.root()).len() >= 2 * PACKAGES.len(), "{out}");

    // A second checkout with the same lockfile (another CI machine): every entry hits, and
    // the installed tree moves nothing — its manifest and files are already on the farm.
    let second = tsmono();
    let again = farm.run(&second, ["build", "test", "--all", "--json"]);
    again.assert_code(0);
    assert!(ran(&again).is_empty(), "{again}");
    let upload_line = |o: &Output| {
        o.stdout.lines().find(|l| l.contains("input blobs to the farm")).map(str::to_owned)
    };
    // The figures for the record (`--nocapture`): what the first and the second client moved.
    println!("first client: {:?}\nsecond client: {:?}", upload_line(&out), upload_line(&again));
    let uploaded = upload_line(&again).and_then(|l| {
        l.split("uploaded ").nth(1).and_then(|r| r.split(' ').next()).map(str::to_owned)
    });
    assert_eq!(uploaded.as_deref(), Some("0"), "{again}");
    assert_eq!(dist_of(second.root()), dist_of(local.root()));
    // Each worker materialised each tree digest at most once.
    for i in 0..2 {
        let trees = std::fs::read_dir(farm.work_dir(i).join("trees")).map_or(0, |d| d.count());
        assert!(trees <= 1, "worker {i} holds {trees} tree digests");
    }
}

#[test]
fn a_gitignored_declared_input_is_keyed_like_any_other() {
    // Before: git does not list it, so it was neither keyed nor in exec roots — a change to
    // it served the old entry (a stale hit).
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file(".gitignore", "local.json\ngenerated/\nout/\n")
        .file("p/config/local.json", "{\"mode\": 1}\n")
        .file("p/generated/a.txt", "gen 1\n")
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            "[tasks.t]\ncommand = \"mkdir -p out && cat config/local.json generated/*.txt src/a.txt > out/t.txt\"\n\
             inputs = [\"src/a.txt\", \"config/local.json\", \"generated/**\"]\noutputs = [\"out/t.txt\"]\n",
        );
    let git =
        std::process::Command::new("git").args(["init", "-q"]).current_dir(ws.root()).status();
    assert!(git.is_ok_and(|s| s.success()), "git init");
    ws.prova(["run", "t", "--all"]).run().assert_code(0);
    let warm = ws.prova(["run", "t", "--all", "--json"]).run();
    assert_eq!(warm.cache_of("p#t"), "hit", "{warm}");
    ws.write("p/config/local.json", "{\"mode\": 2}\n");
    let changed = ws.prova(["run", "t", "--all", "--json"]).run();
    assert_eq!(
        changed.cache_of("p#t"),
        "saved",
        "an ignored declared file moved the key\n{changed}"
    );
    assert!(ws.read("p/out/t.txt").contains("\"mode\": 2"));
    ws.write("p/generated/a.txt", "gen 2\n");
    let regenerated = ws.prova(["run", "t", "--all", "--json"]).run();
    assert_eq!(regenerated.cache_of("p#t"), "saved", "{regenerated}");
    assert!(ws.read("p/out/t.txt").contains("gen 2"));
    if sandbox_or_skip() {
        // And it is in the exec root: the inputs proof passes with only what is declared.
        let proof = ws.prova(["run", "t", "--all", "--force", "--verify=inputs", "--json"]).run();
        proof.assert_code(0);
        assert_eq!(name(&only_verdict(&proof, "p#t")), "proven-complete", "{proof}");
    }
}

#[test]
fn a_gitignored_workspace_input_moves_every_key_that_folds_it() {
    // The same hole by the workspace-wide route: `[workspace] inputs` naming an ignored file.
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\ninputs = [\"//.env.shared\"]\n")
        .file(".gitignore", ".env.shared\nout/\n")
        .file(".env.shared", "A=1\n")
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            "[tasks.t]\ncommand = \"mkdir -p out && cat ../.env.shared src/a.txt > out/t.txt\"\n\
             inputs = [\"src/a.txt\"]\noutputs = [\"out/t.txt\"]\n",
        );
    let git =
        std::process::Command::new("git").args(["init", "-q"]).current_dir(ws.root()).status();
    assert!(git.is_ok_and(|s| s.success()), "git init");
    ws.prova(["run", "t", "--all"]).run().assert_code(0);
    assert_eq!(ws.prova(["run", "t", "--all", "--json"]).run().cache_of("p#t"), "hit");
    ws.write(".env.shared", "A=2\n");
    let changed = ws.prova(["run", "t", "--all", "--json"]).run();
    assert_eq!(changed.cache_of("p#t"), "saved", "{changed}");
    assert!(ws.read("p/out/t.txt").contains("A=2"));
}
