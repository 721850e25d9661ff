//! The farm actor's link to its store (a thin shell over `cache::farm_state`): what the core
//! journals is queued here and written by one task, in order, in batches — the farm actor
//! never waits on the cache thread. At start-up, what an earlier incarnation left is read
//! back for the core to adopt.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use prova_protocol::task::OwnedTask;
use prova_protocol::{AttemptId, RunId, TaskId, WorkerId};
use tokio::sync::Notify;

use super::core::{Journal, LeaseRecord};
use crate::cache::{CacheThread, FarmWrites, StoredLease};

/// What waits to be written.
#[derive(Default)]
struct Pending {
    writes: FarmWrites,
    /// Leases whose `placed` is still pending: an `ended` of one drops it from the batch.
    placed: HashSet<u64>,
}

/// The queue and its writer.
pub struct Persist {
    pending: Arc<Mutex<Pending>>,
    wake: Arc<Notify>,
    incarnation: u64,
    _writer: OwnedTask<()>,
}

impl Persist {
    /// Writes into `store` as coordinator start `incarnation`.
    pub fn start(store: CacheThread, incarnation: u64) -> Self {
        let pending = Arc::new(Mutex::new(Pending::default()));
        let wake = Arc::new(Notify::new());
        let (p, w) = (pending.clone(), wake.clone());
        let writer = OwnedTask::spawn("farm.persist", async move {
            loop {
                w.notified().await;
                let batch = match p.lock() {
                    Ok(mut g) => std::mem::take(&mut *g).writes,
                    Err(_) => return,
                };
                let batch = FarmWrites { incarnation, ..batch };
                let r = store.call(move |s| s.write_farm_state(&batch, now_ms())).await;
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!("cannot persist the farm's leases: {e}"),
                    Err(_) => return,
                }
            }
        });
        Self { pending, wake, incarnation, _writer: writer }
    }

    /// Queues what the core journaled.
    pub fn journal(&self, j: Journal) {
        if j.is_empty() {
            return;
        }
        let Ok(mut g) = self.pending.lock() else { return };
        let Pending { writes, placed } = &mut *g;
        for r in j.placed {
            placed.insert(r.lease.0);
            writes.placed.push(stored(&r, self.incarnation));
        }
        for lease in j.ended {
            if placed.remove(&lease.0) {
                writes.placed.retain(|p| p.lease != lease.0);
            }
            writes.ended.push(lease.0);
        }
        writes.quarantined.extend(j.quarantined.into_iter().map(|(w, r)| (w.0, r)));
        writes.released.extend(j.released.into_iter().map(|w| w.0));
        drop(g);
        self.wake.notify_one();
    }

    /// `run` is over: its lease rows go (its saves are done).
    pub fn run_over(&self, run: RunId) {
        let Ok(mut g) = self.pending.lock() else { return };
        g.writes.finished_runs.push(run.0);
        drop(g);
        self.wake.notify_one();
    }
}

fn stored(r: &LeaseRecord, incarnation: u64) -> StoredLease {
    StoredLease {
        lease: r.lease.0,
        worker: r.worker.0.clone(),
        key: r.key,
        task: r.task.to_string(),
        incarnation,
        run: r.run.0,
    }
}

/// What an earlier incarnation left in `store`: its lease rows (as the core takes them) and
/// its quarantines. A store that cannot be read leaves nothing to adopt (logged).
pub async fn load(store: &CacheThread) -> (Vec<LeaseRecord>, Vec<(WorkerId, String)>) {
    let read = store
        .call(|s| Ok::<_, crate::cache::CacheError>((s.farm_leases()?, s.farm_quarantine()?)))
        .await;
    let (leases, quarantine) = match read {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            tracing::warn!("cannot read the farm's persisted leases: {e}");
            return (Vec::new(), Vec::new());
        }
        Err(e) => {
            tracing::warn!("cannot read the farm's persisted leases: {e}");
            return (Vec::new(), Vec::new());
        }
    };
    let records = leases
        .into_iter()
        .filter_map(|l| {
            let task = TaskId::parse(&l.task)?;
            Some(LeaseRecord {
                lease: AttemptId(l.lease),
                worker: WorkerId(l.worker),
                key: l.key,
                task,
                run: RunId(l.run),
            })
        })
        .collect();
    (records, quarantine.into_iter().map(|(w, r)| (WorkerId(w), r)).collect())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
