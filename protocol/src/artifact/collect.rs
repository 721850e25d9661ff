//! Collecting a task's outputs into a manifest: files, symlinks, and the directories the
//! globs select that hold nothing recorded (an empty `dist/cache/`, an empty `out/` of
//! `out/**`), so a hit leaves what the run left. Only the globs' roots are walked (a task's
//! outputs are usually one `dist/`; walking the workspace would cost a full tree scan per
//! task), and symlinks are recorded as links, never followed — following them would make the
//! manifest depend on what lies outside the outputs, and a link to `/` would never finish.
//!
//! The walk is fd-relative ([`super::nofollow`]): no component of any path is followed. A
//! symlink *on the way* to an output root (`dist -> elsewhere` with `outputs =
//! ["dist/gen/**"]`), or an output root that is a symlink the globs do not select, is refused
//! with [`ArtifactError::SymlinkedOutputDir`]: what lies behind it is not the task's output and
//! is never collected (so never cached nor replayed). A symlink the globs select is an output
//! like any other and is recorded as a link.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::path::Path;

use super::ArtifactError;
use super::nofollow::{self, DirFd, Kind, Parent};
use crate::digest::Digest;
use crate::globs::{PathGlobs, join_rel};
use crate::manifest::{EntryKind, ManifestEntry, OutputManifest};

/// Walks `globs.roots()` under `workspace_root` and records every regular file and symlink
/// whose workspace-relative path the globs select: its BLAKE3 digest (of the bytes, or of a
/// link's target string), size, mode (`& 0o7777`) and mtime; and every directory the globs
/// select with nothing recorded beneath it (its mode and mtime). FIFOs, sockets and devices are
/// skipped silently — they are never outputs. A missing root is not an error (a task may
/// produce nothing under one of its patterns); a non-UTF-8 name is, and so is a symlinked
/// directory on the way to a root (see the module doc).
pub fn collect_outputs(
    workspace_root: &Path,
    globs: &PathGlobs,
) -> Result<OutputManifest, ArtifactError> {
    let root = DirFd::open_root(workspace_root).map_err(ArtifactError::io(workspace_root))?;
    let mut c = Collector { root: workspace_root, globs, entries: Vec::new() };
    for r in globs.roots() {
        if r.is_empty() {
            // The workspace itself: never an output directory.
            c.walk(&root, "")?;
            continue;
        }
        let (dir, name) = match nofollow::parent_of(&root, r).map_err(c.io(r))? {
            Parent::Dir(d, n) => (d, n),
            Parent::Missing => continue,
            Parent::Symlink(path) => return Err(ArtifactError::SymlinkedOutputDir { path }),
        };
        let Some(st) = dir.stat(&name).map_err(c.io(r))? else { continue };
        match st.kind {
            Kind::Dir => match dir.open_dir(&name) {
                Ok(sub) => c.dir(&sub, r)?,
                // Swapped for something else since the stat: judged again as that.
                Err(e) if nofollow::is_not_a_dir(&e) => c.leaf(&dir, &name, r.clone(), None)?,
                Err(e) => return Err(c.io(r)(e)),
            },
            Kind::Symlink if !globs.is_match(r) => {
                return Err(ArtifactError::SymlinkedOutputDir { path: r.clone() });
            }
            _ => c.leaf(&dir, &name, r.clone(), Some(st.kind))?,
        }
    }
    let mut manifest = OutputManifest::new(c.entries);
    // Roots never nest (`PathGlobs` drops nested ones), but a duplicate would corrupt the
    // manifest's one-entry-per-path invariant, so make it impossible.
    manifest.entries.dedup_by(|a, b| a.path == b.path);
    Ok(manifest)
}

struct Collector<'a> {
    root: &'a Path,
    globs: &'a PathGlobs,
    entries: Vec<ManifestEntry>,
}

