//! Unpacking an archive that came from a cache or a peer: every byte is untrusted (brief §6,
//! STYLE habit 11). The `tar` crate parses headers; everything written to disk is written
//! here, so the rules are ours rather than `unpack_in`'s:
//!
//! - every path is clean, relative, UTF-8, bounded in length and inside a confine prefix;
//! - only regular files, symlinks and directories — no hardlinks, devices, FIFOs, PAX or
//!   sparse entries;
//! - a symlink's target, resolved through the archive's other links, stays inside the
//!   confine prefixes; nothing is ever written below a path the archive made a symlink;
//! - no path twice; files are created with `O_CREAT|O_EXCL|O_NOFOLLOW` under directories
//!   created here, so nothing can land outside `dest`;
//! - decompressed bytes, entries and the zstd window are bounded, and the archive's sizes
//!   never decide an allocation.
//!
//! Extension entries (GNU long names and link targets) are handled here too, in raw mode,
//! because the `tar` crate would read them whole into memory.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use tar::{Archive, Entry, EntryType};

use super::links::stays_within;
use super::{ArtifactError, RESTORE_MODE_MASK, ancestors, check_relative};
use crate::digest::Digest;
use crate::globs::is_within;
use crate::manifest::{EntryKind, OutputManifest};

/// Default cap on decompressed bytes: far above any sane output tree, far below a bomb that
/// would fill a disk.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 16 << 30;
/// Default cap on entries: a million files is already a pathological output.
pub const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;
/// Default cap on path and link-target length: Linux's `PATH_MAX`.
pub const DEFAULT_MAX_PATH_LEN: usize = 4096;
/// Largest zstd window accepted (2^27 = 128 MiB, what level 22 uses): bounds the decoder's
/// memory whatever the frame header asks for.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// Copy buffer size: fixed, whatever an entry's header claims.
const BUF_SIZE: usize = 64 * 1024;

/// What an unpack may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Decompressed bytes (tar headers, padding and content) before the unpack is refused.
    pub max_total_bytes: u64,
    /// Entries (not counting GNU long-name extensions) before the unpack is refused.
    pub max_entries: u64,
    /// Longest entry path or link target, in bytes.
    pub max_path_len: usize,
    /// Workspace-relative prefixes every entry and every link target must lie within (the
    /// task's project directory; `""` allows the whole workspace). Empty allows nothing.
    pub confine: Vec<String>,
}

impl UnpackLimits {
    /// The default bounds, confined to `confine`.
    pub fn new(confine: Vec<String>) -> Self {
        Self {
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_path_len: DEFAULT_MAX_PATH_LEN,
            confine,
        }
    }
}

/// One entry written by [`unpack`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackedEntry {
    /// Workspace-relative path (also relative to the unpack destination).
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// Mode from the header, setuid/setgid/sticky stripped. Directories are left `0o700`
    /// on disk until [`place`](super::place) sets their manifest mode.
    pub mode: u32,
    /// Bytes written (files), target length (symlinks), 0 (directories).
    pub size: u64,
    /// Digest of the bytes written or of the link target; `None` for directories.
    pub digest: Option<Digest>,
    /// A symlink's target.
    pub link_target: Option<String>,
}

/// Unpacks the tar+zstd stream `reader` into `dest`, which must be an existing, empty
/// directory (a fresh staging dir). Refuses — with a specific [`ArtifactError`] each —
/// anything outside the rules in the module docs. On error, `dest` may hold a partial tree
/// (never anything outside it); the caller discards it.
pub fn unpack(
    reader: impl Read,
    dest: &Path,
    limits: &UnpackLimits,
) -> Result<Vec<UnpackedEntry>, ArtifactError> {
    let mut listing = fs::read_dir(dest).map_err(ArtifactError::io(dest))?;
    if listing.next().is_some() {
        return Err(ArtifactError::DestNotEmpty { path: dest.to_owned() });
    }
    let mut decoder = zstd::stream::read::Decoder::new(reader)
        .map_err(|e| ArtifactError::Corrupt(format!("zstd: {e}")))?;
    decoder
        .window_log_max(ZSTD_WINDOW_LOG_MAX)
        .map_err(|e| ArtifactError::Corrupt(format!("zstd: {e}")))?;
    let budget = Budget { used: Rc::new(Cell::new(0)), tripped: Rc::new(Cell::new(false)) };
    let bounded = BoundedReader {
        inner: decoder,
        limit: limits.max_total_bytes,
        used: Rc::clone(&budget.used),
        tripped: Rc::clone(&budget.tripped),
    };
    let mut archive = Archive::new(bounded);
    let mut u = Unpacker {
        dest,
        limits,
        budget,
        nodes: HashMap::new(),
        links: HashMap::new(),
        out: Vec::new(),
        long_name: None,
        long_link: None,
        entries: 0,
        buf: vec![0; BUF_SIZE],
    };
    let entries = archive.entries().map_err(|e| u.read_error(e))?.raw(true);
    for entry in entries {
        let mut entry = entry.map_err(|e| u.read_error(e))?;
        u.entry(&mut entry)?;
    }
    u.finish()
}

