//! Moving unpacked outputs from a staging directory into the workspace. Each entry arrives by
//! `rename`, so a reader never sees a half-written file, and a symlink in the way is replaced
//! rather than followed: a workspace that an earlier (or hostile) run left with
//! `dist -> /somewhere` must not turn a restore into a write to `/somewhere`. Files whose
//! size, mode and mtime already match the manifest are left alone (brief §6: outputs that
//! are current are not rewritten — their inodes, and tools watching them, stay undisturbed).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::{
    ArtifactError, RESTORE_MODE_MASK, ancestors, check_relative, mtime_ns, set_mtime_nofollow,
};
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
    /// Bytes of file content renamed into place.
    pub bytes_placed: u64,
}

/// Moves the entries of `manifest` from `staging` (an [`unpack`](super::unpack)
/// destination, on the same file system as `workspace_root` — e.g. under the workspace's
/// `.prova/tmp` — so that `rename` works) to their paths under `workspace_root`:
///
/// - every parent of a destination is made a real directory: a symlink or a file there is
///   removed and replaced, never written through;
/// - a regular file already there with the manifest's size, mode and mtime is left alone;
/// - anything else is replaced by `rename` (which swaps a symlink rather than following
///   it); a directory where a file or link goes is removed first;
/// - the manifest's mode (setuid/setgid/sticky stripped) and mtime are set on the staged
///   entry before it is renamed, so the destination is never seen with the wrong stamps.
///
/// Directory entries are created, and their modes and mtimes set last, deepest first.
/// Entries already placed stay placed if a later one fails; a retry completes the restore.
pub fn place(
    staging: &Path,
    workspace_root: &Path,
    manifest: &OutputManifest,
) -> Result<PlaceStats, ArtifactError> {
    let mut p = Placer {
        staging,
        root: workspace_root,
        real_dirs: HashSet::new(),
        stats: PlaceStats::default(),
    };
    let mut dirs = Vec::new();
    for entry in &manifest.entries {
        check_relative(&entry.path)?;
        for parent in ancestors(&entry.path) {
            p.real_dir(parent)?;
        }
        match entry.kind {
            EntryKind::File => p.file(entry)?,
            EntryKind::Symlink => p.symlink(entry)?,
            EntryKind::Dir => {
                p.real_dir(&entry.path)?;
                dirs.push(entry);
            }
        }
    }
    // Entering files changed the directories' mtimes; set theirs after, deepest first.
    dirs.sort_by(|a, b| b.path.cmp(&a.path));
    for d in dirs {
        let abs = workspace_root.join(&d.path);
        let mode = fs::Permissions::from_mode(d.mode & RESTORE_MODE_MASK);
        fs::set_permissions(&abs, mode).map_err(ArtifactError::io(&abs))?;
        set_mtime_nofollow(&abs, d.mtime_ns).map_err(ArtifactError::io(&abs))?;
    }
    Ok(p.stats)
}

struct Placer<'a> {
    staging: &'a Path,
    root: &'a Path,
    /// Workspace-relative paths checked (or made) real directories during this place.
    real_dirs: HashSet<String>,
    stats: PlaceStats,
}

