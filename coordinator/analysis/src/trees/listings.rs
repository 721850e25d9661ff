//! What each directory of the installed trees held when a walk last read it
//! (`.prova/trees/listings/<tree>`, one file per tree), so that a warm walk stats a directory
//! instead of reading it.
//!
//! Reading a directory is four system calls (`openat`, two `getdents64`, `close`) and about
//! five times a `statx`'s time on this kind of machine; a pnpm `node_modules` of 20,000
//! entries has 3,600 directories, half of its walk. A directory's entries change only by a
//! link, unlink, rename, `mkdir`, `rmdir` or `symlink` inside it, and each of those moves the
//! directory's mtime and ctime to the present (a ctime cannot be set back). So a directory
//! whose stat (device, inode, size, mtime, ctime, mode) is the one recorded with its listing
//! still holds that listing — provided the recorded stat was taken before the listing was
//! read, and the directory's last change was older than the racy window before that walk
//! began ([`RACY_WINDOW_NS`]): a change in the same timestamp tick as the recorded one could
//! otherwise leave the stat as it was. The entries' own stats are taken every walk, as
//! before: a file's bytes change without its directory moving.
//!
//! Only the warm walk for a tree's stamp uses the record ([`super::walk::Keep::Stamp`]); a
//! walk that builds a manifest, and the guard's walk that places a watch on every directory
//! it reads, read every directory. The record is best effort: missing, unreadable, of
//! another version or malformed, it holds nothing; a listing that does not hold when replayed
//! (an entry gone, or of another kind) is read again; a write that fails costs the next run
//! the reads. A record is read without copying its names (a 20,000-entry tree's is about
//! 700 KB) and written only when its tree's listings changed.

use std::collections::HashMap;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::digests::{RACY_WINDOW_NS, Stamp};

/// The records' directory in the manifests' directory.
pub(super) const DIR_NAME: &str = "listings";

/// Largest record read: a name and a byte per entry of the tree, and a stat per directory
/// (a 200,000-entry `node_modules` records about 7 MB).
const MAX_BYTES: u64 = 64 << 20;

/// The records' format.
const VERSION: u32 = 1;

/// Fewest directories a tree's record holds: below that, reading the record costs about what
/// it saves (a pnpm package's own `node_modules` is one directory of links).
const MIN_DIRS: usize = 4;

/// An entry of a listing: a directory.
pub(super) const DIR: u8 = b'd';
/// A regular file.
pub(super) const FILE: u8 = b'f';
/// A symlink.
pub(super) const LINK: u8 = b'l';

/// A directory's stat as recorded: device, inode, size, mtime (ns), ctime (ns), mode.
type DirStat = (u64, u64, u64, i64, i64, u32);

fn dir_stat(s: &Stamp) -> DirStat {
    (s.dev, s.ino, s.size, s.mtime_ns, s.ctime_ns, s.mode)
}

/// One tree's record: its path, and each directory's path, stat and entries (each a kind
/// byte, the name and a NUL; a name cannot hold one).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record<'a> {
    v: u32,
    tree: &'a str,
    #[serde(borrow)]
    dirs: Vec<(&'a str, DirStat, &'a str)>,
}

/// What a directory held when read, and the stat it was read under.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Listing {
    stat: DirStat,
    entries: String,
}

impl Listing {
    /// An empty listing of a directory whose stat is `stat`, to be filled by [`Listing::push`].
    pub(super) fn of(stat: &Stamp) -> Listing {
        Listing { stat: dir_stat(stat), entries: String::new() }
    }

    /// Adds entry `name` of `kind`.
    pub(super) fn push(&mut self, kind: u8, name: &str) {
        self.entries.push(char::from(kind));
        self.entries.push_str(name);
        self.entries.push('\0');
    }

    /// Whether the directory had changed within the racy window before `started_ns`.
    fn racy(&self, started_ns: i64) -> bool {
        let bound = started_ns.saturating_sub(RACY_WINDOW_NS);
        self.stat.3 >= bound || self.stat.4 >= bound
    }
}

/// A recorded listing's entries: kind and name.
pub(super) fn entries(listed: &str) -> impl Iterator<Item = (u8, &str)> {
    listed.split_terminator('\0').filter_map(|e| Some((*e.as_bytes().first()?, e.get(1..)?)))
}

/// The records of the trees one walk goes through, as read at its start, and what the walk
/// did with them.
#[derive(Debug)]
pub(super) struct Listings<'a> {
    /// Each directory's stat and entries, by workspace path.
    known: HashMap<&'a str, (DirStat, &'a str)>,
    /// When the walk began, ns since the epoch (the racy window's end).
    started_ns: i64,
    notes: Mutex<Notes>,
}

#[derive(Debug, Default)]
struct Notes {
    /// Directories whose recorded listing held.
    held: Vec<String>,
    /// Directories read, with what they held.
    read: Vec<(String, Listing)>,
}

/// The stored records of some trees: read by [`Records::read`], looked into through
/// [`Records::listings`].
pub(super) struct Records {
    store: PathBuf,
    trees: Vec<String>,
    bytes: Vec<Vec<u8>>,
}

