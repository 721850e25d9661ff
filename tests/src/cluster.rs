//! A farm on loopback for end-to-end tests: a real `prova coordinator` and N real `prova
//! worker` **subprocesses**, each in its own process group, sharing one temporary directory
//! (certificates, the farm cache, each worker's work dir, the daemons' logs).
//!
//! ```no_run
//! use prova_tests::{TempWorkspace, cluster::Cluster};
//! let mut farm = Cluster::start(2);             // certs, coordinator on 127.0.0.1:0, w1, w2
//! let ws = TempWorkspace::new();                // … write a workspace …
//! farm.run(&ws, ["build", "--all", "--json"]).assert_code(0); // prova run … --remote --certs <ci>
//! farm.kill_worker(0);                          // SIGKILL w1
//! farm.restart_worker(0);                       // w1 again: same name, work dir and slots
//! farm.restart_coordinator();                   // SIGTERM, then a new one on the same port
//! ```
//!
//! # How it is put together
//! - **Certificates** come from the binary under test: `prova certs init <dir>/certs`, one
//!   `prova certs issue --role worker` per worker and a `ci` bundle for [`Cluster::run`];
//!   [`Cluster::client_certs`] issues more (`client`, `admin`, other `ci` names).
//! - **The coordinator** listens on `127.0.0.1:0`; its address is parsed from its first
//!   stdout line (`prova coordinator listening on ADDR …`), never assumed. Extra flags
//!   ([`ClusterBuilder::coordinator_args`], e.g. `--trust proven`) go to every start of it.
//! - **Daemons run in the cluster root** (their working directory), so a relative path they
//!   are given resolves there.
//! - **Workers** are started with `--join` that address, their own `--work-dir` (absolute, or
//!   relative to the cluster root with [`ClusterBuilder::relative_work_dirs`]), `--slots`,
//!   `--sandbox`, and one extra label, `harness-start=<n>` (which start of that worker this
//!   is). Placement never looks at labels a task does not ask for (a task's `labels`), so
//!   the label only serves the harness: after a (re)start it waits until
//!   `prova farm status --json` lists the worker *with its current start number* — an old,
//!   killed session of the same name that the coordinator has not noticed yet does not count.
//! - **Readiness** is always observed, never slept for: the daemon's first stdout line (a
//!   pipe), then `farm status` polled with a deadline ([`READY_TIMEOUT`]).
//! - **Logs**: each daemon's stderr (with `PROVA_LOG=info`) goes to `<dir>/logs/<name>.<n>.err`
//!   ([`Cluster::worker_log`], [`Cluster::coordinator_log`]); panics include them.
//! - **Teardown** (drop): every daemon's process group is SIGKILLed and reaped, then any
//!   process still running with its working directory under the cluster's directory (a task
//!   of a `--sandbox=none` worker that outlived its SIGKILLed worker) is SIGKILLed too. Tasks
//!   under bubblewrap die with their worker (`--die-with-parent`).
//!
//! # Restarting the coordinator
//! [`Cluster::restart_coordinator`] stops it with SIGTERM — it closes every QUIC connection
//! on the way out, so workers notice at once and redial (with their 250 ms … 2 s backoff) —
//! and binds the new one to **the same port** with the same `--cache-dir`. UDP has no
//! TIME_WAIT, so the port is free as soon as the old process is gone; should another process
//! have taken it meanwhile, the harness falls back to a fresh port and restarts every worker
//! with the new `--join` (the test still gets a working farm, and `addr()` changes). A
//! coordinator that is SIGKILLed instead ([`Cluster::kill_coordinator`]) closes nothing: its
//! workers notice within a few seconds: their closed-port probe (see
//! `prova_protocol::transport::liveness`) or, once the new coordinator listens, its stateless
//! reset (their idle timeout is the 30 s pause tolerance).
//! [`Cluster::kill_coordinator_expecting_rejoin_within`] bounds how long they may take.
//!
//! # What a SIGKILLed worker looks like to the coordinator
//! Nothing, at first: QUIC runs over UDP and a killed process sends no `CONNECTION_CLOSE`
//! (and quinn ignores ICMP port-unreachable). The coordinator finds out when the worker's
//! leases expire without heartbeats (`LEASE_TTL`, 15 s), when the connection idles out
//! (30 s), or — at once — when a worker of the same name registers again
//! ([`Cluster::restart_worker`]) without the leases it held.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tempfile::TempDir;

use crate::procs::alive_under;
use crate::prova_bin;
use crate::run::{Output, ProvaCmd};
use crate::workspace::TempWorkspace;

/// How long a daemon may take to print its first line, and the farm to show a (re)started
/// worker: far above what loopback needs, for a loaded CI machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Between two looks at `farm status` (or a file) while waiting for something.
pub const POLL: Duration = Duration::from_millis(50);

