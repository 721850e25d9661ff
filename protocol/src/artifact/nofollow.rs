//! File-system access beneath a root that never follows a symlink in any path component.
//!
//! Cleaning, collecting and restoring outputs work on workspace-relative paths such as
//! `web/dist/gen/a.js`. Joining that to the root and calling `lstat`/`unlink`/`rename` would
//! follow a symlink at `web/dist` (only the *last* component is "no-follow" there), so a
//! committed `dist -> /somewhere` would turn a clean into a delete in `/somewhere`. Here the
//! root is opened once as a directory fd and every component is descended with
//! `openat(O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC)`; stats are `fstatat(AT_SYMLINK_NOFOLLOW)`,
//! removals `unlinkat`, creations `mkdirat`/`symlinkat`/`openat(O_CREAT | O_EXCL)`, moves
//! `renameat`, all relative to a directory fd that was verified to be a real directory. A
//! swap of an ancestor for a symlink after it was opened changes nothing: the fd still names
//! the directory that was checked.
//!
//! Only the root path itself is resolved normally (the user chose it; it may well contain
//! symlinks, e.g. `/tmp` on some systems).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, readlinkat, renameat};
use nix::sys::stat::{
    FileStat, Mode, SFlag, UtimensatFlags, fchmod, fstat, fstatat, futimens, mkdirat, utimensat,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

/// What a path is, not following a final symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// The stamps of a path (`fstatat(AT_SYMLINK_NOFOLLOW)` or `fstat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Its kind.
    pub kind: Kind,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Mode bits (type and permissions).
    pub mode: u32,
    /// mtime, ns since the epoch.
    pub mtime_ns: i64,
    /// ctime, ns since the epoch.
    pub ctime_ns: i64,
}

impl Stat {
    fn of(s: &FileStat) -> Self {
        let fmt = SFlag::from_bits_truncate(s.st_mode & SFlag::S_IFMT.bits());
        let kind = match fmt {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        };
        let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
        Self {
            kind,
            dev: s.st_dev,
            ino: s.st_ino,
            size: s.st_size.max(0) as u64,
            mode: s.st_mode,
            mtime_ns: ns(s.st_mtime, s.st_mtime_nsec),
            ctime_ns: ns(s.st_ctime, s.st_ctime_nsec),
        }
    }
}

/// An open directory: every operation is relative to it and never follows a symlink.
#[derive(Debug)]
pub struct DirFd(OwnedFd);

impl AsFd for DirFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// `ELOOP` or `ENOTDIR` from an `O_NOFOLLOW` open: the name is a symlink (or, for a
/// directory open, not a directory at all).
pub fn is_not_a_dir(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
}

fn not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

impl DirFd {
    /// Opens `path` as a directory (the path itself is resolved normally).
    pub fn open_root(path: &Path) -> io::Result<Self> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        Ok(Self(openat(nix::fcntl::AT_FDCWD, path, flags, Mode::empty())?))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// The stamps of the directory itself.
    pub fn stat_self(&self) -> io::Result<Stat> {
        Ok(Stat::of(&fstat(self.fd())?))
    }

    /// The stamps of `name`, not following it; `None` if it does not exist.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        match fstatat(self.fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(s) => Ok(Some(Stat::of(&s))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the real directory `name` (a symlink there is an error, see [`is_not_a_dir`]).
    pub fn open_dir(&self, name: &OsStr) -> io::Result<Self> {
        Ok(Self(openat(self.fd(), name, dir_flags(), Mode::empty())?))
    }

