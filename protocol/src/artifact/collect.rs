//! Collecting a task's outputs into a manifest. Only the globs' roots are walked (a task's
//! outputs are usually one `dist/`; walking the workspace would cost a full tree scan per
//! task), and symlinks are recorded as links, never followed — following them would make the
//! manifest depend on what lies outside the outputs, and a link to `/` would never finish.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{ArtifactError, mtime_ns};
use crate::digest::Digest;
use crate::globs::{PathGlobs, join_rel};
use crate::manifest::{EntryKind, ManifestEntry, OutputManifest};

/// Walks `globs.roots()` under `workspace_root` and records every regular file and symlink
/// whose workspace-relative path the globs select: its BLAKE3 digest (of the bytes, or of a
/// link's target string), size, mode (`& 0o7777`) and mtime. FIFOs, sockets and devices are
/// skipped silently — they are never outputs. A missing root is not an error (a task may
/// produce nothing under one of its patterns); a non-UTF-8 name is.
pub fn collect_outputs(
    workspace_root: &Path,
    globs: &PathGlobs,
) -> Result<OutputManifest, ArtifactError> {
    let mut entries = Vec::new();
    // (workspace-relative, absolute); an explicit stack keeps deep trees off the call stack.
    let mut stack: Vec<(String, PathBuf)> = globs
        .roots()
        .iter()
        .rev()
        .map(|r| {
            (
                r.clone(),
                if r.is_empty() { workspace_root.to_owned() } else { workspace_root.join(r) },
            )
        })
        .collect();
    while let Some((rel, abs)) = stack.pop() {
        let meta = match fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ArtifactError::Io { path: abs, source: e }),
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            let mut children = Vec::new();
            for child in fs::read_dir(&abs).map_err(ArtifactError::io(&abs))? {
                let child = child.map_err(ArtifactError::io(&abs))?;
                let name = child.file_name();
                let Some(name) = name.to_str() else {
                    return Err(ArtifactError::NonUtf8Path { path: child.path() });
                };
                children.push((join_rel(&rel, name), child.path()));
            }
            // Reverse-sorted so the stack pops in order (the manifest sorts anyway; this only
            // makes the walk reproducible).
            children.sort_by(|a, b| b.0.cmp(&a.0));
            stack.extend(children);
        } else if rel.is_empty() || !globs.is_match(&rel) {
            continue;
        } else if ft.is_symlink() {
            entries.push(symlink_entry(rel, &abs, &meta)?);
        } else if ft.is_file() {
            entries.extend(file_entry(rel, &abs)?);
        }
        // Anything else (FIFO, socket, device) is never an output.
    }
    let mut manifest = OutputManifest::new(entries);
    // Roots never nest (`PathGlobs` drops nested ones), but a duplicate would corrupt the
    // manifest's one-entry-per-path invariant, so make it impossible.
    manifest.entries.dedup_by(|a, b| a.path == b.path);
    Ok(manifest)
}

fn symlink_entry(
    rel: String,
    abs: &Path,
    meta: &fs::Metadata,
) -> Result<ManifestEntry, ArtifactError> {
    let target = fs::read_link(abs).map_err(ArtifactError::io(abs))?;
    let Some(target) = target.to_str() else {
        return Err(ArtifactError::NonUtf8Path { path: abs.to_owned() });
    };
    Ok(ManifestEntry {
        path: rel,
        kind: EntryKind::Symlink,
        mode: meta.mode() & 0o7777,
        size: target.len() as u64,
        digest: Some(Digest::of(target.as_bytes())),
        mtime_ns: mtime_ns(meta),
        link_target: Some(target.to_owned()),
    })
}

/// Hashes a regular file. Returns `None` if the path stopped being a regular file since it
/// was listed (it is then not an output of this run). Opened with `O_NOFOLLOW` (a file
/// swapped for a link is not followed) and `O_NONBLOCK` (a file swapped for a FIFO does not
/// hang the open). The size is what was hashed, so digest and size always agree.
fn file_entry(rel: String, abs: &Path) -> Result<Option<ManifestEntry>, ArtifactError> {
    let file = match open_nofollow(abs) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ArtifactError::Io { path: abs.to_owned(), source: e }),
    };
    let meta = file.metadata().map_err(ArtifactError::io(abs))?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut counted = CountingReader { inner: file, count: 0 };
    let digest = Digest::of_reader(&mut counted).map_err(ArtifactError::io(abs))?;
    Ok(Some(ManifestEntry {
        path: rel,
        kind: EntryKind::File,
        mode: meta.mode() & 0o7777,
        size: counted.count,
        digest: Some(digest),
        // Taken before hashing: if the file changes meanwhile its mtime moves past this one,
        // so a later "already current" check cannot mistake it for these bytes.
        mtime_ns: mtime_ns(&meta),
        link_target: None,
    }))
}