/// How long a daemon may take to exit after SIGTERM before it is SIGKILLed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker's sandbox (`prova worker --sandbox`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sandbox {
    /// Tasks run under bubblewrap (`--sandbox=bwrap`, the default).
    Bwrap,
    /// Tasks run unsandboxed in their exec root (`--sandbox=none`).
    None,
}

impl Sandbox {
    fn flag(self) -> &'static str {
        match self {
            Self::Bwrap => "--sandbox=bwrap",
            Self::None => "--sandbox=none",
        }
    }
}

/// How a worker is started.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// Its certificate's name (`w1`, `w2`, …): its id on the farm.
    pub name: String,
    /// `--slots`.
    pub slots: u32,
    /// `--sandbox`.
    pub sandbox: Sandbox,
    /// Extra `--label KEY=VALUE`s.
    pub labels: BTreeMap<String, String>,
}

/// Builds a [`Cluster`]: how many workers, their slots and sandbox, how many of them start
/// with it, how their work dirs are given, and extra coordinator flags.
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    workers: usize,
    slots: u32,
    sandbox: Sandbox,
    started: Option<usize>,
    options: ClusterOptions,
}

/// Cluster-wide settings that outlive a restart of a daemon.
#[derive(Clone, Debug, Default)]
struct ClusterOptions {
    /// Extra flags of every start of the coordinator (e.g. `--trust proven`).
    coordinator_args: Vec<String>,
    /// Pass each worker's `--work-dir` relative to the daemons' working directory (the
    /// cluster root): `workers/<name>`.
    relative_work_dirs: bool,
    /// Variables set in every worker's own environment (what the worker process has, not
    /// what a client asks for).
    worker_env: Vec<(String, String)>,
    /// Extra flags and own-environment variables of one worker (by index), on every start.
    per_worker: BTreeMap<usize, WorkerExtras>,
    /// Every worker's exec roots in its work dir (`--exec-roots work-dir`).
    roots_in_work_dirs: bool,
}

/// One worker's extra flags and own-environment variables.
type WorkerExtras = (Vec<String>, Vec<(String, String)>);

impl ClusterBuilder {
    /// Number of workers (`w1` … `wN`); default 2.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// `--slots` of every worker; default 2.
    pub fn slots(mut self, n: u32) -> Self {
        self.slots = n;
        self
    }

    /// `--sandbox` of every worker; default bubblewrap.
    pub fn sandbox(mut self, s: Sandbox) -> Self {
        self.sandbox = s;
        self
    }

    /// Start only the first `n` workers with the cluster; the others get their certificates
    /// and wait for [`Cluster::start_worker`]. Default: all of them.
    pub fn started(mut self, n: usize) -> Self {
        self.started = Some(n);
        self
    }

