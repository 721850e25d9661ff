//! Unit tests of [`super`] (readonly.rs): what a read-only store reads, refuses and skips.

use super::*;
use crate::test_util::{entry, key, memo_row};
use crate::{Execution, TRUSTED};

/// Every file under `dir` (relative) with its bytes.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(dir).unwrap().to_path_buf(), fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A cache dir with one entry, closed (no `-wal` / `-shm` left).
fn written() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    s.put_entry(&entry(1, "web#build", 10)).unwrap();
    s.memo_store("/ws", &[("a.txt".into(), memo_row(1))]).unwrap();
    drop(s);
    dir
}

#[test]
fn a_missing_index_reads_as_empty_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let s = Store::open_read_only(&cache).unwrap();
    assert!(s.is_read_only());
    assert!(s.get_entry(TRUSTED, &key(1)).unwrap().is_none());
    assert!(s.memo_load("/ws").unwrap().is_empty());
    assert!(!cache.exists(), "a read-only open created the cache directory");
    assert!(!s.tmp_dir().starts_with(&cache));
}

#[test]
fn reads_entries_and_memo_and_writes_nothing() {
    let dir = written();
    let before = snapshot(dir.path());
    let mut s = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(s.get_entry(TRUSTED, &key(1)).unwrap().unwrap().task, "web#build");
    assert_eq!(s.memo_load("/ws").unwrap().len(), 1);
    // Skipped as if done.
    s.touch(TRUSTED, &[key(1)], i64::MAX).unwrap();
    s.memo_store("/ws", &[("b.txt".into(), memo_row(2))]).unwrap();
    s.memo_remove("/ws", &["a.txt".into()]).unwrap();
    s.record_durations(&[("web#build".into(), 5)]).unwrap();
    let e = Execution {
        key: key(1),
        task: "web#build".into(),
        worker: "local".into(),
        platform: "portable".into(),
        rerun: false,
        ok: true,
        fingerprint: None,
        compared: None,
        manifest: None,
        artifact: None,
        time_ms: 1,
        failed_tries: 0,
    };
    s.record_execution(&e).unwrap();
    // Refused.
    for r in [
        s.put_entry(&entry(2, "web#test", 10)),
        s.delete_entry(TRUSTED, &key(1)),
        s.put_blob_bytes(b"x").map(|_| ()),
        s.prune(0).map(|_| ()),
        s.clean(),
    ] {
        assert!(matches!(r, Err(CacheError::ReadOnly { .. })), "{r:?}");
    }
    assert_eq!(s.get_entry(TRUSTED, &key(1)).unwrap().unwrap().last_used_ms, 10);
    assert_eq!(s.memo_load("/ws").unwrap().len(), 1);
    let tmp = s.tmp_dir();
    assert!(tmp.is_dir() && !tmp.starts_with(dir.path()), "{}", tmp.display());
    drop(s);
    assert!(!tmp.exists(), "the private staging dir outlived the store");
    let after: Vec<_> = snapshot(dir.path())
        .into_iter()
        .filter(|(p, _)| {
            !p.to_string_lossy().ends_with("-shm") && !p.to_string_lossy().ends_with("-wal")
        })
        .collect();
    assert_eq!(after, before, "the read-only store changed the cache directory");
}

#[test]
fn sees_rows_a_live_writer_committed_to_its_wal() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = Store::open(dir.path()).unwrap();
    w.put_entry(&entry(3, "api#build", 10)).unwrap();
    let r = Store::open_read_only(dir.path()).unwrap();
    assert!(r.get_entry(TRUSTED, &key(3)).unwrap().is_some());
    w.put_entry(&entry(4, "api#test", 10)).unwrap();
    assert!(r.get_entry(TRUSTED, &key(4)).unwrap().is_some());
}

#[test]
fn an_immutable_connection_reads_a_closed_index() {
    // What a read-only directory gets (root ignores permissions, so the fallback itself is
    // exercised here and the mount in tests/tests/containment_cache.rs).
    let dir = written();
    let conn = connect(&dir.path().join(INDEX_FILE), true).unwrap();
    let s = Store::from_parts(dir.path().to_path_buf(), conn, true, None);
    assert_eq!(s.get_entry(TRUSTED, &key(1)).unwrap().unwrap().task, "web#build");
    assert!(!dir.path().join(format!("{INDEX_FILE}-shm")).exists());
}

#[test]
fn damaged_and_newer_indexes_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(INDEX_FILE), vec![0x5a; 4096]).unwrap();
    assert!(matches!(Store::open_read_only(dir.path()), Err(CacheError::IntegrityCheck(_))));
    let dir = written();
    let conn = Connection::open(dir.path().join(INDEX_FILE)).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    assert!(matches!(
        Store::open_read_only(dir.path()),
        Err(CacheError::SchemaTooNew { found: 999, .. })
    ));
}

#[test]
fn odd_characters_in_the_path_are_encoded() {
    assert_eq!(uri_path(Path::new("/a b/c?d#e%f")), "/a%20b/c%3Fd%23e%25f");
    let base = tempfile::tempdir().unwrap();
    let odd = base.path().join("we?ird #dir%");
    let mut s = Store::open(&odd).unwrap();
    s.put_entry(&entry(5, "x#y", 1)).unwrap();
    drop(s);
    let r = Store::open_read_only(&odd).unwrap();
    assert!(r.get_entry(TRUSTED, &key(5)).unwrap().is_some());
}

#[test]
fn a_scratch_store_is_writable_and_leaves_nothing() {
    let mut s = Store::scratch().unwrap();
    assert!(!s.is_read_only());
    let dir = s.dir().to_path_buf();
    let d = s.put_blob_bytes(b"bytes").unwrap();
    let mut e = entry(6, "a#b", 1);
    e.log = Some(d);
    s.put_entry(&e).unwrap();
    assert!(s.get_entry(TRUSTED, &key(6)).unwrap().is_some());
    drop(s);
    assert!(!dir.exists());
}