    /// Opens the regular file `name` for reading, without following a symlink and without
    /// blocking on a FIFO.
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        Ok(File::from(openat(self.fd(), name, flags, Mode::empty())?))
    }

    /// Creates the file `name` (which must not exist) for writing, with `mode` before the
    /// umask.
    pub fn create_file(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        Ok(File::from(openat(self.fd(), name, flags, Mode::from_bits_truncate(mode))?))
    }

    /// The names in this directory (without `.` and `..`), each with its kind when the
    /// directory entry says (`d_type`), unsorted.
    pub fn entries(&self) -> io::Result<Vec<(OsString, Option<Kind>)>> {
        // A fresh open of the same directory: reading through our own fd would share (and
        // move) its offset.
        let fd = openat(self.fd(), ".", dir_flags(), Mode::empty())?;
        let mut dir = nix::dir::Dir::from_fd(fd)?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let kind = entry.file_type().map(|t| match t {
                nix::dir::Type::Directory => Kind::Dir,
                nix::dir::Type::File => Kind::File,
                nix::dir::Type::Symlink => Kind::Symlink,
                _ => Kind::Other,
            });
            out.push((OsStr::from_bytes(name).to_owned(), kind));
        }
        Ok(out)
    }

    /// The target of the symlink `name`.
    pub fn readlink(&self, name: &OsStr) -> io::Result<OsString> {
        Ok(readlinkat(self.fd(), name)?)
    }

    /// Removes the non-directory `name` (a symlink itself, never its target). A name that is
    /// already gone is not an error.
    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        match unlinkat(self.fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the empty directory `name`; already gone is not an error.
    pub fn rmdir(&self, name: &OsStr) -> io::Result<()> {
        match unlinkat(self.fd(), name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes `name` and, if it is a real directory, everything in it — never following a
    /// symlink inside it.
    pub fn remove_tree(&self, name: &OsStr) -> io::Result<()> {
        let sub = match self.open_dir(name) {
            Ok(d) => d,
            Err(e) if is_not_a_dir(&e) => return self.unlink(name),
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        for (child, kind) in sub.entries()? {
            match kind {
                Some(Kind::Dir) | None => sub.remove_tree(&child)?,
                Some(_) => sub.unlink(&child)?,
            }
        }
        self.rmdir(name)
    }

    /// Creates the directory `name` (`0o777` before the umask).
    pub fn mkdir(&self, name: &OsStr) -> io::Result<()> {
        Ok(mkdirat(self.fd(), name, Mode::from_bits_truncate(0o777))?)
    }

    /// Creates the symlink `name` -> `target`.
    pub fn symlink(&self, target: &OsStr, name: &OsStr) -> io::Result<()> {
        Ok(symlinkat(target, self.fd(), name)?)
    }

    /// Renames `name` here to `to_name` in `to` (both directories may be the same).
    pub fn rename(&self, name: &OsStr, to: &DirFd, to_name: &OsStr) -> io::Result<()> {
        Ok(renameat(self.fd(), name, to.fd(), to_name)?)
    }

    /// Sets the mtime of `name` without following it (the access time is left alone).
    pub fn set_mtime(&self, name: &OsStr, mtime_ns: i64) -> io::Result<()> {
        Ok(utimensat(
            self.fd(),
            name,
            &TimeSpec::UTIME_OMIT,
            &timespec(mtime_ns),
            UtimensatFlags::NoFollowSymlink,
        )?)
    }

    /// Sets this directory's own permission bits and mtime.
    pub fn set_own_mode_and_mtime(&self, mode: u32, mtime_ns: i64) -> io::Result<()> {
        fchmod(self.fd(), Mode::from_bits_truncate(mode))?;
        Ok(futimens(self.fd(), &TimeSpec::UTIME_OMIT, &timespec(mtime_ns))?)
    }
}

/// Sets an open file's permission bits and mtime.
pub fn set_file_mode_and_mtime(file: &File, mode: u32, mtime_ns: i64) -> io::Result<()> {
    fchmod(file.as_fd(), Mode::from_bits_truncate(mode))?;
    Ok(futimens(file.as_fd(), &TimeSpec::UTIME_OMIT, &timespec(mtime_ns))?)
}

/// The stamps of an open file.
pub fn stat_file(file: &File) -> io::Result<Stat> {
    Ok(Stat::of(&fstat(file.as_fd())?))
}

fn timespec(ns: i64) -> TimeSpec {
    TimeSpec::new(ns.div_euclid(1_000_000_000) as _, ns.rem_euclid(1_000_000_000) as _)
}

/// Where a workspace-relative path's parent is, walking from the root without following.
#[derive(Debug)]
pub enum Parent {
    /// Every strict ancestor is a real directory: the parent, opened, and the last name.
    Dir(DirFd, OsString),
    /// An ancestor does not exist, or is a file or FIFO: nothing can be at the path.
    Missing,
    /// An ancestor is a symlink: its workspace-relative path. Nothing beneath it is looked
    /// at.
    Symlink(String),
}

/// Descends the strict ancestors of `rel` (clean, `/`-separated, non-empty) from `root`.
pub fn parent_of(root: &DirFd, rel: &str) -> io::Result<Parent> {
    let (dirs, name) = match rel.rsplit_once('/') {
        Some((d, n)) => (Some(d), n),
        None => (None, rel),
    };
    let Some(dirs) = dirs else {
        let fd = openat(root.fd(), ".", dir_flags(), Mode::empty())?;
        return Ok(Parent::Dir(DirFd(fd), name.into()));
    };
    let mut cur: Option<DirFd> = None;
    for (i, comp) in dirs.split('/').enumerate() {
        let at = cur.as_ref().unwrap_or(root);
        match at.open_dir(OsStr::new(comp)) {
            Ok(d) => cur = Some(d),
            Err(e) if not_found(&e) => return Ok(Parent::Missing),
            Err(e) if is_not_a_dir(&e) => {
                let upto = dirs.split('/').take(i + 1).collect::<Vec<_>>().join("/");
                return Ok(match at.stat(OsStr::new(comp))? {
                    Some(s) if s.kind == Kind::Symlink => Parent::Symlink(upto),
                    _ => Parent::Missing,
                });
            }
            Err(e) => return Err(e),
        }
    }
    match cur {
        Some(d) => Ok(Parent::Dir(d, name.into())),
        None => Ok(Parent::Missing),
    }
}

/// The stamps of the workspace-relative `rel` beneath `root`, not following any component;
/// `None` if it (or an ancestor) is missing or an ancestor is not a real directory.
pub fn lstat_beneath(root: &Path, rel: &str) -> io::Result<Option<Stat>> {
    let root = DirFd::open_root(root)?;
    match parent_of(&root, rel)? {
        Parent::Dir(d, name) => d.stat(&name),
        Parent::Missing | Parent::Symlink(_) => Ok(None),
    }
}

/// Removes the non-directory, or the empty directory, at the workspace-relative `rel`
/// beneath `root`, never following a symlink on the way: if an ancestor is a symlink or
/// missing, nothing is removed. A directory that is not empty is an error; one that is a
/// mount point ([`is_busy`]) stays.
pub fn remove_beneath(root: &Path, rel: &str) -> io::Result<()> {
    let root = DirFd::open_root(root)?;
    match parent_of(&root, rel)? {
        Parent::Dir(d, name) => match d.unlink(&name) {
            Err(e) if e.raw_os_error() == Some(Errno::EISDIR as i32) => match d.rmdir(&name) {
                Err(e) if is_busy(&e) => Ok(()),
                r => r,
            },
            r => r,
        },
        Parent::Missing | Parent::Symlink(_) => Ok(()),
    }
}

/// Whether `err` is `EBUSY`: a directory that is a mount point (a container's volume
/// mounted at an output directory) cannot be removed, only emptied.
pub fn is_busy(err: &io::Error) -> bool {
    err.raw_os_error() == Some(Errno::EBUSY as i32)
}

/// Real directories beneath a root: for looking at many sorted paths (an entry's manifest)
/// without re-walking every ancestor per path. Only the ancestors of the last directory asked
/// for stay open, so the fds held are bounded by the tree's depth.
#[derive(Debug)]
pub struct Beneath {
    /// By workspace-relative path (`""` is the root); `None`: missing, not a real directory,
    /// or behind a symlink.
    dirs: HashMap<String, Option<Rc<DirFd>>>,
}

impl Beneath {
    /// Opens `root`.
    pub fn open(root: &Path) -> io::Result<Self> {
        let root = Rc::new(DirFd::open_root(root)?);
        Ok(Self { dirs: HashMap::from([(String::new(), Some(root))]) })
    }

    /// The real directory `rel` (`""` is the root), reached without following any symlink;
    /// `None` if it, or an ancestor, is missing, a symlink or not a directory.
    pub fn dir(&mut self, rel: &str) -> io::Result<Option<Rc<DirFd>>> {
        if let Some(d) = self.dirs.get(rel) {
            return Ok(d.clone());
        }
        let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let found = match self.dir(parent)? {
            None => None,
            Some(p) => match p.open_dir(OsStr::new(name)) {
                Ok(d) => Some(Rc::new(d)),
                Err(e) if not_found(&e) || is_not_a_dir(&e) => None,
                Err(e) => return Err(e),
            },
        };
        // Only the chain of `rel`'s ancestors stays open: fds bounded by the depth.
        self.dirs.retain(|k, _| crate::globs::is_within(rel, k));
        self.dirs.insert(rel.to_owned(), found.clone());
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn ancestors_are_never_followed() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f"), b"keep").unwrap();
        std::fs::create_dir_all(ws.path().join("a/b")).unwrap();
        symlink(outside.path(), ws.path().join("a/b/link")).unwrap();
        std::fs::write(ws.path().join("a/file"), b"x").unwrap();
        let root = DirFd::open_root(ws.path()).unwrap();

        assert!(
            matches!(parent_of(&root, "a/b/link/f").unwrap(), Parent::Symlink(p) if p == "a/b/link")
        );
        assert!(
            matches!(parent_of(&root, "a/b/link/x/y").unwrap(), Parent::Symlink(p) if p == "a/b/link")
        );
        assert!(matches!(parent_of(&root, "a/nope/f").unwrap(), Parent::Missing));
        assert!(matches!(parent_of(&root, "a/file/f").unwrap(), Parent::Missing));
        assert!(matches!(parent_of(&root, "a/b/link").unwrap(), Parent::Dir(_, n) if n == "link"));
        assert!(matches!(parent_of(&root, "top").unwrap(), Parent::Dir(_, n) if n == "top"));

        assert_eq!(lstat_beneath(ws.path(), "a/b/link/f").unwrap(), None);
        remove_beneath(ws.path(), "a/b/link/f").unwrap();
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"keep");
        let s = lstat_beneath(ws.path(), "a/b/link").unwrap().unwrap();
        assert_eq!(s.kind, Kind::Symlink);
        // An empty directory goes; one that holds something does not.
        std::fs::create_dir_all(ws.path().join("a/e/f")).unwrap();
        assert!(remove_beneath(ws.path(), "a/e").is_err());
        remove_beneath(ws.path(), "a/e/f").unwrap();
        remove_beneath(ws.path(), "a/e").unwrap();
        assert!(!ws.path().join("a/e").exists());

        // remove_tree removes a link inside, not what it points at.
        std::fs::create_dir_all(ws.path().join("t/u")).unwrap();
        symlink(outside.path(), ws.path().join("t/u/l")).unwrap();
        root.remove_tree(OsStr::new("t")).unwrap();
        assert!(!ws.path().join("t").exists());
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"keep");
        // and a link given to remove_tree is unlinked.
        root.remove_tree(OsStr::new("a")).unwrap();
        assert_eq!(std::fs::read(outside.path().join("f")).unwrap(), b"keep");
        assert!(!ws.path().join("a").exists());
    }
}