    /// Extra flags for the coordinator, on every start of it (e.g. `["--trust", "proven"]`).
    pub fn coordinator_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.options.coordinator_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Give every worker its `--work-dir` as a path relative to its working directory (the
    /// cluster root, see [`Cluster::root`]): `workers/<name>` instead of the absolute path.
    /// [`Cluster::work_dir`] still returns the absolute path.
    pub fn relative_work_dirs(mut self) -> Self {
        self.options.relative_work_dirs = true;
        self
    }

    /// Every worker makes its exec roots in its work dir (`--exec-roots work-dir`), not on
    /// `/dev/shm`: for a test that tells workers apart by the paths tasks ran in, or fills a
    /// worker's work dir.
    pub fn roots_in_work_dirs(mut self) -> Self {
        self.options.roots_in_work_dirs = true;
        self
    }

    /// Sets `name=value` in every worker's own process environment, on every start of it.
    pub fn worker_env(mut self, name: &str, value: &str) -> Self {
        self.options.worker_env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Extra flags of worker `i` (0-based), on every start of it (e.g. `--min-free-disk`).
    pub fn worker_args<I, S>(mut self, i: usize, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let slot = self.options.per_worker.entry(i).or_default();
        slot.0.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets `name=value` in worker `i`'s own environment only (after the cluster-wide ones).
    pub fn worker_env_of(mut self, i: usize, name: &str, value: &str) -> Self {
        let slot = self.options.per_worker.entry(i).or_default();
        slot.1.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Creates the certificates, starts the coordinator and the workers, and waits until
    /// `farm status` lists every started worker.
    pub fn start(self) -> Cluster {
        let specs = (1..=self.workers)
            .map(|i| WorkerSpec {
                name: format!("w{i}"),
                slots: self.slots,
                sandbox: self.sandbox,
                labels: BTreeMap::new(),
            })
            .collect();
        Cluster::assemble(specs, self.started.unwrap_or(self.workers), self.options)
    }
}

/// A running daemon: its process (group leader), its stdout lines, its stderr log.
struct Daemon {
    what: String,
    child: Child,
    pid: i32,
    lines: Receiver<String>,
    log: PathBuf,
}

impl Daemon {
    /// Starts `prova args…` in its own process group (stdin closed, stdout piped, stderr to
    /// `log`) and waits for its first stdout line, which it returns; `Err` (with its log) when
    /// it exits or stays silent instead.
    fn spawn(
        what: &str,
        dir: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Result<(Self, String), String> {
        let err = File::create(log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let mut child = Command::new(prova_bin())
            .args(args)
            .current_dir(dir)
            .env("PROVA_LOG", "info")
            .env_remove("RUST_LOG")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        let pid = i32::try_from(child.id()).expect("pid fits in i32");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut d = Self { what: what.to_owned(), child, pid, lines, log: log.to_owned() };
        match d.lines.recv_timeout(READY_TIMEOUT) {
            Ok(line) => Ok((d, line)),
            Err(RecvTimeoutError::Timeout) => {
                d.kill();
                Err(format!("{what} printed nothing within {READY_TIMEOUT:?}\n{}", d.log_text()))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = d.reap(READY_TIMEOUT);
                Err(format!("{what} exited ({status}) before it was ready\n{}", d.log_text()))
            }
        }
    }

    fn log_text(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        format!("--- {} stderr ({})\n{text}", self.what, self.log.display())
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILLs the process group and reaps the leader.
    fn kill(&mut self) {
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        self.reap(STOP_TIMEOUT);
    }

    /// SIGTERM, then waits for the exit (SIGKILL after [`STOP_TIMEOUT`]).
    fn stop(&mut self) {
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !self.alive() {
                // Its group may still hold helpers; nothing of a daemon should outlive it.
                let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
                return;
            }
            std::thread::sleep(POLL);
        }
        self.kill();
    }

    /// Waits (bounded) for the leader to exit; returns how it ended.
    fn reap(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                Ok(None) => return "still running".to_owned(),
                Err(e) => return format!("wait failed: {e}"),
            }
        }
    }
}

struct WorkerProc {
    spec: WorkerSpec,
    daemon: Option<Daemon>,
    starts: u32,
}

/// A coordinator and its workers, as subprocesses; everything is killed on drop.
pub struct Cluster {
    _dir: TempDir,
    root: PathBuf,
    coordinator: Option<Daemon>,
    coordinator_starts: u32,
    addr: String,
    /// The HTTP listener's address (`--http`), from the coordinator's first line.
    http: Option<String>,
    workers: Vec<WorkerProc>,
    options: ClusterOptions,
}

impl Cluster {
    /// `n` workers (`w1` … `wN`), 2 slots each, under bubblewrap; see [`Cluster::builder`].
    pub fn start(n: usize) -> Self {
        Self::builder().workers(n).start()
    }

    /// A builder: workers, slots, sandbox.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder {
            workers: 2,
            slots: 2,
            sandbox: Sandbox::Bwrap,
            started: None,
            options: ClusterOptions::default(),
        }
    }

    /// A cluster with exactly these workers.
    pub fn with_workers(specs: Vec<WorkerSpec>) -> Self {
        let n = specs.len();
        Self::assemble(specs, n, ClusterOptions::default())
    }

    /// Certificates for every worker in `specs`; the first `started` of them running.
    fn assemble(specs: Vec<WorkerSpec>, started: usize, options: ClusterOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("prova-farm-")
            .tempdir()
            .expect("creating the cluster's temporary directory");
        let root = dir.path().canonicalize().expect("canonicalising the cluster directory");
        for sub in ["logs", "workers"] {
            std::fs::create_dir_all(root.join(sub)).expect("creating the cluster layout");
        }
        let mut c = Self {
            _dir: dir,
            root,
            coordinator: None,
            coordinator_starts: 0,
            addr: String::new(),
            http: None,
            workers: Vec::new(),
            options,
        };
        let certs = c.certs_dir().to_string_lossy().into_owned();
        c.prova_ok(&["certs", "init", &certs]);
        c.prova_ok(&["certs", "issue", &certs, "--role", "ci", "--name", "ci"]);
        for spec in &specs {
            c.prova_ok(&["certs", "issue", &certs, "--role", "worker", "--name", &spec.name]);
        }
        c.start_coordinator(None).unwrap_or_else(|e| panic!("{e}"));
        c.workers =
            specs.into_iter().map(|spec| WorkerProc { spec, daemon: None, starts: 0 }).collect();
        for i in 0..started.min(c.workers.len()) {
            c.spawn_worker(i);
        }
        c.wait_for_workers();
        c
    }

    // ----- where things are -------------------------------------------------------------

    /// The cluster's directory (certificates, farm cache, work dirs, logs).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The coordinator's `HOST:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The HTTP listener's `HOST:PORT` (`prova coordinator --http`), when it has one.
    pub fn http_addr(&self) -> Option<&str> {
        self.http.as_deref()
    }

    /// The farm cache (`prova coordinator --cache-dir`).
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("farm-cache")
    }

    /// The certificate directory (`prova certs init`): `ca/`, `coordinator/`, one per bundle.
    pub fn certs_dir(&self) -> PathBuf {
        self.root.join("certs")
    }

    /// The `ci` bundle [`Cluster::run`] uses.
    pub fn ci_certs(&self) -> PathBuf {
        self.certs_dir().join("ci")
    }

    /// A bundle for `role` (`ci`, `client`, `admin`, `worker`) named `name`, issued on first
    /// use by `prova certs issue`.
    pub fn client_certs(&self, role: &str, name: &str) -> PathBuf {
        let dir = self.certs_dir().join(name);
        if !dir.exists() {
            let certs = self.certs_dir().to_string_lossy().into_owned();
            self.prova_ok(&["certs", "issue", &certs, "--role", role, "--name", name]);
        }
        dir
    }

    /// Worker `i`'s name (`w{i+1}` unless given otherwise).
    pub fn worker_name(&self, i: usize) -> &str {
        &self.workers[i].spec.name
    }

    /// The index of the worker named `name`.
    #[track_caller]
    pub fn worker_index(&self, name: &str) -> usize {
        self.workers
            .iter()
            .position(|w| w.spec.name == name)
            .unwrap_or_else(|| panic!("no worker named {name:?}"))
    }

    /// Worker `i`'s `--work-dir` (blob cache, exec roots).
    pub fn work_dir(&self, i: usize) -> PathBuf {
        self.root.join("workers").join(&self.workers[i].spec.name)
    }

    /// Worker `i`'s pid (also its process group), `None` when it is not running.
    pub fn worker_pid(&self, i: usize) -> Option<i32> {
        self.workers[i].daemon.as_ref().map(|d| d.pid)
    }

    /// The coordinator's pid, `None` when it is not running.
    pub fn coordinator_pid(&self) -> Option<i32> {
        self.coordinator.as_ref().map(|d| d.pid)
    }

    /// Everything worker `i` logged on stderr, every start of it.
    pub fn worker_log(&self, i: usize) -> String {
        let name = &self.workers[i].spec.name;
        logs_of(&self.root.join("logs"), name)
    }

    /// Everything the coordinator logged on stderr, every start of it.
    pub fn coordinator_log(&self) -> String {
        logs_of(&self.root.join("logs"), "coordinator")
    }

    /// Polls the coordinator's log until it holds `needle`, for a line the coordinator writes
    /// after its peer has already seen the outcome (a refused handshake is felt by the client
    /// before the server's task logs it); panics after `timeout` with every log.
    #[track_caller]
    pub fn wait_for_coordinator_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.coordinator_log();
            if log.contains(needle) {
                return log;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for `{needle}` in the coordinator's log\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Every daemon log, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = format!("=== coordinator\n{}", self.coordinator_log());
        for i in 0..self.workers.len() {
            out.push_str(&format!("=== {}\n{}", self.worker_name(i), self.worker_log(i)));
        }
        out
    }

    // ----- running prova against the farm ------------------------------------------------

    /// `--remote ADDR --certs DIR`.
    pub fn remote_args(&self, certs: &Path) -> Vec<String> {
        vec![
            "--remote".to_owned(),
            self.addr.clone(),
            "--certs".to_owned(),
            certs.to_string_lossy().into_owned(),
        ]
    }

    /// `prova -C ws run args… --remote ADDR --certs certs`, not started yet.
    pub fn run_cmd<I, S>(&self, ws: &TempWorkspace, certs: &Path, args: I) -> ProvaCmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut all = vec!["run".to_owned()];
        all.extend(args.into_iter().map(Into::into));
        // Arguments after `--` go to the tasks: the remote flags must come before them.
        let at = all.iter().position(|a| a == "--").unwrap_or(all.len());
        let tail = all.split_off(at);
        all.extend(self.remote_args(certs));
        all.extend(tail);
        ws.prova(all)
    }

