//! Workers joining, beating, leaving and draining (a part of the farm core, sans-IO like it;
//! tested in `core_tests.rs`): a registration loses the leases its worker no longer runs and
//! cancels the stale attempts it still does; a heartbeat renews leases; a lost connection is
//! one loss; a drained worker is dismissed once it holds no lease.

use std::collections::HashSet;
use std::time::Duration;

use prova_protocol::work::ToWorker;
use prova_protocol::{AttemptId, Digest, WorkerId};

use super::{FarmCommand, FarmCore, LEASE_TTL, Worker, WorkerCaps};

impl FarmCore {
    /// A worker registered (or registered again after a reconnect or a restart).
    pub(super) fn worker_joined(
        &mut self,
        now: Duration,
        id: WorkerId,
        caps: WorkerCaps,
        running: Vec<AttemptId>,
        out: &mut Vec<FarmCommand>,
    ) {
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
        self.lose_together(now, lost, &why, out);
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
            out.push(FarmCommand::Send { worker: id.clone(), msg: ToWorker::Cancel { attempt } });
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

    /// A worker's connection is gone: its leases are lost together.
    pub(super) fn worker_left(&mut self, now: Duration, id: &WorkerId, out: &mut Vec<FarmCommand>) {
        self.workers.remove(id);
        let lost: Vec<AttemptId> =
            self.leases.iter().filter(|(_, l)| l.worker == *id).map(|(k, _)| *k).collect();
        self.lose_together(now, lost, &format!("worker {id} was lost"), out);
    }

    /// A worker is leaving (SIGTERM): it is out of placement and of [`FarmCore::workers`] at
    /// once, and what it held is requeued free — it handed the work back, the tasks did
    /// nothing wrong. Its late reports are refused (no live lease).
    pub(super) fn worker_leaving(
        &mut self,
        now: Duration,
        id: &WorkerId,
        out: &mut Vec<FarmCommand>,
    ) {
        self.workers.remove(id);
        let held: Vec<AttemptId> =
            self.leases.iter().filter(|(_, l)| l.worker == *id).map(|(k, _)| *k).collect();
        for lease in held {
            self.requeue_as(now, lease, format!("worker {id} left (drained)"), false, out);
        }
    }

    /// A worker is alive and runs `running`: those leases are renewed.
    pub(super) fn heartbeat(&mut self, now: Duration, id: &WorkerId, running: &[AttemptId]) {
        for lease in running {
            if let Some(l) = self.leases.get_mut(lease)
                && l.worker == *id
            {
                l.deadline = now + LEASE_TTL;
            }
        }
        if let Some(w) = self.workers.get_mut(id) {
            w.silent = false;
            w.stale.retain(|a| running.contains(a));
        }
        self.renew_orphans(now, id, running);
    }

    /// A worker now holds `blobs`.
    pub(super) fn holds(&mut self, id: &WorkerId, blobs: Vec<Digest>) {
        if let Some(w) = self.workers.get_mut(id) {
            w.holds.extend(blobs);
        }
    }

    /// `prova farm drain`: no new work for `id`.
    pub(super) fn drain(&mut self, id: &WorkerId) {
        if let Some(w) = self.workers.get_mut(id) {
            w.draining.get_or_insert(false);
        }
    }

    /// A worker said whether it takes work (`unfit`: why not).
    pub(super) fn health(&mut self, id: &WorkerId, unfit: Option<String>) {
        if let Some(w) = self.workers.get_mut(id) {
            w.unfit = unfit;
        }
    }

    /// Draining workers that hold no lease any more are told to leave, once.
    pub(super) fn dismiss_drained(&mut self, out: &mut Vec<FarmCommand>) {
        for (id, w) in &mut self.workers {
            if w.draining == Some(false) && !self.leases.values().any(|l| l.worker == *id) {
                w.draining = Some(true);
                out.push(FarmCommand::Dismiss { worker: id.clone() });
            }
        }
    }
}
