//! Placement (a part of the farm core, sans-IO like it; tested in `core_tests.rs`): a
//! submitted item follows another run's execution of its key or is queued; the queue is
//! served highest priority first onto the fitting worker holding most of its inputs; an
//! item no worker could run (or only unfit ones) fails after [`super::NO_WORKER_WAIT`].

use std::time::Duration;

use prova_protocol::work::ToWorker;
use prova_protocol::{AttemptId, WorkerId};

use super::{
    FarmCommand, FarmCore, Item, LEASE_TTL, Lease, LeaseRecord, NO_WORKER_WAIT, Queued, Worker,
};

impl FarmCore {
    /// A submitted item (no orphan took it): it follows another run's execution of its key,
    /// or is queued.
    pub(super) fn enqueue(&mut self, now: Duration, item: Item) {
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

    pub(super) fn place(&mut self, now: Duration, out: &mut Vec<FarmCommand>) {
        // Nothing to place, or nowhere to place it: every event calls this, and scanning a
        // queue of thousands while all slots are taken made a large run quadratic.
        if self.queue.is_empty() || !self.any_free_slot(now) {
            return;
        }
        // Served in the queue's order: highest priority first, ties by queueing order.
        let mut at = None;
        while self.any_free_slot(now) {
            let Some((place, queued)) = self.queue.next_after(at) else { break };
            at = Some(place);
            let Some(worker) = self.choose(now, queued) else { continue };
            let Some(q) = self.queue.remove(place) else { break };
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

    pub(super) fn any_free_slot(&self, now: Duration) -> bool {
        self.workers.values().any(|w| w.open(now))
    }

    pub(super) fn choose(&self, now: Duration, q: &Queued) -> Option<WorkerId> {
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

    /// Whether `worker` holds a lease of an item that was at `item`'s last loss: the two are
    /// kept apart, so the next loss can tell which of them it follows.
    pub(super) fn runs_a_co_suspect(&self, item: &Item, worker: &WorkerId) -> bool {
        let Some(loss) = self.presence.get(&item.origin).map(|p| p.last_loss) else {
            return false;
        };
        self.leases.values().any(|l| {
            l.worker == *worker
                && l.item.origin != item.origin
                && self.presence.get(&l.item.origin).is_some_and(|p| p.last_loss == loss)
        })
    }

    pub(super) fn expire_unplaceable(&mut self, now: Duration, out: &mut Vec<FarmCommand>) {
        for place in self.queue.places() {
            let Some(q) = self.queue.get_mut(place) else { continue };
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
                let since = *q.unfit_since.get_or_insert(now);
                let unfit: Vec<&str> = could.iter().filter_map(|w| w.unfit.as_deref()).collect();
                (now.saturating_sub(since) >= NO_WORKER_WAIT).then(|| {
                    format!(
                        "every worker that could run it is unfit ({}) after waiting {}s",
                        unfit.join("; "),
                        NO_WORKER_WAIT.as_secs()
                    )
                })
            } else {
                q.unfit_since = None;
                None
            };
            let Some(mut reason) = why else { continue };
            let Some(q) = self.queue.remove(place) else { continue };
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
}