/// Compares what [`unpack`] wrote with the manifest stored beside the archive: the same
/// paths, kinds, contents and link targets. Archive and manifest travel separately, so a
/// mismatch means one of them is corrupt or forged.
pub fn check_unpacked(
    unpacked: &[UnpackedEntry],
    manifest: &OutputManifest,
) -> Result<(), ArtifactError> {
    let mut by_path: HashMap<&str, &UnpackedEntry> =
        unpacked.iter().map(|e| (e.path.as_str(), e)).collect();
    for m in &manifest.entries {
        let mismatch = |reason: &str| ArtifactError::ManifestMismatch {
            path: m.path.clone(),
            reason: reason.to_owned(),
        };
        let u = by_path.remove(m.path.as_str()).ok_or_else(|| mismatch("not in the archive"))?;
        if u.kind != m.kind {
            return Err(mismatch("different kind"));
        }
        if u.kind != EntryKind::Dir && (u.digest != m.digest || u.size != m.size) {
            return Err(mismatch("different content"));
        }
        if u.link_target != m.link_target {
            return Err(mismatch("different link target"));
        }
    }
    // Directories created implicitly are not entries; anything else left is extra.
    match by_path.into_keys().min() {
        Some(extra) => Err(ArtifactError::ManifestMismatch {
            path: extra.to_owned(),
            reason: "in the archive but not the manifest".to_owned(),
        }),
        None => Ok(()),
    }
}

/// Decompressed bytes consumed so far, shared with the reader inside the archive.
struct Budget {
    used: Rc<Cell<u64>>,
    tripped: Rc<Cell<bool>>,
}

/// Fails a read once more than `limit` decompressed bytes have gone through it, and never
/// asks the decoder for much more than the remaining budget.
struct BoundedReader<R> {
    inner: R,
    limit: u64,
    used: Rc<Cell<u64>>,
    tripped: Rc<Cell<bool>>,
}

impl<R: Read> Read for BoundedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let remaining = self.limit.saturating_sub(self.used.get());
        let want =
            buf.len().min(usize::try_from(remaining.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.used.set(self.used.get().saturating_add(n as u64));
        if self.used.get() > self.limit {
            self.tripped.set(true);
            return Err(io::Error::other("decompressed size limit exceeded"));
        }
        Ok(n)
    }
}

/// What the archive has put at a path so far.
enum Node {
    File,
    Symlink,
    /// `explicit`: named by an entry (not only created as a parent).
    Dir {
        explicit: bool,
    },
}

struct Unpacker<'a> {
    dest: &'a Path,
    limits: &'a UnpackLimits,
    budget: Budget,
    nodes: HashMap<String, Node>,
    /// Symlinks written: path → target.
    links: HashMap<String, String>,
    out: Vec<UnpackedEntry>,
    /// A pending GNU long name / long link target for the next entry.
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    entries: u64,
    buf: Vec<u8>,
}