impl Placer<'_> {
    /// Makes `rel` a real directory: kept if it is one, created if missing, and a symlink or
    /// file in its place removed first (a symlink is removed, not its target).
    fn real_dir(&mut self, rel: &str) -> Result<(), ArtifactError> {
        if self.real_dirs.contains(rel) {
            return Ok(());
        }
        let abs = self.root.join(rel);
        match fs::symlink_metadata(&abs) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                fs::remove_file(&abs).map_err(ArtifactError::io(&abs))?;
                self.stats.replaced += 1;
                self.create_dir(&abs)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.create_dir(&abs)?,
            Err(e) => return Err(ArtifactError::Io { path: abs, source: e }),
        }
        self.real_dirs.insert(rel.to_owned());
        Ok(())
    }

    /// Creates `abs`. Two restores into one project (two tasks writing under one output dir,
    /// or two processes) may race to create the same parent: a real directory that appeared
    /// meanwhile is what we wanted; anything else there is still an error.
    fn create_dir(&mut self, abs: &Path) -> Result<(), ArtifactError> {
        match fs::create_dir(abs) {
            Ok(()) => {
                self.stats.dirs_created += 1;
                Ok(())
            }
            Err(e)
                if e.kind() == io::ErrorKind::AlreadyExists
                    && fs::symlink_metadata(abs).is_ok_and(|m| m.is_dir()) =>
            {
                Ok(())
            }
            Err(e) => Err(ArtifactError::Io { path: abs.to_owned(), source: e }),
        }
    }

    fn file(&mut self, e: &ManifestEntry) -> Result<(), ArtifactError> {
        let src = self.staging.join(&e.path);
        let staged = self.staged(e, &src)?;
        if !staged.is_file() || staged.len() != e.size {
            return Err(mismatch(e, "staged file differs in kind or size"));
        }
        let mode = e.mode & RESTORE_MODE_MASK;
        let dst = self.root.join(&e.path);
        match fs::symlink_metadata(&dst) {
            Ok(m)
                if m.is_file()
                    && m.len() == e.size
                    && m.mode() & 0o7777 == mode
                    && mtime_ns(&m) == e.mtime_ns =>
            {
                self.stats.already_current += 1;
                return Ok(());
            }
            Ok(m) if m.is_dir() => self.remove_tree(&dst)?,
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(ArtifactError::Io { path: dst, source: err }),
        }
        // `src` is a regular file in our own staging dir (checked above), so following it
        // is safe; the stamps are set before the rename so `dst` never has stale ones.
        fs::set_permissions(&src, fs::Permissions::from_mode(mode))
            .map_err(ArtifactError::io(&src))?;
        set_mtime_nofollow(&src, e.mtime_ns).map_err(ArtifactError::io(&src))?;
        fs::rename(&src, &dst).map_err(ArtifactError::io(&dst))?;
        self.stats.placed += 1;
        self.stats.bytes_placed += e.size;
        Ok(())
    }

    fn symlink(&mut self, e: &ManifestEntry) -> Result<(), ArtifactError> {
        let src = self.staging.join(&e.path);
        let staged = self.staged(e, &src)?;
        let target = fs::read_link(&src).map_err(ArtifactError::io(&src))?;
        if !staged.file_type().is_symlink()
            || Some(target.as_os_str()) != e.link_target.as_deref().map(std::ffi::OsStr::new)
        {
            return Err(mismatch(e, "staged symlink differs in kind or target"));
        }
        let dst = self.root.join(&e.path);
        match fs::symlink_metadata(&dst) {
            Ok(m) if m.file_type().is_symlink() && mtime_ns(&m) == e.mtime_ns => {
                if fs::read_link(&dst).map_err(ArtifactError::io(&dst))? == target {
                    self.stats.already_current += 1;
                    return Ok(());
                }
            }
            Ok(m) if m.is_dir() => self.remove_tree(&dst)?,
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(ArtifactError::Io { path: dst, source: err }),
        }
        set_mtime_nofollow(&src, e.mtime_ns).map_err(ArtifactError::io(&src))?;
        fs::rename(&src, &dst).map_err(ArtifactError::io(&dst))?;
        self.stats.placed += 1;
        Ok(())
    }

    /// The staged entry's metadata (not following links).
    fn staged(&self, e: &ManifestEntry, src: &Path) -> Result<fs::Metadata, ArtifactError> {
        match fs::symlink_metadata(src) {
            Ok(m) => Ok(m),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                Err(mismatch(e, "missing from the staging directory"))
            }
            Err(err) => Err(ArtifactError::Io { path: src.to_owned(), source: err }),
        }
    }

    /// Removes a directory standing where a file or link goes (`remove_dir_all` does not
    /// follow the links inside it).
    fn remove_tree(&mut self, abs: &Path) -> Result<(), ArtifactError> {
        fs::remove_dir_all(abs).map_err(ArtifactError::io(abs))?;
        self.stats.replaced += 1;
        Ok(())
    }
}

fn mismatch(e: &ManifestEntry, reason: &str) -> ArtifactError {
    ArtifactError::ManifestMismatch { path: e.path.clone(), reason: reason.to_owned() }
}

#[cfg(test)]
mod tests;
