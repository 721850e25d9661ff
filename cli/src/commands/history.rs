//! The run history: every `prova run` (not `--dry-run`) is recorded in
//! `<workspace>/.prova/runs.db` (SQLite, its own file beside the cache, newest [`KEEP`] runs
//! kept — fewer in a large workspace, [`KEEP_TASKS`] — older ones pruned at each insert)
//! with its command line, start and end, its summary (zstd-compressed past
//! [`COMPRESS_FROM`] bytes), and per task the status, cache outcome, verdicts, wall/CPU/RSS
//! and its span on the client's timeline. `prova runs` lists them; `prova last [--json]` prints the newest
//! summary again. A history that cannot be written (a read-only `.prova`) is a warning in the
//! log, never a failed run.
//!
//! A run does not open the database: it appends its record to `.prova/runs.pending` (one
//! JSON line, under the file's lock; [`append`]), which the next open folds in
//! (`prova runs`, `prova last`, a run that starts with the file past [`FOLD_BEHIND_BYTES`]
//! on a thread beside its work ([`fold_behind`]), or the run whose append passes
//! [`FOLD_BYTES`]).

use std::io::Read as _;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use prova_protocol::events::{CacheStatus, RunSummary};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde_json::Value;

use crate::args::{LastArgs, RunsArgs};
use crate::exit::Code;
use crate::render::json::{self, RunMeta};
use crate::render::summary::{self, Counts};
use crate::render::trace::Timeline;

/// Runs kept.
pub const KEEP: i64 = 200;

/// Task records kept, across the kept runs: the newest runs whose tasks add up to at most
/// this many (and always the newest run). A 1,000-task workspace keeps its [`KEEP`] runs; a
/// 10,000-task one twenty, not 200 runs of 10,000 tasks each (about 380 MB at the
/// 1,000-task workspace's 190 KB a run).
pub const KEEP_TASKS: i64 = 200_000;

/// How long a statement waits for another connection's lock on the history.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// The file, under the workspace's `.prova/`.
pub const FILE: &str = "runs.db";

/// Beside it: the records of runs not yet folded into it ([`append`]), one JSON line each.
pub const PENDING: &str = "runs.pending";

/// Past this many bytes of pending records, the run that appended folds them into the
/// database itself: about a thousand no-op records of a small workspace, a dozen of a
/// 1,000-task one. Every open between two folds is saved its WAL's rebuild.
const FOLD_BYTES: u64 = 4 << 20;

/// Past this many bytes of pending records, a run starts by folding them on a thread of
/// their own ([`fold_behind`]), so the fold's writes and fsyncs (most of its time: a
/// thousand-task workspace's fold took 190 ms, 80 of them CPU) overlap the run's own work
/// instead of following it. Half of [`FOLD_BYTES`]: the append's own fold is then left for
/// runs that did not fold behind (a fold that failed, a run that ended before its own).
const FOLD_BEHIND_BYTES: u64 = FOLD_BYTES / 2;

/// The shape of a [`PENDING`] record ([`Row`]).
const ROW_VERSION: u32 = 1;

/// A summary at least this long (a workspace of more than a dozen tasks) is stored
/// zstd-compressed, as a BLOB; a shorter one as its JSON text. A 1,000-task summary is about
/// 330 KB of JSON, and 200 of them made the history 95 MB, nine times that workspace's cache;
/// compressed, a tenth of that is written (by the fold, and again by its checkpoint).
const COMPRESS_FROM: usize = 4096;

/// zstd's level for a stored summary: its default, a few milliseconds for a 1,000-task one
/// on the fold's thread.
const SUMMARY_LEVEL: i32 = 3;

/// The most a stored summary may unpack to when it is read back; past it the run is not
/// read (a damaged or hostile BLOB does not take the memory it claims).
const MAX_SUMMARY_BYTES: u64 = 64 << 20;

/// The most [`PENDING`] may hold: past it (folds that keep failing) a run is not appended,
/// and a fold reads no more.
const MAX_PENDING_BYTES: u64 = 64 << 20;

/// The WAL a run leaves for the next one to read back. Every `prova` is the file's only
/// connection and exits without a checkpoint, so the next one rebuilds the WAL's index by
/// reading and checksumming every frame before its first query. That rebuild also forgets
/// which frames were already copied into the database, so SQLite's automatic checkpoint
/// never restarted the WAL: it grew run after run (7 MB after 300 runs; each copied whole at
/// every checkpoint), the largest part of a warm no-op's history cost. A run writes about
/// eight pages; past this bound `record` checkpoints and truncates the WAL (two fsyncs every
/// few runs).
const WAL_KEEP_BYTES: u64 = 256 * 1024;

/// What the WAL file may reach between checkpoints: the pages before one, plus one more
/// run's worth (a small run's record; a large one checkpoints at its own commit).
#[cfg(test)]
const WAL_BOUND_BYTES: u64 = WAL_KEEP_BYTES + 32 * (4096 + 24);

/// What went wrong with the history.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// SQLite refused.
    #[error("run history {path}: {what}: {source}")]
    Sql {
        /// The database.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why.
        source: rusqlite::Error,
    },
    /// The directory could not be made.
    #[error("run history {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A stored summary does not parse (written by another version).
    #[error("run history {path}: run {run}: {source}")]
    Decode {
        /// The database.
        path: PathBuf,
        /// Which run.
        run: String,
        /// Why.
        source: serde_json::Error,
    },
    /// A stored summary does not unpack (a damaged BLOB, or one past [`MAX_SUMMARY_BYTES`]).
    #[error("run history {path}: run {run}: its summary does not unpack: {why}")]
    Unpack {
        /// The database.
        path: PathBuf,
        /// Which run.
        run: String,
        /// Why.
        why: String,
    },
}

/// One finished run, as recorded.
#[derive(Debug)]
pub struct Recorded<'a> {
    /// Its id (`run_id` of its events).
    pub meta: &'a RunMeta,
    /// The command line, program name first.
    pub command: &'a [String],
    /// The summary.
    pub summary: &'a RunSummary,
    /// The key pass's counters (`keys` of the summary line).
    pub keys: &'a Value,
    /// When each task ran, as the client saw it.
    pub timeline: &'a Timeline,
    /// When it ended.
    pub ended_at: SystemTime,
}

/// A run read back.
#[derive(Debug)]
pub struct Run {
    /// Its id.
    pub id: String,
    /// Start and end.
    pub started_at: SystemTime,
    /// End.
    pub ended_at: SystemTime,
    /// The command line.
    pub command: Vec<String>,
    /// The summary.
    pub summary: RunSummary,
    /// The key pass's counters.
    pub keys: Value,
}