    /// `prova run args…` on the farm with the `ci` bundle, to completion.
    pub fn run<I, S>(&self, ws: &TempWorkspace, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.run_cmd(ws, &self.ci_certs(), args).run()
    }

    /// `prova run args…` on the farm with the bundle in `certs`, to completion.
    pub fn run_as<I, S>(&self, ws: &TempWorkspace, certs: &Path, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.run_cmd(ws, certs, args).run()
    }

    /// `prova farm status --json` (with the `ci` bundle), parsed.
    #[track_caller]
    pub fn status(&self) -> Value {
        let mut args = vec!["farm".to_owned(), "status".to_owned(), "--json".to_owned()];
        args.extend(self.remote_args(&self.ci_certs()));
        let out = ProvaCmd::new(&self.root, args).run();
        assert_eq!(out.code(), Some(0), "farm status failed\n{out}\n{}", self.logs());
        serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("farm status is not JSON: {e}\n{out}"))
    }

    /// `prova farm status` (with the `ci` bundle), in its text form.
    #[track_caller]
    pub fn status_text(&self) -> String {
        let mut args = vec!["farm".to_owned(), "status".to_owned()];
        args.extend(self.remote_args(&self.ci_certs()));
        let out = ProvaCmd::new(&self.root, args).run();
        assert_eq!(out.code(), Some(0), "farm status failed\n{out}\n{}", self.logs());
        out.stdout
    }

    /// Polls `farm status` until `pred` holds (returning that status); panics, naming
    /// `what`, after `timeout`.
    #[track_caller]
    pub fn wait_for_status(
        &self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.status();
            if pred(&s) {
                return s;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last status:\n{s:#}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// `prova hermeticity --json` against the farm (with the `ci` bundle): the run (exit 1
    /// when a key disagrees) and the parsed report of the farm's ledger.
    #[track_caller]
    pub fn hermeticity(&self) -> (Output, Value) {
        let out = self.hermeticity_cmd(true);
        let report = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| {
            panic!("`prova hermeticity --remote … --json` is not JSON: {e}\n{out}")
        });
        (out, report)
    }

    /// `prova hermeticity` against the farm, in its text form.
    pub fn hermeticity_text(&self) -> Output {
        self.hermeticity_cmd(false)
    }

    fn hermeticity_cmd(&self, json: bool) -> Output {
        let mut args = vec!["hermeticity".to_owned()];
        if json {
            args.push("--json".to_owned());
        }
        args.extend(self.remote_args(&self.ci_certs()));
        ProvaCmd::new(&self.root, args).run()
    }

    /// Waits until `farm status` shows `task` running; returns the index of the worker
    /// running it.
    #[track_caller]
    pub fn wait_running(&self, task: &str, timeout: Duration) -> usize {
        let s = self.wait_for_status(&format!("{task} to be running"), timeout, |s| {
            running_on(s, task).is_some()
        });
        let name = running_on(&s, task).expect("just seen running");
        self.worker_index(&name)
    }

    /// `prova cache stats --cache-dir <farm cache> --json`: entries by namespace, blobs, ….
    #[track_caller]
    pub fn farm_cache_stats(&self) -> Value {
        let cache = self.cache_dir().to_string_lossy().into_owned();
        let out =
            ProvaCmd::new(&self.root, ["cache", "stats", "--cache-dir", &cache, "--json"]).run();
        assert_eq!(out.code(), Some(0), "cache stats failed\n{out}");
        serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("cache stats is not JSON: {e}\n{out}"))
    }

    /// Entries in the farm cache, every namespace together.
    #[track_caller]
    pub fn farm_entries(&self) -> u64 {
        let s = self.farm_cache_stats();
        s["entries"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
    }

    // ----- killing and restarting --------------------------------------------------------

    /// Whether worker `i`'s process is running.
    pub fn worker_alive(&mut self, i: usize) -> bool {
        self.workers[i].daemon.as_mut().is_some_and(Daemon::alive)
    }

    /// SIGKILLs worker `i` (its process group: the worker; its tasks have groups of their
    /// own) and reaps it. The coordinator is not told.
    pub fn kill_worker(&mut self, i: usize) {
        if let Some(mut d) = self.workers[i].daemon.take() {
            d.kill();
        }
    }

    /// Stops worker `i` with SIGTERM (it drains: tells the farm it is leaving, closes its
    /// connection) and waits for it to exit.
    pub fn terminate_worker(&mut self, i: usize) {
        if let Some(mut d) = self.workers[i].daemon.take() {
            d.stop();
        }
    }

    /// Starts worker `i` again (SIGKILLing it first if it runs): same name, certificate,
    /// work dir, slots and sandbox; waits until the farm lists this start of it.
    pub fn restart_worker(&mut self, i: usize) {
        self.kill_worker(i);
        self.spawn_worker(i);
        self.wait_for_workers();
    }

    /// Starts worker `i`, which is not running (left out by [`ClusterBuilder::started`], or
    /// killed); waits until the farm lists it. The same as [`Cluster::restart_worker`].
    pub fn start_worker(&mut self, i: usize) {
        self.restart_worker(i);
    }

    /// Reaps worker `i` if it died on its own; `true` if it did (then it is not running).
    pub fn reap_if_dead(&mut self, i: usize) -> bool {
        let dead = self.workers[i].daemon.as_mut().is_some_and(|d| !d.alive());
        if dead {
            self.workers[i].daemon = None;
        }
        dead
    }

    /// Replaces the extra flags every later start of worker `i` gets, e.g. a path that
    /// exists only once the farm's directory does.
    pub fn set_worker_args<I, S>(&mut self, i: usize, args: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.options.per_worker.entry(i).or_default().0 =
            args.into_iter().map(Into::into).collect();
    }

    /// Replaces the arguments every later start of the coordinator gets (after the
    /// listen/cache ones), e.g. to restart a farm with `--trust proven`.
    pub fn set_coordinator_args<I, S>(&mut self, args: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.options.coordinator_args = args.into_iter().map(Into::into).collect();
    }

    /// Stops the coordinator gracefully (SIGTERM: it closes its connections, so workers redial
    /// at once) and starts a new one with the same cache dir on the same port (see the module
    /// docs for the fallback); waits until every running worker is back.
    pub fn restart_coordinator(&mut self) {
        if let Some(mut d) = self.coordinator.take() {
            d.stop();
        }
        self.start_again();
    }

    /// SIGKILLs the coordinator and starts a new one (same cache dir and port); its workers
    /// notice within seconds (a probe of the closed port, then the new one's stateless reset)
    /// and redial; this waits up to 60 s for them.
    pub fn kill_coordinator(&mut self) {
        if let Some(mut d) = self.coordinator.take() {
            d.kill();
        }
        self.start_again();
    }

    /// SIGKILLs the coordinator and leaves it down: a farm whose coordinator is gone.
    pub fn stop_coordinator(&mut self) {
        if let Some(mut d) = self.coordinator.take() {
            d.kill();
        }
    }

    /// Stops the coordinator with SIGTERM (it closes its connections on the way out) and
    /// leaves it down.
    pub fn terminate_coordinator(&mut self) {
        if let Some(mut d) = self.coordinator.take() {
            d.stop();
        }
    }

    /// SIGKILLs the coordinator, starts a new one (same cache dir and port) and waits at most
    /// `timeout` for every running worker to register with it again: how fast workers
    /// notice a crashed coordinator and rejoin its successor. Panics past `timeout`.
    #[track_caller]
    pub fn kill_coordinator_expecting_rejoin_within(&mut self, timeout: Duration) {
        if let Some(mut d) = self.coordinator.take() {
            d.kill();
        }
        self.start_again_within(timeout);
    }

    fn start_again(&mut self) {
        self.start_again_within(Duration::from_secs(60));
    }

    #[track_caller]
    fn start_again_within(&mut self, rejoin: Duration) {
        let port = self.addr.clone();
        // UDP has no TIME_WAIT: the port is free once the old process is gone. Try it a few
        // times (something else may hold it for a moment), then give up on it.
        let mut last = String::new();
        for _ in 0..3 {
            match self.start_coordinator(Some(&port)) {
                Ok(()) => {
                    self.wait_for_workers_within(rejoin);
                    return;
                }
                Err(e) => last = e,
            }
        }
        eprintln!("cluster: port {port} could not be reused ({last}); moving to a new port");
        self.start_coordinator(None).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..self.workers.len() {
            if self.workers[i].daemon.is_some() {
                self.kill_worker(i);
                self.spawn_worker(i);
            }
        }
        self.wait_for_workers();
    }

    // ----- internals ---------------------------------------------------------------------

    /// `prova args…` in the cluster dir; panics unless it exits 0.
    fn prova_ok(&self, args: &[&str]) -> Output {
        let out = ProvaCmd::new(&self.root, args.iter().copied()).run();
        assert_eq!(out.code(), Some(0), "`prova {}` failed\n{out}", args.join(" "));
        out
    }

    /// Starts a coordinator on `listen` (default `127.0.0.1:0`); `Err` when it exits before
    /// printing its address (e.g. the port is taken).
    fn start_coordinator(&mut self, listen: Option<&str>) -> Result<(), String> {
        self.coordinator_starts += 1;
        let n = self.coordinator_starts;
        let log = self.root.join("logs").join(format!("coordinator.{n}.err"));
        let mut args: Vec<String> = vec![
            "coordinator".into(),
            "--listen".into(),
            listen.unwrap_or("127.0.0.1:0").into(),
            "--certs".into(),
            self.certs_dir().join("coordinator").to_string_lossy().into_owned(),
            "--cache-dir".into(),
            self.cache_dir().to_string_lossy().into_owned(),
        ];
        args.extend(self.options.coordinator_args.iter().cloned());
        let (daemon, first) = Daemon::spawn("the coordinator", &self.root, &args, &[], &log)?;
        // `prova coordinator listening on 127.0.0.1:PORT (cache …)`
        let addr = first
            .strip_prefix("prova coordinator listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line of the coordinator: {first:?}"))
            .to_owned();
        self.addr = addr;
        // `…, http http://127.0.0.1:PORT/)` with `--http`.
        self.http = first
            .split_once(", http http://")
            .and_then(|(_, rest)| rest.split('/').next())
            .map(str::to_owned);
        self.coordinator = Some(daemon);
        Ok(())
    }

    fn spawn_worker(&mut self, i: usize) {
        // The daemons run in the cluster root, so `workers/<name>` names the same directory.
        let work_dir = if self.options.relative_work_dirs {
            Path::new("workers").join(&self.workers[i].spec.name)
        } else {
            self.work_dir(i)
        };
        let w = &mut self.workers[i];
        w.starts += 1;
        let name = w.spec.name.clone();
        let log = self.root.join("logs").join(format!("{name}.{}.err", w.starts));
        let mut args: Vec<String> = vec![
            "worker".into(),
            "--join".into(),
            self.addr.clone(),
            "--certs".into(),
            self.root.join("certs").join(&name).to_string_lossy().into_owned(),
            "--slots".into(),
            w.spec.slots.to_string(),
            "--work-dir".into(),
            work_dir.to_string_lossy().into_owned(),
            w.spec.sandbox.flag().into(),
            "--label".into(),
            format!("harness-start={}", w.starts),
        ];
        for (k, v) in &w.spec.labels {
            args.extend(["--label".to_owned(), format!("{k}={v}")]);
        }
        if self.options.roots_in_work_dirs {
            args.extend(["--exec-roots".to_owned(), "work-dir".to_owned()]);
        }
        let mut env = self.options.worker_env.clone();
        if let Some((extra, own)) = self.options.per_worker.get(&i) {
            args.extend(extra.iter().cloned());
            env.extend(own.iter().cloned());
        }
        let (daemon, first) =
            Daemon::spawn(&format!("worker {name}"), &self.root, &args, &env, &log)
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            first.starts_with(&format!("prova worker {name} joining ")),
            "unexpected first line of worker {name}: {first:?}"
        );
        self.workers[i].daemon = Some(daemon);
    }

    /// Waits until `farm status` lists every running worker with its current start number.
    fn wait_for_workers(&self) {
        self.wait_for_workers_within(READY_TIMEOUT);
    }

    fn wait_for_workers_within(&self, timeout: Duration) {
        let want: Vec<(String, String)> = self
            .workers
            .iter()
            .filter(|w| w.daemon.is_some())
            .map(|w| (w.spec.name.clone(), w.starts.to_string()))
            .collect();
        self.wait_for_status("every worker to register", timeout, |s| {
            want.iter().all(|(name, start)| {
                workers_of(s).iter().any(|w| {
                    w["id"] == name.as_str() && w["labels"]["harness-start"] == start.as_str()
                })
            })
        });
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for w in &mut self.workers {
            if let Some(mut d) = w.daemon.take() {
                d.kill();
            }
        }
        if let Some(mut d) = self.coordinator.take() {
            d.kill();
        }
        // Tasks of `--sandbox=none` workers that outlived a SIGKILLed worker (they run in
        // process groups of their own, in exec roots under the work dirs or on `/dev/shm`).
        let shm: Vec<PathBuf> =
            (0..self.workers.len()).map(|i| shm_roots_of(&self.work_dir(i))).collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut left = alive_under(&self.root);
            for dir in &shm {
                left.extend(alive_under(dir));
            }
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            for pid in left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(POLL);
        }
        // What a SIGKILLed worker left there: nobody starts it again to clean up.
        for dir in &shm {
            remove_shm_roots(dir);
        }
    }
}

