//! File digests with a stat memo (brief §5): a file whose (device, inode, size, mtime,
//! ctime, mode) match its memo row is not read again — a warm run reads no input bytes. A
//! memo row is only trusted when the file's mtime is older than the row by more than the
//! racy window: a file modified in the same timestamp tick as it was hashed could change
//! again without its stamps moving, so it is hashed once more on the next run (git's "racy
//! clean" rule).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use prova_protocol::Digest;

use crate::cache::MemoRow;
use prova_protocol::key::InputKind;

pub(crate) mod beyond;

/// Files modified this close (ns) before their memo row was written are re-hashed.
pub const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// Stat stamps of a file: what the memo compares and what `restat` rechecks before a save.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size.
    pub size: u64,
    /// mtime, ns since the epoch.
    pub mtime_ns: i64,
    /// ctime, ns since the epoch.
    pub ctime_ns: i64,
    /// Mode bits (type and permissions).
    pub mode: u32,
}

impl Stamp {
    /// The stamps of `meta`.
    pub fn of(meta: &fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime().saturating_mul(1_000_000_000).saturating_add(meta.mtime_nsec()),
            ctime_ns: meta.ctime().saturating_mul(1_000_000_000).saturating_add(meta.ctime_nsec()),
            mode: meta.mode(),
        }
    }

    /// The stamps of `st` (an `fstat`), as [`Stamp::of`] gives them for the same file.
    pub fn of_stat(st: &nix::sys::stat::FileStat) -> Self {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Self {
            dev: st.st_dev,
            ino: st.st_ino,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
            mode: st.st_mode,
        }
    }

    fn matches(&self, row: &MemoRow) -> bool {
        self.dev == row.dev
            && self.ino == row.ino
            && self.size == row.size
            && self.mtime_ns == row.mtime_ns
            && self.ctime_ns == row.ctime_ns
            && self.mode == row.mode
    }
}

/// What the key needs of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileFacts {
    /// File or link.
    pub kind: InputKind,
    /// Owner-execute bit.
    pub exec: bool,
    /// Content digest (of a link: its target string).
    pub digest: Digest,
    /// Stamps when it was looked at.
    pub stamp: Stamp,
}

/// The result of a digest pass.
#[derive(Debug, Default)]
pub struct DigestPass {
    /// Facts by workspace-relative path; paths that vanished or are not files are absent.
    pub facts: HashMap<String, FileFacts>,
    /// Memo rows to write (files hashed this pass).
    pub updates: Vec<(String, MemoRow)>,
    /// Files whose bytes were read.
    pub hashed: usize,
    /// Files answered by the memo.
    pub memo_hits: usize,
}

/// Stats and (where the memo cannot answer) hashes `paths` under `root`, spreading the
/// work over the machine's cores. `now_ns` is the time the memo rows are recorded at.
pub fn digest_files(
    root: &Path,
    paths: &[&str],
    memo: &HashMap<String, MemoRow>,
    now_ns: i64,
) -> DigestPass {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let chunk = paths.len().div_ceil(threads).max(256);
    let parts: Vec<DigestPass> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .chunks(chunk)
            .map(|part| s.spawn(move || digest_chunk(root, part, memo, now_ns)))
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut out = DigestPass::default();
    for p in parts {
        out.facts.extend(p.facts);
        out.updates.extend(p.updates);
        out.hashed += p.hashed;
        out.memo_hits += p.memo_hits;
    }
    out
}

fn digest_chunk(
    root: &Path,
    paths: &[&str],
    memo: &HashMap<String, MemoRow>,
    now_ns: i64,
) -> DigestPass {
    let mut out = DigestPass::default();
    for &rel in paths {
        let abs = root.join(rel);
        let Ok(meta) = fs::symlink_metadata(&abs) else { continue };
        let ft = meta.file_type();
        let kind = if ft.is_file() {
            InputKind::File
        } else if ft.is_symlink() {
            InputKind::Symlink
        } else {
            continue; // directories (submodule gitlinks), sockets, devices: not inputs
        };
        let stamp = Stamp::of(&meta);
        let exec = meta.mode() & 0o100 != 0;
        // A link out of the workspace is keyed by what it leads to, read afresh: its own
        // stamps say nothing of that, so the memo neither answers nor keeps it (`beyond`).
        let outside = (kind == InputKind::Symlink).then(|| beyond::beyond(root, rel)).flatten();
        if outside.is_none()
            && let Some(row) = memo.get(rel)
            && memo_answers(&stamp, row)
        {
            out.memo_hits += 1;
            out.facts.insert(rel.to_owned(), FileFacts { kind, exec, digest: row.digest, stamp });
            continue;
        }
        let hashed = match &outside {
            Some(target) => beyond_digest(root, rel, target),
            None => hash(root, rel, kind),
        };
        let Ok(digest) = hashed else {
            continue; // vanished between stat and read: not an input
        };
        out.hashed += 1;
        out.facts.insert(rel.to_owned(), FileFacts { kind, exec, digest, stamp });
        if outside.is_none() {
            out.updates.push((rel.to_owned(), memo_row(&stamp, digest, now_ns)));
        }
    }
    out
}

