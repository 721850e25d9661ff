//! The worker's blob cache: content-addressed files that exec roots are materialised from by
//! hardlink, so a task's inputs cost a `link(2)` each instead of a copy.
//!
//! # Layout
//! - `dir/<2 hex>/<64 hex>`: the blob, mode `0444`, mtime [`FIXED_MTIME_SECS`].
//! - `dir/<2 hex>/<64 hex>.x`: its executable twin, mode `0555`, made on first demand from the
//!   same bytes. Hardlinks share one inode and so one mode: an input that must be executable
//!   and one that must not cannot both link to the same file.
//! - `dir/tmp/`: files being written or verified; emptied on open.
//! - `dir/lock`: held (`flock`) while a [`BlobCache`] is open, so two workers never share a
//!   directory (each would evict the other's blobs from under it).
//!
//! # Rules
//! - A blob is either absent or complete and verified under its name: bytes arrive in `tmp/`,
//!   are hashed, fsynced, and renamed into place.
//! - The cache is bounded: past `max_bytes` (blobs and their executable twins both count) the
//!   least recently used blobs are removed — except pinned ones ([`BlobCache::pin`]), which an
//!   exec root being built or in use still needs. A cache whose blobs are all pinned may stay
//!   over its bound until they are unpinned.
//! - Recency lives in memory while the cache is open; at open it is taken from the blobs'
//!   access times, which [`BlobCache::path`] refreshes explicitly (so `noatime` mounts work).
//! - Blobs are not re-hashed at open: the cache trusts its own directory (a blob's bytes were
//!   verified when it was inserted, and its mode is read-only).
//!
//! All methods take `&self`; one internal mutex guards the index. Hashing and copying happen
//! outside it; the short metadata operations that must agree with the index (the rename that
//! files a blob, the unlinks of an eviction) happen under it, so the index and the directory
//! never disagree about a blob.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::{self, File, FileTimes};
use std::io::{self, ErrorKind};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;
use prova_protocol::Digest;

/// The mtime every materialised input gets: blobs, copies and unpacked upstream outputs alike,
/// so an exec root is the same tree on every worker and at every run — a tool that embeds an
/// input's mtime cannot make a determinism re-run differ. 2000-01-01T00:00:00Z rather than
/// the epoch: zip writers (Python's `zipfile`, …) refuse timestamps before 1980.
pub const FIXED_MTIME_SECS: i64 = 946_684_800;

/// Mode of a blob: read-only for everyone. (Exec roots mount inputs read-only anyway; this
/// keeps a stray writer on the host from editing the cache through a hardlink.)
pub const BLOB_MODE: u32 = 0o444;
/// Mode of a blob's executable twin.
pub const EXEC_BLOB_MODE: u32 = 0o555;

const TMP_DIR: &str = "tmp";
const LOCK_FILE: &str = "lock";
const EXEC_SUFFIX: &str = ".x";

/// Tries at a fresh staging name before giving up (names are unique per process by a counter,
/// so a clash means a stale file from an earlier process with our pid).
const STAGE_ATTEMPTS: u32 = 8;

/// Why a blob cache operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobCacheError {
    /// A file system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The bytes offered for a blob do not hash to the digest they were offered as.
    #[error("blob bytes hash to {actual}, not the expected {expected}")]
    DigestMismatch {
        /// The digest the caller promised.
        expected: Digest,
        /// What the bytes hash to.
        actual: Digest,
    },
    /// Another process (or another [`BlobCache`] in this one) has the directory open.
    #[error("blob cache {} is already in use by another worker", dir.display())]
    Locked {
        /// The cache directory.
        dir: PathBuf,
    },
    /// A staged blob is not a regular file.
    #[error("{} is not a regular file", path.display())]
    NotAFile {
        /// The path offered.
        path: PathBuf,
    },
}

fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> BlobCacheError {
    let path = path.into();
    move |source| BlobCacheError::Io { path, source }
}