/// The directory on `/dev/shm` of the worker whose work dir is `work_dir`, which holds its
/// exec roots of both kinds (`prova_worker::shmroots::roots_dir`'s parent).
pub fn shm_roots_of(work_dir: &Path) -> PathBuf {
    let work = work_dir.canonicalize().unwrap_or_else(|_| work_dir.to_owned());
    prova_worker::shmroots::roots_dir(Path::new("/dev/shm"), &work, prova_worker::shmroots::ROOTS)
        .parent()
        .map_or_else(PathBuf::new, Path::to_path_buf)
}

/// Removes a gone worker's directory on `/dev/shm` ([`shm_roots_of`]), read-only
/// directories a task left in its roots included.
pub fn remove_shm_roots(dir: &Path) {
    if dir.as_os_str().is_empty() || std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return;
    }
    let _ = std::process::Command::new("chmod").arg("-R").arg("u+rwx").arg(dir).status();
    let _ = std::fs::remove_dir_all(dir);
}

// ----- reading farm status ---------------------------------------------------------------

/// The `workers` array of a `farm status --json`.
pub fn workers_of(status: &Value) -> Vec<Value> {
    status["workers"].as_array().cloned().unwrap_or_default()
}

/// The worker of `status` named `name`.
pub fn worker_of(status: &Value, name: &str) -> Option<Value> {
    workers_of(status).into_iter().find(|w| w["id"] == name)
}

