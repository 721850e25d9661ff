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
use prova_coordinator::farm::observe::Observer;
use prova_coordinator::farm::server::{self, Shared};
use prova_coordinator::http::HttpListener;
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::{Bundle, Role, endpoint};
// The worker's start-up lives in its crate; re-exported for the in-process test farm.
pub use prova_worker::start::{self, WorkerSettings, run_worker};
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
    let client_quota = match file.client_blob_quota {
        Some(s) => parse_size(&s).map_err(|e| anyhow::anyhow!("client_blob_quota: {e}"))?,
        None => server::DEFAULT_CLIENT_QUOTA,
    };
    let http = match args.http.or(file.http) {
        Some(a) => Some(a.parse::<SocketAddr>().with_context(|| format!("--http {a}"))?),
        None => None,
    };
    let token_file = args.http_token_file.or(file.http_token_file);
    let http_token = match &token_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("--http-token-file {}", f.display()))?,
        ),
        None => None,
    };
    if http.is_none() && token_file.is_some() {
        anyhow::bail!("--http-token-file is given but --http ADDR is not");
    }
    let settings = CoordinatorSettings {
        listen,
        bundle,
        cache_dir,
        trust_proven,
        client_quota,
        http: http.map(|addr| HttpSettings { addr, token: http_token }),
    };
    let rt = common::runtime()?;
    rt.block_on(async move {
        let bound = bind_coordinator(settings).await?;
        let http = bound.http_addr().map(|a| format!(", http http://{a}/")).unwrap_or_default();
        common::print(&format!(
            "prova coordinator listening on {} (cache {}{http})\n",
            bound.addr,
            bound.cache_dir.display()
        ))?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let _signals = OwnedTask::spawn("signals", async move {
            crate::local::wait_for_signal().await;
            stop.cancel();
        });
        bound.serve(shutdown).await;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(Code::Ok)
}

/// A coordinator's resolved settings.
pub struct CoordinatorSettings {
    /// The UDP address to bind (`127.0.0.1:0` picks a port).
    pub listen: SocketAddr,
    /// Its certificate bundle (role `coordinator`).
    pub bundle: Bundle,
    /// The farm cache directory.
    pub cache_dir: PathBuf,
    /// `--trust proven`: ci entries wait for a second worker's agreement.
    pub trust_proven: bool,
    /// The most bytes one `client` certificate's uploads may hold in the farm cache.
    pub client_quota: u64,
    /// The read-only HTTP listener, when asked for.
    pub http: Option<HttpSettings>,
}

/// `--http ADDR` and its token.
pub struct HttpSettings {
    /// Where to listen (TCP).
    pub addr: SocketAddr,
    /// The bearer token (the file's content, trimmed when checked).
    pub token: Option<String>,
}

/// A coordinator bound to its address with its cache open, not yet serving.
pub struct BoundCoordinator {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its cache directory.
    pub cache_dir: PathBuf,
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    http: Option<HttpListener>,
}

/// Opens the farm cache, starts the farm actor and binds the endpoint. Runs inside a tokio
/// runtime; the binary and the in-process test harness both start coordinators this way.
pub async fn bind_coordinator(s: CoordinatorSettings) -> anyhow::Result<BoundCoordinator> {
    let (store, _join) = CacheThread::open(&s.cache_dir)
        .with_context(|| format!("cannot open the farm cache at {}", s.cache_dir.display()))?;
    let tmp = store.call(|st| st.tmp_dir()).await?;
    let http = match s.http {
        Some(h) => Some(prova_coordinator::http::bind(h.addr, h.token).await?),
        None => None,
    };
    let farm = FarmActor::spawn(Some(store.clone()));
    let endpoint = endpoint::server(s.listen, &s.bundle)?;
    let addr = endpoint.local_addr()?;
    let shared = Arc::new(Shared {
        farm,
        store,
        tmp,
        trust_proven: s.trust_proven,
        client_quota: s.client_quota,
        observe: Arc::new(Observer::default()),
    });
    Ok(BoundCoordinator { addr, cache_dir: s.cache_dir, endpoint, shared, http })
}

impl BoundCoordinator {
    /// The HTTP listener's address, when there is one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.addr)
    }

    /// Serves until `shutdown`, then closes every connection.
    pub async fn serve(self, shutdown: CancellationToken) {
        let _http = self.http.map(|h| {
            let (shared, stop) = (self.shared.clone(), shutdown.clone());
            OwnedTask::spawn("http", h.serve(shared, stop))
        });
        server::serve(self.endpoint, self.shared.clone(), shutdown).await;
        let _ = self.shared.farm.stop_gracefully().await;
    }
}

/// Runs a worker.
pub fn worker(args: WorkerArgs) -> anyhow::Result<Code> {
    if args.reapi_bot.is_some() {
        return reapi_bot(args);
    }
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
    let min_free_disk = args.min_free_disk.unwrap_or(prova_worker::health::DEFAULT_MIN_FREE_DISK);
    let mode = args.sandbox.or(file.sandbox).unwrap_or_else(|| "bwrap".to_owned());
    let (use_sandbox, sandbox_desc) = start::sandbox_mode(&mode)?;
    let bundle = Bundle::load(&certs)?;
    start::check_bundle(&bundle, &certs)?;
    let server_name = args.server_name.or(file.server_name).unwrap_or_else(|| host_of(&join));
    let rt = common::runtime()?;
    rt.block_on(async move {
        let settings = WorkerSettings {
            join: resolve(&join).await?,
            server_name,
            bundle,
            slots,
            work_dir,
            labels,
            blob_cache_size,
            sandbox: use_sandbox,
            sandbox_desc,
            min_free_disk,
        };
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let _signals = OwnedTask::spawn("signals", async move {
            crate::local::wait_for_signal().await;
            stop.cancel();
        });
        let announce = |line: &str| common::print(line).map_err(std::io::Error::other);
        Ok::<_, anyhow::Error>(run_worker(settings, shutdown, announce).await?)
    })?;
    Ok(Code::Ok)
}

/// `prova worker --reapi-bot URL`: bots of a REAPI farm (`prova_worker::reapi_bot`).
fn reapi_bot(args: WorkerArgs) -> anyhow::Result<Code> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let mut labels = std::collections::BTreeMap::new();
    for l in &args.labels {
        let (k, v) = l.split_once('=').with_context(|| format!("--label {l}: want KEY=VALUE"))?;
        labels.insert(k.to_owned(), v.to_owned());
    }
    let (sandbox, _) = start::sandbox_mode(args.sandbox.as_deref().unwrap_or("bwrap"))?;
    let name = args.bot_name.unwrap_or_else(|| {
        nix::unistd::gethostname()
            .map_or_else(|_| "prova-bot".to_owned(), |h| h.to_string_lossy().into_owned())
    });
    let settings = prova_worker::reapi_bot::BotSettings {
        endpoint: args.reapi_bot.unwrap_or_default(),
        instance: args.reapi_instance,
        name,
        slots: args.slots.unwrap_or(cores).max(1),
        work_dir: args.work_dir.unwrap_or_else(|| std::env::temp_dir().join("prova-reapi-bot")),
        labels,
        sandbox,
    };
    let rt = common::runtime()?;
    rt.block_on(async move {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let _signals = OwnedTask::spawn("signals", async move {
            crate::local::wait_for_signal().await;
            stop.cancel();
        });
        let announce = |line: &str| common::print(line).map_err(std::io::Error::other);
        prova_worker::reapi_bot::run_bot(settings, shutdown, announce).await
    })?;
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
