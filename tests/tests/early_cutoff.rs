//! Early cutoff (issue 15): a confined dependent (`sandbox = true`: it can read nothing of its
//! upstreams but their declared outputs, issue 27) is keyed by its upstream's output bytes,
//! not the upstream's key. An upstream that re-ran with byte-identical outputs leaves it a
//! hit; one byte of difference moves it; an upstream without declared outputs is folded by its
//! key. Local mode and the farm, `--dry-run`, `show` and `why`. What is not confined is never
//! cut off: `cutoff_sound.rs`.

use prova_tests::cluster::Cluster;
use prova_tests::verify::sandbox_or_skip;
use prova_tests::{Output, TempWorkspace};

/// `gen#build` strips comment lines from its source (a comment edit re-runs it with the same
/// bytes out); `app#build` reads gen's output, confined; `app#report` depends on `gen#lint`,
/// which has no outputs.
const CONFIG: &str = r#"[workspace]
projects = ["gen", "app"]

[tasks.build]
command = "mkdir -p dist && grep -v '^#' src/in.txt > dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]

[tasks.lint]
command = "grep -c . src/in.txt"
inputs = ["src/**"]
"#;

const APP: &str = r#"[project]
deps = ["gen"]

[tasks.build]
command = "mkdir -p dist && cat ../gen/dist/out.txt src/in.txt > dist/app.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
sandbox = true

[tasks.report]
command = "mkdir -p out && echo reported > out/r.txt"
deps = ["gen#lint"]
outputs = ["out/**"]
"#;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", CONFIG)
        .file("gen/src/in.txt", "# header\nvalue 1\n")
        .file("app/prova.toml", APP)
        .file("app/src/in.txt", "app\n")
}

#[track_caller]
fn executed(out: &Output, task: &str) {
    assert_eq!(out.status_of(task), "succeeded", "{out}");
    assert_eq!(out.cache_of(task), "saved", "{task} should have run\n{out}");
}

#[track_caller]
fn hit(out: &Output, task: &str) {
    assert_eq!(out.cache_of(task), "hit", "{task} should have hit\n{out}");
}

#[test]
fn a_dependent_hits_after_its_upstream_re_ran_with_identical_bytes() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = ws();
    let first = ws.prova(["run", "build", "--all", "--json"]).run();
    first.assert_code(0);
    executed(&first, "gen#build");
    executed(&first, "app#build");

    // A comment: gen's key moves, its outputs do not.
    ws.write("gen/src/in.txt", "# a new header\nvalue 1\n");
    let second = ws.prova(["run", "build", "--all", "--json"]).run();
    second.assert_code(0);
    executed(&second, "gen#build");
    hit(&second, "app#build");
    assert_eq!(second.report("app#build")["cache"]["cutoff"], true, "{second}");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp\n");
    let text = ws.prova(["run", "build", "--all"]).run();
    assert!(!text.stdout.contains("identical bytes"), "no upstream re-ran: no cutoff\n{text}");
    // `why` says what kept it a hit.
    let why = ws.prova(["why", "app#build"]).run();
    why.assert_code(0).assert_stdout_contains("the next run is a hit").assert_stdout_contains(
        "upstream `gen#build` re-ran with identical outputs (early cutoff)",
    );

    // One byte of output moves the dependent.
    ws.write("gen/src/in.txt", "# a new header\nvalue 2\n");
    let third = ws.prova(["run", "build", "--all", "--json"]).run();
    third.assert_code(0);
    executed(&third, "gen#build");
    executed(&third, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "value 2\napp\n");
    let edited = ws.prova(["run", "build", "--all"]);
    ws.write("gen/src/in.txt", "# a third header\nvalue 2\n");
    edited
        .run()
        .assert_code(0)
        .assert_stdout_contains("1 of the hits after an upstream re-ran with identical bytes");

    // And back: both byte states are cached, every key is known up front, all hit.
    ws.write("gen/src/in.txt", "# a new header\nvalue 1\n");
    let fourth = ws.prova(["run", "build", "--all", "--json"]).run();
    fourth.assert_code(0);
    hit(&fourth, "gen#build");
    hit(&fourth, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp\n");
}