impl Records {
    /// The records of `trees` (workspace paths) in `store` (empty for one that cannot be read).
    pub(super) fn read(store: &Path, trees: &[String]) -> Records {
        let bytes = trees
            .iter()
            .map(|t| {
                let mut bytes = Vec::new();
                let read = fs::File::open(file_of(store, t))
                    .and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes));
                if read.is_ok_and(|n| n as u64 <= MAX_BYTES) { bytes } else { Vec::new() }
            })
            .collect();
        Records { store: store.to_path_buf(), trees: trees.to_vec(), bytes }
    }

    /// The listings they hold, for a walk that began at `started_ns`.
    pub(super) fn listings(&self, started_ns: i64) -> Listings<'_> {
        let mut known = HashMap::new();
        for (tree, bytes) in self.trees.iter().zip(&self.bytes) {
            let Ok(record) = rmp_serde::from_slice::<Record<'_>>(bytes) else { continue };
            if record.v != VERSION || record.tree != tree {
                continue;
            }
            for (dir, stat, listed) in record.dirs {
                if is_at_or_under(dir, tree) {
                    known.insert(dir, (stat, listed));
                }
            }
        }
        Listings { known, started_ns, notes: Mutex::new(Notes::default()) }
    }
}

impl<'a> Listings<'a> {
    /// The entries recorded for directory `dir` (workspace-relative) if its stat is still
    /// `stat` ([`entries`] reads them).
    pub(super) fn holding(&self, dir: &str, stat: &Stamp) -> Option<&'a str> {
        self.known.get(dir).filter(|(s, _)| *s == dir_stat(stat)).map(|(_, listed)| *listed)
    }

    /// Notes that the recorded listing of `dir` held.
    pub(super) fn held(&self, dir: &str) {
        self.notes().held.push(dir.to_owned());
    }

    /// Notes what `dir` held when read.
    pub(super) fn was_read(&self, dir: &str, listing: Listing) {
        self.notes().read.push((dir.to_owned(), listing));
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.notes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many directories this walk took from the records, and how many it read.
    pub(super) fn counts(&self) -> (usize, usize) {
        let n = self.notes();
        (n.held.len(), n.read.len())
    }

    /// Writes the record of each tree of `records` whose listings this walk changed: its
    /// directories as this walk found them, a listing read within the racy window left out.
    pub(super) fn write_back(self, records: &Records) {
        let Listings { known, started_ns, notes } = self;
        let Notes { held, read } =
            notes.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        for tree in &records.trees {
            let under = |d: &str| is_at_or_under(d, tree);
            let before = known.keys().filter(|d| under(d)).count();
            let kept: Vec<(&str, DirStat, &str)> = held
                .iter()
                .filter(|d| under(d))
                .filter_map(|d| known.get_key_value(d.as_str()))
                .map(|(d, (stat, listed))| (*d, *stat, *listed))
                .collect();
            let fresh: Vec<(&str, DirStat, &str)> = read
                .iter()
                .filter(|(d, l)| under(d) && !l.racy(started_ns))
                .map(|(d, l)| (d.as_str(), l.stat, l.entries.as_str()))
                .collect();
            // Unchanged: every directory recorded held, and none was read that can be
            // recorded.
            if fresh.is_empty() && kept.len() == before {
                continue;
            }
            let mut dirs = kept;
            dirs.extend(fresh);
            if dirs.len() < MIN_DIRS {
                // Best effort: a record left behind is still checked directory by directory.
                let _ = fs::remove_file(file_of(&records.store, tree));
                continue;
            }
            // Best effort (module docs): a record not written is read again next time.
            let _ = write(&records.store, &Record { v: VERSION, tree, dirs });
        }
    }
}

