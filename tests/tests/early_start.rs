//! What a run starts before loading its workspace (issue 31): the workspace lock when it is
//! free, and under it the file list and the walk of the root `node_modules`. Neither may be
//! made before the lock is held: a run that waited for another writer must key the files
//! and the installed tree that writer left, never a list or a walk taken while it was
//! still writing.

use std::time::{Duration, Instant};

use prova_tests::tsmono::ran;
use prova_tests::{FakeClock, Output, ProvaCmd, TempWorkspace, blocked_on_a_lock};

/// One project whose build copies its sources and a file of the root `node_modules` (an
/// installed tree by default: there is a root `package.json`).
fn workspace(git: bool) -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file("package.json", r#"{ "name": "root", "private": true }"#)
        .file(".gitignore", "node_modules\ndist\n.prova\n")
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["p"]
[tasks.build]
command = "mkdir -p dist && cat src/* ../node_modules/dep/index.js > dist/out.txt"
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file("p/src/a.txt", "a\n")
        .file("node_modules/dep/index.js", "dep one\n");
    if git {
        prova_tests::monorepo::git_init(&ws);
    }
    ws
}

/// `prova run build --all --json`, an hour from now with `clock` (its files are then old
/// enough for the installed trees' record).
fn build(ws: &TempWorkspace, clock: Option<&FakeClock>) -> ProvaCmd {
    let mut cmd = ws.prova(["run", "build", "--all", "--json"]);
    for (k, v) in clock.iter().flat_map(|c| c.vars()) {
        cmd = cmd.env(k, v);
    }
    cmd
}

/// Holds the workspace lock as another prova would, starts a run that must wait for it,
/// changes the workspace while the run waits, then releases: the run must see the change.
fn run_after_a_writer(
    ws: &TempWorkspace,
    clock: Option<&FakeClock>,
    change: impl FnOnce(&TempWorkspace),
) -> Output {
    std::fs::create_dir_all(ws.path(".prova")).expect(".prova");
    let lock = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(ws.path(".prova/lock"))
        .expect("the lock file");
    lock.lock().expect("the workspace lock");
    let waiter = build(ws, clock).spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !blocked_on_a_lock(waiter.pid()) {
        assert!(Instant::now() < deadline, "the run never waited for the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    change(ws);
    drop(lock);
    let out = waiter.wait();
    out.assert_code(0);
    out
}

fn each_listing(check: impl Fn(TempWorkspace)) {
    for git in [false, true] {
        check(workspace(git));
    }
}

#[test]
fn a_run_that_waited_for_the_lock_keys_the_files_the_writer_added() {
    each_listing(|ws| {
        ws.prova(["run", "build", "--all"]).run().assert_code(0);
        let out = run_after_a_writer(&ws, None, |ws| ws.write("p/src/b.txt", "b\n"));
        assert_eq!(ran(&out), ["p#build"], "an input added while the run waited\n{out}");
        assert_eq!(ws.read("p/dist/out.txt"), "a\nb\ndep one\n");
    });
}

#[test]
fn a_run_that_waited_for_the_lock_keys_the_tree_the_writer_left() {
    // An hour later (libfaketime), so the first run records the tree: a walk made before the
    // lock would then match the record and key the tree as it was.
    let Some(clock) = FakeClock::new("+1h") else {
        prova_tests::skip_for_missing("libfaketime is not installed (Debian package faketime)");
        return;
    };
    each_listing(|ws| {
        build(&ws, Some(&clock)).run().assert_code(0);
        let warm = build(&ws, Some(&clock)).run();
        assert!(ran(&warm).is_empty(), "{warm}");
        let out = run_after_a_writer(&ws, Some(&clock), |ws| {
            ws.write("node_modules/dep/index.js", "dep two\n")
        });
        assert_eq!(ran(&out), ["p#build"], "the tree changed while the run waited\n{out}");
        assert_eq!(ws.read("p/dist/out.txt"), "a\ndep two\n");
        // And a run that found the lock free keys the same: a hit.
        let again = build(&ws, Some(&clock)).run();
        again.assert_code(0);
        assert!(ran(&again).is_empty(), "{again}");
    });
}

#[test]
fn a_run_whose_config_names_other_trees_walks_only_those() {
    // The root `node_modules` walked early is not a tree here (`trees` names another
    // directory): a change in it moves no key, a change in the named one does.
    let ws = workspace(true);
    let toml =
        ws.read("prova.toml").replace("[workspace]\n", "[workspace]\ntrees = [\"vendor\"]\n");
    ws.write("prova.toml", &toml);
    ws.write("vendor/tool.sh", "v1\n");
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    ws.write("node_modules/dep/index.js", "dep two\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert!(ran(&out).is_empty(), "node_modules is not a tree here\n{out}");
    ws.write("vendor/tool.sh", "v2\n");
    let out = ws.prova(["run", "build", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(ran(&out), ["p#build"], "the named tree changed\n{out}");
}
