//! Maintenance: [`Store::stats`], [`Store::prune`] (least recently used first, down to a byte
//! bound), [`Store::clean`], and [`Store::clean_dir`] for a directory whose index cannot be
//! opened at all (garbage bytes, a truncated file, a schema from a newer prova).
//!
//! # Prune while other processes run
//! Victim rows are chosen from a snapshot, then deleted in batches of [`PRUNE_BATCH`], each
//! one write transaction that deletes the rows and unlinks the blobs no remaining row
//! references before it commits. `put_entry` checks its blobs under the same write lock, so
//! no row is ever committed pointing at a blob a prune removed. A row used since the snapshot
//! (its `last_used_ms` moved) is spared. A reader that already holds a victim row finds its
//! blob gone: a miss, by the contract in [`super`].
//!
//! Blobs no row references that prune did not just orphan — written by a run that has not
//! filed its entry yet, or left by a crash — are removed only once their mtime is older than
//! [`ORPHAN_GRACE`] (a writer that finds its blob already present refreshes the mtime).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use prova_protocol::Digest;
use rusqlite::{Connection, params};

use super::error::{CacheError, io, sql};
use super::store::{Store, get_opt_u64, get_u64};
use super::{BLOBS_DIR, INDEX_FILE, QUARANTINE_DIR, TMP_DIR};

/// An unreferenced blob younger than this may belong to a run between `put_blob` and
/// `put_entry`: prune leaves it. Longer than any upload-then-file gap, short enough to reclaim
/// a crashed run's blobs the same day.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(60 * 60);

/// Files in `tmp/` older than this are left over from a crashed write or restore.
pub const TMP_GRACE: Duration = Duration::from_secs(60 * 60);

/// Quarantined blobs are kept this long for a post-mortem, then pruned (bounded disk).
pub const QUARANTINE_KEEP: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Victim rows per prune transaction: bounds how long prune holds the index's write lock
/// (other processes wait on it up to the busy timeout).
pub const PRUNE_BATCH: usize = 256;

/// What is in a cache directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Entry rows, by namespace.
    pub entries: BTreeMap<String, u64>,
    /// Bytes the entries account for (see [`Store::prune`]).
    pub referenced_bytes: u64,
    /// Files under `blobs/`.
    pub blob_files: u64,
    /// Their total size.
    pub blob_bytes: u64,
    /// The least recent `last_used_ms`, if any entry.
    pub oldest_used_ms: Option<i64>,
    /// The most recent `last_used_ms`, if any entry.
    pub newest_used_ms: Option<i64>,
    /// Files in `quarantine/`.
    pub quarantined: u64,
    /// Files and directories in `tmp/`.
    pub tmp_items: u64,
    /// Memo rows (every scope).
    pub memo_rows: u64,
    /// Size of the index (`index.sqlite` and its WAL).
    pub index_bytes: u64,
}

/// What a prune removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneStats {
    /// Entry rows deleted.
    pub entries_deleted: u64,
    /// Blob files deleted (orphaned by those rows, or old orphans).
    pub blobs_deleted: u64,
    /// Their total size.
    pub bytes_freed: u64,
    /// Bytes the remaining entries account for.
    pub referenced_bytes: u64,
    /// Stale items removed from `tmp/`.
    pub tmp_removed: u64,
    /// Old quarantined blobs removed.
    pub quarantine_removed: u64,
}

/// What [`Store::clean_dir`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanedDir {
    /// Index files (`index.sqlite` and its `-wal`, `-shm`, `-journal`).
    pub index_files: u64,
    /// Blob files under `blobs/`.
    pub blobs: u64,
    /// Items of `tmp/` and `quarantine/`.
    pub other_items: u64,
    /// Symbolic links found where the layout has a directory or file: removed, never
    /// followed.
    pub links: u64,
}

/// One entry as prune sees it.
struct LruRow {
    id: i64,
    last_used_ms: i64,
    row_bytes: u64,
    blobs: Vec<(Digest, u64)>,
}

impl Store {
    /// Counts entries, blobs, quarantine and staging; walks `blobs/`.
    pub fn stats(&self) -> Result<Stats, CacheError> {
        let mut s = Stats::default();
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT namespace, count(*) FROM entries GROUP BY namespace")
            .map_err(sql("stats"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, get_u64(r, 1)?)))
            .map_err(sql("stats"))?;
        s.entries = rows.collect::<Result<_, _>>().map_err(sql("stats"))?;
        (s.oldest_used_ms, s.newest_used_ms) = conn
            .query_row("SELECT min(last_used_ms), max(last_used_ms) FROM entries", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(sql("stats"))?;
        s.memo_rows = conn
            .query_row("SELECT count(*) FROM memo", [], |r| get_u64(r, 0))
            .map_err(sql("stats"))?;
        s.referenced_bytes = referenced_bytes(conn)?;
        walk_blobs(&self.dir().join(BLOBS_DIR), |_, meta| {
            s.blob_files += 1;
            s.blob_bytes += meta.len();
        })?;
        s.quarantined = count_children(&self.dir().join(QUARANTINE_DIR))?;
        s.tmp_items = count_children(&self.dir().join(TMP_DIR))?;
        for name in [INDEX_FILE.to_string(), format!("{INDEX_FILE}-wal")] {
            s.index_bytes += fs::metadata(self.dir().join(name)).map_or(0, |m| m.len());
        }
        Ok(s)
    }

