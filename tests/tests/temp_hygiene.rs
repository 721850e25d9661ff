//! No command leaves anything behind in the temporary directory: a read-only cache's staging
//! directory, a `--no-cache` scratch store or a proof's exec root is removed before the
//! process exits, whichever command opened it (a `show` once leaked one per call); one a
//! killed run could not remove is removed by the next run that makes one.

use nix::sys::signal::Signal;
use prova_tests::TempWorkspace;

fn ws() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["lib", "app"]

[tasks.build]
command = "mkdir -p dist && cat src/* > dist/out.txt"
deps = ["^build"]
inputs = ["src/**"]
outputs = ["dist/**"]
"#,
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "alpha\n")
        .file("lib/src/l.txt", "lib\n")
}

/// A workspace of one project `p` holding `src/a.txt`, with `tasks` as its `prova.toml`.
fn project_p(tasks: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/src/a.txt", "hello\n")
        .file("p/prova.toml", tasks)
}

/// What `dir` holds, by name.
fn left_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the temporary directory")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

#[test]
fn no_command_leaves_a_temporary_directory_behind() {
    let ws = ws();
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let tmpdir = tmp.path().to_string_lossy().into_owned();
    let commands: &[&[&str]] = &[
        &["run", "build", "--all"],
        &["show", "app#build"],
        &["why", "app#build"],
        &["show", "app#build", "--json"],
        &["run", "build", "--all", "--cache", "local:r"],
        &["run", "build", "--all", "--no-cache"],
        &["run", "build", "--all", "--dry-run"],
        &["run", "build", "--all", "--force", "--verify"],
        &["cache", "stats"],
    ];
    for args in commands {
        let out = ws.prova(args.iter().copied()).env("TMPDIR", &tmpdir).run();
        out.assert_code(0);
        let left = left_in(tmp.path());
        assert!(left.is_empty(), "`prova {}` left {left:?} in $TMPDIR", args.join(" "));
    }
}

/// A run killed outright (SIGKILL: nothing of it is dropped) leaves its private directory in
/// `$TMPDIR` — a `--no-cache` scratch store holds the blobs of everything the run executed; a
/// read-only open's staging, what it restored — and the next run that makes one removes it,
/// its process being gone, and leaves nothing of its own.
#[test]
fn a_killed_runs_temporary_directory_is_removed_by_the_next_run() {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            r#"[workspace]
projects = ["app"]

[tasks.build]
command = "mkdir -p dist && echo built > dist/out.txt && echo armed && sleep 300"
outputs = ["dist/**"]

[tasks.quick]
command = "echo quick"
"#,
        )
        .dir("app");
    // An index to open read-only.
    ws.prova(["run", "quick", "--all"]).run().assert_code(0);
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let tmpdir = tmp.path().to_string_lossy().into_owned();
    for (flags, kind) in
        [(&["--no-cache"][..], "prova-scratch-"), (&["--cache", "local:r"][..], "prova-readonly-")]
    {
        let mut args = vec!["run", "build", "--all", "--json"];
        args.extend(flags);
        let mut running = ws.prova(args).env("TMPDIR", &tmpdir).spawn();
        running.wait_for_lines("the task to be armed", 1, |l| l.contains(r#""text":"armed\n""#));
        running.signal(Signal::SIGKILL);
        drop(running.wait());
        let left = left_in(tmp.path());
        assert!(
            left.len() == 1 && left[0].starts_with(kind),
            "{flags:?}: the killed run should have left its {kind}… directory: {left:?}"
        );
        let mut args = vec!["run", "quick", "--all"];
        args.extend(flags);
        ws.prova(args).env("TMPDIR", &tmpdir).run().assert_code(0);
        let left = left_in(tmp.path());
        assert!(left.is_empty(), "{flags:?}: the next run left {left:?} in $TMPDIR");
    }
}

/// `/dev/shm` as prova sees it, bound to a fresh directory on the real one (a tmpfs, so a
/// re-run's shuffled roots still go there) that the test can read after prova exits.
struct PrivateShm {
    dir: tempfile::TempDir,
}

impl PrivateShm {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("prova-test-shm-")
            .tempdir_in("/dev/shm")
            .expect("a directory on /dev/shm");
        Self { dir }
    }

    /// Starts prova in its own mount namespace where `/dev/shm` is this directory: `unshare`
    /// and `sh` exec in place, so the pid the test signals is prova's.
    fn launcher(&self) -> Vec<String> {
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let mut l = vec!["unshare".to_owned()];
        // Not root: a user namespace (mapped to root) may mount.
        l.push(if root { "-m" } else { "-rm" }.to_owned());
        l.extend(
            ["--", "sh", "-c", r#"mount --bind "$0" /dev/shm && exec "$@""#].map(str::to_owned),
        );
        l.push(self.dir.path().display().to_string());
        l
    }

    /// Everything left under it, relative (directories end in `/`), but this user's roots
    /// directory itself (`prova-roots-<uid>`), which is kept — empty.
    fn litter(&self) -> Vec<String> {
        let top = self.dir.path();
        let mut left = Vec::new();
        let mut stack = vec![top.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("list the private /dev/shm").flatten() {
                let p = e.path();
                let rel = p.strip_prefix(top).unwrap_or(&p).display().to_string();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    if d != top || !rel.starts_with("prova-roots-") {
                        left.push(format!("{rel}/"));
                    }
                    stack.push(p);
                } else {
                    left.push(rel);
                }
            }
        }
        left.sort();
        left
    }
}

