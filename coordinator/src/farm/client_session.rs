//! A connected client (`ci`, `client` or `admin` certificate): blob queries, run submission,
//! status. A submitted run is driven by the farm actor (its state machine the same one local
//! mode uses, the farm's store as its cache layer: `submit.rs`, `runs.rs`); its events
//! stream back on the control stream, then the artifacts to download, then the
//! summary.

use std::sync::Arc;

use prova_protocol::task::OwnedTask;
use prova_protocol::transport::{Identity, Role, frame};
use prova_protocol::wire::{ClientMsg, CoordinatorReply, HeldState, RemoteTask, RunOptionsWire};
use prova_protocol::{Digest, WorkerId};
use tokio::sync::mpsc;

use super::actor::{DrainWorker, GetHeld, GetStatus, ReleaseWorker};
use super::forward::{Stream, forward};
use super::runs::InterruptRun;
use super::server::Shared;
use super::submit::start;
use crate::cache::{PENDING, TRUSTED, Visibility, untrusted_of};

/// Replies queued for a client: events of a busy run wait here, then hold the run back.
pub const CLIENT_QUEUE: usize = 1024;
/// Keys a hermeticity report lists at most (newest first).
pub const HERMETICITY_LIMIT: usize = 500;
/// The most tasks one run may submit.
pub const MAX_TASKS: u32 = 1_000_000;
/// Concurrency a farm run asks of the scheduler: placement, not the run, bounds real
/// parallelism (the farm's free slots).
pub const FARM_RUN_CONCURRENCY: usize = 100_000;

/// Runs the session until the client goes. A run still going is interrupted.
pub async fn run(
    send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    identity: Identity,
    shared: Arc<Shared>,
) {
    let (tx, writer) = forward::<CoordinatorReply, _>("farm->client", CLIENT_QUEUE, Stream(send));
    let mut session = Session { identity, shared, tx, pending: None, active: None };
    loop {
        let msg = match frame::read_msg::<_, ClientMsg>(&mut recv).await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => {
                tracing::info!(client = %session.identity, "control stream: {e}");
                break;
            }
        };
        tracing::debug!(hop = "client->farm", kind = client_msg_kind(&msg), client = %session.identity, "forward");
        let Some(reply) = session.answer(msg).await else { continue };
        if session.tx.send(reply).await.is_err() {
            break;
        }
    }
    let Session { active, tx, .. } = session;
    // The client went away: a run still going is interrupted (its tasks are cancelled).
    if let Some((run, task)) = active
        && !task.is_finished()
    {
        let _ = session.shared.farm.tell(InterruptRun(run)).await;
        let _ = task.join().await;
    }
    drop(tx);
    let _ = writer.join().await;
}

/// One client's session: who it is, its reply queue, the run it is announcing and the one
/// it runs.
struct Session {
    identity: Identity,
    shared: Arc<Shared>,
    tx: mpsc::Sender<CoordinatorReply>,
    /// A run announced by `Begin`: its options, its task count and the tasks sent so far.
    pending: Option<(RunOptionsWire, u32, Vec<RemoteTask>)>,
    /// The run started by `Go`, and its relay.
    active: Option<(prova_protocol::RunId, OwnedTask<()>)>,
}

impl Session {
    /// The reply to one message (`None`: it has none).
    async fn answer(&mut self, msg: ClientMsg) -> Option<CoordinatorReply> {
        let (identity, shared) = (&self.identity, &self.shared);
        let reply = match msg {
            ClientMsg::FindMissing { digests } => find_missing(identity, shared, digests).await,
            ClientMsg::Begin { options, tasks } => return self.begin(options, tasks),
            ClientMsg::Tasks(chunk) => match &mut self.pending {
                Some((_, n, tasks)) if tasks.len() + chunk.len() <= *n as usize => {
                    tasks.extend(chunk);
                    return None;
                }
                _ => CoordinatorReply::Error {
                    message: "tasks sent without Begin, or more than announced".to_owned(),
                },
            },
            ClientMsg::Go => return self.go().await,
            ClientMsg::Interrupt => {
                if let Some((run, _)) = &self.active {
                    let _ = shared.farm.tell(InterruptRun(*run)).await;
                }
                return None;
            }
            ClientMsg::Status => match shared.farm.ask(GetStatus).await {
                Ok(mut s) => {
                    s.coordinator = Some(facts(shared).await);
                    CoordinatorReply::Status(s)
                }
                Err(e) => CoordinatorReply::Error { message: e.to_string() },
            },
            ClientMsg::Drain { worker } => drain(identity, shared, worker).await,
            ClientMsg::Release { worker } => release(identity, shared, worker).await,
            ClientMsg::Hermeticity => hermeticity(shared).await,
        };
        Some(reply)
    }

