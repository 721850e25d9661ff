//! Output manifests and fingerprints (brief §2). A manifest lists every output entry with
//! what restore needs (mode, mtime); the fingerprint folds only what determinism is about:
//! path, kind, exec bit and content digest — never mtime, owner or the rest of the mode.

use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Fold};

/// The kind of an output entry. Hardlinks, devices, FIFOs and sockets are never outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A symbolic link (its target is in [`ManifestEntry::link_target`]).
    Symlink,
    /// A directory that is itself an output (empty directories are kept).
    Dir,
}

/// One output entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Workspace-relative path, `/`-separated.
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// Permission bits (`0o7777` mask).
    pub mode: u32,
    /// Size in bytes (0 for directories; target length for symlinks).
    pub size: u64,
    /// Content digest of a file, or of a symlink's target string; `None` for directories.
    pub digest: Option<Digest>,
    /// Modification time in nanoseconds since the epoch, as found after the task ran. The
    /// archive stores a normalised mtime; restore sets this one.
    pub mtime_ns: i64,
    /// A symlink's target.
    #[serde(default)]
    pub link_target: Option<String>,
}

impl ManifestEntry {
    /// A directory entry at `path` with `mode` (directories carry no digest, size or mtime).
    pub fn dir(path: impl Into<String>, mode: u32) -> Self {
        Self {
            path: path.into(),
            kind: EntryKind::Dir,
            mode,
            size: 0,
            digest: None,
            mtime_ns: 0,
            link_target: None,
        }
    }

    /// Whether the owner-execute bit is set (the only mode bit the fingerprint sees).
    pub fn executable(&self) -> bool {
        self.mode & 0o100 != 0
    }
}

/// The outputs of one execution, sorted by path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputManifest {
    /// Entries sorted by `path`.
    pub entries: Vec<ManifestEntry>,
}

/// Version of the fingerprint fold; bump when its encoding changes.
pub const FINGERPRINT_VERSION: &str = "prova-fingerprint-v1";

impl OutputManifest {
    /// Builds a manifest, sorting the entries.
    pub fn new(mut entries: Vec<ManifestEntry>) -> Self {
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Self { entries }
    }

    /// The content fingerprint of the tree: path, kind, exec bit, content digest per entry.
    pub fn fingerprint(&self) -> Digest {
        let mut f = Fold::new(FINGERPRINT_VERSION);
        f.u64(self.entries.len() as u64);
        for e in &self.entries {
            f.str(&e.path).tag(e.kind as u8).tag(u8::from(e.executable()));
            match &e.digest {
                Some(d) => f.tag(1).digest(d),
                None => f.tag(0),
            };
        }
        f.finish()
    }

    /// Total bytes of file content.
    pub fn total_size(&self) -> u64 {
        self.entries.iter().filter(|e| e.kind == EntryKind::File).map(|e| e.size).sum()
    }

    /// What differs between two trees by content: (added, removed, changed) paths, where
    /// `self` is the reference and `other` the re-run.
    pub fn diff(&self, other: &OutputManifest) -> TreeDiff {
        let mut d = TreeDiff::default();
        let (mut i, mut j) = (0, 0);
        let (a, b) = (&self.entries, &other.entries);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.path == y.path => {
                    if x.kind != y.kind || x.digest != y.digest || x.executable() != y.executable()
                    {
                        d.changed.push(x.path.clone());
                    }
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.path < y.path => {
                    d.removed.push(x.path.clone());
                    i += 1;
                }
                (Some(_), Some(y)) => {
                    d.added.push(y.path.clone());
                    j += 1;
                }
                (Some(x), None) => {
                    d.removed.push(x.path.clone());
                    i += 1;
                }
                (None, Some(y)) => {
                    d.added.push(y.path.clone());
                    j += 1;
                }
                (None, None) => break,
            }
        }
        d
    }
}

/// Paths that differ between two output trees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeDiff {
    /// In the re-run only.
    pub added: Vec<String>,
    /// In the reference only.
    pub removed: Vec<String>,
    /// In both, with different content, kind or exec bit.
    pub changed: Vec<String>,
}

impl TreeDiff {
    /// Whether the trees are equal by content.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, content: &[u8], mode: u32, mtime: i64) -> ManifestEntry {
        ManifestEntry {
            path: path.to_owned(),
            kind: EntryKind::File,
            mode,
            size: content.len() as u64,
            digest: Some(Digest::of(content)),
            mtime_ns: mtime,
            link_target: None,
        }
    }

    #[test]
    fn fingerprint_ignores_mtime_and_non_exec_mode_bits() {
        let a = OutputManifest::new(vec![file("d/a", b"x", 0o644, 1)]);
        let b = OutputManifest::new(vec![file("d/a", b"x", 0o600, 99)]);
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = OutputManifest::new(vec![file("d/a", b"x", 0o755, 1)]);
        assert_ne!(a.fingerprint(), c.fingerprint());
        let d = OutputManifest::new(vec![file("d/a", b"y", 0o644, 1)]);
        assert_ne!(a.fingerprint(), d.fingerprint());
        let e = OutputManifest::new(vec![file("d/b", b"x", 0o644, 1)]);
        assert_ne!(a.fingerprint(), e.fingerprint());
    }

    #[test]
    fn diff_names_added_removed_changed() {
        let a = OutputManifest::new(vec![file("a", b"1", 0o644, 0), file("b", b"2", 0o644, 0)]);
        let b = OutputManifest::new(vec![file("b", b"3", 0o644, 0), file("c", b"4", 0o644, 0)]);
        let d = a.diff(&b);
        assert_eq!(d.added, ["c"]);
        assert_eq!(d.removed, ["a"]);
        assert_eq!(d.changed, ["b"]);
        assert!(a.diff(&a).is_empty());
    }
}
