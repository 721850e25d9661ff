//! A farm worker's own health, as far as its work dir goes.
//! - **Staging files** (packed artifacts on their way to the coordinator,
//!   `artifact-<lease>.tar.zst`) that a worker killed mid-pack or mid-upload leaves behind are
//!   removed when the next one starts, so they never pile up across restarts. (A failed pack
//!   removes its own partial file: `outputs::collect`.)
//! - **The disk floor** ([`DiskFloor`], `prova worker --min-free-disk`): free bytes and free
//!   inodes of the work dir's file system (`statvfs`, what an unprivileged writer may use).
//!   [`DiskHealth::check`] is asked at start-up and before each assignment is accepted; below
//!   the floor the worker hands the assignment back (`HandBack::NoDisk`: the coordinator
//!   requeues it elsewhere, free) and evicts its blob cache; a task that failed while the work
//!   dir was below the floor (an `ENOSPC` mid-write) is handed back the same way, not failed.
//!   Crossing the floor either way is logged once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// `--min-free-disk`'s default: below 256 MiB free a work dir cannot be trusted with a task's
/// inputs, outputs and packed archive.
pub const DEFAULT_MIN_FREE_DISK: u64 = 256 << 20;

/// Free inodes below which the work dir is short, whatever its bytes (exec roots are many
/// small files and hardlinks).
pub const MIN_FREE_INODES: u64 = 4096;

/// The least a work dir must have free for the worker to take work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskFloor {
    /// Free bytes.
    pub bytes: u64,
    /// Free inodes (ignored on file systems that report none at all).
    pub inodes: u64,
}

impl DiskFloor {
    /// `bytes` free and [`MIN_FREE_INODES`].
    pub fn bytes(bytes: u64) -> Self {
        Self { bytes, inodes: MIN_FREE_INODES }
    }

    /// What `free` lacks against this floor, in words; `None` when it is enough.
    pub fn shortfall(&self, free: Free) -> Option<String> {
        if free.bytes < self.bytes {
            return Some(format!(
                "{} free, floor {}",
                human_bytes(free.bytes),
                human_bytes(self.bytes)
            ));
        }
        if free.has_inodes && free.inodes < self.inodes {
            return Some(format!("{} inodes free, floor {}", free.inodes, self.inodes));
        }
        None
    }
}

/// What a file system has free for an unprivileged writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Free {
    /// Bytes.
    pub bytes: u64,
    /// Inodes.
    pub inodes: u64,
    /// Whether the file system counts inodes at all (some report zero in total).
    pub has_inodes: bool,
}

/// What the file system holding `dir` has free.
#[allow(clippy::useless_conversion)] // statvfs field widths differ between targets
pub fn free_of(dir: &Path) -> std::io::Result<Free> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let fragment = u64::from(st.fragment_size()).max(1);
    let (avail, files, favail) =
        (u64::from(st.blocks_available()), u64::from(st.files()), u64::from(st.files_available()));
    Ok(Free { bytes: avail.saturating_mul(fragment), inodes: favail, has_inodes: files > 0 })
}

/// `n` bytes in the largest binary unit that keeps a whole number in front.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut unit = "B";
    let mut value = n as f64;
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    if unit == "B" { format!("{n} B") } else { format!("{value:.1} {unit}") }
}

/// A worker's view of its work dir against its floor; shared by the actor and the runner.
#[derive(Debug)]
pub struct DiskHealth {
    dir: PathBuf,
    floor: DiskFloor,
    short: AtomicBool,
}

impl DiskHealth {
    /// Watches `dir` against `floor`.
    pub fn new(dir: &Path, floor: DiskFloor) -> Self {
        Self { dir: dir.to_owned(), floor, short: AtomicBool::new(false) }
    }

