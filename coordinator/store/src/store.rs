//! [`Store`]: one connection to a cache directory's index, plus its blob files. Opening and
//! the entry operations live here; blobs, the memo and maintenance are further `impl Store`
//! blocks in their own modules.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use prova_protocol::Digest;
use rusqlite::{Connection, OptionalExtension, Row, ToSql, params};

use super::error::{CacheError, io, sql, to_i64};
use super::schema::{self, MIGRATIONS};
use super::{BLOBS_DIR, Entry, INDEX_FILE, NewEntry, QUARANTINE_DIR, TMP_DIR};

/// Keys per `IN (…)` query of [`Store::get_entries`] and [`Store::touch`]: a warm run of 1,000
/// tasks is one statement, and each statement stays far below SQLite's bound-parameter limit
/// (32,766).
pub const KEYS_PER_QUERY: usize = 1000;

/// The columns [`entry_from_row`] reads, in order.
const ENTRY_COLUMNS: &str = "namespace, key, task, artifact, artifact_size, log, manifest, \
                             components, fingerprint, duration_ms, created_ms, last_used_ms";

/// A cache directory opened by this process. Meant to be owned by one thread
/// ([`super::CacheThread`]); other processes open their own.
pub struct Store {
    dir: PathBuf,
    conn: Connection,
    /// Opened by [`open_read_only`](Self::open_read_only) ([`super::readonly`] says what that
    /// refuses and what it skips).
    read_only: bool,
    /// Where [`tmp_dir`](Self::tmp_dir) points.
    tmp: PathBuf,
    /// A private directory removed with the store (read-only and scratch stores).
    _scratch: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the cache directory `dir`: the layout, the index in WAL
    /// mode, a `quick_check` (the [`schema`] docs say why not `integrity_check`) and
    /// the schema migrations. A damaged index is an error
    /// ([`CacheError::IntegrityCheck`]), never a panic.
    pub fn open(dir: &Path) -> Result<Store, CacheError> {
        for sub in [BLOBS_DIR, TMP_DIR, QUARANTINE_DIR] {
            let p = dir.join(sub);
            fs::create_dir_all(&p).map_err(io(&p))?;
        }
        let index = dir.join(INDEX_FILE);
        // Looked at before the connection exists (opening may create the `-wal`).
        let unchanged = super::verified::unchanged_since_close(dir);
        let mut conn = Connection::open(&index).map_err(sql("open"))?;
        schema::configure(&mut conn)?;
        if !unchanged {
            schema::quick_check(&conn)?;
        }
        schema::migrate(&mut conn, MIGRATIONS)?;
        Ok(Store::from_parts(dir.to_path_buf(), conn, false, None))
    }

    /// Closes the index, and when that close was clean and the last (the WAL is gone)
    /// records it so the next open may skip `quick_check` ([`super::verified`]). Dropping a
    /// store closes it too, without the record.
    pub fn close(self) -> Result<(), CacheError> {
        let Store { dir, conn, read_only, _scratch, .. } = self;
        conn.close().map_err(|(_, e)| sql("close")(e))?;
        if !read_only && _scratch.is_none() {
            super::verified::record_close(&dir);
        }
        Ok(())
    }

    /// A store over `conn` for the opening functions: `tmp/` is the scratch directory's when
    /// there is one.
    pub(crate) fn from_parts(
        dir: PathBuf,
        conn: Connection,
        read_only: bool,
        scratch: Option<tempfile::TempDir>,
    ) -> Store {
        let tmp = match &scratch {
            Some(s) => s.path().join(TMP_DIR),
            None => dir.join(TMP_DIR),
        };
        Store { dir, conn, read_only, tmp, _scratch: scratch }
    }

    /// Whether this store was opened read-only: every write is refused
    /// ([`CacheError::ReadOnly`]) or skipped.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// [`CacheError::ReadOnly`] for `op` on a read-only store.
    pub(crate) fn writable(&self, op: &'static str) -> Result<(), CacheError> {
        if self.read_only { Err(CacheError::ReadOnly { op }) } else { Ok(()) }
    }

