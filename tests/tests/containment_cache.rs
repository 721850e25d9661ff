//! Containment of the local cache and the workspace (issue 10): one writer per workspace (the
//! workspace lock, `--no-wait`), a read-only `.prova` with `--no-cache` / `--cache local:r`,
//! `prova cache clean` on a broken index, and a closed stderr pipe.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use prova_tests::cluster::{blocking_workspace, release, waiting_dirs, waiting_line};
use prova_tests::{Running, TempWorkspace, blocked_on_a_lock, prova_bin};

/// Exit code of a run that found the workspace locked under `--no-wait` (README, exit codes).
const BUSY: i32 = 3;

/// How long a test polls for something another process does.
const POLL_LIMIT: Duration = Duration::from_secs(30);

/// Starts a run of the blocking workspace and waits until its task is running (so the run
/// holds the workspace lock); returns it with the directory its task waits in.
fn hold(ws: &TempWorkspace) -> (Running, PathBuf) {
    let mut r = ws.prova(["run", "build", "--all", "--json"]).spawn();
    r.wait_for_lines("the task to start", 1, waiting_line);
    let dir = waiting_dirs(r.stdout_so_far(), "p#build").pop().expect("a waiting line");
    (r, dir)
}

/// Polls (bounded) until `cond` holds; panics naming `what`.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + POLL_LIMIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn no_wait_fails_at_once_while_another_run_holds_the_workspace() {
    let ws = blocking_workspace("mkdir -p dist; echo built > dist/out.txt");
    let (holder, dir) = hold(&ws);
    let out = ws.prova(["run", "build", "--all", "--no-wait"]).run();
    assert_eq!(out.code(), Some(BUSY), "{out}");
    out.assert_stderr_contains(&format!(
        "another prova is running in this workspace (pid {})",
        holder.pid()
    ));
    // Read-only commands do not take the lock: they answer while the run holds it.
    ws.prova(["run", "build", "--all", "--dry-run"]).run().assert_code(0);
    ws.prova(["graph", "build", "--all", "--json"]).run().assert_code(0);
    ws.prova(["show", "p#build"]).run().assert_code(0);
    release(&dir);
    holder.wait().assert_code(0);
    // Released on exit: the next `--no-wait` run goes ahead.
    ws.prova(["run", "build", "--all", "--no-wait"]).run().assert_code(0);
}

#[test]
fn a_second_run_waits_for_the_first_and_says_so() {
    let ws = blocking_workspace("mkdir -p dist; echo built > dist/out.txt");
    let (holder, dir) = hold(&ws);
    let holder_pid = holder.pid();
    let waiter = ws.prova(["run", "build", "--all", "--json"]).spawn();
    let pid = waiter.pid();
    wait_until("the second run to block on the workspace lock", || blocked_on_a_lock(pid));
    release(&dir);
    holder.wait().assert_code(0);
    let out = waiter.wait();
    out.assert_code(0);
    out.assert_stderr_contains(&format!(
        "another prova is running in this workspace (pid {holder_pid}); waiting — pass --no-wait to fail at once"
    ));
}

#[test]
fn the_lock_is_released_when_its_holder_is_killed() {
    let ws = blocking_workspace("mkdir -p dist; echo built > dist/out.txt");
    let (holder, dir) = hold(&ws);
    let pid = holder.pid();
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    drop(holder);
    wait_until("the killed run to be gone", || !prova_tests::is_alive(pid));
    // The killed run's task (its own process group) may outlive prova and take a release
    // meant for the next run's task (each removes the file it passes): keep one present
    // until the next run ends, whichever task takes it.
    let done = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if !dir.join("release").exists() {
                    release(&dir);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // Whatever prova forked before it died (the guardian that kills its task tree) may
        // hold the lock a moment longer; the lock must be free within the poll limit.
        let deadline = Instant::now() + POLL_LIMIT;
        let out = loop {
            let out = ws.prova(["run", "build", "--all", "--no-wait"]).run();
            if out.code() != Some(BUSY) || Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    });
    assert_ne!(out.code(), Some(BUSY), "the lock outlived its holder\n{out}");
}

/// A task that writes five files slowly, each holding one token per execution.
fn slow_writer() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["p"]
[tasks.build]
command = 't="$$-$(date +%s%N)"; mkdir -p dist; for i in 1 2 3 4 5; do echo "$t" > dist/f$i.txt; sleep 0.02; done'
inputs = ["src.txt"]
outputs = ["dist/**"]
"#,
        )
        .file("p/src.txt", "round 0\n")
}

