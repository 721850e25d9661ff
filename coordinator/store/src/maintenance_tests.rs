//! Unit tests of [`super`] (maintenance.rs).

use super::*;
use crate::test_util::{entry, key};
use crate::{NewEntry, TRUSTED};

/// An entry whose only bytes are its artifact `blob` (empty manifest and components).
fn with_blob(store: &mut Store, i: u64, blob: &[u8], used: i64) -> (NewEntry, Digest) {
    let d = store.put_blob_bytes(blob).unwrap();
    let mut e = entry(i, &format!("p{i}#build"), used);
    e.manifest.clear();
    e.components.clear();
    e.artifact = Some((d, blob.len() as u64));
    store.put_entry(&e).unwrap();
    (e, d)
}

fn present(store: &Store, i: u64) -> bool {
    store.get_entry(TRUSTED, &key(i)).unwrap().is_some()
}

#[test]
fn prune_drops_least_recently_used_and_keeps_shared_blobs_while_referenced() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let (_, a) = with_blob(&mut store, 1, &[1; 100], 10);
    let (_, b) = with_blob(&mut store, 2, &[2; 100], 20);
    let (_, s) = with_blob(&mut store, 3, &[3; 100], 30);
    let (_, s2) = with_blob(&mut store, 4, &[3; 100], 40);
    let (_, e) = with_blob(&mut store, 5, &[5; 100], 50);
    assert_eq!(s, s2, "entries 3 and 4 share one blob");
    assert_eq!(store.stats().unwrap().referenced_bytes, 400);

    let p = store.prune(250).unwrap();
    assert_eq!((p.entries_deleted, p.blobs_deleted, p.bytes_freed), (2, 2, 200));
    assert_eq!(p.referenced_bytes, 200);
    assert!(!present(&store, 1) && !present(&store, 2));
    assert!(present(&store, 3) && present(&store, 4) && present(&store, 5));
    assert!(!store.has_blob(&a) && !store.has_blob(&b));
    assert!(store.has_blob(&s) && store.has_blob(&e));

    // Entry 3 is used again: now 4 and 5 are the oldest. Dropping 4 frees nothing (3
    // still references the shared blob), so 5 goes too.
    store.touch(TRUSTED, &[key(3)], 100).unwrap();
    let p = store.prune(150).unwrap();
    assert_eq!((p.entries_deleted, p.blobs_deleted, p.bytes_freed), (2, 1, 100));
    assert!(present(&store, 3) && !present(&store, 4) && !present(&store, 5));
    assert!(store.has_blob(&s), "shared blob kept while entry 3 references it");
    assert!(!store.has_blob(&e));

    // Within the bound: nothing to do.
    assert_eq!(store.prune(1_000).unwrap().entries_deleted, 0);
    let p = store.prune(0).unwrap();
    assert_eq!((p.entries_deleted, p.blobs_deleted, p.referenced_bytes), (1, 1, 0));
    assert!(!store.has_blob(&s));
    store.integrity_check().unwrap();
}

#[test]
fn prune_counts_row_bytes_and_log_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let log = store.put_blob_bytes(&[9; 50]).unwrap();
    let mut e = entry(1, "a#b", 1);
    e.log = Some(log);
    e.manifest = vec![0; 30];
    e.components = vec![0; 20];
    store.put_entry(&e).unwrap();
    assert_eq!(store.stats().unwrap().referenced_bytes, 100);
    assert_eq!(store.prune(100).unwrap().entries_deleted, 0);
    let p = store.prune(99).unwrap();
    assert_eq!((p.entries_deleted, p.blobs_deleted, p.bytes_freed), (1, 1, 50));
}

#[test]
fn orphans_and_stale_staging_wait_out_their_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let (_, kept) = with_blob(&mut store, 1, b"referenced", 10);
    let orphan = store.put_blob_bytes(b"written, entry not filed yet").unwrap();
    let stray = store.blob_path(&orphan).with_file_name("not-a-digest");
    fs::write(&stray, b"?").unwrap();
    let (staged, _) = store.stage_file().unwrap();
    let restore_dir = store.tmp_dir().join("restore-123");
    fs::create_dir_all(restore_dir.join("dist")).unwrap();
    fs::write(store.quarantine_dir().join("bad-1"), b"x").unwrap();

    let p = store.prune(u64::MAX).unwrap();
    assert_eq!(p, PruneStats { referenced_bytes: 10, ..Default::default() });
    assert!(store.has_blob(&orphan) && stray.exists() && staged.exists());

    let later = SystemTime::now() + ORPHAN_GRACE + Duration::from_secs(60);
    let p = store.prune_at(u64::MAX, later).unwrap();
    assert_eq!(
        (p.entries_deleted, p.blobs_deleted, p.tmp_removed, p.quarantine_removed),
        (0, 2, 2, 0)
    );
    assert!(!store.has_blob(&orphan) && !stray.exists());
    assert!(!staged.exists() && !restore_dir.exists());
    assert!(store.has_blob(&kept), "a referenced blob is never an orphan");

    let much_later = SystemTime::now() + QUARANTINE_KEEP + Duration::from_secs(60);
    assert_eq!(store.prune_at(u64::MAX, much_later).unwrap().quarantine_removed, 1);
    assert!(store.has_blob(&kept));
}