    /// `Begin`: a run is announced (`None`), or refused.
    fn begin(&mut self, options: RunOptionsWire, tasks: u32) -> Option<CoordinatorReply> {
        let identity = &self.identity;
        let message = if !matches!(identity.role, Role::Ci | Role::Client) {
            format!("a `{}` certificate cannot submit runs", identity.role)
        } else if tasks > MAX_TASKS {
            format!("{tasks} tasks is over the limit of {MAX_TASKS}")
        } else if self.active.as_ref().is_some_and(|(_, t)| !t.is_finished()) {
            "a run is already in progress on this connection".to_owned()
        } else {
            self.pending = Some((options, tasks, Vec::new()));
            return None;
        };
        Some(CoordinatorReply::Error { message })
    }

    /// `Go`: the announced run starts (`None`), or an error.
    async fn go(&mut self) -> Option<CoordinatorReply> {
        let message = match self.pending.take() {
            Some((options, n, tasks)) if tasks.len() == n as usize => {
                match start(&self.identity, &self.shared, options, tasks, self.tx.clone()).await {
                    Ok(started) => {
                        self.active = Some(started);
                        return None;
                    }
                    Err(e) => e.to_string(),
                }
            }
            _ => "Go before every announced task was sent".to_owned(),
        };
        Some(CoordinatorReply::Error { message })
    }
}

/// `FindMissing`: which of `digests` the store lacks, as the client may know.
async fn find_missing(
    identity: &Identity,
    shared: &Shared,
    digests: Vec<Digest>,
) -> CoordinatorReply {
    let who = identity.clone();
    let missing = shared.store.call(move |s| missing_for(s, &who, digests)).await;
    match missing {
        Ok(Ok(digests)) => CoordinatorReply::Missing { digests },
        Ok(Err(e)) => CoordinatorReply::Error { message: e.to_string() },
        Err(e) => CoordinatorReply::Error { message: e.to_string() },
    }
}

/// `prova farm drain` (admin only).
async fn drain(identity: &Identity, shared: &Shared, worker: WorkerId) -> CoordinatorReply {
    if identity.role != Role::Admin {
        return CoordinatorReply::Error {
            message: format!("a `{}` certificate cannot drain workers", identity.role),
        };
    }
    match shared.farm.ask(DrainWorker(worker)).await {
        Ok(running) => CoordinatorReply::Draining { running },
        Err(e) => CoordinatorReply::Error { message: e.to_string() },
    }
}

/// `prova farm release` (admin only).
async fn release(identity: &Identity, shared: &Shared, worker: WorkerId) -> CoordinatorReply {
    if identity.role != Role::Admin {
        return CoordinatorReply::Error {
            message: format!("a `{}` certificate cannot release workers", identity.role),
        };
    }
    match shared.farm.ask(ReleaseWorker(worker)).await {
        Ok(was) => CoordinatorReply::Released { was },
        Err(e) => CoordinatorReply::Error { message: e.to_string() },
    }
}

/// `prova hermeticity --remote`: the report as JSON.
async fn hermeticity(shared: &Shared) -> CoordinatorReply {
    match shared.store.call(|s| crate::hermeticity::report(s, HERMETICITY_LIMIT)).await {
        Ok(Ok(r)) => match serde_json::to_string(&r) {
            Ok(json) => CoordinatorReply::Hermeticity(json),
            Err(e) => CoordinatorReply::Error { message: e.to_string() },
        },
        Ok(Err(e)) => CoordinatorReply::Error { message: e.to_string() },
        Err(e) => CoordinatorReply::Error { message: e.to_string() },
    }
}

