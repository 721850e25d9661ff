//! Installed trees (issue 12): a directory of installed dependencies or toolchains
//! (`node_modules`, `.venv`) as one content-addressed value.
//!
//! A [`TreeManifest`] lists every entry under the tree's directory — directories, files (their
//! content digest and executable bit) and symlinks (their target, as written) — sorted by
//! path. Its canonical encoding ([`TreeManifest::encode`]) is a blob like any other, and the
//! tree's digest is that blob's digest ([`TreeManifest::digest`]): the key of a task that can
//! read the tree folds it, the farm stores it once, and a worker materialises it once per
//! digest. A task names a tree among its inputs as an [`InputRef`](crate::wire::InputRef)
//! with `tree` set, whose digest is the manifest's.
//!
//! A manifest comes from a peer, so [`TreeManifest::decode`] checks everything a worker
//! relies on before it builds anything: size and entry bounds, clean relative paths, strictly
//! sorted (so unique), every parent listed as a directory before its children, and relative
//! symlink targets that stay inside the workspace once the tree sits at its path (a pnpm or
//! npm-workspace link such as `node_modules/@a/b -> ../../packages/b` points out of the tree,
//! into the workspace, and is allowed; `../../../x` would reach the worker's own directories
//! beside the exec root). An absolute target (a virtualenv's `bin/python -> /usr/bin/python3`)
//! is kept: it names a system path, which the sandbox shows read-only or not at all, and no
//! link is ever followed while a tree is built.

use serde::{Deserialize, Serialize};

use crate::Digest;
use crate::globs::is_clean_relative;

/// Largest encoded manifest read (a 50k-file `node_modules` encodes to a few MB).
pub const MAX_MANIFEST_BYTES: usize = 64 << 20;

/// Most entries one tree may hold.
pub const MAX_TREE_ENTRIES: usize = 1 << 20;

/// The format version in every encoding; a different one is refused.
pub const TREE_FORMAT: u32 = 1;

/// What one entry of a tree is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TreeKind {
    /// A directory.
    Dir,
    /// A regular file.
    File {
        /// Its content digest (a blob).
        digest: Digest,
        /// Owner-execute bit.
        exec: bool,
    },
    /// A symlink, with its target as written.
    Symlink {
        /// The target.
        target: String,
    },
}

/// One entry, at a path relative to the tree's directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TreeEntry {
    /// Relative to the tree's directory, clean (`a/b`), never empty.
    pub path: String,
    /// What it is.
    pub kind: TreeKind,
}

/// Every entry of a tree, sorted by path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeManifest {
    /// [`TREE_FORMAT`].
    pub format: u32,
    /// The entries, sorted by path (byte order), unique.
    pub entries: Vec<TreeEntry>,
}

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TreeError {
    /// Larger than [`MAX_MANIFEST_BYTES`] or [`MAX_TREE_ENTRIES`].
    #[error("tree manifest too large ({0})")]
    TooLarge(String),
    /// Not a manifest of this format.
    #[error("not a tree manifest: {0}")]
    Malformed(String),
    /// An entry breaks a rule (path, order, parent, link target).
    #[error("tree entry `{path}`: {reason}")]
    Entry {
        /// The entry's path.
        path: String,
        /// Which rule.
        reason: &'static str,
    },
}

impl TreeManifest {
    /// A manifest of `entries` (sorted here).
    pub fn new(mut entries: Vec<TreeEntry>) -> Self {
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        entries.dedup_by(|a, b| a.path == b.path);
        Self { format: TREE_FORMAT, entries }
    }

    /// The canonical encoding (MessagePack of the sorted entries).
    pub fn encode(&self) -> Vec<u8> {
        // Plain data of owned strings and byte arrays: encoding cannot fail.
        rmp_serde::to_vec(self).unwrap_or_default()
    }

    /// The tree's digest: its encoding's.
    pub fn digest(&self) -> Digest {
        Digest::of(&self.encode())
    }

