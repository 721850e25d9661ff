//! Moving unpacked outputs from a staging directory into the workspace. Each entry arrives by
//! `rename`, so a reader never sees a half-written file, and a symlink in the way is replaced
//! rather than followed: a workspace that an earlier (or hostile) run left with
//! `dist -> /somewhere` must not turn a restore into a write to `/somewhere`.
//!
//! That rule holds for **every** ancestor and is race-free: the workspace is walked with
//! directory fds ([`super::nofollow`]), each component opened `O_NOFOLLOW | O_DIRECTORY`; a
//! symlink or file where a directory must be is `unlinkat`-ed and replaced by `mkdirat`, and
//! the entry is `renameat`-ed into the verified directory's fd.
//!
//! A file is left alone only when prova can prove it is what the restore would write: same
//! size, mode and mtime **and** the same content digest (its bytes are hashed — a pinned mtime
//! must not let other bytes pass as current; brief §6: outputs that are current are not
//! rewritten, so their inodes, and tools watching them, stay undisturbed).
//!
//! When the staging directory is on another file system (`EXDEV` from `renameat`), the entry
//! is copied into a temporary name in the destination directory (fd-relative), given its
//! mode and mtime, then renamed over the destination within that directory.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::nofollow::{self, DirFd, Kind, Stat};
use super::{ArtifactError, RESTORE_MODE_MASK, ancestors, check_relative};
use crate::digest::Digest;
use crate::manifest::{EntryKind, ManifestEntry, OutputManifest};

/// What a place did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlaceStats {
    /// Files and symlinks renamed into place.
    pub placed: u64,
    /// Files and symlinks left alone because they were already current.
    pub already_current: u64,
    /// Directories created (parents and directory entries).
    pub dirs_created: u64,
    /// Things removed because they stood where a directory, file or link had to go
    /// (symlinked parents, a directory where a file goes, …).
    pub replaced: u64,
    /// Bytes of file content renamed (or copied) into place.
    pub bytes_placed: u64,
    /// Entries copied because the staging directory is on another file system.
    pub copied_across_devices: u64,
}

/// Moves the entries of `manifest` from `staging` (an [`unpack`](super::unpack)
/// destination) to their paths under `workspace_root`:
///
/// - every ancestor of a destination is made a real directory: a symlink or a file there is
///   removed and replaced, never written through (a caller that must not remove what the
///   outputs do not select checks first: the local layer's restore refuses instead);
/// - a regular file already there with the manifest's size, mode, mtime and digest is left
///   alone;
/// - anything else is replaced by `renameat` (which swaps a symlink rather than following
///   it); a directory where a file or link goes is removed first;
/// - the manifest's mode (setuid/setgid/sticky stripped) and mtime are set on the staged
///   entry before it is renamed, so the destination is never seen with the wrong stamps;
/// - across file systems the entry is copied to a temporary name beside the destination and
///   renamed from there.
///
/// Directory entries are created, and their modes and mtimes set last, deepest first.
/// Entries already placed stay placed if a later one fails; a retry completes the restore.
pub fn place(
    staging: &Path,
    workspace_root: &Path,
    manifest: &OutputManifest,
) -> Result<PlaceStats, ArtifactError> {
    let stage_root = DirFd::open_root(staging).map_err(ArtifactError::io(staging))?;
    let ws_root = DirFd::open_root(workspace_root).map_err(ArtifactError::io(workspace_root))?;
    let mut p = Placer {
        staging,
        root: workspace_root,
        ws: HashMap::from([(String::new(), Rc::new(ws_root))]),
        stage: HashMap::from([(String::new(), Rc::new(stage_root))]),
        stats: PlaceStats::default(),
    };
    let mut dirs = Vec::new();
    for entry in &manifest.entries {
        check_relative(&entry.path)?;
        let (parent, name) = split(&entry.path);
        for a in ancestors(&entry.path) {
            p.real_dir(a)?;
        }
        match entry.kind {
            EntryKind::File => p.file(entry, parent, name)?,
            EntryKind::Symlink => p.symlink(entry, parent, name)?,
            EntryKind::Dir => {
                p.real_dir(&entry.path)?;
                dirs.push(entry);
            }
        }
    }
    // Entering files changed the directories' mtimes; set theirs after, deepest first.
    dirs.sort_by(|a, b| b.path.cmp(&a.path));
    for d in dirs {
        let fd = p.real_dir(&d.path)?;
        fd.set_own_mode_and_mtime(d.mode & RESTORE_MODE_MASK, d.mtime_ns)
            .map_err(p.ws_io(&d.path))?;
    }
    Ok(p.stats)
}

