//! The installed trees' record (issue 31): a warm run whose walk of `node_modules` sees what
//! it saw when the tree's digest was computed takes that digest without reading the files'
//! memo rows or building the manifest again — and every way of changing the tree after it
//! was recorded still moves the keys of the tasks that fold it.
//!
//! A tree is recorded only when nothing in it changed within 2 s of the scan (the racy
//! window), so these runs see the workspace an hour later (libfaketime): its files are then
//! a checkout's old files, recorded by the first run.

use std::os::unix::fs::{PermissionsExt as _, symlink};

use prova_tests::tsmono::ran;
use prova_tests::{FakeClock, Output, TempWorkspace};

/// A workspace whose one task copies a file of the root `node_modules` (a tree by default:
/// there is a root `package.json`).
fn workspace() -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file("package.json", r#"{ "name": "root", "private": true }"#)
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["p"]
[tasks.build]
command = "mkdir -p dist && cat ../node_modules/dep/index.js > dist/out.txt && readlink ../node_modules/.bin/dep >> dist/out.txt"
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file("p/src/a.txt", "a\n")
        .file("node_modules/dep/index.js", "one\n")
        .file("node_modules/dep/package.json", r#"{ "name": "dep" }"#)
        .file("node_modules/other/lib/x.js", "x\n");
    std::fs::create_dir_all(ws.path("node_modules/.bin")).expect("a .bin");
    symlink("../dep/index.js", ws.path("node_modules/.bin/dep")).expect("a link");
    ws
}

/// `prova run build --all --json` an hour from now, with the trees' debug lines.
fn later(ws: &TempWorkspace, clock: &FakeClock) -> Output {
    let mut cmd =
        ws.prova(["run", "build", "--all", "--json"]).env("PROVA_LOG", "prova_analysis=debug");
    for (k, v) in clock.vars() {
        cmd = cmd.env(k, v);
    }
    // The wall clock alone: libfaketime shifts the times `fstat` and `fstatat` return too,
    // which the walk reads a recorded directory with (std's `statx` it leaves alone), so
    // every directory would look just changed and never be recorded.
    cmd = cmd.env("NO_FAKE_STAT", "1");
    let out = cmd.run();
    out.assert_code(0);
    out
}

/// Whether the run took every tree's digest from the record.
fn all_known(out: &Output) -> bool {
    out.stderr.lines().any(|l| l.contains("trees walked") && l.contains("trees=1 known=1"))
}

/// Whether the run's walk took every directory's entries from the recorded listings
/// (`.prova/trees/listings`) and read none.
fn all_listed(out: &Output) -> bool {
    out.stderr
        .lines()
        .any(|l| l.contains("trees stamped") && l.contains(" read=0") && !l.contains(" held=0 "))
}

fn clock() -> Option<FakeClock> {
    let clock = FakeClock::new("+1h");
    if clock.is_none() {
        prova_tests::skip_for_missing("libfaketime is not installed (Debian package faketime)");
    }
    clock
}

#[test]
fn a_recorded_tree_is_taken_from_the_record_and_every_change_to_it_reruns_its_reader() {
    let Some(clock) = clock() else { return };
    let ws = workspace();
    let first = later(&ws, &clock);
    assert_eq!(ran(&first), ["p#build"], "{first}");
    assert!(!all_known(&first), "nothing was recorded before the first run\n{first}");
    assert!(ws.path(".prova/trees/stamps").is_file(), "the first run records the tree");
    let warm = later(&ws, &clock);
    assert!(ran(&warm).is_empty(), "{warm}");
    assert!(all_known(&warm), "the warm run takes the recorded digest\n{warm}");
    // The directories' listings are recorded once `.prova/trees` is there (the first run
    // makes it after its walk): the run after that stats them instead of reading them.
    let warm = later(&ws, &clock);
    assert!(all_listed(&warm), "{warm}");

    // Each change, then its undoing where that is the point: the reader re-runs, and the
    // bytes it wrote are the new ones — never a hit keyed by the recorded digest.
    let f = ws.path("node_modules/dep/index.js");
    // 1. Rewritten in place: the same size, its mtime put back (`touch -r`, a restore).
    let mtime = std::fs::metadata(&f).expect("stat").modified().expect("mtime");
    std::fs::write(&f, "two\n").expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(&f)
        .expect("open")
        .set_modified(mtime)
        .expect("mtime");
    let out = later(&ws, &clock);
    assert_eq!(ran(&out), ["p#build"], "a file rewritten with its mtime put back\n{out}");
    assert!(ws.read("p/dist/out.txt").starts_with("two\n"), "{out}");
    // 2. Its exec bit.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = later(&ws, &clock);
    assert_eq!(ran(&out), ["p#build"], "a file made executable\n{out}");
    // 3. A file added elsewhere in the tree.
    ws.write("node_modules/other/lib/y.js", "y\n");
    let out = later(&ws, &clock);
    assert_eq!(ran(&out), ["p#build"], "a file added\n{out}");
    // 4. A link pointed elsewhere.
    std::fs::remove_file(ws.path("node_modules/.bin/dep")).expect("unlink");
    symlink("../other/lib/x.js", ws.path("node_modules/.bin/dep")).expect("relink");
    let out = later(&ws, &clock);
    assert_eq!(ran(&out), ["p#build"], "a link retargeted\n{out}");
    // 5. A directory removed with what it held.
    std::fs::remove_dir_all(ws.path("node_modules/other/lib")).expect("rm -r");
    let out = later(&ws, &clock);
    assert_eq!(ran(&out), ["p#build"], "a directory removed\n{out}");
    // Changes that only a directory's listing shows, each after the listings were taken
    // from the record again.
    let changes: [(&str, &dyn Fn()); 4] = [
        ("a file renamed in its directory", &|| {
            std::fs::rename(
                ws.path("node_modules/dep/package.json"),
                ws.path("node_modules/dep/p.json"),
            )
            .expect("rename");
        }),
        ("an empty directory made", &|| {
            std::fs::create_dir(ws.path("node_modules/other/empty")).expect("mkdir");
        }),
        ("a directory replaced by a file", &|| {
            std::fs::remove_dir(ws.path("node_modules/other/empty")).expect("rmdir");
            ws.write("node_modules/other/empty", "");
        }),
        ("a directory moved in from outside the tree", &|| {
            ws.write("moved/z.js", "z\n");
            std::fs::rename(ws.path("moved"), ws.path("node_modules/dep/moved")).expect("mv");
        }),
    ];
    for (what, change) in changes {
        later(&ws, &clock);
        let warm = later(&ws, &clock);
        assert!(ran(&warm).is_empty() && all_listed(&warm), "before: {what}\n{warm}");
        change();
        let out = later(&ws, &clock);
        assert_eq!(ran(&out), ["p#build"], "{what}\n{out}");
    }
    // And once nothing changes, the record answers again.
    later(&ws, &clock);
    let warm = later(&ws, &clock);
    assert!(ran(&warm).is_empty() && all_known(&warm) && all_listed(&warm), "{warm}");
}

#[test]
fn a_record_with_a_forged_digest_for_the_same_walk_is_not_served() {
    // The record names the digest of a manifest stored beside it: a manifest that is not
    // there (removed, or a digest someone wrote in) makes the tree scanned again.
    let Some(clock) = clock() else { return };
    let ws = workspace();
    later(&ws, &clock);
    let trees = ws.path(".prova/trees");
    for e in std::fs::read_dir(&trees).expect("the manifests") {
        let p = e.expect("an entry").path();
        if p.file_name().is_some_and(|n| n.len() == 64) {
            std::fs::remove_file(p).expect("remove a manifest");
        }
    }
    let out = later(&ws, &clock);
    assert!(ran(&out).is_empty(), "the same bytes: still a hit\n{out}");
    assert!(!all_known(&out), "a manifest gone: the tree is scanned again\n{out}");
    let again = later(&ws, &clock);
    assert!(all_known(&again), "and recorded again\n{again}");
}

#[test]
fn a_link_through_a_workspace_symlink_is_followed_again_though_the_tree_is_recorded() {
    // node_modules/dep -> ../vendor/dep, and `vendor` a symlink of the workspace, outside the
    // tree: pointing `vendor` elsewhere changes what the task reads, not the tree. The record
    // kept where the tree's links led when it was built, so the move was served stale.
    let Some(clock) = clock() else { return };
    let out = tempfile::tempdir().expect("a directory outside the workspace");
    for (d, v) in [("one", "dep one\n"), ("two", "dep two\n")] {
        std::fs::create_dir_all(out.path().join(d).join("dep")).expect("mkdir");
        std::fs::write(out.path().join(d).join("dep/index.js"), v).expect("write");
    }
    let ws = TempWorkspace::new()
        .file("package.json", r#"{ "name": "root", "private": true }"#)
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"p\"]\n[tasks.build]\n\
             command = \"mkdir -p dist && cat ../node_modules/dep/index.js > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("p/src/a.txt", "a\n")
        .file("vendored/dep/index.js", "dep vendored\n");
    std::fs::create_dir_all(ws.path("node_modules")).expect("a node_modules");
    symlink("../vendor/dep", ws.path("node_modules/dep")).expect("a link");
    let point = |to: &std::path::Path| {
        let _ = std::fs::remove_file(ws.path("vendor"));
        symlink(to, ws.path("vendor")).expect("the vendor link");
    };
    point(std::path::Path::new("vendored"));
    later(&ws, &clock);
    assert!(all_known(&later(&ws, &clock)), "the tree is recorded");
    for (to, want) in [("one", "dep one\n"), ("two", "dep two\n")] {
        point(&out.path().join(to));
        let moved = later(&ws, &clock);
        assert!(all_known(&moved), "the tree itself did not change\n{moved}");
        assert_eq!(ran(&moved), ["p#build"], "{to}: served stale\n{moved}");
        assert_eq!(ws.read("p/dist/out.txt"), want);
        assert!(ran(&later(&ws, &clock)).is_empty(), "{to}: then a hit");
    }
}