    /// What the work dir lacks now, or `None` when it has enough (or cannot be measured: a
    /// `statvfs` failure is logged and does not stop work). Logs each crossing of the floor.
    pub fn check(&self) -> Option<String> {
        let why = match free_of(&self.dir) {
            Ok(free) => self.floor.shortfall(free),
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), "cannot measure free space: {e}");
                None
            }
        };
        let was = self.short.swap(why.is_some(), Ordering::Relaxed);
        match (&why, was) {
            (Some(why), false) => tracing::warn!(
                dir = %self.dir.display(),
                "work dir short of disk ({why}): taking no work until space returns"
            ),
            (None, true) => tracing::info!(dir = %self.dir.display(), "work dir has room again"),
            _ => {}
        }
        why
    }
}

/// The name of the staging file of `lease`'s artifact in the work dir.
pub fn staging_name(lease: impl std::fmt::Display) -> String {
    format!("{STAGING_PREFIX}{lease}{STAGING_SUFFIX}")
}

const STAGING_PREFIX: &str = "artifact-";
const STAGING_SUFFIX: &str = ".tar.zst";

/// Removes every staging file directly in `work_dir` (nothing else); how many were removed.
/// A file that cannot be removed is logged and left: start-up goes on.
pub fn clean_staging(work_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(work_dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let staged = name.starts_with(STAGING_PREFIX) && name.ends_with(STAGING_SUFFIX);
        if !staged || !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match std::fs::remove_file(e.path()) {
            Ok(()) => removed += 1,
            Err(err) => tracing::warn!("cannot remove the stale staging file {name}: {err}"),
        }
    }
    if removed > 0 {
        tracing::info!(removed, "removed stale staging files from the work dir");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_counts_bytes_then_inodes_and_says_what_is_short() {
        let floor = DiskFloor { bytes: 256 << 20, inodes: 100 };
        let free = |bytes, inodes, has_inodes| Free { bytes, inodes, has_inodes };
        assert_eq!(floor.shortfall(free(1 << 30, 1000, true)), None);
        assert_eq!(
            floor.shortfall(free(12 << 20, 1000, true)).as_deref(),
            Some("12.0 MiB free, floor 256.0 MiB")
        );
        assert_eq!(
            floor.shortfall(free(1 << 30, 5, true)).as_deref(),
            Some("5 inodes free, floor 100")
        );
        assert_eq!(floor.shortfall(free(1 << 30, 0, false)), None, "no inode count at all");
        assert_eq!(
            floor.shortfall(free(100, 0, true)).as_deref(),
            Some("100 B free, floor 256.0 MiB")
        );
    }

    #[test]
    fn a_real_directory_is_measured_against_its_floor() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let free = free_of(dir.path()).expect("statvfs");
        assert!(free.bytes > 0, "{free:?}");
        let roomy = DiskHealth::new(dir.path(), DiskFloor { bytes: 0, inodes: 0 });
        assert_eq!(roomy.check(), None);
        let short = DiskHealth::new(dir.path(), DiskFloor::bytes(u64::MAX));
        assert!(short.check().is_some_and(|why| why.contains("free, floor")));
        assert!(free_of(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn only_staging_files_are_removed() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let d = dir.path();
        std::fs::write(d.join(staging_name(17)), b"partial").expect("a staging file");
        std::fs::write(d.join(staging_name("9")), b"").expect("an empty one");
        std::fs::write(d.join("artifact-notes.txt"), b"keep").expect("another file");
        std::fs::create_dir(d.join(staging_name(3))).expect("a directory so named");
        std::fs::create_dir(d.join("blobs")).expect("the blob cache");
        std::fs::write(d.join("blobs").join(staging_name(5)), b"nested").expect("nested");
        assert_eq!(clean_staging(d), 2);
        assert!(!d.join(staging_name(17)).exists());
        assert!(d.join("artifact-notes.txt").exists());
        assert!(d.join(staging_name(3)).is_dir(), "directories are not staging files");
        assert!(d.join("blobs").join(staging_name(5)).exists(), "only the work dir itself");
        assert_eq!(clean_staging(d), 0, "nothing left to remove");
        assert_eq!(clean_staging(&d.join("missing")), 0);
    }
}
