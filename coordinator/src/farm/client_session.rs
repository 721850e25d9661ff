//! A connected client (`ci`, `client` or `admin` certificate): blob queries, run submission,
//! status. A submitted run gets its own run actor — the same one local mode uses — with the
//! farm as its work sink and the farm's store as its cache layer; its events stream back on
//! the control stream, then the artifacts to download, then the summary.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::{Identity, Role, frame};
use prova_protocol::wire::{
    ClientMsg, CoordinatorReply, EntryTier, HeldState, Proof, RemoteKind, RemoteTask,
    RunOptionsWire, TaskArtifact,
};
use prova_protocol::{Digest, WorkerId};
use tokio::sync::{mpsc, oneshot};

use super::actor::{
    AttachRun, DetachRun, DrainWorker, FarmSink, GetHeld, GetStatus, NewRunId, ReleaseWorker,
    report_reserve,
};
use super::error::EdgeError;
use super::forward::{Stream, forward};
use super::server::Shared;
use crate::cache::{PENDING, TRUSTED, Visibility, untrusted_of};
use crate::keys::PlanKeys;
use crate::layers::CacheLayer as _;
use crate::layers::{FarmLayer, LocalLayer};
use crate::run::VerifyOptions;
use crate::run::plan::{PlannedTask, RunPlan, TaskKind};
use crate::run::{
    Begin, CachePolicy, ExecMode, Interrupt, RunActor, RunActorArgs, RunCache, RunOptions,
};

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
        let _ = run.tell(Interrupt).await;
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
    active: Option<(ActorRef<RunActor>, OwnedTask<()>)>,
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
                    let _ = run.tell(Interrupt).await;
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

/// Validates and starts a submitted run; returns its actor and the task that relays its
/// events and, at the end, its artifacts and summary.
async fn start(
    identity: &Identity,
    shared: &Arc<Shared>,
    options: RunOptionsWire,
    tasks: Vec<RemoteTask>,
    out: mpsc::Sender<CoordinatorReply>,
) -> Result<(ActorRef<RunActor>, OwnedTask<()>), EdgeError> {
    let plan = plan_of(&tasks).map_err(EdgeError::Refused)?;
    let namespace = namespace_of(identity);
    check_inputs(identity, shared, &tasks).await?;
    let mut keys = farm_keys(&plan, &tasks);
    let tmp: PathBuf = shared.tmp.clone();
    let layer = layer_of(shared, &namespace, &tmp);
    let policy = CachePolicy { read: options.read, write: options.write };
    let hits = if policy.read {
        crate::keys::progressive::presolve(&plan, &mut keys, |ks| layer.lookup(ks))
            .await
            .map_err(EdgeError::Layer)?
    } else {
        HashMap::new()
    };
    let own_logs = layer.clone();
    let run = shared.farm.ask(NewRunId).await.map_err(EdgeError::actor)?;
    let (events_tx, events_rx) = mpsc::channel(CLIENT_QUEUE);
    let (done_tx, done_rx) = oneshot::channel();
    let weights = tasks.iter().map(|t| t.weight.max(1)).collect();
    let reserve = report_reserve(&plan);
    let actor = RunActor::spawn(RunActorArgs {
        plan,
        options: run_options(&options),
        weights,
        work: Arc::new(FarmSink::new(shared.farm.clone(), run, namespace.clone(), tasks.len())),
        worker: WorkerId("farm".into()),
        events: events_tx,
        done: done_tx,
        first_attempt: 1,
        cache: Some(RunCache {
            layer: Arc::new(layer),
            policy,
            keys,
            hits,
            staging: tmp,
            protected: Arc::default(),
        }),
        exec: ExecMode::ExecRoot { local_source: None, local_blobs: None },
        local_proof_sources: None,
    });
    shared
        .farm
        .tell(AttachRun { actor: actor.clone(), run, reserve })
        .await
        .map_err(EdgeError::actor)?;
    let _ = out.send(CoordinatorReply::Accepted { run }).await;
    shared.observe.run_started(
        run,
        &format!("{} {}", identity.role, identity.name),
        &namespace,
        tasks.len(),
    );
    actor.tell(Begin).await.map_err(EdgeError::actor)?;
    let relay = Relay { shared: shared.clone(), run, namespace, own_logs, out };
    // The `run->client` hop: the run's events, then its artifacts and summary, into the
    // client's queue (drained by the `farm->client` forwarder).
    let relay = OwnedTask::spawn("run->client", relay.run(events_rx, done_rx));
    Ok((actor, relay))
}

