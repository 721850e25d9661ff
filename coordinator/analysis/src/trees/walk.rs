//! The walk of the installed trees: every entry, stat'ed without following a symlink, on a few
//! threads at once (a `node_modules` of 20,000 entries is a single core's tens of
//! milliseconds of `getdents` and `statx`), and what the walk saw summed into one stamp.
//!
//! The stamp ([`Seen::stamp`]) covers each entry's path and kind and, for files and links,
//! the stat fields the digest memo compares (device, inode, size, mtime, ctime, mode). Any
//! write, chmod, rename or replacement of a file or link moves its ctime, which cannot be
//! set back; an entry added or removed changes the set of paths. So a tree whose stamp is
//! the one recorded with its digest holds the bytes that digest was computed from, under
//! the memo's own rule — provided nothing in it changed within the racy window of the
//! recording ([`Seen::newest_ns`]). Directories are not stat'ed: their entries are.
//!
//! The stamp is a sum of one 128-bit hash per entry, so the walk's order (which the threads
//! interleave) does not matter; the entry count is folded in at the end.
//!
//! A walk for the stamp alone may take a directory's entries from the listings recorded
//! when it was last read ([`Listings`]), after one `statx` of the directory shows it as it
//! was then; the entries are stat'ed as ever. It sees what a read would, so the stamp is the
//! same either way. Such a directory is opened relative to its parent, held open while its
//! subdirectories wait ([`MAX_HELD_DIRS`] at most at once); a directory that cannot be
//! opened that way is read by its path, so a failed open costs a read, never an entry.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use xxhash_rust::xxh3::Xxh3;

use super::listings::{self, Listing, Listings};
use super::{MAX_WALK_ENTRIES, TreeScanError};
use crate::digests::Stamp;

/// Most threads one walk uses.
const MAX_THREADS: usize = 4;

/// Directories waiting to be read at which the walk spreads over more threads.
const SPREAD_AT: usize = 64;

/// Most directories a walk holds open for their subdirectories to be opened from; past it a
/// subdirectory is opened by its whole path.
const MAX_HELD_DIRS: usize = 256;

/// A directory held open while its subdirectories wait: each is opened relative to it (one
/// path component for the kernel to look up, not the dozen of a path from `/` deep in
/// `node_modules/.pnpm`, and no link above it followed). Counted in the walk's `held`.
struct Held<'a> {
    fd: std::os::fd::OwnedFd,
    held: &'a AtomicUsize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A directory waiting to be read: its tree's index, its workspace path, and its parent held
/// open when there is one.
type Pending<'a> = (usize, String, Option<std::sync::Arc<Held<'a>>>);

/// What the walk of one tree saw (workspace-relative paths). A walk for the stamp alone
/// ([`Keep::Stamp`]) leaves the lists empty.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// Directories.
    pub(super) dirs: Vec<String>,
    /// Regular files, with their stamps.
    pub(super) files: Vec<(String, Stamp)>,
    /// Symlinks (their targets are read only when a manifest is built).
    pub(super) links: Vec<String>,
    /// The sum of the entries' hashes ([`Seen::stamp`]).
    sum: u128,
    /// How many entries were seen.
    entries: u64,
    /// How many of them are regular files.
    pub(super) file_count: usize,
    /// The newest mtime or ctime of a file or link, ns.
    pub(super) newest_ns: i64,
}