    /// Parses and checks a manifest to be placed at workspace path `at` (see the module docs).
    pub fn decode(bytes: &[u8], at: &str) -> Result<Self, TreeError> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(TreeError::TooLarge(format!("{} bytes", bytes.len())));
        }
        let m: TreeManifest =
            rmp_serde::from_slice(bytes).map_err(|e| TreeError::Malformed(e.to_string()))?;
        if m.format != TREE_FORMAT {
            return Err(TreeError::Malformed(format!("format {}", m.format)));
        }
        if m.entries.len() > MAX_TREE_ENTRIES {
            return Err(TreeError::TooLarge(format!("{} entries", m.entries.len())));
        }
        m.check(at)?;
        Ok(m)
    }

    /// The rules of [`TreeManifest::decode`] on an already parsed manifest.
    pub fn check(&self, at: &str) -> Result<(), TreeError> {
        if !is_clean_relative(at) {
            return Err(TreeError::Entry {
                path: at.to_owned(),
                reason: "the tree's path is not clean",
            });
        }
        let mut dirs: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let mut prev: Option<&str> = None;
        for e in &self.entries {
            let bad = |reason| TreeError::Entry { path: e.path.clone(), reason };
            if !is_clean_relative(&e.path) {
                return Err(bad("not a clean relative path"));
            }
            if prev.is_some_and(|p| p >= e.path.as_str()) {
                return Err(bad("out of order or repeated"));
            }
            prev = Some(&e.path);
            if let Some((parent, _)) = e.path.rsplit_once('/')
                && !dirs.contains(parent)
            {
                return Err(bad("its parent is not a directory of the tree"));
            }
            match &e.kind {
                TreeKind::Dir => {
                    dirs.insert(&e.path);
                }
                TreeKind::File { .. } => {}
                TreeKind::Symlink { target } => {
                    if !link_stays_inside(at, &e.path, target) {
                        return Err(bad("its symlink target leaves the workspace"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The distinct file blobs the tree holds.
    pub fn blobs(&self) -> Vec<Digest> {
        let mut v: Vec<Digest> = self
            .entries
            .iter()
            .filter_map(|e| match e.kind {
                TreeKind::File { digest, .. } => Some(digest),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Whether a link at `entry` (relative to a tree at workspace path `at`) with `target` is
/// allowed: absolute, or relative and inside the workspace, resolved lexically from the
/// link's directory.
pub fn link_stays_inside(at: &str, entry: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return true;
    }
    if target.is_empty() {
        return false;
    }
    let mut parts: Vec<&str> = at.split('/').filter(|p| !p.is_empty()).collect();
    parts.extend(entry.split('/'));
    parts.pop(); // the link's own name
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return false;
                }
            }
            n => parts.push(n),
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(p: &str) -> TreeEntry {
        TreeEntry {
            path: p.into(),
            kind: TreeKind::File { digest: Digest::of(p.as_bytes()), exec: false },
        }
    }
    fn dir(p: &str) -> TreeEntry {
        TreeEntry { path: p.into(), kind: TreeKind::Dir }
    }
    fn link(p: &str, t: &str) -> TreeEntry {
        TreeEntry { path: p.into(), kind: TreeKind::Symlink { target: t.into() } }
    }

    #[test]
    fn a_manifest_round_trips_and_its_digest_follows_every_entry() {
        let m = TreeManifest::new(vec![file("a/x.js"), dir("a"), link("b", "a/x.js")]);
        let back = TreeManifest::decode(&m.encode(), "node_modules").unwrap();
        assert_eq!(back, m);
        let mut other = m.clone();
        other.entries[2] = link("b", "a");
        assert_ne!(other.digest(), m.digest(), "a link's target is in the digest");
        let mut exec = m.clone();
        exec.entries[1] = TreeEntry {
            path: "a/x.js".into(),
            kind: TreeKind::File { digest: Digest::of(b"a/x.js"), exec: true },
        };
        assert_ne!(exec.digest(), m.digest(), "the exec bit is in the digest");
        assert_eq!(m.blobs().len(), 1);
    }

    #[test]
    fn hostile_manifests_are_refused() {
        let enc = |entries: Vec<TreeEntry>| {
            rmp_serde::to_vec(&TreeManifest { format: TREE_FORMAT, entries }).unwrap()
        };
        let refused =
            |entries: Vec<TreeEntry>| TreeManifest::decode(&enc(entries), "node_modules").is_err();
        assert!(refused(vec![file("../x")]), "a path leaving the tree");
        assert!(refused(vec![file("/etc/passwd")]), "an absolute path");
        assert!(refused(vec![file("a/b")]), "a parent that is not listed");
        assert!(refused(vec![file("a"), file("a/b")]), "a file as a parent");
        assert!(refused(vec![file("b"), file("a")]), "out of order");
        assert!(refused(vec![file("a"), file("a")]), "repeated");
        assert!(!refused(vec![link("a", "/usr/bin/python3")]), "an absolute link is a system path");
        assert!(refused(vec![link("a", "")]), "an empty link");
        assert!(refused(vec![link("a", "../../x")]), "a link out of the workspace");
        assert!(TreeManifest::decode(b"\xc1junk", "node_modules").is_err());
        let other_format = rmp_serde::to_vec(&TreeManifest { format: 9, entries: vec![] }).unwrap();
        assert!(TreeManifest::decode(&other_format, "node_modules").is_err());
        assert!(
            TreeManifest::decode(&enc(vec![]), "../up").is_err(),
            "a tree path leaving the workspace"
        );
    }

    #[test]
    fn workspace_links_out_of_the_tree_are_allowed() {
        // npm workspaces: node_modules/@s/core -> ../../packages/core.
        assert!(link_stays_inside("node_modules", "@s/core", "../../packages/core"));
        assert!(link_stays_inside("node_modules", ".bin/tsc", "../typescript/bin/tsc"));
        assert!(link_stays_inside("packages/a/node_modules", "b", "../../b"));
        assert!(!link_stays_inside("node_modules", "b", "../../x"));
        assert!(!link_stays_inside("node_modules", "@s/core", "../../../x"));
    }
}
