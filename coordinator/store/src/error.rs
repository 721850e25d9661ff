//! [`CacheError`]: everything that can go wrong in the local cache store.

use std::path::{Path, PathBuf};

use prova_protocol::Digest;
use rusqlite::ErrorCode;

/// An error of the cache store. None of them means "wrong bytes were served": a blob that
/// does not match its name is a miss (`Ok(None)`), not an error.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// SQLite refused or failed an operation (a lock held past the busy timeout, a full
    /// disk, …).
    #[error("cache index: {op}: {source}")]
    Sqlite {
        /// What the store was doing.
        op: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },

    /// A file or directory of the cache could not be created, read, renamed or removed.
    #[error("cache: {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },

    /// A row of the index holds a value the schema forbids (a digest that is not 32 bytes, a
    /// negative size, …).
    #[error(
        "cache index is corrupt: {what}; remove the cache directory or run `prova cache clean`"
    )]
    Corrupt {
        /// What was wrong, and where.
        what: String,
    },

    /// The index was written by a newer prova whose schema this one does not know.
    #[error(
        "cache index schema version {found} is newer than this prova supports ({supported}); \
         use a newer prova or another --cache-dir"
    )]
    SchemaTooNew {
        /// `PRAGMA user_version` of the file.
        found: i64,
        /// The newest version this build migrates to.
        supported: i64,
    },

    /// SQLite's own consistency check failed, or the file is not a database at all.
    #[error(
        "cache index failed its integrity check: {0}; remove the cache directory or run \
         `prova cache clean`"
    )]
    IntegrityCheck(String),

    /// The journal could not be switched to WAL (a network file system, a read-only
    /// directory): concurrent runs would corrupt or block each other, so the store refuses.
    #[error("cache index: journal mode is {found:?}, not \"wal\"; keep the cache on a local disk")]
    NotWal {
        /// What `PRAGMA journal_mode` answered.
        found: String,
    },

    /// An entry names a blob that is not in `blobs/`.
    #[error("blob {digest} is not in the cache")]
    MissingBlob {
        /// The blob.
        digest: Digest,
    },

    /// An entry says its artifact has a size the blob file does not have.
    #[error("blob {digest} is {actual} bytes, the entry says {expected}")]
    BlobSize {
        /// The blob.
        digest: Digest,
        /// The size the caller gave.
        expected: u64,
        /// The size of the file.
        actual: u64,
    },

    /// A blob is bigger than the caller's (or the store's) bound for an in-memory read.
    #[error("blob {digest} is larger than the {limit}-byte limit for an in-memory read")]
    TooLarge {
        /// The blob.
        digest: Digest,
        /// The bound.
        limit: u64,
    },

    /// A number does not fit the index's signed 64-bit integers.
    #[error("{what} = {value} does not fit the cache index")]
    OutOfRange {
        /// Which field.
        what: &'static str,
        /// The value.
        value: u64,
    },

    /// A write on a store opened read-only (`--no-cache`, `--cache local:r`).
    #[error("the cache is open read-only: {op} is not allowed")]
    ReadOnly {
        /// The refused operation.
        op: &'static str,
    },

    /// The owner thread could not be started.
    #[error("cannot start the cache thread: {0}")]
    Spawn(#[source] std::io::Error),

    /// The owner thread is gone (every handle dropped, or the call panicked on it).
    #[error("the cache thread stopped before answering")]
    ThreadGone,
}

impl CacheError {
    /// Whether this is SQLite's "database is locked" after the busy timeout ran out.
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Sqlite { source, .. }
            if source.sqlite_error_code() == Some(ErrorCode::DatabaseBusy))
    }
}

/// Maps a rusqlite error of operation `op`: a value the schema forbids and a damaged file
/// become [`CacheError::Corrupt`] / [`CacheError::IntegrityCheck`], the rest
/// [`CacheError::Sqlite`].
pub(crate) fn sql(op: &'static str) -> impl FnOnce(rusqlite::Error) -> CacheError {
    move |source| match source {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => {
            CacheError::Corrupt { what: format!("{op}: {source}") }
        }
        _ if matches!(
            source.sqlite_error_code(),
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
        ) =>
        {
            CacheError::IntegrityCheck(format!("{op}: {source}"))
        }
        _ => CacheError::Sqlite { op, source },
    }
}

/// Maps an I/O error on `path`.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
    move |source| CacheError::Io { path: path.to_path_buf(), source }
}

/// `v` as an index integer.
pub(crate) fn to_i64(what: &'static str, v: u64) -> Result<i64, CacheError> {
    i64::try_from(v).map_err(|_| CacheError::OutOfRange { what, value: v })
}