impl Unpacker<'_> {
    /// An error from reading the archive: the size cap if the bounded reader tripped,
    /// otherwise a corrupt stream.
    fn read_error(&self, e: io::Error) -> ArtifactError {
        if self.budget.tripped.get() {
            ArtifactError::TooLarge { limit: self.limits.max_total_bytes }
        } else {
            ArtifactError::Corrupt(format!("reading archive: {e}"))
        }
    }

    fn entry<R: Read>(&mut self, entry: &mut Entry<'_, R>) -> Result<(), ArtifactError> {
        let kind = entry.header().entry_type();
        match kind {
            EntryType::GNULongName | EntryType::GNULongLink => {
                let value = self.read_long(entry)?;
                let slot = if kind == EntryType::GNULongName {
                    &mut self.long_name
                } else {
                    &mut self.long_link
                };
                if slot.replace(value).is_some() {
                    return Err(ArtifactError::Corrupt("two GNU long names for one entry".into()));
                }
                return Ok(());
            }
            _ => {}
        }
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(ArtifactError::TooManyEntries { limit: self.limits.max_entries });
        }
        let raw_path = match self.long_name.take() {
            Some(p) => p,
            None => entry.path_bytes().into_owned(),
        };
        let raw_link = match self.long_link.take() {
            Some(l) => Some(l),
            None => entry.link_name_bytes().map(|l| l.into_owned()),
        };
        let path = self.check_path(&raw_path, kind == EntryType::Directory)?;
        let mode = entry
            .header()
            .mode()
            .map_err(|e| ArtifactError::Corrupt(format!("mode of `{path}`: {e}")))?
            & RESTORE_MODE_MASK;
        match kind {
            EntryType::Regular => self.file(entry, path, mode),
            EntryType::Symlink => self.symlink(path, raw_link, mode),
            EntryType::Directory => self.dir(path, mode),
            EntryType::Link => Err(ArtifactError::Hardlink { path }),
            EntryType::Char | EntryType::Block => Err(ArtifactError::Device { path }),
            EntryType::Fifo => Err(ArtifactError::Fifo { path }),
            other => Err(ArtifactError::UnsupportedEntry { path, kind: other.as_byte() as char }),
        }
    }

    /// Reads a GNU long-name payload, refusing it before reading if it is over the path cap.
    fn read_long<R: Read>(&mut self, entry: &mut Entry<'_, R>) -> Result<Vec<u8>, ArtifactError> {
        let size = entry.size();
        // +1: the payload ends with a NUL.
        if size > self.limits.max_path_len as u64 + 1 {
            return Err(ArtifactError::PathTooLong {
                prefix: String::from_utf8_lossy(&entry.path_bytes()).chars().take(64).collect(),
                len: size.saturating_sub(1),
                limit: self.limits.max_path_len,
            });
        }
        // `size` is bounded by the check above, so it may size the buffer.
        let mut value = Vec::with_capacity(size as usize);
        entry.by_ref().take(size).read_to_end(&mut value).map_err(|e| self.read_error(e))?;
        if value.len() as u64 != size {
            return Err(ArtifactError::Corrupt("truncated GNU long name".into()));
        }
        if value.last() == Some(&0) {
            value.pop();
        }
        Ok(value)
    }

    /// Length, UTF-8, cleanliness and confinement of an entry path.
    fn check_path(&self, raw: &[u8], is_dir: bool) -> Result<String, ArtifactError> {
        let raw = if is_dir { raw.strip_suffix(b"/").unwrap_or(raw) } else { raw };
        if raw.len() > self.limits.max_path_len {
            return Err(ArtifactError::PathTooLong {
                prefix: String::from_utf8_lossy(raw).chars().take(64).collect(),
                len: raw.len() as u64,
                limit: self.limits.max_path_len,
            });
        }
        let Ok(path) = std::str::from_utf8(raw) else {
            return Err(ArtifactError::NonUtf8Path { path: PathBuf::from(OsStr::from_bytes(raw)) });
        };
        check_relative(path)?;
        if !self.limits.confine.iter().any(|c| is_within(path, c)) {
            return Err(ArtifactError::OutsideConfine {
                path: path.to_owned(),
                confine: self.limits.confine.clone(),
            });
        }
        Ok(path.to_owned())
    }

    /// Refuses a path already taken, and creates its missing parents as real directories
    /// (after checking that no ancestor is a symlink or file from the archive).
    fn claim(&mut self, path: &str) -> Result<(), ArtifactError> {
        if self.nodes.contains_key(path) {
            return Err(ArtifactError::DuplicatePath { path: path.to_owned() });
        }
        for parent in ancestors(path) {
            match self.nodes.get(parent) {
                Some(Node::Dir { .. }) => {}
                Some(Node::Symlink) => {
                    return Err(ArtifactError::WriteThroughLink {
                        path: path.to_owned(),
                        link: parent.to_owned(),
                    });
                }
                Some(Node::File) => {
                    return Err(ArtifactError::ParentNotDir {
                        path: path.to_owned(),
                        parent: parent.to_owned(),
                    });
                }
                None => {
                    mkdir(&self.dest.join(parent))?;
                    self.nodes.insert(parent.to_owned(), Node::Dir { explicit: false });
                }
            }
        }
        Ok(())
    }

    fn file<R: Read>(
        &mut self,
        entry: &mut Entry<'_, R>,
        path: String,
        mode: u32,
    ) -> Result<(), ArtifactError> {
        let size = entry.size();
        // Refuse a declared size over the budget before writing a byte of it.
        if self.budget.used.get().saturating_add(size) > self.limits.max_total_bytes {
            return Err(ArtifactError::TooLarge { limit: self.limits.max_total_bytes });
        }
        self.claim(&path)?;
        let abs = self.dest.join(&path);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&abs)
            .map_err(ArtifactError::io(&abs))?;
        self.nodes.insert(path.clone(), Node::File);
        let mut hasher = blake3::Hasher::new();
        let mut written = 0u64;
        loop {
            let n = entry.read(&mut self.buf).map_err(|e| self.read_error(e))?;
            if n == 0 {
                break;
            }
            let chunk = &self.buf[..n];
            hasher.update(chunk);
            file.write_all(chunk).map_err(ArtifactError::io(&abs))?;
            written += n as u64;
        }
        if written != size {
            return Err(ArtifactError::Corrupt(format!("`{path}` is truncated")));
        }
        file.set_permissions(fs::Permissions::from_mode(mode)).map_err(ArtifactError::io(&abs))?;
        self.out.push(UnpackedEntry {
            path,
            kind: EntryKind::File,
            mode,
            size,
            digest: Some(Digest(*hasher.finalize().as_bytes())),
            link_target: None,
        });
        Ok(())
    }

    fn symlink(
        &mut self,
        path: String,
        raw_target: Option<Vec<u8>>,
        mode: u32,
    ) -> Result<(), ArtifactError> {
        let raw_target = raw_target.unwrap_or_default();
        if raw_target.len() > self.limits.max_path_len {
            return Err(ArtifactError::PathTooLong {
                prefix: String::from_utf8_lossy(&raw_target).chars().take(64).collect(),
                len: raw_target.len() as u64,
                limit: self.limits.max_path_len,
            });
        }
        let target = String::from_utf8(raw_target).map_err(|e| ArtifactError::NonUtf8Path {
            path: PathBuf::from(OsStr::from_bytes(e.as_bytes())),
        })?;
        // Checked against the links seen so far here, and against all of them in `finish`
        // (a link may come before the link it travels through).
        if !stays_within(&path, &target, &self.links, &self.limits.confine) {
            return Err(ArtifactError::LinkEscapes { path, target });
        }
        self.claim(&path)?;
        let abs = self.dest.join(&path);
        std::os::unix::fs::symlink(&target, &abs).map_err(ArtifactError::io(&abs))?;
        self.nodes.insert(path.clone(), Node::Symlink);
        self.links.insert(path.clone(), target.clone());
        self.out.push(UnpackedEntry {
            path,
            kind: EntryKind::Symlink,
            mode,
            size: target.len() as u64,
            digest: Some(Digest::of(target.as_bytes())),
            link_target: Some(target),
        });
        Ok(())
    }

    fn dir(&mut self, path: String, mode: u32) -> Result<(), ArtifactError> {
        match self.nodes.get_mut(&path) {
            // Already created as a parent: now it is named too.
            Some(Node::Dir { explicit }) if !*explicit => *explicit = true,
            Some(_) => return Err(ArtifactError::DuplicatePath { path }),
            None => {
                self.claim(&path)?;
                mkdir(&self.dest.join(&path))?;
                self.nodes.insert(path.clone(), Node::Dir { explicit: true });
            }
        }
        self.out.push(UnpackedEntry {
            path,
            kind: EntryKind::Dir,
            mode,
            size: 0,
            digest: None,
            link_target: None,
        });
        Ok(())
    }

    fn finish(self) -> Result<Vec<UnpackedEntry>, ArtifactError> {
        if self.long_name.is_some() || self.long_link.is_some() {
            return Err(ArtifactError::Corrupt("GNU long name with no entry after it".into()));
        }
        let mut links: Vec<(&String, &String)> = self.links.iter().collect();
        links.sort();
        for (path, target) in links {
            if !stays_within(path, target, &self.links, &self.limits.confine) {
                return Err(ArtifactError::LinkEscapes {
                    path: path.clone(),
                    target: target.clone(),
                });
            }
        }
        Ok(self.out)
    }
}

/// Creates one directory, owner-only while staging (`create_dir` fails on anything already
/// there, link or not).
fn mkdir(abs: &Path) -> Result<(), ArtifactError> {
    fs::DirBuilder::new().mode(0o700).create(abs).map_err(ArtifactError::io(abs))
}

#[cfg(test)]
mod tests;
