//! Who may see which blob of a farm cache, and the cache's key salt (schema version 3).
//!
//! - **Uploads**: a `client` or `ci` certificate's blob uploads are recorded (identity,
//!   digest, size). What an identity uploaded it may fetch back; the sum of its rows is its
//!   stored bytes, bounded by the coordinator's per-client quota. Rows go with their blob
//!   (prune deletes them when it unlinks it; `clean` empties the table).
//! - **Visibility**: a blob is visible to a reader when an entry of a namespace it may read
//!   references it as an artifact, an entry of a namespace whose logs it may read references
//!   it as a log, or the reader uploaded it.
//! - **Key salt**: 32 random bytes made by the migration that created the table
//!   (`randomblob(32)`), one per cache directory; keyed `env` values are folded with it.

use prova_protocol::Digest;
use rusqlite::{OptionalExtension as _, params_from_iter};

use super::error::{CacheError, sql};
use super::store::{Store, get_u64};

/// What a reader may see of a farm cache (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Visibility {
    /// The certificate identity (its own uploads are visible).
    pub identity: String,
    /// Namespaces whose entries' artifacts it may fetch.
    pub artifacts: Vec<String>,
    /// Namespaces whose entries' logs it may fetch.
    pub logs: Vec<String>,
}

impl Store {
    /// Records that `identity` uploaded blob `digest` of `size` bytes (again: kept once).
    pub fn record_upload(
        &self,
        identity: &str,
        digest: &Digest,
        size: u64,
        now_ms: i64,
    ) -> Result<(), CacheError> {
        self.writable("record an upload")?;
        self.conn()
            .prepare_cached(
                "INSERT OR IGNORE INTO uploads (identity, digest, size, time_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| s.execute(rusqlite::params![identity, digest.0, size as i64, now_ms]))
            .map_err(sql("record an upload"))?;
        Ok(())
    }

    /// Whether `identity` uploaded `digest` (and its record stands).
    pub fn uploaded(&self, identity: &str, digest: &Digest) -> Result<bool, CacheError> {
        self.conn()
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM uploads WHERE identity = ?1 AND digest = ?2)",
            )
            .and_then(|mut s| s.query_row(rusqlite::params![identity, digest.0], |r| r.get(0)))
            .map_err(sql("look up an upload"))
    }

    /// The bytes `identity`'s recorded uploads hold (its quota's use).
    pub fn uploaded_bytes(&self, identity: &str) -> Result<u64, CacheError> {
        self.conn()
            .prepare_cached("SELECT coalesce(sum(size), 0) FROM uploads WHERE identity = ?1")
            .and_then(|mut s| s.query_row([identity], |r| get_u64(r, 0)))
            .map_err(sql("sum uploads"))
    }

    /// Whether blob `d` is visible to `v` (see the module docs).
    pub fn blob_visible(&self, v: &Visibility, d: &Digest) -> Result<bool, CacheError> {
        if self.uploaded(&v.identity, d)? {
            return Ok(true);
        }
        for (column, namespaces) in [("artifact", &v.artifacts), ("log", &v.logs)] {
            if namespaces.is_empty() {
                continue;
            }
            let marks = (0..namespaces.len()).map(|i| format!("?{}", i + 2)).collect::<Vec<_>>();
            let q = format!(
                "SELECT EXISTS (SELECT 1 FROM entries WHERE {column} = ?1 AND namespace IN ({}))",
                marks.join(", ")
            );
            let mut args: Vec<rusqlite::types::Value> = vec![d.0.to_vec().into()];
            args.extend(namespaces.iter().map(|n| n.clone().into()));
            let seen: bool = self
                .conn()
                .prepare_cached(&q)
                .and_then(|mut s| s.query_row(params_from_iter(args), |r| r.get(0)))
                .map_err(sql("check blob visibility"))?;
            if seen {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The cache's key salt; `None` for an index older than schema version 3 (read-only).
    pub fn key_salt(&self) -> Result<Option<[u8; 32]>, CacheError> {
        let found: Option<Vec<u8>> = match self
            .conn()
            .query_row("SELECT value FROM meta WHERE name = 'key_salt'", [], |r| r.get(0))
            .optional()
        {
            Ok(v) => v,
            // An older index opened read-only has no `meta` table.
            Err(rusqlite::Error::SqliteFailure(_, Some(m))) if m.contains("no such table") => None,
            Err(e) => return Err(sql("read the key salt")(e)),
        };
        Ok(found.and_then(|v| <[u8; 32]>::try_from(v.as_slice()).ok()))
    }

    /// Takes `salt` as this cache's key salt (a farm's, handed over in `Welcome`), so local
    /// runs key like the farm's clients and entries brought home from the farm hit locally.
    /// Entries keyed under the previous salt that fold a declared env value miss from now on.
    /// Returns whether the salt changed.
    pub fn adopt_key_salt(&self, salt: &[u8; 32]) -> Result<bool, CacheError> {
        if self.key_salt()?.as_ref() == Some(salt) {
            return Ok(false);
        }
        self.conn()
            .execute(
                "INSERT INTO meta (name, value) VALUES ('key_salt', ?1) \
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                [salt.as_slice()],
            )
            .map_err(sql("store the key salt"))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewEntry;

    fn open_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    /// An entry of `namespace` under key `k` with a fresh artifact blob.
    fn entry(store: &Store, namespace: &str, k: &[u8]) -> NewEntry {
        let body = [b"artifact of ".as_slice(), k].concat();
        let art = store.put_blob_bytes(&body).unwrap();
        NewEntry {
            namespace: namespace.into(),
            key: Digest::of(k),
            task: "p#build".into(),
            artifact: Some((art, body.len() as u64)),
            log: None,
            manifest: Vec::new(),
            components: Vec::new(),
            fingerprint: None,
            duration_ms: 1,
            created_ms: 1,
        }
    }

    #[test]
    fn uploads_are_per_identity_and_summed_once() {
        let (_d, store) = open_store();
        let a = store.put_blob_bytes(b"alice's input").unwrap();
        store.record_upload("alice", &a, 13, 1).unwrap();
        store.record_upload("alice", &a, 13, 2).unwrap();
        assert_eq!(store.uploaded_bytes("alice").unwrap(), 13);
        assert_eq!(store.uploaded_bytes("bob").unwrap(), 0);
        assert!(store.uploaded("alice", &a).unwrap());
        assert!(!store.uploaded("bob", &a).unwrap());
    }

    #[test]
    fn a_blob_is_visible_through_its_entries_namespace_or_its_upload() {
        let (_d, mut store) = open_store();
        let mut e = entry(&store, "untrusted/alice", b"k");
        let log = store.put_blob_bytes(b"a log").unwrap();
        e.log = Some(log);
        store.put_entry(&e).unwrap();
        let art = e.artifact.unwrap().0;
        let alice = Visibility {
            identity: "alice".into(),
            artifacts: vec![String::new(), "untrusted/alice".into()],
            logs: vec!["untrusted/alice".into()],
        };
        let bob = Visibility {
            identity: "bob".into(),
            artifacts: vec![String::new(), "untrusted/bob".into()],
            logs: vec!["untrusted/bob".into()],
        };
        assert!(store.blob_visible(&alice, &art).unwrap());
        assert!(store.blob_visible(&alice, &log).unwrap());
        assert!(!store.blob_visible(&bob, &art).unwrap());
        assert!(!store.blob_visible(&bob, &log).unwrap());
        // A trusted entry's artifact serves every reader of the trusted tier; its log only
        // readers of that tier's logs.
        let mut t = entry(&store, "", b"t");
        let tlog = store.put_blob_bytes(b"ci's log").unwrap();
        t.log = Some(tlog);
        store.put_entry(&t).unwrap();
        assert!(store.blob_visible(&bob, &t.artifact.unwrap().0).unwrap());
        assert!(!store.blob_visible(&bob, &tlog).unwrap());
        let input = store.put_blob_bytes(b"an input").unwrap();
        assert!(!store.blob_visible(&bob, &input).unwrap());
        store.record_upload("bob", &input, 8, 1).unwrap();
        assert!(store.blob_visible(&bob, &input).unwrap());
        assert!(!store.blob_visible(&alice, &input).unwrap());
    }

    #[test]
    fn every_cache_has_its_own_random_salt() {
        let (_d1, s1) = open_store();
        let (_d2, s2) = open_store();
        let (a, b) = (s1.key_salt().unwrap().unwrap(), s2.key_salt().unwrap().unwrap());
        assert_ne!(a, b);
        assert_ne!(a, [0; 32]);
        assert_eq!(s1.key_salt().unwrap(), Some(a), "stable");
    }

    #[test]
    fn a_farm_salt_is_adopted_once() {
        let (_d1, s1) = open_store();
        let farm = [7u8; 32];
        assert!(s1.adopt_key_salt(&farm).unwrap(), "changed");
        assert_eq!(s1.key_salt().unwrap(), Some(farm));
        assert!(!s1.adopt_key_salt(&farm).unwrap(), "already the farm's");
    }
}
