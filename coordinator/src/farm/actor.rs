//! The farm actor: the shell around [`FarmCore`]. One per coordinator. Worker sessions
//! register here with the sender of their control stream; run actors submit work through a
//! [`FarmSink`]; the actor feeds the core and carries its commands out (send to a worker,
//! deliver a report to a run, fail an item, refuse a stale report).
//!
//! Flow control: the farm actor never waits on a run or a worker, and a run never waits on
//! the farm. Each direction goes through a queue sized from what can be in flight, drained
//! by the one forwarder ([`super::forward::forward`]: [`FarmSink`] `run->farm`, `RunLink`
//! `farm->run`, `worker_session::worker_queue` `farm->worker`); see `flow_tests.rs` for the
//! deadlock this prevents.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use kameo::prelude::*;
use prova_protocol::digest::Fold;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use prova_protocol::wire::{CoordinatorMsg, WorkerHealth, WorkerInfo, WorkerMsg};
use prova_protocol::work::{Assignment, FromWorker, Placement};
use prova_protocol::{AttemptId, Digest, RunId, WorkerId};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::clock::RunningClock;
use super::core::{FarmCommand, FarmCore, FarmEvent, Item, Origin, Requirements, WorkerCaps};
use super::forward::{Traced, forward};
use super::persist::Persist;
use crate::cache::CacheThread;
use crate::run::{AssignHints, LinkClosed, LinkFuture, RunActor, WorkSink};

#[path = "ops.rs"]
mod ops;
pub use ops::{DrainWorker, GetCounts, GetHeld, GetStatus, ReleaseWorker, UnknownWorker};

/// How often leases are checked for expiry and unplaceable items for their wait.
pub const TICK: Duration = Duration::from_secs(1);

/// A connected worker, as the actor knows it.
struct Link {
    tx: mpsc::Sender<CoordinatorMsg>,
    info: WorkerInfo,
    version: String,
    /// What it last said of its health.
    health: Option<WorkerHealth>,
}

/// A run, as the actor knows it: its reports go through a queue of its own to a forwarder
/// that waits on the run actor's mailbox, so the farm itself never waits on a run (a run
/// waits on its client: a client that stops reading must not stall the farm).
struct RunLink {
    tx: mpsc::Sender<crate::run::actor::FromFarm>,
    /// Room kept for reports that must arrive (`Started`, `Ready`, `Finished`): live output
    /// is queued only while more than this is free, and dropped beyond (the task's log, in
    /// its `Finished`, still holds it).
    reserve: usize,
    /// Output chunks dropped so far (logged once).
    dropped: u64,
}

/// Output chunks a run may have queued beyond its reserve before live output is dropped.
pub const OUTPUT_ALLOWANCE: usize = 4096;

/// The farm actor.
pub struct FarmActor {
    core: FarmCore,
    started: Instant,
    /// Time as leases count it: a stall of this process does not count (see [`RunningClock`]).
    clock: RunningClock,
    links: HashMap<WorkerId, Link>,
    runs: HashMap<RunId, RunLink>,
    next_run: u64,
    /// Where leases and quarantines are kept across restarts (`None`: nowhere, in tests).
    persist: Option<Persist>,
}

impl Actor for FarmActor {
    /// The farm's store: its leases and quarantines outlive a restart there.
    type Args = Option<CacheThread>;
    type Error = Infallible;

    async fn on_start(store: Self::Args, me: ActorRef<Self>) -> Result<Self, Self::Error> {
        // The ticker stops when the actor does (its sends fail).
        let weak = me.downgrade();
        drop(
            OwnedTask::spawn("farm.ticker", async move {
                let mut interval = tokio::time::interval(TICK);
                loop {
                    interval.tick().await;
                    let Some(me) = weak.upgrade() else { break };
                    if me.tell(Tick).await.is_err() {
                        break;
                    }
                }
            })
            .detach(),
        );
        let base = lease_base();
        let mut core = FarmCore::with_first_lease(base);
        let persist = match store {
            Some(store) => {
                // What an earlier incarnation left: its workers may still run those leases.
                let (leases, quarantine) = super::persist::load(&store).await;
                if !leases.is_empty() {
                    tracing::info!(
                        leases = leases.len(),
                        "adopting the leases of the coordinator's last start"
                    );
                }
                for (worker, reason) in &quarantine {
                    tracing::warn!(%worker, "worker still quarantined: {reason}");
                }
                core.restore(std::time::Duration::ZERO, leases);
                core.restore_quarantine(quarantine);
                Some(Persist::start(store, base))
            }
            None => None,
        };
        Ok(Self {
            core,
            started: Instant::now(),
            clock: RunningClock::default(),
            links: HashMap::new(),
            runs: HashMap::new(),
            next_run: 1,
            persist,
        })
    }
}

