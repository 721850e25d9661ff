//! Artifacts: an execution's outputs as one deterministic `tar.zst`, and their safe, bounded
//! restore (brief §6).
//!
//! The life of an artifact:
//! 1. [`collect_outputs`] walks the output globs' roots after a task ran and builds the
//!    [`OutputManifest`] (digest, size, mode, mtime per file or symlink).
//! 2. [`pack`] streams exactly the manifest's entries into tar inside zstd with normalised
//!    headers (so the same tree gives the same bytes), checking each file still hashes to
//!    its manifest digest.
//! 3. [`unpack`] reads an archive that came from a cache or a peer — untrusted bytes — into a
//!    fresh staging directory, refusing anything that could write outside it or that a task
//!    output can never be (hardlinks, devices, FIFOs, links out of the project, bombs).
//! 4. [`check_unpacked`] compares what was unpacked against the manifest stored beside it.
//! 5. [`place`] renames the staged entries into the workspace, replacing (never writing
//!    through) symlinks on the way, leaving already-current files alone and restoring the
//!    manifest's modes and mtimes.
//!
//! Every walk of the workspace here (collect, place, and the worker's clean) goes through
//! [`nofollow`]: fd-relative, no symlink followed in any path component.
//!
//! [`OutputManifest`]: crate::manifest::OutputManifest

mod collect;
pub mod confine;
mod links;
pub mod nofollow;
mod pack;
mod place;
mod unpack;

use std::io;
use std::path::PathBuf;

pub use collect::collect_outputs;
pub use pack::{PackStats, pack, pack_to_file};
pub use place::{PlaceStats, place};
pub use unpack::{
    DEFAULT_MAX_ENTRIES, DEFAULT_MAX_PATH_LEN, DEFAULT_MAX_TOTAL_BYTES, UnpackLimits,
    UnpackedEntry, ZSTD_WINDOW_LOG_MAX, check_unpacked, unpack,
};

use crate::globs::is_clean_relative;

/// Mode bits a restore may set: permissions only. setuid, setgid and sticky bits are stripped
/// — a cache entry must never be a way to plant a setuid binary.
pub const RESTORE_MODE_MASK: u32 = 0o777;

