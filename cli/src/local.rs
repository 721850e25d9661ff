//! Local single-node mode: the coordinator's run actor and an in-process worker actor,
//! joined by the same link messages a farm worker speaks (`ToWorker` / `FromWorker`) over
//! bounded channels instead of QUIC.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kameo::prelude::*;
use prova_coordinator::run::{
    Begin, ExecMode, Interrupt, RunActor, RunActorArgs, RunCache, RunOptions, RunPlan,
};
use prova_protocol::WorkerId;
use prova_protocol::events::{RunEvent, RunSummary};
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{FromWorker, ToWorker};
use prova_worker::actor::{WorkerActor, WorkerActorArgs};
use prova_worker::blobcache::BlobCache;
use prova_worker::exec::LocalExecutor;
use prova_worker::runner::{RunnerConfig, WorkerContext};
use tokio::sync::{mpsc, oneshot};

/// Bound on link messages in flight in each direction.
const LINK_QUEUE: usize = 256;
/// The local worker's blob cache bound: local exec roots copy from the workspace and read
/// upstream artifacts from the cache, so it stays nearly empty.
const PROOF_BLOB_CACHE: u64 = 256 << 20;

/// What a local proof run (`--verify`) gives the in-process worker: exec roots under
/// `<workspace>/.prova/worker`, the sandbox when bubblewrap runs here, strace when installed.
pub struct LocalProofs {
    /// Exec roots and the worker's (unused locally, but required) blob cache.
    pub work_dir: PathBuf,
    /// Run exec-root tasks under bubblewrap.
    pub sandbox: bool,
    /// strace is installed, and where it runs beside the sandbox.
    pub strace: Option<prova_worker::sandbox::Tracer>,
    /// The workspace root and the cache's `blobs/` directory.
    pub sources: (PathBuf, PathBuf),
}

/// Runs `plan` on an in-process worker with `options.concurrency` slots. Run events go to
/// `events`; Ctrl-C and SIGTERM interrupt the run (running tasks get SIGTERM, a grace, then
/// SIGKILL, and are reported aborted).
pub async fn run(
    plan: RunPlan,
    options: RunOptions,
    events: mpsc::Sender<RunEvent>,
    cache: Option<RunCache>,
    weights: Vec<u64>,
    proofs: Option<LocalProofs>,
) -> anyhow::Result<RunSummary> {
    let (to_worker, mut worker_inbox) = mpsc::channel::<ToWorker>(LINK_QUEUE);
    let (worker_outbox, mut from_worker) = mpsc::channel::<FromWorker>(LINK_QUEUE);
    let mut context = WorkerContext::in_place(Arc::new(LocalExecutor), RunnerConfig::from_host());
    // Proof re-runs take slots beside the tasks themselves.
    let mut slots = options.concurrency.max(1);
    let mut local_proof_sources = None;
    if let Some(p) = proofs {
        std::fs::create_dir_all(&p.work_dir)?;
        context.blobs = Some(BlobCache::open(&p.work_dir.join("blobs"), PROOF_BLOB_CACHE)?);
        // Its lock is held: what the per-task directories hold (and this run's re-run roots
        // on /dev/shm) was left by a run killed mid-proof.
        prova_worker::health::clean_exec_roots(&p.work_dir, None);
        context.work_dir = p.work_dir;
        context.sandbox = p.sandbox;
        // A sandbox never shows the workspace or the cache, whatever the task's PATH names.
        let cache = p.sources.1.parent().map_or_else(|| p.sources.1.clone(), Path::to_path_buf);
        context.sandbox_hidden = vec![p.sources.0.clone(), cache];
        context.strace = p.strace;
        // A thousand small files a root, made and removed in seconds, cost a disk more than
        // the task (`prova_worker::shmroots`).
        context.tmpfs_roots =
            prova_worker::shmroots::TmpfsRoots::dev_shm(prova_worker::health::DiskFloor::bytes(0));
        local_proof_sources = Some(p.sources);
        slots *= 2;
    }
    let worker = WorkerActor::spawn(WorkerActorArgs { context, slots, link: worker_outbox });
    let worker_ref = worker.clone();
    let _to_worker_pump = OwnedTask::spawn("local.to_worker", async move {
        while let Some(msg) = worker_inbox.recv().await {
            if worker_ref.tell(msg).await.is_err() {
                break;
            }
        }
    });

    let (done_tx, done_rx) = oneshot::channel();
    let run = RunActor::spawn(RunActorArgs {
        plan,
        options,
        weights,
        work: Arc::new(to_worker),
        worker: WorkerId::local(),
        events,
        done: done_tx,
        first_attempt: 1,
        cache,
        exec: ExecMode::InPlace,
        local_proof_sources,
    });
    let run_ref = run.clone();
    let _from_worker_pump = OwnedTask::spawn("local.from_worker", async move {
        while let Some(msg) = from_worker.recv().await {
            if run_ref.tell(msg).await.is_err() {
                break;
            }
        }
    });
    let run_ref = run.clone();
    let _signals = OwnedTask::spawn("local.signals", async move {
        wait_for_signal().await;
        let _ = run_ref.tell(Interrupt).await;
    });

    run.tell(Begin).await.map_err(|e| anyhow::anyhow!("run actor: {e}"))?;
    let summary =
        done_rx.await.map_err(|_| anyhow::anyhow!("the run actor stopped without a summary"))?;
    worker.kill();
    Ok(summary)
}