/// The name of the worker `status` shows running `task`.
pub fn running_on(status: &Value, task: &str) -> Option<String> {
    workers_of(status).into_iter().find_map(|w| {
        let runs = w["running"].as_array()?.iter().any(|t| t == task);
        runs.then(|| w["id"].as_str().map(str::to_owned)).flatten()
    })
}

/// Every `<name>.<n>.err` in `dir`, in start order.
fn logs_of(dir: &Path, name: &str) -> String {
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| {
                let p = e.ok()?.path();
                let file = p.file_name()?.to_str()?.to_owned();
                let n =
                    file.strip_prefix(&format!("{name}."))?.strip_suffix(".err")?.parse().ok()?;
                Some((n, p))
            })
            .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .map(|(n, p)| format!("--- start {n}\n{}", std::fs::read_to_string(p).unwrap_or_default()))
        .collect()
}

// ----- workspaces and tasks for farm tests -----------------------------------------------

/// Build products (and prova's own state) a copy of a workspace must not carry over.
pub const PRODUCTS: &[&str] = &["dist", "gen", ".prova"];

/// A fresh copy of `examples/demo` without its build products: a multi-project graph
/// (four libraries, one with a code generator, three apps).
pub fn demo() -> TempWorkspace {
    TempWorkspace::copy_of(&crate::repo_root().join("examples/demo"), PRODUCTS)
}

