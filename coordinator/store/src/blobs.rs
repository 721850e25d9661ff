//! Blob files: `blobs/<first 2 hex>/<64 hex>`, named by the BLAKE3 digest of their bytes.
//!
//! Writes go temp file in `tmp/` → fsync → rename, so a blob is either absent or complete
//! under its name. The blob directory is not fsynced after the rename: a crash can lose a
//! fresh blob, which is a miss (see the module contracts in [`super`]), never wrong bytes.
//! Reads verify: bytes that do not hash to the name are moved to `quarantine/`.

use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use prova_protocol::Digest;

use super::error::{CacheError, io};
use super::store::Store;
use super::{BLOBS_DIR, QUARANTINE_DIR, TMP_DIR};

/// The most [`Store::read_blob_verified`] reads into memory, whatever the caller asks: in-memory
/// reads are for logs (whose capture is bounded far below this); artifacts are streamed
/// through [`Store::open_blob`].
pub const MAX_BLOB_READ_BYTES: u64 = 64 << 20;

/// Tries at a fresh staging name before giving up (names are unique per process by a
/// counter, so a clash means a stale file from a process with our pid; a few tries suffice).
const STAGE_ATTEMPTS: u32 = 8;

/// Makes staging and quarantine names unique within the process.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Where blob `d` lives under cache directory `dir`.
pub(crate) fn blob_path_in(dir: &Path, d: &Digest) -> PathBuf {
    let hex = d.to_hex();
    dir.join(BLOBS_DIR).join(&hex[..2]).join(hex)
}