    /// Moves a damaged index (and its WAL files) of cache directory `dir` into `quarantine/`,
    /// so the next [`open`](Self::open) starts an empty one; blobs stay (they are verified on
    /// every read). For `prova cache clean` after `open` failed with
    /// [`CacheError::IntegrityCheck`]: no other process may have the index open. Returns where
    /// the index went, `None` if there was none.
    pub fn discard_index(dir: &Path) -> Result<Option<PathBuf>, CacheError> {
        super::verified::forget(dir);
        let quarantine = dir.join(QUARANTINE_DIR);
        fs::create_dir_all(&quarantine).map_err(io(&quarantine))?;
        let stem = format!("index-{}", super::blobs::unique_name(""));
        let mut moved = None;
        for suffix in ["", "-wal", "-shm"] {
            let src = dir.join(format!("{INDEX_FILE}{suffix}"));
            let dest = quarantine.join(format!("{stem}.sqlite{suffix}"));
            match fs::rename(&src, &dest) {
                Ok(()) if suffix.is_empty() => moved = Some(dest),
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&src)(e)),
            }
        }
        Ok(moved)
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The staging directory: write here, then hand the file to
    /// [`put_blob_file`](Self::put_blob_file) (same file system, so the rename is atomic).
    pub fn tmp_dir(&self) -> PathBuf {
        self.tmp.clone()
    }

    /// The quarantine directory.
    pub fn quarantine_dir(&self) -> PathBuf {
        self.dir.join(QUARANTINE_DIR)
    }

    /// The full `PRAGMA integrity_check` (slow on a large index: tests and
    /// `prova cache stats --check`).
    pub fn integrity_check(&self) -> Result<(), CacheError> {
        schema::integrity_check(&self.conn)
    }

    /// The connection, for the other `impl Store` blocks.
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Runs `f`'s reads in one read transaction (unless one is already open). Each statement
    /// outside a transaction is a transaction of its own, and in WAL mode SQLite begins each
    /// by taking a read lock on the WAL index and checking the file (`fcntl`, `fstat`,
    /// `fcntl`): a lookup per file of 40 outputs was 120 system calls. Inside one, the lock
    /// is taken once, and every read sees the same snapshot.
    pub(crate) fn reading<T>(
        &self,
        f: impl FnOnce() -> Result<T, CacheError>,
    ) -> Result<T, CacheError> {
        if !self.conn.is_autocommit() {
            return f();
        }
        self.conn.execute_batch("BEGIN DEFERRED").map_err(sql("begin a read"))?;
        let out = f();
        // Nothing was written: ending it either way only releases the snapshot.
        if let Err(e) = self.conn.execute_batch("ROLLBACK") {
            tracing::debug!(error = %e, "ending a read transaction");
        }
        out
    }

    /// The connection, mutably (transactions).
    pub(crate) fn conn_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// The entry for `key` in `namespace`.
    pub fn get_entry(&self, namespace: &str, key: &Digest) -> Result<Option<Entry>, CacheError> {
        let q = format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ?1 AND key = ?2");
        let mut stmt = self.conn.prepare_cached(&q).map_err(sql("get_entry"))?;
        stmt.query_row(params![namespace, key.0], entry_from_row)
            .optional()
            .map_err(sql("get_entry"))
    }

    /// The entries of `keys` that exist in `namespace`, in `ceil(keys / KEYS_PER_QUERY)`
    /// statements.
    pub fn get_entries(
        &self,
        namespace: &str,
        keys: &[Digest],
    ) -> Result<HashMap<Digest, Entry>, CacheError> {
        let mut out = HashMap::with_capacity(keys.len());
        for chunk in keys.chunks(KEYS_PER_QUERY) {
            let q = format!(
                "SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ?1 AND key IN ({})",
                placeholders(2, chunk.len())
            );
            let mut stmt = self.conn.prepare_cached(&q).map_err(sql("get_entries"))?;
            let args = key_args(&namespace, chunk);
            let rows = stmt.query_map(&args[..], entry_from_row).map_err(sql("get_entries"))?;
            for row in rows {
                let e = row.map_err(sql("get_entries"))?;
                out.insert(e.key, e);
            }
        }
        Ok(out)
    }

    /// Marks `keys` as used at `now_ms` (prune keeps the recently used), in one transaction.
    /// A time never moves backwards; absent keys are ignored.
    pub fn touch(&self, namespace: &str, keys: &[Digest], now_ms: i64) -> Result<(), CacheError> {
        self.touch_coarse(namespace, keys, now_ms, 0)
    }

    /// [`touch`](Self::touch), leaving alone an entry already used less than `resolution_ms`
    /// before `now_ms`: a run of hits right after another then writes nothing to the index
    /// (no WAL frames, no checkpoint at close), and prune's order is off by at most that.
    pub fn touch_coarse(
        &self,
        namespace: &str,
        keys: &[Digest],
        now_ms: i64,
        resolution_ms: i64,
    ) -> Result<(), CacheError> {
        if keys.is_empty() || self.read_only {
            return Ok(()); // a read-only run leaves the LRU order as it found it
        }
        let older_than = now_ms.saturating_sub(resolution_ms.max(0));
        let tx = self.conn.unchecked_transaction().map_err(sql("begin touch"))?;
        for chunk in keys.chunks(KEYS_PER_QUERY) {
            let q = format!(
                "UPDATE entries SET last_used_ms = max(last_used_ms, ?1) \
                 WHERE namespace = ?2 AND last_used_ms <= ?{} AND key IN ({})",
                chunk.len() + 3,
                placeholders(3, chunk.len())
            );
            let mut stmt = tx.prepare_cached(&q).map_err(sql("touch"))?;
            let mut args: Vec<&dyn ToSql> = Vec::with_capacity(chunk.len() + 3);
            args.push(&now_ms);
            args.extend(key_args(&namespace, chunk));
            args.push(&older_than);
            stmt.execute(&args[..]).map_err(sql("touch"))?;
        }
        tx.commit().map_err(sql("commit touch"))
    }

    /// Files `e`, replacing any entry of the same (namespace, key) — a `--force` run
    /// overwrites. Its blobs must already be in `blobs/` ([`CacheError::MissingBlob`]) and the
    /// artifact's size must be its file's ([`CacheError::BlobSize`]); both are checked under
    /// the write lock, so a concurrent prune cannot remove them between check and insert.
    pub fn put_entry(&mut self, e: &NewEntry) -> Result<(), CacheError> {
        self.writable("put_entry")?;
        let duration_ms = to_i64("duration_ms", e.duration_ms)?;
        let artifact_size = e.artifact.map(|(_, s)| to_i64("artifact size", s)).transpose()?;
        let tx = self.conn.transaction().map_err(sql("begin put_entry"))?;
        if let Some((d, expected)) = e.artifact {
            let actual = blob_len(&self.dir, &d)?.ok_or(CacheError::MissingBlob { digest: d })?;
            if actual != expected {
                return Err(CacheError::BlobSize { digest: d, expected, actual });
            }
        }
        let log_size = match e.log {
            Some(d) => {
                let len = blob_len(&self.dir, &d)?.ok_or(CacheError::MissingBlob { digest: d })?;
                Some(to_i64("log size", len)?)
            }
            None => None,
        };
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO entries (namespace, key, task, artifact, artifact_size, log, \
                     log_size, manifest, components, fingerprint, duration_ms, created_ms, \
                     last_used_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12) \
                     ON CONFLICT (namespace, key) DO UPDATE SET task = excluded.task, \
                     artifact = excluded.artifact, artifact_size = excluded.artifact_size, \
                     log = excluded.log, log_size = excluded.log_size, \
                     manifest = excluded.manifest, components = excluded.components, \
                     fingerprint = excluded.fingerprint, duration_ms = excluded.duration_ms, \
                     created_ms = excluded.created_ms, last_used_ms = excluded.last_used_ms",
                )
                .map_err(sql("put_entry"))?;
            stmt.execute(params![
                e.namespace,
                e.key.0,
                e.task,
                e.artifact.map(|(d, _)| d.0),
                artifact_size,
                e.log.map(|d| d.0),
                log_size,
                e.manifest,
                e.components,
                e.fingerprint.map(|d| d.0),
                duration_ms,
                e.created_ms,
            ])
            .map_err(sql("put_entry"))?;
        }
        tx.commit().map_err(sql("commit put_entry"))
    }

    /// The newest entry (by `created_ms`) of `task` in `namespace`, for `prova why`.
    pub fn latest_for_task(
        &self,
        namespace: &str,
        task: &str,
    ) -> Result<Option<Entry>, CacheError> {
        let q = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ?1 AND task = ?2 \
             ORDER BY created_ms DESC, id DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&q).map_err(sql("latest_for_task"))?;
        stmt.query_row(params![namespace, task], entry_from_row)
            .optional()
            .map_err(sql("latest_for_task"))
    }

    /// The newest entry of `task` in `namespace` whose outputs have `fingerprint` (what a
    /// dependent's key folded: `prova why` names the files that moved since).
    pub fn entry_with_fingerprint(
        &self,
        namespace: &str,
        task: &str,
        fingerprint: &Digest,
    ) -> Result<Option<Entry>, CacheError> {
        let q = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ?1 AND task = ?2 \
             AND fingerprint = ?3 ORDER BY created_ms DESC, id DESC LIMIT 1"
        );
        let mut stmt = self.conn.prepare_cached(&q).map_err(sql("entry_with_fingerprint"))?;
        stmt.query_row(params![namespace, task, fingerprint.0], entry_from_row)
            .optional()
            .map_err(sql("entry_with_fingerprint"))
    }

    /// Removes one entry (its blobs stay until a prune finds them unreferenced). Absent is ok.
    pub fn delete_entry(&mut self, namespace: &str, key: &Digest) -> Result<(), CacheError> {
        self.writable("delete_entry")?;
        self.conn
            .execute(
                "DELETE FROM entries WHERE namespace = ?1 AND key = ?2",
                params![namespace, key.0],
            )
            .map_err(sql("delete_entry"))?;
        Ok(())
    }
}

