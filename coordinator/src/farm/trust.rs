//! Lying workers (a part of the farm core, sans-IO like it; tested in `trust_tests.rs`).
//!
//! The farm checks every result a worker returns against the task's declared outputs before
//! any run sees it ([`super::refusal_of`]: a manifest outside the outputs, a fingerprint that
//! is not the manifest's). A refused result is the **worker's** fault, not the task's:
//! - the item is queued again and never placed on that worker again; when no other worker
//!   could ever run it, it fails at once, naming the worker and what it returned;
//! - the worker is charged one refusal; [`QUARANTINE_AFTER`] refusals within
//!   [`QUARANTINE_WINDOW`] quarantine it: no more work, its other leases are cancelled and
//!   requeued elsewhere (free), `farm status` and the dashboard show why. The quarantine
//!   outlives the worker's reconnects and restarts (it is by certificate name) and the
//!   coordinator's restarts (persisted through the [`super::Journal`]); `prova farm release
//!   WORKER` ends it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use prova_protocol::work::ToWorker;
use prova_protocol::{AttemptId, WorkerId};

use super::{FarmCommand, FarmCore, Item, Queued};

/// Refusals within [`QUARANTINE_WINDOW`] that quarantine a worker.
pub const QUARANTINE_AFTER: usize = 3;
/// The window refusals are counted in.
pub const QUARANTINE_WINDOW: Duration = Duration::from_secs(600);

/// Refusals per worker and the quarantined workers.
#[derive(Debug, Default)]
pub(super) struct Trust {
    refusals: HashMap<WorkerId, VecDeque<Duration>>,
    quarantined: BTreeMap<WorkerId, String>,
}

impl Trust {
    /// Whether `id` is quarantined.
    pub(super) fn is_quarantined(&self, id: &WorkerId) -> bool {
        self.quarantined.contains_key(id)
    }

    /// Counts a refusal of `id` at `now`; the reason to quarantine it, when this refusal is
    /// the one too many.
    fn charge(&mut self, now: Duration, id: &WorkerId, why: &str) -> Option<String> {
        if self.is_quarantined(id) {
            return None;
        }
        let times = self.refusals.entry(id.clone()).or_default();
        times.push_back(now);
        while times.front().is_some_and(|t| now.saturating_sub(*t) > QUARANTINE_WINDOW) {
            times.pop_front();
        }
        (times.len() >= QUARANTINE_AFTER).then(|| {
            format!(
                "{} results refused within {} s; the last: {why}",
                times.len(),
                QUARANTINE_WINDOW.as_secs()
            )
        })
    }
}

impl FarmCore {
    /// Workers in quarantine, with why.
    pub fn quarantined(&self) -> impl Iterator<Item = (&WorkerId, &str)> {
        self.trust.quarantined.iter().map(|(w, r)| (w, r.as_str()))
    }

    /// Quarantines persisted by an earlier incarnation (at start-up).
    pub fn restore_quarantine(&mut self, list: Vec<(WorkerId, String)>) {
        for (id, reason) in list {
            if let Some(w) = self.workers.get_mut(&id) {
                w.quarantined = true;
            }
            self.trust.quarantined.insert(id, reason);
        }
    }

    /// `prova farm release`: `id` may take work again; why it had been quarantined.
    pub(super) fn release(&mut self, id: &WorkerId) -> Option<String> {
        self.trust.refusals.remove(id);
        let was = self.trust.quarantined.remove(id)?;
        if let Some(w) = self.workers.get_mut(id) {
            w.quarantined = false;
        }
        self.journal.released.push(id.clone());
        Some(was)
    }