    /// Deletes least-recently-used entries until the remaining ones account for at most
    /// `max_bytes`, then the blob files no entry references, stale `tmp/` items (older than
    /// [`TMP_GRACE`]) and old quarantined blobs ([`QUARANTINE_KEEP`]). An entry accounts for
    /// its blobs (a blob shared by several entries counts once, and is kept while any of them
    /// remains) plus its row's manifest and components. Safe while other processes use the
    /// directory: see the module docs.
    ///
    /// Memory: one small record per entry (the LRU order is planned in full).
    pub fn prune(&mut self, max_bytes: u64) -> Result<PruneStats, CacheError> {
        self.prune_at(max_bytes, SystemTime::now())
    }

    /// [`prune`](Self::prune) with the clock the grace periods are measured against.
    pub(crate) fn prune_at(
        &mut self,
        max_bytes: u64,
        now: SystemTime,
    ) -> Result<PruneStats, CacheError> {
        self.writable("prune")?;
        let mut out = PruneStats::default();
        let victims = plan_victims(self.lru_rows()?, max_bytes);
        let dir = self.dir().to_path_buf();
        let blobs_dir = dir.join(BLOBS_DIR);
        for batch in victims.chunks(PRUNE_BATCH) {
            let tx = self.conn_mut().transaction().map_err(sql("begin prune"))?;
            let mut orphaned: Vec<Digest> = Vec::new();
            for v in batch {
                let n = tx
                    .execute(
                        "DELETE FROM entries WHERE id = ?1 AND last_used_ms = ?2",
                        params![v.id, v.last_used_ms],
                    )
                    .map_err(sql("prune"))?;
                if n == 1 {
                    out.entries_deleted += 1;
                    orphaned.extend(v.blobs.iter().map(|(d, _)| *d));
                }
            }
            orphaned.sort_unstable();
            orphaned.dedup();
            for d in orphaned {
                if !is_referenced(&tx, &d)? {
                    let path = super::blobs::blob_path_in(&dir, &d);
                    if let Some(len) = remove_file_len(&path)? {
                        out.blobs_deleted += 1;
                        out.bytes_freed += len;
                    }
                    forget_uploads(&tx, &d)?;
                }
            }
            tx.commit().map_err(sql("commit prune"))?;
        }

        // Old orphans: collected outside the lock, re-checked and unlinked under it.
        let referenced = self.referenced_set()?;
        let mut candidates: Vec<(PathBuf, Option<Digest>)> = Vec::new();
        walk_blobs(&blobs_dir, |path, meta| {
            let digest = digest_of_blob_path(path);
            let kept = digest.is_some_and(|d| referenced.contains(&d));
            if !kept && older_than(meta, now, ORPHAN_GRACE) {
                candidates.push((path.to_path_buf(), digest));
            }
        })?;
        for batch in candidates.chunks(PRUNE_BATCH) {
            let tx = self.conn_mut().transaction().map_err(sql("begin prune"))?;
            for (path, digest) in batch {
                if let Some(d) = digest
                    && is_referenced(&tx, d)?
                {
                    continue;
                }
                let still_old =
                    fs::symlink_metadata(path).is_ok_and(|m| older_than(&m, now, ORPHAN_GRACE));
                if still_old && let Some(len) = remove_file_len(path)? {
                    out.blobs_deleted += 1;
                    out.bytes_freed += len;
                    if let Some(d) = digest {
                        forget_uploads(&tx, d)?;
                    }
                }
            }
            tx.commit().map_err(sql("commit prune"))?;
        }

        out.tmp_removed = remove_children_older(&self.dir().join(TMP_DIR), now, TMP_GRACE)?;
        out.quarantine_removed =
            remove_children_older(&self.dir().join(QUARANTINE_DIR), now, QUARANTINE_KEEP)?;
        out.referenced_bytes = referenced_bytes(self.conn())?;
        Ok(out)
    }

