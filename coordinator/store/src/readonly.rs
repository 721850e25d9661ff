//! Opening a cache without writing to it: [`Store::open_read_only`] (`--cache local:r`) and
//! [`Store::scratch`] (`--no-cache`, and a read-only open of a directory that holds no
//! index).
//!
//! A read-only store opens the index with `SQLITE_OPEN_READ_ONLY`: no directory is created,
//! the journal mode is not switched, no migration runs, and nothing is written — so a
//! read-only `.prova` (a read-only mount, a cache shared from another user) works. Writes are
//! either refused with [`CacheError::ReadOnly`] (`put_entry`, `delete_entry`, `put_blob_*`,
//! `prune`, `clean`) or skipped as if done (`touch`, the memo, durations and the ledger: a
//! read-only run leaves no trace). A bad blob found on a read is a miss but stays where it
//! is. Staging (`tmp_dir`) is a private temporary directory, removed with the store.
//!
//! SQLite can only open a WAL index read-only if its `-shm` file exists or can be created
//! (<https://sqlite.org/wal.html#readonly>); after the last writer closes cleanly neither
//! `-wal` nor `-shm` is left. When the directory is not writable the index is therefore
//! reopened `immutable=1`: SQLite then takes no locks and assumes the file does not change
//! while the store is open — true of a read-only mount, and otherwise a concurrent writer's
//! newest rows are simply not seen (never half-seen: each read is still of whole pages of
//! one consistent file, and every blob read is verified).
//!
//! A scratch store is an in-memory index with the current schema over a private temporary
//! directory: a run with `--no-cache` reads no entry and leaves nothing behind. It has no key
//! salt (a `--no-cache` run keys with the workspace cache's salt when there is one).
//!
//! Both temporary directories are named for their process, and those of processes killed
//! before they could remove theirs are removed by the next one made ([`super::private_tmp`]).

use std::fs;
use std::path::Path;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::error::{CacheError, io, sql};
use super::schema::{self, BUSY_TIMEOUT, MIGRATIONS, SCHEMA_VERSION};
use super::store::Store;
use super::{BLOBS_DIR, INDEX_FILE, QUARANTINE_DIR, TMP_DIR};

impl Store {
    /// Opens the cache directory `dir` read-only (see the module docs). A directory without
    /// an index (or an index prova never wrote) reads as an empty cache: a [`scratch`]
    /// (Self::scratch) store, marked read-only. A damaged index is
    /// [`CacheError::IntegrityCheck`], a newer one [`CacheError::SchemaTooNew`], as for
    /// [`open`](Self::open).
    pub fn open_read_only(dir: &Path) -> Result<Store, CacheError> {
        let index = dir.join(INDEX_FILE);
        match fs::metadata(&index) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return scratch(true),
            Err(e) => return Err(io(&index)(e)),
        }
        let unchanged = super::verified::unchanged_since_close(dir);
        let conn = match connect(&index, false) {
            Err(e) if cannot_share(&e) => connect(&index, true),
            other => other,
        }
        .map_err(sql("open the index read-only"))?;
        if !unchanged {
            schema::quick_check(&conn)?;
        }
        let found = schema::user_version(&conn)?;
        if found > SCHEMA_VERSION {
            return Err(CacheError::SchemaTooNew { found, supported: SCHEMA_VERSION });
        }
        if found <= 0 {
            return scratch(true); // a file prova never migrated: nothing to read in it
        }
        let temp = std::env::temp_dir();
        let staging = super::private_tmp::make(&temp, "prova-readonly-").map_err(io(&temp))?;
        let tmp = staging.path().join(TMP_DIR);
        fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        Ok(Store::from_parts(dir.to_path_buf(), conn, true, Some(staging)))
    }

    /// An empty, writable, in-memory store over a private temporary directory (removed with
    /// the store): for a run that must not touch the cache (`--no-cache`).
    pub fn scratch() -> Result<Store, CacheError> {
        scratch(false)
    }
}

fn scratch(read_only: bool) -> Result<Store, CacheError> {
    let temp = std::env::temp_dir();
    let dir = super::private_tmp::make(&temp, "prova-scratch-").map_err(io(&temp))?;
    for sub in [BLOBS_DIR, TMP_DIR, QUARANTINE_DIR] {
        let p = dir.path().join(sub);
        fs::create_dir_all(&p).map_err(io(&p))?;
    }
    let mut conn = Connection::open_in_memory().map_err(sql("open a scratch index"))?;
    conn.pragma_update(None, "foreign_keys", true).map_err(sql("set foreign_keys"))?;
    schema::stable_plans(&conn).map_err(sql("enable the query planner stability guarantee"))?;
    schema::migrate(&mut conn, MIGRATIONS)?;
    // Nothing a scratch store keys is kept, so it has no salt of its own: a random one would
    // give every `--no-cache` or cache-less `show` another key for the same task.
    conn.execute("DELETE FROM meta WHERE name = 'key_salt'", [])
        .map_err(sql("clear the scratch key salt"))?;
    let path = dir.path().to_path_buf();
    Ok(Store::from_parts(path, conn, read_only, Some(dir)))
}

/// A read-only connection to `index` (`immutable=1` when `immutable`), checked by one read
/// so that a WAL index SQLite cannot share fails here.
fn connect(index: &Path, immutable: bool) -> rusqlite::Result<Connection> {
    let mut uri = format!("file:{}?mode=ro", uri_path(index));
    if immutable {
        uri.push_str("&immutable=1");
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(uri, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    schema::stable_plans(&conn)?;
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))?;
    Ok(conn)
}

/// Whether `e` says SQLite could not set up shared (WAL) access read-only: no `-shm` and no
/// right to create one.
fn cannot_share(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied)
    )
}

/// `path` percent-encoded for a `file:` URI (everything but unreserved bytes and `/`).
fn uri_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[path = "readonly_tests.rs"]
mod tests;
