//! The fingerprint ledger (brief §1, proof 3): every execution of every key — first runs and
//! determinism re-runs, on every worker — with its output fingerprint. One key with two
//! fingerprints is a hermeticity defect; one key whose first runs disagree on success, or
//! an execution that failed and then passed on a retry (`failed_tries`), is flaky. Bounded: the oldest rows go beyond [`LEDGER_MAX_ROWS`].
//!
//! It is also the evidence of `--trust proven` ([`Store::proves`]): a trusted entry is a proof
//! only while the ledger holds two distinct workers that produced its fingerprint, in
//! successful executions, and no successful execution of its key that produced another one.
//! A nondeterministic verdict is not stored apart: it means a re-run's fingerprint differed
//! from the first execution's, and both executions are recorded here, so the disagreement is
//! the evidence. Promotion checks the rule, and so does every read of the trusted tier
//! ([`Store::demote_unproven`]): an entry saved under a weaker mode, or one whose key has
//! disagreed since, goes back to waiting.

use prova_protocol::Digest;
use rusqlite::{OptionalExtension, params};

use super::error::{CacheError, sql};
use super::store::Store;

/// Rows kept; older ones are dropped on insert (a ledger is evidence of recent behaviour).
pub const LEDGER_MAX_ROWS: i64 = 200_000;

/// One execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Execution {
    /// The task's key.
    pub key: Digest,
    /// `project#task`.
    pub task: String,
    /// Where it ran (`local` on a developer machine).
    pub worker: String,
    /// `os/arch`.
    pub platform: String,
    /// A first run, or a determinism re-run.
    pub rerun: bool,
    /// Whether it exited 0.
    pub ok: bool,
    /// Its output fingerprint (successful executions).
    pub fingerprint: Option<Digest>,
    /// Its output manifest, rmp-encoded (successful executions).
    pub manifest: Option<Vec<u8>>,
    /// Its artifact, kept for re-runs (so both sides of a divergence can be shown).
    pub artifact: Option<Digest>,
    /// When (ms since the epoch).
    pub time_ms: i64,
    /// Tries that failed before a retry succeeded (same key, same environment): flaky.
    pub failed_tries: u32,
}