    /// Removes everything: entries, memo, durations, blobs, staging and quarantine. The store
    /// stays usable. A concurrent run's in-flight write fails (its staged file is gone) and
    /// its reads miss.
    pub fn clean(&mut self) -> Result<(), CacheError> {
        self.writable("clean")?;
        let tx = self.conn_mut().transaction().map_err(sql("begin clean"))?;
        tx.execute_batch(
            "DELETE FROM entries; DELETE FROM memo; DELETE FROM durations; DELETE FROM executions; \
             DELETE FROM uploads;",
        )
        .map_err(sql("clean"))?;
        tx.commit().map_err(sql("commit clean"))?;
        for sub in [BLOBS_DIR, TMP_DIR, QUARANTINE_DIR] {
            remove_children_older(&self.dir().join(sub), SystemTime::now(), Duration::ZERO)?;
        }
        Ok(())
    }

    /// Empties the cache directory `dir` without opening its index, for `prova cache clean`
    /// when [`open`](Self::open) fails: removes the index files and the contents of `blobs/`,
    /// `tmp/` and `quarantine/` — the cache's own names only, so a `--cache-dir` pointed at
    /// the wrong directory loses nothing else — and follows no symbolic link inside `dir` (a
    /// link is removed, its target untouched). No other process may be using the directory;
    /// the next `open` starts an empty index.
    pub fn clean_dir(dir: &Path) -> Result<CleanedDir, CacheError> {
        let mut out = CleanedDir::default();
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let p = dir.join(format!("{INDEX_FILE}{suffix}"));
            match fs::symlink_metadata(&p) {
                Ok(m) => {
                    fs::remove_file(&p).map_err(io(&p))?;
                    if m.file_type().is_symlink() {
                        out.links += 1;
                    } else {
                        out.index_files += 1;
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io(&p)(e)),
            }
        }
        for sub in [BLOBS_DIR, TMP_DIR, QUARANTINE_DIR] {
            let p = dir.join(sub);
            let meta = match fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(io(&p)(e)),
            };
            if !meta.is_dir() {
                // A link (or a stray file) where a directory belongs: unlink it only.
                fs::remove_file(&p).map_err(io(&p))?;
                out.links += u64::from(meta.file_type().is_symlink());
                continue;
            }
            if sub == BLOBS_DIR {
                walk_blobs(&p, |_, _| out.blobs += 1)?;
            } else {
                out.other_items += count_children(&p)?;
            }
            // `remove_dir_all` removes a symbolic link it meets, never what it points at.
            remove_children_older(&p, SystemTime::now(), Duration::ZERO)?;
        }
        Ok(out)
    }

    /// Every entry, least recently used first, with what it accounts for.
    fn lru_rows(&self) -> Result<Vec<LruRow>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare(
                "SELECT id, last_used_ms, length(manifest) + length(components), artifact, \
                 artifact_size, log, log_size FROM entries ORDER BY last_used_ms, id",
            )
            .map_err(sql("prune"))?;
        let rows = stmt
            .query_map([], |r| {
                let mut blobs = Vec::with_capacity(2);
                if let (Some(d), Some(s)) = (r.get::<_, Option<[u8; 32]>>(3)?, get_opt_u64(r, 4)?) {
                    blobs.push((Digest(d), s));
                }
                if let (Some(d), Some(s)) = (r.get::<_, Option<[u8; 32]>>(5)?, get_opt_u64(r, 6)?)
                    && !blobs.iter().any(|(b, _)| b.0 == d)
                {
                    blobs.push((Digest(d), s));
                }
                Ok(LruRow {
                    id: r.get(0)?,
                    last_used_ms: r.get(1)?,
                    row_bytes: get_u64(r, 2)?,
                    blobs,
                })
            })
            .map_err(sql("prune"))?;
        rows.collect::<Result<_, _>>().map_err(sql("prune"))
    }

    /// Every blob some entry references.
    fn referenced_set(&self) -> Result<HashSet<Digest>, CacheError> {
        let mut stmt = self
            .conn()
            .prepare(
                "SELECT artifact FROM entries WHERE artifact IS NOT NULL \
                 UNION SELECT log FROM entries WHERE log IS NOT NULL \
                 UNION SELECT artifact FROM executions WHERE artifact IS NOT NULL",
            )
            .map_err(sql("prune"))?;
        let rows =
            stmt.query_map([], |r| r.get::<_, [u8; 32]>(0).map(Digest)).map_err(sql("prune"))?;
        rows.collect::<Result<_, _>>().map_err(sql("prune"))
    }
}

/// The least recently used prefix of `rows` whose removal brings the total to `max_bytes`.
fn plan_victims(rows: Vec<LruRow>, max_bytes: u64) -> Vec<LruRow> {
    let mut refs: HashMap<Digest, (u32, u64)> = HashMap::new();
    let mut total: u64 = 0;
    for r in &rows {
        total = total.saturating_add(r.row_bytes);
        for &(d, size) in &r.blobs {
            let slot = refs.entry(d).or_insert((0, size));
            if slot.0 == 0 {
                total = total.saturating_add(size);
            }
            slot.0 += 1;
        }
    }
    let mut victims = Vec::new();
    for r in rows {
        if total <= max_bytes {
            break;
        }
        total = total.saturating_sub(r.row_bytes);
        for (d, _) in &r.blobs {
            if let Some(slot) = refs.get_mut(d) {
                slot.0 -= 1;
                if slot.0 == 0 {
                    total = total.saturating_sub(slot.1);
                }
            }
        }
        victims.push(r);
    }
    victims
}

