//! Unit tests of [`super`] (store.rs).

use super::*;
use crate::test_util::{entry, key};
use crate::{TRUSTED, UNTRUSTED};

#[test]
fn open_creates_the_layout_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("nested/cache");
    let store = Store::open(&root).unwrap();
    for sub in [INDEX_FILE, BLOBS_DIR, TMP_DIR, QUARANTINE_DIR] {
        assert!(root.join(sub).exists(), "{sub} missing");
    }
    assert_eq!(store.dir(), root);
    assert_eq!(store.tmp_dir(), root.join(TMP_DIR));
    let mode: String = store.conn().pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = store.conn().pragma_query_value(None, "synchronous", |r| r.get(0)).unwrap();
    assert_eq!(sync, 1, "NORMAL");
    let fk: i64 = store.conn().pragma_query_value(None, "foreign_keys", |r| r.get(0)).unwrap();
    assert_eq!(fk, 1);
    schema::quick_check(store.conn()).unwrap();
    store.integrity_check().unwrap();
}

#[test]
fn reopen_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let e = entry(1, "web#build", 10);
    store.put_entry(&e).unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.get_entry(TRUSTED, &e.key).unwrap().unwrap().task, "web#build");
}

#[test]
fn entry_round_trips_every_field_and_upsert_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let art = store.put_blob_bytes(b"artifact bytes").unwrap();
    let log = store.put_blob_bytes(b"log bytes").unwrap();
    let e = NewEntry {
        namespace: TRUSTED.into(),
        key: key(7),
        task: "web#build".into(),
        artifact: Some((art, 14)),
        log: Some(log),
        manifest: vec![1, 2, 3, 0, 255],
        components: b"components".to_vec(),
        fingerprint: Some(Digest::of(b"fp")),
        duration_ms: 1234,
        created_ms: 1_700_000_000_000,
    };
    store.put_entry(&e).unwrap();
    let got = store.get_entry(TRUSTED, &e.key).unwrap().unwrap();
    let want = Entry {
        namespace: e.namespace.clone(),
        key: e.key,
        task: e.task.clone(),
        artifact: e.artifact,
        log: e.log,
        manifest: e.manifest.clone(),
        components: e.components.clone(),
        fingerprint: e.fingerprint,
        duration_ms: e.duration_ms,
        created_ms: e.created_ms,
        last_used_ms: e.created_ms,
    };
    assert_eq!(got, want);

    // A --force run files the same key again: every field is replaced.
    let e2 = NewEntry {
        artifact: None,
        log: None,
        manifest: vec![9],
        components: vec![8],
        fingerprint: None,
        duration_ms: 5,
        created_ms: e.created_ms + 1,
        ..e.clone()
    };
    store.put_entry(&e2).unwrap();
    let got = store.get_entry(TRUSTED, &e.key).unwrap().unwrap();
    assert_eq!(got.artifact, None);
    assert_eq!(got.log, None);
    assert_eq!(got.manifest, vec![9]);
    assert_eq!(got.fingerprint, None);
    assert_eq!(
        (got.duration_ms, got.created_ms, got.last_used_ms),
        (5, e2.created_ms, e2.created_ms)
    );
    let n: i64 = store.conn().query_row("SELECT count(*) FROM entries", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn put_entry_refuses_missing_or_mis_sized_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let mut e = entry(1, "a#b", 1);
    let absent = Digest::of(b"never written");
    e.artifact = Some((absent, 3));
    assert!(
        matches!(store.put_entry(&e), Err(CacheError::MissingBlob { digest }) if digest == absent)
    );
    e.artifact = None;
    e.log = Some(absent);
    assert!(matches!(store.put_entry(&e), Err(CacheError::MissingBlob { .. })));
    let d = store.put_blob_bytes(b"four").unwrap();
    e.log = None;
    e.artifact = Some((d, 5));
    assert!(matches!(
        store.put_entry(&e),
        Err(CacheError::BlobSize { expected: 5, actual: 4, .. })
    ));
    assert!(store.get_entry(TRUSTED, &e.key).unwrap().is_none());
    e.artifact = Some((d, 4));
    store.put_entry(&e).unwrap();
}

#[test]
fn get_entries_batches_and_returns_exactly_the_present_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    // Every third of 1,000 keys is present; plus keys past one chunk.
    let keys: Vec<Digest> = (0..1_500).map(key).collect();
    for (i, k) in keys.iter().enumerate() {
        if i % 3 == 0 {
            let mut e = entry(i as u64, &format!("p{i}#build"), i as i64);
            e.key = *k;
            store.put_entry(&e).unwrap();
        }
    }
    let got = store.get_entries(TRUSTED, &keys[..1000]).unwrap();
    assert_eq!(got.len(), 334);
    for (i, k) in keys[..1000].iter().enumerate() {
        assert_eq!(got.contains_key(k), i % 3 == 0, "key {i}");
        if let Some(e) = got.get(k) {
            assert_eq!(e.task, format!("p{i}#build"));
        }
    }
    assert_eq!(store.get_entries(TRUSTED, &keys).unwrap().len(), 500);
    assert!(store.get_entries(TRUSTED, &[]).unwrap().is_empty());
    assert!(store.get_entries(UNTRUSTED, &keys).unwrap().is_empty());
}