/// Removes the records of trees other than `current` from `store`. Best effort.
pub(super) fn forget_others(store: &Path, current: &[String]) {
    let dir = store.join(DIR_NAME);
    let Ok(rd) = fs::read_dir(&dir) else { return };
    let keep: Vec<PathBuf> = current.iter().map(|t| file_of(store, t)).collect();
    for e in rd.flatten() {
        if !keep.contains(&e.path()) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Where tree `tree`'s record is: named by a hash of its path (the record holds the path).
fn file_of(store: &Path, tree: &str) -> PathBuf {
    let h = xxhash_rust::xxh3::xxh3_64(tree.as_bytes());
    store.join(DIR_NAME).join(format!("{h:016x}"))
}

fn write(store: &Path, record: &Record<'_>) -> std::io::Result<()> {
    // Only into a manifests' directory a scan made: a run refused before its scan (its
    // config, the lock) leaves the workspace as it found it.
    if !store.is_dir() {
        return Ok(());
    }
    let bytes = rmp_serde::to_vec(record).map_err(std::io::Error::other)?;
    let dir = store.join(DIR_NAME);
    fs::create_dir_all(&dir)?;
    let file = file_of(store, record.tree);
    let mut tmp = file.clone().into_os_string();
    tmp.push(format!(".tmp.{}", std::process::id()));
    fs::write(&tmp, &bytes)?;
    fs::rename(&tmp, &file)
}

fn is_at_or_under(dir: &str, tree: &str) -> bool {
    dir.strip_prefix(tree).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Now, ns since the epoch: when a walk begins.
pub(super) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(ctime_ns: i64) -> Stamp {
        Stamp { dev: 1, ino: 2, size: 4096, mtime_ns: ctime_ns, ctime_ns, mode: 0o40755 }
    }

    fn trees(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_listing_holds_for_its_stat_only_and_is_recorded_outside_the_racy_window() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path();
        let now = 100 * RACY_WINDOW_NS;
        let old = stamp(now - RACY_WINDOW_NS - 1);
        let recent = stamp(now - 1);
        let mut a = Listing::of(&old);
        a.push(DIR, "sub");
        a.push(FILE, "index.js");
        let mut b = Listing::of(&recent);
        b.push(LINK, "bin");
        let nm = trees(&["node_modules"]);
        let records = Records::read(store, &nm);
        let walk = records.listings(now);
        walk.was_read("node_modules", a);
        walk.was_read("node_modules/x", b);
        for d in ["node_modules/d1", "node_modules/d2", "node_modules/d3"] {
            walk.was_read(d, Listing::of(&old));
        }
        walk.write_back(&records);
        let records = Records::read(store, &nm);
        let again = records.listings(now);
        assert_eq!(again.known.len(), 4, "the racy listing is not recorded");
        let held = again.holding("node_modules", &old).expect("recorded");
        assert_eq!(entries(held).collect::<Vec<_>>(), [(DIR, "sub"), (FILE, "index.js")]);
        // Any field of the stat moved: the listing does not hold.
        for moved in [
            Stamp { ctime_ns: old.ctime_ns + 1, ..old },
            Stamp { mtime_ns: old.mtime_ns + 1, ..old },
            Stamp { ino: 3, ..old },
            Stamp { size: 8192, ..old },
        ] {
            assert!(again.holding("node_modules", &moved).is_none(), "{moved:?}");
        }
        assert!(again.holding("node_modules/x", &recent).is_none());
        // Another tree's walk does not see this tree's record.
        let other = Records::read(store, &trees(&["packages/a/node_modules"]));
        assert!(other.listings(now).known.is_empty());
    }

    #[test]
    fn a_write_back_rewrites_only_a_changed_tree_and_drops_what_it_no_longer_found() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path();
        let now = 100 * RACY_WINDOW_NS;
        let old = stamp(now - 2 * RACY_WINDOW_NS);
        let both = trees(&["node_modules", "packages/a/node_modules"]);
        let records = Records::read(store, &both);
        let walk = records.listings(now);
        let root_dirs = ["node_modules", "node_modules/k1", "node_modules/k2", "node_modules/k3"];
        let a_dirs = [
            "packages/a/node_modules",
            "packages/a/node_modules/x",
            "packages/a/node_modules/y",
            "packages/a/node_modules/z",
        ];
        for d in root_dirs.iter().chain(&a_dirs).chain(&["node_modules/gone"]) {
            walk.was_read(d, Listing::of(&old));
        }
        walk.write_back(&records);
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let (root, a) = (file_of(store, &both[0]), file_of(store, &both[1]));
        let (root_ino, a_ino) = (ino(&root), ino(&a));
        // `node_modules/gone` went; `packages/a/node_modules` held.
        let records = Records::read(store, &both);
        let walk = records.listings(now);
        for d in root_dirs.iter().chain(&a_dirs) {
            walk.held(d);
        }
        walk.write_back(&records);
        assert_ne!(ino(&root), root_ino, "rewritten");
        assert_eq!(ino(&a), a_ino, "left alone");
        let records = Records::read(store, &both);
        let mut dirs: Vec<&str> = records.listings(now).known.into_keys().collect();
        dirs.sort();
        let mut want: Vec<&str> = root_dirs.iter().chain(&a_dirs).copied().collect();
        want.sort();
        assert_eq!(dirs, want);
        // A tree down to fewer directories than are worth a record loses its record.
        let walk = records.listings(now);
        for d in root_dirs.iter().chain(&a_dirs[..2]) {
            walk.held(d);
        }
        walk.write_back(&records);
        assert!(root.exists() && !a.exists());
        fs::copy(&root, &a).unwrap();
        // A malformed record, or one of another tree, holds nothing.
        fs::write(&root, b"\x92not a record").unwrap();
        fs::copy(&a, file_of(store, "vendor")).unwrap();
        let records = Records::read(store, &trees(&["node_modules", "vendor"]));
        assert!(records.listings(now).known.is_empty());
        // The records of trees no longer current go.
        forget_others(store, &both);
        assert!(!file_of(store, "vendor").exists());
        assert!(a.exists() && root.exists());
    }

    #[test]
    fn names_are_split_back_as_pushed() {
        let mut l = Listing::of(&stamp(1));
        for (k, n) in [(FILE, "a b"), (DIR, ".bin"), (LINK, "ünï")] {
            l.push(k, n);
        }
        let got: Vec<(u8, &str)> = entries(&l.entries).collect();
        assert_eq!(got, [(FILE, "a b"), (DIR, ".bin"), (LINK, "ünï")]);
    }
}