impl Seen {
    /// The tree's stamp: what the walk saw, as 32 hex digits.
    pub(super) fn stamp(&self) -> String {
        let n = u128::from(self.entries);
        format!("{:032x}", self.sum.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    }

    /// Adds entry `name` of directory `dir` (the path `dir/name`, never allocated here).
    fn add(&mut self, kind: u8, dir: &str, name: &str, stamp: Option<&Stamp>) {
        let mut h = Xxh3::new();
        h.update(&[kind]);
        h.update(&((dir.len() + 1 + name.len()) as u64).to_le_bytes());
        h.update(dir.as_bytes());
        h.update(b"/");
        h.update(name.as_bytes());
        self.entries += 1;
        self.file_count += usize::from(kind == b'f');
        if let Some(s) = stamp {
            for v in [s.dev, s.ino, s.size, s.mtime_ns as u64, s.ctime_ns as u64, u64::from(s.mode)]
            {
                h.update(&v.to_le_bytes());
            }
            self.newest_ns = self.newest_ns.max(s.mtime_ns).max(s.ctime_ns);
        }
        self.sum = self.sum.wrapping_add(h.digest128());
    }

    fn merge(&mut self, other: Seen) {
        self.dirs.extend(other.dirs);
        self.files.extend(other.files);
        self.links.extend(other.links);
        self.sum = self.sum.wrapping_add(other.sum);
        self.entries += other.entries;
        self.file_count += other.file_count;
        self.newest_ns = self.newest_ns.max(other.newest_ns);
    }
}

/// The directories still to read, how many are being read, and the first error.
struct Queue<'a> {
    state: Mutex<QueueState<'a>>,
    more: Condvar,
}

struct QueueState<'a> {
    /// Directories to read.
    todo: Vec<Pending<'a>>,
    busy: usize,
    failed: Option<TreeScanError>,
}

impl<'a> Queue<'a> {
    /// The next directory to read; `None` once every directory is read (or one failed).
    fn next(&self) -> Option<Pending<'a>> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if s.failed.is_some() {
                return None;
            }
            if let Some(d) = s.todo.pop() {
                s.busy += 1;
                return Some(d);
            }
            if s.busy == 0 {
                return None;
            }
            s = self.more.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// How many directories wait to be read.
    fn waiting(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).todo.len()
    }

    /// One directory read: its subdirectories to read next, or why it could not be.
    fn done(&self, found: Result<Vec<Pending<'a>>, TreeScanError>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.busy -= 1;
        match found {
            Ok(subdirs) => s.todo.extend(subdirs),
            Err(e) => {
                s.failed.get_or_insert(e);
            }
        }
        drop(s);
        self.more.notify_all();
    }
}

/// What a walk keeps of the entries it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Keep {
    /// The stamp alone: what a warm run compares with the record, without a path allocated
    /// per entry.
    Stamp,
    /// Every entry too: what a manifest is built from.
    Entries,
}

/// Walks the trees at workspace paths `dirs` under `root` (together: the threads share
/// their directories): every entry but names that are not UTF-8, sockets and devices;
/// symlinks not followed. Fails past [`MAX_WALK_ENTRIES`] in one tree.
pub(super) fn walk(root: &Path, dirs: &[String], keep: Keep) -> Result<Vec<Seen>, TreeScanError> {
    walk_visiting(root, dirs, keep, &|_| ())
}

/// [`walk`] for the stamps alone, taking a directory's entries from `listings` where its
/// recorded listing still holds, and noting there what it read.
pub(super) fn walk_listed(
    root: &Path,
    dirs: &[String],
    listings: &Listings<'_>,
) -> Result<Vec<Seen>, TreeScanError> {
    walk_with(root, dirs, Keep::Stamp, &|_| (), Some(listings))
}

/// [`walk`], calling `visit` with each directory (workspace-relative) before it is read: a
/// watch placed there sees every change the read does not.
pub(super) fn walk_visiting(
    root: &Path,
    dirs: &[String],
    keep: Keep,
    visit: &(dyn Fn(&str) + Sync),
) -> Result<Vec<Seen>, TreeScanError> {
    walk_with(root, dirs, keep, visit, None)
}