/// Where this coordinator's lease ids start: the wall clock in microseconds. A restarted
/// coordinator thus never hands out an id an earlier one gave out (its workers may still run
/// those attempts and report them) — unless the earlier one issued more than a lease per
/// microsecond of its life, or the clock went back.
fn lease_base() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}

impl FarmActor {
    async fn feed(&mut self, event: FarmEvent) {
        let now = self.clock.running(self.started.elapsed());
        let before = self.core.counts();
        let cmds = self.core.handle(now, event);
        let after = self.core.counts();
        if after.lease_expiries > before.lease_expiries {
            let n = after.lease_expiries - before.lease_expiries;
            tracing::info!(
                leases = n,
                total = after.lease_expiries,
                "lease expired (no heartbeat)"
            );
        }
        if after.requeues > before.requeues {
            let n = after.requeues - before.requeues;
            tracing::info!(items = n, total = after.requeues, "requeued");
        }
        let journal = self.core.take_journal();
        if let Some(p) = &self.persist {
            p.journal(journal);
        }
        for cmd in cmds {
            self.apply(cmd).await;
        }
    }

    async fn apply(&mut self, cmd: FarmCommand) {
        match cmd {
            FarmCommand::Send { worker, msg } => {
                let tx = self.links.get(&worker).map(|l| l.tx.clone());
                if let Some(tx) = tx
                    && send_within_bound(&tx, CoordinatorMsg::Work(msg), "worker").await.is_err()
                {
                    // The session is gone; its WorkerDown follows and requeues.
                    tracing::debug!(%worker, "send to a closed worker session");
                }
            }
            FarmCommand::Deliver { run, msg, worker } => self.deliver(run, msg, worker).await,
            FarmCommand::Fail { origin, reason } => {
                let f = prova_protocol::work::Finished::never_ran(
                    origin.attempt,
                    ExitKind::SpawnFailed(reason),
                );
                let msg = FromWorker::Finished(Box::new(f));
                self.deliver(origin.run, msg, WorkerId("farm".into())).await;
            }
            FarmCommand::Refuse { worker, lease, reason } => {
                if let Some(l) = self.links.get(&worker) {
                    let msg = CoordinatorMsg::Refused { attempt: lease, reason };
                    let _ = send_within_bound(&l.tx, msg, "worker").await;
                }
            }
            FarmCommand::Dismiss { worker } => {
                tracing::info!(%worker, "worker drained: telling it to leave");
                if let Some(l) = self.links.get(&worker) {
                    let _ = send_within_bound(&l.tx, CoordinatorMsg::Leave, "worker").await;
                }
            }
            FarmCommand::Distrust { worker, task, reason } => {
                tracing::warn!(%worker, %task, "refused what the worker returned: {reason}; the task runs elsewhere");
            }
            FarmCommand::Quarantined { worker, reason } => {
                tracing::warn!(%worker, "worker quarantined, it gets no more work until `prova farm release {worker}`: {reason}");
            }
        }
    }

    /// Queues a report for `run` without waiting on it (see [`RunLink`]).
    async fn deliver(&mut self, run: RunId, msg: FromWorker, worker: WorkerId) {
        let Some(link) = self.runs.get_mut(&run) else { return };
        if matches!(msg, FromWorker::Output { .. }) && link.tx.capacity() <= link.reserve {
            if link.dropped == 0 {
                tracing::warn!(%run, "the run's client is not keeping up: dropping live output");
            }
            link.dropped += 1;
            return;
        }
        let msg = crate::run::actor::FromFarm { msg, worker };
        let _ = send_within_bound(&link.tx, msg, "run").await;
    }
}

