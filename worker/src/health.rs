//! A farm worker's own health, as far as its work dir goes: the staging files (packed
//! artifacts on their way to the coordinator, `artifact-<lease>.tar.zst`) that a worker killed
//! mid-pack or mid-upload leaves behind are removed when the next one starts, so they never
//! pile up across restarts. (A failed pack removes its own partial file: `outputs::collect`.)

use std::path::Path;

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