/// Every file under a directory named `dist` or `gen` in `ws`, as relative path → (bytes,
/// permission bits): what a build produced, to compare across runs and machines.
pub fn products(ws: &TempWorkspace) -> BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut out = BTreeMap::new();
    let mut stack = vec![ws.root().to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = e.expect("a directory entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            let rel = path.strip_prefix(ws.root()).expect("under the root");
            if meta.is_dir() {
                if rel.file_name().is_some_and(|n| n != ".prova") {
                    stack.push(path);
                }
            } else if rel.components().any(|c| c.as_os_str() == "dist" || c.as_os_str() == "gen") {
                let bytes = std::fs::read(&path).expect("read a product");
                out.insert(
                    rel.to_string_lossy().into_owned(),
                    (bytes, meta.permissions().mode() & 0o7777),
                );
            }
        }
    }
    out
}

/// A shell command for a task that says where it runs, then waits until the test creates
/// `release` in that directory — which works in an exec root too (it is the task's working
/// directory, bind-mounted into the sandbox, so a file the test creates there on the host
/// shows inside) — then removes it and runs `then`. The line it prints is `waiting in
/// <dir>`; see [`waiting_dirs`]. Left in an exec root, `release` would be a write outside
/// the declared outputs (the worker cannot tell who made it) and fail the task. It gives up
/// (exit 3) after about two minutes, so a task whose worker was SIGKILLed without a sandbox
/// (which would orphan it) cannot linger.
pub fn blocking_command(then: &str) -> String {
    format!(
        "echo \"waiting in $(pwd)\"; i=0; while [ ! -e release ]; do i=$((i+1)); \
         if [ $i -gt 2400 ]; then exit 3; fi; sleep 0.05; done; rm -f release; {then}"
    )
}