/// Sends on a queue sized so that it cannot fill (its bound is derived from what may be in
/// flight); `Err` when the receiver is gone. Should it fill all the same, a bug in that
/// derivation, the send waits rather than dropping a message that must arrive.
pub(crate) async fn send_within_bound<T>(
    tx: &mpsc::Sender<T>,
    msg: T,
    queue: &'static str,
) -> Result<(), ()> {
    match tx.try_send(msg) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        Err(mpsc::error::TrySendError::Full(msg)) => {
            tracing::warn!(queue, "a queue sized to never fill is full; waiting");
            tx.send(msg).await.map_err(|_| ())
        }
    }
}

/// Time passed.
struct Tick;

impl Message<Tick> for FarmActor {
    type Reply = ();
    async fn handle(&mut self, _: Tick, _ctx: &mut Context<Self, ()>) {
        self.feed(FarmEvent::Tick).await;
    }
}

/// A worker session completed its handshake and registration.
pub struct WorkerUp {
    /// Its id (its certificate's name).
    pub id: WorkerId,
    /// What it offers.
    pub info: WorkerInfo,
    /// Its build version (from its hello).
    pub version: String,
    /// Where messages for it go.
    pub tx: mpsc::Sender<CoordinatorMsg>,
}

impl Message<WorkerUp> for FarmActor {
    type Reply = ();
    async fn handle(&mut self, m: WorkerUp, _ctx: &mut Context<Self, ()>) {
        let caps = WorkerCaps {
            slots: m.info.slots,
            os: m.info.os.clone(),
            arch: m.info.arch.clone(),
            labels: m.info.labels.clone(),
        };
        tracing::info!(worker = %m.id, slots = m.info.slots, sandbox = %m.info.sandbox, version = %m.version, "worker joined");
        let running = m.info.running.clone();
        let health = m.info.health.clone();
        let link = Link { tx: m.tx, info: m.info, version: m.version, health: health.clone() };
        self.links.insert(m.id.clone(), link);
        self.feed(FarmEvent::WorkerJoined { id: m.id.clone(), caps, running }).await;
        if let Some(h) = health {
            self.feed(FarmEvent::Health { id: m.id, unfit: h.unfit }).await;
        }
    }
}

/// A worker session ended.
pub struct WorkerDown {
    /// Which.
    pub id: WorkerId,
    /// The sender it registered with: a newer session of the same worker is not removed.
    pub tx: mpsc::Sender<CoordinatorMsg>,
}

impl Message<WorkerDown> for FarmActor {
    type Reply = ();
    async fn handle(&mut self, m: WorkerDown, _ctx: &mut Context<Self, ()>) {
        let current = self.links.get(&m.id).is_some_and(|l| l.tx.same_channel(&m.tx));
        if current {
            tracing::info!(worker = %m.id, "worker left");
            self.links.remove(&m.id);
            self.feed(FarmEvent::WorkerLeft { id: m.id }).await;
        }
    }
}

/// A message from a worker's control stream.
pub struct FromWorkerSession {
    /// Who.
    pub id: WorkerId,
    /// What.
    pub msg: WorkerMsg,
}

