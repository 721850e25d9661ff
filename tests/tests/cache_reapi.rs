//! The REAPI cache layer (issue 18) against a real REAPI server (BuildGrid): a cold run
//! writes its entries; a fresh clone with an empty local cache hits every task from the
//! server with byte-identical outputs; `reapi:r` writes nothing (the action cache has no
//! result for the key), nor does a run without `CI` unless `upload = "always"`; a blob tampered with in the server's CAS is a miss and a re-run,
//! never wrong bytes; a server killed mid-run leaves one warning and a run that completes.

use prova_coordinator::layers::reapi::map::key_action;
use prova_protocol::Digest;
use prova_tests::buildgrid::BuildGrid;
use std::collections::BTreeMap;

use prova_tests::cache::{Node, snapshot};
use prova_tests::{Output, TempWorkspace};

const PROJECTS: [&str; 2] = ["lib", "app"];
const WARNING: &str = "the REAPI cache is unavailable";

/// Two projects (app depends on lib) whose builds write a file, an executable, binary
/// bytes and a symlink; `extra` is spliced into lib's command.
fn ws(endpoint: &str, extra: &str) -> TempWorkspace {
    let config = format!(
        r#"[workspace]
projects = ["lib", "app"]

[cache.reapi]
endpoint = "{endpoint}"
timeout = "5s"

[tasks.build]
command = '''
{extra}
echo "building $(basename "$PWD")"
mkdir -p dist/sub
cp src/main.txt dist/data.txt
printf '#!/bin/sh\necho tool\n' > dist/tool
chmod 755 dist/tool
printf '\000\001\377 binary' > dist/sub/blob.bin
ln -sf data.txt dist/link
'''
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#
    );
    TempWorkspace::new()
        .file("prova.toml", &config)
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/main.txt", "the app's source\n")
        .file("lib/src/main.txt", "the library's source\n")
}

fn run(ws: &TempWorkspace, cache: &str) -> Output {
    let out = ws.prova(["run", "build", "--all", "--json", "--cache", cache]).run();
    out.assert_code(0);
    out
}

fn outputs(ws: &TempWorkspace) -> Vec<BTreeMap<String, Node>> {
    PROJECTS.iter().map(|p| snapshot(ws, &format!("{p}/dist"))).collect()
}

fn key_of(ws: &TempWorkspace, task: &str) -> Digest {
    let out = ws.prova(["why", task, "--json"]).run();
    out.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("why --json is JSON");
    json["key"].as_str().expect("a key").parse().expect("a hex key")
}

fn has_result(grid: &BuildGrid, key: &Digest) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let client = {
        let _in = rt.enter();
        grid.client()
    };
    rt.block_on(client.get_action_result(key_action(key).digest))
        .expect("GetActionResult answers")
        .is_some()
}

#[test]
fn a_clone_with_an_empty_local_cache_hits_every_task_from_reapi_with_identical_outputs() {
    let Some(grid) = BuildGrid::start() else { return };
    let a = ws(&grid.endpoint(), "");
    let cold = run(&a, "local:rw,reapi:rw");
    for p in PROJECTS {
        assert_eq!(cold.cache_of(&format!("{p}#build")), "saved", "{cold}");
        assert!(has_result(&grid, &key_of(&a, &format!("{p}#build"))), "{p}: no action result");
    }
    assert!(!cold.stderr.contains(WARNING), "{cold}");
    let b = ws(&grid.endpoint(), "");
    let warm = run(&b, "local:rw,reapi:rw");
    for p in PROJECTS {
        assert_eq!(warm.cache_of(&format!("{p}#build")), "hit", "{warm}");
    }
    assert_eq!(outputs(&a), outputs(&b), "the outputs restored from REAPI differ");
    assert!(warm.output_of("app#build").contains("building app"), "the log replays: {warm}");
    let stats = b.prova(["cache", "stats"]).run();
    stats
        .assert_code(0)
        .assert_stdout_contains(&format!("reapi       {} (reachable)", grid.endpoint()));
    // Now local: the third run needs no server at all, and stats says it is gone.
    let endpoint = grid.endpoint();
    drop(grid);
    let stats = b.prova(["cache", "stats", "--json"]).run();
    stats.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(&stats.stdout).expect("stats --json");
    assert_eq!(json["reapi"]["endpoint"], endpoint.as_str(), "{stats}");
    assert_eq!(json["reapi"]["reachable"], false, "{stats}");
    let local = run(&b, "local:rw");
    assert_eq!(local.cache_of("app#build"), "hit", "{local}");
}

