//! A restarted coordinator adopts what its predecessor had running (a part of the farm core,
//! sans-IO like it; tested in `adopt_tests.rs`).
//!
//! Every keyed lease is persisted when it is placed ([`Journal`], written by the shell into
//! the store's `farm_leases`) and forgotten when it ends without a result, or when the run
//! that got its result is over (its save is done by then). A coordinator that starts finds
//! the rows of its predecessor ([`FarmCore::restore`]): each is an **orphan**, a lease whose
//! worker may still run it and whose run is gone.
//!
//! - A worker that registers with an orphan among its running attempts keeps running it
//!   (it is not cancelled as a stale attempt); one that registers without it (and does not
//!   resend its report right after), or never comes back within [`ADOPT_GRACE`], drops it.
//! - Its reports are accepted, not refused: `Started`/`Output` renew it; its `Finished` is
//!   kept (for [`ADOPT_KEEP`]), and so is one the worker resends after reconnecting (a
//!   report lost with the old coordinator).
//! - The run that re-submits the same key (the client re-attached) takes the orphan over:
//!   a running one becomes its lease (other runs follow it as usual), a finished one is
//!   delivered to it at once — checked like any report ([`super::refusal_of`]). Nothing is
//!   executed a second time.

use std::collections::HashMap;
use std::time::Duration;

use prova_protocol::work::{Finished, FromWorker, ToWorker};
use prova_protocol::{AttemptId, Digest, RunId, TaskId, WorkerId};

use super::{FarmCommand, FarmCore, Item, LEASE_TTL, Lease};

/// How long an orphan waits for its worker to register again after the coordinator started
/// (a worker notices a restarted coordinator within seconds: a stateless reset, or its idle
/// timeout, then its redial backoff).
pub const ADOPT_GRACE: Duration = Duration::from_secs(30);

/// How long a finished orphan's report waits for its run to re-submit the key (the client
/// redials for a bounded time, then uploads and submits again).
pub const ADOPT_KEEP: Duration = Duration::from_secs(600);

/// A keyed lease as the store keeps it: enough to adopt it after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The lease id (the worker's attempt id).
    pub lease: AttemptId,
    /// Where it runs.
    pub worker: WorkerId,
    /// Its dedup key (the task key within the run's tier, `runs::dedup_key`).
    pub key: Digest,
    /// The task, for `farm status` and logs.
    pub task: TaskId,
    /// The run (of this incarnation) it serves: its rows go when that run is over.
    pub run: RunId,
}

/// What the shell must persist, drained after each event ([`FarmCore::take_journal`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Journal {
    /// Leases placed (or taken over by another run): insert or replace their rows.
    pub placed: Vec<LeaseRecord>,
    /// Leases that ended without a result any run still needs: delete their rows.
    pub ended: Vec<AttemptId>,
    /// Workers quarantined, with the reason.
    pub quarantined: Vec<(WorkerId, String)>,
    /// Workers released from quarantine.
    pub released: Vec<WorkerId>,
}

impl Journal {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.placed.is_empty()
            && self.ended.is_empty()
            && self.quarantined.is_empty()
            && self.released.is_empty()
    }

    /// Appends `later` (written after this).
    pub fn extend(&mut self, later: Journal) {
        self.placed.extend(later.placed);
        self.ended.extend(later.ended);
        self.quarantined.extend(later.quarantined);
        self.released.extend(later.released);
    }
}

/// A lease of an earlier incarnation.
#[derive(Debug)]
pub(super) struct Orphan {
    worker: WorkerId,
    key: Digest,
    task: TaskId,
    /// Dropped when this passes without a sign of its worker (renewed like a lease).
    deadline: Duration,
    /// Its worker registered again still running it: it holds one of its slots.
    adopted: bool,
    /// Its report, once the worker sent it; kept until `keep_until`.
    finished: Option<Box<Finished>>,
    keep_until: Duration,
}

/// The orphans, by lease and by key.
#[derive(Debug, Default)]
pub(super) struct Orphans {
    by_lease: HashMap<AttemptId, Orphan>,
    by_key: HashMap<Digest, AttemptId>,
}

impl Orphans {
    /// How many there are.
    pub(super) fn len(&self) -> usize {
        self.by_lease.len()
    }

