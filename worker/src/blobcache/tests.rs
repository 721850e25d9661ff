//! The blob cache on a real file system: verification, twins, eviction, pins, reopening.

use super::*;

/// Opens (or reopens) the cache in `dir`; see [`reopen`] for why it may have to wait.
fn cache(dir: &Path, max: u64) -> BlobCache {
    reopen(dir, max)
}

/// Opens `dir`, also right after a cache of it was dropped. Other tests of this process fork children
/// (the executor's tests), and a child forked while the lock file was open holds its
/// descriptor, and so the `flock`, until it execs (the descriptor is close-on-exec): under
/// load that window lasts a moment. Retried while locked, a bounded number of times.
fn reopen(dir: &Path, max: u64) -> BlobCache {
    for _ in 0..200 {
        match BlobCache::open(dir, max) {
            Err(BlobCacheError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            other => return other.unwrap(),
        }
    }
    panic!("{} stayed locked after its cache was dropped", dir.display())
}

fn blob_of(c: &BlobCache, fill: u8, len: usize) -> Digest {
    let bytes = vec![fill; len];
    let d = Digest::of(&bytes);
    c.insert_bytes(&bytes, &d).unwrap();
    d
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn ino(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap().ino()
}

#[test]
fn insert_file_verifies_and_files_under_the_digest() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 1 << 20);
    let staged = t.path().join("staged");
    fs::write(&staged, b"hello").unwrap();
    let d = Digest::of(b"hello");
    let path = c.insert_file(&staged, &d).unwrap();
    let hex = d.to_hex();
    assert_eq!(path, t.path().join("blobs").join(&hex[..2]).join(&hex));
    assert_eq!(fs::read(&path).unwrap(), b"hello");
    assert_eq!(mode(&path), 0o444);
    assert_eq!(fs::metadata(&path).unwrap().mtime(), FIXED_MTIME_SECS);
    assert!(!staged.exists(), "the staged file is consumed");
    assert!(c.has(&d));
    assert_eq!(c.path(&d, false), Some(path));
    assert_eq!((c.len(), c.total_bytes()), (1, 5));

    // The same bytes again: deduplicated, staged file still consumed.
    fs::write(&staged, b"hello").unwrap();
    c.insert_file(&staged, &d).unwrap();
    assert!(!staged.exists());
    assert_eq!((c.len(), c.total_bytes()), (1, 5));
}

#[test]
fn a_mismatch_is_refused_and_the_staged_file_removed() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 1 << 20);
    let staged = t.path().join("staged");
    fs::write(&staged, b"evil").unwrap();
    let promised = Digest::of(b"good");
    let err = c.insert_file(&staged, &promised).unwrap_err();
    assert!(
        matches!(err, BlobCacheError::DigestMismatch { expected, actual }
            if expected == promised && actual == Digest::of(b"evil")),
        "{err}"
    );
    assert!(!staged.exists());
    assert!(!c.has(&promised));
    assert_eq!(c.path(&promised, false), None);
    assert!(matches!(
        c.insert_bytes(b"evil", &promised),
        Err(BlobCacheError::DigestMismatch { .. })
    ));
    assert!(c.is_empty());
    assert_eq!(fs::read_dir(t.path().join("blobs/tmp")).unwrap().count(), 0);
    // Not a file: refused, left alone.
    let dir = t.path().join("a-dir");
    fs::create_dir(&dir).unwrap();
    assert!(matches!(c.insert_file(&dir, &promised), Err(BlobCacheError::NotAFile { .. })));
}

#[test]
fn the_executable_twin_is_a_separate_0555_inode_with_the_same_bytes() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 1 << 20);
    let d = blob_of(&c, b'x', 10);
    let base = c.path(&d, false).unwrap();
    let twin = c.path(&d, true).unwrap();
    assert_eq!(twin.file_name().unwrap().to_str().unwrap(), format!("{}.x", d.to_hex()));
    assert_eq!(mode(&base), 0o444);
    assert_eq!(mode(&twin), 0o555);
    assert_ne!(ino(&base), ino(&twin));
    assert_eq!(fs::read(&twin).unwrap(), fs::read(&base).unwrap());
    assert_eq!(c.total_bytes(), 20, "the twin counts against the bound");
    // Asking again reuses it.
    assert_eq!(c.path(&d, true), Some(twin.clone()));
    assert_eq!(c.total_bytes(), 20);
    // Reopening finds both.
    drop(c);
    let c = cache(&t.path().join("blobs"), 1 << 20);
    assert_eq!(c.total_bytes(), 20);
    assert_eq!(c.path(&d, true), Some(twin));
}

#[test]
fn least_recently_used_blobs_are_evicted_to_the_bound() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 300);
    let a = blob_of(&c, b'a', 100);
    let b = blob_of(&c, b'b', 100);
    let cc = blob_of(&c, b'c', 100);
    assert_eq!(c.total_bytes(), 300);
    let hex = b.to_hex();
    let b_path = t.path().join("blobs").join(&hex[..2]).join(&hex);
    assert!(b_path.is_file());
    // Use `a`: now `b` is the least recently used.
    assert!(c.path(&a, false).is_some());
    let d = blob_of(&c, b'd', 100);
    assert!(c.has(&a) && c.has(&cc) && c.has(&d));
    assert!(!c.has(&b));
    assert!(!b_path.exists(), "evicted blobs leave the disk");
    assert_eq!(c.total_bytes(), 300);
    // A bigger blob pushes out as many as needed (oldest first: c, then a).
    let big = blob_of(&c, b'e', 250);
    assert!(c.has(&big));
    assert!(!c.has(&cc) && !c.has(&a) && !c.has(&d));
    assert_eq!(c.total_bytes(), 250);
}

