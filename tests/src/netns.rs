//! A farm on **separate hosts**: network namespaces joined by a bridge, one per daemon and one
//! for the client, so a test can stall a host's link (`ip link set … down`) without touching
//! anything else on the machine.
//!
//! ```no_run
//! use prova_tests::netns::{NetFarm, unavailable};
//! if let Some(why) = unavailable() { eprintln!("skipped: {why}"); return; }
//! let farm = NetFarm::builder().workers(3).start();  // coordinator, w1..w3, a client host
//! farm.cut(0);                                       // w1's link down
//! farm.mend(0);                                      // and up again
//! ```
//!
//! # The lab ([`Lab`])
//! A *bridge namespace* `pv<pid>x<n>-br` holds a bridge `br0`; each host is a namespace
//! `pv<pid>x<n>-h<i>` with a veth `eth0` (address `10.<a>.<b>.<i+1>/24`) whose peer `v<i>`
//! is a port of the bridge. Names carry the test process's pid and a per-process counter, so
//! tests running in parallel (threads or processes) never collide; interface names live in
//! their own namespaces and may repeat. Cutting a host's link takes its bridge port down:
//! packets vanish silently, as in a real partition (the host's own interface and routes stay,
//! so its sends do not fail at once). On drop every process left in a lab namespace is
//! SIGKILLed and the namespaces are deleted (which deletes the veths and the bridge) — also
//! when the test panics. A lab left by a test process that was itself SIGKILLed is removed by
//! the next [`Lab::new`] (its pid is no longer alive).
//!
//! # The farm ([`NetFarm`])
//! Host 0 runs the coordinator (`--listen 10.…1:0`, its certificate issued for that address
//! with `prova certs init --san`), hosts 1..=N the workers (bubblewrap, `--join` the
//! coordinator's address), host N+1 the client: every `prova run --remote` and `prova farm
//! status` of the test runs there (`ip netns exec`, which execs prova in place). The file
//! system is shared: certificates, work dirs, the farm cache and the daemons' logs sit in one
//! temporary directory. Readiness is observed (the daemon's first stdout line, then `farm
//! status` listing each worker with its current start), never slept for. A worker's work dir
//! may be a small tmpfs ([`NetFarmBuilder::tmpfs`]), unmounted on drop after the daemons died.

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tempfile::TempDir;

use crate::cluster::{POLL, READY_TIMEOUT, workers_of};
use crate::run::{Output, ProvaCmd};
use crate::workspace::TempWorkspace;
use crate::{is_alive, prova_bin};

/// Why namespaced hosts cannot be made here (not root, no `ip`, no netns support), or `None`.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("network namespaces need root".into());
    }
    Lab::new(1).err()
}

/// `ip args…`; `Err` with its stderr unless it exits 0.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}`: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// `ip` that must work: the lab is already half built, so a failure is the test's.
#[track_caller]
fn ip_ok(args: &[&str]) {
    ip(args).unwrap_or_else(|e| panic!("{e}"));
}

const PREFIX: &str = "pv";
static LABS: AtomicU32 = AtomicU32::new(0);

/// One namespaced host of a [`Lab`].
#[derive(Clone, Debug)]
pub struct Host {
    /// Its network namespace.
    pub ns: String,
    /// Its address on the lab's subnet.
    pub addr: String,
    /// Its bridge port (in the bridge namespace): what [`Lab::cut`] takes down.
    port: String,
}

impl Host {
    /// `["ip", "netns", "exec", ns]`: what runs a command on this host.
    pub fn launcher(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.ns].iter().map(|s| (*s).to_owned()).collect()
    }
}

/// Hosts on one bridge, each in its own network namespace; everything is removed on drop.
#[derive(Debug)]
pub struct Lab {
    bridge: String,
    hosts: Vec<Host>,
}

