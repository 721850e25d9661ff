//! The run history: every `prova run` (not `--dry-run`) is recorded in
//! `<workspace>/.prova/runs.db` (SQLite, its own file beside the cache, newest [`KEEP`] runs
//! kept, older ones pruned at each insert) with its command line, start and end, its summary,
//! and per task the status, cache outcome, verdicts, wall/CPU/RSS and its span on the
//! client's timeline. `prova runs` lists them; `prova last [--json]` prints the newest
//! summary again. A history that cannot be written (a read-only `.prova`) is a warning in the
//! log, never a failed run.

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

/// How long a statement waits for another connection's lock on the history.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// The file, under the workspace's `.prova/`.
pub const FILE: &str = "runs.db";

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

fn ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn from_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

impl History {
    /// The history of the workspace at `root` (created if need be).
    pub fn open(root: &Path) -> Result<Self, HistoryError> {
        let dir = root.join(".prova");
        std::fs::create_dir_all(&dir)
            .map_err(|source| HistoryError::Io { path: dir.clone(), source })?;
        let path = dir.join(FILE);
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
        Ok(Self { conn, path })
    }

    /// Only reads: `None` when nothing was ever recorded here.
    pub fn open_existing(root: &Path) -> Result<Option<Self>, HistoryError> {
        if !root.join(".prova").join(FILE).is_file() {
            return Ok(None);
        }
        Self::open(root).map(Some)
    }