/// `?first, ?first+1, …` (`n` of them).
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
}

/// `[namespace, key…]` as statement arguments.
fn key_args<'a>(namespace: &'a &'a str, keys: &'a [Digest]) -> Vec<&'a dyn ToSql> {
    let mut args: Vec<&dyn ToSql> = Vec::with_capacity(keys.len() + 1);
    args.push(namespace);
    args.extend(keys.iter().map(|k| &k.0 as &dyn ToSql));
    args
}

/// The size of blob `d`'s file, `None` when it is not there.
fn blob_len(dir: &Path, d: &Digest) -> Result<Option<u64>, CacheError> {
    let path = super::blobs::blob_path_in(dir, d);
    match fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(Some(m.len())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

/// Column `idx` as an unsigned integer (the index stores them as non-negative i64; rusqlite
/// reads u64 only with a feature the workspace does not enable).
pub(crate) fn get_u64(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(idx)?;
    u64::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, v))
}

/// [`get_u64`] of a nullable column.
pub(crate) fn get_opt_u64(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<u64>> {
    match row.get::<_, Option<i64>>(idx)? {
        None => Ok(None),
        Some(v) => {
            u64::try_from(v).map(Some).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, v))
        }
    }
}

/// A row of [`ENTRY_COLUMNS`].
fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<Entry> {
    let artifact: Option<[u8; 32]> = row.get(3)?;
    let artifact_size = get_opt_u64(row, 4)?;
    let artifact = match (artifact, artifact_size) {
        (Some(d), Some(s)) => Some((Digest(d), s)),
        _ => None,
    };
    Ok(Entry {
        namespace: row.get(0)?,
        key: Digest(row.get(1)?),
        task: row.get(2)?,
        artifact,
        log: row.get::<_, Option<[u8; 32]>>(5)?.map(Digest),
        manifest: row.get(6)?,
        components: row.get(7)?,
        fingerprint: row.get::<_, Option<[u8; 32]>>(8)?.map(Digest),
        duration_ms: get_u64(row, 9)?,
        created_ms: row.get(10)?,
        last_used_ms: row.get(11)?,
    })
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