#[test]
fn an_upstream_without_outputs_is_folded_by_its_key() {
    let ws = ws();
    ws.prova(["run", "report", "-p", "app", "--json"]).run().assert_code(0);
    // gen#lint has no outputs: a dependent cannot read its bytes, so its key is folded; a
    // comment edit moves lint's key and re-runs report.
    ws.write("gen/src/in.txt", "# other header\nvalue 1\n");
    let out = ws.prova(["run", "report", "-p", "app", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.cache_of("gen#lint"), "saved", "{out}");
    executed(&out, "app#report");
}

#[test]
fn a_failed_upstream_never_yields_a_cutoff_hit() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = ws();
    ws.prova(["run", "build", "--all", "--json"]).run().assert_code(0);
    // gen's source vanishes: its command fails; app must not hit on gen's old bytes.
    std::fs::remove_file(ws.path("gen/src/in.txt")).expect("remove");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("gen#build"), "failed", "{out}");
    assert_eq!(out.status_of("app#build"), "skipped", "{out}");
}

#[test]
fn dry_run_show_and_why_name_a_pending_key_and_the_moved_outputs() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = ws();
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    ws.write("gen/src/in.txt", "# header\nvalue 2\n");

    // gen misses: app's key waits on gen's outputs.
    let dry = ws.prova(["run", "build", "--all", "--dry-run"]).run();
    dry.assert_code(0);
    let app_line = dry.stdout.lines().find(|l| l.contains("app#build")).unwrap_or_default();
    assert!(app_line.contains("pending") && app_line.contains("waits on `gen#build`"), "{dry}");
    let json = ws.prova(["run", "build", "--all", "--dry-run", "--json"]).run();
    let v: serde_json::Value = serde_json::from_str(json.stdout.trim()).expect("json");
    let app = v["tasks"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["id"] == "app#build"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(app["cache"], "pending", "{v}");
    assert!(app["key"].is_null(), "{v}");
    assert_eq!(app["waits_on"], serde_json::json!(["gen#build"]), "{v}");
    let show = ws.prova(["show", "app#build"]).run();
    show.assert_code(0).assert_stdout_contains("(pending)");
    let why = ws.prova(["why", "app#build"]).run();
    why.assert_code(0).assert_stdout_contains("waits on `gen#build`");

    // Once gen has run, app's key is known and `why` names gen's output that moved.
    ws.prova(["run", "build", "-p", "gen"]).run().assert_code(0);
    let why = ws.prova(["why", "app#build"]).run();
    why.assert_code(0)
        .assert_stdout_contains("upstream `gen#build` outputs changed: `gen/dist/out.txt`");
}

#[test]
fn the_farm_keys_dependents_by_their_upstreams_bytes() {
    if !sandbox_or_skip() {
        return;
    }
    let farm = Cluster::start(2);
    let ws = ws();
    let first = farm.run(&ws, ["build", "--all", "--json"]);
    first.assert_code(0);
    executed(&first, "gen#build");
    executed(&first, "app#build");

    ws.write("gen/src/in.txt", "# a new header\nvalue 1\n");
    let second = farm.run(&ws, ["build", "--all", "--json"]);
    second.assert_code(0);
    executed(&second, "gen#build");
    hit(&second, "app#build");
    assert_eq!(second.report("app#build")["cache"]["cutoff"], true, "{second}");
    assert_eq!(ws.read("app/dist/app.txt"), "value 1\napp\n");

    ws.write("gen/src/in.txt", "# a new header\nvalue 3\n");
    let third = farm.run(&ws, ["build", "--all", "--json"]);
    third.assert_code(0);
    executed(&third, "app#build");
    assert_eq!(ws.read("app/dist/app.txt"), "value 3\napp\n");

    // The keys the farm settled are the ones this client computes: a local run hits both.
    let local = ws.prova(["run", "build", "--all", "--json"]).run();
    local.assert_code(0);
    hit(&local, "gen#build");
    hit(&local, "app#build");
}

