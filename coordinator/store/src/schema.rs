//! The index's connection settings, consistency checks and schema migrations.
//!
//! The schema version lives in `PRAGMA user_version` (0 = a file prova never wrote to).
//! [`MIGRATIONS`] are applied in order, each at most once, inside one write transaction, so
//! two processes opening a fresh cache directory at once both end at the same version. A file
//! whose version is newer than the newest migration is refused ([`CacheError::SchemaTooNew`]):
//! an older prova cannot know what a newer one's rows mean.
//!
//! Every open runs `PRAGMA quick_check`, not `integrity_check`: it verifies the b-tree
//! structure, page and record formats and the NOT NULL / CHECK constraints in time linear in
//! the file's size, and skips the O(N log N) cross-check of every index against its table,
//! which takes seconds on the index of a large monorepo. `integrity_check` is
//! [`Store::integrity_check`](super::Store::integrity_check), for tests and
//! `prova cache stats --check`.

use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, TransactionBehavior};

use super::error::{CacheError, sql};

/// How long a statement waits for another process's write lock before failing with
/// "database is locked": long enough for a concurrent run's biggest transaction (a prune
/// batch, a memo flush of a large workspace), short enough that a wedged peer is reported.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many problems are collected from `quick_check` / `integrity_check`: the first
/// few say enough, and a badly damaged file could otherwise list one per page.
const CHECK_MAX_ERRORS: i64 = 10;

/// One schema step: `sql` takes a database at `version - 1` to `version`.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// The version this step produces.
    pub version: i64,
    /// The statements (a batch).
    pub sql: &'static str,
}

/// Every schema step, oldest first. Append only: a released step is never edited.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, sql: V1 },
    Migration { version: 2, sql: V2 },
    Migration { version: 3, sql: V3 },
    Migration { version: 4, sql: V4 },
    Migration { version: 5, sql: V5 },
    Migration { version: 6, sql: V6 },
];

/// The version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 6;

