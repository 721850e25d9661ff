//! Installed trees on a worker (issue 12): each tree digest is materialised **once**, under
//! `<work dir>/trees/<digest>/<name>` (`name` is the last component of the tree's workspace
//! path, so a package resolved through its real path still finds its siblings in a directory
//! called `node_modules`), from the blob cache: files are hardlinks to their blobs (the
//! executable twin for an executable file), symlinks are recreated as written, directories
//! made one component at a time — nothing is ever written through a link. A tree is built in
//! a staging directory and renamed into place, so a half-built tree is never used, and a
//! staging directory left by a crash is removed by the next build.
//!
//! Exec roots then mount the tree at its workspace path ([`crate::execroot`]): a read-only
//! bind mount inside the sandbox, or, without one, a shallow mirror of its top level — then
//! of a copy (files copied, not linked) the worker watches while tasks use it
//! ([`crate::treecopies`]).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use prova_protocol::Digest;
use prova_protocol::tree::{TreeKind, TreeManifest};

use crate::blobcache::BlobCache;
use crate::execroot::RootTree;

/// Why a tree could not be materialised.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A file system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The manifest names a blob the cache does not hold.
    #[error("installed tree entry `{path}` needs blob {digest}, which this worker does not hold")]
    MissingBlob {
        /// The entry.
        path: String,
        /// Its blob.
        digest: String,
    },
    /// The blob cache failed.
    #[error(transparent)]
    Blob(#[from] crate::blobcache::BlobCacheError),
}

fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> TreeError {
    let path = path.into();
    move |source| TreeError::Io { path, source }
}

/// One build at a time in this process: a second task wanting the same tree waits for the
/// first, then finds it built.
static BUILDING: Mutex<()> = Mutex::new(());

/// The trees materialised under one work dir.
#[derive(Debug)]
pub struct TreeStore {
    dir: PathBuf,
}

impl TreeStore {
    /// The store under `work_dir/trees`: files hardlinked to their blobs, for roots a
    /// sandbox mounts the trees into read-only.
    pub fn new(work_dir: &Path) -> Self {
        Self { dir: work_dir.join("trees") }
    }

    /// Where tree `digest` named `name` is (or would be) materialised.
    pub fn path_of(&self, digest: &Digest, name: &str) -> PathBuf {
        self.dir.join(digest.to_hex()).join(name)
    }

