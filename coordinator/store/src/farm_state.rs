//! A farm coordinator's state that outlives its restart (schema version 6): the keyed leases
//! it placed and the workers it quarantined. The farm core decides what to write
//! (`farm::core::Journal`); these are the rows. Plain types here: the cache knows nothing of
//! the farm.

use prova_protocol::Digest;
use rusqlite::params;

use super::error::{CacheError, sql};
use super::store::{Store, get_u64};

/// One lease's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredLease {
    /// The lease id.
    pub lease: u64,
    /// The worker (certificate name).
    pub worker: String,
    /// The dedup key.
    pub key: Digest,
    /// The task (`project#task`).
    pub task: String,
    /// The coordinator start that placed it.
    pub incarnation: u64,
    /// The run of that start it serves.
    pub run: u64,
}

/// One batch of changes, applied in one transaction: `placed` rows first (inserted or
/// replaced), then `ended` and the rows of `finished_runs` deleted, then quarantines.
#[derive(Clone, Debug, Default)]
pub struct FarmWrites {
    /// Leases placed or taken over.
    pub placed: Vec<StoredLease>,
    /// Leases that ended without a result a run still needs.
    pub ended: Vec<u64>,
    /// Runs (of `incarnation`) that are over: their rows go.
    pub finished_runs: Vec<u64>,
    /// The coordinator start writing.
    pub incarnation: u64,
    /// Workers quarantined, with the reason.
    pub quarantined: Vec<(String, String)>,
    /// Workers released.
    pub released: Vec<String>,
}

impl Store {
    /// Every lease row.
    pub fn farm_leases(&self) -> Result<Vec<StoredLease>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare_cached(
                "SELECT lease, worker, key, task, incarnation, run FROM farm_leases ORDER BY lease",
            )
            .map_err(sql("read farm leases"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(StoredLease {
                    lease: get_u64(r, 0)?,
                    worker: r.get(1)?,
                    key: Digest(r.get(2)?),
                    task: r.get(3)?,
                    incarnation: get_u64(r, 4)?,
                    run: get_u64(r, 5)?,
                })
            })
            .map_err(sql("read farm leases"))?;
        rows.collect::<Result<_, _>>().map_err(sql("read farm leases"))
    }

    /// The quarantined workers, with why.
    pub fn farm_quarantine(&self) -> Result<Vec<(String, String)>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT worker, reason FROM farm_quarantine ORDER BY worker")
            .map_err(sql("read the quarantine"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql("read the quarantine"))?;
        rows.collect::<Result<_, _>>().map_err(sql("read the quarantine"))
    }

    /// Applies `w` in one transaction (see [`FarmWrites`]).
    pub fn write_farm_state(&mut self, w: &FarmWrites, now_ms: i64) -> Result<(), CacheError> {
        self.writable("write the farm's state")?;
        let what = "write the farm's state";
        let tx = self.conn_mut().transaction().map_err(sql(what))?;
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO farm_leases \
                     (lease, worker, key, task, incarnation, run, placed_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(sql(what))?;
            for l in &w.placed {
                put.execute(params![
                    l.lease as i64,
                    l.worker,
                    l.key.0,
                    l.task,
                    l.incarnation as i64,
                    l.run as i64,
                    now_ms
                ])
                .map_err(sql(what))?;
            }
            let mut end =
                tx.prepare_cached("DELETE FROM farm_leases WHERE lease = ?1").map_err(sql(what))?;
            for lease in &w.ended {
                end.execute(params![*lease as i64]).map_err(sql(what))?;
            }
            let mut runs = tx
                .prepare_cached("DELETE FROM farm_leases WHERE incarnation = ?1 AND run = ?2")
                .map_err(sql(what))?;
            for run in &w.finished_runs {
                runs.execute(params![w.incarnation as i64, *run as i64]).map_err(sql(what))?;
            }
            let mut q = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO farm_quarantine (worker, reason, since_ms) \
                     VALUES (?1, ?2, ?3)",
                )
                .map_err(sql(what))?;
            for (worker, reason) in &w.quarantined {
                q.execute(params![worker, reason, now_ms]).map_err(sql(what))?;
            }
            let mut rel = tx
                .prepare_cached("DELETE FROM farm_quarantine WHERE worker = ?1")
                .map_err(sql(what))?;
            for worker in &w.released {
                rel.execute(params![worker]).map_err(sql(what))?;
            }
        }
        tx.commit().map_err(sql(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: u64, run: u64) -> StoredLease {
        StoredLease {
            lease: 1_764_600_000_000_000 + n,
            worker: format!("w{}", n % 2),
            key: Digest::of(&n.to_le_bytes()),
            task: format!("p{n}#build"),
            incarnation: 7,
            run,
        }
    }

    #[test]
    fn leases_survive_a_reopen_until_they_end_or_their_run_is_over() {
        let dir = tempfile::tempdir().expect("a temp dir");
        {
            let mut s = Store::open(dir.path()).expect("open");
            let w = FarmWrites {
                placed: vec![lease(1, 1), lease(2, 1), lease(3, 2), lease(4, 2)],
                incarnation: 7,
                quarantined: vec![("liar".into(), "3 results refused".into())],
                ..FarmWrites::default()
            };
            s.write_farm_state(&w, 1).expect("write");
            let w = FarmWrites {
                // Taken over by run 3 (replaced), one ended, run 1 over.
                placed: vec![StoredLease { run: 3, ..lease(4, 2) }],
                ended: vec![lease(3, 2).lease],
                finished_runs: vec![1],
                incarnation: 7,
                ..FarmWrites::default()
            };
            s.write_farm_state(&w, 2).expect("write");
        }
        let s = Store::open(dir.path()).expect("reopen");
        assert_eq!(s.farm_leases().expect("read"), vec![StoredLease { run: 3, ..lease(4, 2) }]);
        assert_eq!(
            s.farm_quarantine().expect("read"),
            vec![("liar".to_owned(), "3 results refused".to_owned())]
        );
    }

    #[test]
    fn a_release_ends_a_quarantine_and_another_starts_only_its_own_runs_rows() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut s = Store::open(dir.path()).expect("open");
        let w = FarmWrites {
            placed: vec![lease(1, 1)],
            incarnation: 7,
            quarantined: vec![("liar".into(), "why".into())],
            ..FarmWrites::default()
        };
        s.write_farm_state(&w, 1).expect("write");
        // Another incarnation's run 1 is over: the rows of incarnation 7 stay.
        let w = FarmWrites {
            finished_runs: vec![1],
            incarnation: 8,
            released: vec!["liar".into()],
            ..FarmWrites::default()
        };
        s.write_farm_state(&w, 2).expect("write");
        assert_eq!(s.farm_leases().expect("read"), vec![lease(1, 1)]);
        assert!(s.farm_quarantine().expect("read").is_empty());
    }
}
