//! An empty directory a task leaves among its declared outputs is part of what it produced:
//! a hit restores it, a hit whose entry holds none removes a stale one, a dependent's key
//! sees it (so early cutoff never trusts a fingerprint blind to it), a dependent's exec root
//! shows it, and the determinism proof compares it. Before, the collection recorded files
//! and links only: a hit left `dist/empty/` and an empty `out/` absent where the run had made
//! them, and an upstream that stopped making one was "identical" to its dependents.

use prova_tests::cluster::Cluster;
use prova_tests::verify::{name, only_verdict, sandbox_or_skip};
use prova_tests::{Output, TempWorkspace};

/// `p#build` makes `dist/empty/`, `dist/keep/a.txt` and an empty `out/`; with `src/mode`
/// saying `bare` it makes `dist/keep/a.txt` alone.
const BUILD: &str = r#"[tasks.build]
command = '''
mkdir -p dist/keep && echo hi > dist/keep/a.txt
if [ "$(cat src/mode)" != bare ]; then mkdir -p dist/empty out; fi
'''
inputs = ["src/**"]
outputs = ["dist/**", "out/**"]
"#;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/prova.toml", BUILD)
        .file("p/src/mode", "full\n")
}

fn run(ws: &TempWorkspace, extra: &[&str]) -> Output {
    let mut args = vec!["run", "build", "--all", "--json"];
    args.extend_from_slice(extra);
    let out = ws.prova(args).run();
    out.assert_code(0);
    out
}

fn remove_outputs(ws: &TempWorkspace) {
    for d in ["p/dist", "p/out"] {
        let _ = std::fs::remove_dir_all(ws.path(d));
    }
}

#[track_caller]
fn full(ws: &TempWorkspace, out: &Output) {
    assert!(ws.path("p/dist/empty").is_dir(), "dist/empty/ absent\n{out}");
    assert!(ws.path("p/out").is_dir(), "out/ absent\n{out}");
    assert_eq!(ws.read("p/dist/keep/a.txt"), "hi\n", "{out}");
}

#[track_caller]
fn bare(ws: &TempWorkspace, out: &Output) {
    assert!(!ws.path("p/dist/empty").exists(), "a stale dist/empty/ kept\n{out}");
    assert!(!ws.path("p/out").exists(), "a stale out/ kept\n{out}");
    assert_eq!(ws.read("p/dist/keep/a.txt"), "hi\n", "{out}");
}

#[test]
fn a_hit_restores_the_empty_directories_the_run_made() {
    let ws = ws();
    let first = run(&ws, &[]);
    assert_eq!(first.cache_of("p#build"), "saved", "{first}");
    full(&ws, &first);
    remove_outputs(&ws);
    let hit = run(&ws, &[]);
    assert_eq!(hit.cache_of("p#build"), "hit", "{hit}");
    full(&ws, &hit);
    // Only the directories gone: the entry is not current until they are back.
    for d in ["p/dist/empty", "p/out"] {
        std::fs::remove_dir(ws.path(d)).expect("remove an empty dir");
        let again = run(&ws, &[]);
        assert_eq!(again.cache_of("p#build"), "hit", "{again}");
        full(&ws, &again);
    }
}

#[test]
fn a_sandboxed_execution_brings_its_empty_directories_out_of_its_exec_root() {
    if !sandbox_or_skip() {
        return;
    }
    let ws = ws().file("p/prova.toml", &format!("{BUILD}sandbox = true\n"));
    let first = run(&ws, &[]);
    assert_eq!(first.cache_of("p#build"), "saved", "{first}");
    full(&ws, &first);
    remove_outputs(&ws);
    full(&ws, &run(&ws, &[]));
}

#[test]
fn a_hit_whose_entry_holds_no_empty_directory_removes_a_stale_one() {
    let ws = ws().file("p/src/mode", "bare\n");
    bare(&ws, &run(&ws, &[]));
    ws.write("p/src/mode", "full\n");
    full(&ws, &run(&ws, &[]));
    // Back to the first key: its entry holds no empty directory, so neither does the
    // workspace after its hit (an execution would have cleaned them too).
    ws.write("p/src/mode", "bare\n");
    let hit = run(&ws, &[]);
    assert_eq!(hit.cache_of("p#build"), "hit", "{hit}");
    bare(&ws, &hit);
    // A forced run cleans them before it runs: the run that makes none saves none.
    ws.write("p/src/mode", "full\n");
    full(&ws, &run(&ws, &[]));
    ws.write("p/src/mode", "bare\n");
    let forced = run(&ws, &["--force"]);
    bare(&ws, &forced);
}