/// The digest of symlink input `rel`, which leads out of the workspace to `target`: its
/// text and what is there now.
fn beyond_digest(root: &Path, rel: &str, target: &Path) -> io::Result<Digest> {
    let text = link_target(root, rel)?;
    let mut bytes = text.as_os_str().as_encoded_bytes().to_vec();
    bytes.extend_from_slice(b"\0beyond the workspace\0");
    bytes.extend_from_slice(&beyond::state(target));
    Ok(Digest::of(&bytes))
}

fn hash(root: &Path, rel: &str, kind: InputKind) -> io::Result<Digest> {
    match kind {
        InputKind::File => Digest::of_file(&root.join(rel)),
        InputKind::Symlink => {
            let target = link_target(root, rel)?;
            Ok(Digest::of(target.as_os_str().as_encoded_bytes()))
        }
    }
}

/// `path` with `.` and `..` taken out lexically (no link followed; `..` at the top stays
/// there), as `cd` does by default.
pub(crate) fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The target of the symlink input `rel`, as keyed and as placed in exec roots: an absolute
/// target inside the workspace `root` is made relative to the link's directory (so the key
/// does not depend on where the workspace is checked out, and an exec root's copy points at
/// the exec root's file, not the checkout's); any other target is as written.
pub fn link_target(root: &Path, rel: &str) -> io::Result<PathBuf> {
    let target = fs::read_link(root.join(rel))?;
    Ok(relative_if_inside(root, rel, target))
}