/// A bounded, content-addressed store of input files on this worker. Cheap to clone (the
/// clones share one index).
#[derive(Clone)]
pub struct BlobCache {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    tmp: PathBuf,
    max_bytes: u64,
    seq: AtomicU64,
    state: Mutex<State>,
    /// Holds the directory's `flock` for as long as the cache is open.
    _lock: File,
}

#[derive(Default)]
struct State {
    blobs: HashMap<Digest, Blob>,
    /// Use order: tick → blob. The smallest tick is the least recently used.
    lru: BTreeMap<u64, Digest>,
    tick: u64,
    /// Bytes on disk: each blob's size, twice if it has an executable twin.
    total: u64,
    /// Pin counts; a digest may be pinned before it is inserted.
    pins: HashMap<Digest, u32>,
}

struct Blob {
    size: u64,
    /// Whether the executable twin exists.
    exec: bool,
    tick: u64,
}

impl Blob {
    fn bytes(&self) -> u64 {
        if self.exec { self.size.saturating_mul(2) } else { self.size }
    }
}

impl State {
    /// Marks `d` most recently used.
    fn touch(&mut self, d: &Digest) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(b) = self.blobs.get_mut(d) {
            self.lru.remove(&b.tick);
            b.tick = tick;
            self.lru.insert(tick, *d);
        }
    }

    fn add(&mut self, d: Digest, size: u64, exec: bool) {
        self.tick += 1;
        let blob = Blob { size, exec, tick: self.tick };
        self.total = self.total.saturating_add(blob.bytes());
        self.lru.insert(blob.tick, d);
        self.blobs.insert(d, blob);
    }
}

impl fmt::Debug for BlobCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobCache")
            .field("dir", &self.inner.dir)
            .field("max_bytes", &self.inner.max_bytes)
            .finish_non_exhaustive()
    }
}

