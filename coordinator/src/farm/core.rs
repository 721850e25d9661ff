//! The farm's sans-IO core: placement and leases across every run on the coordinator.
//! `(now, event) -> commands`, no sockets or actors: the farm actor carries the commands out.
//!
//! - **Placement**: a queued item goes to a connected worker with a free slot whose platform
//!   and labels satisfy it, preferring the worker that already holds most of its inputs
//!   (locality), then the one with most free slots; the queue is served highest critical
//!   path first. A worker to avoid (a determinism re-run) is skipped while another fits.
//! - **Leases**: every placement is a fresh lease id with a deadline renewed by heartbeats.
//!   An expired lease or a lost worker requeues the item and counts against its retry
//!   budget; past the budget the item fails with the last error. A report for a lease that
//!   is not live is refused. A worker whose lease expired is *silent*: placement passes it
//!   over while another worker could take the item, until it shows life again (a SIGKILLed
//!   worker's connection only idles out later, and locality would otherwise send the item
//!   straight back to it).
//! - **Re-registration**: a worker registering again (a reconnect or a restart under the
//!   same name) says which attempts it still runs. Its leases missing from that list are lost
//!   at once (requeued, counting against the budget) instead of at their expiry; attempts it
//!   runs that are not live leases of it (given away meanwhile, or leased by an earlier
//!   coordinator) are cancelled, and hold their slots until they end.
//! - **Crash loops are charged to their task**: the worker losses one event takes together
//!   (a lost connection, leases expiring at once, a restart) are one *loss*. An item present
//!   at it is charged (its budget) only when the evidence points at it: it was alone there,
//!   or it has been present at more losses than every other item there (the task present at
//!   every loss). The rest are requeued free, and two items of one loss are not placed on
//!   one worker again until one of them is at another loss, so the next loss tells them
//!   apart. Past [`PRESENCE_CAP`] losses an item is charged whatever the others did.
//! - **Hand-backs**: a worker may give an assignment back for a reason of its own (no slot,
//!   no disk, shutting down, outputs it could not store): the item is queued again without a
//!   loss charged and the worker takes no work for [`HANDBACK_BACKOFF`]; the run sees nothing.
//!   [`HANDBACK_LIMIT`] hand-backs of one item fail it, naming the last reason.
//! - **Dedup**: an item whose key is already queued or leased for another run waits for
//!   that execution and gets its result.
//! - **No worker**: an item no connected worker could ever run fails after a bounded wait.
//! - **Drain** (`prova farm drain`): a draining worker gets no new work; once it holds no
//!   lease it is told to leave ([`FarmCommand::Dismiss`]). Nothing it ran is lost or charged.
//! - **Health**: a worker that says it is unfit (its work dir below its disk floor) gets no
//!   work until it says otherwise; an item only unfit workers could run fails after
//!   [`NO_WORKER_WAIT`] of that.
//! - **Lying workers** (`trust.rs`): a result outside the task's declared outputs is refused
//!   before any run sees it; the item runs elsewhere and the worker is quarantined after
//!   [`QUARANTINE_AFTER`] refusals.
//! - **A restart** (`adopt.rs`): keyed leases are persisted ([`Journal`]); a restarted
//!   coordinator adopts what its workers still run, and the re-submitted run follows it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use prova_protocol::work::{Assignment, Finished, FromWorker, ToWorker};
use prova_protocol::{AttemptId, Digest, RunId, WorkerId};

#[path = "adopt.rs"]
mod adopt;
#[path = "leases.rs"]
mod leases;
#[path = "members.rs"]
mod members;
#[path = "place.rs"]
mod place;
#[path = "queue.rs"]
mod queue;
#[path = "trust.rs"]
mod trust;

pub use adopt::{ADOPT_GRACE, ADOPT_KEEP, Journal, LeaseRecord};
pub use trust::{QUARANTINE_AFTER, QUARANTINE_WINDOW};

