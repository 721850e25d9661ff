//! `prova worker --reapi-bot grpc://HOST:PORT`: a prova worker joins an existing REAPI farm
//! (BuildGrid) as bots, speaking the Remote Workers API (`CreateBotSession` /
//! `UpdateBotSession`, `google.devtools.remoteworkers.v1test2`). Each slot is one bot
//! session of capacity one (`<name>-<slot>`): it long-polls for a lease, accepts it
//! (`ACTIVE`), runs the lease's action ([`run`]: fetch the input root, run the command in an
//! exec root — under bubblewrap when the worker has it —, upload the outputs) while
//! reporting every [`KEEPALIVE`] (which is how a cancelled lease is noticed: the running
//! command is killed), then reports it `COMPLETED` with the `ActionResult`, whose
//! `ExecutedActionMetadata.worker` names this bot. Lease decisions are pure ([`lease`]).
//!
//! Platform properties offered: `OSFamily` and `ISA` (this machine's, as prova folds them),
//! and the worker's labels.

pub mod cas;
pub mod lease;
pub mod run;

use std::path::{Path, PathBuf};
use std::time::Duration;

use prova_protocol::task::OwnedTask;
use prova_reapi_proto::bots::bots_client::BotsClient;
use prova_reapi_proto::bots::{self, BotSession, BotStatus};
use prova_reapi_proto::google::rpc;
use prova_reapi_proto::re;
use tokio_util::sync::CancellationToken;
use tonic::Request;
use tonic::transport::{Channel, Endpoint};

use self::cas::Cas;
use self::lease::{Payload, Plan};

/// How often a bot running a lease reports (and learns whether it was cancelled).
pub const KEEPALIVE: Duration = Duration::from_secs(1);
/// The deadline of an idle bot's long poll for work.
const POLL: Duration = Duration::from_secs(20);
/// Waits after a failed call, doubling to [`MAX_BACKOFF`].
const BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The bot's settings.
#[derive(Clone, Debug)]
pub struct BotSettings {
    /// `grpc://HOST:PORT` (plain text) or `grpcs://HOST:PORT` (TLS, system roots).
    pub endpoint: String,
    /// The REAPI instance name (the bot session's parent).
    pub instance: String,
    /// The bot's name (`ExecutedActionMetadata.worker`); sessions are `<name>-<slot>`.
    pub name: String,
    /// Sessions (leases run at once).
    pub slots: u32,
    /// Exec roots and the blob store.
    pub work_dir: PathBuf,
    /// Platform properties offered besides `OSFamily`/`ISA`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Run under bubblewrap.
    pub sandbox: bool,
}

/// What stopped a bot.
#[derive(Debug, thiserror::Error)]
pub enum BotError {
    /// The endpoint is not `grpc(s)://HOST:PORT`.
    #[error("--reapi-bot `{0}`: want grpc://HOST:PORT or grpcs://HOST:PORT")]
    Endpoint(String),
    /// A call failed.
    #[error("{what}: {code:?}: {message}")]
    Call {
        /// Which call.
        what: &'static str,
        /// Its status code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
    /// A blob or message is missing or malformed.
    #[error("{0}")]
    Blob(String),
    /// Local I/O.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

impl BotError {
    fn call(what: &'static str, s: &tonic::Status) -> Self {
        Self::Call { what, code: s.code(), message: s.message().to_owned() }
    }

    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_owned(), source }
    }
}

fn channel(endpoint: &str) -> Result<Channel, BotError> {
    let bad = || BotError::Endpoint(endpoint.to_owned());
    let (tls, rest) = if let Some(r) = endpoint.strip_prefix("grpcs://") {
        (true, r)
    } else if let Some(r) = endpoint.strip_prefix("grpc://") {
        (false, r)
    } else {
        return Err(bad());
    };
    let uri = format!("{}://{}", if tls { "https" } else { "http" }, rest.trim_end_matches('/'));
    let mut ep =
        Endpoint::from_shared(uri).map_err(|_| bad())?.connect_timeout(Duration::from_secs(5));
    if tls {
        ep = ep
            .tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots())
            .map_err(|_| bad())?;
    }
    Ok(ep.connect_lazy())
}

/// Runs the bot until `shutdown`; `announce` gets one line once it is set up.
pub async fn run_bot(
    s: BotSettings,
    shutdown: CancellationToken,
    announce: impl FnOnce(&str) -> std::io::Result<()>,
) -> Result<(), BotError> {
    let ch = channel(&s.endpoint)?;
    std::fs::create_dir_all(s.work_dir.join("roots")).map_err(|e| BotError::io(&s.work_dir, e))?;
    let cas = Cas::new(ch.clone(), s.instance.clone(), s.work_dir.join("cas"))?;
    let _ = announce(&format!(
        "reapi bot {} on {} ({} slots, sandbox {})\n",
        s.name,
        s.endpoint,
        s.slots,
        if s.sandbox { "bwrap" } else { "none" }
    ));
    let sessions: Vec<OwnedTask<()>> = (0..s.slots.max(1))
        .map(|slot| {
            let (s, ch, cas, stop) = (s.clone(), ch.clone(), cas.clone(), shutdown.clone());
            OwnedTask::spawn("bot.session", async move { session(&s, slot, ch, cas, stop).await })
        })
        .collect();
    shutdown.cancelled().await;
    for t in sessions {
        let _ = t.join().await;
    }
    Ok(())
}