impl BlobCache {
    /// Opens (creating if needed) the cache at `dir`, bounded to `max_bytes`. Takes the
    /// directory's lock, empties `tmp/`, indexes the blobs present (recency from their access
    /// times) and evicts down to the bound.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, BlobCacheError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(BlobCacheError::Locked { dir: dir.to_owned() });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
        }
        let tmp = dir.join(TMP_DIR);
        clear_dir(&tmp)?;
        let mut state = State::default();
        let mut found = scan(dir)?;
        // Oldest access first, so the ticks replay the recency the disk remembers.
        found.sort_by_key(|f| (f.atime, f.digest));
        for f in found {
            state.add(f.digest, f.size, f.exec);
        }
        let inner = Inner {
            dir: dir.to_owned(),
            tmp,
            max_bytes,
            seq: AtomicU64::new(0),
            state: Mutex::new(state),
            _lock: lock,
        };
        let cache = Self { inner: Arc::new(inner) };
        {
            let mut st = cache.inner.lock();
            cache.inner.evict(&mut st, None);
        }
        Ok(cache)
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The bound in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.inner.max_bytes
    }

    /// Bytes held on disk (executable twins included). Tests only: nothing outside reads it.
    #[cfg(test)]
    pub(crate) fn total_bytes(&self) -> u64 {
        self.inner.lock().total
    }

    /// How many blobs are held.
    pub fn len(&self) -> usize {
        self.inner.lock().blobs.len()
    }

    /// Whether no blob is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether blob `d` is held. (It may be evicted right after unless it is pinned.)
    pub fn has(&self, d: &Digest) -> bool {
        self.inner.lock().blobs.contains_key(d)
    }

    /// Bytes of the given digests already held here (each distinct digest counted once): the
    /// coordinator prefers the worker that already holds most of a task's inputs.
    pub fn locality(&self, digests: &[Digest]) -> u64 {
        let st = self.inner.lock();
        let distinct: HashSet<&Digest> = digests.iter().collect();
        distinct.into_iter().filter_map(|d| st.blobs.get(d)).map(|b| b.size).sum()
    }

    /// Keeps the given blobs from being evicted until the guard is dropped. Digests not (yet)
    /// held are pinned too, so a blob fetched after pinning is protected from its arrival.
    pub fn pin(&self, digests: &[Digest]) -> PinGuard {
        let mut st = self.inner.lock();
        for d in digests {
            *st.pins.entry(*d).or_insert(0) += 1;
        }
        PinGuard { inner: Arc::clone(&self.inner), digests: digests.to_vec() }
    }

    /// Removes every blob no live exec root pins — a worker short of disk gives back what it
    /// can; returns how many blobs and bytes went.
    pub fn evict_unpinned(&self) -> (usize, u64) {
        self.inner.evict_unpinned()
    }

    /// A fresh, empty file in the cache's `tmp/` (same file system as the blobs, so
    /// [`insert_file`](Self::insert_file) can rename it) to write a download into. The
    /// caller removes it if it does not insert it.
    pub fn stage_file(&self) -> Result<(PathBuf, File), BlobCacheError> {
        self.inner.stage_file()
    }

    /// Files the staged file `staged` as blob `expected`, verifying its bytes, and returns the
    /// blob's path. The staged file is consumed either way: moved into the cache, or removed
    /// when its bytes do not hash to `expected` ([`BlobCacheError::DigestMismatch`]) or the
    /// blob was already there. A staged file on another file system is copied.
    pub fn insert_file(&self, staged: &Path, expected: &Digest) -> Result<PathBuf, BlobCacheError> {
        let meta = fs::symlink_metadata(staged).map_err(io_err(staged))?;
        if !meta.is_file() {
            return Err(BlobCacheError::NotAFile { path: staged.to_owned() });
        }
        // Move it where nobody else writes before hashing, so what is hashed is what is kept.
        let tmp = self.inner.adopt(staged)?;
        let finished = finish_blob(&tmp, BLOB_MODE, Some(expected));
        match finished {
            Ok(size) => self.inner.commit(&tmp, expected, size),
            Err(e) => {
                remove_quietly(&tmp);
                Err(e)
            }
        }
    }

    /// Files `bytes` as blob `expected`, verifying them first (a mismatch writes nothing), and
    /// returns the blob's path. Tests only: the worker files blobs from staged files.
    #[cfg(test)]
    pub(crate) fn insert_bytes(
        &self,
        bytes: &[u8],
        expected: &Digest,
    ) -> Result<PathBuf, BlobCacheError> {
        let actual = Digest::of(bytes);
        if actual != *expected {
            return Err(BlobCacheError::DigestMismatch { expected: *expected, actual });
        }
        if self.has(expected) {
            let mut st = self.inner.lock();
            if st.blobs.contains_key(expected) {
                st.touch(expected);
                return Ok(self.inner.blob_path(expected));
            }
        }
        let (tmp, mut file) = self.inner.stage_file()?;
        let written = std::io::Write::write_all(&mut file, bytes);
        drop(file);
        let finished =
            written.map_err(io_err(&tmp)).and_then(|()| finish_blob(&tmp, BLOB_MODE, None));
        match finished {
            Ok(size) => self.inner.commit(&tmp, expected, size),
            Err(e) => {
                remove_quietly(&tmp);
                Err(e)
            }
        }
    }

    /// The path of blob `d` — its executable twin when `exec`, made now if it does not exist
    /// yet — and marks it most recently used. `None` when the blob is not held, or when the
    /// twin could not be made (logged; [`try_path`](Self::try_path) returns that error).
    ///
    /// Pin a blob before relying on its path: an unpinned blob may be evicted at any time.
    pub fn path(&self, d: &Digest, exec: bool) -> Option<PathBuf> {
        match self.try_path(d, exec) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(digest = %d.short(), error = %e, "could not make an executable blob");
                None
            }
        }
    }

    /// [`path`](Self::path), with the error of making the executable twin.
    pub fn try_path(&self, d: &Digest, exec: bool) -> Result<Option<PathBuf>, BlobCacheError> {
        let need_twin = {
            let mut st = self.inner.lock();
            let Some(blob) = st.blobs.get(d) else { return Ok(None) };
            let need = exec && !blob.exec;
            st.touch(d);
            need
        };
        let base = self.inner.blob_path(d);
        // Recency for the next open; best effort (a blob evicted meanwhile has no file).
        let _ = set_times_nofollow(&base, TimeSpec::UTIME_NOW, TimeSpec::UTIME_OMIT);
        if !exec {
            return Ok(Some(base));
        }
        let twin = exec_path(&base);
        if !need_twin {
            return Ok(Some(twin));
        }
        // Copy outside the lock. The open file keeps the bytes readable even if the blob is
        // evicted meanwhile; the index decides below whether the twin is still wanted.
        let src = match File::open(&base) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&base)(e)),
        };
        let (tmp, mut out) = self.inner.stage_file()?;
        let copied = io::copy(&mut &src, &mut out).map_err(io_err(&tmp));
        drop(out);
        let finished = copied.and_then(|_| finish_blob(&tmp, EXEC_BLOB_MODE, Some(d)));
        if let Err(e) = finished {
            remove_quietly(&tmp);
            return Err(e);
        }
        let mut st = self.inner.lock();
        match st.blobs.get_mut(d) {
            Some(blob) if !blob.exec => {
                if let Err(e) = fs::rename(&tmp, &twin) {
                    drop(st);
                    remove_quietly(&tmp);
                    return Err(io_err(&twin)(e));
                }
                blob.exec = true;
                let size = blob.size;
                st.total = st.total.saturating_add(size);
                self.inner.evict(&mut st, Some(d));
                Ok(Some(twin))
            }
            // Another caller made the twin first.
            Some(_) => {
                drop(st);
                remove_quietly(&tmp);
                Ok(Some(twin))
            }
            // Evicted while we copied.
            None => {
                drop(st);
                remove_quietly(&tmp);
                Ok(None)
            }
        }
    }
}