#[test]
fn touch_moves_last_used_forward_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let keys: Vec<Digest> = (0..1_200).map(key).collect();
    for (i, k) in keys.iter().enumerate().take(3) {
        let mut e = entry(i as u64, "a#b", 100);
        e.key = *k;
        store.put_entry(&e).unwrap();
    }
    store.touch(TRUSTED, &keys, 500).unwrap();
    store.touch(TRUSTED, &keys[..1], 300).unwrap();
    store.touch(UNTRUSTED, &keys, 900).unwrap();
    store.touch(TRUSTED, &[], 900).unwrap();
    let got = store.get_entries(TRUSTED, &keys).unwrap();
    assert!(got.values().all(|e| e.last_used_ms == 500 && e.created_ms == 100));
}

#[test]
fn a_coarse_touch_leaves_recently_used_entries_unwritten() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let keys: Vec<Digest> = (0..1_200).map(key).collect();
    for (i, (k, used)) in keys.iter().zip([100i64, 950, 1_000]).enumerate() {
        let mut e = entry(i as u64, "a#b", used);
        e.key = *k;
        store.put_entry(&e).unwrap();
    }
    // Used at 100 (older than 1_000 - 100): marked; at 950 (within 100): left; at 1_000:
    // left; the keys past 1_100 of the chunk have no entry.
    store.touch_coarse(TRUSTED, &keys, 1_000, 100).unwrap();
    let got = store.get_entries(TRUSTED, &keys).unwrap();
    let used = |i: usize| got[&keys[i]].last_used_ms;
    assert_eq!((used(0), used(1), used(2)), (1_000, 950, 1_000));
    // Resolution 0 is `touch`: everything older moves forward, never back.
    store.touch_coarse(TRUSTED, &keys, 990, 0).unwrap();
    let got = store.get_entries(TRUSTED, &keys).unwrap();
    assert_eq!(got[&keys[1]].last_used_ms, 990);
    assert_eq!(got[&keys[2]].last_used_ms, 1_000);
}

#[test]
fn latest_for_task_picks_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    for (i, created) in [(1u64, 50i64), (2, 300), (3, 200)] {
        store.put_entry(&entry(i, "web#build", created)).unwrap();
    }
    store.put_entry(&entry(4, "web#test", 999)).unwrap();
    let got = store.latest_for_task(TRUSTED, "web#build").unwrap().unwrap();
    assert_eq!((got.key, got.created_ms), (key(2), 300));
    assert!(store.latest_for_task(TRUSTED, "api#build").unwrap().is_none());
    assert!(store.latest_for_task(UNTRUSTED, "web#build").unwrap().is_none());
}

#[test]
fn namespaces_are_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let mut e = entry(1, "web#build", 1);
    e.namespace = UNTRUSTED.into();
    store.put_entry(&e).unwrap();
    assert!(store.get_entry(TRUSTED, &e.key).unwrap().is_none());
    assert!(store.get_entries(TRUSTED, &[e.key]).unwrap().is_empty());
    assert!(store.get_entry(UNTRUSTED, &e.key).unwrap().is_some());
    // The same key in both namespaces: two rows, each visible only from its own.
    let mut t = e.clone();
    t.namespace = TRUSTED.into();
    t.task = "web#build-trusted".into();
    store.put_entry(&t).unwrap();
    assert_eq!(store.get_entry(TRUSTED, &e.key).unwrap().unwrap().task, "web#build-trusted");
    assert_eq!(store.get_entry(UNTRUSTED, &e.key).unwrap().unwrap().task, "web#build");
    store.delete_entry(UNTRUSTED, &e.key).unwrap();
    assert!(store.get_entry(UNTRUSTED, &e.key).unwrap().is_none());
    assert!(store.get_entry(TRUSTED, &e.key).unwrap().is_some());
    store.delete_entry(UNTRUSTED, &e.key).unwrap();
}

#[test]
fn a_row_the_schema_forbids_reads_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // CHECK constraints stop a short key; bypass them the way a damaged file would.
    store.conn().execute_batch("PRAGMA ignore_check_constraints = ON").unwrap();
    store
        .conn()
        .execute(
            "INSERT INTO entries (namespace, key, task, manifest, components, duration_ms, \
             created_ms, last_used_ms) VALUES ('', ?1, 't', x'', x'', 0, 0, 0)",
            [vec![1u8; 32]],
        )
        .unwrap();
    store.conn().execute("UPDATE entries SET fingerprint = x'0102'", []).unwrap();
    let r = store.get_entry(TRUSTED, &Digest([1; 32]));
    assert!(matches!(r, Err(CacheError::Corrupt { .. })), "{r:?}");
}