/// Version 6: a farm coordinator's own state that must outlive a restart (`farm_state.rs`).
/// `farm_leases`: every keyed lease placed, until it ended without a result or the run that
/// got its result is over — a restarted coordinator adopts what its workers still run.
/// `incarnation` is the coordinator start that placed it (run ids restart per start).
/// `farm_quarantine`: workers quarantined for lying, until released.
const V6: &str = "
CREATE TABLE farm_leases (
    lease       INTEGER PRIMARY KEY,
    worker      TEXT    NOT NULL,
    key         BLOB    NOT NULL CHECK (length(key) = 32),
    task        TEXT    NOT NULL,
    incarnation INTEGER NOT NULL,
    run         INTEGER NOT NULL,
    placed_ms   INTEGER NOT NULL
);
CREATE INDEX farm_leases_by_run ON farm_leases (incarnation, run);
CREATE TABLE farm_quarantine (
    worker      TEXT    PRIMARY KEY,
    reason      TEXT    NOT NULL,
    since_ms    INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Version 5: what a determinism proof compares. `compared` is the fingerprint of an
/// execution's outputs without its task's `verify_ignore` matches (NULL when it ignores
/// nothing, and on older rows): the ledger's agreement (`--trust proven`, `hermeticity`) is
/// judged on `coalesce(compared, fingerprint)`, the same thing the proof compared.
const V5: &str = "
ALTER TABLE executions ADD COLUMN compared BLOB CHECK (compared IS NULL OR length(compared) = 32);
";

/// Version 3: who uploaded which blob (a farm's record, so a `client` may fetch back what it
/// uploaded and no more, and its stored bytes are bounded by a quota; rows go with their
/// blob when prune removes it), and the cache's own random key salt (`meta`, name
/// `key_salt`: declared `env` values are folded keyed by it, so a short value is not guessable
/// from a key's components; a farm client adopts its farm's salt).
const V3: &str = "
CREATE TABLE uploads (
    identity    TEXT    NOT NULL,
    digest      BLOB    NOT NULL CHECK (length(digest) = 32),
    size        INTEGER NOT NULL CHECK (size >= 0),
    time_ms     INTEGER NOT NULL,
    PRIMARY KEY (identity, digest)
) WITHOUT ROWID;
CREATE INDEX uploads_by_digest ON uploads (digest);
CREATE TABLE meta (
    name        TEXT    PRIMARY KEY,
    value       BLOB    NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (name, value) VALUES ('key_salt', randomblob(32));
";

/// Version 4: flaky executions. `failed_tries` counts the tries of one execution that failed
/// before a retry (`retries`) succeeded with the same key in the same environment: the
/// task is flaky, whatever its final exit.
const V4: &str = "
ALTER TABLE executions ADD COLUMN failed_tries INTEGER NOT NULL DEFAULT 0 CHECK (failed_tries >= 0);
";

/// Version 2: the fingerprint ledger (brief §1, proof 3). One row per execution anywhere —
/// first runs and determinism re-runs, on every worker — with its output fingerprint, so a
/// key with two fingerprints is a hermeticity defect with its evidence. `artifact` is kept
/// for re-runs only (the canonical artifact is the entry's), so `prova diff` can show both.
const V2: &str = "
CREATE TABLE executions (
    id          INTEGER PRIMARY KEY,
    key         BLOB    NOT NULL CHECK (length(key) = 32),
    task        TEXT    NOT NULL,
    worker      TEXT    NOT NULL,
    platform    TEXT    NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('run', 'rerun')),
    ok          INTEGER NOT NULL CHECK (ok IN (0, 1)),
    fingerprint BLOB    CHECK (fingerprint IS NULL OR length(fingerprint) = 32),
    manifest    BLOB,
    artifact    BLOB    CHECK (artifact IS NULL OR length(artifact) = 32),
    time_ms     INTEGER NOT NULL
);
CREATE INDEX executions_by_key ON executions (key, time_ms);
CREATE INDEX executions_by_task ON executions (task, time_ms);
CREATE INDEX executions_by_artifact ON executions (artifact) WHERE artifact IS NOT NULL;
";

/// Version 1. Digests are 32-byte BLOBs; sizes, durations and times are integers (ms since
/// the Unix epoch for times). `entries` keeps a rowid (its rows carry manifests, too big for a
/// `WITHOUT ROWID` b-tree); `memo` and `durations` are small rows keyed by text.
const V1: &str = "
CREATE TABLE entries (
    id            INTEGER PRIMARY KEY,
    namespace     TEXT    NOT NULL,
    key           BLOB    NOT NULL CHECK (length(key) = 32),
    task          TEXT    NOT NULL,
    artifact      BLOB    CHECK (artifact IS NULL OR length(artifact) = 32),
    artifact_size INTEGER CHECK (artifact_size IS NULL OR artifact_size >= 0),
    log           BLOB    CHECK (log IS NULL OR length(log) = 32),
    log_size      INTEGER CHECK (log_size IS NULL OR log_size >= 0),
    manifest      BLOB    NOT NULL,
    components    BLOB    NOT NULL,
    fingerprint   BLOB    CHECK (fingerprint IS NULL OR length(fingerprint) = 32),
    duration_ms   INTEGER NOT NULL CHECK (duration_ms >= 0),
    created_ms    INTEGER NOT NULL,
    last_used_ms  INTEGER NOT NULL,
    CHECK ((artifact IS NULL) = (artifact_size IS NULL)),
    CHECK ((log IS NULL) = (log_size IS NULL)),
    UNIQUE (namespace, key)
);
CREATE INDEX entries_by_task ON entries (namespace, task, created_ms);
CREATE INDEX entries_by_last_used ON entries (last_used_ms);
CREATE INDEX entries_by_artifact ON entries (artifact) WHERE artifact IS NOT NULL;
CREATE INDEX entries_by_log ON entries (log) WHERE log IS NOT NULL;

CREATE TABLE memo (
    scope       TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    dev         INTEGER NOT NULL,
    ino         INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    ctime_ns    INTEGER NOT NULL,
    mode        INTEGER NOT NULL,
    digest      BLOB    NOT NULL CHECK (length(digest) = 32),
    recorded_ns INTEGER NOT NULL,
    PRIMARY KEY (scope, path)
) WITHOUT ROWID;

CREATE TABLE durations (
    task       TEXT    PRIMARY KEY,
    ms         INTEGER NOT NULL CHECK (ms >= 0),
    samples    INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Sets the connection's pragmas: busy timeout first (so the rest waits for a peer that holds
/// the lock), WAL (checked: `journal_mode` answers with the mode it got), `synchronous =
/// NORMAL` (durable at checkpoints; a power loss can drop the newest commits, which only
/// costs misses), foreign keys on, and IMMEDIATE transactions (a write transaction takes the
/// write lock when it begins, so it waits on the busy handler instead of failing with
/// `SQLITE_BUSY` when a read turns into a write), and [`stable_plans`].
pub(crate) fn configure(conn: &mut Connection) -> Result<(), CacheError> {
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql("set busy_timeout"))?;
    let mode = set_wal(conn)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(CacheError::NotWal { found: mode });
    }
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql("set synchronous"))?;
    conn.pragma_update(None, "foreign_keys", true).map_err(sql("set foreign_keys"))?;
    conn.set_transaction_behavior(TransactionBehavior::Immediate);
    stable_plans(conn).map_err(sql("enable the query planner stability guarantee"))?;
    Ok(())
}

