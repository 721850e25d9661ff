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
    queue: Vec<Queued>,
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
                let holds = self.workers.remove(&id).map(|w| w.holds).unwrap_or_default();
                // Leases of this name that the worker does not run (it restarted, or an
                // assignment died with its old connection) are lost now: waiting for their
                // expiry would only delay the retry. (Leases it had when its connection was
                // seen to close were requeued then.)
                let lost: Vec<AttemptId> = self
                    .leases
                    .iter()
                    .filter(|(k, l)| l.worker == id && !running.contains(k))
                    .map(|(k, _)| *k)
                    .collect();
                let why = format!("worker {id} registered again without it (restarted)");
                self.lose_together(now, lost, &why, &mut out);
                // Attempts of an earlier incarnation it still runs are adopted.
                let adopted = self.adopt_on_join(now, &id, &running);
                // Attempts it runs that are no live lease of it will be refused when they
                // report: stop them now.
                let stale: HashSet<AttemptId> = running
                    .iter()
                    .copied()
                    .filter(|a| self.leases.get(a).is_none_or(|l| l.worker != id))
                    .filter(|a| !self.is_orphan_of(*a, &id))
                    .collect();
                for &attempt in &stale {
                    out.push(FarmCommand::Send {
                        worker: id.clone(),
                        msg: ToWorker::Cancel { attempt },
                    });
                }
                let busy = self.leases.values().filter(|l| l.worker == id).count() as u32 + adopted;
                let w = Worker {
                    caps,
                    busy,
                    holds,
                    stale,
                    silent: false,
                    backoff_until: now,
                    draining: None,
                    unfit: None,
                    quarantined: self.trust.is_quarantined(&id),
                };
                self.workers.insert(id, w);
            }
            FarmEvent::WorkerLeft { id } => {
                self.workers.remove(&id);
                let lost: Vec<AttemptId> =
                    self.leases.iter().filter(|(_, l)| l.worker == id).map(|(k, _)| *k).collect();
                self.lose_together(now, lost, &format!("worker {id} was lost"), &mut out);
            }
            FarmEvent::WorkerLeaving { id } => self.worker_leaving(now, &id, &mut out),
            FarmEvent::Heartbeat { id, running } => {
                for lease in &running {
                    if let Some(l) = self.leases.get_mut(lease)
                        && l.worker == id
                    {
                        l.deadline = now + LEASE_TTL;
                    }
                }
                if let Some(w) = self.workers.get_mut(&id) {
                    w.silent = false;
                    w.stale.retain(|a| running.contains(a));
                }
                self.renew_orphans(now, &id, &running);
            }
            FarmEvent::Holds { id, blobs } => {
                if let Some(w) = self.workers.get_mut(&id) {
                    w.holds.extend(blobs);
                }
            }
            FarmEvent::Submit(item) => {
                let Some(item) = self.claim_orphan(now, *item, &mut out) else {
                    self.place(now, &mut out);
                    return out;
                };
                if let Some(key) = item.key
                    && let Some(leader) = self.by_key.get(&key).copied()
                    && leader.run != item.origin.run
                {
                    self.followers.entry(leader).or_default().push(item.origin);
                } else {
                    if let Some(key) = item.key {
                        self.by_key.insert(key, item.origin);
                    }
                    self.queue.push(Queued::new(item, now));
                }
            }
            FarmEvent::Cancel(origin) => self.cancel(origin, &mut out),
            FarmEvent::Report { worker, msg } => self.report(now, worker, msg, &mut out),
            FarmEvent::Tick => {
                let expired: Vec<AttemptId> = self
                    .leases
                    .iter()
                    .filter(|(_, l)| l.deadline <= now)
                    .map(|(k, _)| *k)
                    .collect();
                // One worker's leases expiring in one tick went silent together: one loss.
                let mut by_worker: BTreeMap<WorkerId, Vec<AttemptId>> = BTreeMap::new();
                for lease in expired {
                    if let Some(l) = self.leases.get(&lease) {
                        let w = l.worker.clone();
                        if let Some(worker) = self.workers.get_mut(&w) {
                            worker.busy = worker.busy.saturating_sub(1);
                            worker.silent = true;
                        }
                        out.push(FarmCommand::Send {
                            worker: w.clone(),
                            msg: ToWorker::Cancel { attempt: lease },
                        });
                        self.counts.lease_expiries += 1;
                        by_worker.entry(w).or_default().push(lease);
                    }
                }
                for (w, leases) in by_worker {
                    let why = format!("lease on worker {w} expired (no heartbeat)");
                    self.lose_together(now, leases, &why, &mut out);
                }
                self.expire_orphans(now, &mut out);
                self.expire_unplaceable(now, &mut out);
            }
            FarmEvent::Drain { id } => {
                if let Some(w) = self.workers.get_mut(&id) {
                    w.draining.get_or_insert(false);
                }
            }
            FarmEvent::Health { id, unfit } => {
                if let Some(w) = self.workers.get_mut(&id) {
                    w.unfit = unfit;
                }
            }
            FarmEvent::Release { id } => {
                self.release(&id);
            }
        }
        self.place(now, &mut out);
        self.dismiss_drained(&mut out);
        out
    }

    fn cancel(&mut self, origin: Origin, out: &mut Vec<FarmCommand>) {
        // A follower just stops following.
        for f in self.followers.values_mut() {
            f.retain(|o| *o != origin);
        }
        if let Some(pos) = self.queue.iter().position(|q| q.item.origin == origin) {
            let q = self.queue.remove(pos);
            self.forget_key(&q.item);
            // Promote a follower so its run is not left waiting on a cancelled leader.
            self.promote_follower(origin, q.item, q.since);
            // It never ran: aborted before it started (an interrupted run lists it skipped),
            // not a failure of the task.
            out.push(aborted_unrun(origin));
            return;
        }
        let Some((&lease, _)) = self.leases.iter().find(|(_, l)| l.item.origin == origin) else {
            return;
        };
        let followers = self.followers.remove(&origin).unwrap_or_default();
        if let Some((&next, rest)) = followers.split_first() {
            // Other runs follow this execution: it goes on for them, led by the first. The
            // run that cancelled hears at once that its task is aborted; the worker is not
            // told to stop (another run's Ctrl-C must not abort this one's task).
            if let Some(l) = self.leases.get_mut(&lease) {
                l.item.origin = next;
                if let Some(key) = l.item.key {
                    self.by_key.insert(key, next);
                    // Its row now serves the run that leads it.
                    self.journal.placed.push(LeaseRecord {
                        lease,
                        worker: l.worker.clone(),
                        key,
                        task: l.item.assignment.spec.id.clone(),
                        run: next.run,
                    });
                }
            }
            if let Some(p) = self.presence.remove(&origin) {
                self.presence.insert(next, p);
            }
            if !rest.is_empty() {
                self.followers.insert(next, rest.to_vec());
            }
            out.push(aborted_unrun(origin));
            return;
        }
        if let Some(l) = self.leases.get_mut(&lease) {
            l.cancelled = true;
            // No later run may follow an execution that is being stopped.
            if let Some(key) = l.item.key
                && self.by_key.get(&key) == Some(&origin)
            {
                self.by_key.remove(&key);
            }
            out.push(FarmCommand::Send {
                worker: l.worker.clone(),
                msg: ToWorker::Cancel { attempt: lease },
            });
        }
    }

    fn promote_follower(&mut self, leader: Origin, mut item: Item, since: Duration) {
        let Some(mut fs) = self.followers.remove(&leader) else { return };
        if fs.is_empty() {
            return;
        }
        let next = fs.remove(0);
        item.origin = next;
        if let Some(key) = item.key {
            self.by_key.insert(key, next);
        }
        if !fs.is_empty() {
            self.followers.insert(next, fs);
        }
        self.queue.push(Queued::new(item, since));
    }

    /// The item is done with (finished, failed, cancelled): its key and its loss evidence go.
    fn forget_key(&mut self, item: &Item) {
        self.presence.remove(&item.origin);
        if let Some(key) = item.key
            && self.by_key.get(&key) == Some(&item.origin)
        {
            self.by_key.remove(&key);
        }
    }

    fn report(
        &mut self,
        now: Duration,
        worker: WorkerId,
        msg: FromWorker,
        out: &mut Vec<FarmCommand>,
    ) {
        let lease = match &msg {
            FromWorker::Started { attempt, .. }
            | FromWorker::Output { attempt, .. }
            | FromWorker::Ready { attempt } => *attempt,
            FromWorker::Finished(f) => f.attempt,
        };
        let finished = matches!(msg, FromWorker::Finished(_));
        if let Some(w) = self.workers.get_mut(&worker) {
            w.silent = false;
            if finished {
                w.stale.remove(&lease);
            }
        }
        let live = self.leases.get(&lease).is_some_and(|l| l.worker == worker);
        if !live && self.orphan_report(now, &worker, lease, &msg) {
            return;
        }
        if !live {
            out.push(FarmCommand::Refuse {
                worker,
                lease,
                reason: format!("{lease} is not a live lease"),
            });
            return;
        }
        if let FromWorker::Finished(f) = &msg
            && let Some(why) = &f.handback
        {
            self.hand_back(now, lease, &worker, why, out);
            return;
        }
        if let FromWorker::Finished(f) = &msg
            && let Some(why) =
                self.leases.get(&lease).and_then(|l| refusal_of(&l.item.assignment.spec, f))
        {
            self.refuse_result(now, lease, &worker, why, out);
            return;
        }
        let Some(l) = self.leases.get_mut(&lease) else { return };
        l.deadline = now + LEASE_TTL;
        let origin = l.item.origin;
        let mut targets = vec![origin];
        if finished {
            targets.extend(self.followers.remove(&origin).unwrap_or_default());
        }
        for t in targets {
            out.push(FarmCommand::Deliver {
                run: t.run,
                msg: retarget(&msg, t.attempt),
                worker: worker.clone(),
            });
        }
        if finished && let Some(l) = self.leases.remove(&lease) {
            if let Some(w) = self.workers.get_mut(&l.worker) {
                w.busy = w.busy.saturating_sub(1);
            }
            self.forget_key(&l.item);
        }
    }

    /// `leases` were lost together (one worker's, at one event): one loss. Each item present
    /// is requeued, charged only when the evidence points at it (see the module docs).
    fn lose_together(
        &mut self,
        now: Duration,
        leases: Vec<AttemptId>,
        reason: &str,
        out: &mut Vec<FarmCommand>,
    ) {
        self.losses += 1;
        let loss = self.losses;
        // Cancelled leases are no evidence: their runs no longer want them.
        let present: Vec<(AttemptId, Origin)> = leases
            .iter()
            .filter_map(|k| {
                self.leases.get(k).filter(|l| !l.cancelled).map(|l| (*k, l.item.origin))
            })
            .collect();
        let counts: Vec<u32> = present
            .iter()
            .map(|(_, o)| {
                let p = self.presence.entry(*o).or_default();
                p.count += 1;
                p.last_loss = loss;
                p.count
            })
            .collect();
        let charged = charged_at_loss(&counts);
        for lease in leases {
            let charge = present.iter().position(|(k, _)| *k == lease).is_none_or(|i| charged[i]);
            let why = if charge {
                reason.to_owned()
            } else {
                format!("{reason}; not charged: other tasks were there too")
            };
            self.requeue_as(now, lease, why, charge, out);
        }
    }

    /// `worker` gave `lease` back for a reason of its own: it takes no work for
    /// [`HANDBACK_BACKOFF`], and the item is queued again (placed elsewhere while another
    /// worker fits) without a loss charged; only [`HANDBACK_LIMIT`] hand-backs in a row fail
    /// it. Nothing reaches the run.
    fn hand_back(
        &mut self,
        now: Duration,
        lease: AttemptId,
        worker: &WorkerId,
        why: &prova_protocol::work::HandBack,
        out: &mut Vec<FarmCommand>,
    ) {
        if let Some(w) = self.workers.get_mut(worker) {
            w.busy = w.busy.saturating_sub(1);
            w.backoff_until = now + HANDBACK_BACKOFF;
        }
        let reason = format!("worker {worker} handed it back: {}", why.describe());
        let Some(l) = self.leases.get(&lease) else { return };
        if l.cancelled {
            // `requeue_as` reports a cancelled item aborted to its run.
            self.requeue_as(now, lease, reason, false, out);
            return;
        }
        let Some(l) = self.end_lease(lease) else { return };
        let handbacks = l.handbacks + 1;
        if handbacks > HANDBACK_LIMIT {
            self.forget_key(&l.item);
            let reason = format!("{reason}; handed back {handbacks} times, giving up");
            for t in std::iter::once(l.item.origin)
                .chain(self.followers.remove(&l.item.origin).unwrap_or_default())
            {
                out.push(FarmCommand::Fail { origin: t, reason: reason.clone() });
            }
            return;
        }
        // The backoff sends it elsewhere when another worker has a slot now.
        self.queue.push(Queued {
            item: l.item,
            losses: l.losses,
            handbacks,
            since: now,
            last_error: Some(reason),
            refused_by: l.refused_by,
            unfit_since: None,
        });
    }

    /// Requeues `lease` (a cancelled one is reported aborted instead); `charge`: the loss
    /// counts against the item's retry budget.
    fn requeue_as(
        &mut self,
        now: Duration,
        lease: AttemptId,
        reason: String,
        charge: bool,
        out: &mut Vec<FarmCommand>,
    ) {
        let Some(l) = self.end_lease(lease) else { return };
        if l.cancelled {
            // The run no longer wants it: report it aborted to the run (and followers).
            self.forget_key(&l.item);
            let mut f = prova_protocol::work::Finished::never_ran(
                l.item.origin.attempt,
                prova_protocol::spec::ExitKind::Aborted,
            );
            for t in std::iter::once(l.item.origin)
                .chain(self.followers.remove(&l.item.origin).unwrap_or_default())
            {
                f.attempt = t.attempt;
                out.push(FarmCommand::Deliver {
                    run: t.run,
                    msg: FromWorker::Finished(Box::new(f.clone())),
                    worker: l.worker.clone(),
                });
            }
            return;
        }
        let losses = l.losses + u32::from(charge);
        if losses > RETRY_BUDGET {
            self.forget_key(&l.item);
            let reason = format!(
                "{reason}; gave up after {losses} worker losses (retry budget {RETRY_BUDGET})"
            );
            for t in std::iter::once(l.item.origin)
                .chain(self.followers.remove(&l.item.origin).unwrap_or_default())
            {
                out.push(FarmCommand::Fail { origin: t, reason: reason.clone() });
            }
            return;
        }
        let handbacks = l.handbacks;
        self.counts.requeues += 1;
        self.queue.push(Queued {
            item: l.item,
            losses,
            handbacks,
            since: now,
            last_error: Some(reason),
            refused_by: l.refused_by,
            unfit_since: None,
        });
    }

    fn expire_unplaceable(&mut self, now: Duration, out: &mut Vec<FarmCommand>) {
        let mut i = 0;
        while i < self.queue.len() {
            let q = &self.queue[i];
            // Connected workers that could run it (a worker that refused a result of it, or
            // is quarantined, never will); of them, those fit to now.
            let could: Vec<&Worker> = self
                .workers
                .iter()
                .filter(|(id, w)| {
                    !w.quarantined && !q.refused_by.contains(id) && q.item.reqs.fits(&w.caps)
                })
                .map(|(_, w)| w)
                .collect();
            let fit_now = could.iter().any(|w| w.unfit.is_none());
            let why = if could.is_empty() && now.saturating_sub(q.since) >= NO_WORKER_WAIT {
                Some(format!(
                    "no connected worker can run it (needs {}) after waiting {}s",
                    q.item.reqs.describe(),
                    NO_WORKER_WAIT.as_secs()
                ))
            } else if !could.is_empty() && !fit_now {
                // Only workers that said they are unfit could: they may recover, so the wait
                // counts from when that began.
                let since = *self.queue[i].unfit_since.get_or_insert(now);
                let unfit: Vec<&str> = could.iter().filter_map(|w| w.unfit.as_deref()).collect();
                (now.saturating_sub(since) >= NO_WORKER_WAIT).then(|| {
                    format!(
                        "every worker that could run it is unfit ({}) after waiting {}s",
                        unfit.join("; "),
                        NO_WORKER_WAIT.as_secs()
                    )
                })
            } else {
                self.queue[i].unfit_since = None;
                None
            };
            let Some(mut reason) = why else {
                i += 1;
                continue;
            };
            let q = self.queue.remove(i);
            self.forget_key(&q.item);
            if let Some(e) = q.last_error {
                reason.push_str(&format!("; last error: {e}"));
            }
            for t in std::iter::once(q.item.origin)
                .chain(self.followers.remove(&q.item.origin).unwrap_or_default())
            {
                out.push(FarmCommand::Fail { origin: t, reason: reason.clone() });
            }
        }
    }

    /// Removes `lease`; its row goes too (it ended without a result any run needs).
    fn end_lease(&mut self, lease: AttemptId) -> Option<Lease> {
        let l = self.leases.remove(&lease)?;
        if l.item.key.is_some() {
            self.journal.ended.push(lease);
        }
        Some(l)
    }

    fn place(&mut self, now: Duration, out: &mut Vec<FarmCommand>) {
        // Nothing to place, or nowhere to place it: every event calls this, and scanning a
        // queue of thousands while all slots are taken made a large run quadratic.
        if self.queue.is_empty() || !self.any_free_slot(now) {
            return;
        }
        // Highest priority first; ties by submission order (stable sort).
        self.queue.sort_by_key(|q| std::cmp::Reverse(q.item.priority));
        let mut i = 0;
        while i < self.queue.len() && self.any_free_slot(now) {
            let Some(worker) = self.choose(now, &self.queue[i]) else {
                i += 1;
                continue;
            };
            let q = self.queue.remove(i);
            let lease = AttemptId(self.next_lease);
            self.next_lease += 1;
            let mut assignment = q.item.assignment.clone();
            assignment.attempt = lease;
            if let Some(w) = self.workers.get_mut(&worker) {
                w.busy += 1;
                w.holds.extend(q.item.blobs.iter().copied());
            }
            out.push(FarmCommand::Send {
                worker: worker.clone(),
                msg: ToWorker::Assign(Box::new(assignment)),
            });
            if let Some(key) = q.item.key {
                self.journal.placed.push(LeaseRecord {
                    lease,
                    worker: worker.clone(),
                    key,
                    task: q.item.assignment.spec.id.clone(),
                    run: q.item.origin.run,
                });
            }
            self.leases.insert(
                lease,
                Lease {
                    worker,
                    item: q.item,
                    deadline: now + LEASE_TTL,
                    losses: q.losses,
                    handbacks: q.handbacks,
                    cancelled: false,
                    refused_by: q.refused_by,
                },
            );
        }
    }

    fn any_free_slot(&self, now: Duration) -> bool {
        self.workers.values().any(|w| w.open(now))
    }

    fn choose(&self, now: Duration, q: &Queued) -> Option<WorkerId> {
        let item = &q.item;
        // The worker to avoid, and silent ones, only when no other could ever take the item.
        let shunned = |id: &WorkerId, w: &Worker| w.silent || item.avoid.as_ref() == Some(id);
        let fitting: Vec<(&WorkerId, &Worker)> = self
            .workers
            .iter()
            .filter(|(_, w)| w.open(now) && item.reqs.fits(&w.caps))
            .filter(|(id, _)| !q.refused_by.contains(id))
            .filter(|(id, _)| !self.runs_a_co_suspect(item, id))
            .collect();
        let preferred: Vec<&(&WorkerId, &Worker)> =
            fitting.iter().filter(|(id, w)| !shunned(id, w)).collect();
        let pool: Vec<&(&WorkerId, &Worker)> = if preferred.is_empty() {
            // Only shunned workers fit now: take one only if no other worker could ever run
            // the item (a single-machine farm); otherwise wait for another.
            let others_exist = self.workers.iter().any(|(id, w)| {
                !shunned(id, w)
                    && w.draining.is_none()
                    && !w.quarantined
                    && !q.refused_by.contains(id)
                    && item.reqs.fits(&w.caps)
            });
            if others_exist {
                return None;
            }
            fitting.iter().collect()
        } else {
            preferred
        };
        pool.into_iter()
            .max_by_key(|(id, w)| {
                let local = item.blobs.iter().filter(|b| w.holds.contains(b)).count();
                (local, w.caps.slots.saturating_sub(w.taken()), std::cmp::Reverse((*id).clone()))
            })
            .map(|(id, _)| (*id).clone())
    }
}