/// The tokens in `p/dist/f1..f5` (sorted, deduplicated); missing files count as a token.
fn tokens(ws: &TempWorkspace) -> Vec<String> {
    let mut t: Vec<String> = (1..=5)
        .map(|i| {
            std::fs::read_to_string(ws.path(&format!("p/dist/f{i}.txt")))
                .unwrap_or_else(|_| "<missing>".to_owned())
        })
        .collect();
    t.sort();
    t.dedup();
    t
}

#[test]
fn concurrent_runs_in_one_workspace_never_tear_an_entry() {
    let ws = slow_writer();
    for round in 1..=30 {
        ws.write("p/src.txt", &format!("round {round}\n"));
        let a = ws.prova(["run", "build", "--all"]).spawn();
        let b = ws.prova(["run", "build", "--all"]).spawn();
        let (a, b) = (a.wait(), b.wait());
        assert_eq!(a.code(), Some(0), "round {round}\n{a}");
        assert_eq!(b.code(), Some(0), "round {round}\n{b}");
        assert_eq!(tokens(&ws).len(), 1, "round {round}: torn workspace {:?}", tokens(&ws));
        // Restore the round's entry into an empty dist: one execution's files only.
        std::fs::remove_dir_all(ws.path("p/dist")).unwrap();
        let out = ws.prova(["run", "build", "--all", "--json"]).run();
        out.assert_code(0);
        assert_eq!(out.cache_of("p#build"), "hit", "round {round}\n{out}");
        assert_eq!(tokens(&ws).len(), 1, "round {round}: torn entry {:?}", tokens(&ws));
    }
}

/// A workspace with one cached task, run once so `.prova/cache` holds its entry.
fn cached_workspace() -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"p\"]\n[tasks.build]\n\
             command = 'mkdir -p dist; cat src.txt > dist/out.txt'\n\
             inputs = [\"src.txt\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("p/src.txt", "source\n");
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    ws
}