/// Refuses a run whose inputs the client could not have: every input blob, and every blob
/// an input tree names, must be visible to it.
async fn check_inputs(
    identity: &Identity,
    shared: &Arc<Shared>,
    tasks: &[RemoteTask],
) -> Result<(), EdgeError> {
    let mut inputs: Vec<Digest> = tasks
        .iter()
        .flat_map(|t| t.inputs.iter().filter(|i| i.symlink.is_none()).map(|i| i.digest))
        .collect();
    let trees: Vec<(String, Digest)> = tasks
        .iter()
        .flat_map(|t| t.inputs.iter().filter(|i| i.tree).map(|i| (i.path.clone(), i.digest)))
        .collect();
    inputs.sort_unstable();
    inputs.dedup();
    let who = identity.clone();
    let unseen = shared
        .store
        .call(move |s| -> Result<Result<Option<Digest>, String>, crate::cache::CacheError> {
            // A tree's files are inputs too: its manifest must be one, and every blob it names
            // visible to the client, or a crafted manifest could mount another identity's blob.
            for (path, d) in trees {
                match tree_blobs(s, &path, &d)? {
                    Ok(blobs) => inputs.extend(blobs),
                    Err(why) => return Ok(Err(why)),
                }
            }
            inputs.sort_unstable();
            inputs.dedup();
            unseen_input(s, &who, &inputs).map(Ok)
        })
        .await??
        .map_err(EdgeError::Refused)?;
    if let Some(d) = unseen {
        return Err(EdgeError::UnseenInput { blob: d.short(), name: identity.name.clone() });
    }
    Ok(())
}

/// The run's keys as the farm settles them: from the client's components, upstreams keyed
/// by the farm itself.
fn farm_keys(plan: &RunPlan, tasks: &[RemoteTask]) -> PlanKeys {
    let mut keys = PlanKeys {
        keys: vec![None; tasks.len()],
        components: tasks.iter().map(|t| t.components.clone()).collect(),
        stamps: vec![Vec::new(); tasks.len()],
        // Exec roots on the farm hold what each task's `inputs` list (the client's refs).
        unfolded: Vec::new(),
        closures: Default::default(),
    };
    // The farm keys the upstreams itself, from its own entries and executions: what the
    // client predicted from its local cache is not taken on trust.
    keys.settle_all(plan, &|_| None);
    keys
}

/// The cache layer of a run in `namespace`.
fn layer_of(shared: &Shared, namespace: &str, tmp: &std::path::Path) -> FarmLayer {
    let inner = LocalLayer::new(shared.store.clone(), namespace, tmp);
    // Under --trust=proven a trusted run's entries wait for a second worker's agreement.
    if shared.trust_proven && namespace == TRUSTED {
        FarmLayer::proven(inner, TRUSTED)
    } else {
        FarmLayer::new(inner, namespace).demoting(shared.trust_proven)
    }
}

/// The run's options from the client's.
fn run_options(options: &RunOptionsWire) -> RunOptions {
    RunOptions {
        concurrency: FARM_RUN_CONCURRENCY,
        continue_on_failure: options.continue_on_failure,
        verify: VerifyOptions {
            determinism: options.verify.contains(&Proof::Determinism),
            inputs: options.verify.contains(&Proof::Inputs),
            allow: options.verify_allow.iter().cloned().collect(),
            // The client judges what a traced run touched against its workspace.
            workspace: None,
            sample: options.verify_sample,
        },
        upstreams: options.upstreams,
    }
}

/// The `run->client` hop of one run.
struct Relay {
    shared: Arc<Shared>,
    run: prova_protocol::RunId,
    namespace: String,
    /// Whose logs the run may replay.
    own_logs: FarmLayer,
    out: mpsc::Sender<CoordinatorReply>,
}

