//! A task's declared outputs on disk: removing them before an attempt (so nothing stale is
//! mistaken for an output), and collecting, fingerprinting and packing them after.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use prova_protocol::artifact;
use prova_protocol::globs::{PathGlobs, join_rel};
use prova_protocol::work::Outputs;

/// Collecting or packing failed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// The artifact module refused.
    #[error(transparent)]
    Artifact(#[from] artifact::ArtifactError),
}

/// Removes every existing path that matches `globs` under `root` (files, symlinks, and
/// directories left empty), without following symlinks.
pub fn clean(root: &Path, globs: &PathGlobs) -> Result<(), OutputError> {
    for r in globs.roots() {
        let start = root.join(r);
        let meta = match fs::symlink_metadata(&start) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(OutputError::Io { path: start, source: e }),
        };
        if !meta.is_dir() {
            if globs.is_match(r) {
                remove(&start, false)?;
            }
            continue;
        }
        // Walk rather than drop the whole directory: an exclusion (`!dist/keep`) may
        // protect part of it.
        if clean_dir(root, r, globs)? && globs.is_match(r) {
            remove(&start, true)?;
        }
    }
    Ok(())
}

fn clean_dir(root: &Path, rel: &str, globs: &PathGlobs) -> Result<bool, OutputError> {
    let dir = root.join(rel);
    let entries =
        fs::read_dir(&dir).map_err(|e| OutputError::Io { path: dir.clone(), source: e })?;
    let mut empty = true;
    for entry in entries {
        let entry = entry.map_err(|e| OutputError::Io { path: dir.clone(), source: e })?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            empty = false;
            continue;
        };
        let child = join_rel(rel, &name);
        let ft =
            entry.file_type().map_err(|e| OutputError::Io { path: entry.path(), source: e })?;
        if ft.is_dir() {
            if clean_dir(root, &child, globs)? && globs.is_match(&child) {
                remove(&entry.path(), true)?;
            } else {
                empty = false;
            }
        } else if globs.is_match(&child) {
            remove(&entry.path(), false)?;
        } else {
            empty = false;
        }
    }
    Ok(empty)
}

fn remove(path: &Path, dir: bool) -> Result<(), OutputError> {
    let r = if dir { fs::remove_dir_all(path) } else { fs::remove_file(path) };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(OutputError::Io { path: path.to_owned(), source: e }),
    }
}

/// Collects the outputs under `root`, fingerprints them, and packs them to `pack_to` when
/// given and there is something to pack (no outputs, no artifact: a task without outputs
/// costs no archive, fsync, upload or blob). Also returns the declared literal outputs that
/// do not exist.
pub fn collect(
    root: &Path,
    globs: &PathGlobs,
    pack_to: Option<&Path>,
) -> Result<(Outputs, Vec<String>), OutputError> {
    let manifest = artifact::collect_outputs(root, globs)?;
    let missing = globs
        .literals()
        .iter()
        .filter(|l| fs::symlink_metadata(root.join(l)).is_err())
        .cloned()
        .collect();
    let fingerprint = manifest.fingerprint();
    let artifact = match pack_to {
        Some(path) if !manifest.entries.is_empty() => Some(pack_file(root, &manifest, path)?),
        _ => None,
    };
    Ok((Outputs { manifest, fingerprint, artifact }, missing))
}

/// Packs to `path` (fsynced), hashing the archive bytes as they are written so the file is
/// never read back.
fn pack_file(
    root: &Path,
    manifest: &prova_protocol::manifest::OutputManifest,
    path: &Path,
) -> Result<(prova_protocol::Digest, u64), OutputError> {
    let io_err = |e| OutputError::Io { path: path.to_owned(), source: e };
    let file = fs::File::create(path).map_err(io_err)?;
    let mut w = HashingWriter {
        inner: io::BufWriter::with_capacity(256 * 1024, file),
        hasher: blake3::Hasher::new(),
        len: 0,
    };
    artifact::pack(root, manifest, &mut w, 3)?;
    let file = w.inner.into_inner().map_err(|e| io_err(e.into_error()))?;
    file.sync_all().map_err(io_err)?;
    Ok((prova_protocol::Digest(*w.hasher.finalize().as_bytes()), w.len))
}

struct HashingWriter<W> {
    inner: W,
    hasher: blake3::Hasher,
    len: u64,
}

impl<W: io::Write> io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_outputs_no_archive_and_outputs_are_packed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("p/dist")).unwrap();
        let globs = PathGlobs::new("p", &["dist/**".to_owned()]).unwrap();
        let pack = dir.path().join("a.tar.zst");

        let (outs, _) = collect(&root, &globs, Some(&pack)).unwrap();
        assert!(outs.manifest.entries.is_empty());
        assert_eq!(outs.artifact, None);
        assert!(!pack.exists(), "an empty output set was packed");

        std::fs::write(root.join("p/dist/out.txt"), "x").unwrap();
        let (outs, _) = collect(&root, &globs, Some(&pack)).unwrap();
        let (_, size) = outs.artifact.expect("an artifact");
        assert_eq!(std::fs::metadata(&pack).unwrap().len(), size);
    }
}
