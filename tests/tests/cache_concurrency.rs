//! Several `prova` processes on one cache directory at once (brief §6: `--cache-dir` shared
//! across clones): they all succeed and the index stays consistent.

use prova_tests::cache::{cache_stats, entry_count, snapshot};
use prova_tests::{Output, Running, TempWorkspace};

const PROJECTS: usize = 6;

/// `p0 … p5`, each `build` depending on the previous project's; every build writes a few
/// files, one of them large enough to span many zstd blocks.
fn clone() -> TempWorkspace {
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        r#"[workspace]
projects = ["p*"]

[tasks.build]
command = '''
echo "building $(basename "$PWD")"
mkdir -p dist/deep
cp src/main.txt dist/main.txt
seq 1 20000 > dist/numbers.txt
printf '#!/bin/sh\n' > dist/deep/run.sh && chmod 755 dist/deep/run.sh
'''
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
    );
    for i in 0..PROJECTS {
        ws = ws.file(&format!("p{i}/src/main.txt"), &format!("project {i}\n"));
        if i > 0 {
            ws = ws.file(
                &format!("p{i}/prova.toml"),
                &format!("[project]\ndeps = [\"p{}\"]\n", i - 1),
            );
        }
    }
    ws
}

fn start(ws: &TempWorkspace, cache: &str, extra: &[&str]) -> Running {
    let mut args = vec!["run", "build", "--all", "--json", "-j", "3", "--cache-dir", cache];
    args.extend_from_slice(extra);
    ws.prova(args).spawn()
}

#[track_caller]
fn assert_all_succeeded(out: &Output) {
    out.assert_code(0);
    for i in 0..PROJECTS {
        assert_eq!(out.status_of(&format!("p{i}#build")), "succeeded", "{out}");
    }
}

#[test]
fn two_runs_on_one_cache_dir_at_once_both_succeed_and_the_index_stays_sound() {
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = cache_dir.path().to_str().unwrap().to_owned();
    let (a, b) = (clone(), clone());
    let dir_arg = ["--cache-dir", cache.as_str()];

    // Cold: both miss, execute and save the same keys at the same time.
    let (ra, rb) = (start(&a, &cache, &[]), start(&b, &cache, &[]));
    let (oa, ob) = (ra.wait(), rb.wait());
    assert_all_succeeded(&oa);
    assert_all_succeeded(&ob);
    // The same workspace in two places has the same keys.
    for i in 0..PROJECTS {
        let t = format!("p{i}#build");
        assert_eq!(oa.report(&t)["key"], ob.report(&t)["key"], "{t}");
    }
    assert_eq!(entry_count(&a, &dir_arg), PROJECTS as u64);

    // Both overwrite every entry at once (`--force`), while a third process prunes the cache
    // to nothing and a fourth reads it (hits, or misses where the prune won).
    let c = clone();
    let (ra, rb) = (start(&a, &cache, &["--force"]), start(&b, &cache, &["--force"]));
    let rc = start(&c, &cache, &[]);
    let prune = a.prova(["cache", "prune", "--max-size", "0", "--cache-dir", &cache]).spawn();
    let (oa, ob, oc, op) = (ra.wait(), rb.wait(), rc.wait(), prune.wait());
    assert_all_succeeded(&oa);
    assert_all_succeeded(&ob);
    assert_all_succeeded(&oc);
    op.assert_code(0);

    let check = a.prova(["cache", "stats", "--check", "--cache-dir", &cache]).run();
    check.assert_code(0);
    check.assert_stdout_contains("integrity check: ok");
    let stats = cache_stats(&a, &dir_arg);
    assert_eq!(stats["tmp_items"], 0, "staging left behind: {stats}");

    // Whatever survived is sound: a fresh clone's run succeeds, hits are byte-identical.
    let d = clone();
    let od = start(&d, &cache, &[]).wait();
    assert_all_succeeded(&od);
    for i in 0..PROJECTS {
        let dist = format!("p{i}/dist");
        assert_eq!(snapshot(&d, &dist), snapshot(&a, &dist), "{dist}\n{od}");
    }
    let check = d.prova(["cache", "stats", "--check", "--cache-dir", &cache]).run();
    check.assert_code(0);
    check.assert_stdout_contains("integrity check: ok");
}
