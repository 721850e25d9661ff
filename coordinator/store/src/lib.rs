//! The local cache store (brief §6): an SQLite index of entries plus content-addressed blob
//! files, the file-digest memo (brief §5) and task durations. It treats manifests, key
//! components and logs as opaque bytes its callers encode.
//!
//! - [`store`]: [`Store`] — opening (layout, pragmas, `quick_check`, migrations) and entries.
//! - [`blobs`]: blob files: staged writes (temp → fsync → rename), verified reads, quarantine.
//! - [`memo`]: the file-digest memo and the durations history.
//! - [`farm_state`]: a farm coordinator's leases and quarantines, kept across its restart.
//! - [`ledger`]: the fingerprint ledger: every execution's fingerprint per key and worker.
//! - [`maintenance`]: `stats`, `prune` (LRU to a byte bound), `clean`, `clean_dir` (a
//!   directory whose index cannot be opened).
//! - [`readonly`]: [`Store::open_read_only`] (`--cache local:r`) and [`Store::scratch`]
//!   (`--no-cache`): reading a cache without writing to it.
//! - `private_tmp`: the private temporary directories of a scratch store and a read-only
//!   open, named for their process; those of killed processes removed by the next one.
//! - [`schema`]: connection settings, consistency checks, ordered migrations.
//! - `verified`: when an open may skip `quick_check` (the index is as prova's own last clean
//!   close left it: `index.sqlite.closed`).
//! - [`thread`]: [`CacheThread`], the one thread per process that owns the `Store`.
//! - [`uploads`]: who uploaded which blob, which blobs a farm reader may see, the key salt.
//! - [`error`]: the one error type, [`CacheError`].
//!
//! # A cache directory
//! ```text
//! index.sqlite (+ -wal, -shm)   the index (WAL, local disk only)
//! index.sqlite.closed           the index's stamps at prova's last clean close (`verified`)
//! blobs/<2 hex>/<64 hex>        blob files named by the BLAKE3 digest of their bytes
//! tmp/                          staging for in-flight writes and restores (same file system,
//!                               so the final rename is atomic)
//! quarantine/<64 hex>-<unique>  blobs whose bytes did not match their name (kept 7 days),
//!                               and `index-<unique>.sqlite` set aside by `discard_index`
//! ```
//!
//! # Contracts for callers
//! - **Many processes, one directory.** Two `prova run`s on one `--cache-dir` each open their
//!   own `Store`; SQLite's locks (WAL readers never block, writers wait up to
//!   [`schema::BUSY_TIMEOUT`]) and atomic renames keep them consistent.
//! - **A missing blob is a miss.** A concurrent `prune` may delete an entry (row and blob)
//!   between a `get_entry` and the read of its blob, a crash may lose a fresh blob, and a
//!   quarantine removes one. A reader that finds the blob gone must treat the entry as a
//!   miss, never as an error (a file already open stays readable: unlink keeps the inode).
//! - **Every read verifies.** Bytes that do not hash to their name are quarantined and the
//!   read is a miss; the entry row is left as it is, and the re-run's `put_entry` (an upsert)
//!   repairs it with a fresh blob.
//! - **Blobs before rows.** `put_entry` refuses a row whose blobs are not on disk; the check
//!   and the insert happen under the index's write lock, which `prune` also holds while it
//!   unlinks, so a row can never be committed pointing at a blob a prune already removed.
//!   The other side of that: `put_blob_*` finds a blob already present and keeps it, a
//!   concurrent prune then removes it (its last entry went), and `put_entry` fails with
//!   [`CacheError::MissingBlob`]. The caller puts the blob again and retries (bounded).

pub mod blobs;
pub mod error;
pub mod farm_state;
pub mod ledger;
pub mod maintenance;
pub mod memo;
mod private_tmp;
pub mod readonly;
pub mod schema;
pub mod store;
pub mod thread;
pub mod uploads;
mod verified;

#[cfg(test)]
mod stress_tests;
#[cfg(test)]
mod test_util;

use prova_protocol::Digest;

pub use blobs::MAX_BLOB_READ_BYTES;
pub use error::CacheError;
pub use farm_state::{FarmWrites, StoredLease};
pub use ledger::Execution;
pub use maintenance::{CleanedDir, PruneStats, Stats};
pub use store::Store;
pub use thread::{CACHE_QUEUE_CAPACITY, CacheThread};
pub use uploads::Visibility;

