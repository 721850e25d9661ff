//! Clocks that are off (issue 29): certificates are valid from an hour before they were issued,
//! so a machine whose clock is two days behind finds the coordinator's certificate "not valid
//! yet" (and one 400 days ahead finds it expired) — and a coordinator two days behind finds
//! everyone's so. Each side says that the clock
//! is the likely cause, naming the machine's time: a worker logs it and retries slowly (a
//! clock set right by NTP heals it without a restart), a client fails with it.
//!
//! The skewed processes run under libfaketime, preloaded (`FAKETIME=-2d`, wall clock only:
//! the monotonic clock is left alone, so timers behave).

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use prova_tests::cluster::{Cluster, POLL, Sandbox};
use prova_tests::{ProvaCmd, prova_bin};

/// Two days behind (libfaketime's `FAKETIME`), on the wall clock only.
const SKEW: &str = "-2d";

/// How long the worker may take to say why it cannot connect.
const SAY_WITHIN: Duration = Duration::from_secs(30);

fn faketime_or_skip() -> bool {
    match prova_tests::libfaketime() {
        Some(_) => true,
        None => {
            prova_tests::skip_for_missing("libfaketime is not installed (Debian package faketime)");
            false
        }
    }
}

/// libfaketime at `offset`, with a segment the test owns (see [`prova_tests::FakeClock`]).
fn fake_clock(offset: &str) -> prova_tests::FakeClock {
    prova_tests::FakeClock::new(offset).expect("libfaketime")
}

/// `prova args` run to completion in `dir` under libfaketime, its wall clock `offset` away
/// (`-2d`). Preloaded, not through the `faketime` wrapper, whose per-process semaphore a
/// reused pid found left over in `/dev/shm` ("sem_open: File exists": the run never started).
fn skewed_client(dir: &Path, args: Vec<String>, offset: &str) -> prova_tests::Output {
    let clock = fake_clock(offset);
    let mut cmd = ProvaCmd::new(dir, args);
    for (k, v) in clock.vars() {
        cmd = cmd.env(k, v);
    }
    cmd.run()
}

/// A daemon under libfaketime (two days behind), its stderr in `log`; killed (its whole
/// group) on drop, then its clock's segment removed.
struct Skewed {
    child: Child,
    _clock: prova_tests::FakeClock,
}

impl Skewed {
    fn spawn(dir: &Path, args: &[String], log: &Path) -> Self {
        let err = File::create(log).expect("a log file");
        let clock = fake_clock(SKEW);
        let child = Command::new(prova_bin())
            .args(args)
            .current_dir(dir)
            .envs(clock.vars())
            .env("PROVA_LOG", "info")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .process_group(0)
            .spawn()
            .expect("starting prova under faketime");
        Self { child, _clock: clock }
    }
}

impl Drop for Skewed {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Waits (bounded) until `log` holds `needle`; its text.
fn wait_for_log(log: &Path, needle: &str) -> String {
    let deadline = Instant::now() + SAY_WITHIN;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(POLL);
    }
}

#[test]
fn a_worker_whose_clock_is_behind_says_the_clock_is_the_likely_cause() {
    if !faketime_or_skip() {
        return;
    }
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::None).start();
    let certs = farm.client_certs("worker", "late");
    let work = tempfile::tempdir().expect("a work dir");
    let log = farm.root().join("logs").join("late.skewed");
    let args: Vec<String> = [
        "worker",
        "--join",
        farm.addr(),
        "--certs",
        &certs.to_string_lossy(),
        "--work-dir",
        &work.path().to_string_lossy(),
        "--sandbox=none",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let _worker = Skewed::spawn(farm.root(), &args, &log);
    let text = wait_for_log(&log, "check the clock");
    assert!(text.contains("not valid yet at this machine's clock"), "{text}");
    assert!(text.contains("it is likely behind"), "{text}");
    // Its clock is in the message: two days before the test's.
    let skewed_day = time_days_ago(2);
    assert!(text.contains(&skewed_day), "the message names the clock ({skewed_day})\n{text}");
    // It retries slowly: one attempt said, not one every two seconds.
    assert_eq!(text.matches("check the clock").count(), 1, "{text}");
    let status = farm.status();
    let ids: Vec<String> = prova_tests::cluster::workers_of(&status)
        .iter()
        .filter_map(|w| w["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids, ["w1"], "the late worker never joined: {status:#}");
}

#[test]
fn a_client_whose_clock_is_behind_fails_naming_the_clock() {
    if !faketime_or_skip() {
        return;
    }
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::None).start();
    let mut args = vec!["farm".to_owned(), "status".to_owned()];
    args.extend(farm.remote_args(&farm.ci_certs()));
    let out = skewed_client(farm.root(), args, SKEW);
    assert_ne!(out.code(), Some(0), "{out}");
    out.assert_stderr_contains("not valid yet at this machine's clock");
    out.assert_stderr_contains("check the clock (NTP)");
    // A clock far ahead (past the certificate's year) reads it as expired: said too.
    let mut args = vec!["farm".to_owned(), "status".to_owned()];
    args.extend(farm.remote_args(&farm.ci_certs()));
    let out = skewed_client(farm.root(), args, "+400d");
    assert_ne!(out.code(), Some(0), "{out}");
    out.assert_stderr_contains("has expired at this machine's clock");
    out.assert_stderr_contains("if the clock is ahead");
}

#[test]
fn a_coordinator_whose_clock_is_behind_is_named_by_its_peers() {
    if !faketime_or_skip() {
        return;
    }
    // The cluster's certificates and a coordinator of its own, two days behind.
    let farm = Cluster::builder().workers(0).sandbox(Sandbox::None).start();
    let cache = tempfile::tempdir().expect("a cache dir");
    let log = farm.root().join("logs").join("late-coordinator.skewed");
    let args: Vec<String> = vec![
        "coordinator".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--certs".into(),
        farm.certs_dir().join("coordinator").to_string_lossy().into_owned(),
        "--cache-dir".into(),
        cache.path().to_string_lossy().into_owned(),
    ];
    let mut late = Skewed::spawn(farm.root(), &args, &log);
    let mut first = String::new();
    let stdout = late.child.stdout.take().expect("piped");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut first)
        .expect("the coordinator's first line");
    let addr = first
        .strip_prefix("prova coordinator listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{first:?}"))
        .to_owned();
    // A client with a good clock finds the coordinator's certificate valid; the coordinator
    // finds the client's not valid yet at its clock and says so with a TLS alert, which the
    // client names.
    let out = ProvaCmd::new(
        farm.root(),
        ["farm", "status", "--remote", &addr, "--certs", &farm.ci_certs().to_string_lossy()],
    )
    .run();
    assert_ne!(out.code(), Some(0), "{out}");
    out.assert_stderr_contains("not valid yet at its own clock");
    out.assert_stderr_contains("NTP");
    let text = wait_for_log(&log, "check this machine's clock");
    assert!(text.contains("at this coordinator's clock"), "the coordinator's log\n{text}");
}

/// The UTC date `n` days before now, as `YYYY-MM-DD`.
fn time_days_ago(n: i64) -> String {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("{n} days ago"), "+%Y-%m-%d"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