/// The history of one workspace.
pub struct History {
    conn: Connection,
    path: PathBuf,
    /// [`KEEP_TASKS`] (tests lower it).
    keep_tasks: i64,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    started_ms INTEGER NOT NULL,
    ended_ms INTEGER NOT NULL,
    command TEXT NOT NULL,
    ok INTEGER NOT NULL,
    interrupted INTEGER NOT NULL,
    tasks INTEGER NOT NULL,
    hits INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    summary TEXT NOT NULL,
    keys TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run_tasks (
    run_seq INTEGER NOT NULL REFERENCES runs(seq) ON DELETE CASCADE,
    task TEXT NOT NULL,
    status TEXT NOT NULL,
    cache TEXT NOT NULL,
    verdicts TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    wall_ms INTEGER NOT NULL,
    cpu_ms INTEGER NOT NULL,
    max_rss_kb INTEGER NOT NULL,
    key TEXT,
    start_us INTEGER,
    dur_us INTEGER,
    lane INTEGER
);
CREATE INDEX IF NOT EXISTS run_tasks_by_run ON run_tasks(run_seq);
";

/// Moves the damaged database at `path` to [`SET_ASIDE`] and removes its WAL and shared
/// memory (they belong to it: a new database must not read its frames) — only while `path`
/// is still the file found damaged (inode `found`): another prova that set it aside first
/// and started a new one keeps that.
fn set_aside(path: &Path, found: Option<u64>, why: &HistoryError) {
    if found.is_none() || inode(path) != found {
        return;
    }
    let aside = path.with_file_name(SET_ASIDE);
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            for ext in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(path.with_file_name(format!("{FILE}{ext}")));
            }
            tracing::warn!(
                "the run history was damaged ({why}): kept as {}; a new one starts",
                aside.display()
            );
        }
        Err(e) => tracing::debug!(error = %e, "run history: a damaged database not set aside"),
    }
}

fn ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn from_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

impl HistoryError {
    /// Whether SQLite found the database file damaged or not a database at all (a power
    /// loss on a disk that lies about flushes, a restored or truncated copy).
    fn is_corrupt(&self) -> bool {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        matches!(self, HistoryError::Sql { source: rusqlite::Error::SqliteFailure(e, _), .. }
            if matches!(e.code, DatabaseCorrupt | NotADatabase))
    }
}

/// Beside [`FILE`]: a history SQLite found damaged, set aside (the newest one only).
pub const SET_ASIDE: &str = "runs.db.corrupt";

/// The inode of the file at `path`, if any.
fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

impl History {
    /// The history of the workspace at `root` (created if need be). A database SQLite finds
    /// damaged — on opening, or when the pending records are folded in — is set aside as
    /// [`SET_ASIDE`] and a new one started: the history is a convenience, and a damaged one
    /// kept would fail every fold, so each run would read the growing pending file again
    /// (up to [`MAX_PENDING_BYTES`]) for nothing, and `prova runs` would never list again.
    pub fn open(root: &Path) -> Result<Self, HistoryError> {
        let dir = root.join(".prova");
        std::fs::create_dir_all(&dir)
            .map_err(|source| HistoryError::Io { path: dir.clone(), source })?;
        let path = dir.join(FILE);
        let (mut history, ino) = match Self::connect(&path) {
            Err(e) if e.is_corrupt() => {
                set_aside(&path, inode(&path), &e);
                Self::connect(&path)?
            }
            other => other?,
        };
        let mut folded = history.fold_pending();
        if let Err(e) = &folded
            && e.is_corrupt()
        {
            drop(history);
            set_aside(&path, ino, e);
            history = Self::connect(&path)?.0;
            folded = history.fold_pending();
        }
        if let Err(e) = folded {
            tracing::debug!(error = %e, "run history: pending records left for the next open");
        }
        Ok(history)
    }

    /// A connection to the database at `path`, its settings and schema in place, and the
    /// inode it opened.
    fn connect(path: &Path) -> Result<(Self, Option<u64>), HistoryError> {
        let path = path.to_path_buf();
        let sql = |what| {
            let path = path.clone();
            move |source| HistoryError::Sql { path, what, source }
        };
        let conn = Connection::open(&path).map_err(sql("open"))?;
        conn.busy_timeout(BUSY_WAIT).map_err(sql("busy_timeout"))?;
        // WAL with `synchronous = NORMAL`: a run's record costs no fsync (a rollback journal
        // cost four on every run, a no-op's largest wait); a power loss may drop the newest
        // records, never corrupt the file. The history is a convenience, not the cache.
        conn.pragma_update_and_check(None, "journal_mode", "wal", |row| row.get::<_, String>(0))
            .map_err(sql("journal_mode"))?;
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
            .map_err(sql("pragma"))?;
        // Each `prova` is the file's last connection: closing would checkpoint (two fsyncs)
        // and delete the WAL every run. `record` restarts the WAL once it passes
        // [`WAL_KEEP_BYTES`] instead.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(sql("no checkpoint on close"))?;
        conn.execute_batch(SCHEMA).map_err(sql("schema"))?;
        let ino = inode(&path);
        Ok((Self { conn, path, keep_tasks: KEEP_TASKS }, ino))
    }

    /// Only reads: `None` when nothing was ever recorded here.
    pub fn open_existing(root: &Path) -> Result<Option<Self>, HistoryError> {
        let dir = root.join(".prova");
        if !dir.join(FILE).is_file() && !dir.join(PENDING).is_file() {
            return Ok(None);
        }
        Self::open(root).map(Some)
    }

