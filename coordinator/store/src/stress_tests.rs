//! Several stores on one cache directory at once — separate connections lock like separate
//! processes — and a real second process (this test binary, re-executed). Every operation
//! must succeed (the busy timeout absorbs lock waits), reads may miss but never return wrong
//! bytes, and the index passes `integrity_check` at the end.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prova_protocol::Digest;

use super::{CacheError, MemoRow, NewEntry, Store, TRUSTED};

/// Stores working at once in the threads test.
const WRITERS: u64 = 4;
/// Rounds each of them runs: enough to interleave every operation many times, bounded so the
/// test stays quick.
const ROUNDS: u64 = 60;
/// Set (to `who:dir`) in the re-executed child.
const CHILD_ENV: &str = "PROVA_CACHE_STRESS_CHILD";
/// How long the parent waits for the child process.
const CHILD_WAIT: Duration = Duration::from_secs(120);

/// One writer's rounds: blobs, entries, lookups, touches, memo, durations, prunes.
fn hammer(dir: &Path, who: u64, rounds: u64) -> Result<(), CacheError> {
    let mut store = Store::open(dir)?;
    let scope = format!("/ws/{}", who % 2);
    for i in 0..rounds {
        let n = who * 1_000_000 + i;
        let art_bytes = format!("artifact {n}").into_bytes();
        let art = store.put_blob_bytes(&art_bytes)?;
        let key = Digest::of(format!("stress key {n}").as_bytes());
        let mut e = NewEntry {
            namespace: TRUSTED.into(),
            key,
            task: format!("p{who}#build"),
            artifact: Some((art, art_bytes.len() as u64)),
            log: None,
            manifest: vec![who as u8; 64],
            components: vec![i as u8; 32],
            fingerprint: Some(art),
            duration_ms: i,
            created_ms: i as i64,
        };
        // A log shared by every writer: another writer's prune may unlink it between our
        // put_blob and put_entry; `MissingBlob` then means "store it again" (bounded).
        let mut filed = false;
        for _ in 0..3 {
            e.log = Some(store.put_blob_bytes(b"a log line every task prints")?);
            match store.put_entry(&e) {
                Ok(()) => {
                    filed = true;
                    break;
                }
                Err(CacheError::MissingBlob { .. }) => continue,
                Err(other) => return Err(other),
            }
        }
        assert!(filed, "writer {who} could not file round {i}");

        // Our entry may already be pruned by another writer: a miss, never wrong bytes.
        if let Some(got) = store.get_entry(TRUSTED, &key)? {
            assert_eq!(got.task, e.task);
            if let Some(bytes) = store.read_blob_verified(&art, 1 << 20)? {
                assert_eq!(bytes, art_bytes);
            }
        }
        let keys: Vec<Digest> = (0..=i)
            .map(|j| Digest::of(format!("stress key {}", who * 1_000_000 + j).as_bytes()))
            .collect();
        let found = store.get_entries(TRUSTED, &keys)?;
        assert!(found.values().all(|f| f.task == e.task));
        store.touch(TRUSTED, &keys, 1_000 + i as i64)?;

        let rows: Vec<(String, MemoRow)> = (0..20)
            .map(|j| {
                let row = MemoRow {
                    dev: who,
                    ino: j,
                    size: i,
                    mtime_ns: i as i64,
                    ctime_ns: i as i64,
                    mode: 0o100644,
                    digest: Digest::of(format!("{who} {j} {i}").as_bytes()),
                    recorded_ns: i as i64,
                };
                (format!("src/{j}.rs"), row)
            })
            .collect();
        store.memo_store(&scope, &rows)?;
        assert!(store.memo_load(&scope)?.len() >= 20);
        store.record_durations(&[(e.task.clone(), i)])?;

        // Prune often: mostly to a bound that keeps a few dozen entries, sometimes to zero
        // (every row and blob goes, the shared log included).
        if i % 10 == 9 {
            store.prune(if i % 30 == 29 { 0 } else { 4_000 })?;
        }
    }
    Ok(())
}

/// Every entry's blobs are on disk: no committed row points at a pruned blob.
fn assert_consistent(dir: &Path) {
    let store = Store::open(dir).unwrap();
    store.integrity_check().unwrap();
    let mut stmt = store.conn().prepare("SELECT key FROM entries").unwrap();
    let keys: Vec<Digest> = stmt
        .query_map([], |r| r.get::<_, [u8; 32]>(0).map(Digest))
        .unwrap()
        .map(|k| k.unwrap())
        .collect();
    let entries = store.get_entries(TRUSTED, &keys).unwrap();
    assert_eq!(entries.len(), keys.len());
    for e in entries.values() {
        let (art, _) = e.artifact.unwrap();
        assert!(store.verify_blob(&art).unwrap(), "artifact of {} missing", e.task);
        assert!(store.verify_blob(&e.log.unwrap()).unwrap(), "log of {} missing", e.task);
    }
    assert_eq!(store.stats().unwrap().quarantined, 0);
}

#[test]
fn stress_stores_on_one_directory_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // Every thread opens the fresh directory at once: migrations and WAL set-up race too.
    let threads: Vec<_> = (0..WRITERS)
        .map(|who| {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || hammer(&dir, who, ROUNDS))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    assert_consistent(dir.path());
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.durations().unwrap().len(), WRITERS as usize);
}

/// The child's half of [`stress_two_processes`]; does nothing unless [`CHILD_ENV`] is set.
#[test]
fn stress_child_process_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (who, dir) = spec.split_once(':').unwrap();
    hammer(Path::new(dir), who.parse().unwrap(), ROUNDS).unwrap();
}

#[test]
fn stress_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "stress_tests::stress_child_process_entry", "--nocapture"])
        .arg("--test-threads=1")
        .env(CHILD_ENV, format!("7:{}", dir.path().display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ours = {
        let dir = dir.path().to_path_buf();
        std::thread::spawn(move || hammer(&dir, 8, ROUNDS))
    };
    ours.join().unwrap().unwrap();

    let deadline = Instant::now() + CHILD_WAIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child process did not finish within {CHILD_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_consistent(dir.path());
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.durations().unwrap().len(), 2, "both processes recorded");
}
