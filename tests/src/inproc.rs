//! An in-process farm: a coordinator and N workers as tasks of one tokio runtime inside the
//! test process, on `127.0.0.1:0`, started the way the binary starts them
//! ([`prova_cli::commands::daemons`]), each worker with its own work dir. Runs reach it with
//! the real `prova run --remote` client. A worker can be stopped mid-task (as SIGTERM stops
//! the binary's) and started again under the same name.
//!
//! [`crate::cluster`] is the same farm as separate processes (SIGKILL, restarts of the
//! coordinator); this one starts in milliseconds and puts every part in one address space.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use prova_cli::commands::daemons::{self, CoordinatorSettings, WorkerSettings};
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::{Bundle, Role, certs};
use tempfile::TempDir;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::run::{Output, ProvaCmd};
use crate::workspace::TempWorkspace;

struct InProcWorker {
    name: String,
    stop: CancellationToken,
    task: OwnedTask<Result<(), String>>,
}

/// A coordinator and its workers inside this process. Dropping it stops them.
pub struct InProcessFarm {
    rt: Runtime,
    dir: TempDir,
    addr: SocketAddr,
    stop: CancellationToken,
    coordinator: Option<OwnedTask<()>>,
    workers: Vec<Option<InProcWorker>>,
    slots: u32,
}

impl InProcessFarm {
    /// A farm of `n` workers (`w1`…) with two slots each, every one registered on return.
    #[track_caller]
    pub fn start(n: usize) -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let c = dir.path().join("certs");
        certs::init(&c, &certs::default_sans()).expect("a CA");
        for i in 1..=n {
            certs::issue(&c, Role::Worker, &format!("w{i}")).expect("a worker bundle");
        }
        certs::issue(&c, Role::Ci, "ci1").expect("a ci bundle");
        certs::issue(&c, Role::Admin, "ops").expect("an admin bundle");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let settings = CoordinatorSettings {
            listen: "127.0.0.1:0".parse().expect("an address"),
            bundle: Bundle::load(&c.join("coordinator")).expect("the coordinator's bundle"),
            cache_dir: dir.path().join("farm-cache"),
            trust_proven: false,
            client_quota: prova_coordinator::farm::server::DEFAULT_CLIENT_QUOTA,
            http: None,
        };
        let bound = rt.block_on(daemons::bind_coordinator(settings)).expect("a coordinator");
        let addr = bound.addr;
        let stop = CancellationToken::new();
        let coordinator =
            Some(OwnedTask::spawn_on(rt.handle(), "inproc-coordinator", bound.serve(stop.clone())));
        let mut farm = InProcessFarm {
            rt,
            dir,
            addr,
            stop,
            coordinator,
            workers: (0..n).map(|_| None).collect(),
            slots: 2,
        };
        for i in 0..n {
            farm.start_worker(i);
        }
        farm.wait_for_workers(n);
        farm
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// The `ci` bundle.
    pub fn ci_certs(&self) -> PathBuf {
        self.dir.path().join("certs/ci1")
    }

    /// Worker `i`'s work dir.
    pub fn work_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join("workers").join(format!("w{}", i + 1))
    }

    /// `prova -C ws run args… --remote ADDR --certs ci`, not started yet.
    pub fn run_cmd<I, S>(&self, ws: &TempWorkspace, args: I) -> ProvaCmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut all = vec!["run".to_owned()];
        all.extend(args.into_iter().map(Into::into));
        let certs = self.ci_certs().to_string_lossy().into_owned();
        all.extend(["--remote".to_owned(), self.addr(), "--certs".to_owned(), certs]);
        ws.prova(all)
    }

    /// `prova run args…` on the farm, to completion.
    pub fn run<I, S>(&self, ws: &TempWorkspace, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.run_cmd(ws, args).run()
    }

    /// `prova farm status --json`, parsed.
    #[track_caller]
    pub fn status(&self) -> serde_json::Value {
        let certs = self.dir.path().join("certs/ops").to_string_lossy().into_owned();
        let args = ["farm", "status", "--json", "--remote", &self.addr(), "--certs", &certs];
        let out = ProvaCmd::new(self.dir.path(), args).run();
        out.assert_code(0);
        serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("farm status is not JSON: {e}\n{out}"))
    }

    /// Stops worker `i` as SIGTERM stops the binary's: its session ends, its connection
    /// closes and its actor is killed with the tasks it ran. Bounded: a worker that does not
    /// stop within 30 s fails the test.
    #[track_caller]
    pub fn stop_worker(&mut self, i: usize) {
        if let Some(w) = self.workers[i].take() {
            w.stop.cancel();
            let done = self.rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(30), w.task).await
            });
            assert!(done.is_ok(), "worker {} did not stop", w.name);
        }
    }

    /// Starts worker `i` again (after [`stop_worker`](Self::stop_worker)) and waits until it
    /// is registered.
    #[track_caller]
    pub fn restart_worker(&mut self, i: usize) {
        self.stop_worker(i);
        self.start_worker(i);
        let want = self.workers.iter().flatten().count();
        self.wait_for_workers(want);
    }

    fn start_worker(&mut self, i: usize) {
        let name = format!("w{}", i + 1);
        let bundle = Bundle::load(&self.dir.path().join("certs").join(&name)).expect("a bundle");
        let settings = WorkerSettings {
            join: self.addr,
            server_name: "127.0.0.1".to_owned(),
            bundle,
            slots: self.slots,
            work_dir: self.work_dir(i),
            labels: Default::default(),
            blob_cache_size: 1 << 30,
            sandbox: false,
            sandbox_desc: "none".to_owned(),
            min_free_disk: 0,
            exec_roots: Default::default(),
        };
        let stop = self.stop.child_token();
        let worker = daemons::run_worker(settings, stop.clone(), |_| Ok(()));
        let task = OwnedTask::spawn_on(self.rt.handle(), "inproc-worker", async move {
            worker.await.map_err(|e| format!("{e:#}"))
        });
        self.workers[i] = Some(InProcWorker { name, stop, task });
    }

    /// Waits (bounded) until `farm status` lists `n` workers.
    #[track_caller]
    fn wait_for_workers(&self, n: usize) {
        let deadline = std::time::Instant::now() + crate::cluster::READY_TIMEOUT;
        loop {
            let status = self.status();
            let have = status["workers"].as_array().map_or(0, Vec::len);
            if have == n {
                return;
            }
            for w in self.workers.iter().flatten() {
                assert!(!w.task.is_finished(), "worker {} stopped while joining", w.name);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{n} workers never registered: {status:#}"
            );
            std::thread::sleep(crate::cluster::POLL);
        }
    }

    /// The farm's directory (certs, cache, work dirs).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for InProcessFarm {
    fn drop(&mut self) {
        self.stop.cancel();
        for w in self.workers.iter_mut().filter_map(Option::take) {
            w.stop.cancel();
            let _ = self.rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(10), w.task).await
            });
        }
        if let Some(c) = self.coordinator.take() {
            let _ = self.rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(10), c).await
            });
        }
        // The exec roots a stopped worker's killed tasks left on `/dev/shm`.
        for i in 0..self.workers.len() {
            crate::cluster::remove_shm_roots(&crate::cluster::shm_roots_of(&self.work_dir(i)));
        }
    }
}