    fn sql(&self, what: &'static str) -> impl FnOnce(rusqlite::Error) -> HistoryError + '_ {
        move |source| HistoryError::Sql { path: self.path.clone(), what, source }
    }

    /// Records a run, then prunes to the newest [`KEEP`].
    pub fn record(&mut self, run: &Recorded<'_>) -> Result<(), HistoryError> {
        self.insert(&[Row::of(run)])
    }

    /// Inserts `rows` in one transaction (a run already there, by id, is left alone: a fold
    /// cut short after its commit reads its records again), prunes to the newest [`KEEP`],
    /// and cuts a WAL past [`WAL_KEEP_BYTES`].
    fn insert(&mut self, rows: &[Row]) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let sql = |what: &'static str| {
            let path = path.clone();
            move |source| HistoryError::Sql { path, what, source }
        };
        let tx = self.conn.transaction().map_err(sql("begin"))?;
        let mut newest = None;
        for r in rows {
            let inserted = tx
                .execute(
                    "INSERT OR IGNORE INTO runs (id, started_ms, ended_ms, command, ok, \
                     interrupted, tasks, hits, failed, summary, keys) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    params![
                        r.id,
                        r.started_ms,
                        r.ended_ms,
                        r.command.get(),
                        r.ok,
                        r.interrupted,
                        r.tasks,
                        r.hits,
                        r.failed,
                        Stored::of(r.summary.get()),
                        r.keys.get(),
                    ],
                )
                .map_err(sql("insert run"))?;
            if inserted == 0 {
                continue;
            }
            let seq = tx.last_insert_rowid();
            newest = Some(seq);
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO run_tasks (run_seq, task, status, cache, verdicts, attempts, \
                     wall_ms, cpu_ms, max_rss_kb, key, start_us, dur_us, lane) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                )
                .map_err(sql("prepare task"))?;
            for t in &r.task_rows {
                stmt.execute(params![
                    seq,
                    t.task,
                    t.status,
                    t.cache,
                    t.verdicts,
                    t.attempts,
                    t.wall_ms,
                    t.cpu_ms,
                    t.max_rss_kb,
                    t.key,
                    t.start_us,
                    t.dur_us,
                    t.lane,
                ])
                .map_err(sql("insert task"))?;
            }
        }
        // `seq` is AUTOINCREMENT (never reused; a rolled-back insert leaves no gap): the
        // newest KEEP are those above `seq - KEEP`. A range of the rowid tree, so a run reads
        // only what it deletes — `NOT IN (… LIMIT KEEP)` read every kept run's pages (their
        // summaries and keys) on every run, the most of a warm no-op's history cost.
        if let Some(seq) = newest {
            tx.execute("DELETE FROM runs WHERE seq <= ?1", params![seq - KEEP])
                .map_err(sql("prune"))?;
            // Then the oldest of those whose tasks pass [`KEEP_TASKS`] counted from the
            // newest (the newest run stays whatever its size). Only a fold inserts, so this
            // scan of the kept runs' rows is paid once a fold, not once a run.
            tx.execute(
                "DELETE FROM runs WHERE seq <= (SELECT seq FROM (SELECT seq, \
                 sum(tasks) OVER (ORDER BY seq DESC) AS total FROM runs) \
                 WHERE total > ?1 AND seq < ?2 ORDER BY seq DESC LIMIT 1)",
                params![self.keep_tasks, seq],
            )
            .map_err(sql("prune by tasks"))?;
        }
        tx.commit().map_err(sql("commit"))?;
        self.cut_wal_past(WAL_KEEP_BYTES);
        Ok(())
    }

    /// Folds the records runs appended to [`PENDING`] into the database, and empties the
    /// file. Holds the file's lock throughout, so a run appending meanwhile waits and its
    /// record is not lost; records that do not parse (a run killed mid-write) are skipped.
    /// A fold that cannot write leaves the file for the next.
    fn fold_pending(&mut self) -> Result<(), HistoryError> {
        let path = self.path.with_file_name(PENDING);
        let io = |source| HistoryError::Io { path: path.clone(), source };
        let mut file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        file.lock().map_err(io)?;
        // Bytes, split at newlines: a record cut short may end inside a character, and only
        // that line is then not UTF-8.
        let mut bytes = Vec::new();
        (&mut file).take(MAX_PENDING_BYTES).read_to_end(&mut bytes).map_err(io)?;
        let rows: Vec<Row> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| match serde_json::from_slice::<Row>(l) {
                Ok(r) if r.v == ROW_VERSION => Some(r),
                Ok(r) => {
                    tracing::debug!(
                        version = r.v,
                        "run history: a record of another version skipped"
                    );
                    None
                }
                Err(e) => {
                    tracing::debug!(error = %e, "run history: a pending record skipped");
                    None
                }
            })
            .collect();
        if !rows.is_empty() {
            self.insert(&rows)?;
        }
        file.set_len(0).map_err(io)?;
        Ok(())
    }

    /// Checkpoints and truncates the WAL when it is longer than `bytes`. A reader at this
    /// moment (`prova runs`) leaves it for the next run: no waiting, and the run is recorded
    /// all the same (the checkpoint is housekeeping).
    fn cut_wal_past(&self, bytes: u64) {
        let wal = self.path.with_file_name(format!("{FILE}-wal"));
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > bytes) {
            let checkpoint = self.conn.busy_timeout(Duration::ZERO).and_then(|()| {
                self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            });
            if let Err(e) = checkpoint {
                tracing::debug!(error = %e, "run history: WAL not checkpointed");
            }
            // The record that follows a cut at the open waits for a lock as any other does.
            if let Err(e) = self.conn.busy_timeout(BUSY_WAIT) {
                tracing::debug!(error = %e, "run history: busy timeout not restored");
            }
        }
    }

    /// The newest `limit` runs, newest first.
    pub fn list(&self, limit: usize) -> Result<Vec<Run>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, started_ms, ended_ms, command, summary, keys FROM runs \
                 ORDER BY seq DESC LIMIT ?1",
            )
            .map_err(self.sql("list"))?;
        let rows = stmt
            .query_map(params![limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, rusqlite::types::Value>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })
            .map_err(self.sql("list"))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, started, ended, command, summary, keys) = row.map_err(self.sql("list"))?;
            let decode =
                |source| HistoryError::Decode { path: self.path.clone(), run: id.clone(), source };
            let summary = unpack(summary).map_err(|why| HistoryError::Unpack {
                path: self.path.clone(),
                run: id.clone(),
                why,
            })?;
            out.push(Run {
                started_at: from_ms(started),
                ended_at: from_ms(ended),
                command: serde_json::from_str(&command).map_err(decode)?,
                summary: serde_json::from_slice(&summary).map_err(decode)?,
                keys: serde_json::from_str(&keys).unwrap_or(Value::Null),
                id,
            });
        }
        Ok(out)
    }

    /// How many runs are kept.
    pub fn count(&self) -> Result<i64, HistoryError> {
        self.conn
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .optional()
            .map(|n| n.unwrap_or(0))
            .map_err(self.sql("count"))
    }
}

/// A summary as the database stores it: its JSON text, or past [`COMPRESS_FROM`] bytes that
/// text zstd-compressed (a BLOB; SQLite keeps each value's own type, so one column holds
/// both, and the histories of earlier versions read as they are).
enum Stored<'a> {
    Json(&'a str),
    Zstd(Vec<u8>),
}