#[test]
fn a_read_only_run_writes_nothing_to_the_server() {
    let Some(grid) = BuildGrid::start() else { return };
    let a = ws(&grid.endpoint(), "");
    let out = run(&a, "local:rw,reapi:r");
    assert_eq!(out.cache_of("lib#build"), "saved", "saved locally: {out}");
    for p in PROJECTS {
        assert!(
            !has_result(&grid, &key_of(&a, &format!("{p}#build"))),
            "{p}: reapi:r wrote a result"
        );
    }
    // A second clone finds nothing on the server either way.
    let b = ws(&grid.endpoint(), "");
    let again = run(&b, "local:rw,reapi:r");
    assert_eq!(again.cache_of("lib#build"), "saved", "{again}");
    // The default with [cache.reapi] set (no --cache): a developer's run only reads it…
    let c = ws(&grid.endpoint(), "");
    let dev = c.prova(["run", "build", "--all", "--json"]).env_remove("CI").run();
    dev.assert_code(0);
    assert!(!has_result(&grid, &key_of(&c, "lib#build")), "a run without CI wrote: {dev}");
    for off in ["", "0", "false"] {
        let d = ws(&grid.endpoint(), "");
        d.prova(["run", "build", "--all"]).env("CI", off).run().assert_code(0);
        assert!(!has_result(&grid, &key_of(&d, "lib#build")), "CI={off:?} wrote");
    }
    // …and CI's writes it.
    let ci = c.prova(["run", "build", "--all", "--json", "--force"]).env("CI", "true").run();
    ci.assert_code(0);
    assert!(has_result(&grid, &key_of(&c, "lib#build")), "a CI run did not write: {ci}");
}

/// `upload = "always"` writes from any run; `upload = "never"` from none, and refuses an
/// explicit `reapi:rw` rather than write to a server its config says is read-only.
#[test]
fn upload_always_and_never_override_the_ci_default() {
    let Some(grid) = BuildGrid::start() else { return };
    let always = with_extra(&grid, "always", "");
    always.prova(["run", "build", "--all"]).env_remove("CI").run().assert_code(0);
    assert!(has_result(&grid, &key_of(&always, "app#build")), "upload = always did not write");
    // Inputs of its own (`extra`), so its keys are on no server yet.
    let fresh = with_extra(&grid, "never", "echo never-written");
    fresh.prova(["run", "build", "--all"]).env("CI", "true").run().assert_code(0);
    assert!(!has_result(&grid, &key_of(&fresh, "lib#build")), "upload = never wrote under CI");
    let refused = fresh.prova(["run", "build", "--all", "--cache", "local:rw,reapi:rw"]).run();
    assert_ne!(refused.code(), Some(0), "{refused}");
    assert!(refused.stderr.contains("upload = \"never\""), "{refused}");
}