/// Keeps blobs from being evicted while it lives (see [`BlobCache::pin`]).
pub struct PinGuard {
    inner: Arc<Inner>,
    digests: Vec<Digest>,
}

impl fmt::Debug for PinGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinGuard").field("blobs", &self.digests.len()).finish()
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        for d in &self.digests {
            if let Some(n) = st.pins.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    st.pins.remove(d);
                }
            }
        }
        // Pins may have held the cache over its bound.
        self.inner.evict(&mut st, None);
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn blob_path(&self, d: &Digest) -> PathBuf {
        let hex = d.to_hex();
        self.dir.join(&hex[..2]).join(hex)
    }

    fn stage_file(&self) -> Result<(PathBuf, File), BlobCacheError> {
        let mut last = None;
        for _ in 0..STAGE_ATTEMPTS {
            let path = self.tmp.join(format!(
                "{}-{}.part",
                std::process::id(),
                self.seq.fetch_add(1, Ordering::Relaxed)
            ));
            match File::options().write(true).create_new(true).mode(0o600).open(&path) {
                Ok(f) => return Ok((path, f)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(io_err(&path)(e)),
            }
        }
        Err(io_err(&self.tmp)(last.unwrap_or_else(|| ErrorKind::AlreadyExists.into())))
    }

    /// Moves `staged` into `tmp/` (rename, or copy + remove across file systems).
    fn adopt(&self, staged: &Path) -> Result<PathBuf, BlobCacheError> {
        let (tmp, out) = self.stage_file()?;
        match fs::rename(staged, &tmp) {
            Ok(()) => return Ok(tmp),
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {}
            Err(e) => {
                remove_quietly(&tmp);
                return Err(io_err(staged)(e));
            }
        }
        let copied = File::open(staged)
            .and_then(|src| io::copy(&mut &src, &mut &out))
            .map_err(io_err(staged));
        drop(out);
        remove_quietly(staged);
        match copied {
            Ok(_) => Ok(tmp),
            Err(e) => {
                remove_quietly(&tmp);
                Err(e)
            }
        }
    }

    /// Renames the finished `tmp` to blob `d` (or drops it if `d` is already held), records
    /// it and evicts down to the bound — never `d` itself: its caller is about to use it.
    fn commit(&self, tmp: &Path, d: &Digest, size: u64) -> Result<PathBuf, BlobCacheError> {
        let dest = self.blob_path(d);
        let mut st = self.lock();
        if st.blobs.contains_key(d) {
            st.touch(d);
            drop(st);
            remove_quietly(tmp);
            return Ok(dest);
        }
        let filed = match dest.parent() {
            Some(shard) => fs::create_dir_all(shard).map_err(io_err(shard)),
            None => Ok(()),
        }
        .and_then(|()| fs::rename(tmp, &dest).map_err(io_err(&dest)));
        if let Err(e) = filed {
            drop(st);
            remove_quietly(tmp);
            return Err(e);
        }
        // A stale twin from before (its blob was lost but not the twin) must not be trusted.
        remove_quietly(&exec_path(&dest));
        st.add(*d, size, false);
        self.evict(&mut st, Some(d));
        Ok(dest)
    }

    fn evict_unpinned(&self) -> (usize, u64) {
        let mut st = self.lock();
        let before = (st.blobs.len(), st.total);
        let victims: Vec<(u64, Digest)> = st
            .lru
            .iter()
            .filter(|(_, d)| !st.pins.contains_key(*d))
            .map(|(&tick, d)| (tick, *d))
            .collect();
        self.remove_victims(&mut st, victims);
        (before.0 - st.blobs.len(), before.1.saturating_sub(st.total))
    }

    /// Unlinks `victims` (and their executable twins) and drops them from the index.
    fn remove_victims(&self, st: &mut State, victims: Vec<(u64, Digest)>) {
        for (tick, d) in victims {
            st.lru.remove(&tick);
            let Some(b) = st.blobs.remove(&d) else { continue };
            st.total = st.total.saturating_sub(b.bytes());
            let base = self.blob_path(&d);
            for path in [exec_path(&base), base] {
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "could not evict a blob")
                    }
                }
            }
        }
    }

    /// Removes least recently used, unpinned blobs (never `keep`) until the total is within
    /// the bound. Runs under the lock so the index and the directory agree; unlinks are quick.
    fn evict(&self, st: &mut State, keep: Option<&Digest>) {
        if st.total <= self.max_bytes {
            return;
        }
        let mut excess = st.total - self.max_bytes;
        let mut victims = Vec::new();
        for (&tick, d) in &st.lru {
            if excess == 0 {
                break;
            }
            if keep == Some(d) || st.pins.contains_key(d) {
                continue;
            }
            if let Some(b) = st.blobs.get(d) {
                excess = excess.saturating_sub(b.bytes());
                victims.push((tick, *d));
            }
        }
        self.remove_victims(st, victims);
        if st.total > self.max_bytes {
            tracing::debug!(
                total = st.total,
                max = self.max_bytes,
                "blob cache over its bound: the rest is pinned by live exec roots"
            );
        }
    }
}