impl Lab {
    /// `n` hosts on a fresh bridge; `Err` (with the reason) when namespaces cannot be made.
    pub fn new(n: usize) -> Result<Self, String> {
        sweep_stale();
        let seq = LABS.fetch_add(1, Ordering::Relaxed);
        let base = format!("{PREFIX}{}x{seq}", std::process::id());
        let bridge = format!("{base}-br");
        ip(&["netns", "add", &bridge])?;
        let mut lab = Self { bridge: bridge.clone(), hosts: Vec::new() };
        // From here on a failure is the machine's, not the test's: drop cleans what was made.
        ip(&["-n", &bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge, "link", "set", "br0", "up"])?;
        // A private /24 per lab (the namespaces isolate it anyway; distinct subnets keep the
        // logs of parallel tests apart).
        let (a, b) = (16 + (std::process::id() % 200) as u8, (seq % 250) as u8);
        for i in 0..n {
            let ns = format!("{base}-h{i}");
            ip(&["netns", "add", &ns])?;
            let port = format!("v{i}");
            let addr = format!("10.{a}.{b}.{}", i + 1);
            lab.hosts.push(Host { ns: ns.clone(), addr: addr.clone(), port: port.clone() });
            ip(&[
                "link", "add", &port, "netns", &bridge, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ])?;
            ip(&["-n", &bridge, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &bridge, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(lab)
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// Gives host `i` `n` more addresses on its link (`10.<a>.<b>.100` onwards, `n` ≤ 100):
    /// several sources on one host, e.g. for a flood from many addresses.
    #[track_caller]
    pub fn add_addresses(&self, i: usize, n: usize) -> Vec<String> {
        assert!(n <= 100, "at most 100 extra addresses per lab");
        let host = &self.hosts[i];
        let prefix = host.addr.rsplit_once('.').map_or("", |(p, _)| p);
        (0..n)
            .map(|k| {
                let addr = format!("{prefix}.{}", 100 + k);
                ip_ok(&["-n", &host.ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
                addr
            })
            .collect()
    }

    /// Takes host `i`'s link down: from now on its packets are lost, both ways.
    #[track_caller]
    pub fn cut(&self, i: usize) {
        ip_ok(&["-n", &self.bridge, "link", "set", &self.hosts[i].port, "down"]);
    }

    /// Brings host `i`'s link back.
    #[track_caller]
    pub fn mend(&self, i: usize) {
        ip_ok(&["-n", &self.bridge, "link", "set", &self.hosts[i].port, "up"]);
    }

    fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().map(|h| h.ns.as_str()).chain(std::iter::once(self.bridge.as_str()))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let names: Vec<String> = self.namespaces().map(str::to_owned).collect();
        remove_namespaces(&names);
    }
}

/// SIGKILLs every process in `names` (a namespace outlives its deletion while a process is in
/// it), then deletes them.
fn remove_namespaces(names: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids: Vec<i32> = names.iter().flat_map(|ns| pids_in(ns)).collect();
        if pids.is_empty() || Instant::now() >= deadline {
            break;
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(POLL);
    }
    for ns in names {
        let _ = ip(&["netns", "del", ns]);
    }
}

/// Live (non-zombie) processes in namespace `ns`.
fn pids_in(ns: &str) -> Vec<i32> {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).stdin(Stdio::null()).output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| is_alive(*p))
        .collect()
}

/// Removes labs whose test process is gone (it was killed before its drop could run).
fn sweep_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).stdin(Stdio::null()).output() else {
        return;
    };
    let stale: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| {
            let Some(rest) = name.strip_prefix(PREFIX) else { return false };
            let Some((pid, _)) = rest.split_once('x') else { return false };
            pid.parse::<i32>().is_ok_and(|p| !is_alive(p))
        })
        .map(str::to_owned)
        .collect();
    if !stale.is_empty() {
        remove_namespaces(&stale);
    }
}

// ----- daemons -----------------------------------------------------------------------------

/// A daemon on a host: `ip netns exec NS prova …` (exec'd in place: the pid is prova's), in a
/// process group of its own, stdout piped, stderr to its log.
struct Daemon {
    child: Child,
    pid: i32,
    _lines: Receiver<String>,
}