/// A name no other writer uses: pid, a process-wide counter, and the time.
pub(crate) fn unique_name(suffix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{}-{nanos}{suffix}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

impl Store {
    /// Where blob `d` lives (whether or not it is there).
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        blob_path_in(self.dir(), d)
    }

    /// Whether blob `d` is on disk (not whether its bytes are right: reads verify).
    pub fn has_blob(&self, d: &Digest) -> bool {
        fs::symlink_metadata(self.blob_path(d)).is_ok_and(|m| m.is_file())
    }

    /// A new, empty file in `tmp/` to write a blob (or anything else to be renamed into the
    /// cache) into. The caller removes it if it does not hand it to
    /// [`put_blob_file`](Self::put_blob_file); `prune` removes forgotten ones after an hour.
    pub fn stage_file(&self) -> Result<(PathBuf, File), CacheError> {
        let tmp = self.dir().join(TMP_DIR);
        let mut last = None;
        for _ in 0..STAGE_ATTEMPTS {
            let path = tmp.join(unique_name(".part"));
            match File::options().write(true).create_new(true).open(&path) {
                Ok(f) => return Ok((path, f)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(io(&path)(e)),
            }
        }
        let e = last.unwrap_or_else(|| ErrorKind::AlreadyExists.into());
        Err(io(&tmp)(e))
    }

    /// Files the staged file `staged` (in `tmp/`, or anywhere on the same file system) as a
    /// blob and returns its digest and size. The staged file is gone afterwards either way
    /// it succeeds: renamed into `blobs/`, or removed because that blob already exists.
    ///
    /// `expected`: the digest the caller computed while writing the file (a hashing writer).
    /// It is trusted, and the file is not read again — a large artifact is not hashed twice.
    /// A wrong promise cannot serve wrong bytes: every read verifies and quarantines, so it
    /// costs a miss. With `None` the file is hashed here.
    pub fn put_blob_file(
        &self,
        staged: &Path,
        expected: Option<&Digest>,
    ) -> Result<(Digest, u64), CacheError> {
        self.writable("put_blob_file")?;
        let meta = fs::symlink_metadata(staged).map_err(io(staged))?;
        if !meta.is_file() {
            let e = std::io::Error::new(ErrorKind::InvalidInput, "a staged blob must be a file");
            return Err(io(staged)(e));
        }
        let file = File::open(staged).map_err(io(staged))?;
        let digest = match expected {
            Some(d) => *d,
            None => Digest::of_reader(&file).map_err(io(staged))?,
        };
        file.sync_all().map_err(io(staged))?;
        drop(file);
        self.file_staged(staged, &digest)?;
        Ok((digest, meta.len()))
    }

    /// Files `bytes` as a blob (temp → fsync → rename) and returns its digest.
    pub fn put_blob_bytes(&self, bytes: &[u8]) -> Result<Digest, CacheError> {
        self.writable("put_blob_bytes")?;
        let digest = Digest::of(bytes);
        if self.has_blob(&digest) {
            refresh_mtime(&self.blob_path(&digest));
            return Ok(digest);
        }
        let (path, mut file) = self.stage_file()?;
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        drop(file);
        if let Err(e) = written {
            let _ = fs::remove_file(&path);
            return Err(io(&path)(e));
        }
        self.file_staged(&path, &digest)?;
        Ok(digest)
    }

    /// Renames a synced staged file to blob `digest`, or drops it if the blob is there.
    fn file_staged(&self, staged: &Path, digest: &Digest) -> Result<(), CacheError> {
        let dest = self.blob_path(digest);
        if self.has_blob(digest) {
            fs::remove_file(staged).map_err(io(staged))?;
            // A concurrent prune spares unreferenced blobs with a fresh mtime: this one is
            // about to be referenced by our caller's entry.
            refresh_mtime(&dest);
            return Ok(());
        }
        let result = match dest.parent() {
            Some(parent) => fs::create_dir_all(parent).map_err(io(parent)),
            None => Ok(()),
        }
        .and_then(|()| fs::rename(staged, &dest).map_err(io(&dest)));
        if result.is_err() {
            let _ = fs::remove_file(staged);
        }
        result
    }

    /// Opens blob `d` for streaming (artifact restore), `None` when it is not there. The
    /// bytes are NOT verified: the caller hashes what it reads and calls
    /// [`quarantine`](Self::quarantine) (and treats the entry as a miss) on a mismatch.
    pub fn open_blob(&self, d: &Digest) -> Result<Option<File>, CacheError> {
        let path = self.blob_path(d);
        match File::open(&path) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Reads a small blob (a log) whole and verifies it. `Ok(None)` when it is missing or its
    /// bytes do not match `d` (then it is quarantined); [`CacheError::TooLarge`] when it is
    /// longer than `max_len` (capped at [`MAX_BLOB_READ_BYTES`]).
    pub fn read_blob_verified(
        &self,
        d: &Digest,
        max_len: u64,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        let limit = max_len.min(MAX_BLOB_READ_BYTES);
        let Some(file) = self.open_blob(d)? else {
            return Ok(None);
        };
        let path = self.blob_path(d);
        let len = file.metadata().map_err(io(&path))?.len();
        if len > limit {
            return Err(CacheError::TooLarge { digest: *d, limit });
        }
        // `len` is within `limit`; `take` guards against a file that grows while we read.
        let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.take(limit + 1).read_to_end(&mut buf).map_err(io(&path))?;
        if buf.len() as u64 > limit {
            return Err(CacheError::TooLarge { digest: *d, limit });
        }
        if Digest::of(&buf) != *d {
            self.quarantine(d)?;
            return Ok(None);
        }
        Ok(Some(buf))
    }

    /// Hashes blob `d` (streaming) and quarantines it on a mismatch. `false` when it is
    /// missing or was quarantined.
    pub fn verify_blob(&self, d: &Digest) -> Result<bool, CacheError> {
        let Some(file) = self.open_blob(d)? else {
            return Ok(false);
        };
        let actual = Digest::of_reader(file).map_err(io(&self.blob_path(d)))?;
        if actual == *d {
            return Ok(true);
        }
        self.quarantine(d)?;
        Ok(false)
    }

    /// Moves blob `d` to `quarantine/<hex>-<unique>` (kept for a post-mortem; prune drops
    /// old ones). Idempotent: an absent blob is fine. Entry rows that reference it are left
    /// alone: a later read of them is a miss, and the re-run's `put_entry` repairs the row.
    pub fn quarantine(&self, d: &Digest) -> Result<(), CacheError> {
        if self.is_read_only() {
            // The read was already a miss; a read-only store cannot move the file.
            tracing::warn!(blob = %d, "blob bytes did not match its digest (read-only cache: left in place)");
            return Ok(());
        }
        let src = self.blob_path(d);
        let dest =
            self.dir().join(QUARANTINE_DIR).join(format!("{}-{}", d.to_hex(), unique_name("")));
        match fs::rename(&src, &dest) {
            Ok(()) => {
                tracing::warn!(blob = %d, to = %dest.display(), "blob bytes did not match its digest; quarantined");
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&src)(e)),
        }
    }
}

/// Sets a blob's mtime to now, best effort (the file may belong to another user of a shared
/// cache directory; then prune's grace period is all that protects it).
fn refresh_mtime(path: &Path) {
    let r = File::open(path).and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = r {
        tracing::debug!(path = %path.display(), error = %e, "cannot refresh a blob's mtime");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_is_empty(p: &Path) -> bool {
        fs::read_dir(p).unwrap().next().is_none()
    }

    #[test]
    fn bytes_round_trip_and_dedupe() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let d = store.put_blob_bytes(b"hello").unwrap();
        assert_eq!(d, Digest::of(b"hello"));
        assert!(store.has_blob(&d));
        let hex = d.to_hex();
        assert_eq!(store.blob_path(&d), dir.path().join("blobs").join(&hex[..2]).join(&hex));
        assert_eq!(store.read_blob_verified(&d, 100).unwrap().unwrap(), b"hello");
        assert_eq!(store.put_blob_bytes(b"hello").unwrap(), d);
        assert!(dir_is_empty(&store.tmp_dir()), "no staging file left behind");
        assert!(store.verify_blob(&d).unwrap());
    }

    #[test]
    fn staged_file_round_trip_with_and_without_a_promised_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (path, mut f) = store.stage_file().unwrap();
        assert!(path.starts_with(store.tmp_dir()));
        f.write_all(b"artifact").unwrap();
        drop(f);
        let (d, size) = store.put_blob_file(&path, None).unwrap();
        assert_eq!((d, size), (Digest::of(b"artifact"), 8));
        assert!(!path.exists());
        assert_eq!(store.read_blob_verified(&d, 8).unwrap().unwrap(), b"artifact");

        // The caller hashed while writing: trusted, not re-read.
        let (path, mut f) = store.stage_file().unwrap();
        f.write_all(b"second").unwrap();
        drop(f);
        let promised = Digest::of(b"second");
        assert_eq!(store.put_blob_file(&path, Some(&promised)).unwrap(), (promised, 6));
        assert!(store.has_blob(&promised));

        // Already there: the staged copy is dropped.
        let (path, mut f) = store.stage_file().unwrap();
        f.write_all(b"second").unwrap();
        drop(f);
        assert_eq!(store.put_blob_file(&path, None).unwrap(), (promised, 6));
        assert!(!path.exists());
        assert!(dir_is_empty(&store.tmp_dir()));

        // Not a file.
        let sub = store.tmp_dir().join("a-dir");
        fs::create_dir(&sub).unwrap();
        assert!(matches!(store.put_blob_file(&sub, None), Err(CacheError::Io { .. })));
    }

    #[test]
    fn a_flipped_byte_is_a_miss_and_the_blob_is_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let d = store.put_blob_bytes(b"the log of a task").unwrap();
        let path = store.blob_path(&d);
        let mut bytes = fs::read(&path).unwrap();
        bytes[3] ^= 0x01;
        fs::write(&path, &bytes).unwrap();

        assert_eq!(store.read_blob_verified(&d, 1 << 20).unwrap(), None);
        assert!(!path.exists());
        assert!(!store.has_blob(&d));
        let quarantined: Vec<String> = fs::read_dir(store.quarantine_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(quarantined.len(), 1);
        assert!(quarantined[0].starts_with(&d.to_hex()), "{quarantined:?}");
        // Idempotent, and the blob can be filed again.
        store.quarantine(&d).unwrap();
        assert_eq!(store.read_blob_verified(&d, 1 << 20).unwrap(), None);
        store.put_blob_bytes(b"the log of a task").unwrap();
        assert!(store.verify_blob(&d).unwrap());
    }

    #[test]
    fn verify_blob_quarantines_a_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let d = store.put_blob_bytes(&[7u8; 100_000]).unwrap();
        fs::write(store.blob_path(&d), [7u8; 99_999]).unwrap();
        assert!(!store.verify_blob(&d).unwrap());
        assert!(!store.has_blob(&d));
        assert!(!store.verify_blob(&d).unwrap());
        assert!(store.open_blob(&d).unwrap().is_none());
    }

    #[test]
    fn missing_and_oversized_reads() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.read_blob_verified(&Digest::of(b"absent"), 10).unwrap(), None);
        let d = store.put_blob_bytes(&[1u8; 11]).unwrap();
        assert!(matches!(
            store.read_blob_verified(&d, 10),
            Err(CacheError::TooLarge { limit: 10, .. })
        ));
        assert!(store.has_blob(&d), "too large is an error, not a quarantine");
        assert_eq!(store.read_blob_verified(&d, u64::MAX).unwrap().unwrap().len(), 11);
    }
}