/// Why an artifact could not be collected, packed, unpacked or placed. Archive refusals each
/// have their own variant so callers (and tests) can tell a hostile archive from a broken
/// disk.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A file-system operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path operated on.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An entry path is absolute.
    #[error("entry `{path}` is an absolute path")]
    AbsolutePath {
        /// The path as found.
        path: String,
    },
    /// An entry path has a `..` component.
    #[error("entry `{path}` climbs out with `..`")]
    ParentTraversal {
        /// The path as found.
        path: String,
    },
    /// An entry path is empty or has empty, `.` or NUL components.
    #[error("entry `{path}` is not a clean relative path")]
    UncleanPath {
        /// The path as found.
        path: String,
    },
    /// An entry lies outside every directory the archive is allowed to fill.
    #[error("entry `{path}` lies outside {confine:?}")]
    OutsideConfine {
        /// The entry path.
        path: String,
        /// The allowed workspace-relative prefixes.
        confine: Vec<String>,
    },
    /// A hardlink entry (never an output; could alias a file outside).
    #[error("entry `{path}` is a hardlink")]
    Hardlink {
        /// The entry path.
        path: String,
    },
    /// A character or block device entry.
    #[error("entry `{path}` is a device")]
    Device {
        /// The entry path.
        path: String,
    },
    /// A FIFO entry.
    #[error("entry `{path}` is a FIFO")]
    Fifo {
        /// The entry path.
        path: String,
    },
    /// Any other entry type (PAX headers, GNU sparse files, contiguous files, …).
    #[error("entry `{path}` has unsupported tar type {kind:?}")]
    UnsupportedEntry {
        /// The entry path (or the header name of an extension entry).
        path: String,
        /// The raw type byte.
        kind: char,
    },
    /// A symlink whose target is absolute or resolves outside the allowed prefixes.
    #[error("symlink `{path}` -> `{target}` escapes the restore area")]
    LinkEscapes {
        /// The link path.
        path: String,
        /// Its target.
        target: String,
    },
    /// An entry below a path that the archive made a symlink: writing it would go through the
    /// link.
    #[error("entry `{path}` would be written through symlink `{link}`")]
    WriteThroughLink {
        /// The entry path.
        path: String,
        /// The symlink on its way.
        link: String,
    },
    /// A directory on the way to an output (an output root or one of its ancestors) is a
    /// symlink: cleaning, collecting or writing beneath it would act on whatever it points
    /// at, so nothing beneath it is touched.
    #[error("output dir `{path}` is a symlink; prova does not write through symlinks")]
    SymlinkedOutputDir {
        /// The symlink, workspace-relative.
        path: String,
    },
    /// An entry below a path that the archive made a regular file.
    #[error("entry `{path}` lies below file `{parent}`")]
    ParentNotDir {
        /// The entry path.
        path: String,
        /// The file on its way.
        parent: String,
    },
    /// The same path twice (or a file where the archive already has a directory).
    #[error("entry `{path}` appears twice")]
    DuplicatePath {
        /// The entry path.
        path: String,
    },
    /// More decompressed bytes than allowed (a zstd or tar bomb).
    #[error("archive expands past {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// More entries than allowed.
    #[error("archive has more than {limit} entries")]
    TooManyEntries {
        /// The limit.
        limit: u64,
    },
    /// A path or link target longer than allowed.
    #[error("path `{prefix}…` is {len} bytes, over the {limit}-byte limit")]
    PathTooLong {
        /// The first characters of the path, for the message.
        prefix: String,
        /// Its length in bytes.
        len: u64,
        /// The limit.
        limit: usize,
    },
    /// A file's bytes, size or link target no longer match the manifest while packing.
    #[error("`{path}` changed while it was being packed")]
    ChangedWhilePacking {
        /// The workspace-relative path.
        path: String,
    },
    /// A file name that is not UTF-8 (manifests and globs are UTF-8).
    #[error("path is not UTF-8: {}", path.display())]
    NonUtf8Path {
        /// The path, as bytes.
        path: PathBuf,
    },
    /// The unpack destination is not an empty directory.
    #[error("unpack destination {} is not an empty directory", path.display())]
    DestNotEmpty {
        /// The destination.
        path: PathBuf,
    },
    /// Unpacked or staged entries disagree with the manifest.
    #[error("`{path}` does not match the manifest: {reason}")]
    ManifestMismatch {
        /// The entry path.
        path: String,
        /// What differs.
        reason: String,
    },
    /// The archive (or a manifest) is malformed: bad zstd, bad tar header, truncated data.
    #[error("corrupt artifact: {0}")]
    Corrupt(String),
    /// Writing a pack's archive failed (a full disk, a quota, an I/O error): where it was
    /// written failed, the bytes are not at fault — never a "corrupt artifact".
    #[error("writing the archive failed at {what}: {source}")]
    Write {
        /// Where in the archive: `` `p/dist/a.js` ``, `its end`.
        what: String,
        /// What the write met.
        source: io::Error,
    },
}

impl ArtifactError {
    /// Wraps an I/O error with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}

/// Checks that a path read from a manifest or an archive is workspace-relative and clean,
/// naming the specific way it is not.
pub(crate) fn check_relative(path: &str) -> Result<(), ArtifactError> {
    if is_clean_relative(path) {
        return Ok(());
    }
    let path = path.to_owned();
    Err(if path.starts_with('/') {
        ArtifactError::AbsolutePath { path }
    } else if path.split('/').any(|c| c == "..") {
        ArtifactError::ParentTraversal { path }
    } else {
        ArtifactError::UncleanPath { path }
    })
}

/// The strict ancestors of a workspace-relative path, shallowest first (`a/b/c` gives `a`,
/// `a/b`).
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// Modification time in nanoseconds since the epoch (saturating far outside ±292 years).
#[cfg(test)]
pub(crate) fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    use std::os::unix::fs::MetadataExt;
    meta.mtime().saturating_mul(1_000_000_000).saturating_add(meta.mtime_nsec())
}

/// Sets a path's mtime without following a final symlink (the access time is left alone).
/// `std` has no `lutimes`, so this is `utimensat(AT_SYMLINK_NOFOLLOW)`.
#[cfg(test)]
pub(crate) fn set_mtime_nofollow(path: &std::path::Path, mtime_ns: i64) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: `timespec` is plain old data; all-zero is a valid value we then fill in.
    let mut times: [libc::timespec; 2] = unsafe { std::mem::zeroed() };
    times[0].tv_nsec = libc::UTIME_OMIT;
    times[1].tv_sec = mtime_ns.div_euclid(1_000_000_000) as libc::time_t;
    times[1].tv_nsec = mtime_ns.rem_euclid(1_000_000_000) as libc::c_long;
    // SAFETY: `c_path` is a valid NUL-terminated string and `times` points at two timespecs,
    // both alive for the duration of the call.
    let rc = unsafe {
        libc::utimensat(libc::AT_FDCWD, c_path.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW)
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;