/// How long a lease lives without a heartbeat.
pub const LEASE_TTL: Duration = Duration::from_secs(15);
/// Worker losses an item survives before it fails.
pub const RETRY_BUDGET: u32 = 3;
/// Losses an item may be present at before it is charged regardless of the evidence (two
/// crash loops side by side would otherwise tie for ever).
pub const PRESENCE_CAP: u32 = 2 * (RETRY_BUDGET + 1);
/// How long an item waits for a worker that can run it before it fails.
pub const NO_WORKER_WAIT: Duration = Duration::from_secs(60);
/// How long a worker that handed an assignment back is given no new work.
pub const HANDBACK_BACKOFF: Duration = Duration::from_secs(2);
/// Hand-backs an item survives before it fails (they never count as losses, but a farm whose
/// every worker keeps refusing must not loop forever).
pub const HANDBACK_LIMIT: u32 = 20;
/// Blobs remembered per worker for locality, oldest forgotten first: the worker's own blob
/// cache evicts too, so an older memory is only a stale hint, and an unbounded one grew with
/// every run's inputs for as long as the worker stayed connected.
pub const HOLDS_PER_WORKER: usize = 65_536;

/// What a worker offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCaps {
    /// Concurrent assignments.
    pub slots: u32,
    /// `linux`.
    pub os: String,
    /// `x86_64`.
    pub arch: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

/// What an item needs of a worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requirements {
    /// Required os (`None`: any).
    pub os: Option<String>,
    /// Required arch.
    pub arch: Option<String>,
    /// Required labels (all must match).
    pub labels: BTreeMap<String, String>,
}

impl Requirements {
    fn fits(&self, c: &WorkerCaps) -> bool {
        self.os.as_ref().is_none_or(|o| *o == c.os)
            && self.arch.as_ref().is_none_or(|a| *a == c.arch)
            && self.labels.iter().all(|(k, v)| c.labels.get(k) == Some(v))
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(o) = &self.os {
            parts.push(format!("os={o}"));
        }
        if let Some(a) = &self.arch {
            parts.push(format!("arch={a}"));
        }
        parts.extend(self.labels.iter().map(|(k, v)| format!("{k}={v}")));
        if parts.is_empty() { "any worker".to_owned() } else { parts.join(" ") }
    }
}

/// Who asked for an item: a run and the attempt id that run uses for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The run.
    pub run: RunId,
    /// The run's own attempt id.
    pub attempt: AttemptId,
}

/// A unit of work submitted by a run.
#[derive(Clone, Debug)]
pub struct Item {
    /// Who asked.
    pub origin: Origin,
    /// What to run (its `attempt` is replaced by the lease id when placed).
    pub assignment: Assignment,
    /// Critical-path priority.
    pub priority: u64,
    /// Platform and labels.
    pub reqs: Requirements,
    /// A worker to avoid while another fits.
    pub avoid: Option<WorkerId>,
    /// Input and upstream blobs, for locality.
    pub blobs: Vec<Digest>,
    /// The task's key, for dedup (`None`: never shared).
    pub key: Option<Digest>,
}

/// An event fed to the core.
#[derive(Clone, Debug)]
pub enum FarmEvent {
    /// A worker registered (or re-registered after a reconnect or a restart).
    WorkerJoined {
        /// Its id.
        id: WorkerId,
        /// What it offers.
        caps: WorkerCaps,
        /// The attempts it still runs (empty for a fresh worker process).
        running: Vec<AttemptId>,
    },
    /// A worker said it is leaving (a drain): out of placement and the farm at once.
    WorkerLeaving {
        /// Its id.
        id: WorkerId,
    },
    /// A worker's connection is gone.
    WorkerLeft {
        /// Its id.
        id: WorkerId,
    },
    /// A worker is alive and holds these leases.
    Heartbeat {
        /// Its id.
        id: WorkerId,
        /// Leases it still runs.
        running: Vec<AttemptId>,
    },
    /// A worker now holds these blobs (it fetched or produced them).
    Holds {
        /// Its id.
        id: WorkerId,
        /// The blobs.
        blobs: Vec<Digest>,
    },
    /// A run submits work.
    Submit(Box<Item>),
    /// A run cancels work.
    Cancel(Origin),
    /// A worker reports about a lease.
    Report {
        /// From whom.
        worker: WorkerId,
        /// What.
        msg: FromWorker,
    },
    /// Time passed: expire leases, give up on unplaceable items.
    Tick,
    /// `prova farm drain`: no new work for this worker; it is dismissed once it holds no
    /// lease.
    Drain {
        /// Which.
        id: WorkerId,
    },
    /// A worker said how it is: `unfit` is why it takes no work now (`None`: it does).
    Health {
        /// Which.
        id: WorkerId,
        /// Why not, e.g. its disk is below its floor.
        unfit: Option<String>,
    },
    /// `prova farm release`: a quarantined worker may take work again.
    Release {
        /// Which.
        id: WorkerId,
    },
}

