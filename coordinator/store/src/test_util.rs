//! Helpers shared by the cache's unit tests.

use prova_protocol::Digest;

use super::{MemoRow, NewEntry, TRUSTED};

/// A distinct key per `i`.
pub(crate) fn key(i: u64) -> Digest {
    Digest::of(format!("key {i}").as_bytes())
}

/// A trusted entry for `key(i)` with no blobs.
pub(crate) fn entry(i: u64, task: &str, created_ms: i64) -> NewEntry {
    NewEntry {
        namespace: TRUSTED.into(),
        key: key(i),
        task: task.into(),
        artifact: None,
        log: None,
        manifest: format!("manifest {i}").into_bytes(),
        components: format!("components {i}").into_bytes(),
        fingerprint: None,
        duration_ms: i,
        created_ms,
    }
}

/// A memo row distinct per `i`.
pub(crate) fn memo_row(i: u64) -> MemoRow {
    MemoRow {
        dev: 2049,
        ino: 1_000_000 + i,
        size: i * 10,
        mtime_ns: 1_700_000_000_000_000_000 + i as i64,
        ctime_ns: 1_700_000_000_000_000_001 + i as i64,
        mode: 0o100644,
        digest: Digest::of(format!("content {i}").as_bytes()),
        recorded_ns: 1_700_000_000_500_000_000,
    }
}