impl<'a> Stored<'a> {
    fn of(json: &'a str) -> Self {
        if json.len() < COMPRESS_FROM {
            return Stored::Json(json);
        }
        match zstd::bulk::compress(json.as_bytes(), SUMMARY_LEVEL) {
            Ok(packed) => Stored::Zstd(packed),
            Err(e) => {
                tracing::debug!(error = %e, "run history: a summary stored uncompressed");
                Stored::Json(json)
            }
        }
    }
}

impl rusqlite::ToSql for Stored<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Stored::Json(text) => ValueRef::Text(text.as_bytes()),
            Stored::Zstd(packed) => ValueRef::Blob(packed),
        }))
    }
}

/// A stored summary's JSON: the text as it is, a BLOB unpacked (at most
/// [`MAX_SUMMARY_BYTES`]).
fn unpack(stored: rusqlite::types::Value) -> Result<Vec<u8>, String> {
    use rusqlite::types::Value as V;
    match stored {
        V::Text(text) => Ok(text.into_bytes()),
        V::Blob(packed) => {
            let mut json = Vec::new();
            zstd::stream::read::Decoder::new(packed.as_slice())
                .and_then(|d| d.take(MAX_SUMMARY_BYTES + 1).read_to_end(&mut json))
                .map_err(|e| e.to_string())?;
            if json.len() as u64 > MAX_SUMMARY_BYTES {
                return Err(format!("it is longer than {MAX_SUMMARY_BYTES} bytes"));
            }
            Ok(json)
        }
        other => Err(format!("a {:?} where a summary belongs", other.data_type())),
    }
}

/// Appends `run`'s record to the workspace's [`PENDING`] file: one line, under the file's
/// lock, no database opened. A run's own record was most of the history's cost on a warm
/// no-op: opening `runs.db` reads its schema and rebuilds the WAL's index from every frame
/// the last runs left, then the insert, the prune and the commit. The records are folded
/// into the database when the history is next opened (`prova runs`, `prova last`), or by
/// the run whose append takes the file past [`FOLD_BYTES`].
pub fn append(root: &Path, run: &Recorded<'_>) -> Result<(), HistoryError> {
    use std::io::Write as _;
    let dir = root.join(".prova");
    std::fs::create_dir_all(&dir)
        .map_err(|source| HistoryError::Io { path: dir.clone(), source })?;
    let path = dir.join(PENDING);
    let io = |source| HistoryError::Io { path: path.clone(), source };
    let mut line =
        serde_json::to_string(&Row::of(run)).map_err(|e| io(std::io::Error::other(e)))?;
    line.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io)?;
    file.lock().map_err(io)?;
    let before = file.metadata().map_err(io)?.len();
    if before > MAX_PENDING_BYTES {
        return Err(io(std::io::Error::other(
            "the pending records are past their bound: `prova runs` folds them",
        )));
    }
    // A record cut short (a run killed mid-write) ends without a newline: this one starts
    // on a line of its own, not glued to it.
    let mut last = [0u8; 1];
    if before > 0 && file.read_at(&mut last, before - 1).map_err(io)? == 1 && last[0] != b'\n' {
        line.insert(0, '\n');
    }
    file.write_all(line.as_bytes()).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    drop(file);
    if len > FOLD_BYTES {
        // Recorded already: a fold that fails now is left to the next open.
        if let Err(e) = History::open(root) {
            tracing::debug!(error = %e, "run history: pending records left for the next open");
        }
    }
    Ok(())
}

/// Folds the pending records into the database on a thread of its own when the file is past
/// [`FOLD_BEHIND_BYTES`]; `None` when it is not (or the thread could not start). The fold
/// holds the file's lock as any fold does: a run's [`append`] meanwhile waits for it, and a
/// fold cut short (the process gone mid-way) is one SQLite rolls back or the next fold
/// finishes (a run already in the database is not recorded twice).
pub fn fold_behind(root: &Path) -> Option<std::thread::JoinHandle<()>> {
    let pending = root.join(".prova").join(PENDING);
    if std::fs::symlink_metadata(&pending).map_or(true, |m| m.len() <= FOLD_BEHIND_BYTES) {
        return None;
    }
    let root = root.to_path_buf();
    std::thread::Builder::new()
        .name("prova-history".to_owned())
        .spawn(move || {
            if let Err(e) = History::open(&root) {
                tracing::debug!(error = %e, "run history: pending records left for the next open");
            }
        })
        .ok()
}

/// One run as the database stores it (and as [`PENDING`] keeps it until then).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Row {
    /// [`ROW_VERSION`]: a record of another shape (another prova's) is skipped.
    v: u32,
    id: String,
    started_ms: i64,
    ended_ms: i64,
    /// The command line, as JSON (kept as is in the line: not escaped into a string).
    command: Box<serde_json::value::RawValue>,
    ok: bool,
    interrupted: bool,
    tasks: i64,
    hits: i64,
    failed: i64,
    /// The summary, as JSON.
    summary: Box<serde_json::value::RawValue>,
    /// The key pass's counters, as JSON.
    keys: Box<serde_json::value::RawValue>,
    task_rows: Vec<TaskRow>,
}

/// One task of a [`Row`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct TaskRow {
    task: String,
    status: String,
    cache: String,
    verdicts: String,
    attempts: u32,
    wall_ms: i64,
    cpu_ms: i64,
    max_rss_kb: i64,
    key: Option<String>,
    start_us: Option<i64>,
    dur_us: Option<i64>,
    lane: Option<i64>,
}