    fn remove(&mut self, lease: AttemptId) -> Option<Orphan> {
        let o = self.by_lease.remove(&lease)?;
        if self.by_key.get(&o.key) == Some(&lease) {
            self.by_key.remove(&o.key);
        }
        Some(o)
    }

    /// Whether `lease` is an orphan running on `worker`.
    fn of(&self, lease: AttemptId, worker: &WorkerId) -> bool {
        self.by_lease.get(&lease).is_some_and(|o| o.worker == *worker)
    }
}

impl FarmCore {
    /// Takes in the leases an earlier incarnation persisted (at start-up): each is an orphan
    /// until its worker and a run claim it, or [`ADOPT_GRACE`] passes.
    pub fn restore(&mut self, now: Duration, records: Vec<LeaseRecord>) {
        for r in records {
            if self.leases.contains_key(&r.lease) || self.orphans.by_lease.contains_key(&r.lease) {
                continue;
            }
            self.orphans.by_key.insert(r.key, r.lease);
            self.orphans.by_lease.insert(
                r.lease,
                Orphan {
                    worker: r.worker,
                    key: r.key,
                    task: r.task,
                    deadline: now + ADOPT_GRACE,
                    adopted: false,
                    finished: None,
                    keep_until: now + ADOPT_KEEP,
                },
            );
        }
    }

    /// What to persist since the last call.
    pub fn take_journal(&mut self) -> Journal {
        std::mem::take(&mut self.journal)
    }

    /// The orphans running on a worker (for `farm status`): (worker, task).
    pub(super) fn orphans_running(&self) -> impl Iterator<Item = (&WorkerId, &TaskId)> {
        self.orphans
            .by_lease
            .values()
            .filter(|o| o.adopted && o.finished.is_none())
            .map(|o| (&o.worker, &o.task))
    }

    /// `id` registered running `running`: its orphans among them are adopted (they hold
    /// slots and are not cancelled). The others may have finished while the worker was
    /// away: their reports follow the registration (the worker resends what it sent lately),
    /// so they wait one [`LEASE_TTL`] for them. Returns how many slots the adopted ones take.
    pub(super) fn adopt_on_join(
        &mut self,
        now: Duration,
        id: &WorkerId,
        running: &[AttemptId],
    ) -> u32 {
        let mine: Vec<AttemptId> = self
            .orphans
            .by_lease
            .iter()
            .filter(|(_, o)| o.worker == *id && o.finished.is_none())
            .map(|(l, _)| *l)
            .collect();
        let mut adopted = 0;
        for lease in mine {
            if running.contains(&lease) {
                if let Some(o) = self.orphans.by_lease.get_mut(&lease) {
                    o.adopted = true;
                    o.deadline = now + LEASE_TTL;
                    adopted += 1;
                }
            } else if let Some(o) = self.orphans.by_lease.get_mut(&lease) {
                o.adopted = false;
                o.deadline = now + LEASE_TTL;
            }
        }
        adopted
    }

    /// Whether `attempt` of `worker` is an orphan (not a stale attempt to cancel).
    pub(super) fn is_orphan_of(&self, attempt: AttemptId, worker: &WorkerId) -> bool {
        self.orphans.of(attempt, worker)
    }

    /// A heartbeat of `id` running `running` renews its orphans.
    pub(super) fn renew_orphans(&mut self, now: Duration, id: &WorkerId, running: &[AttemptId]) {
        for lease in running {
            if let Some(o) = self.orphans.by_lease.get_mut(lease)
                && o.worker == *id
                && o.finished.is_none()
            {
                o.deadline = now + LEASE_TTL;
            }
        }
    }