fn walk_with(
    root: &Path,
    dirs: &[String],
    keep: Keep,
    visit: &(dyn Fn(&str) + Sync),
    listings: Option<&Listings<'_>>,
) -> Result<Vec<Seen>, TreeScanError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS);
    let held = AtomicUsize::new(0);
    let todo = dirs.iter().cloned().enumerate().rev().map(|(t, d)| (t, d, None)).collect();
    let queue = Queue {
        state: Mutex::new(QueueState { todo, busy: 0, failed: None }),
        more: Condvar::new(),
    };
    let counts: Vec<AtomicUsize> = dirs.iter().map(|_| AtomicUsize::new(0)).collect();
    // Reads one directory of tree `t` into `seen` and queues its subdirectories, with the
    // directory held open for them while fewer than `MAX_HELD_DIRS` are.
    let step = |seen: &mut Vec<Seen>, (t, d, parent): Pending<'_>| {
        visit(&d);
        let found = match listings {
            Some(l) => {
                let parent = parent.as_deref().map(|h| &h.fd);
                read_listed(root, &dirs[t], &d, parent, &mut seen[t], &counts[t], l)
            }
            None => read_one(root, &dirs[t], &d, &mut seen[t], &counts[t], keep, None)
                .map(|subdirs| (subdirs, None)),
        };
        drop(parent);
        queue.done(found.map(|(subdirs, fd)| {
            let hold = match fd {
                Some(fd) if !subdirs.is_empty() => {
                    if held.fetch_add(1, Ordering::Relaxed) < MAX_HELD_DIRS {
                        Some(std::sync::Arc::new(Held { fd, held: &held }))
                    } else {
                        held.fetch_sub(1, Ordering::Relaxed);
                        None
                    }
                }
                _ => None,
            };
            subdirs.into_iter().map(|d| (t, d, hold.clone())).collect()
        }));
    };
    let fresh = || -> Vec<Seen> { dirs.iter().map(|_| Seen::default()).collect() };
    let parts: Vec<Vec<Seen>> = std::thread::scope(|s| {
        let work = || {
            let mut seen = fresh();
            while let Some(pending) = queue.next() {
                step(&mut seen, pending);
            }
            seen
        };
        // This thread alone until the directories waiting show a tree worth the threads (a
        // small one is read before a thread would have started).
        let mut seen = fresh();
        let mut helpers = Vec::new();
        while let Some(pending) = queue.next() {
            step(&mut seen, pending);
            if helpers.is_empty() && threads > 1 && queue.waiting() >= SPREAD_AT {
                helpers = (1..threads).map(|_| s.spawn(work)).collect();
            }
        }
        let spawned = helpers.len();
        let mut parts = vec![seen];
        // A helper that panicked leaves its part out: the walk fails below.
        parts.extend(helpers.into_iter().filter_map(|h| h.join().ok()));
        if parts.len() == spawned + 1 { parts } else { Vec::new() }
    });
    let state = queue.state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = state.failed {
        return Err(e);
    }
    if parts.is_empty() {
        return Err(TreeScanError::Io {
            tree: dirs.join(", "),
            path: String::new(),
            source: std::io::Error::other("a walking thread panicked"),
        });
    }
    let mut all = fresh();
    for part in parts {
        for (a, p) in all.iter_mut().zip(part) {
            a.merge(p);
        }
    }
    Ok(all)
}

/// Directory `d` of tree `tree` into `seen` for its stamp alone, its entries taken from
/// `listings` when the listing recorded there holds for the directory's stat and for every
/// entry's kind; else read (after the stat), and what it held noted in `listings`. Opened
/// relative to `parent` (its parent directory, open) when given, else by its whole path.
/// Returns its subdirectories, and the directory open when its listing held (for them to
/// be opened from).
fn read_listed(
    root: &Path,
    tree: &str,
    d: &str,
    parent: Option<&std::os::fd::OwnedFd>,
    seen: &mut Seen,
    count: &AtomicUsize,
    listings: &Listings<'_>,
) -> Result<(Vec<String>, Option<std::os::fd::OwnedFd>), TreeScanError> {
    use nix::fcntl::OFlag;
    // The directory itself, not a link to one (a tree's own directory may be a link: read
    // through, as ever, with no listing); its entries are stat'ed relative to it.
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mode = nix::sys::stat::Mode::empty();
    let opened = match (parent, d.rsplit_once('/')) {
        (Some(p), Some((_, name))) => nix::fcntl::openat(p, name, flags, mode),
        _ => nix::fcntl::open(&root.join(d), flags, mode),
    };
    let opened = opened.ok().and_then(|dir| {
        let st = nix::sys::stat::fstat(&dir).ok()?;
        Some((dir, Stamp::of_stat(&st)))
    });
    let Some((dir, stat)) = opened else {
        return Ok((read_one(root, tree, d, seen, count, Keep::Stamp, None)?, None));
    };
    if let Some(listed) = listings.holding(d, &stat)
        && let Some(subdirs) = replay(&dir, tree, d, seen, count, listed)?
    {
        listings.held(d);
        return Ok((subdirs, Some(dir)));
    }
    drop(dir);
    let mut listing = Listing::of(&stat);
    let subdirs = read_one(root, tree, d, seen, count, Keep::Stamp, Some(&mut listing))?;
    listings.was_read(d, listing);
    Ok((subdirs, None))
}