/// Bytes the entries account for (shared blobs once).
fn referenced_bytes(conn: &Connection) -> Result<u64, CacheError> {
    conn.query_row(
        "SELECT (SELECT coalesce(sum(length(manifest) + length(components)), 0) FROM entries) + \
         (SELECT coalesce(sum(size), 0) FROM (\
            SELECT artifact AS d, artifact_size AS size FROM entries WHERE artifact IS NOT NULL \
            UNION SELECT log, log_size FROM entries WHERE log IS NOT NULL))",
        [],
        |r| get_u64(r, 0),
    )
    .map_err(sql("sum referenced bytes"))
}

/// Drops the upload records of blob `d`, whose file is gone (a quota counts stored bytes).
fn forget_uploads(conn: &Connection, d: &Digest) -> Result<(), CacheError> {
    conn.prepare_cached("DELETE FROM uploads WHERE digest = ?1")
        .and_then(|mut s| s.execute([d.0]))
        .map_err(sql("forget uploads"))?;
    Ok(())
}

/// Whether any entry references blob `d` (indexed lookups).
fn is_referenced(conn: &Connection, d: &Digest) -> Result<bool, CacheError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM entries WHERE artifact = ?1) \
             OR EXISTS (SELECT 1 FROM entries WHERE log = ?1) \
             OR EXISTS (SELECT 1 FROM executions WHERE artifact = ?1)",
        )
        .map_err(sql("check blob references"))?;
    stmt.query_row([d.0], |r| r.get(0)).map_err(sql("check blob references"))
}

/// The digest a blob file's path names (`blobs/ab/ab…`), `None` for a stray file.
fn digest_of_blob_path(path: &Path) -> Option<Digest> {
    let name = path.file_name()?.to_str()?;
    let parent = path.parent()?.file_name()?.to_str()?;
    let d: Digest = name.parse().ok()?;
    (d.to_hex() == name && name.get(..2) == Some(parent)).then_some(d)
}

/// Calls `f` for every file in `blobs/*/`.
fn walk_blobs(blobs: &Path, mut f: impl FnMut(&Path, &fs::Metadata)) -> Result<(), CacheError> {
    for shard in read_dir(blobs)? {
        let shard = shard.map_err(io(blobs))?;
        if !shard.file_type().map_err(io(&shard.path()))?.is_dir() {
            continue;
        }
        let shard_path = shard.path();
        for item in read_dir(&shard_path)? {
            let item = item.map_err(io(&shard_path))?;
            let path = item.path();
            match item.metadata() {
                Ok(m) if m.is_file() => f(&path, &m),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
    }
    Ok(())
}

/// `fs::read_dir`, with a missing directory read as empty (a concurrent `clean`).
fn read_dir(dir: &Path) -> Result<impl Iterator<Item = std::io::Result<fs::DirEntry>>, CacheError> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(Some(rd).into_iter().flatten()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None.into_iter().flatten()),
        Err(e) => Err(io(dir)(e)),
    }
}

fn count_children(dir: &Path) -> Result<u64, CacheError> {
    let mut n = 0;
    for item in read_dir(dir)? {
        item.map_err(io(dir))?;
        n += 1;
    }
    Ok(n)
}

/// Whether `meta`'s mtime is at least `age` before `now` (a future mtime is young).
fn older_than(meta: &fs::Metadata, now: SystemTime, age: Duration) -> bool {
    meta.modified().ok().and_then(|m| now.duration_since(m).ok()).is_some_and(|d| d >= age)
}

/// Removes a file, returning its size; `None` if it was already gone.
fn remove_file_len(path: &Path) -> Result<Option<u64>, CacheError> {
    let len = match fs::symlink_metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    match fs::remove_file(path) {
        Ok(()) => Ok(Some(len)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// Removes the items of `dir` (files, or whole directories) whose mtime is at least `age`
/// old; returns how many.
fn remove_children_older(dir: &Path, now: SystemTime, age: Duration) -> Result<u64, CacheError> {
    let mut n = 0;
    for item in read_dir(dir)? {
        let item = item.map_err(io(dir))?;
        let path = item.path();
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&path)(e)),
        };
        if !age.is_zero() && !older_than(&meta, now, age) {
            continue;
        }
        let r = if meta.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        match r {
            Ok(()) => n += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
    }
    Ok(n)
}

#[cfg(test)]
#[path = "maintenance_tests.rs"]
mod tests;