impl Collector<'_> {
    fn io(&self, rel: &str) -> impl FnOnce(io::Error) -> ArtifactError {
        ArtifactError::io(if rel.is_empty() { self.root.to_owned() } else { self.root.join(rel) })
    }

    /// Walks the real directory `dir` (workspace-relative `rel`, not the workspace root), and
    /// records it when it is empty and the globs select it as a directory
    /// ([`PathGlobs::selects_dir`]): an empty `dist/cache/` the task made is as much its
    /// output as a file, and a hit without it would not be what the run left. A directory
    /// holding only what the globs leave out (`!dist/maps/**`) is not recorded: it exists for
    /// the sake of what is not an output.
    fn dir(&mut self, dir: &DirFd, rel: &str) -> Result<(), ArtifactError> {
        if !self.walk(dir, rel)? && self.globs.selects_dir(rel) {
            let st = dir.stat_self().map_err(self.io(rel))?;
            self.entries.push(ManifestEntry {
                mtime_ns: st.mtime_ns,
                ..ManifestEntry::dir(rel, st.mode & 0o7777)
            });
        }
        Ok(())
    }

    /// Walks the real directory `dir` (workspace-relative `rel`); whether it held anything.
    fn walk(&mut self, dir: &DirFd, rel: &str) -> Result<bool, ArtifactError> {
        let mut children = Vec::new();
        for (name, kind) in dir.entries().map_err(self.io(rel))? {
            let Some(s) = name.to_str() else {
                return Err(ArtifactError::NonUtf8Path { path: self.root.join(rel).join(&name) });
            };
            children.push((join_rel(rel, s), name, kind));
        }
        let held = !children.is_empty();
        // Sorted so the walk is reproducible (the manifest sorts anyway).
        children.sort_by(|a, b| a.0.cmp(&b.0));
        for (child, name, kind) in children {
            let kind = match kind {
                Some(k) => k,
                None => match dir.stat(&name).map_err(self.io(&child))? {
                    Some(s) => s.kind,
                    None => continue,
                },
            };
            if kind == Kind::Dir {
                match dir.open_dir(&name) {
                    Ok(sub) => self.dir(&sub, &child)?,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) if nofollow::is_not_a_dir(&e) => self.leaf(dir, &name, child, None)?,
                    Err(e) => return Err(self.io(&child)(e)),
                }
            } else {
                self.leaf(dir, &name, child, Some(kind))?;
            }
        }
        Ok(held)
    }

    /// Records the non-directory `name` of `dir` if the globs select it.
    fn leaf(
        &mut self,
        dir: &DirFd,
        name: &OsStr,
        rel: String,
        kind: Option<Kind>,
    ) -> Result<(), ArtifactError> {
        if rel.is_empty() || !self.globs.is_match(&rel) {
            return Ok(());
        }
        let kind = match kind {
            Some(k) => k,
            None => match dir.stat(name).map_err(self.io(&rel))? {
                Some(s) => s.kind,
                None => return Ok(()),
            },
        };
        let entry = match kind {
            Kind::Symlink => self.symlink_entry(dir, name, rel)?,
            Kind::File => self.file_entry(dir, name, rel)?,
            // A FIFO, socket or device is never an output; a directory here was swapped in
            // since it was listed (not an output of this run).
            Kind::Other | Kind::Dir => None,
        };
        self.entries.extend(entry);
        Ok(())
    }

    fn symlink_entry(
        &self,
        dir: &DirFd,
        name: &OsStr,
        rel: String,
    ) -> Result<Option<ManifestEntry>, ArtifactError> {
        let Some(st) = dir.stat(name).map_err(self.io(&rel))? else { return Ok(None) };
        if st.kind != Kind::Symlink {
            return Ok(None);
        }
        let target = match dir.readlink(name) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io(&rel)(e)),
        };
        let Some(target) = target.to_str() else {
            return Err(ArtifactError::NonUtf8Path { path: self.root.join(&rel) });
        };
        Ok(Some(ManifestEntry {
            path: rel,
            kind: EntryKind::Symlink,
            mode: st.mode & 0o7777,
            size: target.len() as u64,
            digest: Some(Digest::of(target.as_bytes())),
            mtime_ns: st.mtime_ns,
            link_target: Some(target.to_owned()),
        }))
    }

    /// Hashes a regular file. `None` if the name stopped being a regular file since it was
    /// listed (it is then not an output of this run). Opened with `O_NOFOLLOW` (a file
    /// swapped for a link is not followed) and `O_NONBLOCK` (a file swapped for a FIFO does
    /// not hang the open). The size is what was hashed, so digest and size always agree.
    fn file_entry(
        &self,
        dir: &DirFd,
        name: &OsStr,
        rel: String,
    ) -> Result<Option<ManifestEntry>, ArtifactError> {
        let file = match dir.open_file(name) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
            Err(e) => return Err(self.io(&rel)(e)),
        };
        let st = nofollow::stat_file(&file).map_err(self.io(&rel))?;
        if st.kind != Kind::File {
            return Ok(None);
        }
        let mut counted = CountingReader { inner: file, count: 0 };
        let digest = Digest::of_reader(&mut counted).map_err(self.io(&rel))?;
        Ok(Some(ManifestEntry {
            path: rel,
            kind: EntryKind::File,
            mode: st.mode & 0o7777,
            size: counted.count,
            digest: Some(digest),
            // Taken before hashing: if the file changes meanwhile its mtime moves past this
            // one, so a later "already current" check cannot mistake it for these bytes.
            mtime_ns: st.mtime_ns,
            link_target: None,
        }))
    }
}