impl Store {
    /// Records one execution (skipped on a read-only store).
    pub fn record_execution(&mut self, e: &Execution) -> Result<(), CacheError> {
        if self.is_read_only() {
            return Ok(()); // a read-only run keeps no ledger
        }
        let tx = self.conn_mut().transaction().map_err(sql("record execution"))?;
        tx.execute(
            "INSERT INTO executions (key, task, worker, platform, kind, ok, fingerprint, manifest, artifact, time_ms, failed_tries) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                e.key.0,
                e.task,
                e.worker,
                e.platform,
                if e.rerun { "rerun" } else { "run" },
                i64::from(e.ok),
                e.fingerprint.map(|d| d.0),
                e.manifest,
                e.artifact.map(|d| d.0),
                e.time_ms,
                i64::from(e.failed_tries)
            ],
        )
        .map_err(sql("record execution"))?;
        tx.execute(
            "DELETE FROM executions WHERE id <= (SELECT max(id) FROM executions) - ?1",
            [LEDGER_MAX_ROWS],
        )
        .map_err(sql("trim the ledger"))?;
        tx.commit().map_err(sql("record execution"))
    }

    /// Every execution of `key`, oldest first.
    pub fn executions_of(&self, key: &Digest) -> Result<Vec<Execution>, CacheError> {
        self.select_executions("WHERE key = ?1 ORDER BY time_ms, id", params![key.0])
    }

    /// The keys whose executions disagree (two successful fingerprints, or success and
    /// failure, or a try that failed before a retry passed), newest first, at most `limit`.
    pub fn disagreeing_keys(&self, limit: usize) -> Result<Vec<Digest>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare(
                "SELECT key FROM executions GROUP BY key \
                 HAVING count(DISTINCT fingerprint) > 1 OR count(DISTINCT ok) > 1 \
                 OR max(failed_tries) > 0 \
                 ORDER BY max(time_ms) DESC LIMIT ?1",
            )
            .map_err(sql("disagreeing keys"))?;
        let rows = stmt
            .query_map([limit as i64], |r| r.get::<_, [u8; 32]>(0).map(Digest))
            .map_err(sql("disagreeing keys"))?;
        rows.collect::<Result<_, _>>().map_err(sql("disagreeing keys"))
    }

    /// The newest key of `task` whose executions disagree on the fingerprint.
    pub fn latest_divergent_key(&self, task: &str) -> Result<Option<Digest>, CacheError> {
        self.conn()
            .query_row(
                "SELECT key FROM executions WHERE task = ?1 GROUP BY key \
                 HAVING count(DISTINCT fingerprint) > 1 ORDER BY max(time_ms) DESC LIMIT 1",
                [task],
                |r| r.get::<_, [u8; 32]>(0).map(Digest),
            )
            .optional()
            .map_err(sql("latest divergence"))
    }

    /// How many distinct workers produced `fingerprint` for `key`.
    pub fn agreeing_workers(&self, key: &Digest, fingerprint: &Digest) -> Result<u64, CacheError> {
        self.conn()
            .query_row(
                "SELECT count(DISTINCT worker) FROM executions WHERE key = ?1 AND fingerprint = ?2 AND ok = 1",
                params![key.0, fingerprint.0],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
            .map_err(sql("agreeing workers"))
    }

    /// Whether the ledger proves `fingerprint` for `key` (`--trust proven`): at least two
    /// distinct workers produced it in successful executions, and no successful execution of
    /// `key` produced another fingerprint (a nondeterministic verdict is two such executions).
    /// Failed executions count for neither side.
    pub fn proves(&self, key: &Digest, fingerprint: &Digest) -> Result<bool, CacheError> {
        let (agreeing, other): (i64, i64) = self
            .conn()
            .query_row(
                "SELECT count(DISTINCT CASE WHEN fingerprint = ?2 THEN worker END), \
                 coalesce(sum(CASE WHEN fingerprint IS NOT NULL AND fingerprint != ?2 THEN 1 ELSE 0 END), 0) \
                 FROM executions WHERE key = ?1 AND ok = 1",
                params![key.0, fingerprint.0],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sql("proof of an entry"))?;
        Ok(agreeing >= 2 && other == 0)
    }

    /// Moves every entry of `keys` in namespace `trusted` that the ledger does not prove
    /// ([`Store::proves`]; an entry without a fingerprint proves nothing) to `pending`, where
    /// it waits for agreement like a new save; returns the keys moved. Under `--trust proven`
    /// a read of the trusted tier goes through this first, so what it finds there is proven.
    pub fn demote_unproven(
        &mut self,
        trusted: &str,
        pending: &str,
        keys: &[Digest],
    ) -> Result<Vec<Digest>, CacheError> {
        let mut moved = Vec::new();
        for (key, entry) in self.get_entries(trusted, keys)? {
            let proven = match entry.fingerprint {
                Some(fp) => self.proves(&key, &fp)?,
                None => false,
            };
            if !proven {
                self.promote(&key, trusted, pending)?;
                moved.push(key);
            }
        }
        moved.sort_unstable();
        Ok(moved)
    }

    /// Moves the entry of `key` from namespace `from` to `to` (promotion to the trusted tier);
    /// `false` when there was nothing to move. An entry already in `to` wins.
    pub fn promote(&mut self, key: &Digest, from: &str, to: &str) -> Result<bool, CacheError> {
        let tx = self.conn_mut().transaction().map_err(sql("promote"))?;
        let exists: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM entries WHERE namespace = ?1 AND key = ?2)",
                params![to, key.0],
                |r| r.get(0),
            )
            .map_err(sql("promote"))?;
        let moved = if exists {
            tx.execute(
                "DELETE FROM entries WHERE namespace = ?1 AND key = ?2",
                params![from, key.0],
            )
            .map_err(sql("promote"))?;
            false
        } else {
            tx.execute(
                "UPDATE entries SET namespace = ?1 WHERE namespace = ?2 AND key = ?3",
                params![to, from, key.0],
            )
            .map_err(sql("promote"))?
                > 0
        };
        tx.commit().map_err(sql("promote"))?;
        Ok(moved)
    }

    fn select_executions(
        &self,
        tail: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<Execution>, CacheError> {
        let q = format!(
            "SELECT key, task, worker, platform, kind, ok, fingerprint, manifest, artifact, time_ms, failed_tries FROM executions {tail}"
        );
        let mut stmt = self.conn().prepare(&q).map_err(sql("read the ledger"))?;
        let rows = stmt
            .query_map(args, |r| {
                Ok(Execution {
                    key: Digest(r.get(0)?),
                    task: r.get(1)?,
                    worker: r.get(2)?,
                    platform: r.get(3)?,
                    rerun: r.get::<_, String>(4)? == "rerun",
                    ok: r.get::<_, i64>(5)? == 1,
                    fingerprint: r.get::<_, Option<[u8; 32]>>(6)?.map(Digest),
                    manifest: r.get(7)?,
                    artifact: r.get::<_, Option<[u8; 32]>>(8)?.map(Digest),
                    time_ms: r.get(9)?,
                    failed_tries: u32::try_from(r.get::<_, i64>(10)?).unwrap_or(u32::MAX),
                })
            })
            .map_err(sql("read the ledger"))?;
        rows.collect::<Result<_, _>>().map_err(sql("read the ledger"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PENDING;

    fn exec(key: &[u8], worker: &str, fp: Option<&[u8]>, ok: bool, t: i64) -> Execution {
        Execution {
            key: Digest::of(key),
            task: "a#build".into(),
            worker: worker.into(),
            platform: "linux/x86_64".into(),
            rerun: false,
            ok,
            fingerprint: fp.map(Digest::of),
            manifest: None,
            artifact: None,
            time_ms: t,
            failed_tries: 0,
        }
    }

    #[test]
    fn disagreement_and_agreement() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.record_execution(&exec(b"k1", "w1", Some(b"f"), true, 1)).unwrap();
        s.record_execution(&exec(b"k1", "w2", Some(b"f"), true, 2)).unwrap();
        s.record_execution(&exec(b"k2", "w1", Some(b"f"), true, 3)).unwrap();
        s.record_execution(&exec(b"k2", "w2", Some(b"g"), true, 4)).unwrap();
        s.record_execution(&exec(b"k3", "w1", None, false, 5)).unwrap();
        s.record_execution(&exec(b"k3", "w1", Some(b"f"), true, 6)).unwrap();
        assert_eq!(s.disagreeing_keys(10).unwrap(), vec![Digest::of(b"k3"), Digest::of(b"k2")]);
        assert_eq!(s.agreeing_workers(&Digest::of(b"k1"), &Digest::of(b"f")).unwrap(), 2);
        assert_eq!(s.agreeing_workers(&Digest::of(b"k2"), &Digest::of(b"f")).unwrap(), 1);
        assert_eq!(s.latest_divergent_key("a#build").unwrap(), Some(Digest::of(b"k2")));
        assert_eq!(s.executions_of(&Digest::of(b"k2")).unwrap().len(), 2);
    }

    #[test]
    fn a_retried_success_is_a_disagreement_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.record_execution(&exec(b"k1", "w1", Some(b"f"), true, 1)).unwrap();
        assert!(s.disagreeing_keys(10).unwrap().is_empty());
        let mut e = exec(b"k1", "w1", Some(b"f"), true, 2);
        e.failed_tries = 2;
        s.record_execution(&e).unwrap();
        assert_eq!(s.disagreeing_keys(10).unwrap(), vec![Digest::of(b"k1")]);
        assert_eq!(s.executions_of(&Digest::of(b"k1")).unwrap()[1].failed_tries, 2);
    }

    fn pending_entry(s: &mut Store, ns: &str, key: &[u8], fp: Option<&[u8]>) {
        s.put_entry(&crate::cache::NewEntry {
            namespace: ns.into(),
            key: Digest::of(key),
            task: "a#build".into(),
            artifact: None,
            log: None,
            manifest: vec![],
            components: vec![],
            fingerprint: fp.map(Digest::of),
            duration_ms: 1,
            created_ms: 1,
        })
        .unwrap();
    }

    #[test]
    fn a_proof_is_two_distinct_workers_and_no_disagreement() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let (k, f) = (Digest::of(b"k"), Digest::of(b"f"));
        // Two agreeing workers: proven.
        s.record_execution(&exec(b"k", "w1", Some(b"f"), true, 1)).unwrap();
        assert!(!s.proves(&k, &f).unwrap(), "one worker is no proof");
        s.record_execution(&exec(b"k", "w2", Some(b"f"), true, 2)).unwrap();
        assert!(s.proves(&k, &f).unwrap());
        // A third worker disagrees (a nondeterministic verdict records both sides): never.
        s.record_execution(&exec(b"k", "w3", Some(b"g"), true, 3)).unwrap();
        assert!(!s.proves(&k, &f).unwrap(), "a disagreeing fingerprint is in the ledger");
        s.record_execution(&exec(b"k", "w4", Some(b"f"), true, 4)).unwrap();
        assert!(!s.proves(&k, &f).unwrap(), "more agreement does not outvote it");
        assert!(!s.proves(&k, &Digest::of(b"g")).unwrap());
    }

    #[test]
    fn the_same_worker_twice_or_a_failed_execution_proves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let (k, f) = (Digest::of(b"k"), Digest::of(b"f"));
        s.record_execution(&exec(b"k", "w1", Some(b"f"), true, 1)).unwrap();
        s.record_execution(&exec(b"k", "w1", Some(b"f"), true, 2)).unwrap();
        assert!(!s.proves(&k, &f).unwrap(), "one worker counted twice");
        // A failed execution that still reported the fingerprint is not agreement...
        s.record_execution(&exec(b"k", "w2", Some(b"f"), false, 3)).unwrap();
        assert!(!s.proves(&k, &f).unwrap(), "a failed execution agreed");
        // ...nor is a failed one with another fingerprint a disagreement.
        s.record_execution(&exec(b"k", "w3", Some(b"g"), false, 4)).unwrap();
        s.record_execution(&exec(b"k", "w2", Some(b"f"), true, 5)).unwrap();
        assert!(s.proves(&k, &f).unwrap());
        // Another key's executions are not evidence about this one.
        assert!(!s.proves(&Digest::of(b"other"), &f).unwrap());
    }

    #[test]
    fn unproven_trusted_entries_go_back_to_pending() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        // Saved under the default mode: trusted, with no or one worker's evidence.
        pending_entry(&mut s, "", b"none", Some(b"f"));
        s.record_execution(&exec(b"one", "w1", Some(b"f"), true, 1)).unwrap();
        pending_entry(&mut s, "", b"one", Some(b"f"));
        // No fingerprint at all: nothing to prove.
        s.record_execution(&exec(b"nofp", "w1", Some(b"f"), true, 2)).unwrap();
        s.record_execution(&exec(b"nofp", "w2", Some(b"f"), true, 3)).unwrap();
        pending_entry(&mut s, "", b"nofp", None);
        // Proven, and then a disagreeing execution arrives.
        for (w, fp, t) in [("w1", b"f", 4), ("w2", b"f", 5)] {
            s.record_execution(&exec(b"later", w, Some(fp), true, t)).unwrap();
        }
        pending_entry(&mut s, "", b"later", Some(b"f"));
        // Proven and still so.
        for (w, t) in [("w1", 6), ("w2", 7)] {
            s.record_execution(&exec(b"good", w, Some(b"f"), true, t)).unwrap();
        }
        pending_entry(&mut s, "", b"good", Some(b"f"));
        let keys: Vec<Digest> = [&b"none"[..], b"one", b"nofp", b"later", b"good"]
            .iter()
            .map(|k| Digest::of(k))
            .collect();
        assert_eq!(s.demote_unproven("", PENDING, &keys).unwrap().len(), 3);
        s.record_execution(&exec(b"later", "w3", Some(b"g"), true, 8)).unwrap();
        assert_eq!(s.demote_unproven("", PENDING, &keys).unwrap(), vec![Digest::of(b"later")]);
        for k in &keys[..4] {
            assert!(s.get_entry("", k).unwrap().is_none(), "{k:?} is still trusted");
            assert!(s.get_entry(PENDING, k).unwrap().is_some(), "{k:?} was lost");
        }
        assert!(s.get_entry("", &keys[4]).unwrap().is_some(), "a proven entry was demoted");
        assert!(s.demote_unproven("", PENDING, &keys).unwrap().is_empty());
    }

    #[test]
    fn promotion_moves_an_entry_between_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let key = Digest::of(b"k");
        s.put_entry(&crate::cache::NewEntry {
            namespace: "pending".into(),
            key,
            task: "a#b".into(),
            artifact: None,
            log: None,
            manifest: vec![],
            components: vec![],
            fingerprint: None,
            duration_ms: 1,
            created_ms: 1,
        })
        .unwrap();
        assert!(s.get_entry("", &key).unwrap().is_none());
        assert!(s.promote(&key, "pending", "").unwrap());
        assert!(s.get_entry("", &key).unwrap().is_some());
        assert!(s.get_entry("pending", &key).unwrap().is_none());
        assert!(!s.promote(&key, "pending", "").unwrap());
    }
}
