//! The fingerprint ledger (brief §1, proof 3): every execution of every key — first runs and
//! determinism re-runs, on every worker — with its output fingerprint. One key with two
//! fingerprints is a hermeticity defect; one key whose first runs disagree on success, or
//! an execution that failed and then passed on a retry (`failed_tries`), is flaky. Bounded: the oldest rows go beyond [`LEDGER_MAX_ROWS`].
//!
//! It is also the evidence of `--trust proven` ([`Store::proves`]): a trusted entry is a proof
//! only while the ledger holds two distinct workers that produced its fingerprint, in
//! successful executions, and no successful execution of its key that produced another one.
//! "Produced its fingerprint" means what the determinism proof compares: for a task with
//! `verify_ignore`, each row also keeps the fingerprint of its outputs without the ignored
//! ones (`compared`), and two executions that differ only in an ignored file agree (issue 27:
//! such a task, proven by `--verify`, was otherwise never trusted and always "nondeterministic").
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

/// What a row's proof compares, in SQL: the `compared` fingerprint where the task ignores
/// outputs (`verify_ignore`), else the full one.
const COMPARED: &str = "coalesce(compared, fingerprint)";

/// The schema that added `compared` ([`super::schema`]).
const COMPARED_SINCE: i64 = 5;

/// Executions measured against one fingerprint ([`Store::proves`]).
struct Agreement {
    /// Distinct workers whose successful executions compare equal to it.
    agreeing: u64,
    /// Successful executions that compare different.
    other: u64,
}

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
    /// The fingerprint of what a determinism proof compares: the outputs without the task's
    /// `verify_ignore` matches; `None` when it ignores nothing (or for rows written before
    /// schema 5), where the full `fingerprint` is what is compared.
    pub compared: Option<Digest>,
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
        // Cached statements: the farm records every execution of every run, and preparing
        // these two again each time was most of a record's cost.
        tx.prepare_cached(
            "INSERT INTO executions (key, task, worker, platform, kind, ok, fingerprint, manifest, artifact, time_ms, failed_tries, compared) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
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
                i64::from(e.failed_tries),
                e.compared.map(|d| d.0)
            ])
        })
        .map_err(sql("record execution"))?;
        tx.prepare_cached(
            "DELETE FROM executions WHERE id <= (SELECT max(id) FROM executions) - ?1",
        )
        .and_then(|mut stmt| stmt.execute([LEDGER_MAX_ROWS]))
        .map_err(sql("trim the ledger"))?;
        tx.commit().map_err(sql("record execution"))
    }

    /// Every execution of `key`, oldest first.
    pub fn executions_of(&self, key: &Digest) -> Result<Vec<Execution>, CacheError> {
        self.select_executions("WHERE key = ?1 ORDER BY time_ms, id", params![key.0])
    }

    /// The keys whose executions disagree (two successful fingerprints of what a proof
    /// compares, or success and failure, or a try that failed before a retry passed), newest
    /// first, at most `limit`.
    pub fn disagreeing_keys(&self, limit: usize) -> Result<Vec<Digest>, CacheError> {
        let compared = self.compared_column()?.0;
        let mut stmt = self
            .conn()
            .prepare(&format!(
                "SELECT key FROM executions GROUP BY key \
                 HAVING count(DISTINCT {compared}) > 1 OR count(DISTINCT ok) > 1 \
                 OR max(failed_tries) > 0 \
                 ORDER BY max(time_ms) DESC LIMIT ?1"
            ))
            .map_err(sql("disagreeing keys"))?;
        let rows = stmt
            .query_map([limit as i64], |r| r.get::<_, [u8; 32]>(0).map(Digest))
            .map_err(sql("disagreeing keys"))?;
        rows.collect::<Result<_, _>>().map_err(sql("disagreeing keys"))
    }

    /// The newest key of `task` whose executions disagree on what a proof compares.
    pub fn latest_divergent_key(&self, task: &str) -> Result<Option<Digest>, CacheError> {
        let compared = self.compared_column()?.0;
        self.conn()
            .query_row(
                &format!(
                    "SELECT key FROM executions WHERE task = ?1 GROUP BY key \
                     HAVING count(DISTINCT {compared}) > 1 ORDER BY max(time_ms) DESC LIMIT 1"
                ),
                [task],
                |r| r.get::<_, [u8; 32]>(0).map(Digest),
            )
            .optional()
            .map_err(sql("latest divergence"))
    }

    /// How many distinct workers agree with the execution that produced `fingerprint` for
    /// `key`, on what a proof compares.
    pub fn agreeing_workers(&self, key: &Digest, fingerprint: &Digest) -> Result<u64, CacheError> {
        Ok(self.agreement(key, fingerprint)?.map_or(0, |a| a.agreeing))
    }

    /// Whether the ledger proves `fingerprint` for `key` (`--trust proven`): at least two
    /// distinct workers produced what a proof compares of it in successful executions, and no
    /// successful execution of `key` produced something else (a nondeterministic verdict is
    /// two such executions). Failed executions count for neither side. What is compared is
    /// the `compared` fingerprint where the row has one (a task with `verify_ignore`: the
    /// proof left those outputs out, so executions that differ only there agree), else the
    /// full one; `fingerprint` (an entry's, full) stands for the compared fingerprint its own
    /// executions recorded, and is no proof when none recorded it or they recorded several.
    pub fn proves(&self, key: &Digest, fingerprint: &Digest) -> Result<bool, CacheError> {
        Ok(self.agreement(key, fingerprint)?.is_some_and(|a| a.agreeing >= 2 && a.other == 0))
    }

    /// The successful executions of `key` measured against the one(s) that produced
    /// `fingerprint`; `None` when none did, or they disagree among themselves on what was
    /// compared (the ignore patterns changed: no proof either way).
    fn agreement(
        &self,
        key: &Digest,
        fingerprint: &Digest,
    ) -> Result<Option<Agreement>, CacheError> {
        let compared = self.compared_column()?.0;
        let mut stmt = self
            .conn()
            .prepare(&format!(
                "SELECT worker, fingerprint, {compared} FROM executions \
                 WHERE key = ?1 AND ok = 1 AND fingerprint IS NOT NULL"
            ))
            .map_err(sql("proof of an entry"))?;
        let rows: Vec<(String, [u8; 32], [u8; 32])> = stmt
            .query_map([key.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(sql("proof of an entry"))?
            .collect::<Result<_, _>>()
            .map_err(sql("proof of an entry"))?;
        let mut own = rows.iter().filter(|(_, fp, _)| *fp == fingerprint.0).map(|(_, _, c)| c);
        let Some(compared) = own.next() else { return Ok(None) };
        if own.any(|c| c != compared) {
            return Ok(None);
        }
        let mut workers: Vec<&str> =
            rows.iter().filter(|(_, _, c)| c == compared).map(|(w, _, _)| w.as_str()).collect();
        workers.sort_unstable();
        workers.dedup();
        let other = rows.iter().filter(|(_, _, c)| c != compared).count() as u64;
        Ok(Some(Agreement { agreeing: workers.len() as u64, other }))
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

    /// What a row's proof compares and the `compared` column, as SQL: an index opened
    /// read-only is never migrated (`prova hermeticity` on a cache an older prova wrote), and
    /// without the column every row compares in full.
    fn compared_column(&self) -> Result<(&'static str, &'static str), CacheError> {
        if self.is_read_only() && super::schema::user_version(self.conn())? < COMPARED_SINCE {
            return Ok(("fingerprint", "NULL"));
        }
        Ok((COMPARED, "compared"))
    }

    fn select_executions(
        &self,
        tail: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<Execution>, CacheError> {
        let compared = self.compared_column()?.1;
        let q = format!(
            "SELECT key, task, worker, platform, kind, ok, fingerprint, manifest, artifact, time_ms, failed_tries, {compared} FROM executions {tail}"
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
                    compared: r.get::<_, Option<[u8; 32]>>(11)?.map(Digest),
                })
            })
            .map_err(sql("read the ledger"))?;
        rows.collect::<Result<_, _>>().map_err(sql("read the ledger"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PENDING;

    fn exec(key: &[u8], worker: &str, fp: Option<&[u8]>, ok: bool, t: i64) -> Execution {
        Execution {
            key: Digest::of(key),
            task: "a#build".into(),
            worker: worker.into(),
            platform: "linux/x86_64".into(),
            rerun: false,
            ok,
            fingerprint: fp.map(Digest::of),
            compared: None,
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
        s.put_entry(&crate::NewEntry {
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

    /// `exec` whose outputs differ in an ignored file: full fingerprint `fp`, compared `c`.
    fn ignoring(key: &[u8], worker: &str, fp: &[u8], c: &[u8], t: i64) -> Execution {
        Execution { compared: Some(Digest::of(c)), ..exec(key, worker, Some(fp), true, t) }
    }

    #[test]
    fn executions_that_differ_only_in_ignored_outputs_agree() {
        // Issue 27: a `verify_ignore` task (a timestamp file) proven by `--verify` has two full
        // fingerprints; the ledger must judge what the proof compared.
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let k = Digest::of(b"k");
        s.record_execution(&ignoring(b"k", "w1", b"stamp1", b"c", 1)).unwrap();
        s.record_execution(&ignoring(b"k", "w2", b"stamp2", b"c", 2)).unwrap();
        assert!(s.proves(&k, &Digest::of(b"stamp1")).unwrap(), "the first execution's entry");
        assert!(s.proves(&k, &Digest::of(b"stamp2")).unwrap(), "either side's bytes");
        assert!(s.disagreeing_keys(10).unwrap().is_empty(), "not a hermeticity defect");
        assert_eq!(s.latest_divergent_key("a#build").unwrap(), None);
        assert_eq!(s.agreeing_workers(&k, &Digest::of(b"stamp1")).unwrap(), 2);
        assert_eq!(s.executions_of(&k).unwrap()[0].compared, Some(Digest::of(b"c")));
        // A fingerprint no execution produced proves nothing.
        assert!(!s.proves(&k, &Digest::of(b"forged")).unwrap());
        // What the proof compares differing is a disagreement, as before.
        s.record_execution(&ignoring(b"k", "w3", b"stamp3", b"d", 3)).unwrap();
        assert!(!s.proves(&k, &Digest::of(b"stamp1")).unwrap());
        assert_eq!(s.disagreeing_keys(10).unwrap(), vec![k]);
        assert_eq!(s.latest_divergent_key("a#build").unwrap(), Some(k));
    }

    #[test]
    fn rows_without_a_compared_fingerprint_compare_in_full() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let k = Digest::of(b"k");
        // Written before schema 5 (or by a task that ignores nothing): the full fingerprint.
        s.record_execution(&exec(b"k", "w1", Some(b"stamp1"), true, 1)).unwrap();
        s.record_execution(&exec(b"k", "w2", Some(b"stamp2"), true, 2)).unwrap();
        assert_eq!(s.disagreeing_keys(10).unwrap(), vec![k]);
        // A row that ignores outputs does not outvote them: the old rows still disagree.
        s.record_execution(&ignoring(b"k", "w3", b"stamp3", b"stamp1", 3)).unwrap();
        assert!(!s.proves(&k, &Digest::of(b"stamp1")).unwrap());
        // One full fingerprint whose rows compared different things (the ignore patterns
        // changed between them) is no proof either.
        let k2 = Digest::of(b"k2");
        s.record_execution(&ignoring(b"k2", "w1", b"f", b"c1", 4)).unwrap();
        s.record_execution(&ignoring(b"k2", "w2", b"f", b"c2", 5)).unwrap();
        assert!(!s.proves(&k2, &Digest::of(b"f")).unwrap());
    }

    #[test]
    fn a_cache_from_before_the_compared_column_reads_read_only() {
        // `prova hermeticity` opens the index read-only, so an index an older prova wrote is
        // not migrated: its rows compare in full.
        let dir = tempfile::tempdir().unwrap();
        let (k, f, g) = (Digest::of(b"k"), Digest::of(b"f"), Digest::of(b"g"));
        {
            let index = dir.path().join(crate::INDEX_FILE);
            let mut conn = rusqlite::Connection::open(index).unwrap();
            super::super::schema::migrate(&mut conn, &super::super::schema::MIGRATIONS[..4])
                .unwrap();
            for (w, fp) in [("w1", f), ("w2", g)] {
                conn.execute(
                    "INSERT INTO executions (key, task, worker, platform, kind, ok, fingerprint, \
                     time_ms) VALUES (?1, 'a#build', ?2, 'x', 'run', 1, ?3, 1)",
                    params![k.0, w, fp.0],
                )
                .unwrap();
            }
        }
        let s = Store::open_read_only(dir.path()).unwrap();
        assert_eq!(s.disagreeing_keys(10).unwrap(), vec![k]);
        assert!(s.executions_of(&k).unwrap().iter().all(|e| e.compared.is_none()));
        assert!(!s.proves(&k, &f).unwrap());
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
        s.put_entry(&crate::NewEntry {
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
