//! prova's integration harness: end-to-end tests that run the **real `prova` binary** on real
//! workspaces written into temporary directories.
//!
//! # Layout
//! - [`locate`]: [`prova_bin`], the path of the `prova` executable under test (built once per
//!   test process, see below).
//! - [`workspace`]: [`TempWorkspace`], a throw-away workspace: files written from strings or
//!   copied from `examples/`, FIFOs, reading back what tasks wrote.
//! - [`run`]: [`ProvaCmd`] (`prova -C <workspace> …` with a bounded timeout), [`Output`] (exit
//!   code, stdout, stderr, the parsed `--json` events and summary) and [`Running`] (a `prova`
//!   still running: its stdout line by line, signals).
//! - [`schema`]: a validator of the JSON Schema subset `schemas/events.json` uses, and
//!   [`schema::check_event`], which every `--json` line read through [`Output::events`] passes.
//! - [`procs`]: whether a process, or any member of a process group, is still alive.
//! - [`cluster`]: [`cluster::Cluster`], a farm on loopback: a real coordinator and N real
//!   workers as subprocesses (kill, restart), `prova run --remote` against it, `farm status`.
//! - [`verify`]: for the proof suites: one-project workspaces of pure and impure tasks, and
//!   readers for verdicts (`--json`, the `Verify:` line) and the ledger (`prova hermeticity`).
//! - [`netns`]: [`netns::NetFarm`], a farm on separate hosts (network namespaces on a bridge):
//!   stall or cut one host's link, tmpfs work dirs.
//! - [`flood`]: a bounded QUIC handshake flood (real client Initials, answered or not), sent
//!   from another namespaced host.
//! - [`inproc`]: [`inproc::InProcessFarm`], the same farm inside the test process: a
//!   coordinator and N workers as tasks of one runtime (stop and restart a worker).
//! - [`docs`]: the documentation as a test: every command block of `README.md` and
//!   `docs/*.md` run in a fresh workspace (info-string words: `no-run REASON`, `continue`,
//!   `daemons`, `in=…`, `exit=N`, `requires=TOOL`), links and anchors.
//! - [`cache`]: the local cache from the outside: keys and components (`prova show --json`),
//!   entry counts, and the file facts a restore must reproduce (bytes, modes, links, inodes).
//! - [`monorepo`]: hand-written npm-workspace repos (workspace links, per-package trees)
//!   for the installed-tree and sandboxed-output suites.
//! - [`tsmono`]: `examples/tsmono` copied with its `node_modules` installed, and readers of
//!   which of its tasks ran.
//! - [`hostile_reapi`]: a REAPI server (raw gRPC over HTTP/2) that declares and streams
//!   artifacts of any size.
//! - [`tscomposite`]: `examples/tscomposite` (composite `tsc -b` packages, per-package
//!   `node_modules`) copied with its trees installed, and the sha256 of its outputs.
//!
//! # How the binary is found
//! `env!("CARGO_BIN_EXE_prova")` only exists in integration tests of the package that owns the
//! binary (`prova-cli`), not in a package that depends on it — a dev-dependency links
//! `prova-cli`'s library, never its binaries (that would need the unstable artifact
//! dependencies). Nor does `cargo test --workspace` leave a `target/<profile>/prova` behind: it
//! builds `prova-cli`'s `main.rs` only as a unit-test harness (`deps/prova-<hash>`), because
//! that package has no integration tests of its own. Both were checked with cargo 1.95.
//!
//! So [`prova_bin`] builds the binary itself, once per test process (a `OnceLock`): it runs
//! `$CARGO build -p prova-cli --bin prova` with the profile and target directory of the
//! running test executable (`target[/<triple>]/<profile>/deps/<test>` → `--profile`,
//! `--target-dir`, `--target`), and uses `target[/<triple>]/<profile>/prova`. It always runs
//! the build — never "only if missing" — so a test cannot pass against a stale binary. The
//! nested cargo is safe: cargo releases the build-directory lock before it runs tests.
//! `prova-cli` is a dev-dependency of this package so the outer `cargo test` has already
//! compiled its library and every dependency; the nested build only compiles and links
//! `main.rs` (well under a second when nothing changed). Set `PROVA_BIN=/path/to/prova` to
//! test a prebuilt binary instead (e.g. a release build in CI); it is used as is.
//!
//! # Rules every test here follows
//! - Every `prova` run has a deadline ([`DEFAULT_TIMEOUT`], or [`ProvaCmd::timeout`]); on
//!   expiry the run's process group is SIGKILLed and the test fails with what prova printed.
//! - No sleeping to synchronise: tests wait for something observable — a line on prova's
//!   stdout (a pipe), a FIFO a task opens, a process that is gone — and every wait is bounded
//!   and says what it waited for. Wall times are never asserted.
//! - Each test has its own workspace; nothing is shared, so the default parallel test threads
//!   are fine.
//! - Processes are checked for liveness with `kill(pid, 0)` *and* `/proc/<pid>/stat`: a killed
//!   orphan is re-parented to PID 1, which in some containers never reaps it, and a zombie
//!   still answers `kill(pid, 0)`. A zombie counts as gone.

