//! Whether an index may skip `quick_check` at open: it is the file prova itself closed last,
//! cleanly, after checking it when it was opened.
//!
//! `quick_check` reads every page of the index — the largest fixed cost of a warm run's cache
//! open on a big workspace — although a file nothing else has written since prova's own last
//! clean close cannot have been damaged by anything `quick_check` would catch that SQLite's
//! own writes would not have been. So [`Store::close`](super::Store::close), when its close
//! checkpointed the WAL away (it was the last connection), records the index's identity and
//! stamps (device, inode, size, mtime, ctime) in `index.sqlite.closed`; an open whose index
//! still has exactly those stamps and no `-wal` file skips the check. Anything else — a file
//! written by anyone since (its ctime moves, and cannot be set back), a crash (the `-wal`
//! stays), a marker missing or unreadable — checks, as every open used to. The marker only
//! ever saves work: it never makes a damaged file pass, since each read of a damaged page
//! still fails with [`CacheError::IntegrityCheck`](super::CacheError::IntegrityCheck).

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::INDEX_FILE;

/// The marker beside the index.
const MARKER: &str = "index.sqlite.closed";

fn stamps(index: &Path) -> Option<String> {
    let m = fs::symlink_metadata(index).ok()?;
    Some(format!(
        "v1 {} {} {} {}.{} {}.{}\n",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

fn wal(dir: &Path) -> PathBuf {
    dir.join(format!("{INDEX_FILE}-wal"))
}

/// Whether the index of cache directory `dir` is as prova's last clean close left it.
pub(crate) fn unchanged_since_close(dir: &Path) -> bool {
    if fs::symlink_metadata(wal(dir)).is_ok() {
        return false;
    }
    let (Ok(marker), Some(now)) =
        (fs::read_to_string(dir.join(MARKER)), stamps(&dir.join(INDEX_FILE)))
    else {
        return false;
    };
    marker == now
}

/// After a clean close of `dir`'s index (the caller closed its connection without an error):
/// records its stamps when the WAL is gone, else removes a stale marker. Best effort: a
/// marker that cannot be written only means the next open checks.
pub(crate) fn record_close(dir: &Path) {
    let marker = dir.join(MARKER);
    let stamped =
        if fs::symlink_metadata(wal(dir)).is_ok() { None } else { stamps(&dir.join(INDEX_FILE)) };
    let Some(text) = stamped else {
        let _ = fs::remove_file(&marker);
        return;
    };
    // A run that wrote nothing to the index (a warm no-op) leaves the same stamps: the
    // marker already says so, and making a file to rename over it cost a create per run.
    if fs::read_to_string(&marker).is_ok_and(|old| old == text) {
        return;
    }
    let tmp = dir.join(format!("{MARKER}.{}", std::process::id()));
    if fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, &marker)).is_err() {
        let _ = fs::remove_file(&tmp);
        let _ = fs::remove_file(&marker);
    }
}

/// Forgets the marker (an open that found it stale, or a file set aside).
pub(crate) fn forget(dir: &Path) {
    let _ = fs::remove_file(dir.join(MARKER));
}

#[cfg(test)]
mod tests {
    use super::super::Store;
    use super::*;
    use crate::test_util::entry;

    fn fill(dir: &Path) {
        let mut store = Store::open(dir).unwrap();
        for i in 0..50u64 {
            store.put_entry(&entry(i, &format!("p{i}#build"), i as i64)).unwrap();
        }
        store.close().unwrap();
    }

    #[test]
    fn a_clean_close_marks_the_index_and_any_write_since_unmarks_it() {
        let dir = tempfile::tempdir().unwrap();
        fill(dir.path());
        assert!(unchanged_since_close(dir.path()), "a clean close leaves the marker");
        // Opened again (checked or not) and still open: the WAL exists, so not unchanged.
        let store = Store::open(dir.path()).unwrap();
        store.conn().execute("UPDATE entries SET duration_ms = 7", []).unwrap();
        assert!(!unchanged_since_close(dir.path()), "an open index with a WAL passed");
        store.close().unwrap();
        assert!(unchanged_since_close(dir.path()));
        // Rewritten from outside with the same bytes: the ctime moved.
        let index = dir.path().join(INDEX_FILE);
        let bytes = fs::read(&index).unwrap();
        fs::write(&index, &bytes).unwrap();
        assert!(!unchanged_since_close(dir.path()), "an outside write passed");
    }

    #[test]
    fn a_close_after_no_write_keeps_the_marker_and_one_after_a_write_renews_it() {
        let dir = tempfile::tempdir().unwrap();
        fill(dir.path());
        let marker = dir.path().join(MARKER);
        let ino = |p: &Path| fs::metadata(p).unwrap().ino();
        let first = ino(&marker);
        // A warm no-op: opened (unchecked), read, closed.
        let store = Store::open(dir.path()).unwrap();
        store.conn().query_row("SELECT count(*) FROM entries", [], |_| Ok(())).unwrap();
        store.close().unwrap();
        assert_eq!(ino(&marker), first, "the marker was made again for the same stamps");
        assert!(unchanged_since_close(dir.path()));
        // A write: the index's stamps move, and so does the marker.
        let store = Store::open(dir.path()).unwrap();
        store.conn().execute("UPDATE entries SET duration_ms = 9", []).unwrap();
        store.close().unwrap();
        assert_eq!(
            fs::read_to_string(&marker).unwrap(),
            stamps(&dir.path().join(INDEX_FILE)).unwrap()
        );
        assert!(unchanged_since_close(dir.path()));
    }

    #[test]
    fn a_damaged_index_is_caught_at_open_after_a_clean_close() {
        let dir = tempfile::tempdir().unwrap();
        fill(dir.path());
        let index = dir.path().join(INDEX_FILE);
        let mut bytes = fs::read(&index).unwrap();
        let len = bytes.len();
        for b in &mut bytes[len / 4..len * 3 / 4] {
            *b = 0xA5;
        }
        fs::write(&index, &bytes).unwrap();
        assert!(matches!(Store::open(dir.path()), Err(crate::CacheError::IntegrityCheck(_))));
        assert!(matches!(
            Store::open_read_only(dir.path()),
            Err(crate::CacheError::IntegrityCheck(_))
        ));
    }

    #[test]
    fn a_missing_or_foreign_marker_means_a_check() {
        let dir = tempfile::tempdir().unwrap();
        fill(dir.path());
        fs::write(dir.path().join(MARKER), "v1 0 0 0 0.0 0.0\n").unwrap();
        assert!(!unchanged_since_close(dir.path()));
        forget(dir.path());
        assert!(!unchanged_since_close(dir.path()));
    }
}
