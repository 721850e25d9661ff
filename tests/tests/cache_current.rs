//! Outputs are "already current" only when prova can prove it (issue 11): a file whose size,
//! mode and mtime match the entry but whose bytes do not is restored, never left alone. Tools
//! that pin mtimes (`touch -d`, `SOURCE_DATE_EPOCH`, `cp -p`) make inputs `A → B → A` give a
//! hit over B's outputs with A's stamps; the restore must leave A's bytes.
//!
//! Also: a restore works when the cache (where restores are staged) is on another file system
//! than the workspace (a rename there is `EXDEV`).

use std::fs;
use std::os::unix::fs::MetadataExt as _;

use prova_tests::cache::snapshot;
use prova_tests::{Output, TempWorkspace};

/// `build` copies its input to `dist/out.txt` and pins the copy's mtime; `dist/other.txt` is
/// the same every time (also pinned). An `x` in the input adds a third output.
const CONFIG: &str = r#"[workspace]
projects = ["p"]

[tasks.build]
command = '''
echo run >> ../runs.log
mkdir -p dist
cp src/in.txt dist/out.txt
echo same > dist/other.txt
if grep -q x src/in.txt; then echo extra > dist/extra.txt; fi
touch -d '2020-01-02 03:04:05' dist/out.txt dist/other.txt
'''
inputs = ["src/**"]
outputs = ["dist/**"]
"#;

fn ws() -> TempWorkspace {
    TempWorkspace::new().file("prova.toml", CONFIG).file("p/src/in.txt", "AAAA\n")
}

fn run(ws: &TempWorkspace) -> Output {
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    out
}

fn runs(ws: &TempWorkspace) -> usize {
    fs::read_to_string(ws.path("runs.log")).map_or(0, |s| s.lines().count())
}

/// A → B → A, B of `b`'s bytes: the third run hits A's entry and must leave A's bytes.
fn a_b_a(b: &str) {
    let ws = ws();
    assert_eq!(run(&ws).cache_of("p#build"), "saved");
    let a_files = snapshot(&ws, "p/dist");
    let a_stamp = fs::metadata(ws.path("p/dist/out.txt")).expect("a_b_a");

    ws.write("p/src/in.txt", b);
    assert_eq!(run(&ws).cache_of("p#build"), "saved");
    assert_eq!(ws.read("p/dist/out.txt"), b);
    let b_stamp = fs::metadata(ws.path("p/dist/out.txt")).expect("a_b_a");
    assert_eq!(b_stamp.mtime(), a_stamp.mtime(), "the task pins its mtime");

    ws.write("p/src/in.txt", "AAAA\n");
    let out = run(&ws);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert_eq!(ws.read("p/dist/out.txt"), "AAAA\n", "B's bytes were left on disk\n{out}");
    assert_eq!(snapshot(&ws, "p/dist"), a_files);
    assert_eq!(runs(&ws), 2);

    // And back to B: B's bytes again, from B's entry.
    ws.write("p/src/in.txt", b);
    let out = run(&ws);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert_eq!(ws.read("p/dist/out.txt"), b, "{out}");
    assert_eq!(runs(&ws), 2);
}

#[test]
fn pinned_mtime_a_b_a_restores_a_bytes_when_sizes_differ() {
    a_b_a("BBBBBBBBB\n");
}

#[test]
fn pinned_mtime_a_b_a_restores_a_bytes_when_sizes_are_equal() {
    a_b_a("BBBB\n");
}

#[test]
fn a_partial_restore_rewrites_a_same_stamp_file_with_other_bytes() {
    // B also writes `extra.txt`, so A's hit is a restore (an extra output to remove) and each
    // file is judged on its own: `out.txt` has A's stamps but B's bytes.
    let ws = ws();
    run(&ws);
    ws.write("p/src/in.txt", "xxxx\n");
    run(&ws);
    assert!(ws.exists("p/dist/extra.txt"));
    ws.write("p/src/in.txt", "AAAA\n");
    let out = run(&ws);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert!(!ws.exists("p/dist/extra.txt"), "{out}");
    assert_eq!(ws.read("p/dist/out.txt"), "AAAA\n", "{out}");
}

#[test]
fn a_hand_edit_that_keeps_size_mode_and_mtime_is_restored() {
    let ws = ws();
    run(&ws);
    let dist = ws.path("p/dist/out.txt");
    let before = fs::metadata(&dist).unwrap();
    fs::write(&dist, "XXXX\n").unwrap();
    let status = std::process::Command::new("touch")
        .args(["-d", "2020-01-02 03:04:05"])
        .arg(&dist)
        .status()
        .unwrap();
    assert!(status.success());
    let after = fs::metadata(&dist).unwrap();
    assert_eq!(
        (after.len(), after.mode(), after.mtime()),
        (before.len(), before.mode(), before.mtime())
    );

    let out = run(&ws);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert_eq!(ws.read("p/dist/out.txt"), "AAAA\n", "the edited bytes were left\n{out}");
    assert_eq!(runs(&ws), 1);
}

#[test]
fn current_outputs_stay_untouched_across_warm_runs() {
    let ws = ws();
    run(&ws);
    let ino = fs::metadata(ws.path("p/dist/out.txt")).unwrap().ino();
    for _ in 0..3 {
        let out = run(&ws);
        assert_eq!(out.cache_of("p#build"), "hit", "{out}");
        assert_eq!(fs::metadata(ws.path("p/dist/out.txt")).unwrap().ino(), ino, "rewritten");
    }
    assert_eq!(runs(&ws), 1);
}

#[test]
fn a_restore_works_with_the_cache_on_another_file_system() {
    let ws = ws();
    let shm = std::path::Path::new("/dev/shm");
    let Ok(other) = tempfile::Builder::new().prefix("prova-xdev-").tempdir_in(shm) else {
        eprintln!("skipped: no /dev/shm to put the cache on another file system");
        return;
    };
    let (a, b) =
        (fs::metadata(ws.root()).unwrap().dev(), fs::metadata(other.path()).unwrap().dev());
    if a == b {
        eprintln!("skipped: /dev/shm is on the workspace's file system (st_dev {a})");
        return;
    }
    std::os::unix::fs::symlink(other.path(), ws.path(".prova")).unwrap();
    assert_eq!(run(&ws).cache_of("p#build"), "saved");
    let files = snapshot(&ws, "p/dist");
    fs::remove_dir_all(ws.path("p/dist")).unwrap();
    let out = run(&ws);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert_eq!(snapshot(&ws, "p/dist"), files);
    // A changed file on a partial restore too.
    fs::write(ws.path("p/dist/out.txt"), "changed\n").unwrap();
    let out = run(&ws);
    assert_eq!(out.cache_of("p#build"), "hit", "{out}");
    assert_eq!(snapshot(&ws, "p/dist"), files);
    let mode = fs::metadata(ws.path("p/dist/out.txt")).unwrap().mode() & 0o777;
    assert_eq!(mode, fs::metadata(ws.path("p/dist/other.txt")).unwrap().mode() & 0o777);
    assert_eq!(runs(&ws), 1);
}