/// What the shell must do.
#[derive(Clone, Debug)]
pub enum FarmCommand {
    /// Send to a worker.
    Send {
        /// Whom.
        worker: WorkerId,
        /// What (assignments carry the lease id as their attempt).
        msg: ToWorker,
    },
    /// Deliver a report to a run (translated to the run's attempt id).
    Deliver {
        /// Which run.
        run: RunId,
        /// The report.
        msg: FromWorker,
        /// Where it ran.
        worker: WorkerId,
    },
    /// The item cannot be run: the run must fail the task with this reason.
    Fail {
        /// Whose item.
        origin: Origin,
        /// Why.
        reason: String,
    },
    /// Tell a worker its report was refused (the lease is not live).
    Refuse {
        /// Whom.
        worker: WorkerId,
        /// The lease.
        lease: AttemptId,
        /// Why.
        reason: String,
    },
    /// Tell a drained worker to leave the farm (it holds no lease any more).
    Dismiss {
        /// Which.
        worker: WorkerId,
    },
    /// A worker's result was refused (see `trust.rs`): warn, count.
    Distrust {
        /// Whose.
        worker: WorkerId,
        /// For which task.
        task: prova_protocol::TaskId,
        /// What was wrong with it.
        reason: String,
    },
    /// A worker was quarantined: it gets no work until `prova farm release`.
    Quarantined {
        /// Which.
        worker: WorkerId,
        /// Why.
        reason: String,
    },
}

struct Worker {
    caps: WorkerCaps,
    busy: u32,
    holds: Holds,
    /// Attempts it runs that are no live lease (cancelled on registration): they hold slots
    /// until they end (their `Finished`, or a heartbeat without them).
    stale: HashSet<AttemptId>,
    /// A lease of it expired without a heartbeat; cleared by any sign of life.
    silent: bool,
    /// It handed an assignment back: no new work before this time.
    backoff_until: Duration,
    /// Drained: no new work; `Some(true)` once told to leave.
    draining: Option<bool>,
    /// Why it said it takes no work now (its disk), until it says otherwise.
    unfit: Option<String>,
    /// Quarantined (`trust.rs`): no work.
    quarantined: bool,
}

impl Worker {
    /// Slots taken: live leases and stale attempts.
    fn taken(&self) -> u32 {
        self.busy + self.stale.len() as u32
    }

    /// Whether it may be given an assignment now: a free slot, no hand-back backoff.
    fn open(&self, now: Duration) -> bool {
        self.taken() < self.caps.slots
            && self.backoff_until <= now
            && self.draining.is_none()
            && self.unfit.is_none()
            && !self.quarantined
    }
}

/// The blobs a worker is known to hold, at most [`HOLDS_PER_WORKER`] (first in, first out).
#[derive(Default)]
struct Holds {
    set: HashSet<Digest>,
    order: VecDeque<Digest>,
}