/// Hashes the file at `path` (checking it against `expected` if given), makes it read-only
/// with `mode`, stamps [`FIXED_MTIME_SECS`] and now as its access time, and fsyncs it.
/// Returns its size.
fn finish_blob(path: &Path, mode: u32, expected: Option<&Digest>) -> Result<u64, BlobCacheError> {
    let file = File::open(path).map_err(io_err(path))?;
    if let Some(expected) = expected {
        let actual = Digest::of_reader(&file).map_err(io_err(path))?;
        if actual != *expected {
            return Err(BlobCacheError::DigestMismatch { expected: *expected, actual });
        }
    }
    let size = file.metadata().map_err(io_err(path))?.len();
    file.set_permissions(fs::Permissions::from_mode(mode)).map_err(io_err(path))?;
    let times = FileTimes::new().set_accessed(SystemTime::now()).set_modified(fixed_mtime());
    file.set_times(times).map_err(io_err(path))?;
    file.sync_all().map_err(io_err(path))?;
    Ok(size)
}

/// [`FIXED_MTIME_SECS`] as a `SystemTime`.
pub(crate) fn fixed_mtime() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(FIXED_MTIME_SECS.unsigned_abs())
}

/// Sets a path's access and modification times without following a final symlink
/// (`TimeSpec::UTIME_OMIT` leaves one alone, `UTIME_NOW` stamps now).
pub(crate) fn set_times_nofollow(path: &Path, atime: TimeSpec, mtime: TimeSpec) -> io::Result<()> {
    utimensat(nix::fcntl::AT_FDCWD, path, &atime, &mtime, UtimensatFlags::NoFollowSymlink)
        .map_err(|e| io::Error::from_raw_os_error(e as i32))
}

