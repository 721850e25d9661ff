//! Packing a manifest's entries into tar inside zstd. The archive is a pure function of the
//! manifest's paths, kinds, modes and contents: entries in manifest (path) order, GNU headers
//! with owner 0, empty user and group names and mtime 0 — the real mtime travels in the
//! manifest. So two runs that produce the same tree produce the same archive bytes, whoever
//! ran them and whenever (brief §6; STACK.md pitfall 7).

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use tar::{Builder, EntryType, Header};

use super::collect::open_nofollow;
use super::{ArtifactError, check_relative};
use crate::digest::Digest;
use crate::manifest::{EntryKind, ManifestEntry, OutputManifest};

/// What a pack wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Entries written (files, symlinks, directories).
    pub entries: u64,
    /// Bytes of file content.
    pub content_bytes: u64,
    /// Bytes of the tar stream (headers, content, padding) before compression.
    pub tar_bytes: u64,
    /// Bytes written to `out`.
    pub compressed_bytes: u64,
}

/// [`pack`] into a new file at `path`, fsynced, hashing the archive bytes as they are
/// written so the file is never read back: the archive's BLAKE3 digest and its length.
/// Creating or syncing `path` fails as [`ArtifactError::Io`] naming `path`.
pub fn pack_to_file(
    workspace_root: &Path,
    manifest: &OutputManifest,
    path: &Path,
    level: i32,
) -> Result<(Digest, u64), ArtifactError> {
    let io_err = |source| ArtifactError::Io { path: path.to_owned(), source };
    let file = fs::File::create(path).map_err(io_err)?;
    let mut w = Hashing {
        inner: io::BufWriter::with_capacity(256 * 1024, file),
        hasher: blake3::Hasher::new(),
        len: 0,
    };
    pack(workspace_root, manifest, &mut w, level)?;
    let file = w.inner.into_inner().map_err(|e| io_err(e.into_error()))?;
    file.sync_all().map_err(io_err)?;
    Ok((Digest(*w.hasher.finalize().as_bytes()), w.len))
}

/// A writer that hashes and counts what passes through it.
struct Hashing<W> {
    inner: W,
    hasher: blake3::Hasher,
    len: u64,
}

impl<W: Write> Write for Hashing<W> {
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

/// Writes the entries of `manifest`, read from under `workspace_root`, as a deterministic
/// tar+zstd stream at zstd `level` into `out`. Each file is hashed while it streams into the
/// archive; if its bytes, size or kind no longer match the manifest (it changed after it was
/// collected) the pack fails with [`ArtifactError::ChangedWhilePacking`] and `out` holds
/// garbage the caller must discard.
pub fn pack(
    workspace_root: &Path,
    manifest: &OutputManifest,
    out: impl Write,
    level: i32,
) -> Result<PackStats, ArtifactError> {
    let failed = |what: &str| {
        let what = what.to_owned();
        move |source| ArtifactError::Write { what, source }
    };
    let encoder = zstd::Encoder::new(CountingWriter { inner: out, count: 0 }, level)
        .map_err(failed("its start"))?;
    let mut builder = Builder::new(CountingWriter { inner: encoder, count: 0 });
    let mut stats = PackStats::default();
    for entry in &manifest.entries {
        check_relative(&entry.path)?;
        append(&mut builder, workspace_root, entry, &mut stats)?;
        stats.entries += 1;
    }
    // Finish the tar (end-of-archive blocks), then the zstd frame: either one missing
    // truncates the archive.
    let tar_out = builder.into_inner().map_err(failed("its end"))?;
    stats.tar_bytes = tar_out.count;
    let out = tar_out.inner.finish().map_err(failed("its end"))?;
    stats.compressed_bytes = out.count;
    Ok(stats)
}

/// A header with everything but path, kind, mode and size normalised.
fn header(kind: EntryType, mode: u32, size: u64) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode & 0o7777);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h
}