impl Relay {
    /// The run's events, then its artifacts and summary.
    async fn run(
        self,
        mut events_rx: mpsc::Receiver<prova_protocol::events::RunEvent>,
        done_rx: oneshot::Receiver<prova_protocol::events::RunSummary>,
    ) {
        let Self { shared, run, out, .. } = &self;
        while let Some(ev) = events_rx.recv().await {
            shared.observe.event(*run, &ev);
            if out.send(CoordinatorReply::Event(ev)).await.is_err() {
                break;
            }
        }
        let summary = done_rx.await;
        let _ = shared.farm.tell(DetachRun(*run)).await;
        shared.observe.run_finished(*run, summary.as_ref().ok());
        let Ok(summary) = summary else {
            let _ = out
                .send(CoordinatorReply::Error {
                    message: "the run stopped without a summary".to_owned(),
                })
                .await;
            return;
        };
        self.artifacts(&summary).await;
        let _ = self.out.send(CoordinatorReply::Done(without_evidence(summary))).await;
    }

    /// The artifacts of every task that has an entry now, for the client to download.
    async fn artifacts(&self, summary: &prova_protocol::events::RunSummary) {
        let wanted: Vec<Digest> = summary
            .tasks
            .iter()
            .filter(|r| r.status == prova_protocol::events::TaskStatus::Succeeded)
            .filter_map(|r| r.key)
            .collect();
        // Under --trust=proven this run's own saves wait in `pending`: they are served to it
        // (its outputs) and to nobody else until a second worker agrees.
        let own: Vec<Digest> = if self.shared.trust_proven && self.namespace == TRUSTED {
            summary
                .tasks
                .iter()
                .filter(|r| matches!(r.cache, prova_protocol::events::CacheStatus::Saved))
                .filter_map(|r| r.key)
                .collect()
        } else {
            Vec::new()
        };
        let proven = self.shared.trust_proven;
        let namespace = self.namespace.clone();
        let found = self
            .shared
            .store
            .call(move |s| {
                if proven {
                    s.demote_unproven(TRUSTED, PENDING, &wanted)?; // proofs only (ledger.rs)
                }
                let mut found = crate::layers::farm::lookup(s, &namespace, &wanted)?;
                for (k, e) in s.get_entries(PENDING, &own)? {
                    found.entry(k).or_insert(e);
                }
                Ok::<_, crate::cache::CacheError>(found)
            })
            .await;
        let Ok(Ok(entries)) = found else { return };
        // By the key each task resolved to in the run (settled as its upstreams finished).
        for r in &summary.tasks {
            if let Some(e) = r.key.and_then(|k| entries.get(&k)) {
                let msg = CoordinatorReply::Artifact(TaskArtifact {
                    task: r.task.clone(),
                    key: e.key,
                    artifact: e.artifact,
                    manifest: e.manifest.clone(),
                    // A log is data of its tier: only the run's own tier's is sent.
                    log: e.log.filter(|_| self.own_logs.replays_log_of(&e.namespace)),
                    duration_ms: e.duration_ms,
                    tier: tier_of(&e.namespace),
                });
                let _ = self.out.send(msg).await;
            }
        }
    }
}