/// Directory `d`'s recorded entries (`listed`; `dir` open on it) into `seen`, each file and
/// link stat'ed; `None` (and nothing added) when an entry is gone or of another kind: the
/// directory changed since its stat was taken, and is read instead.
fn replay(
    dir: &std::os::fd::OwnedFd,
    tree: &str,
    d: &str,
    seen: &mut Seen,
    count: &AtomicUsize,
    listed: &str,
) -> Result<Option<Vec<String>>, TreeScanError> {
    use nix::fcntl::AtFlags;
    use nix::sys::stat::SFlag;
    let mut subdirs = Vec::new();
    let mut stamped = Vec::new();
    for (kind, name) in listings::entries(listed) {
        if kind == listings::DIR {
            subdirs.push(name);
            continue;
        }
        let st = match nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(nix::errno::Errno::ENOENT) => return Ok(None),
            Err(errno) => {
                let path = format!("{d}/{name}");
                let source = std::io::Error::from(errno);
                return Err(TreeScanError::Io { tree: tree.to_owned(), path, source });
            }
        };
        let now = match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFLNK => listings::LINK,
            SFlag::S_IFREG => listings::FILE,
            _ => 0,
        };
        if now != kind {
            return Ok(None);
        }
        stamped.push((kind, name, Stamp::of_stat(&st)));
    }
    // Counted once it holds: a listing read instead is counted by the read.
    let n = subdirs.len() + stamped.len();
    if count.fetch_add(n, Ordering::Relaxed) + n > MAX_WALK_ENTRIES {
        return Err(TreeScanError::TooLarge(tree.to_owned()));
    }
    for name in &subdirs {
        seen.add(listings::DIR, d, name, None);
    }
    for (kind, name, stamp) in &stamped {
        seen.add(*kind, d, name, Some(stamp));
    }
    Ok(Some(subdirs.into_iter().map(|name| format!("{d}/{name}")).collect()))
}