    /// Tree `digest` (whose checked manifest is `m`) materialised as `name`: built from
    /// `blobs` unless it already is. Returns its directory.
    pub fn ensure(
        &self,
        digest: &Digest,
        name: &str,
        m: &TreeManifest,
        blobs: &BlobCache,
    ) -> Result<PathBuf, TreeError> {
        let done = self.path_of(digest, name);
        if done.is_dir() {
            return Ok(done);
        }
        let _one = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
        if done.is_dir() {
            return Ok(done);
        }
        let holder = self.dir.join(digest.to_hex());
        fs::create_dir_all(&holder).map_err(io_err(&holder))?;
        let staging = holder.join(format!(".{name}.building"));
        if fs::symlink_metadata(&staging).is_ok() {
            // Left by a build that died: never trusted.
            fs::remove_dir_all(&staging).map_err(io_err(&staging))?;
        }
        let built = build(&staging, m, blobs, false);
        if let Err(e) = built {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        fs::rename(&staging, &done).map_err(io_err(&done))?;
        Ok(done)
    }
}

/// Builds the manifest's entries under a new directory `at`, each file a hardlink to its
/// blob or (`copy`) a copy of it.
pub(crate) fn build(
    at: &Path,
    m: &TreeManifest,
    blobs: &BlobCache,
    copy: bool,
) -> Result<(), TreeError> {
    fs::DirBuilder::new().mode(0o755).create(at).map_err(io_err(at))?;
    // Sorted by path with every parent listed first (the manifest was checked), so each
    // entry's directory exists and is one this build made.
    for e in &m.entries {
        let dest = at.join(&e.path);
        match &e.kind {
            TreeKind::Dir => {
                fs::DirBuilder::new().mode(0o755).create(&dest).map_err(io_err(&dest))?
            }
            TreeKind::Symlink { target } => symlink(target, &dest).map_err(io_err(&dest))?,
            TreeKind::File { digest, exec } => {
                let src = blobs.try_path(digest, *exec)?.ok_or_else(|| TreeError::MissingBlob {
                    path: e.path.clone(),
                    digest: digest.short(),
                })?;
                match (!copy).then(|| fs::hard_link(&src, &dest)) {
                    Some(Ok(())) => {}
                    Some(Err(err)) if err.raw_os_error() != Some(libc::EXDEV) => {
                        return Err(io_err(dest)(err));
                    }
                    // Asked for, or the blob cache is on another file system than the work
                    // dir: a copy (with the blob's mode).
                    _ => {
                        fs::copy(&src, &dest).map_err(io_err(&dest))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Most links one path's resolution follows (Linux's `ELOOP` limit).
const MAX_HOPS: usize = 40;

/// What a failed lookup inside a mounted tree was.
#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    /// It led out of every tree (through a link such as an npm workspace's
    /// `node_modules/@s/a -> ../../packages/a`): this workspace path.
    Out(String),
    /// It stays inside a tree, which holds nothing there: an absence the tree's digest keys.
    Absent,
    /// It stays inside a tree, which holds it: the tree was not where the task looked.
    Held(String),
}

/// `reads` (a traced run in an exec root mounting `trees`) with each failed lookup inside a
/// tree settled against the tree's own directory on this machine: one that leads out of the
/// trees through their links becomes the workspace path it designates (judged like any
/// other), one the tree does not hold is dropped (the tree is in the task's key, absences
/// included), one the tree holds stays (the tree was missing: never proven). Listings inside
/// a tree are dropped: the tree, not the workspace, decides what they hold. The same on a
/// farm worker and in a local proof, so both name the same paths.
pub fn settle_reads(reads: &mut prova_protocol::work::ReadsReport, trees: &[RootTree]) {
    use prova_protocol::globs::is_within;
    if trees.is_empty() {
        return;
    }
    let in_tree = |p: &str| trees.iter().any(|t| is_within(p, &t.path));
    let mut missing: Vec<String> = Vec::with_capacity(reads.missing.len());
    for p in &reads.missing {
        if !in_tree(p) {
            missing.push(p.clone());
            continue;
        }
        match resolve(p, trees) {
            Lookup::Out(r) | Lookup::Held(r) => missing.push(r),
            Lookup::Absent => {}
        }
    }
    missing.sort();
    missing.dedup();
    reads.missing = missing;
    reads.listed.retain(|l| !in_tree(&l.dir));
}

/// Where `p` leads, following the links of `trees` (each read from its directory on this
/// machine) component by component, as the kernel would.
fn resolve(p: &str, trees: &[RootTree]) -> Lookup {
    use prova_protocol::globs::is_within;
    let host = |rel: &str| -> Option<PathBuf> {
        let t = trees.iter().find(|t| is_within(rel, &t.path))?;
        let rest = rel[t.path.len()..].trim_start_matches('/');
        Some(if rest.is_empty() { t.source.clone() } else { t.source.join(rest) })
    };
    let mut queue: std::collections::VecDeque<String> = p.split('/').map(str::to_owned).collect();
    let mut parts: Vec<String> = Vec::new();
    let (mut hops, mut found) = (0, true);
    while let Some(c) = queue.pop_front() {
        match c.as_str() {
            "" | "." => continue,
            ".." => {
                if parts.pop().is_none() {
                    return Lookup::Out(p.to_owned());
                }
                continue;
            }
            _ => parts.push(c),
        }
        if !found {
            continue; // past a missing component: the rest is lexical
        }
        let rel = parts.join("/");
        let Some(on_disk) = host(&rel) else { continue };
        match fs::symlink_metadata(&on_disk) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = fs::read_link(&on_disk).ok();
                let Some(t) = target.as_ref().and_then(|t| t.to_str()) else {
                    return Lookup::Out(p.to_owned());
                };
                hops += 1;
                if hops > MAX_HOPS || t.starts_with('/') {
                    return Lookup::Out(p.to_owned());
                }
                parts.pop();
                for tc in t.split('/').rev() {
                    queue.push_front(tc.to_owned());
                }
            }
            Ok(_) => {}
            Err(_) => found = false,
        }
    }
    let resolved = parts.join("/");
    if !trees.iter().any(|t| is_within(&resolved, &t.path)) {
        Lookup::Out(resolved)
    } else if found {
        Lookup::Held(resolved)
    } else {
        Lookup::Absent
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use prova_protocol::tree::TreeEntry;

    use super::*;

    fn blob(cache: &BlobCache, bytes: &[u8]) -> Digest {
        let d = Digest::of(bytes);
        let (path, mut f) = cache.stage_file().unwrap();
        f.write_all(bytes).unwrap();
        drop(f);
        cache.insert_file(&path, &d).unwrap();
        d
    }

    #[test]
    fn a_tree_is_built_once_with_its_links_and_exec_bits() {
        let work = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(&work.path().join("blobs"), 1 << 30).unwrap();
        let js = blob(&cache, b"module.exports = 1");
        let m = TreeManifest::new(vec![
            TreeEntry { path: "foo".into(), kind: TreeKind::Dir },
            TreeEntry {
                path: "foo/index.js".into(),
                kind: TreeKind::File { digest: js, exec: false },
            },
            TreeEntry { path: "foo/cli".into(), kind: TreeKind::File { digest: js, exec: true } },
            TreeEntry { path: ".bin".into(), kind: TreeKind::Dir },
            TreeEntry {
                path: ".bin/foo".into(),
                kind: TreeKind::Symlink { target: "../foo/cli".into() },
            },
        ]);
        let store = TreeStore::new(work.path());
        let d = m.digest();
        let at = store.ensure(&d, "node_modules", &m, &cache).unwrap();
        assert!(at.ends_with(format!("{}/node_modules", d.to_hex())));
        assert_eq!(fs::read(at.join(".bin/foo")).unwrap(), b"module.exports = 1");
        use std::os::unix::fs::PermissionsExt as _;
        assert_ne!(fs::metadata(at.join("foo/cli")).unwrap().permissions().mode() & 0o100, 0);
        assert_eq!(fs::metadata(at.join("foo/index.js")).unwrap().permissions().mode() & 0o100, 0);
        // Built once: a second ensure does not rebuild (a marker placed inside survives).
        fs::write(at.join("marker"), "x").unwrap();
        let again = store.ensure(&d, "node_modules", &m, &cache).unwrap();
        assert!(again.join("marker").exists());
        use std::os::unix::fs::MetadataExt as _;
        let ino = |p: &Path| fs::metadata(p).unwrap().ino();
        let blob_ino = ino(&cache.path(&js, false).unwrap());
        assert_eq!(ino(&at.join("foo/index.js")), blob_ino, "a hardlink to the blob");
    }

    #[test]
    fn lookups_inside_a_tree_are_settled_against_the_tree() {
        use prova_protocol::work::{Listing, ReadsReport};
        let d = tempfile::tempdir().unwrap();
        let nm = d.path().join("nm");
        fs::create_dir_all(nm.join("x")).unwrap();
        fs::write(nm.join("x/index.js"), "x").unwrap();
        symlink("../packages/b", nm.join("b")).unwrap();
        symlink("/abs/elsewhere", nm.join("abs")).unwrap();
        let trees = [RootTree { path: "node_modules".into(), source: nm }];
        let mut reads = ReadsReport {
            traced: true,
            missing: [
                "node_modules/b/dist/y.js", // through the workspace link: a workspace path
                "node_modules/x/nope.js",   // the tree holds nothing there: keyed
                "node_modules/x/index.js",  // the tree holds it: the tree was not there
                "node_modules/b/../x/a.js", // `..` after a link is the link target's parent
                "node_modules/abs/q",       // an absolute link: as it is
                "src/a.ts",                 // outside every tree: as it is
            ]
            .map(String::from)
            .to_vec(),
            listed: vec![
                Listing { dir: "node_modules/x".into(), entries: vec![], complete: true },
                Listing { dir: "src".into(), entries: vec![], complete: true },
            ],
            ..Default::default()
        };
        settle_reads(&mut reads, &trees);
        assert_eq!(
            reads.missing,
            [
                "node_modules/abs/q",
                "node_modules/x/index.js",
                "packages/b/dist/y.js",
                "packages/x/a.js",
                "src/a.ts"
            ]
        );
        assert_eq!(reads.listed.len(), 1);
        assert_eq!(reads.listed[0].dir, "src");
    }

    #[test]
    fn a_missing_blob_fails_and_leaves_nothing_half_built() {
        let work = tempfile::tempdir().unwrap();
        let cache = BlobCache::open(&work.path().join("blobs"), 1 << 30).unwrap();
        let m = TreeManifest::new(vec![TreeEntry {
            path: "x.js".into(),
            kind: TreeKind::File { digest: Digest::of(b"absent"), exec: false },
        }]);
        let store = TreeStore::new(work.path());
        let err = store.ensure(&m.digest(), "node_modules", &m, &cache).unwrap_err();
        assert!(matches!(err, TreeError::MissingBlob { .. }), "{err}");
        let holder = work.path().join("trees").join(m.digest().to_hex());
        assert_eq!(fs::read_dir(&holder).unwrap().count(), 0, "no staging or tree left");
    }
}
