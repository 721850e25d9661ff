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
//! bind mount inside the sandbox, or, without one, a shallow mirror of its top level.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use prova_protocol::Digest;
use prova_protocol::tree::{TreeKind, TreeManifest};

use crate::blobcache::BlobCache;

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
    /// The store under `work_dir/trees`.
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
        let built = build(&staging, m, blobs);
        if let Err(e) = built {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        fs::rename(&staging, &done).map_err(io_err(&done))?;
        Ok(done)
    }
}

/// Builds the manifest's entries under a new directory `at`.
fn build(at: &Path, m: &TreeManifest, blobs: &BlobCache) -> Result<(), TreeError> {
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
                match fs::hard_link(&src, &dest) {
                    Ok(()) => {}
                    // The blob cache is on another file system than the work dir.
                    Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
                        fs::copy(&src, &dest).map_err(io_err(&dest))?;
                    }
                    Err(err) => return Err(io_err(dest)(err)),
                }
            }
        }
    }
    Ok(())
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