/// The index file's name inside a cache directory.
pub const INDEX_FILE: &str = "index.sqlite";
/// The blob directory's name.
pub const BLOBS_DIR: &str = "blobs";
/// The staging directory's name.
pub const TMP_DIR: &str = "tmp";
/// The quarantine directory's name.
pub const QUARANTINE_DIR: &str = "quarantine";

/// The namespace of trusted entries (brief §8: written by `ci`, or by anyone locally).
pub const TRUSTED: &str = "";
/// The namespace of trusted-run entries waiting for a second worker to agree on their
/// fingerprint (`--trust=proven`): served to nobody until promoted.
pub const PENDING: &str = "pending";
/// The namespace of entries from untrusted writers (pull requests); trusted readers never see
/// them. A local cache files what a farm's untrusted tier sent here; on the farm each
/// `client` identity has its own, [`untrusted_of`].
pub const UNTRUSTED: &str = "untrusted";

/// The farm namespace of `client` certificate `identity`'s entries: served to that identity
/// only, so one developer's results never reach another's runs.
pub fn untrusted_of(identity: &str) -> String {
    format!("{UNTRUSTED}/{identity}")
}

/// Whether `ns` is an untrusted namespace ([`UNTRUSTED`] or one identity's).
pub fn is_untrusted(ns: &str) -> bool {
    ns == UNTRUSTED || ns.strip_prefix(UNTRUSTED).is_some_and(|r| r.starts_with('/'))
}

/// Who produced the entries of namespace `ns`, for a notice ("a ci run", "another client").
pub fn producer_of(ns: &str) -> &'static str {
    if is_untrusted(ns) { "another client's run" } else { "a ci run" }
}

/// One cache entry: what a task's key maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The trust namespace ([`TRUSTED`], [`UNTRUSTED`]).
    pub namespace: String,
    /// The task's key.
    pub key: Digest,
    /// `project#task`, for `prova why` and stats.
    pub task: String,
    /// The outputs archive (a blob) and its size in bytes; `None` for a task with no outputs.
    pub artifact: Option<(Digest, u64)>,
    /// The captured log (a blob), if any.
    pub log: Option<Digest>,
    /// The output manifest, encoded by the caller.
    pub manifest: Vec<u8>,
    /// The key's components, encoded by the caller (so `prova why` can say what moved).
    pub components: Vec<u8>,
    /// The output fingerprint, if computed.
    pub fingerprint: Option<Digest>,
    /// How long the task ran.
    pub duration_ms: u64,
    /// When the entry was written (ms since the Unix epoch).
    pub created_ms: i64,
    /// When the entry was last written or hit (ms since the Unix epoch); prune's LRU order.
    pub last_used_ms: i64,
}

/// An entry to file: [`Entry`] without `last_used_ms`, which starts at `created_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEntry {
    /// See [`Entry::namespace`].
    pub namespace: String,
    /// See [`Entry::key`].
    pub key: Digest,
    /// See [`Entry::task`].
    pub task: String,
    /// See [`Entry::artifact`]; the size must be the blob file's size.
    pub artifact: Option<(Digest, u64)>,
    /// See [`Entry::log`].
    pub log: Option<Digest>,
    /// See [`Entry::manifest`].
    pub manifest: Vec<u8>,
    /// See [`Entry::components`].
    pub components: Vec<u8>,
    /// See [`Entry::fingerprint`].
    pub fingerprint: Option<Digest>,
    /// See [`Entry::duration_ms`].
    pub duration_ms: u64,
    /// See [`Entry::created_ms`].
    pub created_ms: i64,
}

/// What the memo remembers about one file (brief §5): if a file still has this identity and
/// these stamps, its content digest is `digest` and its bytes need not be read. The caller
/// decides what "still" means (including the racy window around `recorded_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoRow {
    /// Device id.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the Unix epoch.
    pub mtime_ns: i64,
    /// Status-change time, ns since the Unix epoch.
    pub ctime_ns: i64,
    /// `st_mode` (type and permission bits).
    pub mode: u32,
    /// BLAKE3 of the file's bytes.
    pub digest: Digest,
    /// When the digest was computed, ns since the Unix epoch.
    pub recorded_ns: i64,
}