/// One plan per statement whatever its bound values (SQLite's query planner stability
/// guarantee). Without it SQLite (built with STAT4) parsed and planned a cached lookup again
/// every time its task was another value: the lookups of a task's entries (the newest, the
/// one with a fingerprint), which the farm makes once per save.
pub(crate) fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map(|_| ())
}

/// Switches the database to WAL (a persistent mode: an index already in WAL is left alone)
/// and returns the mode it is in. The switch needs an exclusive lock, and SQLite answers
/// `SQLITE_BUSY` at once rather than through the busy handler when two processes open a
/// fresh index together; so the switch is retried, a bounded number of times.
fn set_wal(conn: &Connection) -> Result<String, CacheError> {
    const ATTEMPTS: u32 = 50;
    let mut attempt = 0;
    loop {
        let current: rusqlite::Result<String> =
            conn.pragma_query_value(None, "journal_mode", |row| row.get(0));
        let result = match current {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => Ok(mode),
            Ok(_) => conn.pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0)),
            Err(e) => Err(e),
        };
        match result {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && attempt < ATTEMPTS =>
            {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(
                    10 * u64::from(attempt.min(10)),
                ));
            }
            other => return other.map_err(sql("set journal_mode")),
        }
    }
}

/// `PRAGMA quick_check`, run at every open. It verifies the b-tree structure, page and record
/// formats and the NOT NULL / CHECK constraints in time linear in the file's size, but skips
/// what `integrity_check` adds — that every index matches its table — which costs
/// O(N log N) and takes seconds on an index of a large monorepo. A broken index b-tree also
/// shows up as a quick_check failure; a stale-but-well-formed index cannot serve wrong
/// bytes, because every blob read is verified against its digest.
pub(crate) fn quick_check(conn: &Connection) -> Result<(), CacheError> {
    check(conn, "quick_check")
}

/// `PRAGMA integrity_check`: the full check, for tests and `prova cache stats --check`.
pub(crate) fn integrity_check(conn: &Connection) -> Result<(), CacheError> {
    check(conn, "integrity_check")
}

fn check(conn: &Connection, pragma: &'static str) -> Result<(), CacheError> {
    let mut problems = Vec::new();
    conn.pragma(None, pragma, CHECK_MAX_ERRORS, |row| {
        problems.push(row.get::<_, String>(0)?);
        Ok(())
    })
    .map_err(|e| match sql(pragma)(e) {
        CacheError::Sqlite { source, .. } => CacheError::IntegrityCheck(source.to_string()),
        other => other,
    })?;
    if problems.len() == 1 && problems[0] == "ok" {
        Ok(())
    } else {
        // SQLite packs several problems into one row, a line each: report them on one line.
        let lines: Vec<&str> = problems.iter().flat_map(|p| p.lines()).collect();
        Err(CacheError::IntegrityCheck(lines.join("; ")))
    }
}