impl Holds {
    fn extend(&mut self, blobs: impl IntoIterator<Item = Digest>) {
        for b in blobs {
            if self.set.insert(b) {
                self.order.push_back(b);
            }
        }
        while self.order.len() > HOLDS_PER_WORKER {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    fn contains(&self, b: &Digest) -> bool {
        self.set.contains(b)
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

struct Lease {
    worker: WorkerId,
    item: Item,
    deadline: Duration,
    losses: u32,
    handbacks: u32,
    cancelled: bool,
    /// Workers whose result for it was refused: never placed there again.
    refused_by: Vec<WorkerId>,
}

/// The losses an item (by origin) was present at: the evidence for a crash loop.
#[derive(Clone, Copy, Debug, Default)]
struct Presence {
    /// Losses it was at.
    count: u32,
    /// The last of them.
    last_loss: u64,
}

struct Queued {
    item: Item,
    losses: u32,
    /// Times a worker handed it back (never losses; bounded by [`HANDBACK_LIMIT`]).
    handbacks: u32,
    since: Duration,
    last_error: Option<String>,
    /// Workers whose result for it was refused: never placed there again.
    refused_by: Vec<WorkerId>,
    /// Since when only unfit workers could run it (they may recover: its own wait).
    unfit_since: Option<Duration>,
}

impl Queued {
    /// A fresh item, or one starting over.
    fn new(item: Item, since: Duration) -> Self {
        Self {
            item,
            losses: 0,
            handbacks: 0,
            since,
            last_error: None,
            refused_by: Vec::new(),
            unfit_since: None,
        }
    }
}

/// The core.
#[derive(Default)]
pub struct FarmCore {
    workers: BTreeMap<WorkerId, Worker>,
    queue: queue::Queue,
    leases: HashMap<AttemptId, Lease>,
    next_lease: u64,
    /// Runs waiting on another run's execution of the same key: leader origin → followers.
    followers: HashMap<Origin, Vec<Origin>>,
    /// Key → origin of the item executing (or queued) for it.
    by_key: HashMap<Digest, Origin>,
    /// Items that were at a loss, while they are queued or leased.
    presence: HashMap<Origin, Presence>,
    /// Losses so far (the id of the last).
    losses: u64,
    /// Events counted for operators (`/metrics`); nothing decides on them.
    counts: FarmCounts,
    /// Leases of an earlier incarnation (`adopt.rs`).
    orphans: adopt::Orphans,
    /// What the shell must persist (`adopt.rs`).
    journal: Journal,
    /// Refusals and quarantines (`trust.rs`).
    trust: trust::Trust,
}

/// What the core counted since it started: read by the coordinator's `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FarmCounts {
    /// Leases that expired without a heartbeat.
    pub lease_expiries: u64,
    /// Items put back in the queue after a lease was lost (expiry, a worker gone, a hand-back).
    pub requeues: u64,
}

/// The sizes of the core's per-run state: every one but `worker_blobs` is zero once no run
/// has work on the farm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreHeld {
    /// Queued items.
    pub queued: usize,
    /// Live leases.
    pub leases: usize,
    /// Leaders with followers, and the followers.
    pub followers: usize,
    /// Keys in the dedup index.
    pub keys: usize,
    /// Items with loss evidence.
    pub presence: usize,
    /// Blobs remembered across workers (bounded by [`HOLDS_PER_WORKER`] each).
    pub worker_blobs: usize,
}

impl FarmCore {
    /// An empty farm whose lease ids start at 1.
    pub fn new() -> Self {
        Self::with_first_lease(1)
    }

    /// An empty farm whose lease ids start at `first`. A coordinator starts each of its
    /// incarnations past every id an earlier one gave out: workers may still run (and report)
    /// attempts of an earlier incarnation, and a repeated id would pass for the new lease.
    pub fn with_first_lease(first: u64) -> Self {
        Self { next_lease: first.max(1), ..Self::default() }
    }

    /// Connected workers with (slots, busy).
    pub fn workers(&self) -> impl Iterator<Item = (&WorkerId, &WorkerCaps, u32)> {
        self.workers.iter().map(|(id, w)| (id, &w.caps, w.taken()))
    }

    /// Whether `id` has been silent since a lease of it expired (see the module's map).
    pub fn is_silent(&self, id: &WorkerId) -> bool {
        self.workers.get(id).is_some_and(|w| w.silent)
    }

    /// The task of every live lease, with the worker holding it (adopted attempts of an
    /// earlier incarnation included).
    pub fn running(&self) -> impl Iterator<Item = (&WorkerId, &prova_protocol::TaskId)> {
        self.leases
            .values()
            .map(|l| (&l.worker, &l.item.assignment.spec.id))
            .chain(self.orphans_running())
    }

    /// Orphans of an earlier incarnation not yet claimed (adopted or waiting).
    pub fn orphans(&self) -> usize {
        self.orphans.len()
    }

    /// Lease expiries and requeues so far.
    pub fn counts(&self) -> FarmCounts {
        self.counts
    }

    /// Items waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Live leases: (lease, worker, origin).
    pub fn leases(&self) -> impl Iterator<Item = (AttemptId, &WorkerId, Origin)> {
        self.leases.iter().map(|(l, x)| (*l, &x.worker, x.item.origin))
    }

    /// What the core holds for runs right now (see [`CoreHeld`]).
    pub fn held(&self) -> CoreHeld {
        CoreHeld {
            queued: self.queue.len(),
            leases: self.leases.len(),
            followers: self.followers.len() + self.followers.values().map(Vec::len).sum::<usize>(),
            keys: self.by_key.len(),
            presence: self.presence.len(),
            worker_blobs: self.workers.values().map(|w| w.holds.len()).sum(),
        }
    }

    /// Feeds one event.
    pub fn handle(&mut self, now: Duration, event: FarmEvent) -> Vec<FarmCommand> {
        let mut out = Vec::new();
        match event {
            FarmEvent::WorkerJoined { id, caps, running } => {
                self.worker_joined(now, id, caps, running, &mut out);
            }
            FarmEvent::WorkerLeft { id } => self.worker_left(now, &id, &mut out),
            FarmEvent::WorkerLeaving { id } => self.worker_leaving(now, &id, &mut out),
            FarmEvent::Heartbeat { id, running } => self.heartbeat(now, &id, &running),
            FarmEvent::Holds { id, blobs } => self.holds(&id, blobs),
            FarmEvent::Submit(item) => {
                let Some(item) = self.claim_orphan(now, *item, &mut out) else {
                    self.place(now, &mut out);
                    return out;
                };
                self.enqueue(now, item);
            }
            FarmEvent::Cancel(origin) => self.cancel(origin, &mut out),
            FarmEvent::Report { worker, msg } => self.report(now, worker, msg, &mut out),
            FarmEvent::Tick => self.tick(now, &mut out),
            FarmEvent::Drain { id } => self.drain(&id),
            FarmEvent::Health { id, unfit } => self.health(&id, unfit),
            FarmEvent::Release { id } => {
                self.release(&id);
            }
        }
        self.place(now, &mut out);
        self.dismiss_drained(&mut out);
        out
    }
}

/// Which of the items at one loss are charged, given how many losses each has been at
/// (this one included): one alone is; of several, the one present at strictly more losses
/// than every other (the task at every loss); and any past [`PRESENCE_CAP`].
fn charged_at_loss(counts: &[u32]) -> Vec<bool> {
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let others_fewer = counts.iter().enumerate().all(|(j, &o)| j == i || o < c);
            counts.len() == 1 || (c >= 2 && others_fewer) || c > PRESENCE_CAP
        })
        .collect()
}