#[test]
fn corrupted_index_is_an_error_not_a_panic() {
    // Bytes overwritten in the middle of the file: pages of the b-trees are garbage.
    let dir = tempfile::tempdir().unwrap();
    fill_and_close(dir.path());
    let index = dir.path().join(INDEX_FILE);
    let mut bytes = fs::read(&index).unwrap();
    let len = bytes.len();
    assert!(len >= 16 * 4096, "want a multi-page file, got {len} bytes");
    for b in &mut bytes[len / 4..len * 3 / 4] {
        *b = 0xA5;
    }
    fs::write(&index, &bytes).unwrap();
    match Store::open(dir.path()) {
        Err(CacheError::IntegrityCheck(msg)) => {
            assert!(msg.contains("page") && !msg.contains('\n'), "{msg}")
        }
        other => panic!("want IntegrityCheck, got {:?}", other.map(|_| ())),
    }
    // `prova cache clean` on a broken index: set it aside and start empty; blobs stay.
    let blob = Digest::of(b"kept blob");
    fs::create_dir_all(dir.path().join("blobs").join(&blob.to_hex()[..2])).unwrap();
    fs::write(crate::blobs::blob_path_in(dir.path(), &blob), b"kept blob").unwrap();
    let moved = Store::discard_index(dir.path()).unwrap().unwrap();
    assert!(moved.starts_with(dir.path().join(QUARANTINE_DIR)));
    let mut store = Store::open(dir.path()).unwrap();
    assert!(store.get_entry(TRUSTED, &key(1)).unwrap().is_none());
    assert!(store.verify_blob(&blob).unwrap());
    store.put_entry(&entry(1, "a#b", 1)).unwrap();
    drop(store);
    assert!(Store::discard_index(&dir.path().join("never-a-cache")).unwrap().is_none());

    // The header overwritten: not a database at all.
    let dir = tempfile::tempdir().unwrap();
    fill_and_close(dir.path());
    let index = dir.path().join(INDEX_FILE);
    let mut bytes = fs::read(&index).unwrap();
    bytes[..100].fill(0x5A);
    fs::write(&index, &bytes).unwrap();
    let r = Store::open(dir.path());
    assert!(
        matches!(r, Err(CacheError::IntegrityCheck(_) | CacheError::Sqlite { .. })),
        "{:?}",
        r.map(|_| ())
    );
}

fn fill_and_close(dir: &Path) {
    let mut store = Store::open(dir).unwrap();
    for i in 0..300u64 {
        let mut e = entry(i, &format!("p{i}#build"), i as i64);
        e.manifest = vec![i as u8; 700];
        store.put_entry(&e).unwrap();
    }
    let rows: Vec<(String, crate::MemoRow)> =
        (0..500).map(|i| (format!("src/file{i}.ts"), crate::test_util::memo_row(i))).collect();
    store.memo_store("/ws", &rows).unwrap();
    drop(store);
    assert!(!dir.join("index.sqlite-wal").exists(), "the last close checkpoints the WAL");
}

/// SQLite re-prepares a statement whose plan it made from a bound value when that value
/// changes (`SQLITE_STMTSTATUS_REPREPARE`). The farm looks up the newest entry of every task
/// it saves: each of those lookups by task (the newest entry, the one with a fingerprint)
/// was parsed and planned again, every time, because the next task was another value. The
/// read by key never was; it is checked alongside.
#[test]
fn repeated_lookups_with_other_values_are_not_prepared_again() {
    use rusqlite::StatementStatus;
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    for i in 1..=6u64 {
        store.put_entry(&entry(i, &format!("p{i}#build"), i as i64)).unwrap();
    }
    for i in 1..=6u64 {
        assert!(store.latest_for_task(TRUSTED, &format!("p{i}#build")).unwrap().is_some());
        assert!(store.get_entry(TRUSTED, &key(i)).unwrap().is_some());
        assert!(store.entry_with_fingerprint(TRUSTED, &format!("p{i}#build"), &key(i)).is_ok());
    }
    let reprepared = |q: &str| {
        let stmt = store.conn().prepare_cached(q).unwrap();
        stmt.get_status(StatementStatus::RePrepare)
    };
    let latest = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ?1 AND task = ?2 \
         ORDER BY created_ms DESC, id DESC LIMIT 1"
    );
    let by_key = format!("SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ?1 AND key = ?2");
    let by_fingerprint = format!(
        "SELECT {ENTRY_COLUMNS} FROM entries WHERE namespace = ?1 AND task = ?2 \
         AND fingerprint = ?3 ORDER BY created_ms DESC, id DESC LIMIT 1"
    );
    assert_eq!(reprepared(&latest), 0, "latest_for_task was prepared again");
    assert_eq!(reprepared(&by_key), 0, "get_entry was prepared again");
    assert_eq!(reprepared(&by_fingerprint), 0, "entry_with_fingerprint was prepared again");
}