/// `summary` with the evidence of its inputs verdicts emptied: the client judged each one
/// from the task's report already (`TaskFinished`), so the summary, one frame holding every
/// task, carries only the marker that says which verdict to replace.
fn without_evidence(
    mut summary: prova_protocol::events::RunSummary,
) -> prova_protocol::events::RunSummary {
    for v in summary.tasks.iter_mut().flat_map(|t| t.verdicts.iter_mut()) {
        if let prova_protocol::events::Verdict::UndeclaredInputs { evidence: Some(e), .. } = v {
            **e = Default::default();
        }
    }
    summary
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

/// The file blobs of installed tree `d` at `path` (its manifest read from the store and
/// checked as a worker will), or why it cannot be used.
fn tree_blobs(
    s: &crate::cache::Store,
    path: &str,
    d: &Digest,
) -> Result<Result<Vec<Digest>, String>, crate::cache::CacheError> {
    let limit = prova_protocol::tree::MAX_MANIFEST_BYTES as u64;
    let Some(bytes) = s.read_blob_verified(d, limit)? else {
        return Ok(Err(format!(
            "installed tree `{path}`: its manifest {} was not uploaded",
            d.short()
        )));
    };
    Ok(prova_protocol::tree::TreeManifest::decode(&bytes, path)
        .map(|m| m.blobs())
        .map_err(|e| format!("installed tree `{path}`: {e}")))
}

/// The first input of `tasks` that `identity` may not use: a run may only name blobs its
/// certificate may see (else its task could copy another identity's blob into an output).
fn unseen_input(
    s: &crate::cache::Store,
    identity: &Identity,
    digests: &[Digest],
) -> Result<Option<Digest>, crate::cache::CacheError> {
    let Some(v) = visibility_of(identity) else { return Ok(None) };
    for d in digests {
        if !s.blob_visible(&v, d)? {
            return Ok(Some(*d));
        }
    }
    Ok(None)
}

/// The tier a client is told an entry of store namespace `ns` has.
fn tier_of(ns: &str) -> EntryTier {
    match ns {
        TRUSTED => EntryTier::Trusted,
        PENDING => EntryTier::Pending,
        _ => EntryTier::Untrusted,
    }
}

/// A plan from submitted tasks; refuses what the farm cannot run (bad indices, cycles,
/// persistent tasks, unclean paths).
fn plan_of(tasks: &[RemoteTask]) -> Result<RunPlan, String> {
    let n = tasks.len();
    let mut planned = Vec::with_capacity(n);
    for (i, t) in tasks.iter().enumerate() {
        if t.kind == RemoteKind::Persistent {
            return Err(format!(
                "{} is persistent: persistent tasks run locally, not on the farm",
                t.spec.id
            ));
        }
        // The farm files entries under the client's key and shows its components in `why`:
        // the two must agree, in the key format this farm speaks.
        if t.components.version != prova_protocol::key::KEY_VERSION {
            return Err(format!(
                "{} is keyed in key format v{}; this farm keys in v{}: use the farm's prova version",
                t.spec.id,
                t.components.version,
                prova_protocol::key::KEY_VERSION
            ));
        }
        if t.key.is_some_and(|k| t.components.key() != k) {
            return Err(format!("{}: its key is not the fold of its components", t.spec.id));
        }
        // The trees it mounts are the trees its key folds, digest for digest.
        let mut mounted: Vec<(String, String)> = t
            .inputs
            .iter()
            .filter(|i| i.tree)
            .map(|i| crate::trees::key_pair(&i.path, &i.digest))
            .collect();
        let mut keyed: Vec<(String, String)> = t
            .components
            .config
            .iter()
            .filter(|(k, _)| k.starts_with(crate::trees::KEY_PREFIX))
            .cloned()
            .collect();
        mounted.sort();
        keyed.sort();
        if mounted != keyed {
            return Err(format!(
                "{}: the installed trees it mounts are not the ones its key folds",
                t.spec.id
            ));
        }
        if let Some(&d) = t.deps.iter().find(|&&d| d as usize >= n || d as usize == i) {
            return Err(format!("{} depends on task index {d}, which does not exist", t.spec.id));
        }
        if !t.spec.project_dir.is_empty()
            && !prova_protocol::globs::is_clean_relative(&t.spec.project_dir)
        {
            return Err(format!(
                "{}: project dir {:?} is not a clean relative path",
                t.spec.id, t.spec.project_dir
            ));
        }
        if let Some(bad) =
            t.inputs.iter().find(|i| !prova_protocol::globs::is_clean_relative(&i.path))
        {
            return Err(format!(
                "{}: input path {:?} is not a clean relative path",
                t.spec.id, bad.path
            ));
        }
        planned.push(PlannedTask {
            id: t.spec.id.clone(),
            project: usize::MAX,
            kind: if t.kind == RemoteKind::Group { TaskKind::Group } else { TaskKind::Command },
            spec: t.spec.clone(),
            cacheable: t.cacheable && t.kind == RemoteKind::Command,
            deps: t.deps.iter().map(|&d| d as usize).collect(),
            requested: t.requested,
            inputs: t.inputs.clone(),
        });
    }
    // Acyclic, or the scheduler would wait forever.
    let mut unmet: Vec<usize> = planned.iter().map(|t| t.deps.len()).collect();
    let mut dependents = vec![Vec::new(); n];
    for (i, t) in planned.iter().enumerate() {
        for &d in &t.deps {
            dependents[d].push(i);
        }
    }
    let mut stack: Vec<usize> = (0..n).filter(|&i| unmet[i] == 0).collect();
    let mut seen = 0;
    while let Some(x) = stack.pop() {
        seen += 1;
        for &d in &dependents[x] {
            unmet[d] -= 1;
            if unmet[d] == 0 {
                stack.push(d);
            }
        }
    }
    if seen != n {
        return Err("the submitted graph has a cycle".to_owned());
    }
    Ok(RunPlan { root: PathBuf::new(), tasks: planned })
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