    fn sql(&self, what: &'static str) -> impl FnOnce(rusqlite::Error) -> HistoryError + '_ {
        move |source| HistoryError::Sql { path: self.path.clone(), what, source }
    }

    /// Records a run, then prunes to the newest [`KEEP`].
    pub fn record(&mut self, run: &Recorded<'_>) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let sql = |what: &'static str| {
            let path = path.clone();
            move |source| HistoryError::Sql { path, what, source }
        };
        let c = Counts::of(run.summary);
        let summary = serde_json::to_string(run.summary).unwrap_or_default();
        let command = serde_json::to_string(run.command).unwrap_or_default();
        let tx = self.conn.transaction().map_err(sql("begin"))?;
        tx.execute(
            "INSERT INTO runs (id, started_ms, ended_ms, command, ok, interrupted, tasks, hits, \
             failed, summary, keys) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                run.meta.run_id,
                ms(run.timeline.started_at),
                ms(run.ended_at),
                command,
                run.summary.ok,
                run.summary.interrupted,
                run.summary.tasks.len() as i64,
                c.hits as i64,
                c.failed as i64,
                summary,
                run.keys.to_string(),
            ],
        )
        .map_err(sql("insert run"))?;
        let seq = tx.last_insert_rowid();
        {
            let mut stmt = tx
                .prepare(
                    "INSERT INTO run_tasks (run_seq, task, status, cache, verdicts, attempts, \
                     wall_ms, cpu_ms, max_rss_kb, key, start_us, dur_us, lane) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                )
                .map_err(sql("prepare task"))?;
            // Each task's span by its id: a search per task was quadratic (a million
            // comparisons for a 1,000-task run).
            let spans: std::collections::HashMap<&prova_protocol::TaskId, _> =
                run.timeline.spans.iter().map(|s| (&s.task, s)).collect();
            for t in &run.summary.tasks {
                let span = spans.get(&t.task);
                let cache = match &t.cache {
                    CacheStatus::Hit { layer, .. } => format!("hit:{layer}"),
                    CacheStatus::Saved => "saved".to_owned(),
                    CacheStatus::NotSaved { .. } => "not_saved".to_owned(),
                    CacheStatus::Uncached => "uncached".to_owned(),
                };
                let verdicts: Vec<&str> = t.verdicts.iter().map(|v| v.name()).collect();
                let status = serde_json::to_value(t.status).unwrap_or(Value::Null);
                stmt.execute(params![
                    seq,
                    t.task.as_str(),
                    status.as_str().unwrap_or("?"),
                    cache,
                    verdicts.join(","),
                    t.attempts,
                    t.stats.wall_ms as i64,
                    (t.stats.cpu_user_ms + t.stats.cpu_sys_ms) as i64,
                    t.stats.max_rss_kb as i64,
                    t.key.map(|k| k.to_hex()),
                    span.map(|s| s.start_us as i64),
                    span.map(|s| s.dur_us as i64),
                    span.map(|s| s.lane as i64),
                ])
                .map_err(sql("insert task"))?;
            }
        }
        // `seq` is AUTOINCREMENT (never reused; a rolled-back insert leaves no gap): the
        // newest KEEP are those above `seq - KEEP`. A range of the rowid tree, so a run reads
        // only what it deletes — `NOT IN (… LIMIT KEEP)` read every kept run's pages (their
        // summaries and keys) on every run, the most of a warm no-op's history cost.
        tx.execute("DELETE FROM runs WHERE seq <= ?1", params![seq - KEEP])
            .map_err(sql("prune"))?;
        tx.commit().map_err(sql("commit"))?;
        self.cut_wal_past(WAL_KEEP_BYTES);
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
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })
            .map_err(self.sql("list"))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, started, ended, command, summary, keys) = row.map_err(self.sql("list"))?;
            let decode =
                |source| HistoryError::Decode { path: self.path.clone(), run: id.clone(), source };
            out.push(Run {
                started_at: from_ms(started),
                ended_at: from_ms(ended),
                command: serde_json::from_str(&command).map_err(decode)?,
                summary: serde_json::from_str(&summary).map_err(decode)?,
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

/// The history opened on a thread of its own while the run goes on: the open reads the
/// schema and rebuilds the WAL's index from every frame the last runs left (up to
/// [`WAL_KEEP_BYTES`]), about 0.3 ms that a warm no-op otherwise waited for at its end.
/// There, too, a WAL past half its bound is cut (two fsyncs, about 2 ms here), so the record
/// at the run's end cuts only after a run that alone wrote more than that half.
pub struct Opening(Option<std::thread::JoinHandle<Result<History, HistoryError>>>);

impl Opening {
    /// Starts opening the history of the workspace at `root`. A thread that cannot be
    /// started leaves the open to [`Opening::into_history`].
    pub fn start(root: &Path) -> Self {
        let root = root.to_owned();
        let handle = std::thread::Builder::new()
            .name("prova-history".into())
            .spawn(move || {
                let history = History::open(&root)?;
                history.cut_wal_past(WAL_KEEP_BYTES / 2);
                Ok(history)
            })
            .ok();
        Self(handle)
    }

    /// The opened history (opened here, now, if the thread could not be started).
    pub fn into_history(mut self, root: &Path) -> Result<History, HistoryError> {
        match self.0.take().map(std::thread::JoinHandle::join) {
            Some(Ok(opened)) => opened,
            // The thread panicked or never started: open it here.
            Some(Err(_)) | None => History::open(root),
        }
    }
}

impl Drop for Opening {
    /// A run that ends before its record (an error) still waits for the open, so the
    /// process never exits with the connection half made.
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
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

    /// The history opened on its own thread records like one opened at the end, after runs
    /// recorded the usual way; an opening dropped unused leaves the history as it was.
    #[test]
    fn a_history_opened_beside_the_run_records_the_run() {
        let dir = tempfile::tempdir().expect("a temp dir");
        record_run(&mut History::open(dir.path()).expect("opened"), 0);
        drop(Opening::start(dir.path()));
        let mut h = Opening::start(dir.path()).into_history(dir.path()).expect("opened beside");
        record_run(&mut h, 1);
        drop(h);
        let runs = History::open(dir.path()).expect("reopened").list(10).expect("listed");
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["r1", "r0"]);
    }

    /// Runs whose history opened beside them: the open cuts a WAL past half the bound, so
    /// no record needs to (the WAL after each stays within half the bound and one run), and
    /// every run is kept.
    #[test]
    fn the_wal_is_cut_where_the_history_opens_beside_the_run() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut largest = 0;
        for i in 0..40 {
            let mut h = Opening::start(dir.path()).into_history(dir.path()).expect("opened");
            let before = wal_len(dir.path());
            assert!(before <= WAL_KEEP_BYTES / 2, "run {i}: the open left {before} bytes");
            record_run(&mut h, i);
            let after = wal_len(dir.path());
            assert!(after >= before, "run {i}: the record cut the WAL ({before} -> {after})");
            largest = largest.max(after);
        }
        assert!(largest > WAL_KEEP_BYTES / 4, "the WAL never grew: {largest} bytes");
        let h = History::open(dir.path()).expect("opened");
        assert_eq!(h.count().expect("counted"), 40);
    }

    /// A cut does not leave the connection failing at once on a lock: the record after it
    /// waits as long as any other statement.
    #[test]
    fn after_a_cut_the_record_still_waits_for_a_lock() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let busy_ms = |h: &History| -> i64 {
            h.conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0)).expect("read")
        };
        let mut i = 0;
        while wal_len(dir.path()) <= WAL_KEEP_BYTES / 2 {
            record_run(&mut History::open(dir.path()).expect("opened"), i);
            i += 1;
            assert!(i < 1000, "the WAL never passed half its bound");
        }
        let h = Opening::start(dir.path()).into_history(dir.path()).expect("opened");
        assert_eq!(wal_len(dir.path()), 0, "the open did not cut");
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
        let mut s = summary(0);
        s.tasks = (0..3000)
            .map(|i| TaskReport {
                task: TaskId::new(&format!("p{i}"), "build"),
                ..s.tasks[0].clone()
            })
            .collect();
        let meta = RunMeta { run_id: "big".to_owned() };
        let rec = Recorded {
            meta: &meta,
            command: &["prova".to_owned()],
            summary: &s,
            keys: &serde_json::json!({}),
            timeline: &Timeline::new(),
            ended_at: SystemTime::now(),
        };
        h.record(&rec).expect("recorded");
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