pub mod buildgrid;
pub mod cache;
pub mod cluster;
pub mod docs;
pub mod flood;
pub mod hostile_reapi;
pub mod http;
pub mod inproc;
pub mod liar;
pub mod locate;
pub mod monorepo;
pub mod netns;
pub mod procs;
pub mod reapi_farm;
pub mod run;
pub mod schema;
pub mod tscomposite;
pub mod tsmono;
pub mod verify;
pub mod workspace;

use std::time::Duration;

/// A suite that needs a tool this machine lacks (BuildGrid, node, chromium, promtool,
/// network namespaces): skipped with `why` printed — unless `PROVA_REQUIRE_TOOLS=1`, which
/// `.ci/run` sets after installing them all: there a skip would pass a suite that never ran,
/// so it fails instead.
#[track_caller]
pub fn skip_for_missing(why: &str) {
    assert!(
        !std::env::var("PROVA_REQUIRE_TOOLS").is_ok_and(|v| v == "1"),
        "{why}: PROVA_REQUIRE_TOOLS=1 (set by .ci/run) requires it"
    );
    eprintln!("skipped: {why}");
}

/// libfaketime itself (`LD_PRELOAD` it with `FAKETIME`), when installed. Not the `faketime`
/// wrapper: it keeps a named semaphore and a shared-memory segment per process, which a
/// SIGKILLed process leaves in `/dev/shm`; a later wrapper whose pid is reused then fails
/// ("sem_open: File exists").
pub fn libfaketime() -> Option<std::path::PathBuf> {
    let mut dirs = vec![std::path::PathBuf::from("/usr/lib/faketime")];
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        dirs.extend(rd.flatten().map(|e| e.path().join("faketime")));
    }
    dirs.into_iter().map(|d| d.join("libfaketime.so.1")).find(|p| p.is_file())
}

/// libfaketime for a process a test starts, its wall clock `offset` away (`-2d`): the
/// variables to set, with a semaphore and segment the test owns ([`prova_worker::clockshm`])
/// and removes when this is dropped — left to itself, the library makes a pair per process
/// that a killed daemon, or any process that execs, leaves in `/dev/shm` for good.
pub struct FakeClock {
    vars: Vec<(&'static str, String)>,
    _segment: prova_worker::clockshm::ClockSegment,
}

impl FakeClock {
    /// `None` when libfaketime is not installed.
    pub fn new(offset: &str) -> Option<Self> {
        let lib = libfaketime()?;
        let segment =
            prova_worker::clockshm::ClockSegment::create().expect("a libfaketime segment");
        let vars = vec![
            ("LD_PRELOAD", lib.to_string_lossy().into_owned()),
            ("FAKETIME", offset.to_owned()),
            // Only the wall clock: timeouts and sleeps keep working.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
            ("FAKETIME_SHARED", segment.shared_env()),
        ];
        Some(Self { vars, _segment: segment })
    }

    /// The variables, to set on a `Command`.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (*k, v.as_str()))
    }
}

pub use locate::{prova_bin, repo_root};
pub use procs::{
    alive_in_group, alive_under, blocked_on_a_lock, dead_pid, is_alive, read_pids, wait_all_gone,
    wait_group_empty, wait_none_under,
};
pub use run::{Output, ProvaCmd, Running};
pub use workspace::TempWorkspace;

/// Deadline of one `prova` run unless the test sets another: generous for a loaded CI machine,
/// since every workspace here finishes in well under a second when things work.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long processes that prova should have killed may take to disappear (the kill grace of
/// a task's process group is 5 s; this leaves room for a loaded machine).
pub const GONE_TIMEOUT: Duration = Duration::from_secs(20);