/// Why the farm refuses what a worker returned for a task of `spec` (see `trust.rs`):
/// outputs outside the task's declared outputs, or a fingerprint that is not its manifest's
/// (the run's own check, `run::core::refusal`). `None`: it may be delivered.
fn refusal_of(spec: &prova_protocol::spec::TaskSpec, f: &Finished) -> Option<String> {
    let outputs = f.outputs.as_ref()?;
    let globs = prova_protocol::globs::PathGlobs::new(&spec.project_dir, &spec.outputs)
        .unwrap_or_else(|_| prova_protocol::globs::PathGlobs::empty());
    crate::run::refusal(outputs, &globs, &spec.project_dir)
}

/// The same report with another attempt id.
fn retarget(msg: &FromWorker, attempt: AttemptId) -> FromWorker {
    match msg {
        FromWorker::Started { try_no, .. } => FromWorker::Started { attempt, try_no: *try_no },
        FromWorker::Output { text, .. } => FromWorker::Output { attempt, text: text.clone() },
        FromWorker::Ready { .. } => FromWorker::Ready { attempt },
        FromWorker::Finished(f) => {
            let mut f = f.clone();
            f.attempt = attempt;
            FromWorker::Finished(f)
        }
    }
}

/// The report that `origin`'s attempt ended before running anything of its own: aborted by
/// its run (an interrupted run lists it skipped), never a failure of the task.
fn aborted_unrun(origin: Origin) -> FarmCommand {
    let f = prova_protocol::work::Finished::never_ran(
        origin.attempt,
        prova_protocol::spec::ExitKind::Aborted,
    );
    FarmCommand::Deliver {
        run: origin.run,
        msg: FromWorker::Finished(Box::new(f)),
        worker: WorkerId("farm".into()),
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "adopt_tests.rs"]
mod adopt_tests;

#[cfg(test)]
#[path = "trust_tests.rs"]
mod trust_tests;