/// `top` depends on `mid` only, `mid` on `gen`; `top` reads gen's output through the
/// workspace (as a TypeScript build reads a transitive package's `.d.ts`).
const CHAIN: &str = r#"[workspace]
projects = ["gen", "mid", "top"]

[tasks.build]
command = "mkdir -p dist && grep -v '^#' src/in.txt > dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#;

#[test]
fn a_transitive_upstreams_new_bytes_re_run_the_dependent_when_the_direct_one_held() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = TempWorkspace::new()
        .file("prova.toml", CHAIN)
        .file("gen/src/in.txt", "value 1\n")
        .file("mid/prova.toml", "[project]\ndeps = [\"gen\"]\n")
        .file("mid/src/in.txt", "mid\n")
        .file(
            "top/prova.toml",
            "[project]\ndeps = [\"mid\"]\n\n[tasks.build]\ncommand = \"mkdir -p dist && cat ../gen/dist/out.txt ../mid/dist/out.txt > dist/top.txt\"\nsandbox = true\n",
        );
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    assert_eq!(ws.read("top/dist/top.txt"), "value 1\nmid\n");
    // gen's bytes change; mid re-runs with identical bytes (it does not read gen); top reads
    // gen's and must not hit on mid's unchanged bytes.
    ws.write("gen/src/in.txt", "value 2\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    executed(&out, "gen#build");
    executed(&out, "mid#build");
    executed(&out, "top#build");
    assert_eq!(ws.read("top/dist/top.txt"), "value 2\nmid\n", "{out}");
}

/// `gen#build`'s command in [`CONFIG`] (the workspace default; app overrides it).
const GEN_BUILD: &str = "mkdir -p dist && grep -v '^#' src/in.txt > dist/out.txt";

/// Instead: write which worker ran it (one key, a fingerprint per worker: the same bytes
/// recur whenever it lands where it ran before).
const BY_WORKER: &str = "mkdir -p dist && case $(pwd) in */workers/w1/*) echo one;; *) echo other;; esac > dist/out.txt";

#[test]
fn in_a_trusted_run_a_nondeterministic_upstream_is_never_served_and_dependents_follow_its_bytes() {
    if !sandbox_or_skip() {
        return;
    }
    // Under --trust proven a trusted run is served only what the ledger proves. gen's key
    // has two fingerprints (one per worker): its verdict is nondeterministic and its entry is
    // never promoted, so every trusted run executes gen again; app is keyed by the bytes gen
    // produced *this* run, so whatever it is served is app's proven result for those bytes.
    // Roots in the work dirs: `BY_WORKER` reads its worker from the path it runs in.
    let farm = Cluster::builder()
        .workers(2)
        .coordinator_args(["--trust", "proven"])
        .roots_in_work_dirs()
        .start();
    assert!(CONFIG.contains(GEN_BUILD));
    let clone = || ws().file("prova.toml", &CONFIG.replace(GEN_BUILD, BY_WORKER));
    let ws = clone();
    let proof = farm.run(&ws, ["build", "--all", "--json", "--verify"]);
    let gen_verdicts: Vec<String> = prova_tests::verify::verdicts(&proof, "gen#build")
        .iter()
        .map(prova_tests::verify::name)
        .collect();
    assert!(
        gen_verdicts.iter().any(|v| v == "nondeterministic"),
        "the proof sees gen's two fingerprints: {gen_verdicts:?}\n{proof}"
    );
    for round in 0..3 {
        let ws = clone();
        let out = farm.run(&ws, ["build", "--all", "--json"]);
        out.assert_code(0);
        assert_ne!(out.cache_of("gen#build"), "hit", "round {round}: gen is never proven\n{out}");
        let gen_bytes = ws.read("gen/dist/out.txt");
        // Whatever app's status, its bytes are the ones gen produced in this run.
        assert_eq!(
            ws.read("app/dist/app.txt"),
            format!("{gen_bytes}app\n"),
            "round {round}\n{out}"
        );
        if out.cache_of("app#build") == "hit" {
            assert_eq!(out.report("app#build")["cache"]["cutoff"], true, "{out}");
        }
    }
}
