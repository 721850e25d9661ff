//! What each installed tree's walk saw when its digest was last computed
//! (`.prova/trees/stamps`): a tree whose walk sees the same again ([`super::walk::Seen`]) has
//! that digest, and its files' memo rows and its manifest need not be read (the manifest
//! stays in `.prova/trees/<digest>` for a remote run, which reads it back).
//!
//! A tree is recorded only when nothing in it changed within the racy window before the walk
//! began ([`crate::digests::RACY_WINDOW_NS`], as the digest memo's rows): a later write in
//! the same timestamp tick could otherwise leave every stamp as it was. The file is best
//! effort: missing, unreadable, of another version or malformed, it records nothing, and a
//! write that fails only costs the next run the full scan.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::path::Path;

use prova_protocol::Digest;
use serde::{Deserialize, Serialize};

use super::walk::Seen;
use crate::digests::RACY_WINDOW_NS;

/// The record's name in the manifests' directory.
pub(super) const FILE: &str = "stamps";

/// Largest record read (a stamp and a digest per tree, and each tree's links that leave it:
/// a workspace of thousands of packages links each of its dependencies).
const MAX_BYTES: u64 = 16 << 20;

/// The record's format (3: the links that leave a tree, not where they led when recorded).
const VERSION: u32 = 3;

/// Each tree's stamp and digest, by workspace path.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Stamps {
    v: u32,
    trees: BTreeMap<String, Recorded>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Recorded {
    seen: String,
    digest: Digest,
    /// The tree's links whose first hop leaves the tree, each with that hop
    /// ([`crate::digests::beyond::first_hop`]; their texts are in the stamp): where they end
    /// and what is there are found again every run.
    #[serde(default)]
    leaving: Vec<(String, String)>,
}

impl Stamps {
    /// The record in `store`; empty when there is none that can be read.
    pub(super) fn read(store: &Path) -> Stamps {
        let mut bytes = Vec::new();
        let read = fs::File::open(store.join(FILE))
            .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes));
        match read {
            Ok(n) if n as u64 <= MAX_BYTES => rmp_serde::from_slice::<Stamps>(&bytes)
                .ok()
                .filter(|s| s.v == VERSION)
                .unwrap_or_default(),
            _ => Stamps::default(),
        }
    }

    /// The links of `tree` that leave it, with their first hops, as recorded with its digest.
    pub(super) fn leaving(&self, tree: &str) -> &[(String, String)] {
        self.trees.get(tree).map_or(&[], |r| r.leaving.as_slice())
    }

    /// The digest recorded for `tree` when its walk saw what `seen` holds.
    pub(super) fn digest(&self, tree: &str, seen: &Seen) -> Option<Digest> {
        self.trees.get(tree).filter(|r| r.seen == seen.stamp()).map(|r| r.digest)
    }

    /// Records `digest` for `tree` as `seen` saw it in a scan that began at `now_ns`, or
    /// forgets the tree when something in it changed within the racy window of then.
    /// Whether the record changed.
    pub(super) fn record(
        &mut self,
        tree: &str,
        seen: &Seen,
        digest: Digest,
        leaving: Vec<(String, String)>,
        now_ns: i64,
    ) -> bool {
        if seen.newest_ns >= now_ns.saturating_sub(RACY_WINDOW_NS) {
            return self.trees.remove(tree).is_some();
        }
        let r = Recorded { seen: seen.stamp(), digest, leaving };
        self.trees.insert(tree.to_owned(), r.clone()) != Some(r)
    }

    /// Forgets the trees not in `current`. Whether any was.
    pub(super) fn keep_only(&mut self, current: &[String]) -> bool {
        let before = self.trees.len();
        self.trees.retain(|t, _| current.contains(t));
        self.trees.len() != before
    }

    /// Writes the record into `store` (a temporary, then renamed over the old one).
    pub(super) fn write(&mut self, store: &Path) -> std::io::Result<()> {
        self.v = VERSION;
        let bytes = rmp_serde::to_vec(self).map_err(std::io::Error::other)?;
        fs::create_dir_all(store)?;
        let tmp = store.join(format!(".{FILE}.{}", std::process::id()));
        fs::write(&tmp, &bytes)?;
        fs::rename(&tmp, store.join(FILE))
    }
}
