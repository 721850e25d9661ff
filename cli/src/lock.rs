//! The workspace lock: one writer per workspace. Two `prova run`s in one checkout would clean
//! and write the same declared outputs at once, and each would pack an entry from whatever
//! files were on disk when it finished — files of two executions in one entry, served to every
//! later run. So every command that writes a workspace's outputs or its cache takes an
//! exclusive `flock(2)` on `<workspace>/.prova/lock` first, and holds it until it exits;
//! read-only commands (`graph`, `show`, `why`, `run --dry-run`) do not.
//!
//! - The holder writes its pid into the file, for the message a second prova prints while it
//!   waits (stderr): `another prova is running in this workspace (pid N); waiting — pass
//!   --no-wait to fail at once`. With `--no-wait` it fails at once with [`LockError::Busy`]
//!   (exit code 3, [`crate::exit::Code::Busy`]).
//! - The kernel releases an flock when the last descriptor of it closes, which includes the
//!   process dying by any means (SIGKILL too): a crashed prova never leaves a stale lock, so
//!   the pid in the file is only ever a hint.
//! - A `.prova` that cannot be created or written (a read-only mount or checkout): the lock
//!   file is opened read-only if it exists (an flock needs no write access), else the
//!   `.prova` directory or the workspace root itself is locked; the message then names no
//!   pid. A symlink where the lock file belongs is refused, never followed.
//! - The lock is per workspace, not per cache directory: a cache shared across clones
//!   (`--cache-dir`) stays safe through SQLite's locks and atomic renames.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The lock file's name inside `<workspace>/.prova`.
pub const LOCK_FILE: &str = "lock";

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it and the caller would not wait (`--no-wait`).
    Busy {
        /// The holder's pid, if it could be read.
        pid: Option<u32>,
        /// The lock file.
        path: PathBuf,
    },
    /// The lock file could not be opened or locked.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Busy { pid, path } => write!(
                f,
                "another prova is running in this workspace{}, and --no-wait was given \
                 (the lock is {})",
                pid_note(*pid),
                path.display()
            ),
            Self::Io { path, source } => {
                write!(f, "cannot take the workspace lock {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Busy { .. } => None,
            Self::Io { source, .. } => Some(source),
        }
    }
}

/// ` (pid N)`, or nothing.
fn pid_note(pid: Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct WorkspaceLock {
    _file: File,
}

/// Takes the lock of the workspace at `root`. If another process holds it: with `wait`,
/// says so on stderr and blocks until it is released; without, fails with
/// [`LockError::Busy`].
pub fn acquire(root: &Path, wait: bool) -> Result<WorkspaceLock, LockError> {
    let (mut file, path) = open(root)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = read_pid(&mut file);
            if !wait {
                return Err(LockError::Busy { pid, path });
            }
            crate::stdio::eprint_line(&format!(
                "another prova is running in this workspace{}; waiting — pass --no-wait to \
                 fail at once",
                pid_note(pid)
            ));
            file.lock().map_err(|source| LockError::Io { path: path.clone(), source })?;
        }
        Err(std::fs::TryLockError::Error(source)) => return Err(LockError::Io { path, source }),
    }
    write_pid(&mut file);
    Ok(WorkspaceLock { _file: file })
}

/// The lock file, created if need be; a read-only fallback (see the module docs).
fn open(root: &Path) -> Result<(File, PathBuf), LockError> {
    let dir = root.join(".prova");
    let path = dir.join(LOCK_FILE);
    let _ = std::fs::create_dir_all(&dir);
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path);
    let err = match rw {
        Ok(f) => return Ok((f, path)),
        Err(e) => e,
    };
    if err.raw_os_error() == Some(libc::ELOOP) {
        return Err(LockError::Io { path, source: err }); // a symlink planted as the lock
    }
    tracing::debug!(path = %path.display(), error = %err, "cannot create or write the workspace lock file; locking read-only");
    for candidate in [&path, &dir, &root.to_path_buf()] {
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(candidate);
        if let Ok(f) = opened {
            return Ok((f, candidate.clone()));
        }
    }
    Err(LockError::Io { path, source: err })
}

/// The pid the holder wrote, if the file holds one.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Width of the pid record: a `u32` in decimal, space-padded, then a newline.
const PID_RECORD: usize = 11;

/// Writes this process's pid over the start of the file, best effort (a read-only fallback
/// cannot, and the pid is only a hint for the message). The record has one width, so it
/// replaces the previous holder's in one write at offset 0 and the file is cut only when
/// something longer was there: truncating to zero first freed and reallocated the file's
/// block on every run, 0.3 ms on an ext4 without a journal.
fn write_pid(file: &mut File) {
    use std::os::unix::fs::FileExt as _;
    let record = format!("{:<width$}\n", std::process::id(), width = PID_RECORD - 1);
    let r = file.write_all_at(record.as_bytes(), 0).and_then(|()| match file.metadata() {
        Ok(m) if m.len() > record.len() as u64 => file.set_len(record.len() as u64),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    });
    if let Err(e) = r {
        tracing::debug!(error = %e, "cannot write the pid into the workspace lock");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_busy_until_the_first_is_dropped() {
        let ws = tempfile::tempdir().unwrap();
        let held = acquire(ws.path(), false).unwrap();
        let text = std::fs::read_to_string(ws.path().join(".prova").join(LOCK_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        // Another open file description of the same file: flock conflicts across them, as
        // between two processes.
        match acquire(ws.path(), false) {
            Err(LockError::Busy { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("want Busy, got {other:?}"),
        }
        drop(held);
        acquire(ws.path(), false).unwrap();
    }

    #[test]
    fn the_pid_replaces_whatever_the_last_holder_left() {
        // A shorter record (an older prova's `pid\n`), a longer one, and a file of garbage:
        // the holder's pid is what a waiting prova reads, with nothing of the old left.
        for old in ["7\n", "4294967295\n", "123456789012345678901234567890 and more\n"] {
            let ws = tempfile::tempdir().unwrap();
            std::fs::create_dir(ws.path().join(".prova")).unwrap();
            let path = ws.path().join(".prova").join(LOCK_FILE);
            std::fs::write(&path, old).unwrap();
            let held = acquire(ws.path(), false).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(text.trim(), std::process::id().to_string(), "after {old:?}");
            assert_eq!(text.len(), PID_RECORD, "after {old:?}");
            match acquire(ws.path(), false) {
                Err(LockError::Busy { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
                other => panic!("want Busy, got {other:?}"),
            }
            drop(held);
        }
    }

    #[test]
    fn a_workspace_where_the_lock_file_cannot_be_made_still_locks() {
        // `.prova` is a file: neither the directory nor the lock file can be created, as in a
        // read-only checkout; the workspace root itself is locked instead.
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join(".prova"), "not a directory").unwrap();
        let held = acquire(ws.path(), false).unwrap();
        match acquire(ws.path(), false) {
            Err(LockError::Busy { pid: None, path }) => assert_eq!(path, ws.path().join(".prova")),
            other => panic!("want Busy without a pid, got {other:?}"),
        }
        drop(held);
        acquire(ws.path(), false).unwrap();
    }

    #[test]
    fn a_symlinked_lock_file_is_not_followed() {
        let ws = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("victim");
        std::fs::write(&target, "keep\n").unwrap();
        std::fs::create_dir(ws.path().join(".prova")).unwrap();
        std::os::unix::fs::symlink(&target, ws.path().join(".prova").join(LOCK_FILE)).unwrap();
        assert!(acquire(ws.path(), false).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    }
}