/// A client message's kind, for the `client->farm` hop's debug log.
fn client_msg_kind(msg: &ClientMsg) -> &'static str {
    match msg {
        ClientMsg::FindMissing { .. } => "FindMissing",
        ClientMsg::Begin { .. } => "Begin",
        ClientMsg::Tasks(_) => "Tasks",
        ClientMsg::Go => "Go",
        ClientMsg::Interrupt => "Interrupt",
        ClientMsg::Status => "Status",
        ClientMsg::Hermeticity => "Hermeticity",
        ClientMsg::Drain { .. } => "Drain",
        ClientMsg::Release { .. } => "Release",
    }
}

/// The namespace a run of `identity` writes: a `ci` certificate's are trusted, a `client`'s
/// its own untrusted namespace.
pub fn namespace_of(identity: &Identity) -> String {
    if identity.role == Role::Ci { TRUSTED.to_owned() } else { untrusted_of(&identity.name) }
}

/// What blobs `identity` may fetch, or `None` for every blob (a worker needs every input it
/// is assigned; an admin operates the farm). A `ci` certificate sees the trusted tier
/// (artifacts and logs, `pending` included); a `client` the trusted tier's artifacts and its
/// own namespace's artifacts and logs; both what they uploaded themselves.
pub fn visibility_of(identity: &Identity) -> Option<Visibility> {
    match identity.role {
        Role::Ci => {
            let tier = vec![TRUSTED.to_owned(), PENDING.to_owned()];
            Some(Visibility {
                identity: identity.name.clone(),
                artifacts: tier.clone(),
                logs: tier,
            })
        }
        Role::Client => {
            let own = namespace_of(identity);
            Some(Visibility {
                identity: identity.name.clone(),
                artifacts: vec![TRUSTED.to_owned(), own.clone()],
                logs: vec![own],
            })
        }
        Role::Worker | Role::Admin | Role::Coordinator => None,
    }
}

/// Which of `digests` are missing for `identity`: absent, or present but not visible to it
/// (it must upload them itself, proving it holds the bytes; the answer never tells it what
/// another identity stored).
fn missing_for(
    s: &crate::cache::Store,
    identity: &Identity,
    digests: Vec<Digest>,
) -> Result<Vec<Digest>, crate::cache::CacheError> {
    let seen = visibility_of(identity);
    let mut missing = Vec::new();
    for d in digests {
        let has = match &seen {
            Some(v) => s.has_blob(&d) && s.blob_visible(v, &d)?,
            None => s.has_blob(&d),
        };
        if !has {
            missing.push(d);
        }
    }
    Ok(missing)
}

/// The coordinator's own facts for `farm status`: version, uptime, its cache and the hit
/// rate since it started (a cache that cannot be read counts as empty).
async fn facts(shared: &Shared) -> prova_protocol::wire::CoordinatorFacts {
    let stats = shared.store.call(|s| s.stats()).await.ok().and_then(Result::ok);
    let (hits, misses) = shared.observe.hits_and_misses();
    let (book_runs, book_live) = shared.observe.book_size();
    let held = shared.farm.ask(GetHeld).await.ok().map(|(core, attached)| HeldState {
        attached_runs: attached as u64,
        run_actors: crate::run::live_run_actors(),
        queued: core.queued as u64,
        leases: core.leases as u64,
        followers: core.followers as u64,
        keys: core.keys as u64,
        presence: core.presence as u64,
        worker_blobs: core.worker_blobs as u64,
        book_runs: book_runs as u64,
        book_live: book_live as u64,
        rss_bytes: rss_bytes(),
    });
    prova_protocol::wire::CoordinatorFacts {
        version: super::server::BUILD_VERSION.to_owned(),
        uptime_secs: shared.observe.uptime_secs(),
        cache_entries: stats.as_ref().map_or(0, |s| s.entries.values().sum()),
        cache_bytes: stats.as_ref().map_or(0, |s| s.blob_bytes),
        hits,
        misses,
        held,
    }
}

/// This process's resident set, from `/proc/self/status` (`None` where there is none).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 =
        line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb.saturating_mul(1024))
}