impl Row {
    fn of(run: &Recorded<'_>) -> Self {
        let c = Counts::of(run.summary);
        // Each task's span by its id: a search per task was quadratic (a million
        // comparisons for a 1,000-task run).
        let spans: std::collections::HashMap<&prova_protocol::TaskId, _> =
            run.timeline.spans.iter().map(|s| (&s.task, s)).collect();
        let task_rows = run
            .summary
            .tasks
            .iter()
            .map(|t| {
                let span = spans.get(&t.task);
                let cache = match &t.cache {
                    CacheStatus::Hit { layer, .. } => format!("hit:{layer}"),
                    CacheStatus::Saved => "saved".to_owned(),
                    CacheStatus::NotSaved { .. } => "not_saved".to_owned(),
                    CacheStatus::Uncached => "uncached".to_owned(),
                };
                let verdicts: Vec<&str> = t.verdicts.iter().map(|v| v.name()).collect();
                let status = serde_json::to_value(t.status).unwrap_or(Value::Null);
                TaskRow {
                    task: t.task.as_str().to_owned(),
                    status: status.as_str().unwrap_or("?").to_owned(),
                    cache,
                    verdicts: verdicts.join(","),
                    attempts: t.attempts,
                    wall_ms: t.stats.wall_ms as i64,
                    cpu_ms: (t.stats.cpu_user_ms + t.stats.cpu_sys_ms) as i64,
                    max_rss_kb: t.stats.max_rss_kb as i64,
                    key: t.key.map(|k| k.to_hex()),
                    start_us: span.map(|s| s.start_us as i64),
                    dur_us: span.map(|s| s.dur_us as i64),
                    lane: span.map(|s| s.lane as i64),
                }
            })
            .collect();
        Self {
            v: ROW_VERSION,
            id: run.meta.run_id.clone(),
            started_ms: ms(run.timeline.started_at),
            ended_ms: ms(run.ended_at),
            command: raw(run.command),
            ok: run.summary.ok,
            interrupted: run.summary.interrupted,
            tasks: run.summary.tasks.len() as i64,
            hits: c.hits as i64,
            failed: c.failed as i64,
            summary: raw(run.summary),
            keys: raw(run.keys),
            task_rows,
        }
    }
}

/// `v` as JSON, kept raw (`null` if it cannot be written).
fn raw<T: serde::Serialize + ?Sized>(v: &T) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(v).unwrap_or_default()
}

/// The workspace root found from `start`.
fn root_of(start: &Path) -> anyhow::Result<PathBuf> {
    Ok(prova_coordinator::config::discover::find_root(start)?.dir)
}

/// `prova runs`.
pub fn runs(start: &Path, args: RunsArgs) -> anyhow::Result<Code> {
    let root = root_of(start)?;
    let runs = match History::open_existing(&root)? {
        Some(h) => h.list(args.limit)?,
        None => Vec::new(),
    };
    let mut out = String::new();
    if args.json {
        for r in &runs {
            let c = Counts::of(&r.summary);
            let line = serde_json::json!({
                "run_id": r.id,
                "started_at": json::timestamp(r.started_at),
                "ended_at": json::timestamp(r.ended_at),
                "wall_ms": r.summary.wall_ms,
                "ok": r.summary.ok,
                "interrupted": r.summary.interrupted,
                "tasks": r.summary.tasks.len(),
                "hits": c.hits,
                "failed": c.failed,
                "command": r.command,
            });
            out.push_str(&format!("{line}\n"));
        }
        crate::commands::common::print(&out)?;
        return Ok(Code::Ok);
    }
    if runs.is_empty() {
        crate::commands::common::print("no runs recorded in this workspace yet\n")?;
        return Ok(Code::Ok);
    }
    out.push_str(&format!(
        "{:<24} {:<24} {:>8} {:<11} {:>5} {:>5}  COMMAND\n",
        "RUN", "STARTED", "TIME", "RESULT", "TASKS", "HITS"
    ));
    for r in &runs {
        let c = Counts::of(&r.summary);
        let result = match (r.summary.ok, r.summary.interrupted) {
            (_, true) => "interrupted".to_owned(),
            (true, false) => "ok".to_owned(),
            (false, false) => format!("{} failed", c.failed),
        };
        out.push_str(&format!(
            "{:<24} {:<24} {:>8} {:<11} {:>5} {:>5}  {}\n",
            r.id,
            humantime::format_rfc3339_seconds(r.started_at).to_string(),
            summary::fmt_ms(r.summary.wall_ms),
            result,
            r.summary.tasks.len(),
            c.hits,
            shown_command(&r.command),
        ));
    }
    crate::commands::common::print(&out)?;
    Ok(Code::Ok)
}

/// `prova last`.
pub fn last(start: &Path, args: LastArgs) -> anyhow::Result<Code> {
    let root = root_of(start)?;
    let newest = match History::open_existing(&root)? {
        Some(h) => h.list(1)?.pop(),
        None => None,
    };
    let Some(run) = newest else {
        anyhow::bail!("no run recorded in this workspace yet (every `prova run` is)");
    };
    let meta = RunMeta { run_id: run.id.clone() };
    if args.json {
        let line = json::summary_value(&meta, run.ended_at, &run.command, &run.summary, &run.keys);
        crate::commands::common::print(&format!("{line}\n"))?;
    } else {
        let head = format!(
            "run {} at {}: {}\n",
            run.id,
            humantime::format_rfc3339_seconds(run.started_at),
            shown_command(&run.command)
        );
        crate::commands::common::print(&format!("{head}{}", summary::text(&run.summary)))?;
    }
    Ok(if run.summary.ok { Code::Ok } else { Code::Failed })
}