/// Opens a file for reading without following a final symlink and without blocking on a
/// FIFO.
pub(crate) fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
}

/// Counts the bytes read through it.
struct CountingReader<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::artifact::test_support::{globs, make_fifo, write};

    #[test]
    fn files_links_modes_and_nesting() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        write(root, "web/dist/a.js", b"a", 0o644);
        write(root, "web/dist/deep/er/b.js", b"bb", 0o600);
        write(root, "web/dist/run.sh", b"#!/bin/sh\n", 0o755);
        write(root, "web/src/main.ts", b"src", 0o644);
        symlink("a.js", root.join("web/dist/link.js")).unwrap();
        symlink("/nonexistent/target", root.join("web/dist/dangling")).unwrap();
        fs::create_dir_all(root.join("outside")).unwrap();
        write(root, "outside/secret", b"s", 0o644);
        // A link to a directory is recorded, not descended into.
        symlink("../../outside", root.join("web/dist/out")).unwrap();

        let m = collect_outputs(root, &globs("web", &["dist"])).unwrap();
        let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "web/dist/a.js",
                "web/dist/dangling",
                "web/dist/deep/er/b.js",
                "web/dist/link.js",
                "web/dist/out",
                "web/dist/run.sh"
            ]
        );
        let get = |p: &str| m.entries.iter().find(|e| e.path == p).unwrap();
        let a = get("web/dist/a.js");
        assert_eq!((a.kind, a.size, a.mode), (EntryKind::File, 1, 0o644));
        assert_eq!(a.digest, Some(Digest::of(b"a")));
        let meta = fs::metadata(root.join("web/dist/a.js")).unwrap();
        assert_eq!(a.mtime_ns, meta.mtime() * 1_000_000_000 + meta.mtime_nsec());
        assert!(get("web/dist/run.sh").executable());
        assert!(!a.executable());
        assert_eq!(get("web/dist/deep/er/b.js").mode, 0o600);
        let link = get("web/dist/link.js");
        assert_eq!(link.kind, EntryKind::Symlink);
        assert_eq!(link.link_target.as_deref(), Some("a.js"));
        assert_eq!(link.size, 4);
        assert_eq!(link.digest, Some(Digest::of(b"a.js")));
        assert_eq!(get("web/dist/out").kind, EntryKind::Symlink);
    }

    #[test]
    fn exclusions_and_globs() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        write(root, "p/dist/a.js", b"a", 0o644);
        write(root, "p/dist/a.js.map", b"m", 0o644);
        write(root, "p/dist/cache/x", b"x", 0o644);
        write(root, "p/out.txt", b"o", 0o644);
        write(root, "p/other.txt", b"o", 0o644);
        let g = globs("p", &["dist/**", "!dist/**/*.map", "!dist/cache/**", "out.txt"]);
        let m = collect_outputs(root, &g).unwrap();
        let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["p/dist/a.js", "p/out.txt"]);
    }

    #[test]
    fn missing_roots_and_file_roots() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        write(root, "p/report.json", b"{}", 0o644);
        let g = globs("p", &["dist", "build/**", "report.json"]);
        let m = collect_outputs(root, &g).unwrap();
        assert_eq!(m.entries.len(), 1);
        assert_eq!(m.entries[0].path, "p/report.json");
        let none = collect_outputs(root, &globs("q", &["dist"])).unwrap();
        assert!(none.entries.is_empty());
    }

    #[test]
    fn fifos_and_sockets_are_ignored() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        write(root, "p/dist/a", b"a", 0o644);
        make_fifo(&root.join("p/dist/pipe"));
        let _sock = std::os::unix::net::UnixListener::bind(root.join("p/dist/sock")).unwrap();
        let m = collect_outputs(root, &globs("p", &["dist"])).unwrap();
        let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["p/dist/a"]);
    }

    #[test]
    fn non_utf8_names_are_an_error() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        fs::create_dir_all(root.join("p/dist")).unwrap();
        let name = std::ffi::OsStr::from_bytes(b"bad\xff");
        fs::write(root.join("p/dist").join(name), b"x").unwrap();
        let err = collect_outputs(root, &globs("p", &["dist"])).unwrap_err();
        assert!(matches!(err, ArtifactError::NonUtf8Path { .. }), "{err}");
    }

    #[test]
    fn whole_workspace_root() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        write(root, "a", b"a", 0o644);
        write(root, "d/b", b"b", 0o644);
        let m = collect_outputs(root, &globs("", &["**", "!d/**"])).unwrap();
        let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a"]);
    }
}