#[test]
fn an_empty_directory_an_upstream_stops_making_is_no_cutoff() {
    if !sandbox_or_skip() {
        return;
    }
    // A confined dependent is cut off when its upstream's outputs hold: an upstream that
    // stops making `dist/flag/` (files byte-identical) has not held them.
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"gen\", \"app\"]\n")
        .file(
            "gen/prova.toml",
            r#"[tasks.build]
command = '''
mkdir -p dist && echo same > dist/x.txt
if grep -q flag src/in.txt; then mkdir -p dist/flag; fi
'''
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file("gen/src/in.txt", "flag\n")
        .file(
            "app/prova.toml",
            r#"[project]
deps = ["gen"]

[tasks.build]
deps = ["^build"]
command = '''
mkdir -p dist
if [ -d ../gen/dist/flag ]; then echo flagged; else echo plain; fi > dist/app.txt
'''
inputs = ["src/**"]
outputs = ["dist/**"]
sandbox = true
"#,
        )
        .file("app/src/in.txt", "app\n");
    run(&ws, &[]);
    assert_eq!(ws.read("app/dist/app.txt"), "flagged\n");
    ws.write("gen/src/in.txt", "no\n");
    let out = run(&ws, &[]);
    assert_ne!(out.cache_of("app#build"), "hit", "cut off on a changed tree\n{out}");
    assert_eq!(ws.read("app/dist/app.txt"), "plain\n", "stale bytes served\n{out}");
    // And back: the first entry, whose exec root showed the directory, is hit again.
    ws.write("gen/src/in.txt", "flag\n");
    let back = run(&ws, &[]);
    assert_eq!(ws.read("app/dist/app.txt"), "flagged\n", "{back}");
}

#[test]
fn the_determinism_proof_compares_empty_directories() {
    // Same files every time; an empty directory named by the shell's pid.
    let ws = TempWorkspace::new().file("prova.toml", "[workspace]\nprojects = [\"p\"]\n").file(
        "p/prova.toml",
        "[tasks.build]\ncommand = \"mkdir -p dist/run-$$ && echo same > dist/a.txt\"\n\
         inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
    );
    let ws = ws.file("p/src/a.txt", "a\n");
    let out = ws.prova(["run", "build", "--all", "--verify=determinism", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#build");
    assert_eq!(name(&v), "nondeterministic", "{v}\n{out}");
    let said = format!("{}{}", v["added"], v["removed"]);
    assert!(said.contains("p/dist/run-"), "{v}");
}

#[test]
fn on_the_farm_a_hit_restores_the_empty_directories_too() {
    let farm = Cluster::start(1);
    let ws = ws();
    let first = farm.run(&ws, ["build", "--all", "--json"]);
    first.assert_code(0);
    assert_eq!(first.cache_of("p#build"), "saved", "{first}");
    full(&ws, &first);
    remove_outputs(&ws);
    let hit = farm.run(&ws, ["build", "--all", "--json"]);
    hit.assert_code(0);
    assert_eq!(hit.cache_of("p#build"), "hit", "{hit}");
    full(&ws, &hit);
}

#[test]
fn an_output_directory_that_is_a_mount_point_is_emptied_not_removed() {
    // A container's volume at `dist`: the clean empties it and, now that an empty `dist` of
    // `dist/**` is the task's own, tried to remove it too, which `EBUSY` failed — every run.
    let probe = std::process::Command::new("unshare").args(["-m", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        prova_tests::skip_for_missing("a mount namespace (`unshare -m`, as root)");
        return;
    }
    let ws = TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file(
            "p/prova.toml",
            "[tasks.build]\ncommand = \"mkdir -p dist && cat src/a.txt > dist/a.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("p/src/a.txt", "a\n");
    std::fs::create_dir_all(ws.path("p/dist")).expect("the mount point");
    let prova = prova_tests::prova_bin();
    let dist = ws.path("p/dist");
    // In a mount namespace of its own: the tmpfs goes with it.
    let script = format!(
        "set -e; mount -t tmpfs none '{d}'; \
         '{p}' -C '{w}' run build --all; \
         '{p}' -C '{w}' run build --all --force; \
         rm '{d}/a.txt'; '{p}' -C '{w}' run build --all; \
         mountpoint -q '{d}'; cat '{d}/a.txt'",
        d = dist.display(),
        p = prova.display(),
        w = ws.root().display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .expect("unshare");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // The hit restored the file into the mount, which stayed one.
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("\na\n"), "{text}");
}