/// The REAPI layer over `local`, when the run names it (`--cache …,reapi:MODE`) or, with no
/// `--cache`, when `prova.toml` has `[cache.reapi]`. A server that does not answer, or a
/// client that cannot be built (bad TLS files), is one warning: the run goes on locally.
/// `ci`: the value of `CI`, which decides whether the run writes to it by default.
pub async fn reapi_layer(
    root: &std::path::Path,
    spec: Option<crate::args::CacheSpec>,
    local: &prova_coordinator::layers::LocalLayer,
    ci: Option<&str>,
) -> anyhow::Result<Option<prova_coordinator::layers::reapi::ReapiLayer>> {
    use prova_coordinator::layers::reapi::{ReapiClient, ReapiLayer};
    let named = spec.map(|s| s.reapi);
    if named == Some(None) {
        return Ok(None); // --cache without reapi
    }
    let Some(cfg) = prova_coordinator::config::reapi::load(root)? else {
        if named.is_some() {
            anyhow::bail!(
                "--cache reapi:…: prova.toml has no [cache.reapi] table (set `endpoint = \"grpc://HOST:PORT\"` there)"
            );
        }
        return Ok(None);
    };
    // A shared cache: unless `--cache` names the mode, only the runs `upload` allows (by
    // default CI's) write to it; `upload = "never"` holds even against `--cache reapi:rw`.
    let writes = cfg.upload.writes(ci);
    let mode = match named.flatten() {
        Some(m) if m.write && cfg.upload == prova_coordinator::layers::reapi::Upload::Never => {
            anyhow::bail!(
                "--cache …,reapi:rw: [cache.reapi] sets upload = \"never\" (this server is only read)"
            );
        }
        Some(m) => m,
        None => crate::args::LayerMode { read: true, write: writes },
    };
    let client = match ReapiClient::new(&cfg) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(
                "the REAPI cache is unavailable, continuing with the local cache only: {e}"
            );
            return Ok(None);
        }
    };
    let layer = ReapiLayer::new(local.clone(), client, mode.read, mode.write);
    layer.check().await;
    Ok(Some(layer))
}

/// Resolves on the first SIGINT or SIGTERM after the call.
pub async fn wait_for_signal() {
    signal_listener().await;
}

/// A future that resolves on the first SIGINT or SIGTERM delivered after this call returns.
/// The handlers are registered here, not when the future is first polled: a signal that
/// arrives between the two would otherwise be lost (tokio's listeners only see deliveries
/// after they exist), and a second Ctrl-C sent right after an `Interrupt` went out was.
pub fn signal_listener() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let streams = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
    async move {
        let (Ok(mut int), Ok(mut term)) = streams else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}