fn append<W: Write>(
    builder: &mut Builder<W>,
    root: &Path,
    entry: &ManifestEntry,
    stats: &mut PackStats,
) -> Result<(), ArtifactError> {
    let path = entry.path.as_str();
    let abs = root.join(path);
    let changed = || ArtifactError::ChangedWhilePacking { path: path.to_owned() };
    // A failed append is the archive's write failing, unless reading the file did.
    let failed = |source| ArtifactError::Write { what: format!("`{path}`"), source };
    match entry.kind {
        EntryKind::File => {
            let want = entry.digest.ok_or_else(|| {
                ArtifactError::Corrupt(format!("manifest file `{path}` has no digest"))
            })?;
            let file = match open_nofollow(&abs) {
                Ok(f) => f,
                // Gone, or swapped for a symlink (`O_NOFOLLOW` gives ELOOP).
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(libc::ELOOP) =>
                {
                    return Err(changed());
                }
                Err(e) => return Err(ArtifactError::Io { path: abs, source: e }),
            };
            let meta = file.metadata().map_err(ArtifactError::io(&abs))?;
            if !meta.is_file() || meta.len() != entry.size {
                return Err(changed());
            }
            let mut h = header(EntryType::Regular, entry.mode, entry.size);
            let mut reader = HashingReader {
                inner: file.take(entry.size),
                hasher: blake3::Hasher::new(),
                count: 0,
                error: None,
            };
            // A file that shrank meanwhile leaves the entry short; the digest check below
            // catches it and the half-written archive is discarded.
            if let Err(e) = builder.append_data(&mut h, path, &mut reader) {
                return Err(match reader.error.take() {
                    Some(source) => ArtifactError::Io { path: abs, source },
                    None => failed(e),
                });
            }
            let got = Digest(*reader.hasher.finalize().as_bytes());
            if reader.count != entry.size || got != want {
                return Err(changed());
            }
            stats.content_bytes += entry.size;
        }
        EntryKind::Symlink => {
            let want = entry.link_target.as_deref().ok_or_else(|| {
                ArtifactError::Corrupt(format!("manifest symlink `{path}` has no target"))
            })?;
            match fs::read_link(&abs) {
                Ok(t) if t.as_os_str() == want => {}
                Ok(_) => return Err(changed()),
                Err(e)
                    if e.kind() == io::ErrorKind::NotFound
                        || e.kind() == io::ErrorKind::InvalidInput =>
                {
                    return Err(changed());
                }
                Err(e) => return Err(ArtifactError::Io { path: abs, source: e }),
            }
            let mut h = header(EntryType::Symlink, entry.mode, 0);
            append_symlink(builder, &mut h, path, want).map_err(failed)?;
        }
        EntryKind::Dir => {
            let mut h = header(EntryType::Directory, entry.mode, 0);
            builder.append_data(&mut h, path, io::empty()).map_err(failed)?;
        }
    }
    Ok(())
}

/// Appends a symlink with its target stored verbatim. The `tar` crate's `append_link`
/// normalises targets (`./x` becomes `x`, a trailing `/` is dropped), which would make the
/// restored link differ from the manifest; targets longer than the header field go in a GNU
/// long-link (`K`) entry written here.
fn append_symlink<W: Write>(
    builder: &mut Builder<W>,
    h: &mut Header,
    path: &str,
    target: &str,
) -> io::Result<()> {
    let bytes = target.as_bytes();
    if bytes.len() >= h.as_old().linkname.len() {
        let mut k = header(EntryType::GNULongLink, 0o644, bytes.len() as u64 + 1);
        k.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        k.set_cksum();
        builder.append(&k, bytes.chain(&[0u8][..]))?;
        h.set_link_name_literal(&bytes[..h.as_old().linkname.len() - 1])?;
    } else {
        h.set_link_name_literal(bytes)?;
    }
    builder.append_data(h, path, io::empty())
}

/// Hashes and counts what is read through it, so a file is read once for both the archive
/// and the integrity check; keeps its first read error (an append's error is otherwise the
/// archive's write).
struct HashingReader<R> {
    inner: R,
    hasher: blake3::Hasher,
    count: u64,
    error: Option<io::Error>,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.inner.read(buf) {
            Ok(n) => n,
            Err(e) => {
                if self.error.is_none() && e.kind() != io::ErrorKind::Interrupted {
                    self.error = Some(io::Error::new(e.kind(), e.to_string()));
                }
                return Err(e);
            }
        };
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// Counts bytes written through it.
struct CountingWriter<W> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::artifact::collect_outputs;
    use crate::artifact::test_support::{globs, set_mtime, write};

    /// A tree with nested files, an executable, links (one with a long, non-normalised
    /// target) and a path longer than a tar header's name field.
    fn tree(root: &Path) {
        write(root, "p/dist/a.js", b"console.log(1)\n", 0o644);
        write(root, "p/dist/bin/run", b"#!/bin/sh\necho hi\n", 0o755);
        write(root, "p/dist/empty", b"", 0o600);
        let long = format!("p/dist/{}/{}.js", "d".repeat(80), "f".repeat(60));
        write(root, &long, &vec![7u8; 100_000], 0o644);
        symlink("a.js", root.join("p/dist/link.js")).unwrap();
        symlink(format!("./{}/", "t".repeat(120)), root.join("p/dist/longlink")).unwrap();
    }

    fn pack_tree(root: &Path) -> (Vec<u8>, PackStats) {
        let m = collect_outputs(root, &globs("p", &["dist"])).unwrap();
        let mut out = Vec::new();
        let stats = pack(root, &m, &mut out, 3).unwrap();
        (out, stats)
    }

