//! The file-digest memo and its racy window (brief §5): a warm run reads no input bytes once
//! the files are older than the window, and a file rewritten in place with the same size and
//! mtime right after it was hashed is still noticed.

use std::os::unix::fs::MetadataExt as _;
use std::time::Duration;

use prova_tests::cache::{age_files, mtime, set_mtime};
use prova_tests::{Output, TempWorkspace};
use rusqlite::{Connection, params};

const FILES: usize = 4;

fn ws() -> TempWorkspace {
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        r#"[workspace]
projects = ["app"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
    );
    for i in 0..FILES {
        ws = ws.file(&format!("app/src/f{i}.txt"), &format!("file {i}\n"));
    }
    ws
}

fn run(ws: &TempWorkspace) -> Output {
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    out
}

fn counter(out: &Output, name: &str) -> u64 {
    let stats = out.key_stats();
    stats[name].as_u64().unwrap_or_else(|| panic!("no {name} in {stats}\n{out}"))
}

#[test]
fn a_warm_run_with_nothing_changed_hashes_no_file() {
    let ws = ws();
    age_files(&ws, Duration::from_secs(10));
    let cold = run(&ws);
    assert_eq!(counter(&cold, "hashed"), FILES as u64, "{cold}");
    assert_eq!(counter(&cold, "memo_hits"), 0, "{cold}");
    assert_eq!(cold.cache_of("app#build"), "saved");

    let warm = run(&ws);
    assert_eq!(counter(&warm, "hashed"), 0, "a warm run read input bytes\n{warm}");
    assert_eq!(counter(&warm, "memo_hits"), FILES as u64, "{warm}");
    assert_eq!(warm.cache_of("app#build"), "hit", "{warm}");
    assert_eq!(warm.report("app#build")["key"], cold.report("app#build")["key"]);
}

#[test]
fn a_same_size_same_mtime_rewrite_right_after_hashing_is_noticed() {
    let ws = ws();
    let path = ws.path("app/src/f0.txt");
    let first = run(&ws); // hashes f0 (fresh: inside the racy window of its memo row)
    let original = mtime(&path);
    ws.write("app/src/f0.txt", "FILE 0\n"); // same length, different bytes
    set_mtime(&path, original);
    assert_eq!(mtime(&path), original);

    let second = run(&ws);
    assert_ne!(
        second.report("app#build")["key"],
        first.report("app#build")["key"],
        "the rewrite was missed\n{second}"
    );
    assert_eq!(second.cache_of("app#build"), "saved", "it executed again\n{second}");
    assert!(ws.read("app/dist/out.txt").starts_with("FILE 0\n"));
}

/// The memo row of `path`, made to match the file's current stat exactly (as on a file
/// system whose ctime did not tick between the hash and the rewrite), recorded `recorded_after`
/// after the file's mtime.
fn forge_memo_row(ws: &TempWorkspace, path: &str, recorded_after: Duration) {
    let meta = std::fs::symlink_metadata(ws.path(path)).expect("stat of the input");
    let ns = |s: i64, n: i64| s * 1_000_000_000 + n;
    let mtime_ns = ns(meta.mtime(), meta.mtime_nsec());
    let conn = Connection::open(ws.path(".prova/cache/index.sqlite")).expect("opening the index");
    conn.busy_timeout(Duration::from_secs(10)).expect("setting a busy timeout");
    let changed = conn
        .execute(
            "UPDATE memo SET dev = ?1, ino = ?2, size = ?3, mtime_ns = ?4, ctime_ns = ?5, \
             mode = ?6, recorded_ns = ?7 WHERE path = ?8",
            params![
                meta.dev() as i64,
                meta.ino() as i64,
                meta.size() as i64,
                mtime_ns,
                ns(meta.ctime(), meta.ctime_nsec()),
                meta.mode(),
                mtime_ns + recorded_after.as_nanos() as i64,
                path,
            ],
        )
        .expect("updating the memo row");
    assert_eq!(changed, 1, "one memo row for {path}");
}

/// Rewrites `app/src/f0.txt` in place with different bytes of the same length and its old
/// mtime, then forges its memo row so every stamp matches: only the racy window can tell.
fn rewrite_behind_the_memo(recorded_after: Duration) -> (Output, Output) {
    let ws = ws();
    // Every other input is old enough for its memo row to be trusted on the second run.
    age_files(&ws, Duration::from_secs(60));
    let path = ws.path("app/src/f0.txt");
    let first = run(&ws);
    let original = mtime(&path);
    ws.write("app/src/f0.txt", "FILE 0\n");
    set_mtime(&path, original);
    forge_memo_row(&ws, "app/src/f0.txt", recorded_after);
    let second = run(&ws);
    (first, second)
}

