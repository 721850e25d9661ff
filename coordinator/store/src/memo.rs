//! The file-digest memo (brief §5) and the task-duration history (critical-path weights).
//!
//! Memo rows are grouped by a **scope**, the workspace root's path: several clones of one
//! repository may share a cache directory, and the same relative path in two clones is two
//! different files. A scope is loaded in one query at the start of a run and written back in
//! one transaction at its end.

use std::collections::HashMap;

use prova_protocol::Digest;
use rusqlite::params;

use super::MemoRow;
use super::error::{CacheError, sql, to_i64};
use super::store::{Store, get_u64};

/// Weight (percent) of the newest sample in a task's duration average: recent runs count
/// most, and one outlier (a cold disk, a loaded machine) moves the weight by less than a third.
pub const DURATION_NEW_SAMPLE_PERCENT: i64 = 30;

impl Store {
    /// Every memo row of `scope`, by workspace-relative path.
    pub fn memo_load(&self, scope: &str) -> Result<HashMap<String, MemoRow>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare_cached(
                "SELECT path, dev, ino, size, mtime_ns, ctime_ns, mode, digest, recorded_ns \
                 FROM memo WHERE scope = ?1",
            )
            .map_err(sql("memo_load"))?;
        let rows = stmt
            .query_map([scope], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    MemoRow {
                        // Device and inode numbers are identities, stored bit-for-bit in i64.
                        dev: r.get::<_, i64>(1)? as u64,
                        ino: r.get::<_, i64>(2)? as u64,
                        size: get_u64(r, 3)?,
                        mtime_ns: r.get(4)?,
                        ctime_ns: r.get(5)?,
                        mode: r.get(6)?,
                        digest: Digest(r.get(7)?),
                        recorded_ns: r.get(8)?,
                    },
                ))
            })
            .map_err(sql("memo_load"))?;
        rows.collect::<Result<_, _>>().map_err(sql("memo_load"))
    }

    /// The memo rows of `scope` for `paths` (those that have one): what a restore needs for
    /// one entry's files, without loading the whole scope.
    pub fn memo_get(
        &self,
        scope: &str,
        paths: &[String],
    ) -> Result<HashMap<String, MemoRow>, CacheError> {
        if paths.len() > 1 {
            return self.reading(|| self.memo_get_each(scope, paths));
        }
        self.memo_get_each(scope, paths)
    }

    /// [`memo_get`](Self::memo_get), one statement per path.
    fn memo_get_each(
        &self,
        scope: &str,
        paths: &[String],
    ) -> Result<HashMap<String, MemoRow>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare_cached(
                "SELECT dev, ino, size, mtime_ns, ctime_ns, mode, digest, recorded_ns \
                 FROM memo WHERE scope = ?1 AND path = ?2",
            )
            .map_err(sql("memo_get"))?;
        let mut out = HashMap::new();
        for p in paths {
            let mut rows = stmt.query(params![scope, p]).map_err(sql("memo_get"))?;
            if let Some(r) = rows.next().map_err(sql("memo_get"))? {
                let row = MemoRow {
                    dev: r.get::<_, i64>(0).map_err(sql("memo_get"))? as u64,
                    ino: r.get::<_, i64>(1).map_err(sql("memo_get"))? as u64,
                    size: get_u64(r, 2).map_err(sql("memo_get"))?,
                    mtime_ns: r.get(3).map_err(sql("memo_get"))?,
                    ctime_ns: r.get(4).map_err(sql("memo_get"))?,
                    mode: r.get(5).map_err(sql("memo_get"))?,
                    digest: Digest(r.get(6).map_err(sql("memo_get"))?),
                    recorded_ns: r.get(7).map_err(sql("memo_get"))?,
                };
                out.insert(p.clone(), row);
            }
        }
        Ok(out)
    }

    /// Inserts or replaces `rows` of `scope`, in one transaction (skipped on a read-only store).
    pub fn memo_store(
        &mut self,
        scope: &str,
        rows: &[(String, MemoRow)],
    ) -> Result<(), CacheError> {
        if rows.is_empty() || self.is_read_only() {
            return Ok(());
        }
        let tx = self.conn_mut().transaction().map_err(sql("begin memo_store"))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO memo (scope, path, dev, ino, size, mtime_ns, ctime_ns, mode, \
                     digest, recorded_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                     ON CONFLICT (scope, path) DO UPDATE SET dev = excluded.dev, \
                     ino = excluded.ino, size = excluded.size, mtime_ns = excluded.mtime_ns, \
                     ctime_ns = excluded.ctime_ns, mode = excluded.mode, \
                     digest = excluded.digest, recorded_ns = excluded.recorded_ns",
                )
                .map_err(sql("memo_store"))?;
            for (path, m) in rows {
                stmt.execute(params![
                    scope,
                    path,
                    m.dev as i64,
                    m.ino as i64,
                    to_i64("memo size", m.size)?,
                    m.mtime_ns,
                    m.ctime_ns,
                    m.mode,
                    m.digest.0,
                    m.recorded_ns,
                ])
                .map_err(sql("memo_store"))?;
            }
        }
        tx.commit().map_err(sql("commit memo_store"))
    }

    /// Forgets `paths` of `scope` (files that no longer exist), in one transaction.
    pub fn memo_remove(&mut self, scope: &str, paths: &[String]) -> Result<(), CacheError> {
        if paths.is_empty() || self.is_read_only() {
            return Ok(());
        }
        let tx = self.conn_mut().transaction().map_err(sql("begin memo_remove"))?;
        {
            let mut stmt = tx
                .prepare_cached("DELETE FROM memo WHERE scope = ?1 AND path = ?2")
                .map_err(sql("memo_remove"))?;
            for p in paths {
                stmt.execute(params![scope, p]).map_err(sql("memo_remove"))?;
            }
        }
        tx.commit().map_err(sql("commit memo_remove"))
    }

    /// Folds each `(task id, duration ms)` into that task's moving average (the first sample
    /// is taken as is), in one transaction.
    pub fn record_durations(&mut self, rows: &[(String, u64)]) -> Result<(), CacheError> {
        if rows.is_empty() || self.is_read_only() {
            return Ok(());
        }
        let w = DURATION_NEW_SAMPLE_PERCENT;
        let q = format!(
            "INSERT INTO durations (task, ms, samples) VALUES (?1, ?2, 1) \
             ON CONFLICT (task) DO UPDATE SET \
             ms = (ms * {keep} + excluded.ms * {w} + 50) / 100, samples = samples + 1",
            keep = 100 - w
        );
        let tx = self.conn_mut().transaction().map_err(sql("begin record_durations"))?;
        {
            let mut stmt = tx.prepare_cached(&q).map_err(sql("record_durations"))?;
            for (task, ms) in rows {
                // Capped so the weighted sum above cannot overflow (~1.4 million years).
                let ms = to_i64("duration_ms", *ms)?.min(i64::MAX / 200);
                stmt.execute(params![task, ms]).map_err(sql("record_durations"))?;
            }
        }
        tx.commit().map_err(sql("commit record_durations"))
    }

    /// Every task's averaged duration in ms.
    pub fn durations(&self) -> Result<HashMap<String, u64>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT task, ms FROM durations")
            .map_err(sql("durations"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, get_u64(r, 1)?)))
            .map_err(sql("durations"))?;
        rows.collect::<Result<_, _>>().map_err(sql("durations"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::memo_row;

    #[test]
    fn memo_round_trip_upsert_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut rows: Vec<(String, MemoRow)> =
            (0..2_000).map(|i| (format!("src/f{i}.rs"), memo_row(i))).collect();
        // Identities above i64::MAX survive the round trip.
        rows[0].1.dev = u64::MAX;
        rows[0].1.ino = (1 << 63) + 5;
        store.memo_store("/ws/a", &rows).unwrap();
        let got = store.memo_load("/ws/a").unwrap();
        assert_eq!(got.len(), 2_000);
        for (p, m) in &rows {
            assert_eq!(got.get(p), Some(m), "{p}");
        }

        let mut changed = rows[1].1;
        changed.size = 999;
        changed.digest = Digest::of(b"new content");
        store.memo_store("/ws/a", &[(rows[1].0.clone(), changed)]).unwrap();
        let got = store.memo_load("/ws/a").unwrap();
        assert_eq!(got.len(), 2_000);
        assert_eq!(got[&rows[1].0], changed);

        store.memo_remove("/ws/a", &[rows[2].0.clone(), "never/there".into()]).unwrap();
        assert_eq!(store.memo_load("/ws/a").unwrap().len(), 1_999);
        store.memo_store("/ws/a", &[]).unwrap();
    }

    #[test]
    fn memo_get_answers_for_the_paths_asked() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let rows: Vec<(String, MemoRow)> =
            (0..5).map(|i| (format!("dist/f{i}"), memo_row(i))).collect();
        store.memo_store("outputs:/ws", &rows).unwrap();
        store.memo_store("/ws", &[("dist/f9".into(), memo_row(9))]).unwrap();
        let got = store
            .memo_get("outputs:/ws", &["dist/f1".into(), "dist/f4".into(), "dist/f9".into()])
            .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got["dist/f1"], memo_row(1));
        assert_eq!(got["dist/f4"], memo_row(4));
    }

    #[test]
    fn memo_get_reads_in_one_transaction_and_leaves_an_open_one_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let rows: Vec<(String, MemoRow)> =
            (0..3).map(|i| (format!("dist/f{i}"), memo_row(i))).collect();
        store.memo_store("outputs:/ws", &rows).unwrap();
        let asked: Vec<String> = rows.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(store.memo_get("outputs:/ws", &asked).unwrap().len(), 3);
        assert!(store.conn().is_autocommit(), "its read transaction ended");
        // Inside a transaction of the caller's: answered in it, which stays open.
        store.conn().execute_batch("BEGIN IMMEDIATE").unwrap();
        store.conn().execute("DELETE FROM memo WHERE path = 'dist/f0'", []).unwrap();
        let got = store.memo_get("outputs:/ws", &asked).unwrap();
        assert_eq!(got.len(), 2, "it sees the transaction's own write");
        assert!(!store.conn().is_autocommit(), "the caller's transaction is still open");
        store.conn().execute_batch("ROLLBACK").unwrap();
        assert_eq!(store.memo_get("outputs:/ws", &asked).unwrap().len(), 3);
    }

    #[test]
    fn memo_scopes_are_isolated() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.memo_store("/clone/one", &[("src/a.ts".into(), memo_row(1))]).unwrap();
        store.memo_store("/clone/two", &[("src/a.ts".into(), memo_row(2))]).unwrap();
        assert_eq!(store.memo_load("/clone/one").unwrap()["src/a.ts"], memo_row(1));
        assert_eq!(store.memo_load("/clone/two").unwrap()["src/a.ts"], memo_row(2));
        assert!(store.memo_load("/clone").unwrap().is_empty());
        store.memo_remove("/clone/two", &["src/a.ts".into()]).unwrap();
        assert_eq!(store.memo_load("/clone/one").unwrap().len(), 1);
    }

    #[test]
    fn durations_average_with_the_newest_weighted() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.record_durations(&[("web#build".into(), 1000), ("api#test".into(), 40)]).unwrap();
        assert_eq!(store.durations().unwrap()["web#build"], 1000);
        store.record_durations(&[("web#build".into(), 2000)]).unwrap();
        // 1000 * 0.7 + 2000 * 0.3
        assert_eq!(store.durations().unwrap()["web#build"], 1300);
        assert_eq!(store.durations().unwrap()["api#test"], 40);
        store.record_durations(&[("huge#task".into(), u64::MAX)]).unwrap_err();
        store.record_durations(&[("big#task".into(), i64::MAX as u64)]).unwrap();
        store.record_durations(&[("big#task".into(), i64::MAX as u64)]).unwrap();
        assert!(store.durations().unwrap()["big#task"] > 0);
    }
}