#[test]
fn a_blob_tampered_with_in_the_server_cas_is_a_miss_and_a_rerun_never_wrong_bytes() {
    let Some(grid) = BuildGrid::start() else { return };
    let a = ws(&grid.endpoint(), "");
    run(&a, "local:rw,reapi:rw");
    let want = outputs(&a);
    // Every blob in the server's disk CAS gets one byte flipped (same size, wrong hash).
    let mut tampered = 0;
    for f in walk(&grid.cas_dir()) {
        let mut bytes = std::fs::read(&f).expect("read a CAS blob");
        if let Some(b) = bytes.last_mut() {
            *b ^= 0xff;
            std::fs::write(&f, &bytes).expect("tamper a CAS blob");
            tampered += 1;
        }
    }
    assert!(tampered > 0, "no blob found in {}", grid.cas_dir().display());
    let b = ws(&grid.endpoint(), "");
    let out = run(&b, "local:rw,reapi:rw");
    for p in PROJECTS {
        assert_ne!(out.cache_of(&format!("{p}#build")), "hit", "a tampered entry hit: {out}");
    }
    assert_eq!(outputs(&b), want, "the re-run's outputs differ");
}

#[test]
fn a_server_killed_mid_run_leaves_one_warning_and_the_run_completes_locally() {
    let Some(grid) = BuildGrid::start() else { return };
    // lib's build kills the server: its upload and everything after finds no server.
    let a = ws(&grid.endpoint(), &format!("kill -9 {} 2>/dev/null || true", grid.pid()));
    let out = run(&a, "local:rw,reapi:rw");
    for p in PROJECTS {
        assert_eq!(out.cache_of(&format!("{p}#build")), "saved", "{out}");
    }
    assert_eq!(out.stderr.matches(WARNING).count(), 1, "one warning line: {out}");
    // A run against a server that is gone from the start: one warning, all local.
    let b = ws(&grid.endpoint(), "");
    let gone = run(&b, "local:rw,reapi:rw");
    assert_eq!(gone.cache_of("lib#build"), "saved", "{gone}");
    assert_eq!(gone.stderr.matches(WARNING).count(), 1, "{gone}");
    let hit = run(&b, "local:rw,reapi:rw");
    assert_eq!(hit.cache_of("app#build"), "hit", "{hit}");
}

/// [`ws`] with `upload = "<upload>"` in its `[cache.reapi]`.
fn with_extra(grid: &BuildGrid, upload: &str, extra: &str) -> TempWorkspace {
    let w = ws(&grid.endpoint(), extra);
    let text = std::fs::read_to_string(w.path("prova.toml")).expect("prova.toml");
    let set = format!("timeout = \"5s\"\nupload = \"{upload}\"\n");
    w.write("prova.toml", &text.replace("timeout = \"5s\"\n", &set));
    w
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() { stack.push(p) } else { out.push(p) }
        }
    }
    out
}

/// Many keys looked up at once stay within what the server serves at a time (BuildGrid
/// refuses calls beyond its thread pool with RESOURCE_EXHAUSTED): a wide warm run from the
/// server hits every task (seen: 200 tasks, all misses and "Concurrent RPC limit exceeded").
#[test]
fn a_wide_warm_run_hits_every_task_without_exhausting_the_server() {
    let Some(grid) = BuildGrid::start() else { return };
    let wide = |n: usize| {
        let mut ws = TempWorkspace::new().file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p/*\"]\n\n[cache.reapi]\nendpoint = \"{}\"\n\n\
                 [tasks.build]\ncommand = \"mkdir -p dist && cp src/main.txt dist/out.txt\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
                grid.endpoint()
            ),
        );
        for i in 0..n {
            ws = ws.file(&format!("p/t{i}/src/main.txt"), &format!("source {i}\n"));
        }
        ws
    };
    let a = wide(120);
    let cold = a.prova(["run", "build", "--all"]).env("CI", "true").run();
    cold.assert_code(0);
    assert!(!cold.stderr.contains(WARNING), "{cold}");
    let b = wide(120);
    let warm = b.prova(["run", "build", "--all"]).run();
    warm.assert_code(0);
    assert!(!warm.stderr.contains(WARNING), "{warm}");
    assert!(warm.stdout.contains("120 hit, 0 miss"), "{warm}");
}
