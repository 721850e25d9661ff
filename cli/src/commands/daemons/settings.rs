//! The daemons' flags over their config files, resolved by pure functions: what
//! `prova coordinator`, `prova worker` and `prova worker --reapi-bot` will use, before
//! anything is read (certificates, token files), probed (bubblewrap) or resolved (DNS).
//! Flags win over the file; the file over the defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use prova_worker::start::ExecRoots;

use crate::args::{CoordinatorArgs, WorkerArgs, parse_size};
use crate::daemon_config::{CoordinatorFile, WorkerFile};

/// Where a coordinator listens unless told (`deploy/` is checked against its port).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:7700";

/// Default blob cache bound of a worker.
pub const DEFAULT_BLOB_CACHE: u64 = 10 << 30;

/// What a daemon's defaults read of its host: captured once, passed in.
#[derive(Clone, Debug)]
pub struct DaemonEnv {
    /// Cores (the default slots).
    pub cores: u32,
    /// The temporary directory (the default work dirs are under it).
    pub temp_dir: PathBuf,
    /// The host name (a bot's default name), when it has one.
    pub hostname: Option<String>,
}

impl DaemonEnv {
    /// This host's.
    pub fn capture() -> Self {
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as u32,
            temp_dir: std::env::temp_dir(),
            hostname: nix::unistd::gethostname().ok().map(|h| h.to_string_lossy().into_owned()),
        }
    }
}

/// `prova coordinator`'s settings before its files are read.
#[derive(Debug, PartialEq, Eq)]
pub struct CoordinatorChoice {
    /// Where the QUIC endpoint binds.
    pub listen: SocketAddr,
    /// The certificate bundle's directory.
    pub certs: PathBuf,
    /// The farm cache.
    pub cache_dir: PathBuf,
    /// `--trust proven`.
    pub trust_proven: bool,
    /// Bytes one client certificate's uploads may hold.
    pub client_quota: u64,
    /// The HTTP listener's address, when asked for.
    pub http: Option<SocketAddr>,
    /// Its token file.
    pub http_token_file: Option<PathBuf>,
}

/// Resolves `prova coordinator`'s flags over its config file. Pure.
pub fn resolve_coordinator(
    args: CoordinatorArgs,
    file: CoordinatorFile,
) -> anyhow::Result<CoordinatorChoice> {
    let listen = args.listen.or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen: SocketAddr = listen.parse().with_context(|| format!("--listen {listen}"))?;
    let certs = args
        .certs
        .or(file.certs)
        .context("--certs DIR is required (create it with `prova certs init`)")?;
    let cache_dir = args.cache_dir.or(file.cache_dir).context("--cache-dir DIR is required")?;
    let trust_proven = match args.trust.or(file.trust).as_deref().unwrap_or("ci") {
        "ci" => false,
        "proven" => true,
        other => anyhow::bail!("--trust {other}: use `ci` or `proven`"),
    };
    let client_quota = match file.client_blob_quota {
        Some(s) => parse_size(&s).map_err(|e| anyhow::anyhow!("client_blob_quota: {e}"))?,
        None => prova_coordinator::farm::server::DEFAULT_CLIENT_QUOTA,
    };
    let http = match args.http.or(file.http) {
        Some(a) => Some(a.parse::<SocketAddr>().with_context(|| format!("--http {a}"))?),
        None => None,
    };
    let http_token_file = args.http_token_file.or(file.http_token_file);
    if http.is_none() && http_token_file.is_some() {
        anyhow::bail!("--http-token-file is given but --http ADDR is not");
    }
    Ok(CoordinatorChoice {
        listen,
        certs,
        cache_dir,
        trust_proven,
        client_quota,
        http,
        http_token_file,
    })
}

/// `prova worker`'s settings before its bundle is read, its sandbox probed and its
/// coordinator's name resolved.
#[derive(Debug, PartialEq, Eq)]
pub struct WorkerChoice {
    /// The coordinator, HOST:PORT.
    pub join: String,
    /// The name its certificate must carry.
    pub server_name: String,
    /// The certificate bundle's directory.
    pub certs: PathBuf,
    /// Concurrent tasks.
    pub slots: u32,
    /// Exec roots, blob cache, staged artifacts.
    pub work_dir: PathBuf,
    /// Labels placement can require.
    pub labels: BTreeMap<String, String>,
    /// Blob cache bound.
    pub blob_cache_size: u64,
    /// The disk floor.
    pub min_free_disk: u64,
    /// `bwrap` or `none`.
    pub sandbox: String,
    /// Where exec roots go.
    pub exec_roots: ExecRoots,
}