/// [`link_target`] of the link `rel` whose text `target` was read already.
pub(crate) fn relative_if_inside(root: &Path, rel: &str, target: PathBuf) -> PathBuf {
    use std::path::Component;
    if !target.is_absolute() {
        return target;
    }
    // Lexically normalised (`..` pops): the link is not followed, only its text read.
    let mut norm: Vec<&std::ffi::OsStr> = Vec::new();
    for c in target.components() {
        match c {
            Component::Normal(n) => norm.push(n),
            Component::ParentDir => {
                norm.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let root_parts: Vec<&std::ffi::OsStr> = root
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    if norm.len() <= root_parts.len() || norm[..root_parts.len()] != root_parts[..] {
        return target; // outside the workspace, or the root itself
    }
    let inside = &norm[root_parts.len()..];
    let link_dir: Vec<&str> = rel.split('/').collect();
    let link_dir = &link_dir[..link_dir.len().saturating_sub(1)];
    let common =
        link_dir.iter().zip(inside).take_while(|(a, b)| std::ffi::OsStr::new(a) == **b).count();
    let mut out = PathBuf::new();
    for _ in common..link_dir.len() {
        out.push("..");
    }
    for part in &inside[common..] {
        out.push(part);
    }
    out
}

/// The memo scope of a workspace's **output** files (restored or found current by prova),
/// apart from its inputs' scope (the root path itself): the same path can be both an input of
/// one task and an output of another, and the two passes record at different times.
pub fn outputs_scope(root: &Path) -> String {
    format!("outputs:{}", root.display())
}

/// Whether `row` proves that a file with stamps `stamp` still holds `row.digest`, for
/// deciding that an output is already current: every stamp (device, inode, size, mtime,
/// ctime, mode) equal, and the file's **ctime** older than the row by more than the racy
/// window. ctime rather than mtime: outputs often carry pinned mtimes (`touch -d`,
/// `SOURCE_DATE_EPOCH`, restores themselves), which say nothing about when the bytes
/// changed, while any write, chmod, rename or utimes moves ctime to "now" and cannot be set
/// back.
pub fn row_proves_output(stamp: &Stamp, row: &MemoRow) -> bool {
    stamp.matches(row) && stamp.ctime_ns < row.recorded_ns.saturating_sub(RACY_WINDOW_NS)
}

/// Whether memo `row` still answers for a file whose stamps are now `stamp`: every stamp
/// equal, and the file's mtime outside the racy window of the row (module docs).
pub fn memo_answers(stamp: &Stamp, row: &MemoRow) -> bool {
    stamp.matches(row) && stamp.mtime_ns < row.recorded_ns.saturating_sub(RACY_WINDOW_NS)
}

/// The memo row recording that a file with `stamp` (taken before it was read) hashed to
/// `digest`, at `recorded_ns` (taken before the stat).
pub fn memo_row(stamp: &Stamp, digest: Digest, recorded_ns: i64) -> MemoRow {
    MemoRow {
        dev: stamp.dev,
        ino: stamp.ino,
        size: stamp.size,
        mtime_ns: stamp.mtime_ns,
        ctime_ns: stamp.ctime_ns,
        mode: stamp.mode,
        digest,
        recorded_ns,
    }
}

/// Re-stats `paths` and names the first whose stamps differ from `before` (or that
/// vanished): the task's inputs changed while it ran, so its key no longer holds.
pub fn first_changed<'a>(
    root: &Path,
    before: impl IntoIterator<Item = (&'a str, &'a Stamp)>,
) -> Option<String> {
    for (rel, stamp) in before {
        match fs::symlink_metadata(root.join(rel)) {
            Ok(meta) if Stamp::of(&meta) == *stamp => {}
            _ => return Some(rel.to_owned()),
        }
    }
    None
}

/// Names the first of `links` (symlink inputs with their keyed digests) that leads out of
/// the workspace and whose digest is no longer the keyed one: what it leads to changed
/// while the task ran, which no stamp in the workspace shows ([`first_changed`] compares the
/// link's own).
pub fn first_changed_beyond<'a>(
    root: &Path,
    links: impl IntoIterator<Item = (&'a str, &'a Digest)>,
) -> Option<String> {
    for (rel, keyed) in links {
        let Some(target) = beyond::beyond(root, rel) else { continue };
        match beyond_digest(root, rel, &target) {
            Ok(now) if now == *keyed => {}
            _ => return Some(rel.to_owned()),
        }
    }
    None
}

#[cfg(test)]
mod output_memo_tests {
    use super::*;

    fn stamp(ctime_ns: i64) -> Stamp {
        Stamp { dev: 1, ino: 2, size: 3, mtime_ns: 0, ctime_ns, mode: 0o100644 }
    }

    #[test]
    fn an_output_row_proves_only_outside_the_racy_window_of_ctime() {
        let d = Digest::of(b"x");
        let now = 100 * RACY_WINDOW_NS;
        // A pinned, ancient mtime does not make a fresh row trustworthy: ctime decides.
        let fresh = stamp(now - 1);
        assert!(!row_proves_output(&fresh, &memo_row(&fresh, d, now)));
        let old = stamp(now - RACY_WINDOW_NS - 1);
        assert!(row_proves_output(&old, &memo_row(&old, d, now)));
        // Any stamp that moved: no proof.
        let mut moved = old;
        moved.ino += 1;
        assert!(!row_proves_output(&moved, &memo_row(&old, d, now)));
        let mut moved = old;
        moved.ctime_ns += 1;
        assert!(!row_proves_output(&moved, &memo_row(&old, d, now)));
        assert_ne!(outputs_scope(Path::new("/ws")), "/ws");
    }
}

#[cfg(test)]
mod link_tests {
    use super::*;

    fn rel(link: &str, target: &str) -> String {
        relative_if_inside(Path::new("/ws/repo"), link, PathBuf::from(target))
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn absolute_targets_inside_the_workspace_become_relative() {
        assert_eq!(rel("a/b/link", "/ws/repo/c/d.txt"), "../../c/d.txt");
        assert_eq!(rel("a/link", "/ws/repo/a/x/y"), "x/y");
        assert_eq!(rel("link", "/ws/repo/x"), "x");
        assert_eq!(rel("a/link", "/ws/repo/b/../a/y"), "y", "lexically normalised");
    }

    #[test]
    fn other_targets_are_as_written() {
        assert_eq!(rel("a/link", "/usr/bin/node"), "/usr/bin/node");
        assert_eq!(rel("a/link", "/ws/repository/x"), "/ws/repository/x", "a prefix of a name");
        assert_eq!(rel("a/link", "/ws/repo"), "/ws/repo", "the root itself");
        assert_eq!(rel("a/link", "../b"), "../b");
    }
}