/// Opens a file for reading without following a final symlink and without blocking on a
/// FIFO.
pub(crate) fn open_nofollow(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
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
    use std::fs;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
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
    fn empty_directories_the_globs_select_are_recorded() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        write(root, "p/dist/a.js", b"a", 0o644);
        write(root, "p/dist/maps/a.js.map", b"m", 0o644);
        write(root, "p/gen/x.ts", b"x", 0o644);
        for d in ["p/dist/empty", "p/dist/deep/er", "p/out", "p/gen/sub", "q/out"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let g = globs("p", &["dist/**", "!dist/**/*.map", "out/**", "gen/*.ts"]);
        let m = collect_outputs(root, &g).unwrap();
        let dirs: Vec<&str> =
            m.entries.iter().filter(|e| e.kind == EntryKind::Dir).map(|e| &*e.path).collect();
        // `maps` holds only what is left out; `gen/sub` is not selected (`gen/*.ts`); `q` is
        // another project.
        assert_eq!(dirs, ["p/dist/deep/er", "p/dist/empty", "p/out"]);
        // An empty root is itself an output of `out/**`, but not of `out/*.js`.
        let none = collect_outputs(root, &globs("p", &["out/*.js"])).unwrap();
        assert!(none.entries.is_empty(), "{none:?}");
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

    #[test]
    fn symlinked_dirs_on_the_way_to_a_root_are_refused_never_followed() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "gen/secret", b"s", 0o644);
        let root = ws.path();
        fs::create_dir_all(root.join("p")).unwrap();
        symlink(outside.path(), root.join("p/dist")).unwrap();
        for pats in [&["dist/gen/**"][..], &["dist/**"], &["dist/*.js"]] {
            let err = collect_outputs(root, &globs("p", pats)).unwrap_err();
            assert!(
                matches!(&err, ArtifactError::SymlinkedOutputDir { path } if path == "p/dist"),
                "{pats:?}: {err}"
            );
            assert!(err.to_string().contains("`p/dist` is a symlink; prova does not write"));
        }
        // A link the globs select is an output: recorded as a link, not followed.
        let m = collect_outputs(root, &globs("p", &["dist"])).unwrap();
        assert_eq!(m.entries.len(), 1);
        assert_eq!(m.entries[0].kind, EntryKind::Symlink);
        // A deeper link.
        fs::remove_file(root.join("p/dist")).unwrap();
        fs::create_dir_all(root.join("p/dist")).unwrap();
        symlink(outside.path().join("gen"), root.join("p/dist/gen")).unwrap();
        let err = collect_outputs(root, &globs("p", &["dist/gen/x/**"])).unwrap_err();
        assert!(matches!(&err, ArtifactError::SymlinkedOutputDir { path } if path == "p/dist/gen"));
        // Beneath the root, a link is an entry (if selected), never descended into.
        let m = collect_outputs(root, &globs("p", &["dist/**"])).unwrap();
        let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["p/dist/gen"]);
    }
}