fn worker_of(s: &BotSettings) -> bots::Worker {
    let mut props = vec![
        ("OSFamily".to_owned(), std::env::consts::OS.to_owned()),
        ("ISA".to_owned(), std::env::consts::ARCH.to_owned()),
    ];
    props.extend(s.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    // The primary device (the first) carries the properties a scheduler matches on.
    bots::Worker {
        devices: vec![bots::Device {
            handle: s.name.clone(),
            properties: props
                .iter()
                .map(|(key, value)| bots::device::Property {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
        }],
        properties: props
            .into_iter()
            .map(|(key, value)| bots::worker::Property { key, value })
            .collect(),
        configs: vec![bots::worker::Config { key: "capacity".into(), value: "1".into() }],
    }
}

/// One bot session, reconnecting (a new session) after failures until `stop`.
async fn session(s: &BotSettings, slot: u32, ch: Channel, cas: Cas, stop: CancellationToken) {
    let mut backoff = BACKOFF;
    while !stop.is_cancelled() {
        match serve(s, slot, ch.clone(), &cas, &stop).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(bot = %s.name, slot, "bot session: {e}");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop.cancelled() => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

async fn update(
    c: &mut BotsClient<Channel>,
    session: &BotSession,
    deadline: Duration,
) -> Result<BotSession, BotError> {
    let mut r = Request::new(bots::UpdateBotSessionRequest {
        name: session.name.clone(),
        bot_session: Some(session.clone()),
    });
    r.set_timeout(deadline);
    Ok(c.update_bot_session(r)
        .await
        .map_err(|e| BotError::call("UpdateBotSession", &e))?
        .into_inner())
}

/// The running lease: its id, the task running it and the token that kills it.
type Running = (String, OwnedTask<(rpc::Status, Option<re::ActionResult>)>, CancellationToken);

async fn serve(
    s: &BotSettings,
    slot: u32,
    ch: Channel,
    cas: &Cas,
    stop: &CancellationToken,
) -> Result<(), BotError> {
    let mut c = BotsClient::new(ch);
    let bot_id = format!("{}-{slot}", s.name);
    let mut r = Request::new(bots::CreateBotSessionRequest {
        parent: s.instance.clone(),
        bot_session: Some(BotSession {
            bot_id: bot_id.clone(),
            status: BotStatus::Ok as i32,
            worker: Some(worker_of(s)),
            ..Default::default()
        }),
    });
    r.set_timeout(POLL);
    let mut session = c
        .create_bot_session(r)
        .await
        .map_err(|e| BotError::call("CreateBotSession", &e))?
        .into_inner();
    let mut running: Option<Running> = None;
    loop {
        match lease::plan(&mut session, running.as_ref().map(|r| r.0.as_str())) {
            Plan::Keep => {}
            Plan::Cancel => {
                if let Some((_, task, token)) = running.take() {
                    token.cancel();
                    let _ = task.join().await;
                }
            }
            Plan::Start { id, payload } => {
                let token = CancellationToken::new();
                let (s2, cas2, t2, id2) = (s.clone(), cas.clone(), token.clone(), id.clone());
                let task = OwnedTask::spawn("bot.lease", async move {
                    execute(&s2, &cas2, payload, &id2, &t2).await
                });
                running = Some((id, task, token));
                // Accepting is reported at once: the server moves the job to executing.
                session = update(&mut c, &session, KEEPALIVE * 10).await?;
                continue;
            }
        }
        if stop.is_cancelled() {
            if let Some((_, task, token)) = running.take() {
                token.cancel();
                let _ = task.join().await;
            }
            return Ok(());
        }
        let Some((id, task, token)) = running.take() else {
            // Idle: long-poll for work (cut short by a shutdown).
            session = tokio::select! {
                r = update(&mut c, &session, POLL) => match r {
                    Err(BotError::Call { code: tonic::Code::DeadlineExceeded, .. }) => session,
                    other => other?,
                },
                () = stop.cancelled() => return Ok(()),
            };
            continue;
        };
        let mut task = task;
        tokio::select! {
            done = &mut task => {
                let (status, result) = done.unwrap_or_else(|e| {
                    (rpc::Status { code: tonic::Code::Internal as i32, message: e.to_string() }, None)
                });
                lease::complete(&mut session, &id, status, result);
                session = update(&mut c, &session, KEEPALIVE * 10).await?;
                lease::forget_completed(&mut session);
            }
            () = tokio::time::sleep(KEEPALIVE) => {
                running = Some((id, task, token));
                session = update(&mut c, &session, KEEPALIVE * 10).await?;
            }
            () = stop.cancelled() => {
                running = Some((id, task, token));
            }
        }
    }
}

/// Runs a lease's payload; its status and result for the report.
async fn execute(
    s: &BotSettings,
    cas: &Cas,
    payload: Payload,
    id: &str,
    cancel: &CancellationToken,
) -> (rpc::Status, Option<re::ActionResult>) {
    let failed =
        |code: tonic::Code, message: String| (rpc::Status { code: code as i32, message }, None);
    let action = match payload {
        Payload::Action(a) => a,
        Payload::Digest(d) => match cas.read(&d, 64 << 20).await {
            Ok(bytes) => match <re::Action as prost::Message>::decode(bytes.as_slice()) {
                Ok(a) => a,
                Err(e) => return failed(tonic::Code::InvalidArgument, format!("the Action: {e}")),
            },
            Err(e) => return failed(tonic::Code::FailedPrecondition, e.to_string()),
        },
        Payload::Unknown(why) => return failed(tonic::Code::InvalidArgument, why),
    };
    match run::run(s, cas, &action, id, cancel).await {
        Ok(Some(ran)) => (rpc::Status { code: 0, message: String::new() }, Some(ran.result)),
        Ok(None) => failed(tonic::Code::Cancelled, "cancelled".into()),
        Err(e @ BotError::Blob(_)) => failed(tonic::Code::FailedPrecondition, e.to_string()),
        Err(e) => failed(tonic::Code::Internal, e.to_string()),
    }
}