impl Message<FromWorkerSession> for FarmActor {
    type Reply = ();
    async fn handle(&mut self, m: FromWorkerSession, _ctx: &mut Context<Self, ()>) {
        match m.msg {
            WorkerMsg::Register(_) => {} // handled by the session before WorkerUp
            WorkerMsg::Heartbeat { running, health } => {
                self.feed(FarmEvent::Heartbeat { id: m.id.clone(), running }).await;
                if let Some(h) = health {
                    let changed = self.links.get_mut(&m.id).map(|l| {
                        let changed = l.health.as_ref().map(|o| &o.unfit) != Some(&h.unfit);
                        l.health = Some(h.clone());
                        changed
                    });
                    if changed == Some(true) {
                        match &h.unfit {
                            Some(why) => {
                                tracing::warn!(worker = %m.id, "worker unfit, no work for it: {why}")
                            }
                            None => tracing::info!(worker = %m.id, "worker fit again"),
                        }
                        self.feed(FarmEvent::Health { id: m.id, unfit: h.unfit }).await;
                    }
                }
            }
            WorkerMsg::Leaving => {
                tracing::info!(worker = %m.id, "worker leaving (drain)");
                self.feed(FarmEvent::WorkerLeaving { id: m.id }).await
            }
            WorkerMsg::Report(msg) => {
                if let FromWorker::Finished(f) = &msg
                    && let Some(outs) = &f.outputs
                    && let Some((d, _)) = outs.artifact
                {
                    let id = m.id.clone();
                    self.feed(FarmEvent::Holds { id, blobs: vec![d] }).await;
                }
                self.feed(FarmEvent::Report { worker: m.id, msg }).await;
            }
        }
    }
}

/// Route a run's reports to `actor`.
pub struct AttachRun {
    /// The run's actor.
    pub actor: ActorRef<RunActor>,
    /// Its id (from [`NewRunId`]).
    pub run: RunId,
    /// Its plan's [`report_reserve`].
    pub reserve: usize,
}

impl Message<AttachRun> for FarmActor {
    type Reply = ();
    async fn handle(&mut self, m: AttachRun, _ctx: &mut Context<Self, ()>) {
        // Ends when the run is detached (the sender dropped) and its queue drained, or when
        // the run actor stops.
        let (tx, task) = forward("farm->run", m.reserve.saturating_add(OUTPUT_ALLOWANCE), m.actor);
        drop(task.detach());
        self.runs.insert(m.run, RunLink { tx, reserve: m.reserve, dropped: 0 });
    }
}

/// Reports that must reach a run which it can have in flight at once: per task, two
/// attempts (its execution and a determinism re-run), each with a `Started` per try, a
/// `Ready` and a `Finished`.
pub fn report_reserve(plan: &crate::run::RunPlan) -> usize {
    plan.tasks
        .iter()
        .map(|t| 2 * (t.spec.retries as usize + 3))
        .fold(16usize, usize::saturating_add)
}

/// A fresh run id.
pub struct NewRunId;

impl Message<NewRunId> for FarmActor {
    type Reply = Result<RunId, Infallible>;
    async fn handle(&mut self, _: NewRunId, _ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        let id = RunId(self.next_run);
        self.next_run += 1;
        Ok(id)
    }
}

/// A run is over: stop routing to it.
pub struct DetachRun(pub RunId);

impl Message<DetachRun> for FarmActor {
    type Reply = ();
    async fn handle(&mut self, m: DetachRun, _ctx: &mut Context<Self, ()>) {
        self.runs.remove(&m.0);
        if let Some(p) = &self.persist {
            p.run_over(m.0);
        }
    }
}

/// Submit or cancel work on behalf of a run.
pub enum RunWork {
    /// Place this assignment.
    Submit {
        /// The run.
        run: RunId,
        /// What.
        assignment: Box<Assignment>,
        /// Priority, key, worker to avoid.
        hints: AssignHints,
    },
    /// Cancel the run's attempt.
    Cancel(Origin),
}

impl Traced for RunWork {
    fn kind(&self) -> &'static str {
        match self {
            Self::Submit { .. } => "Submit",
            Self::Cancel(_) => "Cancel",
        }
    }
    fn attempt(&self) -> Option<AttemptId> {
        Some(match self {
            Self::Submit { assignment, .. } => assignment.attempt,
            Self::Cancel(origin) => origin.attempt,
        })
    }
}

impl Traced for crate::run::actor::FromFarm {
    fn kind(&self) -> &'static str {
        self.msg.kind()
    }
    fn attempt(&self) -> Option<AttemptId> {
        self.msg.attempt()
    }
}