/// The executable twin of the blob at `base`.
fn exec_path(base: &Path) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(EXEC_SUFFIX);
    PathBuf::from(s)
}

fn remove_quietly(path: &Path) {
    if let Err(e) = fs::remove_file(path)
        && e.kind() != ErrorKind::NotFound
    {
        tracing::debug!(path = %path.display(), error = %e, "could not remove a temporary file");
    }
}

/// Creates `dir` if missing and removes everything in it.
fn clear_dir(dir: &Path) -> Result<(), BlobCacheError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let path = entry.path();
        let is_dir = entry.file_type().map_err(io_err(&path))?.is_dir();
        let removed = if is_dir { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        removed.map_err(io_err(&path))?;
    }
    Ok(())
}

/// A blob found on disk at open.
struct Found {
    digest: Digest,
    size: u64,
    exec: bool,
    /// Last access, nanoseconds since the epoch.
    atime: i128,
}

/// Indexes `dir/<2 hex>/<64 hex>[.x]`. Twins without their blob are removed; names that are
/// not blobs are left alone.
fn scan(dir: &Path) -> Result<Vec<Found>, BlobCacheError> {
    let mut found: HashMap<Digest, Found> = HashMap::new();
    let mut twins: Vec<(Digest, PathBuf)> = Vec::new();
    for shard in fs::read_dir(dir).map_err(io_err(dir))? {
        let shard = shard.map_err(io_err(dir))?;
        let name = shard.file_name();
        let Some(prefix) = name.to_str().filter(|n| n.len() == 2 && is_lower_hex(n)) else {
            continue;
        };
        let shard_path = shard.path();
        if !shard.file_type().map_err(io_err(&shard_path))?.is_dir() {
            continue;
        }
        for entry in fs::read_dir(&shard_path).map_err(io_err(&shard_path))? {
            let entry = entry.map_err(io_err(&shard_path))?;
            let path = entry.path();
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str() else { continue };
            let (hex, twin) = match name.strip_suffix(EXEC_SUFFIX) {
                Some(hex) => (hex, true),
                None => (name, false),
            };
            let Some(digest) =
                hex.parse::<Digest>().ok().filter(|_| hex.starts_with(prefix) && is_lower_hex(hex))
            else {
                continue;
            };
            let meta = fs::symlink_metadata(&path).map_err(io_err(&path))?;
            if !meta.is_file() {
                continue;
            }
            if twin {
                twins.push((digest, path));
                continue;
            }
            let atime = i128::from(meta.atime()) * 1_000_000_000 + i128::from(meta.atime_nsec());
            found.insert(digest, Found { digest, size: meta.len(), exec: false, atime });
        }
    }
    for (digest, path) in twins {
        match found.get_mut(&digest) {
            Some(f) => f.exec = true,
            None => remove_quietly(&path),
        }
    }
    Ok(found.into_values().collect())
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests;
