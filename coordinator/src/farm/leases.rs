//! Leases (a part of the farm core, sans-IO like it; tested in `core_tests.rs`): expiry,
//! reports checked against live leases and delivered to a run and its followers, cancels,
//! losses charged by the evidence, hand-backs and requeues within the retry budget.

use std::collections::BTreeMap;
use std::time::Duration;

use prova_protocol::work::{FromWorker, ToWorker};
use prova_protocol::{AttemptId, WorkerId};

use super::{
    FarmCommand, FarmCore, HANDBACK_BACKOFF, HANDBACK_LIMIT, Item, LEASE_TTL, Lease, LeaseRecord,
    Origin, Queued, RETRY_BUDGET, aborted_unrun, charged_at_loss, refusal_of, retarget,
};

impl FarmCore {
    /// Time passed: expired leases are lost (one loss per worker), then orphans and
    /// unplaceable items expire.
    pub(super) fn tick(&mut self, now: Duration, out: &mut Vec<FarmCommand>) {
        let expired: Vec<AttemptId> =
            self.leases.iter().filter(|(_, l)| l.deadline <= now).map(|(k, _)| *k).collect();
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
            self.lose_together(now, leases, &why, out);
        }
        self.expire_orphans(now, out);
        self.expire_unplaceable(now, out);
    }

    pub(super) fn report(
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

    pub(super) fn cancel(&mut self, origin: Origin, out: &mut Vec<FarmCommand>) {
        // A follower just stops following.
        for f in self.followers.values_mut() {
            f.retain(|o| *o != origin);
        }
        if let Some(q) = self.queue.remove_origin(&origin) {
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

    pub(super) fn promote_follower(&mut self, leader: Origin, mut item: Item, since: Duration) {
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
    pub(super) fn forget_key(&mut self, item: &Item) {
        self.presence.remove(&item.origin);
        if let Some(key) = item.key
            && self.by_key.get(&key) == Some(&item.origin)
        {
            self.by_key.remove(&key);
        }
    }

    /// `leases` were lost together (one worker's, at one event): one loss. Each item present
    /// is requeued, charged only when the evidence points at it (see the module docs).
    pub(super) fn lose_together(
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
    pub(super) fn hand_back(
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
    pub(super) fn requeue_as(
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

    /// Removes `lease`; its row goes too (it ended without a result any run needs).
    pub(super) fn end_lease(&mut self, lease: AttemptId) -> Option<Lease> {
        let l = self.leases.remove(&lease)?;
        if l.item.key.is_some() {
            self.journal.ended.push(lease);
        }
        Some(l)
    }
}
