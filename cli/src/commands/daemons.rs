//! `prova coordinator` and `prova worker`: the farm's long-running roles. Each resolves its
//! config file and flags into settings (`settings.rs`, pure), reads what they name
//! (certificates, token files), and hands them to its crate's start-up —
//! `prova_coordinator::start`, `prova_worker::start` — which prints where it is (tests
//! read that line) and runs until SIGINT/SIGTERM.

pub mod settings;

use std::net::SocketAddr;

use anyhow::Context as _;
// The start-ups live in their crates; re-exported for the in-process test farm.
pub use prova_coordinator::start::{
    BoundCoordinator, CoordinatorSettings, HttpSettings, bind_coordinator, run_coordinator,
};
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::Bundle;
pub use prova_worker::start::{self, WorkerSettings, run_worker};
use tokio_util::sync::CancellationToken;

use self::settings::{CoordinatorChoice, DaemonEnv};
pub use self::settings::{DEFAULT_BLOB_CACHE, host_of};
use super::common;
use crate::args::{CoordinatorArgs, WorkerArgs};
use crate::daemon_config::load;
use crate::exit::Code;

/// Runs a coordinator.
pub fn coordinator(args: CoordinatorArgs) -> anyhow::Result<Code> {
    let file = load(args.config.as_deref())?;
    let settings = coordinator_settings(settings::resolve_coordinator(args, file)?)?;
    let rt = common::runtime()?;
    rt.block_on(async move {
        let (shutdown, _signals) = until_signal();
        let announce = |line: &str| common::print(line).map_err(std::io::Error::other);
        run_coordinator(settings, shutdown, announce).await
    })?;
    Ok(Code::Ok)
}

/// Reads what a coordinator's resolved choice names: its bundle and token file.
fn coordinator_settings(c: CoordinatorChoice) -> anyhow::Result<CoordinatorSettings> {
    let bundle = Bundle::load(&c.certs)?;
    prova_coordinator::start::check_bundle(&bundle, &c.certs)?;
    let token = match &c.http_token_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("--http-token-file {}", f.display()))?,
        ),
        None => None,
    };
    Ok(CoordinatorSettings {
        listen: c.listen,
        bundle,
        cache_dir: c.cache_dir,
        trust_proven: c.trust_proven,
        client_quota: c.client_quota,
        http: c.http.map(|addr| HttpSettings { addr, token }),
    })
}

/// A token cancelled on the first SIGINT or SIGTERM, and the task that waits for them (on
/// the current runtime; stopped when dropped).
fn until_signal() -> (CancellationToken, OwnedTask<()>) {
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let task = OwnedTask::spawn("signals", async move {
        crate::local::wait_for_signal().await;
        stop.cancel();
    });
    (shutdown, task)
}

/// Runs a worker.
pub fn worker(args: WorkerArgs) -> anyhow::Result<Code> {
    let env = DaemonEnv::capture();
    if args.reapi_bot.is_some() {
        return reapi_bot(settings::resolve_bot(args, &env)?);
    }
    let file = load(args.config.as_deref())?;
    let c = settings::resolve_worker(args, file, &env)?;
    let (sandbox, sandbox_desc) = start::sandbox_mode(&c.sandbox)?;
    let bundle = Bundle::load(&c.certs)?;
    start::check_bundle(&bundle, &c.certs)?;
    let rt = common::runtime()?;
    rt.block_on(async move {
        let settings = WorkerSettings {
            join: resolve(&c.join).await?,
            server_name: c.server_name,
            bundle,
            slots: c.slots,
            work_dir: c.work_dir,
            labels: c.labels,
            blob_cache_size: c.blob_cache_size,
            sandbox,
            sandbox_desc,
            min_free_disk: c.min_free_disk,
            exec_roots: c.exec_roots,
        };
        let (shutdown, _signals) = until_signal();
        let announce = |line: &str| common::print(line).map_err(std::io::Error::other);
        Ok::<_, anyhow::Error>(run_worker(settings, shutdown, announce).await?)
    })?;
    Ok(Code::Ok)
}

/// `prova worker --reapi-bot URL`: bots of a REAPI farm (`prova_worker::reapi_bot`).
fn reapi_bot(c: settings::BotChoice) -> anyhow::Result<Code> {
    let (sandbox, _) = start::sandbox_mode(&c.sandbox)?;
    let settings = prova_worker::reapi_bot::BotSettings {
        endpoint: c.endpoint,
        instance: c.instance,
        name: c.name,
        slots: c.slots,
        work_dir: c.work_dir,
        labels: c.labels,
        sandbox,
    };
    let rt = common::runtime()?;
    rt.block_on(async move {
        let (shutdown, _signals) = until_signal();
        let announce = |line: &str| common::print(line).map_err(std::io::Error::other);
        prova_worker::reapi_bot::run_bot(settings, shutdown, announce).await
    })?;
    Ok(Code::Ok)
}

/// Resolves `HOST:PORT`.
pub async fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("cannot resolve {addr}"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))
}