    /// A report for `lease` that is no live lease: taken when it is an orphan of `worker`
    /// (`true`), else left to be refused.
    pub(super) fn orphan_report(
        &mut self,
        now: Duration,
        worker: &WorkerId,
        lease: AttemptId,
        msg: &FromWorker,
    ) -> bool {
        if !self.orphans.of(lease, worker) {
            return false;
        }
        let FromWorker::Finished(f) = msg else {
            if let Some(o) = self.orphans.by_lease.get_mut(&lease) {
                o.deadline = now + LEASE_TTL;
            }
            return true;
        };
        let adopted = self.orphans.by_lease.get(&lease).is_some_and(|o| o.adopted);
        if adopted && let Some(w) = self.workers.get_mut(worker) {
            w.busy = w.busy.saturating_sub(1);
        }
        if f.handback.is_some() {
            // It ran nothing that counts: the run that re-submits it runs it afresh.
            self.orphans.remove(lease);
            self.journal.ended.push(lease);
            return true;
        }
        if let Some(o) = self.orphans.by_lease.get_mut(&lease)
            && o.finished.is_none()
        {
            o.adopted = false;
            o.finished = Some(f.clone());
            o.keep_until = now + ADOPT_KEEP;
            tracing::debug!(%lease, task = %o.task, "an adopted attempt finished; kept for its run");
        }
        true
    }

    /// A run submits `item`: when an orphan runs (or ran) its key, the run takes it over and
    /// `None` is returned; else the item is handed back for the usual path.
    pub(super) fn claim_orphan(
        &mut self,
        now: Duration,
        item: Item,
        out: &mut Vec<FarmCommand>,
    ) -> Option<Item> {
        let Some(key) = item.key else { return Some(item) };
        let Some(&lease) = self.orphans.by_key.get(&key) else { return Some(item) };
        let Some(o) = self.orphans.remove(lease) else { return Some(item) };
        let origin = item.origin;
        let record = LeaseRecord {
            lease,
            worker: o.worker.clone(),
            key,
            task: item.assignment.spec.id.clone(),
            run: origin.run,
        };
        match o.finished {
            Some(f) => {
                if let Some(why) = super::refusal_of(&item.assignment.spec, &f) {
                    // A lie kept across the restart is refused like any other.
                    self.journal.ended.push(lease);
                    self.refused_orphan(now, &o.worker, item, why, out);
                    return None;
                }
                tracing::info!(%lease, task = %record.task, worker = %o.worker, "delivering an adopted attempt's result to the run that re-submitted it");
                // The row stays until this run is over (its save is done by then).
                self.journal.placed.push(record);
                let tries = f.tries.max(1);
                let started = FromWorker::Started { attempt: origin.attempt, try_no: tries };
                let mut f = f;
                f.attempt = origin.attempt;
                out.push(FarmCommand::Deliver {
                    run: origin.run,
                    msg: started,
                    worker: o.worker.clone(),
                });
                out.push(FarmCommand::Deliver {
                    run: origin.run,
                    msg: FromWorker::Finished(f),
                    worker: o.worker,
                });
            }
            None => {
                tracing::info!(%lease, task = %record.task, worker = %o.worker, "a re-submitted task follows the attempt its worker still runs");
                self.journal.placed.push(record);
                self.by_key.insert(key, origin);
                out.push(FarmCommand::Deliver {
                    run: origin.run,
                    msg: FromWorker::Started { attempt: origin.attempt, try_no: 1 },
                    worker: o.worker.clone(),
                });
                self.leases.insert(
                    lease,
                    Lease {
                        worker: o.worker,
                        item,
                        deadline: o.deadline.max(now + LEASE_TTL),
                        losses: 0,
                        handbacks: 0,
                        cancelled: false,
                        refused_by: Vec::new(),
                    },
                );
            }
        }
        None
    }

    /// Drops the orphans whose worker stayed silent past their deadline (an adopted one is
    /// cancelled on its worker: nobody will want it) and finished ones nobody claimed in
    /// [`ADOPT_KEEP`].
    pub(super) fn expire_orphans(&mut self, now: Duration, out: &mut Vec<FarmCommand>) {
        let gone: Vec<AttemptId> = self
            .orphans
            .by_lease
            .iter()
            .filter(|(_, o)| match o.finished {
                Some(_) => o.keep_until <= now,
                None => o.deadline <= now,
            })
            .map(|(l, _)| *l)
            .collect();
        for lease in gone {
            let Some(o) = self.orphans.remove(lease) else { continue };
            self.journal.ended.push(lease);
            if o.adopted && o.finished.is_none() {
                if let Some(w) = self.workers.get_mut(&o.worker) {
                    w.busy = w.busy.saturating_sub(1);
                }
                out.push(FarmCommand::Send {
                    worker: o.worker,
                    msg: ToWorker::Cancel { attempt: lease },
                });
            }
        }
    }
}