/// Reads directory `d` (workspace-relative) of tree `tree` into `seen`, and into `listing`
/// when given; returns its subdirectories.
fn read_one(
    root: &Path,
    tree: &str,
    d: &str,
    seen: &mut Seen,
    count: &AtomicUsize,
    keep: Keep,
    mut listing: Option<&mut Listing>,
) -> Result<Vec<String>, TreeScanError> {
    let io_err = |path: &str| {
        let (tree, path) = (tree.to_owned(), path.to_owned());
        move |source| TreeScanError::Io { tree, path, source }
    };
    let mut subdirs = Vec::new();
    let rd = fs::read_dir(root.join(d)).map_err(io_err(d))?;
    for e in rd {
        let e = e.map_err(io_err(d))?;
        if count.fetch_add(1, Ordering::Relaxed) >= MAX_WALK_ENTRIES {
            return Err(TreeScanError::TooLarge(tree.to_owned()));
        }
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let rel = || format!("{d}/{name}");
        let ft = e.file_type().map_err(|err| io_err(&rel())(err))?;
        if ft.is_dir() {
            seen.add(b'd', d, name, None);
            if let Some(l) = listing.as_deref_mut() {
                l.push(listings::DIR, name);
            }
            if keep == Keep::Entries {
                seen.dirs.push(rel());
            }
            subdirs.push(rel());
        } else if ft.is_file() || ft.is_symlink() {
            // `DirEntry::metadata` is an `lstat` relative to the directory read. An entry
            // gone since the listing is not in the tree.
            let m = match e.metadata() {
                Ok(m) => m,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(io_err(&rel())(err)),
            };
            let stamp = Stamp::of(&m);
            let kept = keep == Keep::Entries;
            if m.file_type().is_symlink() {
                seen.add(b'l', d, name, Some(&stamp));
                if let Some(l) = listing.as_deref_mut() {
                    l.push(listings::LINK, name);
                }
                if kept {
                    seen.links.push(rel());
                }
            } else if m.file_type().is_file() {
                seen.add(b'f', d, name, Some(&stamp));
                if let Some(l) = listing.as_deref_mut() {
                    l.push(listings::FILE, name);
                }
                if kept {
                    seen.files.push((rel(), stamp));
                }
            }
        }
    }
    Ok(subdirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of `n` package directories, each with a file, a subdirectory and a link.
    fn packages(root: &Path, tree: &str, n: usize) {
        for i in 0..n {
            let p = root.join(tree).join(format!("pkg-{i}/lib"));
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("index.js"), format!("{i}")).unwrap();
            std::os::unix::fs::symlink("lib/index.js", p.parent().unwrap().join("main")).unwrap();
        }
    }

    #[test]
    fn a_large_walk_spread_over_threads_sees_every_entry_once_and_the_same_stamp() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        packages(r, "node_modules", 4 * SPREAD_AT);
        packages(r, "packages/a/node_modules", 3);
        let dirs = ["node_modules".to_owned(), "packages/a/node_modules".to_owned()];
        let first = walk(r, &dirs, Keep::Entries).unwrap();
        let n = 4 * SPREAD_AT;
        assert_eq!(
            (first[0].dirs.len(), first[0].files.len(), first[0].links.len()),
            (2 * n, n, n)
        );
        assert_eq!((first[1].dirs.len(), first[1].files.len(), first[1].links.len()), (6, 3, 3));
        let mut files: Vec<&str> = first[0].files.iter().map(|(f, _)| f.as_str()).collect();
        files.sort();
        files.dedup();
        assert_eq!(files.len(), n, "each file once");
        // However the threads interleaved, the same tree gives the same stamp; each tree
        // its own.
        for _ in 0..3 {
            let again = walk(r, &dirs, Keep::Entries).unwrap();
            assert_eq!(again[0].stamp(), first[0].stamp());
            assert_eq!(again[1].stamp(), first[1].stamp());
        }
        assert_ne!(first[0].stamp(), first[1].stamp());
        // The walk for the stamp alone keeps no entry and gives the same stamps.
        let stamped = walk(r, &dirs, Keep::Stamp).unwrap();
        for (s, f) in stamped.iter().zip(&first) {
            assert_eq!(s.stamp(), f.stamp());
            assert_eq!(s.file_count, f.files.len());
            assert!(s.dirs.is_empty() && s.files.is_empty() && s.links.is_empty());
        }
        // One file fewer: another stamp.
        fs::remove_file(r.join("node_modules/pkg-7/lib/index.js")).unwrap();
        assert_ne!(walk(r, &dirs, Keep::Entries).unwrap()[0].stamp(), first[0].stamp());
    }

    /// A walk through the listings in `store` as if it began at `started_ns`; how many
    /// directories it took from the record and how many it read.
    fn listed(
        r: &Path,
        store: &Path,
        dirs: &[String],
        started_ns: i64,
    ) -> (Vec<String>, (usize, usize)) {
        let records = listings::Records::read(store, dirs);
        let l = records.listings(started_ns);
        let seen = walk_listed(r, dirs, &l).unwrap();
        let counts = l.counts();
        l.write_back(&records);
        (seen.iter().map(Seen::stamp).collect(), counts)
    }

    fn plain(r: &Path, dirs: &[String]) -> Vec<String> {
        walk(r, dirs, Keep::Stamp).unwrap().iter().map(Seen::stamp).collect()
    }

    fn ctime_ns(p: &Path) -> i64 {
        let m = fs::symlink_metadata(p).unwrap();
        Stamp::of(&m).ctime_ns
    }

    /// Returns once the file system's clock has moved past `ns`: a change made after that
    /// moves a directory's ctime off one recorded at `ns` (the racy window's reason; these
    /// tests record listings as if their walk began later, so the window does not apply).
    fn past(scratch: &Path, ns: i64) {
        let probe = scratch.join("clock-probe");
        for _ in 0..1_000_000 {
            fs::write(&probe, "").unwrap();
            if ctime_ns(&probe) > ns {
                return;
            }
        }
        panic!("the file system's clock did not move");
    }

    #[test]
    fn a_deep_tree_walked_through_its_listings_past_the_held_directories_sees_every_entry() {
        // A spine of directories deeper than `MAX_HELD_DIRS`, each with three leaf
        // directories beside the next level: the siblings waiting to be read hold their
        // parents open until the bound, past which they are opened by their whole path.
        let t = tempfile::tempdir().unwrap();
        let r = &t.path().join("ws");
        let store = &t.path().join("store");
        fs::create_dir_all(store).unwrap();
        let depth = MAX_HELD_DIRS + 64;
        let mut d = r.join("node_modules");
        for i in 0..depth {
            for leaf in ["b", "c", "d"] {
                fs::create_dir_all(d.join(leaf)).unwrap();
                fs::write(d.join(leaf).join("f.js"), format!("{i}")).unwrap();
            }
            d = d.join("a");
        }
        fs::create_dir_all(&d).unwrap();
        let dirs = ["node_modules".to_owned()];
        let later =
            Stamp::of(&fs::metadata(r).unwrap()).ctime_ns + 10 * crate::digests::RACY_WINDOW_NS;
        let dir_count = 1 + depth * 4;
        let (first, counts) = listed(r, store, &dirs, later);
        assert_eq!(counts, (0, dir_count));
        assert_eq!(first, plain(r, &dirs));
        let (again, counts) = listed(r, store, &dirs, later);
        assert_eq!(counts, (dir_count, 0), "every listing held");
        assert_eq!(again, first);
        // A leaf's file rewritten deep down: seen through the held listings.
        let deep = r.join("node_modules").join("a/".repeat(depth - 1)).join("c/f.js");
        fs::write(&deep, "changed").unwrap();
        let (changed, _) = listed(r, store, &dirs, later);
        assert_ne!(changed, first);
        assert_eq!(changed, plain(r, &dirs));
    }

    #[test]
    fn a_walk_through_recorded_listings_sees_every_change_a_read_would() {
        let t = tempfile::tempdir().unwrap();
        let r = &t.path().join("ws");
        let store = &t.path().join("store");
        fs::create_dir_all(store).unwrap();
        packages(r, "node_modules", 2 * SPREAD_AT);
        packages(r, "packages/a/node_modules", 3);
        let dirs = ["node_modules".to_owned(), "packages/a/node_modules".to_owned()];
        let later =
            Stamp::of(&fs::metadata(r).unwrap()).ctime_ns + 10 * crate::digests::RACY_WINDOW_NS;
        let dir_count = 1 + 2 * (2 * SPREAD_AT) + 1 + 2 * 3;
        // The first walk reads every directory; the next takes every one from the record,
        // and sees the same stamps as a plain walk.
        let (first, counts) = listed(r, store, &dirs, later);
        assert_eq!(counts, (0, dir_count));
        assert_eq!(first, plain(r, &dirs));
        let (again, counts) = listed(r, store, &dirs, later);
        assert_eq!(counts, (dir_count, 0));
        assert_eq!(again, first);
        // Each change below, made after the record: the walk through it sees what a plain
        // walk sees, and the stamp moves.
        let newest = |p: &Path| {
            let mut n = 0;
            for e in fs::read_dir(p).unwrap().flatten() {
                n = n.max(ctime_ns(&e.path()));
            }
            n.max(ctime_ns(p))
        };
        let nm = r.join("node_modules");
        type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let changes: Vec<Change> = vec![
            (
                "a file added deep down",
                Box::new(|| fs::write(nm.join("pkg-3/lib/new.js"), "n").unwrap()),
            ),
            (
                "a file removed",
                Box::new(|| fs::remove_file(nm.join("pkg-4/lib/index.js")).unwrap()),
            ),
            (
                "a file rewritten in place",
                Box::new(|| fs::write(nm.join("pkg-5/lib/index.js"), "5").unwrap()),
            ),
            (
                "a directory renamed",
                Box::new(|| fs::rename(nm.join("pkg-6"), nm.join("pkg-6b")).unwrap()),
            ),
            (
                "a file replaced by a link",
                Box::new(|| {
                    fs::remove_file(nm.join("pkg-7/lib/index.js")).unwrap();
                    std::os::unix::fs::symlink("../main", nm.join("pkg-7/lib/index.js")).unwrap();
                }),
            ),
            (
                "an empty directory made",
                Box::new(|| fs::create_dir(nm.join("pkg-8/lib/empty")).unwrap()),
            ),
            (
                "a link replaced by a file",
                Box::new(|| {
                    fs::write(nm.join("pkg-9/tmp"), "f").unwrap();
                    fs::rename(nm.join("pkg-9/tmp"), nm.join("pkg-9/main")).unwrap();
                }),
            ),
            (
                "a tree's own directory replaced",
                Box::new(|| {
                    let a = r.join("packages/a");
                    fs::rename(a.join("node_modules"), a.join("old")).unwrap();
                    packages(r, "packages/a/node_modules", 3);
                }),
            ),
        ];
        let mut last = again;
        for (what, change) in changes {
            past(t.path(), newest(&nm).max(newest(&r.join("packages/a/node_modules"))));
            change();
            let (seen, _) = listed(r, store, &dirs, later);
            assert_eq!(seen, plain(r, &dirs), "{what}");
            assert_ne!(seen, last, "{what}");
            last = seen;
        }
    }

    #[test]
    fn a_directory_changed_within_the_racy_window_is_not_recorded() {
        let t = tempfile::tempdir().unwrap();
        let r = &t.path().join("ws");
        let store = &t.path().join("store");
        fs::create_dir_all(store).unwrap();
        packages(r, "node_modules", 3);
        let dirs = ["node_modules".to_owned()];
        // A walk that begins now: every directory was made within the window.
        let (_, counts) = listed(r, store, &dirs, listings::now_ns());
        assert_eq!(counts.0, 0);
        let (_, counts) = listed(r, store, &dirs, listings::now_ns());
        assert_eq!(counts.0, 0, "nothing was recorded");
        assert!(!store.join(listings::DIR_NAME).exists());
    }

    #[test]
    fn the_walks_stamps_are_the_ones_the_digest_memo_takes() {
        // A memo row recorded from a file's metadata answers for the walk's stamp.
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        packages(r, "node_modules", 2);
        let seen = walk(r, &["node_modules".to_owned()], Keep::Entries).unwrap();
        assert_eq!(seen[0].files.len(), 2);
        for (f, stamp) in &seen[0].files {
            let m = fs::symlink_metadata(r.join(f)).unwrap();
            assert_eq!(*stamp, Stamp::of(&m), "{f}");
        }
    }

    #[test]
    fn a_tree_past_the_entry_limit_or_unreadable_fails_the_walk() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        packages(r, "node_modules", 2 * SPREAD_AT);
        let gone = walk(r, &["missing".to_owned()], Keep::Stamp).unwrap_err();
        assert!(matches!(gone, TreeScanError::Io { .. }), "{gone}");
        let counts = AtomicUsize::new(MAX_WALK_ENTRIES);
        let mut seen = Seen::default();
        let err =
            read_one(r, "node_modules", "node_modules", &mut seen, &counts, Keep::Stamp, None)
                .unwrap_err();
        assert!(matches!(err, TreeScanError::TooLarge(_)), "{err}");
    }
}
