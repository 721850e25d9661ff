//! `prova coordinator` and `prova worker`: the farm's long-running roles. Each resolves its
//! config file and flags into settings, prints where it is (tests read that line), and runs
//! until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use kameo::prelude::*;
use prova_coordinator::cache::CacheThread;
use prova_coordinator::farm::actor::FarmActor;
use prova_coordinator::farm::server::{self, Shared};
use prova_protocol::transport::{Bundle, Role, endpoint};
use prova_protocol::wire::WorkerInfo;
use prova_worker::actor::{WorkerActor, WorkerArgs as ActorArgs};
use prova_worker::blobcache::BlobCache;
use prova_worker::exec::LocalExecutor;
use prova_worker::runner::{RunnerConfig, WorkerContext};
use prova_worker::{sandbox, session};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::common;
use crate::args::{CoordinatorArgs, WorkerArgs, parse_size};
use crate::daemon_config::{CoordinatorFile, WorkerFile, load};
use crate::exit::Code;

/// Default blob cache bound of a worker.
pub const DEFAULT_BLOB_CACHE: u64 = 10 << 30;

/// Runs a coordinator.
pub fn coordinator(args: CoordinatorArgs) -> anyhow::Result<Code> {
    let file: CoordinatorFile = load(args.config.as_deref())?;
    let listen = args.listen.or(file.listen).unwrap_or_else(|| "0.0.0.0:7700".to_owned());
    let listen: SocketAddr = listen.parse().with_context(|| format!("--listen {listen}"))?;
    let certs = args
        .certs
        .or(file.certs)
        .context("--certs DIR is required (create it with `prova certs init`)")?;
    let cache_dir = args.cache_dir.or(file.cache_dir).context("--cache-dir DIR is required")?;
    let trust = args.trust.or(file.trust).unwrap_or_else(|| "ci".to_owned());
    let trust_proven = match trust.as_str() {
        "ci" => false,
        "proven" => true,
        other => anyhow::bail!("--trust {other}: use `ci` or `proven`"),
    };
    let bundle = Bundle::load(&certs)?;
    if bundle.identity.role != Role::Coordinator {
        anyhow::bail!(
            "{} holds a {} certificate, not a coordinator's",
            certs.display(),
            bundle.identity.role
        );
    }
    let rt = common::runtime()?;
    rt.block_on(async move {
        let (store, _join) = CacheThread::open(&cache_dir)
            .with_context(|| format!("cannot open the farm cache at {}", cache_dir.display()))?;
        let tmp = store.call(|s| s.tmp_dir()).await?;
        let farm = FarmActor::spawn(());
        let ep = endpoint::server(listen, &bundle)?;
        let local = ep.local_addr()?;
        common::print(&format!(
            "prova coordinator listening on {local} (cache {})\n",
            cache_dir.display()
        ))?;
        let shared = Arc::new(Shared { farm, store, tmp, trust_proven });
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            crate::local::wait_for_signal().await;
            stop.cancel();
        });
        server::serve(ep, shared, shutdown).await;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(Code::Ok)
}

/// Runs a worker.
pub fn worker(args: WorkerArgs) -> anyhow::Result<Code> {
    let file: WorkerFile = load(args.config.as_deref())?;
    let join = args.join.or(file.join).context("--join HOST:PORT is required")?;
    let certs = args
        .certs
        .or(file.certs)
        .context("--certs DIR is required (create it with `prova certs issue`)")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let slots = args.slots.or(file.slots).unwrap_or(cores).max(1);
    let work_dir: PathBuf = args
        .work_dir
        .or(file.work_dir)
        .unwrap_or_else(|| std::env::temp_dir().join("prova-worker"));
    let mut labels = file.labels;
    for l in &args.labels {
        let (k, v) = l.split_once('=').with_context(|| format!("--label {l}: want KEY=VALUE"))?;
        labels.insert(k.to_owned(), v.to_owned());
    }
    let blob_cache_size = match (args.blob_cache_size, file.blob_cache_size) {
        (Some(n), _) => n,
        (None, Some(s)) => parse_size(&s).map_err(|e| anyhow::anyhow!("blob_cache_size: {e}"))?,
        (None, None) => DEFAULT_BLOB_CACHE,
    };
    let mode = args.sandbox.or(file.sandbox).unwrap_or_else(|| "bwrap".to_owned());
    let (use_sandbox, sandbox_desc) = match mode.as_str() {
        "bwrap" => match sandbox::detect() {
            sandbox::SandboxStatus::Bwrap { version } => (true, format!("bwrap {version}")),
            sandbox::SandboxStatus::Unavailable { reason } => {
                anyhow::bail!(
                    "bubblewrap cannot run here ({reason}); install it (apt-get install bubblewrap) or start the worker with --sandbox=none"
                )
            }
        },
        "none" => (false, "none".to_owned()),
        other => anyhow::bail!("--sandbox {other}: use `bwrap` or `none`"),
    };
    let bundle = Bundle::load(&certs)?;
    if bundle.identity.role != Role::Worker {
        anyhow::bail!(
            "{} holds a {} certificate; a worker needs a worker bundle",
            certs.display(),
            bundle.identity.role
        );
    }
    let name = bundle.identity.name.clone();
    let server_name = args.server_name.or(file.server_name).unwrap_or_else(|| host_of(&join));
    let rt = common::runtime()?;
    let result = rt.block_on(async move {
        let addr = resolve(&join).await?;
        std::fs::create_dir_all(&work_dir)
            .with_context(|| format!("cannot create {}", work_dir.display()))?;
        // Absolute from here on: sandboxes and tracers run in other directories.
        let work_dir = std::fs::canonicalize(&work_dir)
            .with_context(|| format!("cannot resolve {}", work_dir.display()))?;
        let blobs = BlobCache::open(&work_dir.join("blobs"), blob_cache_size)
            .with_context(|| format!("cannot open the blob cache in {}", work_dir.display()))?;
        let (remote, conn_tx) = session::blobs();
        let (link, reports) = mpsc::channel(256);
        let context = WorkerContext {
            executor: Arc::new(LocalExecutor),
            config: RunnerConfig::from_host(),
            work_dir: work_dir.clone(),
            blobs: Some(blobs),
            remote: Some(Arc::new(remote)),
            sandbox: use_sandbox,
            strace: sandbox::strace_available(),
        };
        let worker = WorkerActor::spawn(ActorArgs { context, slots: slots as usize, link });
        let info = WorkerInfo {
            slots,
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            labels,
            sandbox: sandbox_desc.clone(),
            running: Vec::new(),
        };
        common::print(&format!(
            "prova worker {name} joining {addr} ({slots} slots, sandbox {sandbox_desc})\n"
        ))?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            crate::local::wait_for_signal().await;
            stop.cancel();
        });
        let cfg = session::SessionConfig { addr, server_name, bundle: Arc::new(bundle), info };
        let r = session::run(cfg, worker.clone(), reports, conn_tx, shutdown).await;
        worker.kill();
        r.map_err(anyhow::Error::from)
    });
    result?;
    Ok(Code::Ok)
}

/// The host part of `HOST:PORT` (brackets of an IPv6 literal removed).
pub fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']').to_owned()
}

/// Resolves `HOST:PORT`.
pub async fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("cannot resolve {addr}"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))
}