/// A directory holding a `bwrap` that cannot sandbox: first on `PATH`, it makes prova's
/// probe find no sandbox, so a re-run executes unsandboxed, where `/dev/shm` is the host's.
fn no_bwrap_path(dir: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let fake = dir.join("bwrap");
    std::fs::write(&fake, "#!/bin/sh\necho 'bwrap: disabled by the test' >&2\nexit 1\n")
        .expect("write the fake bwrap");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// A determinism re-run shifts the clock with libfaketime, which keeps a named semaphore and
/// a shared-memory segment in `/dev/shm` for the first process that loads it and removes them
/// only when that process exits — never when it execs, as `taskset`, `sh -c` and every shell
/// wrapper do. None may stay after the run: sandboxed, unsandboxed, through an `exec` chain,
/// or with a failing re-run.
#[test]
fn a_proof_leaves_nothing_in_dev_shm() {
    if prova_tests::libfaketime().is_none() {
        prova_tests::skip_for_missing("libfaketime is not installed (apt-get install faketime)");
        return;
    }
    let ws = project_p(
        r#"[tasks.plain]
command = "mkdir -p out && date > /dev/null && cat src/a.txt > out/a.txt"
inputs = ["src/a.txt"]
outputs = ["out/a.txt"]

[tasks.chain]
command = "mkdir -p out && exec sh -c 'exec sh -c \"date > /dev/null && echo y > out/y.txt\"'"
inputs = ["src/a.txt"]
outputs = ["out/y.txt"]

[tasks.background]
command = "mkdir -p out && (sh -c 'date > /dev/null' &) && echo done > out/fg.txt"
inputs = ["src/a.txt"]
outputs = ["out/fg.txt"]

[tasks.rerun_fails]
command = "mkdir -p out && test -z \"$FAKETIME\" && echo ok > out/ok.txt"
inputs = ["src/a.txt"]
outputs = ["out/ok.txt"]
"#,
    );
    let bin = tempfile::tempdir().expect("a directory for the fake bwrap");
    let unsandboxed = no_bwrap_path(bin.path());
    for (sandbox, path) in [("sandboxed", None), ("unsandboxed", Some(&unsandboxed))] {
        for (task, code) in [("plain", 0), ("chain", 0), ("background", 0), ("rerun_fails", 1)] {
            let shm = PrivateShm::new();
            let mut cmd = ws
                .prova(["run", task, "--all", "--force", "--verify", "--json"])
                .launcher(shm.launcher());
            if let Some(p) = path {
                cmd = cmd.env("PATH", p);
            }
            let out = cmd.run();
            out.assert_code(code);
            let v = &out.summary();
            assert!(
                out.stdout.contains(r#""what":"clock""#),
                "{sandbox} {task}: the re-run should have shifted the clock: {v}\n{out}"
            );
            let left = shm.litter();
            assert!(left.is_empty(), "{sandbox} {task}: left in /dev/shm: {left:?}\n{out}");
        }
    }
}

/// A local proof's first execution runs in a root on `/dev/shm` (thousands of small files
/// made and removed within seconds cost a disk more than the task: `prova_worker::shmroots`);
/// a finished one leaves nothing there, and one a killed run left is removed by the next
/// proof.
#[test]
fn a_proofs_first_root_is_on_dev_shm_and_a_killed_ones_goes_with_the_next_proof() {
    if !prova_tests::verify::sandbox_or_skip() {
        return;
    }
    let ws = project_p(
        r#"[tasks.hang]
command = "mkdir -p out && cat src/a.txt > out/a.txt && echo \"armed in $(pwd -P)\" && exec sleep 300"
inputs = ["src/a.txt"]
outputs = ["out/a.txt"]

[tasks.quick]
command = "mkdir -p out && echo \"ran in $(pwd -P)\" > out/where.txt"
inputs = ["src/a.txt"]
outputs = ["out/where.txt"]
"#,
    );
    let shm = PrivateShm::new();
    let mut running = ws
        .prova(["run", "hang", "--all", "--verify=inputs", "--json"])
        .launcher(shm.launcher())
        .spawn();
    running.wait_for_lines("the task to be armed", 1, |l| l.contains("armed in "));
    let armed = running.stdout_so_far().join("\n");
    assert!(armed.contains("armed in /dev/shm/prova-roots-"), "{armed}");
    running.signal(Signal::SIGKILL);
    drop(running.wait());
    let left = shm.litter();
    assert!(
        left.iter().any(|n| n.contains("/roots/p_hang-")),
        "the killed run should have left its root: {left:?}"
    );
    let out = ws
        .prova(["run", "quick", "--all", "--verify=inputs", "--json"])
        .launcher(shm.launcher())
        .run();
    out.assert_code(0);
    let at = ws.read("p/out/where.txt");
    assert!(at.starts_with("ran in /dev/shm/prova-roots-"), "{at}\n{out}");
    let left = shm.litter();
    assert!(left.is_empty(), "the next proof left {left:?} in /dev/shm\n{out}");
}

/// A run killed outright during a re-run leaves the clock's shared segment (nothing of it is
/// dropped); the next re-run on the machine removes it, its owner being gone.
#[test]
fn a_killed_reruns_clock_segment_is_removed_by_the_next_rerun() {
    if prova_tests::libfaketime().is_none() {
        prova_tests::skip_for_missing("libfaketime is not installed (apt-get install faketime)");
        return;
    }
    let marker = tempfile::tempdir().expect("a directory for the marker");
    let armed = marker.path().join("armed");
    let ws = project_p(&format!(
        r#"[tasks.hang]
command = "mkdir -p out && echo x > out/x.txt && if [ -n \"$FAKETIME\" ]; then echo $$ > {armed}.tmp && mv {armed}.tmp {armed} && exec sleep 300; fi"
inputs = ["src/a.txt"]
outputs = ["out/x.txt"]

[tasks.quick]
command = "mkdir -p out && echo q > out/q.txt"
inputs = ["src/a.txt"]
outputs = ["out/q.txt"]
"#,
        armed = armed.display()
    ));
    let bin = tempfile::tempdir().expect("a directory for the fake bwrap");
    let path = no_bwrap_path(bin.path());
    let shm = PrivateShm::new();
    let running = ws
        .prova(["run", "hang", "--all", "--verify", "--json"])
        .launcher(shm.launcher())
        .env("PATH", &path)
        .spawn();
    let deadline = std::time::Instant::now() + prova_tests::DEFAULT_TIMEOUT;
    while !armed.exists() {
        assert!(std::time::Instant::now() < deadline, "the re-run never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    running.signal(Signal::SIGKILL);
    drop(running.wait());
    // The task (its own process group) goes too, not to outlive the test.
    let task: Vec<i32> = prova_tests::read_pids(&armed);
    for pid in &task {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGKILL);
    }
    let _ = prova_tests::wait_all_gone(&task, prova_tests::GONE_TIMEOUT);
    let left = shm.litter();
    let segment = |prefix: &str| left.iter().any(|n| n.starts_with(prefix));
    assert!(
        segment("prova-faketime-") && segment("sem.prova-faketime-"),
        "the killed re-run should have left its clock segment: {left:?}"
    );
    ws.prova(["run", "quick", "--all", "--verify", "--json"])
        .launcher(shm.launcher())
        .env("PATH", &path)
        .run()
        .assert_code(0);
    let left = shm.litter();
    assert!(left.is_empty(), "the next re-run left {left:?} in /dev/shm");
}

/// A restore killed outright (SIGKILL, the OOM killer, a CI timeout) leaves its temporaries
/// in the workspace under prova's names: an entry beside the output it was replacing (in
/// the project's own directory for a root-level output) and a staging directory beside the
/// outputs. They are never a task's input — the next run's keys are those of a clean tree,
/// so it hits — and that run removes those whose prova is gone; a live prova's stay. With
/// and without git listing the files.
#[test]
fn what_a_killed_restore_left_is_no_input_and_the_next_run_removes_it() {
    for git in [false, true] {
        let ws = project_p(
            r#"[tasks.build]
command = "cat src/a.txt > out.txt && mkdir -p dist && cp out.txt dist/a.txt"
inputs = ["**/*", "!out.txt", "!dist/**"]
outputs = ["out.txt", "dist/**"]
"#,
        );
        if git {
            let ok = std::process::Command::new("git")
                .args(["init", "-q"])
                .current_dir(ws.root())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "git init");
        }
        let first = ws.prova(["run", "build", "--all", "--json"]).run();
        first.assert_code(0);
        assert_eq!(first.cache_of("p#build"), "saved", "{first}");
        let dead = prova_tests::dead_pid();
        let beside = format!("p/.out.txt.prova-restore-{dead}-0");
        let staging = format!("p/.prova-restore-{dead}-AbC123");
        let live = "p/.out.txt.prova-restore-1-0"; // init's: alive
        ws.write(&beside, "half a restore\n");
        ws.write(&format!("{staging}/dist/a.txt"), "staged\n");
        ws.write(live, "another prova's\n");
        let next = ws.prova(["run", "build", "--all", "--json"]).run();
        next.assert_code(0);
        assert!(
            next.cache_of("p#build").starts_with("hit"),
            "git {git}: the leftovers changed the key: {}\n{next}",
            next.cache_of("p#build")
        );
        assert!(!ws.exists(&beside) && !ws.exists(&staging), "git {git}: the gone prova's stay");
        assert!(ws.exists(live), "git {git}: a live prova's temporary was removed");
    }
}