    #[test]
    fn same_tree_same_bytes() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        tree(a.path());
        tree(b.path());
        // Different mtimes (and owners, where the test may chown) on the second tree.
        for rel in ["p/dist/a.js", "p/dist/bin/run", "p/dist/link.js"] {
            set_mtime(&b.path().join(rel), 1_234_567_890_123_456_789);
            let _ = std::os::unix::fs::lchown(b.path().join(rel), Some(4242), Some(4242));
        }
        let (x, stats) = pack_tree(a.path());
        let (y, _) = pack_tree(b.path());
        assert_eq!(x, y);
        assert_eq!(stats.entries, 6);
        assert_eq!(stats.compressed_bytes, x.len() as u64);
        assert_eq!(stats.content_bytes, 15 + 18 + 100_000);
        assert!(stats.tar_bytes > stats.content_bytes);
        // Touching a file (mtime only) and packing again changes nothing either.
        set_mtime(&a.path().join("p/dist/a.js"), 42);
        let (z, _) = pack_tree(a.path());
        assert_eq!(x, z);
    }

    #[test]
    fn headers_are_normalised() {
        let ws = tempfile::tempdir().unwrap();
        tree(ws.path());
        let (bytes, _) = pack_tree(ws.path());
        let tar_bytes = zstd::decode_all(&bytes[..]).unwrap();
        let mut ar = tar::Archive::new(&tar_bytes[..]);
        let mut seen = Vec::new();
        for e in ar.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!((h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()), (0, 0, 0));
            assert_eq!(h.username_bytes(), Some(&b""[..]));
            seen.push(String::from_utf8(e.path_bytes().into_owned()).unwrap());
            if h.entry_type() == EntryType::Symlink && seen.last().unwrap().ends_with("longlink") {
                let t = e.link_name_bytes().unwrap();
                assert_eq!(&*t, format!("./{}/", "t".repeat(120)).as_bytes());
            }
        }
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(seen, sorted);
    }

    #[test]
    fn a_file_changed_after_collect_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        tree(root);
        let m = collect_outputs(root, &globs("p", &["dist"])).unwrap();
        // Same size, different bytes: only the streaming digest can tell.
        write(root, "p/dist/a.js", b"console.log(2)\n", 0o644);
        let err = pack(root, &m, Vec::new(), 3).unwrap_err();
        assert!(
            matches!(&err, ArtifactError::ChangedWhilePacking { path } if path == "p/dist/a.js"),
            "{err}"
        );
        // Different size.
        write(root, "p/dist/a.js", b"x", 0o644);
        let err = pack(root, &m, Vec::new(), 3).unwrap_err();
        assert!(matches!(err, ArtifactError::ChangedWhilePacking { .. }), "{err}");
    }

    #[test]
    fn a_link_retargeted_or_a_file_removed_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        tree(root);
        let m = collect_outputs(root, &globs("p", &["dist"])).unwrap();
        fs::remove_file(root.join("p/dist/link.js")).unwrap();
        symlink("b.js", root.join("p/dist/link.js")).unwrap();
        let err = pack(root, &m, Vec::new(), 3).unwrap_err();
        assert!(matches!(err, ArtifactError::ChangedWhilePacking { .. }), "{err}");

        let m = collect_outputs(root, &globs("p", &["dist"])).unwrap();
        fs::remove_file(root.join("p/dist/a.js")).unwrap();
        symlink("bin/run", root.join("p/dist/a.js")).unwrap();
        let err = pack(root, &m, Vec::new(), 3).unwrap_err();
        assert!(matches!(err, ArtifactError::ChangedWhilePacking { .. }), "{err}");
    }

    /// A writer whose writes fail with `errno` once `room` bytes went through.
    struct Failing {
        room: usize,
        errno: i32,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from_raw_os_error(self.errno));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_that_fails_is_said_as_such_never_a_corrupt_artifact() {
        // A full disk (or quota, an I/O error, a file too large) under the archive is where it
        // was written, not bad bytes: the caller tells a full disk by the OS error it carries.
        let ws = tempfile::tempdir().unwrap();
        tree(ws.path());
        let m = collect_outputs(ws.path(), &globs("p", &["dist"])).unwrap();
        for errno in [libc::ENOSPC, libc::EDQUOT, libc::EIO, libc::EFBIG] {
            // At the first write, and once some bytes went through (the tree packs to a few
            // hundred).
            for room in [0, 64] {
                let err = pack(ws.path(), &m, Failing { room, errno }, 3).unwrap_err();
                let text = err.to_string();
                assert!(matches!(err, ArtifactError::Write { .. }), "{errno}/{room}: {text}");
                assert!(text.starts_with("writing the archive failed"), "{text}");
                assert!(!text.contains("corrupt"), "{text}");
                let os = std::error::Error::source(&err)
                    .and_then(|s| s.downcast_ref::<io::Error>())
                    .and_then(io::Error::raw_os_error);
                assert_eq!(os, Some(errno), "{text}");
            }
        }
    }

    #[test]
    fn unclean_manifest_paths_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        let m = OutputManifest::new(vec![ManifestEntry {
            path: "../x".into(),
            kind: EntryKind::Dir,
            mode: 0o755,
            size: 0,
            digest: None,
            mtime_ns: 0,
            link_target: None,
        }]);
        let err = pack(ws.path(), &m, Vec::new(), 3).unwrap_err();
        assert!(matches!(err, ArtifactError::ParentTraversal { .. }), "{err}");
    }
}