/// The file's schema version.
pub(crate) fn user_version(conn: &Connection) -> Result<i64, CacheError> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(sql("read user_version"))
}

/// Brings the file to the newest of `migrations` (sorted by version, contiguous from 1).
/// Returns the version found before migrating.
pub(crate) fn migrate(conn: &mut Connection, migrations: &[Migration]) -> Result<i64, CacheError> {
    let latest = migrations.last().map_or(0, |m| m.version);
    let tx = conn.transaction().map_err(sql("begin migration"))?;
    let found = user_version(&tx)?;
    if found > latest {
        return Err(CacheError::SchemaTooNew { found, supported: latest });
    }
    if found < 0 {
        return Err(CacheError::Corrupt { what: format!("negative schema version {found}") });
    }
    for m in migrations.iter().filter(|m| m.version > found) {
        tx.execute_batch(m.sql).map_err(sql("apply a schema migration"))?;
        tx.pragma_update(None, "user_version", m.version).map_err(sql("set user_version"))?;
    }
    tx.commit().map_err(sql("commit migration"))?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    fn table_names(conn: &Connection) -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn migrations_are_contiguous_and_end_at_schema_version() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
        }
        assert_eq!(MIGRATIONS.last().unwrap().version, SCHEMA_VERSION);
    }

    #[test]
    fn version_zero_file_is_migrated_and_unrelated_tables_kept() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join("index.sqlite")).unwrap();
            conn.execute_batch(
                "CREATE TABLE older_thing (x INTEGER); INSERT INTO older_thing VALUES (7);",
            )
            .unwrap();
            assert_eq!(user_version(&conn).unwrap(), 0);
        }
        let store = Store::open(dir.path()).unwrap();
        let conn = store.conn();
        assert_eq!(user_version(conn).unwrap(), SCHEMA_VERSION);
        let names = table_names(conn);
        for t in ["durations", "entries", "memo", "older_thing"] {
            assert!(names.iter().any(|n| n == t), "{t} missing from {names:?}");
        }
        let kept: i64 = conn.query_row("SELECT x FROM older_thing", [], |r| r.get(0)).unwrap();
        assert_eq!(kept, 7);
    }

    #[test]
    fn only_newer_steps_run_in_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        let steps = [
            Migration { version: 1, sql: "CREATE TABLE a (x INTEGER);" },
            Migration { version: 2, sql: "ALTER TABLE a ADD COLUMN y INTEGER NOT NULL DEFAULT 5;" },
            Migration { version: 3, sql: "CREATE TABLE c AS SELECT y FROM a;" },
        ];
        assert_eq!(migrate(&mut conn, &steps[..1]).unwrap(), 0);
        conn.execute("INSERT INTO a (x) VALUES (1)", []).unwrap();
        // From v1: steps 2 and 3 run, in order (3 reads the column 2 adds); step 1 does not
        // run again (it would fail: the table exists).
        assert_eq!(migrate(&mut conn, &steps).unwrap(), 1);
        assert_eq!(user_version(&conn).unwrap(), 3);
        let y: i64 = conn.query_row("SELECT y FROM c", [], |r| r.get(0)).unwrap();
        assert_eq!(y, 5);
        // Idempotent at the latest version.
        assert_eq!(migrate(&mut conn, &steps).unwrap(), 3);
    }

    #[test]
    fn newer_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join("index.sqlite")).unwrap();
            conn.pragma_update(None, "user_version", 999).unwrap();
        }
        match Store::open(dir.path()) {
            Err(CacheError::SchemaTooNew { found: 999, supported }) => {
                assert_eq!(supported, SCHEMA_VERSION)
            }
            other => panic!("want SchemaTooNew, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn failed_migration_leaves_the_file_untouched() {
        let mut conn = Connection::open_in_memory().unwrap();
        let steps = [
            Migration { version: 1, sql: "CREATE TABLE a (x INTEGER);" },
            Migration { version: 2, sql: "CREATE TABLE a (x INTEGER);" },
        ];
        assert!(migrate(&mut conn, &steps).is_err());
        assert_eq!(user_version(&conn).unwrap(), 0);
        assert!(table_names(&conn).is_empty());
    }
}