/// `prova run build --all`: the program as `prova`, whatever path started it.
fn shown_command(command: &[String]) -> String {
    let mut parts: Vec<&str> = command.iter().map(String::as_str).collect();
    if let Some(first) = parts.first_mut() {
        *first = "prova";
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use prova_protocol::TaskId;
    use prova_protocol::events::{TaskReport, TaskStatus};
    use prova_protocol::spec::ExecStats;

    fn summary(n: usize) -> RunSummary {
        RunSummary {
            ok: true,
            interrupted: false,
            wall_ms: n as u64,
            tasks: vec![TaskReport {
                task: TaskId::new("a", "build"),
                status: TaskStatus::Succeeded,
                cache: CacheStatus::Saved,
                exit: None,
                attempts: 1,
                stats: ExecStats::default(),
                key: None,
                worker: None,
                note: None,
                verdicts: vec![],
            }],
        }
    }

    /// A summary of `n` tasks, `p0#build` … .
    fn summary_of_tasks(n: usize) -> RunSummary {
        let mut s = summary(0);
        s.tasks = (0..n)
            .map(|i| TaskReport {
                task: TaskId::new(&format!("p{i}"), "build"),
                ..s.tasks[0].clone()
            })
            .collect();
        s
    }

    /// Records run `r{i}` (one task, `wall_ms` = `i`).
    fn record_run(h: &mut History, i: usize) {
        let meta = RunMeta { run_id: format!("r{i}") };
        let s = summary(i);
        let rec = Recorded {
            meta: &meta,
            command: &["prova".to_owned(), "run".to_owned()],
            summary: &s,
            keys: &serde_json::json!({}),
            timeline: &Timeline::new(),
            ended_at: SystemTime::now(),
        };
        h.record(&rec).expect("recorded");
    }

    /// `run{i}`'s record, as a run appends it.
    fn append_run(root: &Path, i: usize) {
        let meta = RunMeta { run_id: format!("r{i}") };
        let s = summary(i);
        let rec = Recorded {
            meta: &meta,
            command: &["prova".to_owned(), "run".to_owned()],
            summary: &s,
            keys: &serde_json::json!({"files": i}),
            timeline: &Timeline::new(),
            ended_at: SystemTime::now(),
        };
        append(root, &rec).expect("appended");
    }

    /// Run `r{i}`'s record with summary `s`, as a run appends it.
    fn append_summary(root: &Path, i: usize, s: &RunSummary) {
        let meta = RunMeta { run_id: format!("r{i}") };
        let rec = Recorded {
            meta: &meta,
            command: &["prova".to_owned()],
            summary: s,
            keys: &serde_json::json!({}),
            timeline: &Timeline::new(),
            ended_at: SystemTime::now(),
        };
        append(root, &rec).expect("appended");
    }

    /// Records run `id` with summary `s`, as a fold does.
    fn record_summary(h: &mut History, id: &str, s: &RunSummary) {
        let meta = RunMeta { run_id: id.to_owned() };
        let rec = Recorded {
            meta: &meta,
            command: &["prova".to_owned()],
            summary: s,
            keys: &serde_json::json!({}),
            timeline: &Timeline::new(),
            ended_at: SystemTime::now(),
        };
        h.record(&rec).expect("recorded");
    }

    fn pending_len(root: &Path) -> u64 {
        std::fs::metadata(root.join(".prova").join(PENDING)).map_or(0, |m| m.len())
    }

    fn ids(root: &Path) -> Vec<String> {
        let h = History::open(root).expect("opened");
        h.list(1000).expect("listed").into_iter().map(|r| r.id).collect()
    }

    /// A run appends its record without opening the database; the next open folds the
    /// records in, in order, after those already there, and empties the file.
    #[test]
    fn appended_runs_are_folded_in_order_when_the_history_opens() {
        let dir = tempfile::tempdir().expect("a temp dir");
        record_run(&mut History::open(dir.path()).expect("opened"), 0);
        append_run(dir.path(), 1);
        append_run(dir.path(), 2);
        assert!(pending_len(dir.path()) > 0);
        assert!(History::open_existing(dir.path()).expect("opened").is_some());
        assert_eq!(ids(dir.path()), ["r2", "r1", "r0"]);
        assert_eq!(pending_len(dir.path()), 0, "folded");
        let h = History::open(dir.path()).expect("opened");
        let r1 = h.list(3).expect("listed").pop().map(|r| r.id);
        assert_eq!(r1.as_deref(), Some("r0"));
        let keys = &h.list(2).expect("listed")[1].keys;
        assert_eq!(keys["files"], 1, "what the run recorded, read back");
        // Only appended runs, no database yet: found all the same.
        let fresh = tempfile::tempdir().expect("a temp dir");
        append_run(fresh.path(), 7);
        assert!(History::open_existing(fresh.path()).expect("opened").is_some());
        assert_eq!(ids(fresh.path()), ["r7"]);
    }

    /// A record cut short (a run killed mid-write) is skipped, the others kept; a fold cut
    /// short after its commit (the file not emptied) reads its records again, and a run
    /// already there is not recorded twice.
    #[test]
    fn a_torn_record_is_skipped_and_a_run_is_never_recorded_twice() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().expect("a temp dir");
        append_run(dir.path(), 1);
        let pending = dir.path().join(".prova").join(PENDING);
        let copy = std::fs::read(&pending).expect("the pending file");
        let mut f = std::fs::OpenOptions::new().append(true).open(&pending).expect("opened");
        // Cut inside a character: "—" is three bytes.
        f.write_all(b"{\"id\":\"torn\",\"command\":\"\xe2\x80").expect("written");
        drop(f);
        append_run(dir.path(), 2);
        assert_eq!(ids(dir.path()), ["r2", "r1"]);
        std::fs::write(&pending, &copy).expect("the same record again");
        assert_eq!(ids(dir.path()), ["r2", "r1"], "r1 once");
        // A record of another shape (another prova's): skipped, not read wrongly.
        let other =
            String::from_utf8(copy.clone()).expect("utf-8").replace("\"v\":1,", "\"v\":99,");
        let other = other.replace("\"r1\"", "\"r9\"");
        assert!(other.contains("\"v\":99"), "{other}");
        std::fs::write(&pending, other).expect("written");
        assert_eq!(ids(dir.path()), ["r2", "r1"], "the other version's record skipped");
        let h = History::open(dir.path()).expect("opened");
        let tasks: i64 =
            h.conn.query_row("SELECT count(*) FROM run_tasks", [], |r| r.get(0)).expect("rows");
        assert_eq!(tasks, 2, "and its tasks once");
    }

    /// A database SQLite finds damaged — its pages, or the whole file not a database — is
    /// set aside and a new one started, the pending records folded into it; kept, every
    /// fold failed and the pending file grew run after run.
    #[test]
    fn a_damaged_history_is_set_aside_and_a_new_one_folds_the_pending_runs() {
        let db = |root: &Path| root.join(".prova").join(FILE);
        let aside = |root: &Path| root.join(".prova").join(SET_ASIDE);
        // Its pages past the first overwritten (the schema page intact: the damage is met
        // only when a fold writes into the runs' tables).
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut h = History::open(dir.path()).expect("opened");
        for i in 0..40 {
            record_run(&mut h, i);
        }
        h.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).expect("checkpointed");
        drop(h);
        let mut bytes = std::fs::read(db(dir.path())).expect("the database");
        assert!(bytes.len() > 8192, "several pages");
        for b in &mut bytes[4096..] {
            *b = 0xA5;
        }
        std::fs::write(db(dir.path()), &bytes).expect("damaged");
        append_run(dir.path(), 100);
        append_run(dir.path(), 101);
        assert_eq!(ids(dir.path()), ["r101", "r100"], "a new history, the pending runs in it");
        assert_eq!(pending_len(dir.path()), 0, "folded");
        assert_eq!(std::fs::read(aside(dir.path())).expect("set aside"), bytes);
        // Not a database at all.
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(dir.path().join(".prova")).expect("dir");
        std::fs::write(db(dir.path()), vec![b'x'; 10_000]).expect("garbage");
        append_run(dir.path(), 7);
        assert_eq!(ids(dir.path()), ["r7"]);
        assert!(aside(dir.path()).is_file());
        // A healthy history is never set aside.
        let dir = tempfile::tempdir().expect("a temp dir");
        record_run(&mut History::open(dir.path()).expect("opened"), 1);
        append_run(dir.path(), 2);
        assert_eq!(ids(dir.path()), ["r2", "r1"]);
        assert!(!aside(dir.path()).exists());
    }

    /// The run whose append takes the file past its bound folds the records itself, so the
    /// file stays bounded between `prova runs`.
    #[test]
    fn the_append_past_the_bound_folds() {
        let dir = tempfile::tempdir().expect("a temp dir");
        // Records of a hundred tasks: the bound is reached in a few hundred runs.
        let s = summary_of_tasks(100);
        let mut i = 0;
        let mut largest = 0;
        while i < 5_000 {
            append_summary(dir.path(), i, &s);
            i += 1;
            let len = pending_len(dir.path());
            if len == 0 {
                break;
            }
            largest = largest.max(len);
        }
        assert_eq!(pending_len(dir.path()), 0, "never folded after {i} runs");
        assert!(largest <= FOLD_BYTES, "the file reached {largest} bytes");
        let h = History::open_existing(dir.path()).expect("opened").expect("there");
        assert_eq!(h.count().expect("counted"), (i as i64).min(KEEP));
    }

    /// A run that starts with the pending file past half the bound folds it on a thread
    /// beside its work: every record lands in the database in order, one appended while the
    /// fold holds the file is kept (folded or still pending), and a file under the bound,
    /// or none, starts no fold.
    #[test]
    fn a_run_folds_behind_past_half_the_bound_and_loses_no_record() {
        let dir = tempfile::tempdir().expect("a temp dir");
        assert!(fold_behind(dir.path()).is_none(), "no file, no fold");
        let s = summary_of_tasks(100);
        let append_of = |i: usize| append_summary(dir.path(), i, &s);
        let mut n = 0;
        while pending_len(dir.path()) <= FOLD_BEHIND_BYTES {
            assert!(fold_behind(dir.path()).is_none(), "under the bound: {n} records");
            append_of(n);
            n += 1;
            assert!(n < 1000, "the file never passed half the bound");
        }
        assert!(pending_len(dir.path()) <= FOLD_BYTES, "the appends did not fold themselves");
        let fold = fold_behind(dir.path()).expect("a fold behind");
        // Appended while the fold runs: it waits for the file's lock, or lands first.
        append_of(n);
        fold.join().expect("the fold's thread");
        // Read without opening the history (an open would fold what is left itself).
        let db = Connection::open(dir.path().join(".prova").join(FILE)).expect("the database");
        let folded: i64 = db.query_row("SELECT count(*) FROM runs", [], |r| r.get(0)).expect("n");
        assert!(folded >= n as i64, "{folded} of the {n} records before the fold were folded");
        drop(db);
        let want: Vec<String> = (0..=n).rev().map(|i| format!("r{i}")).collect();
        assert_eq!(ids(dir.path()), want, "every record, in order");
        assert_eq!(pending_len(dir.path()), 0);
    }

    /// A summary of `n` tasks as a real run has them: each with its own key.
    fn keyed_summary(n: usize) -> RunSummary {
        let mut s = summary_of_tasks(n);
        for (i, t) in s.tasks.iter_mut().enumerate() {
            t.key = Some(prova_protocol::Digest::of(format!("key {i}").as_bytes()));
        }
        s
    }

    /// The type and length SQLite holds for run `id`'s summary.
    fn stored_summary(root: &Path, id: &str) -> (String, i64) {
        let db = Connection::open(root.join(".prova").join(FILE)).expect("the database");
        db.query_row(
            "SELECT typeof(summary), length(summary) FROM runs WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the run is there")
    }

    /// A large run's summary is stored compressed, whether recorded or folded from the
    /// pending file, and reads back whole; a small one stays JSON text.
    #[test]
    fn a_large_summary_is_stored_compressed_and_read_back_whole() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let big = keyed_summary(1000);
        let json_len = serde_json::to_string(&big).expect("json").len() as i64;
        append_summary(dir.path(), 1, &big);
        let mut h = History::open(dir.path()).expect("opened (and folded)");
        record_run(&mut h, 2);
        record_summary(&mut h, "r3", &big);
        for id in ["r1", "r3"] {
            let (kind, len) = stored_summary(dir.path(), id);
            assert_eq!(kind, "blob", "{id}");
            assert!(len * 3 < json_len, "{id}: {len} bytes stored of {json_len}");
        }
        assert_eq!(stored_summary(dir.path(), "r2").0, "text", "a one-task summary");
        let want = serde_json::to_value(&big).expect("json");
        let runs = h.list(3).expect("listed");
        assert_eq!(runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["r3", "r2", "r1"]);
        for r in [&runs[0], &runs[2]] {
            assert_eq!(serde_json::to_value(&r.summary).expect("json"), want, "{}", r.id);
        }
        assert_eq!(runs[1].summary.wall_ms, 2);
    }

    /// A history an earlier prova wrote (every summary JSON text, however large) reads as
    /// it is, beside the compressed ones this one adds.
    #[test]
    fn a_summary_stored_as_text_by_an_earlier_version_still_reads() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut h = History::open(dir.path()).expect("opened");
        let big = keyed_summary(500);
        let text = serde_json::to_string(&big).expect("json");
        h.conn
            .execute(
                "INSERT INTO runs (id, started_ms, ended_ms, command, ok, interrupted, tasks, \
                 hits, failed, summary, keys) VALUES ('old', 1, 2, '[\"prova\"]', 1, 0, 500, \
                 0, 0, ?1, '{}')",
                params![text],
            )
            .expect("an earlier version's row");
        record_run(&mut h, 1);
        let runs = h.list(2).expect("listed");
        assert_eq!(runs[1].id, "old");
        assert_eq!(
            serde_json::to_value(&runs[1].summary).expect("json"),
            serde_json::to_value(&big).expect("json")
        );
    }

    /// A summary BLOB that is damaged, or that unpacks past its bound, fails the listing
    /// with an error naming the run; nothing panics and the bound is not overrun.
    #[test]
    fn a_damaged_or_oversized_summary_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut h = History::open(dir.path()).expect("opened");
        record_run(&mut h, 1);
        let set = |h: &History, blob: Vec<u8>| {
            h.conn
                .execute("UPDATE runs SET summary = ?1 WHERE id = 'r1'", params![blob])
                .expect("updated");
        };
        let refused = |h: &History| match h.list(1) {
            Err(e @ HistoryError::Unpack { .. }) => e.to_string(),
            other => panic!("not refused: {other:?}"),
        };
        set(&h, b"not zstd at all".to_vec());
        assert!(refused(&h).contains("run r1"), "{}", refused(&h));
        let mut cut = zstd::bulk::compress(&[b' '; 10_000], 3).expect("packed");
        cut.truncate(cut.len() / 2);
        set(&h, cut);
        refused(&h);
        // Small stored, past the bound unpacked.
        let bomb = vec![b' '; MAX_SUMMARY_BYTES as usize + 1];
        set(&h, zstd::bulk::compress(&bomb, 3).expect("packed"));
        assert!(refused(&h).contains("longer than"), "{}", refused(&h));
    }

    /// A cut does not leave the connection failing at once on a lock: the record after it
    /// waits as long as any other statement.
    #[test]
    fn after_a_cut_the_record_still_waits_for_a_lock() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let busy_ms = |h: &History| -> i64 {
            h.conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0)).expect("read")
        };
        let mut h = History::open(dir.path()).expect("opened");
        let mut i = 0;
        let mut cut = false;
        while !cut {
            let before = wal_len(dir.path());
            record_run(&mut h, i);
            cut = wal_len(dir.path()) < before;
            i += 1;
            assert!(i < 1000, "the WAL was never cut");
        }
        assert_eq!(busy_ms(&h), BUSY_WAIT.as_millis() as i64);
    }

    #[test]
    fn runs_are_kept_newest_first_and_pruned_to_the_bound() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut h = History::open(dir.path()).expect("opened");
        for i in 0..(KEEP as usize + 5) {
            record_run(&mut h, i);
        }
        assert_eq!(h.count().expect("counted"), KEEP);
        let tasks: i64 =
            h.conn.query_row("SELECT count(*) FROM run_tasks", [], |r| r.get(0)).expect("rows");
        assert_eq!(tasks, KEEP, "a pruned run's tasks go with it");
        let newest = h.list(2).expect("listed");
        let ids: Vec<&str> = newest.iter().map(|r| r.id.as_str()).collect();
        let last = KEEP as usize + 4;
        assert_eq!(ids, [format!("r{last}"), format!("r{}", last - 1)]);
        assert_eq!(newest[0].summary.wall_ms, last as u64);
    }

    /// Past [`KEEP_TASKS`] task records the oldest runs go, however few runs are kept, with
    /// their tasks; the newest run stays even when it alone is past the bound.
    #[test]
    fn a_large_workspace_keeps_fewer_runs_not_more_task_records() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut h = History::open(dir.path()).expect("opened");
        h.keep_tasks = 250;
        let task_rows = |h: &History| -> i64 {
            h.conn.query_row("SELECT count(*) FROM run_tasks", [], |r| r.get(0)).expect("rows")
        };
        let hundred = summary_of_tasks(100);
        for i in 0..5 {
            record_summary(&mut h, &format!("r{i}"), &hundred);
        }
        let kept: Vec<String> = h.list(10).expect("listed").into_iter().map(|r| r.id).collect();
        assert_eq!(kept, ["r4", "r3"], "200 task records kept of 250 allowed");
        assert_eq!(task_rows(&h), 200);
        record_summary(&mut h, "r5", &summary_of_tasks(1000));
        let kept: Vec<String> = h.list(10).expect("listed").into_iter().map(|r| r.id).collect();
        assert_eq!(kept, ["r5"], "the newest run, alone past the bound");
        assert_eq!(task_rows(&h), 1000);
        // Small runs are still kept up to [`KEEP`], the task bound far off.
        h.keep_tasks = KEEP_TASKS;
        for i in 6..(KEEP as usize + 10) {
            record_run(&mut h, i);
        }
        assert_eq!(h.count().expect("counted"), KEEP);
    }

    /// Each `prova run` opens the history, records one run and exits without a checkpoint;
    /// the next one re-reads (and checksums) every frame of the WAL before its first query.
    /// The WAL must stay a few runs long, not grow to SQLite's default 1,000 pages (4 MB).
    #[test]
    fn the_wal_each_run_reads_back_stays_a_few_runs_long() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let wal = dir.path().join(".prova").join(format!("{FILE}-wal"));
        let mut largest = 0;
        for i in 0..300 {
            // A process's connection: opened, one record, dropped (no checkpoint on close).
            let mut h = History::open(dir.path()).expect("opened");
            record_run(&mut h, i);
            drop(h);
            largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
        assert!(largest > 0, "the history is a WAL database");
        assert!(largest <= WAL_BOUND_BYTES, "the WAL reached {largest} bytes");
        let h = History::open(dir.path()).expect("opened");
        assert_eq!(h.count().expect("counted"), KEEP, "every checkpoint kept the runs");
    }

    fn wal_len(dir: &Path) -> u64 {
        let wal = dir.join(".prova").join(format!("{FILE}-wal"));
        std::fs::metadata(wal).map_or(0, |m| m.len())
    }

    /// A single run whose record alone passes the bound (a large workspace) leaves no long
    /// WAL behind it for the next run to read back.
    #[test]
    fn one_run_larger_than_the_bound_leaves_no_long_wal() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut h = History::open(dir.path()).expect("opened");
        record_summary(&mut h, "big", &summary_of_tasks(3000));
        assert!(wal_len(dir.path()) <= WAL_KEEP_BYTES, "{} bytes left", wal_len(dir.path()));
        assert_eq!(h.list(1).expect("listed")[0].summary.tasks.len(), 3000);
    }

    /// A reader holding the WAL (`prova runs` at that moment) neither fails the record nor
    /// delays it; the first run after the reader is gone cuts the WAL back.
    #[test]
    fn a_reader_holding_the_wal_leaves_the_cut_to_the_next_run() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut h = History::open(dir.path()).expect("opened");
        record_run(&mut h, 0);
        let reader = Connection::open(dir.path().join(".prova").join(FILE)).expect("a reader");
        reader.execute_batch("BEGIN; SELECT count(*) FROM runs;").expect("a read transaction");
        let mut i = 1;
        while wal_len(dir.path()) <= WAL_KEEP_BYTES {
            record_run(&mut h, i);
            i += 1;
            assert!(i < 1000, "the WAL never passed its bound");
        }
        record_run(&mut h, i);
        assert!(wal_len(dir.path()) > WAL_KEEP_BYTES, "cut although a reader held it");
        reader.execute_batch("COMMIT;").expect("the read ends");
        drop(reader);
        record_run(&mut h, i + 1);
        assert!(wal_len(dir.path()) <= WAL_KEEP_BYTES, "{} bytes left", wal_len(dir.path()));
        assert_eq!(h.count().expect("counted"), (i + 2).min(KEEP as usize) as i64);
    }
}