#[test]
fn the_racy_window_alone_catches_a_rewrite_whose_stamps_all_match() {
    // Hashed 1 s after its mtime: inside the 2 s racy window, so the row is not trusted.
    let (first, second) = rewrite_behind_the_memo(Duration::from_secs(1));
    assert_eq!(counter(&second, "hashed"), 1, "f0 alone is read again\n{second}");
    assert_ne!(
        second.report("app#build")["key"],
        first.report("app#build")["key"],
        "a rewrite inside the racy window was served from the memo\n{second}"
    );
    assert_eq!(second.cache_of("app#build"), "saved", "{second}");
}

#[test]
fn outside_the_racy_window_matching_stamps_are_trusted() {
    // The control for the test above: the same forged row, recorded 10 s after the mtime, is
    // trusted (the file is not read) — so the forgery matches every stamp, and it is the
    // racy window, not some other stamp, that makes the difference there.
    let (first, second) = rewrite_behind_the_memo(Duration::from_secs(10));
    assert_eq!(counter(&second, "hashed"), 0, "{second}");
    assert_eq!(second.report("app#build")["key"], first.report("app#build")["key"], "{second}");
}

#[test]
fn an_input_linking_out_of_the_workspace_is_keyed_by_what_it_leads_to() {
    // `app/src/shared.txt` and `app/src/vendor` link out of the workspace: their text alone
    // was keyed, and an edit out there was served stale from the cache.
    let out = tempfile::tempdir().expect("a directory outside the workspace");
    let o = out.path();
    std::fs::create_dir_all(o.join("vendor/lib")).unwrap();
    std::fs::write(o.join("shared.txt"), "shared v1\n").unwrap();
    std::fs::write(o.join("vendor/lib/v.txt"), "vendor v1\n").unwrap();
    let ws = ws();
    std::os::unix::fs::symlink(o.join("shared.txt"), ws.path("app/src/shared.txt")).unwrap();
    std::os::unix::fs::symlink(o.join("vendor"), ws.path("app/src/vendor")).unwrap();
    std::os::unix::fs::symlink(o.join("later.txt"), ws.path("app/src/later.txt")).unwrap();
    ws.write(
        "prova.toml",
        &ws.read("prova.toml").replace(
            "cat src/* > dist/out.txt",
            "cat src/*.txt src/vendor/lib/v.txt > dist/out.txt 2>/dev/null || true",
        ),
    );
    let first = run(&ws);
    assert_eq!(first.cache_of("app#build"), "saved", "{first}");
    assert_eq!(run(&ws).cache_of("app#build"), "hit", "unchanged out there: a hit");
    for (what, edit) in [
        ("a linked file", o.join("shared.txt")),
        ("a file under a linked directory", o.join("vendor/lib/v.txt")),
        ("a dangling link's target appearing", o.join("later.txt")),
    ] {
        std::fs::write(&edit, format!("{what}, edited\n")).unwrap();
        let again = run(&ws);
        assert_eq!(again.cache_of("app#build"), "saved", "{what}: served stale\n{again}");
        assert!(ws.read("app/dist/out.txt").contains(&format!("{what}, edited")), "{what}");
        assert_eq!(run(&ws).cache_of("app#build"), "hit", "{what}: then a hit again");
    }
}

#[test]
fn a_linked_package_outside_the_workspace_is_keyed_by_what_it_holds() {
    // `npm link` / pnpm's `link:`: node_modules/dep leads out of the workspace. The tree's
    // manifest keeps the link's text, so an edit of the linked package was served stale.
    let out = tempfile::tempdir().expect("a directory outside the workspace");
    let dep = out.path().join("dep");
    std::fs::create_dir_all(&dep).unwrap();
    std::fs::write(dep.join("index.js"), "dep v1\n").unwrap();
    let ws = TempWorkspace::new()
        .file("package.json", r#"{"name": "root", "private": true}"#)
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n[tasks.build]\n\
             command = \"mkdir -p dist && cat ../node_modules/dep/index.js > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/src/a.txt", "a\n");
    std::fs::create_dir_all(ws.path("node_modules")).unwrap();
    std::os::unix::fs::symlink(&dep, ws.path("node_modules/dep")).unwrap();
    assert_eq!(run(&ws).cache_of("app#build"), "saved");
    assert_eq!(run(&ws).cache_of("app#build"), "hit");
    std::fs::write(dep.join("index.js"), "dep v2\n").unwrap();
    let edited = run(&ws);
    assert_eq!(edited.cache_of("app#build"), "saved", "served stale\n{edited}");
    assert_eq!(ws.read("app/dist/out.txt"), "dep v2\n");
    assert_eq!(run(&ws).cache_of("app#build"), "hit");
}