/// Whether `path` (where a task ran) lies in an exec root of the worker whose work dir is
/// `work_dir`: in the work dir, or in that worker's roots on `/dev/shm` (`--exec-roots auto`,
/// named by the hash of its canonical work dir: `prova_worker::shmroots::roots_dir`).
pub fn in_roots_of(path: &Path, work_dir: &Path) -> bool {
    let work = work_dir.canonicalize().unwrap_or_else(|_| work_dir.to_owned());
    let shm = shm_roots_of(&work).join(prova_worker::shmroots::ROOTS);
    path.starts_with(work_dir) || path.starts_with(&work) || path.starts_with(shm)
}

/// The directories `task`'s blocking attempts said they wait in, in order, from `--json`
/// output lines read so far.
pub fn waiting_dirs(lines: &[String], task: &str) -> Vec<PathBuf> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "output" && e["task"] == task)
        .filter_map(|e| {
            let text = e["text"].as_str()?.to_owned();
            let dirs: Vec<PathBuf> = text
                .lines()
                .filter_map(|l| l.strip_prefix("waiting in ").map(PathBuf::from))
                .collect();
            Some(dirs)
        })
        .flatten()
        .collect()
}

/// Lets a task started with [`blocking_command`] and waiting in `dir` go on.
pub fn release(dir: &Path) {
    std::fs::write(dir.join("release"), "")
        .unwrap_or_else(|e| panic!("releasing the task in {}: {e}", dir.display()));
}

/// One project `p` whose `build` is [`blocking_command`]`(then)`, with outputs `dist/**`.
pub fn blocking_workspace(then: &str) -> TempWorkspace {
    let command = blocking_command(then);
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p\"]\n[tasks.build]\ncommand = '{command}'\n\
                 outputs = [\"dist/**\"]\n"
            ),
        )
        .file("p/src.txt", "source\n")
}

/// Whether a `--json` output line is a blocking task's `waiting in <dir>` line.
pub fn waiting_line(l: &str) -> bool {
    l.contains("\"output\"") && l.contains("waiting in ")
}