impl Message<RunWork> for FarmActor {
    type Reply = ();
    async fn handle(&mut self, m: RunWork, _ctx: &mut Context<Self, ()>) {
        match m {
            RunWork::Submit { run, assignment, hints } => {
                let origin = Origin { run, attempt: assignment.attempt };
                let blobs = match &assignment.placement {
                    Placement::ExecRoot { inputs, upstream, .. } => inputs
                        .iter()
                        .map(|i| i.digest)
                        .chain(upstream.iter().map(|(d, _)| *d))
                        .collect(),
                    Placement::InPlace { .. } => Vec::new(),
                };
                let reqs = requirements(&hints);
                let item = Item {
                    origin,
                    assignment: *assignment,
                    priority: hints.priority,
                    reqs,
                    avoid: hints.avoid,
                    blobs,
                    key: hints.key,
                };
                self.feed(FarmEvent::Submit(Box::new(item))).await;
            }
            RunWork::Cancel(origin) => self.feed(FarmEvent::Cancel(origin)).await,
        }
    }
}

fn requirements(hints: &AssignHints) -> Requirements {
    let mut r = Requirements::default();
    if let Some((os, arch)) = hints.platform.as_deref().and_then(|p| p.split_once('/')) {
        r.os = Some(os.to_owned());
        r.arch = Some(arch.to_owned());
    }
    r.labels = hints.labels.clone();
    r
}

/// Submissions and cancels a run may have queued per task before the sink waits: a task is
/// submitted at most twice (its execution and a determinism re-run) and each attempt
/// cancelled at most twice (abort, then stop), so a run never reaches it.
const WORK_PER_TASK: usize = 4;

/// A run's link to the farm: assignments become items for placement.
///
/// The run actor never waits on the farm's mailbox: the farm waits on the run's (it delivers
/// reports), so a run blocked submitting while the farm blocked delivering was a deadlock
/// (a 2,000-task run stalled before its first event). A run's work goes into its own queue,
/// sized by its task count, and a forwarder relays it to the farm in order.
pub struct FarmSink {
    tx: mpsc::Sender<RunWork>,
    run: RunId,
    namespace: String,
}

impl FarmSink {
    /// The link of run `run` (`tasks` nodes) writing the cache namespace `namespace`.
    pub fn new(farm: ActorRef<FarmActor>, run: RunId, namespace: String, tasks: usize) -> Self {
        // Sent with `send_within_bound` (a run keeps within `WORK_PER_TASK`). The forwarder is
        // not aborted with the sink: what the run queued last (cancels as it ends) still
        // reaches the farm; it ends once the sink is dropped and its queue drained.
        let capacity = tasks.saturating_mul(WORK_PER_TASK).saturating_add(16);
        let (tx, task) = forward("run->farm", capacity, farm);
        drop(task.detach());
        Self { tx, run, namespace }
    }

    async fn push(&self, work: RunWork) -> Result<(), LinkClosed> {
        send_within_bound(&self.tx, work, "run work").await.map_err(|_| LinkClosed)
    }
}

/// The key two runs' executions are shared under: the task key within the run's trust tier.
/// A trusted (ci) run never waits on, and adopts, an execution a client run asked for.
pub fn dedup_key(namespace: &str, key: &Digest) -> Digest {
    Fold::new("prova.farm.dedup.v1").str(namespace).digest(key).finish()
}

impl WorkSink for FarmSink {
    fn assign(&self, a: Assignment, mut hints: AssignHints) -> LinkFuture<'_> {
        hints.key = hints.key.map(|k| dedup_key(&self.namespace, &k));
        Box::pin(async move {
            self.push(RunWork::Submit { run: self.run, assignment: Box::new(a), hints }).await
        })
    }

    fn cancel(&self, attempt: AttemptId) -> LinkFuture<'_> {
        Box::pin(async move { self.push(RunWork::Cancel(Origin { run: self.run, attempt })).await })
    }
}

#[cfg(test)]
mod dedup_tests {
    use super::*;

    #[test]
    fn executions_are_shared_within_a_trust_tier_only() {
        let k = Digest::of(b"task key");
        let other = Digest::of(b"another key");
        assert_eq!(dedup_key("trusted", &k), dedup_key("trusted", &k));
        assert_ne!(dedup_key("trusted", &k), dedup_key("untrusted", &k));
        assert_ne!(dedup_key("trusted", &k), dedup_key("trusted", &other));
    }
}