/// `a/b/c` → (`a/b`, `c`); `c` → (``, `c`).
fn split(path: &str) -> (&str, &OsStr) {
    match path.rsplit_once('/') {
        Some((d, n)) => (d, OsStr::new(n)),
        None => ("", OsStr::new(path)),
    }
}

struct Placer<'a> {
    staging: &'a Path,
    root: &'a Path,
    /// Workspace directories checked (or made) real, by relative path: the current entry's
    /// ancestors (see [`keep_chain`]).
    ws: HashMap<String, Rc<DirFd>>,
    /// Staging directories opened, by relative path.
    stage: HashMap<String, Rc<DirFd>>,
    stats: PlaceStats,
}

impl Placer<'_> {
    fn ws_io(&self, rel: &str) -> impl FnOnce(io::Error) -> ArtifactError {
        ArtifactError::io(self.root.join(rel))
    }

    fn stage_io(&self, rel: &str) -> impl FnOnce(io::Error) -> ArtifactError {
        ArtifactError::io(self.staging.join(rel))
    }

    /// Makes the workspace-relative `rel` a real directory and returns it opened: kept if it
    /// is one, created if missing, and a symlink or file in its place removed first (a
    /// symlink is removed, not its target). Two restores into one project may race to create
    /// the same directory: one that appeared meanwhile is what we wanted.
    fn real_dir(&mut self, rel: &str) -> Result<Rc<DirFd>, ArtifactError> {
        if let Some(d) = self.ws.get(rel) {
            return Ok(d.clone());
        }
        let (parent, name) = split(rel);
        let parent = self.real_dir(parent)?;
        let mut attempts = 0;
        let dir = loop {
            attempts += 1;
            match parent.open_dir(name) {
                Ok(d) => break d,
                Err(e) if attempts > 4 => return Err(self.ws_io(rel)(e)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => match parent.mkdir(name) {
                    Ok(()) => self.stats.dirs_created += 1,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(self.ws_io(rel)(e)),
                },
                Err(e) if nofollow::is_not_a_dir(&e) => {
                    parent.unlink(name).map_err(self.ws_io(rel))?;
                    self.stats.replaced += 1;
                }
                Err(e) => return Err(self.ws_io(rel)(e)),
            }
        };
        let dir = Rc::new(dir);
        keep_chain(&mut self.ws, rel);
        self.ws.insert(rel.to_owned(), dir.clone());
        Ok(dir)
    }

    /// The staging directory `rel` (our own tree, still opened without following).
    fn stage_dir(&mut self, rel: &str) -> Result<Rc<DirFd>, ArtifactError> {
        if let Some(d) = self.stage.get(rel) {
            return Ok(d.clone());
        }
        let (parent, name) = split(rel);
        let parent = self.stage_dir(parent)?;
        let dir = match parent.open_dir(name) {
            Ok(d) => Rc::new(d),
            Err(e) if e.kind() == io::ErrorKind::NotFound || nofollow::is_not_a_dir(&e) => {
                return Err(ArtifactError::ManifestMismatch {
                    path: rel.to_owned(),
                    reason: "missing from the staging directory".to_owned(),
                });
            }
            Err(e) => return Err(self.stage_io(rel)(e)),
        };
        keep_chain(&mut self.stage, rel);
        self.stage.insert(rel.to_owned(), dir.clone());
        Ok(dir)
    }

    /// The staged entry's stamps.
    fn staged(
        &mut self,
        e: &ManifestEntry,
        parent: &str,
    ) -> Result<(Rc<DirFd>, Stat), ArtifactError> {
        let dir = match self.stage_dir(parent) {
            Ok(d) => d,
            Err(ArtifactError::ManifestMismatch { .. }) => {
                return Err(mismatch(e, "missing from the staging directory"));
            }
            Err(err) => return Err(err),
        };
        match dir.stat(split(&e.path).1).map_err(self.stage_io(&e.path))? {
            Some(st) => Ok((dir, st)),
            None => Err(mismatch(e, "missing from the staging directory")),
        }
    }

    fn file(&mut self, e: &ManifestEntry, parent: &str, name: &OsStr) -> Result<(), ArtifactError> {
        let (sdir, staged) = self.staged(e, parent)?;
        if staged.kind != Kind::File || staged.size != e.size {
            return Err(mismatch(e, "staged file differs in kind or size"));
        }
        let mode = e.mode & RESTORE_MODE_MASK;
        let wdir = self.real_dir(parent)?;
        match wdir.stat(name).map_err(self.ws_io(&e.path))? {
            Some(m)
                if m.kind == Kind::File
                    && m.size == e.size
                    && m.mode & 0o7777 == mode
                    && m.mtime_ns == e.mtime_ns
                    && e.digest.is_some()
                    && self.digest_of(&wdir, name, &e.path)? == e.digest =>
            {
                self.stats.already_current += 1;
                return Ok(());
            }
            Some(m) if m.kind == Kind::Dir => self.remove_tree(&wdir, name, &e.path)?,
            _ => {}
        }
        // The stamps are set on the staged file (opened without following: our own staging
        // tree) before the rename, so the destination never has stale ones.
        let file = sdir.open_file(name).map_err(self.stage_io(&e.path))?;
        nofollow::set_file_mode_and_mtime(&file, mode, e.mtime_ns)
            .map_err(self.stage_io(&e.path))?;
        match sdir.rename(name, &wdir, name) {
            Ok(()) => {}
            Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
                self.copy_file_across(file, &wdir, name, e, mode)?;
            }
            Err(err) => return Err(self.ws_io(&e.path)(err)),
        }
        self.stats.placed += 1;
        self.stats.bytes_placed += e.size;
        Ok(())
    }

    /// The digest of the regular file `name` in `dir`, or `None` if it is no longer one.
    fn digest_of(
        &self,
        dir: &DirFd,
        name: &OsStr,
        rel: &str,
    ) -> Result<Option<Digest>, ArtifactError> {
        let mut file = match dir.open_file(name) {
            Ok(f) => f,
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ELOOP) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(self.ws_io(rel)(e)),
        };
        if nofollow::stat_file(&file).map_err(self.ws_io(rel))?.kind != Kind::File {
            return Ok(None);
        }
        Ok(Some(Digest::of_reader(&mut file).map_err(self.ws_io(rel))?))
    }

    /// `EXDEV`: copies the staged file into a fresh temporary name in `wdir`, sets its mode
    /// and mtime, and renames it over `name` within `wdir`.
    fn copy_file_across(
        &mut self,
        mut src: std::fs::File,
        wdir: &DirFd,
        name: &OsStr,
        e: &ManifestEntry,
        mode: u32,
    ) -> Result<(), ArtifactError> {
        let (tmp, mut out) = self.temp_in(wdir, name, &e.path, |d, t| d.create_file(t, 0o600))?;
        let result = (|| {
            let n = io::copy(&mut src, &mut out)?;
            if n != e.size {
                return Err(io::Error::other(format!(
                    "staged file has {n} bytes, the manifest {}",
                    e.size
                )));
            }
            nofollow::set_file_mode_and_mtime(&out, mode, e.mtime_ns)?;
            drop(out);
            wdir.rename(&tmp, wdir, name)
        })();
        if let Err(err) = result {
            let _ = wdir.unlink(&tmp);
            return Err(self.ws_io(&e.path)(err));
        }
        self.stats.copied_across_devices += 1;
        Ok(())
    }

    /// Creates a fresh temporary entry beside `name` in `dir` with `make`, retrying on a name
    /// collision.
    fn temp_in<T>(
        &self,
        dir: &DirFd,
        name: &OsStr,
        rel: &str,
        make: impl Fn(&DirFd, &OsStr) -> io::Result<T>,
    ) -> Result<(OsString, T), ArtifactError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut last = None;
        for _ in 0..16 {
            let mut tmp = OsString::from(".");
            tmp.push(name);
            tmp.push(format!(
                ".prova-restore-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            match make(dir, &tmp) {
                Ok(t) => return Ok((tmp, t)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(self.ws_io(rel)(e)),
            }
        }
        Err(self.ws_io(rel)(last.unwrap_or_else(|| io::Error::other("no temporary name"))))
    }

    fn symlink(
        &mut self,
        e: &ManifestEntry,
        parent: &str,
        name: &OsStr,
    ) -> Result<(), ArtifactError> {
        let (sdir, staged) = self.staged(e, parent)?;
        let target = if staged.kind == Kind::Symlink {
            Some(sdir.readlink(name).map_err(self.stage_io(&e.path))?)
        } else {
            None
        };
        let Some(target) =
            target.filter(|t| Some(t.as_os_str()) == e.link_target.as_deref().map(OsStr::new))
        else {
            return Err(mismatch(e, "staged symlink differs in kind or target"));
        };
        let wdir = self.real_dir(parent)?;
        match wdir.stat(name).map_err(self.ws_io(&e.path))? {
            Some(m)
                if m.kind == Kind::Symlink
                    && m.mtime_ns == e.mtime_ns
                    && wdir.readlink(name).map_err(self.ws_io(&e.path))? == target =>
            {
                self.stats.already_current += 1;
                return Ok(());
            }
            Some(m) if m.kind == Kind::Dir => self.remove_tree(&wdir, name, &e.path)?,
            _ => {}
        }
        sdir.set_mtime(name, e.mtime_ns).map_err(self.stage_io(&e.path))?;
        match sdir.rename(name, &wdir, name) {
            Ok(()) => {}
            Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
                let (tmp, ()) = self.temp_in(&wdir, name, &e.path, |d, t| d.symlink(&target, t))?;
                let result =
                    wdir.set_mtime(&tmp, e.mtime_ns).and_then(|()| wdir.rename(&tmp, &wdir, name));
                if let Err(err) = result {
                    let _ = wdir.unlink(&tmp);
                    return Err(self.ws_io(&e.path)(err));
                }
                self.stats.copied_across_devices += 1;
            }
            Err(err) => return Err(self.ws_io(&e.path)(err)),
        }
        self.stats.placed += 1;
        Ok(())
    }

    /// Removes a directory standing where a file or link goes (never following the links
    /// inside it).
    fn remove_tree(&mut self, dir: &DirFd, name: &OsStr, rel: &str) -> Result<(), ArtifactError> {
        dir.remove_tree(name).map_err(self.ws_io(rel))?;
        // Any directory fd cached beneath it names a directory that is gone.
        self.ws.retain(|k, _| !crate::globs::is_within(k, rel) || k.is_empty());
        self.stats.replaced += 1;
        Ok(())
    }
}

/// Keeps only the open directories that are ancestors of `rel`: manifests are sorted, so a
/// directory's entries are contiguous and each is opened once, while the number of open fds
/// stays the depth of the tree, not its number of directories.
fn keep_chain(dirs: &mut HashMap<String, Rc<DirFd>>, rel: &str) {
    dirs.retain(|k, _| crate::globs::is_within(rel, k));
}

fn mismatch(e: &ManifestEntry, reason: &str) -> ArtifactError {
    ArtifactError::ManifestMismatch { path: e.path.clone(), reason: reason.to_owned() }
}

#[cfg(test)]
mod tests;
