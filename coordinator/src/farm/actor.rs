//! The farm actor: the shell around [`FarmCore`] and the one task that drives the runs
//! clients submit (`runs.rs`). One per coordinator. Worker sessions register here with the
//! sender of their control stream; the actor feeds the core and carries its commands out
//! (send to a worker, hand a report to a run, fail an item, refuse a stale report); a run's
//! report is handed to its state machine and what the run hands out in answer placed by the
//! core in the same turn.
//!
//! Flow control: the farm actor never waits on a run, a client or a worker. A worker's
//! messages go through a queue sized from what can be in flight, drained by the one
//! forwarder ([`super::forward::forward`]: `worker_session::worker_queue`, `farm->worker`);
//! a run's events go into a queue sized for every event that must arrive (`runs.rs`); see
//! `flow_tests.rs` for the stalls this prevents.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use kameo::prelude::*;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use prova_protocol::wire::{CoordinatorMsg, WorkerHealth, WorkerInfo, WorkerMsg};
use prova_protocol::work::FromWorker;
use prova_protocol::{RunId, WorkerId};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::clock::RunningClock;
use super::core::{FarmCommand, FarmCore, FarmEvent, WorkerCaps};
use super::persist::Persist;
use crate::cache::CacheThread;

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

/// The farm actor.
pub struct FarmActor {
    core: FarmCore,
    started: Instant,
    /// Time as leases count it: a stall of this process does not count (see [`RunningClock`]).
    clock: RunningClock,
    links: HashMap<WorkerId, Link>,
    pub(super) runs: HashMap<RunId, super::runs::FarmRun>,
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
    pub(super) async fn feed(&mut self, event: FarmEvent) {
        self.feed_all(VecDeque::from([event])).await;
    }

    /// Feeds the core every event of `queue` and carries its commands out; what a run hands
    /// out in answer to a report joins the queue, so one turn takes it to a worker.
    pub(super) async fn feed_all(&mut self, mut queue: VecDeque<FarmEvent>) {
        while let Some(event) = queue.pop_front() {
            let now = self.clock.running(self.started.elapsed());
            let before = self.core.counts();
            let cmds = self.core.handle(now, event);
            self.log_counts(&before);
            let journal = self.core.take_journal();
            if let Some(p) = &self.persist {
                p.journal(journal);
            }
            for cmd in cmds {
                self.apply(cmd, &mut queue).await;
            }
        }
    }

    fn log_counts(&self, before: &super::core::FarmCounts) {
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
    }

    async fn apply(&mut self, cmd: FarmCommand, queue: &mut VecDeque<FarmEvent>) {
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
            FarmCommand::Deliver { run, msg, worker } => {
                self.deliver(run, msg, worker, queue).await;
            }
            FarmCommand::Fail { origin, reason } => {
                let f = prova_protocol::work::Finished::never_ran(
                    origin.attempt,
                    ExitKind::SpawnFailed(reason),
                );
                let msg = FromWorker::Finished(Box::new(f));
                self.deliver(origin.run, msg, WorkerId("farm".into()), queue).await;
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

    /// A fresh run id.
    pub(super) fn new_run_id(&mut self) -> RunId {
        let id = RunId(self.next_run);
        self.next_run += 1;
        id
    }

    /// Run `run` is over: its leases need no adopting after a restart.
    pub(super) fn run_over(&mut self, run: RunId) {
        if let Some(p) = &self.persist {
            p.run_over(run);
        }
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