/// Whether this machine can give a test a read-only bind mount (`unshare -m` as root).
fn can_bind_read_only() -> bool {
    let probe = tempfile::tempdir().expect("a temporary directory");
    let p = probe.path().to_str().expect("a UTF-8 temporary path");
    Command::new("unshare")
        .args(["-m", "sh", "-c", &format!("mount --bind -o ro {p} {p} && ! touch {p}/x")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `prova -C ws args…` in a private mount namespace where `ws/.prova` is read-only.
fn run_with_read_only_prova(ws: &TempWorkspace, args: &[&str]) -> (Option<i32>, String) {
    let prova_dir = ws.path(".prova");
    let script = format!(
        "mount --bind -o ro '{d}' '{d}' && exec '{bin}' -C '{root}' {args}",
        d = prova_dir.display(),
        bin = prova_bin().display(),
        root = ws.root().display(),
        args = args.join(" "),
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env_remove("PROVA_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("running unshare");
    let text = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("reading a directory of .prova") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn no_cache_and_read_only_cache_run_on_a_read_only_prova_dir() {
    if !can_bind_read_only() {
        eprintln!(
            "skipped: no read-only bind mount here (needs `unshare -m` as root); the store's \
             read-only open is covered by the coordinator's cache unit tests"
        );
        return;
    }
    let ws = cached_workspace();
    let before = tree(&ws.path(".prova"));
    ws.write("p/src.txt", "changed\n");
    for args in [
        &["run", "build", "--all", "--no-cache"][..],
        &["run", "build", "--all", "--cache", "local:r"][..],
        &["run", "build", "--all", "--cache", "local:"][..],
    ] {
        let (code, text) = run_with_read_only_prova(&ws, args);
        assert_eq!(code, Some(0), "{args:?}\n{text}");
        assert_eq!(ws.read("p/dist/out.txt"), "changed\n", "{args:?}\n{text}");
    }
    // The read-only index is read: the entry of the original input is a hit in the plan,
    // and a run with it restores it (staging beside the outputs, as `.prova/tmp` cannot be
    // written: see `a_read_only_cache_hit_restores_and_does_not_run_the_task`).
    ws.write("p/src.txt", "source\n");
    let dry = ["run", "build", "--all", "--cache", "local:r", "--dry-run", "--json"];
    let (code, text) = run_with_read_only_prova(&ws, &dry);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(r#""cache":"hit""#), "want a hit in the plan\n{text}");
    let (code, text) =
        run_with_read_only_prova(&ws, &["run", "build", "--all", "--cache", "local:r"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(ws.read("p/dist/out.txt"), "source\n", "{text}");
    assert_eq!(tree(&ws.path(".prova")), before, "the read-only runs changed .prova");
}

/// The read-only commands, each with what its output must say.
const READ_ONLY_COMMANDS: [(&[&str], &str); 5] = [
    (&["why", "p#build"], "unchanged since its newest entry"),
    (&["show", "p#build"], "p#build"),
    (&["cache", "stats"], "entries     1"),
    (&["hermeticity"], ""),
    (&["diff", "p#build"], "no recorded divergence"),
];

#[test]
fn read_only_commands_leave_prova_dir_untouched() {
    // Opened read-write, the index was written (memo rows). A read-only open of a WAL index
    // in a writable directory may leave SQLite's empty `-wal` and its `-shm` (shared memory,
    // no data): those are not compared; every other byte is.
    let ws = cached_workspace();
    let data = |ws: &TempWorkspace| {
        let mut t = tree(&ws.path(".prova"));
        t.retain(|(p, bytes)| {
            let name = p.to_string_lossy();
            !(name.ends_with("-shm") || (name.ends_with("-wal") && bytes.is_empty()))
        });
        t
    };
    let before = data(&ws);
    for (args, want) in READ_ONLY_COMMANDS {
        let out = ws.prova(args.iter().copied()).run();
        out.assert_code(0);
        out.assert_stdout_contains(want);
        let after = data(&ws);
        let changed: Vec<_> = after
            .iter()
            .filter(|f| !before.contains(f))
            .map(|(p, _)| p.display().to_string())
            .collect();
        assert!(changed.is_empty(), "`prova {args:?}` changed {changed:?}\n{out}");
    }
}

#[test]
fn read_only_commands_work_on_a_read_only_prova_dir() {
    if !can_bind_read_only() {
        eprintln!("skipped: no read-only bind mount here (needs `unshare -m` as root)");
        return;
    }
    let ws = cached_workspace();
    let before = tree(&ws.path(".prova"));
    for (args, want) in READ_ONLY_COMMANDS {
        let (code, text) = run_with_read_only_prova(&ws, args);
        assert_eq!(code, Some(0), "prova {args:?}\n{text}");
        assert!(text.contains(want), "prova {args:?}: want {want:?}\n{text}");
    }
    assert_eq!(tree(&ws.path(".prova")), before, "the read-only commands changed .prova");
}

#[test]
fn a_read_only_cache_hit_restores_and_does_not_run_the_task() {
    if !can_bind_read_only() {
        eprintln!("skipped: no read-only bind mount here (needs `unshare -m` as root)");
        return;
    }
    // Each execution appends to `ran.log` (outside the outputs): a restore adds no line.
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"p\"]\n[tasks.build]\n\
             command = 'echo ran >> ../ran.log; mkdir -p dist/sub; cat src.txt > dist/out.txt; echo x > dist/sub/y'\n\
             inputs = [\"src.txt\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("p/src.txt", "source\n");
    ws.prova(["run", "build", "--all"]).run().assert_code(0);
    let before = tree(&ws.path(".prova"));
    // Outputs gone (a fresh checkout), then one changed (a stale file is overwritten).
    for round in ["outputs removed", "an output changed"] {
        if round == "outputs removed" {
            std::fs::remove_dir_all(ws.path("p/dist")).expect("removing p/dist");
        } else {
            ws.write("p/dist/out.txt", "stale\n");
        }
        let args = ["run", "build", "--all", "--cache", "local:r", "--json"];
        let (code, text) = run_with_read_only_prova(&ws, &args);
        assert_eq!(code, Some(0), "{text}");
        assert!(text.contains(r#""cache":{"cache":"hit""#), "want a restore\n{text}");
        assert_eq!(ws.read("p/dist/out.txt"), "source\n", "{text}");
        assert_eq!(ws.read("p/dist/sub/y"), "x\n", "{text}");
        assert_eq!(ws.read("ran.log"), "ran\n", "the task ran again\n{text}");
        let mut left: Vec<_> = std::fs::read_dir(ws.path("p"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["dist", "src.txt"], "the restore left staging behind\n{text}");
    }
    assert_eq!(tree(&ws.path(".prova")), before, "the read-only runs changed .prova");
}

#[test]
fn no_cache_does_not_create_a_cache() {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"p\"]\n[tasks.build]\ncommand = 'mkdir -p dist; echo x > dist/o'\n\
             outputs = [\"dist/**\"]\n",
        )
        .file("p/src.txt", "source\n");
    ws.prova(["run", "build", "--all", "--no-cache"]).run().assert_code(0);
    assert!(!ws.exists(".prova/cache"), "--no-cache created .prova/cache");
    ws.prova(["run", "build", "--all", "--cache", "local:r"]).run().assert_code(0);
    assert!(!ws.exists(".prova/cache/index.sqlite"), "local:r created an index");
}

/// Damages `.prova/cache/index.sqlite` with `how`, then checks that `prova cache clean`
/// recovers: exit 0, says what it did, the next run works, nothing outside the cache moved.
fn clean_recovers(how: &str, damage: impl FnOnce(&Path)) {
    let ws = cached_workspace();
    let canary = tempfile::tempdir().expect("a canary directory");
    std::fs::write(canary.path().join("keep.txt"), "keep\n").expect("writing the canary");
    let cache = ws.path(".prova/cache");
    // A symlink planted in the cache dir: clean removes the link, never what it points at.
    std::os::unix::fs::symlink(canary.path(), cache.join("tmp").join("link"))
        .expect("planting a symlink in the cache");
    damage(&cache.join("index.sqlite"));
    let broken = ws.prova(["cache", "stats"]).run();
    assert_eq!(broken.code(), Some(2), "{how}: the damage was not seen\n{broken}");
    let out = ws.prova(["cache", "clean"]).run();
    assert_eq!(out.code(), Some(0), "{how}\n{out}");
    out.assert_stdout_contains("cleaned");
    assert_eq!(
        std::fs::read_to_string(canary.path().join("keep.txt")).expect("the canary file"),
        "keep\n"
    );
    ws.prova(["cache", "stats"]).run().assert_code(0);
    let run = ws.prova(["run", "build", "--all", "--json"]).run();
    run.assert_code(0);
    assert_ne!(run.cache_of("p#build"), "hit", "{how}: an entry survived the clean\n{run}");
    assert_eq!(ws.read("p/src.txt"), "source\n");
}

#[test]
fn cache_clean_works_on_garbage_bytes() {
    clean_recovers("garbage", |index| {
        std::fs::write(index, vec![0x5a; 8192]).unwrap();
    });
}

#[test]
fn cache_clean_works_on_a_truncated_index() {
    clean_recovers("truncated", |index| {
        let bytes = std::fs::read(index).unwrap();
        // Keep the header and a little more: the page count no longer matches the file.
        std::fs::write(index, &bytes[..bytes.len().min(1500)]).unwrap();
    });
}

#[test]
fn cache_clean_works_on_a_schema_from_the_future() {
    clean_recovers("future schema", |index| {
        let conn = rusqlite::Connection::open(index).unwrap();
        conn.pragma_update(None, "user_version", 999).unwrap();
    });
}

/// The writing end of a pipe whose reading end is closed.
fn closed_pipe() -> Stdio {
    let (read, write) = nix::unistd::pipe().expect("creating a pipe");
    drop(read);
    Stdio::from(write)
}

/// Runs `prova args…` with stderr on a closed pipe; returns its exit code (a signal death
/// is a failure).
fn code_with_closed_stderr(dir: &Path, args: &[&str], log: &str) -> i32 {
    let status = Command::new(prova_bin())
        .args(args)
        .current_dir(dir)
        .env("PROVA_LOG", log)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .status()
        .expect("starting prova");
    assert!(status.signal().is_none(), "{args:?} died of a signal: {status}");
    status.code().expect("an exit code")
}

#[test]
fn a_closed_stderr_does_not_panic() {
    let ws = cached_workspace();
    // A worker that cannot start: its error goes to the closed stderr.
    let code = code_with_closed_stderr(
        ws.root(),
        &["worker", "--join", "127.0.0.1:9", "--certs", "/nonexistent", "--sandbox", "none"],
        "debug",
    );
    assert_eq!(code, 2, "want the usage/infrastructure code, not a panic (101)");
    // A config error, and a run that logs at debug level all the way.
    ws.write("prova.toml", "[workspace\n");
    assert_eq!(code_with_closed_stderr(ws.root(), &["run", "build", "--all"], "warn"), 2);
    let ok = cached_workspace();
    assert_eq!(code_with_closed_stderr(ok.root(), &["run", "build", "--all"], "debug"), 0);
}

#[test]
fn a_dev_server_releases_the_workspace_once_only_it_is_left() {
    // `prova run dev` keeps serving; its build is done, so another run may use the workspace.
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["p"]
[tasks.build]
command = "mkdir -p dist; echo built > dist/out.txt"
outputs = ["dist/**"]
[tasks.dev]
command = "echo listening; while :; do sleep 1; done"
persistent = true
cache = false
ready_when = "listening"
deps = ["build"]
[tasks.other]
command = "echo other"
"#,
        )
        .dir("p");
    let mut dev = ws.prova(["run", "dev", "--all", "--json"]).spawn();
    dev.wait_for_lines("the server to be ready", 1, |l| l.contains(r#""event":"task_ready""#));
    let out = ws.prova(["run", "other", "--all", "--no-wait"]).run();
    out.assert_code(0);
    dev.signal(Signal::SIGINT);
    dev.wait();
}