/// `--exec-roots`: `auto`, `work-dir`, or a tmpfs's absolute path. Pure.
pub fn exec_roots(word: Option<&str>) -> anyhow::Result<ExecRoots> {
    match word {
        None | Some("auto") => Ok(ExecRoots::Auto),
        Some("work-dir") => Ok(ExecRoots::WorkDir),
        Some(p) if Path::new(p).is_absolute() => Ok(ExecRoots::Tmpfs(PathBuf::from(p))),
        Some(other) => anyhow::bail!(
            "--exec-roots {other}: use `auto`, `work-dir` or the absolute path of a tmpfs"
        ),
    }
}

/// Resolves `prova worker`'s flags over its config file. Pure.
pub fn resolve_worker(
    args: WorkerArgs,
    file: WorkerFile,
    env: &DaemonEnv,
) -> anyhow::Result<WorkerChoice> {
    let join = args.join.or(file.join).context("--join HOST:PORT is required")?;
    let certs = args
        .certs
        .or(file.certs)
        .context("--certs DIR is required (create it with `prova certs issue`)")?;
    let slots = args.slots.or(file.slots).unwrap_or(env.cores).max(1);
    let work_dir =
        args.work_dir.or(file.work_dir).unwrap_or_else(|| env.temp_dir.join("prova-worker"));
    let labels = labels(file.labels, &args.labels)?;
    let blob_cache_size = match (args.blob_cache_size, file.blob_cache_size) {
        (Some(n), _) => n,
        (None, Some(s)) => parse_size(&s).map_err(|e| anyhow::anyhow!("blob_cache_size: {e}"))?,
        (None, None) => DEFAULT_BLOB_CACHE,
    };
    let min_free_disk = args.min_free_disk.unwrap_or(prova_worker::health::DEFAULT_MIN_FREE_DISK);
    let sandbox = args.sandbox.or(file.sandbox).unwrap_or_else(|| "bwrap".to_owned());
    let server_name = args.server_name.or(file.server_name).unwrap_or_else(|| host_of(&join));
    let exec_roots = exec_roots(args.exec_roots.or(file.exec_roots).as_deref())?;
    Ok(WorkerChoice {
        join,
        server_name,
        certs,
        slots,
        work_dir,
        labels,
        blob_cache_size,
        min_free_disk,
        sandbox,
        exec_roots,
    })
}

/// `prova worker --reapi-bot URL`'s settings before the sandbox is probed.
#[derive(Debug, PartialEq, Eq)]
pub struct BotChoice {
    /// The REAPI server.
    pub endpoint: String,
    /// Its instance name.
    pub instance: String,
    /// The bot's name.
    pub name: String,
    /// Concurrent actions.
    pub slots: u32,
    /// Where actions run.
    pub work_dir: PathBuf,
    /// Platform properties it offers.
    pub labels: BTreeMap<String, String>,
    /// `bwrap` or `none`.
    pub sandbox: String,
}

/// Resolves `prova worker --reapi-bot`'s flags (a bot reads no config file). Pure.
pub fn resolve_bot(args: WorkerArgs, env: &DaemonEnv) -> anyhow::Result<BotChoice> {
    Ok(BotChoice {
        labels: labels(BTreeMap::new(), &args.labels)?,
        endpoint: args.reapi_bot.unwrap_or_default(),
        instance: args.reapi_instance,
        name: args
            .bot_name
            .or_else(|| env.hostname.clone())
            .unwrap_or_else(|| "prova-bot".to_owned()),
        slots: args.slots.unwrap_or(env.cores).max(1),
        work_dir: args.work_dir.unwrap_or_else(|| env.temp_dir.join("prova-reapi-bot")),
        sandbox: args.sandbox.unwrap_or_else(|| "bwrap".to_owned()),
    })
}

/// `--label KEY=VALUE` flags over the file's labels.
fn labels(
    mut base: BTreeMap<String, String>,
    flags: &[String],
) -> anyhow::Result<BTreeMap<String, String>> {
    for l in flags {
        let (k, v) = l.split_once('=').with_context(|| format!("--label {l}: want KEY=VALUE"))?;
        base.insert(k.to_owned(), v.to_owned());
    }
    Ok(base)
}

/// The host part of `HOST:PORT` (brackets of an IPv6 literal removed).
pub fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']').to_owned()
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