#[test]
fn stats_count_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    assert_eq!(store.stats().unwrap().entries.len(), 0);
    with_blob(&mut store, 1, &[1; 10], 5);
    with_blob(&mut store, 2, &[2; 20], 9);
    let mut u = entry(3, "x#y", 7);
    u.namespace = crate::UNTRUSTED.into();
    store.put_entry(&u).unwrap();
    store.memo_store("/ws", &[("a".into(), crate::test_util::memo_row(1))]).unwrap();
    let (_staged, _) = store.stage_file().unwrap();
    let s = store.stats().unwrap();
    assert_eq!(s.entries.get(""), Some(&2));
    assert_eq!(s.entries.get("untrusted"), Some(&1));
    assert_eq!((s.blob_files, s.blob_bytes), (2, 30));
    assert_eq!((s.oldest_used_ms, s.newest_used_ms), (Some(5), Some(9)));
    assert_eq!((s.quarantined, s.tmp_items, s.memo_rows), (0, 1, 1));
    assert!(s.index_bytes > 0);
}

#[test]
fn clean_empties_everything_and_the_store_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let (_, d) = with_blob(&mut store, 1, b"artifact", 1);
    store.memo_store("/ws", &[("a".into(), crate::test_util::memo_row(1))]).unwrap();
    store.record_durations(&[("a#b".into(), 5)]).unwrap();
    store.stage_file().unwrap();
    fs::write(store.quarantine_dir().join("q"), b"x").unwrap();

    store.clean().unwrap();
    let s = store.stats().unwrap();
    assert_eq!(
        s,
        Stats { index_bytes: s.index_bytes, ..Default::default() },
        "nothing but the index file is left"
    );
    assert!(store.durations().unwrap().is_empty());
    assert!(!store.has_blob(&d));
    for sub in [BLOBS_DIR, TMP_DIR, QUARANTINE_DIR] {
        assert!(dir.path().join(sub).is_dir(), "{sub} still exists");
    }

    let (_, d) = with_blob(&mut store, 2, b"after clean", 2);
    assert!(present(&store, 2));
    assert_eq!(store.read_blob_verified(&d, 100).unwrap().unwrap(), b"after clean");
    store.integrity_check().unwrap();
}

#[test]
fn blob_path_names_parse_back() {
    let d = Digest::of(b"x");
    let dir = Path::new("/c");
    assert_eq!(digest_of_blob_path(&crate::blobs::blob_path_in(dir, &d)), Some(d));
    let hex = d.to_hex();
    assert_eq!(digest_of_blob_path(&dir.join("blobs/zz").join(&hex)), None);
    assert_eq!(
        digest_of_blob_path(&dir.join("blobs").join(&hex[..2]).join(hex.to_uppercase())),
        None
    );
}

#[test]
fn clean_dir_empties_a_cache_whose_index_cannot_open_and_follows_no_link() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("keep.txt"), "keep").unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    with_blob(&mut store, 1, &[1; 100], 10);
    with_blob(&mut store, 2, &[2; 100], 20);
    drop(store);
    let d = dir.path();
    fs::write(d.join(INDEX_FILE), vec![0x5a; 4096]).unwrap();
    assert!(Store::open(d).is_err());
    // Links where the layout has files or directories, and inside its directories.
    std::os::unix::fs::symlink(outside.path(), d.join(TMP_DIR).join("into-outside")).unwrap();
    fs::remove_dir(d.join(QUARANTINE_DIR)).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.join(QUARANTINE_DIR)).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("keep.txt"),
        d.join(format!("{INDEX_FILE}-wal")),
    )
    .unwrap();
    fs::write(d.join("notes.txt"), "not the cache's").unwrap();

    let out = Store::clean_dir(d).unwrap();
    assert_eq!(out.index_files, 1);
    assert_eq!(out.blobs, 2);
    assert_eq!(out.links, 2, "{out:?}");
    assert_eq!(out.other_items, 1, "{out:?}");
    assert_eq!(fs::read_to_string(outside.path().join("keep.txt")).unwrap(), "keep");
    assert!(fs::read_to_string(d.join("notes.txt")).is_ok(), "a file not of the cache went");
    assert!(!d.join(QUARANTINE_DIR).exists());
    let store = Store::open(d).unwrap();
    assert_eq!(store.stats().unwrap().blob_files, 0);
    assert!(!present(&store, 1));
    // Idempotent on the fresh directory.
    drop(store);
    Store::clean_dir(d).unwrap();
}