    /// `worker` returned for `lease` what the task's outputs refuse: the lease ends, the
    /// worker is charged, and the item goes elsewhere — or fails when no other worker could
    /// ever run it.
    pub(super) fn refuse_result(
        &mut self,
        now: Duration,
        lease: AttemptId,
        worker: &WorkerId,
        why: String,
        out: &mut Vec<FarmCommand>,
    ) {
        if let Some(w) = self.workers.get_mut(worker) {
            w.busy = w.busy.saturating_sub(1);
        }
        let Some(l) = self.leases.get(&lease) else { return };
        let task = l.item.assignment.spec.id.clone();
        out.push(FarmCommand::Distrust { worker: worker.clone(), task, reason: why.clone() });
        self.charge(now, worker, &why, out);
        if self.leases.get(&lease).is_some_and(|l| l.cancelled) {
            // Its run no longer wants it: reported aborted, as any cancelled lease.
            self.requeue_as(now, lease, why, false, out);
            return;
        }
        let Some(l) = self.end_lease(lease) else { return };
        let mut refused_by = l.refused_by;
        refused_by.push(worker.clone());
        self.requeue_refused(now, l.item, l.losses, l.handbacks, refused_by, worker, &why, out);
    }

    /// A finished orphan's result was refused when its run claimed it.
    pub(super) fn refused_orphan(
        &mut self,
        now: Duration,
        worker: &WorkerId,
        item: Item,
        why: String,
        out: &mut Vec<FarmCommand>,
    ) {
        let task = item.assignment.spec.id.clone();
        out.push(FarmCommand::Distrust { worker: worker.clone(), task, reason: why.clone() });
        self.charge(now, worker, &why, out);
        if let Some(key) = item.key {
            self.by_key.insert(key, item.origin);
        }
        self.requeue_refused(now, item, 0, 0, vec![worker.clone()], worker, &why, out);
    }

    /// Queues `item` again away from `refused_by`, or fails it (and its followers) when no
    /// connected worker outside them could ever run it.
    #[allow(clippy::too_many_arguments)] // the item's state, carried over
    fn requeue_refused(
        &mut self,
        now: Duration,
        item: Item,
        losses: u32,
        handbacks: u32,
        refused_by: Vec<WorkerId>,
        worker: &WorkerId,
        why: &str,
        out: &mut Vec<FarmCommand>,
    ) {
        let reason = format!("worker `{worker}` returned {why}; refused, nothing was stored");
        let elsewhere = self.workers.iter().any(|(id, w)| {
            !refused_by.contains(id)
                && !w.quarantined
                && w.draining.is_none()
                && item.reqs.fits(&w.caps)
        });
        if !elsewhere {
            self.forget_key(&item);
            let reason = format!("{reason}; no other worker can run it");
            for t in std::iter::once(item.origin)
                .chain(self.followers.remove(&item.origin).unwrap_or_default())
            {
                out.push(FarmCommand::Fail { origin: t, reason: reason.clone() });
            }
            return;
        }
        self.counts.requeues += 1;
        self.queue.push(Queued {
            item,
            losses,
            handbacks,
            since: now,
            last_error: Some(reason),
            refused_by,
            unfit_since: None,
        });
    }

    /// Charges `worker` one refusal; quarantines it when that is one too many.
    fn charge(&mut self, now: Duration, worker: &WorkerId, why: &str, out: &mut Vec<FarmCommand>) {
        let Some(reason) = self.trust.charge(now, worker, why) else { return };
        self.trust.refusals.remove(worker);
        self.trust.quarantined.insert(worker.clone(), reason.clone());
        self.journal.quarantined.push((worker.clone(), reason.clone()));
        if let Some(w) = self.workers.get_mut(worker) {
            w.quarantined = true;
        }
        out.push(FarmCommand::Quarantined { worker: worker.clone(), reason });
        // What else it holds is suspect too: stopped there, run elsewhere, not charged to
        // the tasks. The attempts hold their slots until they end (it gets no work anyway).
        let held: Vec<AttemptId> =
            self.leases.iter().filter(|(_, l)| l.worker == *worker).map(|(k, _)| *k).collect();
        for lease in held {
            if let Some(w) = self.workers.get_mut(worker) {
                w.busy = w.busy.saturating_sub(1);
                w.stale.insert(lease);
            }
            out.push(FarmCommand::Send {
                worker: worker.clone(),
                msg: ToWorker::Cancel { attempt: lease },
            });
            let why = format!("worker {worker} was quarantined");
            if let Some(l) = self.leases.get_mut(&lease) {
                l.refused_by.push(worker.clone());
            }
            self.requeue_as(now, lease, why, false, out);
        }
    }
}