impl FarmCore {
    /// Draining workers that hold no lease any more are told to leave, once.
    fn dismiss_drained(&mut self, out: &mut Vec<FarmCommand>) {
        for (id, w) in &mut self.workers {
            if w.draining == Some(false) && !self.leases.values().any(|l| l.worker == *id) {
                w.draining = Some(true);
                out.push(FarmCommand::Dismiss { worker: id.clone() });
            }
        }
    }

    /// A worker is leaving (SIGTERM): it is out of placement and of [`FarmCore::workers`] at
    /// once, and what it held is requeued free — it handed the work back, the tasks did
    /// nothing wrong. Its late reports are refused (no live lease).
    fn worker_leaving(&mut self, now: Duration, id: &WorkerId, out: &mut Vec<FarmCommand>) {
        self.workers.remove(id);
        let held: Vec<AttemptId> =
            self.leases.iter().filter(|(_, l)| l.worker == *id).map(|(k, _)| *k).collect();
        for lease in held {
            self.requeue_as(now, lease, format!("worker {id} left (drained)"), false, out);
        }
    }

    /// Whether `worker` holds a lease of an item that was at `item`'s last loss: the two are
    /// kept apart, so the next loss can tell which of them it follows.
    fn runs_a_co_suspect(&self, item: &Item, worker: &WorkerId) -> bool {
        let Some(loss) = self.presence.get(&item.origin).map(|p| p.last_loss) else {
            return false;
        };
        self.leases.values().any(|l| {
            l.worker == *worker
                && l.item.origin != item.origin
                && self.presence.get(&l.item.origin).is_some_and(|p| p.last_loss == loss)
        })
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