impl Daemon {
    /// Starts it and waits for its first stdout line; `Err` (with its log) otherwise.
    fn spawn(
        host: &Host,
        dir: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<(Self, String), String> {
        let err = File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &host.ns])
            .arg(prova_bin())
            .args(args)
            .current_dir(dir)
            .env("PROVA_LOG", "info")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting prova on {}: {e}", host.ns))?;
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
        let log_text = || std::fs::read_to_string(log).unwrap_or_default();
        match lines.recv_timeout(READY_TIMEOUT) {
            Ok(first) => Ok((Self { child, pid, _lines: lines }, first)),
            Err(RecvTimeoutError::Timeout) => {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = child.wait();
                Err(format!("{args:?} printed nothing within {READY_TIMEOUT:?}\n{}", log_text()))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(format!("{args:?} exited ({status}) before it was ready\n{}", log_text()))
            }
        }
    }

    fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.pid), sig);
    }

    fn kill(mut self) {
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

// ----- the farm ----------------------------------------------------------------------------

/// Builds a [`NetFarm`].
#[derive(Clone, Debug)]
pub struct NetFarmBuilder {
    workers: usize,
    slots: u32,
    tmpfs: Vec<(usize, String)>,
    worker_args: Vec<(usize, Vec<String>)>,
    spare_hosts: usize,
}

impl NetFarmBuilder {
    /// Hosts on the lab that run nothing of the farm (an attacker, say): [`NetFarm::spare`].
    pub fn spare_hosts(mut self, n: usize) -> Self {
        self.spare_hosts = n;
        self
    }

    /// Number of workers (`w1` … `wN`), each on its own host; default 3.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// `--slots` of every worker; default 2.
    pub fn slots(mut self, n: u32) -> Self {
        self.slots = n;
        self
    }

    /// Worker `i`'s work dir is a tmpfs of `size` (`mount -o size=…`, e.g. `8m`), its exec
    /// roots in it (`--exec-roots work-dir`): a test gives a worker a small work dir to fill.
    pub fn tmpfs(mut self, i: usize, size: &str) -> Self {
        self.tmpfs.push((i, size.to_owned()));
        self.worker_args.push((i, vec!["--exec-roots".to_owned(), "work-dir".to_owned()]));
        self
    }

    /// Extra flags for worker `i`, on every start of it.
    pub fn worker_args<I, S>(mut self, i: usize, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.worker_args.push((i, args.into_iter().map(Into::into).collect()));
        self
    }

    /// Makes the lab and the certificates, starts the coordinator and every worker, and waits
    /// until `farm status` lists them all. Panics when namespaces cannot be made: call
    /// [`unavailable`] first.
    pub fn start(self) -> NetFarm {
        let lab = Lab::new(self.workers + 2 + self.spare_hosts)
            .unwrap_or_else(|e| panic!("the lab: {e}"));
        let dir = tempfile::Builder::new().prefix("prova-netns-").tempdir().expect("a temp dir");
        let root = dir.path().canonicalize().expect("canonicalising the farm directory");
        for sub in ["logs", "workers"] {
            std::fs::create_dir_all(root.join(sub)).expect("the farm layout");
        }
        let mut farm = NetFarm {
            lab,
            root,
            coordinator: None,
            coordinator_starts: 0,
            addr: String::new(),
            workers: Vec::new(),
            mounts: Vec::new(),
            _dir: dir,
        };
        let certs = farm.root.join("certs").to_string_lossy().into_owned();
        let coordinator_ip = farm.lab.host(0).addr.clone();
        farm.prova_ok(&["certs", "init", &certs, "--san", &coordinator_ip]);
        farm.prova_ok(&["certs", "issue", &certs, "--role", "ci", "--name", "ci"]);
        farm.prova_ok(&["certs", "issue", &certs, "--role", "admin", "--name", "admin"]);
        for i in 0..self.workers {
            let name = format!("w{}", i + 1);
            farm.prova_ok(&["certs", "issue", &certs, "--role", "worker", "--name", &name]);
            let work_dir = farm.root.join("workers").join(&name);
            std::fs::create_dir_all(&work_dir).expect("a work dir");
            if let Some((_, size)) = self.tmpfs.iter().find(|(w, _)| *w == i) {
                mount_tmpfs(&work_dir, size);
                farm.mounts.push(work_dir.clone());
            }
            let mut args = vec!["--slots".to_owned(), self.slots.to_string()];
            for (_, extra) in self.worker_args.iter().filter(|(w, _)| *w == i) {
                args.extend(extra.iter().cloned());
            }
            farm.workers.push(NetWorker { name, work_dir, args, daemon: None, starts: 0 });
        }
        farm.start_coordinator(None).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..self.workers {
            farm.spawn_worker(i);
        }
        farm.wait_for_workers(READY_TIMEOUT);
        farm
    }
}

fn mount_tmpfs(dir: &Path, size: &str) {
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running mount: {e}"));
    assert!(out.status.success(), "mount tmpfs: {}", String::from_utf8_lossy(&out.stderr));
}

struct NetWorker {
    name: String,
    work_dir: PathBuf,
    args: Vec<String>,
    daemon: Option<Daemon>,
    starts: u32,
}

/// A coordinator, workers and a client, each on its own namespaced host.
pub struct NetFarm {
    lab: Lab,
    root: PathBuf,
    coordinator: Option<Daemon>,
    coordinator_starts: u32,
    addr: String,
    workers: Vec<NetWorker>,
    mounts: Vec<PathBuf>,
    _dir: TempDir,
}

impl NetFarm {
    /// Three workers, two slots each; see [`NetFarmBuilder`].
    pub fn builder() -> NetFarmBuilder {
        NetFarmBuilder {
            workers: 3,
            slots: 2,
            tmpfs: Vec::new(),
            worker_args: Vec::new(),
            spare_hosts: 0,
        }
    }

    /// The coordinator's `IP:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Worker `i`'s name.
    pub fn worker_name(&self, i: usize) -> &str {
        &self.workers[i].name
    }

    /// Worker `i`'s work dir.
    pub fn work_dir(&self, i: usize) -> &Path {
        &self.workers[i].work_dir
    }

    /// The index of the worker named `name`.
    #[track_caller]
    pub fn worker_index(&self, name: &str) -> usize {
        self.workers
            .iter()
            .position(|w| w.name == name)
            .unwrap_or_else(|| panic!("no worker named {name:?}"))
    }

    fn client(&self) -> &Host {
        self.lab.host(self.workers.len() + 1)
    }

    /// Spare host `i` (see [`NetFarmBuilder::spare_hosts`]).
    pub fn spare(&self, i: usize) -> &Host {
        self.lab.host(self.workers.len() + 2 + i)
    }

    /// Gives spare host `i` `n` more addresses (see [`Lab::add_addresses`]).
    pub fn spare_addresses(&self, i: usize, n: usize) -> Vec<String> {
        self.lab.add_addresses(self.workers.len() + 2 + i, n)
    }

    /// The client host's address: where every `farm` command and run comes from.
    pub fn client_addr(&self) -> &str {
        &self.client().addr
    }

    fn certs(&self, bundle: &str) -> String {
        self.root.join("certs").join(bundle).to_string_lossy().into_owned()
    }

    /// `prova -C ws run args… --remote ADDR --certs <ci>` on the client host, not started yet.
    pub fn run_cmd<I, S>(&self, ws: &TempWorkspace, args: I) -> ProvaCmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut all = vec!["run".to_owned()];
        all.extend(args.into_iter().map(Into::into));
        all.extend(["--remote".to_owned(), self.addr.clone(), "--certs".into(), self.certs("ci")]);
        ws.prova(all).launcher(self.client().launcher())
    }

    /// `prova farm args… --remote ADDR --certs <bundle>` on the client host, to completion.
    pub fn farm_cmd(&self, bundle: &str, args: &[&str]) -> Output {
        let mut all = vec!["farm".to_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all.extend([
            "--remote".to_owned(),
            self.addr.clone(),
            "--certs".into(),
            self.certs(bundle),
        ]);
        ProvaCmd::new(&self.root, all).launcher(self.client().launcher()).run()
    }

    /// `prova farm status --json`, from the client host, parsed.
    #[track_caller]
    pub fn status(&self) -> Value {
        let out = self.farm_cmd("ci", &["status", "--json"]);
        assert_eq!(out.code(), Some(0), "farm status failed\n{out}\n{}", self.logs());
        serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("farm status is not JSON: {e}\n{out}"))
    }

    /// Polls `farm status` until `pred` holds; panics, naming `what`, after `timeout`.
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
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; last status:\n{s:#}\n{}",
                self.logs()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits until every running worker is listed with its current start.
    #[track_caller]
    pub fn wait_for_workers(&self, timeout: Duration) {
        let want: Vec<(String, String)> = self
            .workers
            .iter()
            .filter(|w| w.daemon.is_some())
            .map(|w| (w.name.clone(), w.starts.to_string()))
            .collect();
        self.wait_for_status("every worker to register", timeout, |s| {
            want.iter().all(|(name, start)| {
                workers_of(s).iter().any(|w| {
                    w["id"] == name.as_str() && w["labels"]["harness-start"] == start.as_str()
                })
            })
        });
    }

    /// SIGSTOPs worker `i` (the worker process; its tasks run on in their own groups).
    pub fn pause_worker(&self, i: usize) {
        self.workers[i].daemon.as_ref().expect("worker running").signal(Signal::SIGSTOP);
    }

    /// SIGCONTs worker `i`.
    pub fn resume_worker(&self, i: usize) {
        self.workers[i].daemon.as_ref().expect("worker running").signal(Signal::SIGCONT);
    }

    /// Waits (bounded) for worker `i` to exit on its own; its exit code (`None`: still
    /// running at `timeout`, or killed by a signal).
    pub fn wait_worker_exit(&mut self, i: usize, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let d = self.workers[i].daemon.as_mut()?;
        loop {
            match d.child.try_wait() {
                Ok(Some(status)) => {
                    self.workers[i].daemon = None;
                    return status.code();
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => return None,
            }
        }
    }

    /// Worker `i`'s link down.
    pub fn cut(&self, i: usize) {
        self.lab.cut(i + 1);
    }

    /// Worker `i`'s link up again.
    pub fn mend(&self, i: usize) {
        self.lab.mend(i + 1);
    }

    /// SIGKILLs the coordinator and leaves it down.
    pub fn kill_coordinator(&mut self) {
        if let Some(d) = self.coordinator.take() {
            d.kill();
        }
    }

    /// Starts the coordinator again on its address, with the same cache (it must be down).
    #[track_caller]
    pub fn restart_coordinator(&mut self) {
        let addr = self.addr.clone();
        self.start_coordinator(Some(&addr)).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Everything the daemons logged (colour codes removed), for a failing test's message.
    pub fn logs(&self) -> String {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.root.join("logs"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .map(|p| {
                let text = plain(&std::fs::read_to_string(p).unwrap_or_default());
                format!("=== {}\n{text}", p.file_name().unwrap_or_default().to_string_lossy())
            })
            .collect()
    }

    /// What the coordinator logged, every start of it, colour codes removed.
    pub fn coordinator_log(&self) -> String {
        self.log_of("coordinator", self.coordinator_starts)
    }

    /// What worker `i` logged, every start of it, colour codes removed.
    pub fn worker_log(&self, i: usize) -> String {
        self.log_of(&self.workers[i].name, self.workers[i].starts)
    }

    fn log_of(&self, name: &str, starts: u32) -> String {
        (1..=starts)
            .map(|n| {
                let path = self.root.join("logs").join(format!("{name}.{n}.err"));
                plain(&std::fs::read_to_string(path).unwrap_or_default())
            })
            .collect()
    }

    // ----- internals -------------------------------------------------------------------

    #[track_caller]
    fn prova_ok(&self, args: &[&str]) {
        let out = ProvaCmd::new(&self.root, args.iter().copied()).run();
        assert_eq!(out.code(), Some(0), "`prova {}` failed\n{out}", args.join(" "));
    }

    fn start_coordinator(&mut self, listen: Option<&str>) -> Result<(), String> {
        self.coordinator_starts += 1;
        let log =
            self.root.join("logs").join(format!("coordinator.{}.err", self.coordinator_starts));
        let host = self.lab.host(0).clone();
        let any = format!("{}:0", host.addr);
        let args: Vec<String> = vec![
            "coordinator".into(),
            "--listen".into(),
            listen.unwrap_or(&any).into(),
            "--certs".into(),
            self.certs("coordinator"),
            "--cache-dir".into(),
            self.root.join("farm-cache").to_string_lossy().into_owned(),
        ];
        let (daemon, first) = Daemon::spawn(&host, &self.root, &args, &log)?;
        self.addr = first
            .strip_prefix("prova coordinator listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .ok_or_else(|| format!("unexpected first line of the coordinator: {first:?}"))?
            .to_owned();
        self.coordinator = Some(daemon);
        Ok(())
    }

    fn spawn_worker(&mut self, i: usize) {
        let host = self.lab.host(i + 1).clone();
        let certs = self.certs(&self.workers[i].name);
        let w = &mut self.workers[i];
        w.starts += 1;
        let log = self.root.join("logs").join(format!("{}.{}.err", w.name, w.starts));
        let mut args: Vec<String> = vec![
            "worker".into(),
            "--join".into(),
            self.addr.clone(),
            "--certs".into(),
            certs,
            "--work-dir".into(),
            w.work_dir.to_string_lossy().into_owned(),
            "--sandbox=bwrap".into(),
            "--label".into(),
            format!("harness-start={}", w.starts),
        ];
        args.extend(w.args.iter().cloned());
        let (daemon, first) =
            Daemon::spawn(&host, &self.root, &args, &log).unwrap_or_else(|e| panic!("{e}"));
        assert!(first.starts_with(&format!("prova worker {} joining ", w.name)), "{first:?}");
        w.daemon = Some(daemon);
    }
}

/// `text` without its terminal colour sequences (`ESC [ … m`).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for NetFarm {
    fn drop(&mut self) {
        for w in &mut self.workers {
            if let Some(d) = w.daemon.take() {
                d.kill();
            }
        }
        if let Some(d) = self.coordinator.take() {
            d.kill();
        }
        // Tasks still running in the hosts' namespaces go with them (the lab's drop), but the
        // tmpfs work dirs must be unmounted before the directory is removed.
        let names: Vec<String> = self.lab.namespaces().map(str::to_owned).collect();
        for ns in &names {
            for pid in pids_in(ns) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        for dir in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(dir).status();
        }
        // The exec roots SIGKILLed workers left on `/dev/shm`.
        for w in &self.workers {
            crate::cluster::remove_shm_roots(&crate::cluster::shm_roots_of(&w.work_dir));
        }
    }
}