#[test]
fn pinned_blobs_survive_eviction_until_unpinned() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 200);
    let a = blob_of(&c, b'a', 100);
    let b = blob_of(&c, b'b', 100);
    let guard = c.pin(&[a, b]);
    let x = blob_of(&c, b'x', 100);
    assert!(c.has(&a) && c.has(&b) && c.has(&x), "pinned blobs stay, over the bound");
    assert_eq!(c.total_bytes(), 300);
    // The twin of a pinned blob is made too (and counted); the only unpinned blob goes
    // to make room.
    assert!(c.path(&a, true).is_some());
    assert!(c.has(&a) && c.has(&b) && !c.has(&x));
    assert_eq!(c.total_bytes(), 300);
    drop(guard);
    // Unpinning evicts down to the bound, least recently used first: `b` (`a` was used).
    assert!(!c.has(&b) && c.has(&a));
    assert_eq!(c.total_bytes(), 200);
    // A pin taken before the blob arrives protects it on arrival.
    let y_bytes = vec![b'y'; 150];
    let y = Digest::of(&y_bytes);
    let _pin_y = c.pin(&[y]);
    c.insert_bytes(&y_bytes, &y).unwrap();
    blob_of(&c, b'z', 100);
    assert!(c.has(&y));
}

#[test]
fn locality_counts_held_bytes_once_per_digest() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 1 << 20);
    let a = blob_of(&c, b'a', 10);
    let b = blob_of(&c, b'b', 32);
    let missing = Digest::of(b"not here");
    assert_eq!(c.locality(&[a, b, missing, a]), 42);
    assert_eq!(c.locality(&[missing]), 0);
    assert_eq!(c.locality(&[]), 0);
}

#[test]
fn reopening_keeps_blobs_and_recency_and_locks_the_directory() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("blobs");
    let c = cache(&dir, 1 << 20);
    assert!(matches!(BlobCache::open(&dir, 1), Err(BlobCacheError::Locked { .. })));
    let old = blob_of(&c, b'o', 100);
    let new = blob_of(&c, b'n', 100);
    let (old_path, new_path) = (c.path(&old, false).unwrap(), c.path(&new, false).unwrap());
    let stamp = |p: &Path, secs: i64| {
        set_times_nofollow(p, TimeSpec::new(secs, 0), TimeSpec::UTIME_OMIT).unwrap();
    };
    stamp(&old_path, 1_000_000_000);
    stamp(&new_path, 1_500_000_000);
    let (staged, _) = c.stage_file().unwrap();
    drop(c);
    assert!(staged.exists());
    // Reopened with room for one: the one used longest ago goes, tmp/ is emptied.
    let c = reopen(&dir, 150);
    assert!(c.has(&new) && !c.has(&old));
    assert!(!staged.exists());
    assert_eq!(fs::read(&new_path).unwrap(), vec![b'n'; 100]);
}

#[test]
fn concurrent_inserts_and_twins_keep_the_index_consistent() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 1 << 20);
    std::thread::scope(|s| {
        for i in 0..8u8 {
            let c = c.clone();
            s.spawn(move || {
                for j in 0..16u8 {
                    let bytes = vec![j; 64 + usize::from(j)];
                    let d = Digest::of(&bytes);
                    c.insert_bytes(&bytes, &d).unwrap();
                    if (i + j) % 3 == 0 {
                        assert!(c.path(&d, true).is_some());
                    }
                }
            });
        }
    });
    assert_eq!(c.len(), 16);
    let mut on_disk = 0;
    for j in 0..16u8 {
        let d = Digest::of(&vec![j; 64 + usize::from(j)]);
        let base = c.path(&d, false).unwrap();
        on_disk += fs::metadata(&base).unwrap().len();
        if let Ok(m) = fs::metadata(exec_path(&base)) {
            on_disk += m.len();
        }
    }
    assert_eq!(c.total_bytes(), on_disk);
}

#[test]
fn a_worker_short_of_disk_evicts_every_unpinned_blob_and_its_twin() {
    let t = tempfile::tempdir().unwrap();
    let c = cache(&t.path().join("blobs"), 1 << 20);
    let a = blob_of(&c, b'a', 100);
    let b = blob_of(&c, b'b', 100);
    let x = blob_of(&c, b'x', 50);
    let a_twin = c.path(&a, true).unwrap();
    let x_path = c.path(&x, false).unwrap();
    let pin = c.pin(&[b]);
    assert_eq!(c.evict_unpinned(), (2, 250), "a and its twin (200), x (50); b is pinned");
    assert!(!c.has(&a) && !c.has(&x) && c.has(&b));
    assert!(!a_twin.exists() && !x_path.exists(), "the files are gone too");
    assert_eq!(c.total_bytes(), 100);
    assert_eq!(c.evict_unpinned(), (0, 0), "nothing more to give");
    // Reopened, the cache agrees with its directory.
    drop(pin);
    drop(c);
    let c = reopen(&t.path().join("blobs"), 1 << 20);
    assert!(c.has(&b) && !c.has(&a) && c.len() == 1);
}
