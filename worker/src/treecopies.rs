//! The installed trees a worker without a sandbox mirrors into its exec roots, one copy per
//! running task, checked at each task's end (issue 31).
//!
//! Without a sandbox an exec root mirrors a tree with symlinks into a copy of it on the
//! worker ([`crate::execroot`]), and nothing stops a task from writing through them: a tool
//! writing its cache under `node_modules/.cache`, a patch, a postinstall. When the worker
//! kept one copy per tree, every later task read the changed copy under the tree's digest,
//! and its outputs were saved under keys of the right inputs: wrong bytes.
//!
//! So a copy is leased to one task at a time ([`TreeCopies::acquire`]): a task takes an idle
//! copy of its tree, or one is built (up to one per task running at once). Each copy is
//! watched from the moment it is built — every directory with inotify — and its entries'
//! stamps are recorded, for when no watch can be placed or events were lost. At the task's
//! end, once its processes are gone, [`TreeCopies::verdict`] takes the changes: only that
//! task used the copy, so a change is its own write outside its declared outputs
//! ([`Verdict::Wrote`], the task fails naming the paths). A changed copy is removed; an
//! unchanged one goes back to the idle ones. A copy whose task ended without a verdict is
//! removed too. Copies never outlive the worker process: a predecessor's may have changed
//! while nobody watched, so they are removed at start-up ([`TreeCopies::new`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use prova_protocol::Digest;
use prova_protocol::tree::{TreeKind, TreeManifest};

use crate::blobcache::BlobCache;
use crate::trees::TreeError;

/// The directory under a work dir holding the copies (removed whole at start-up).
pub const COPIES_DIR: &str = "trees-copied";

/// Bytes read from the inotify descriptor at once.
const EVENT_BUFFER: usize = 16 * 1024;

/// Most reads of one drain; events left past them count as lost.
const MAX_READS: usize = 1024;

/// Most changed paths one copy keeps to name (the rest are counted).
const MAX_PATHS: usize = 32;

/// What a task's end learned of the copies it used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every copy is as built.
    Unchanged,
    /// The task wrote into a copy: these workspace paths (a tree's path and the path inside
    /// it; a directory may stand for what changed in it), and how many more.
    Wrote(Vec<String>, u64),
}

/// One built copy of a tree.
#[derive(Debug)]
struct TreeCopy {
    /// `<copies>/<digest>/<id>`: removed whole with the copy.
    holder: PathBuf,
    /// `holder/<name>`: what roots mirror.
    dir: PathBuf,
    /// Which tree, for its return to the idle copies.
    key: (Digest, String),
    /// Its watches (empty when unwatched: then `stamps` decide).
    watches: Vec<WatchDescriptor>,
    /// Every entry's stamps as built.
    stamps: BTreeMap<String, Stamp>,
    /// Events were lost while it was watched: `stamps` decide.
    lost: bool,
    /// Paths inside `dir` the events named since it was built (`""`: `dir` itself).
    changed: BTreeSet<String>,
    more: u64,
}

/// What a copy's entry was as built: any write, `chmod`, link or rename moves its `ctime`
/// (which no task can set back), and a file replaced has another inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    ctime: (i64, i64),
    size: u64,
    mode: u32,
}

#[derive(Debug, Default)]
struct State {
    inotify: Option<Inotify>,
    /// Each watch: its copy and the directory inside it.
    watched: HashMap<WatchDescriptor, (u64, String)>,
    copies: HashMap<u64, TreeCopy>,
    /// The idle copies of each tree digest and name.
    idle: HashMap<(Digest, String), Vec<u64>>,
    next_id: u64,
    /// Copies to remove (off the runtime's threads: at the next acquire).
    graveyard: Vec<PathBuf>,
    /// What events are read into: made at the first drain (three a task), kept.
    buffer: Vec<u8>,
}

/// The copies of one work dir.
#[derive(Debug)]
pub struct TreeCopies {
    dir: PathBuf,
    state: Mutex<State>,
}

/// A task's use of one copy, which no other task uses meanwhile: [`TreeCopies::verdict`] at
/// its end. Dropped after an unchanged verdict, the copy goes back to the idle ones;
/// otherwise it is removed.
#[derive(Debug)]
pub struct TreeLease {
    copies: Arc<TreeCopies>,
    copy: u64,
    /// The tree's workspace path in the task's root.
    tree: String,
    /// The copy's directory, which the root mirrors.
    pub dir: PathBuf,
    /// Found unchanged by the task's verdict.
    unchanged: bool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn mask() -> WatchMask {
    WatchMask::MODIFY
        | WatchMask::ATTRIB
        | WatchMask::CLOSE_WRITE
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::DONT_FOLLOW
}

impl TreeCopies {
    /// The copies under `work_dir/trees-copied`, which is emptied first.
    pub fn new(work_dir: &Path) -> Self {
        let dir = work_dir.join(COPIES_DIR);
        if let Err(e) = fs::remove_dir_all(&dir)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove the installed trees' old copies: {e}");
        }
        let inotify = Inotify::init()
            .map_err(|e| tracing::warn!("installed trees' copies are checked by their stamps: {e}"))
            .ok();
        Self { dir, state: Mutex::new(State { inotify, ..State::default() }) }
    }

    /// A copy of tree `digest` (checked manifest `m`) named `name`, mounted at workspace
    /// path `tree`, for one task alone: an idle one, or one built from `blobs`. Blocking.
    pub fn acquire(
        self: &Arc<Self>,
        digest: &Digest,
        name: &str,
        m: &TreeManifest,
        blobs: &BlobCache,
        tree: &str,
    ) -> Result<TreeLease, TreeError> {
        let key = (*digest, name.to_owned());
        let lease = |id: u64, dir: PathBuf| TreeLease {
            copies: Arc::clone(self),
            copy: id,
            tree: tree.to_owned(),
            dir,
            unchanged: false,
        };
        let idle = {
            let mut s = lock(&self.state);
            // A change made to an idle copy (by nothing of prova's) is never put on the task
            // that takes it next: such a copy is removed.
            s.drain();
            let mut found = None;
            while let Some(id) = s.idle.get_mut(&key).and_then(Vec::pop) {
                match s.copies.get(&id) {
                    Some(c) if c.untouched() => {
                        found = Some((id, c.dir.clone()));
                        break;
                    }
                    _ => s.forget(id),
                }
            }
            found.ok_or_else(|| {
                s.next_id += 1;
                s.next_id
            })
        };
        self.bury();
        let id = match idle {
            Ok((id, dir)) => return Ok(lease(id, dir)),
            Err(id) => id,
        };
        let holder = self.dir.join(digest.to_hex()).join(id.to_string());
        let made = fs::create_dir_all(&holder)
            .map_err(|source| TreeError::Io { path: holder.clone(), source });
        let dir = holder.join(name);
        if let Err(e) = made.and_then(|()| crate::trees::build(&dir, m, blobs, true)) {
            let _ = fs::remove_dir_all(&holder);
            return Err(e);
        }
        let dirs: Vec<String> = std::iter::once(String::new())
            .chain(m.entries.iter().filter(|e| e.kind == TreeKind::Dir).map(|e| e.path.clone()))
            .collect();
        let stamps = stamps_of(&dir);
        let mut s = lock(&self.state);
        let watches = s.watch(id, &dir, &dirs).unwrap_or_default();
        let copy = TreeCopy {
            holder,
            dir: dir.clone(),
            key,
            watches,
            stamps,
            lost: false,
            changed: BTreeSet::new(),
            more: 0,
        };
        s.copies.insert(id, copy);
        Ok(lease(id, dir))
    }

    /// What became of the copies `leases` (one task's, after its processes are gone) hold.
    /// Blocking: a copy without watches, or whose events were lost, is walked.
    pub fn verdict(leases: &mut [TreeLease]) -> Verdict {
        let Some(first) = leases.first() else { return Verdict::Unchanged };
        let copies = Arc::clone(&first.copies);
        let mut s = lock(&copies.state);
        s.drain();
        let (mut wrote, mut more) = (Vec::new(), 0);
        for l in leases.iter_mut() {
            let Some(copy) = s.copies.get(&l.copy) else { continue };
            let paths: Vec<String> = if copy.watches.is_empty() || copy.lost {
                differences(&copy.stamps, &stamps_of(&copy.dir))
            } else {
                more += copy.more;
                copy.changed.iter().cloned().collect()
            };
            l.unchanged = paths.is_empty();
            wrote.extend(paths.iter().map(|p| join_path(&l.tree, p)));
        }
        if wrote.is_empty() {
            return Verdict::Unchanged;
        }
        wrote.sort();
        wrote.dedup();
        let over = wrote.len().saturating_sub(MAX_PATHS);
        wrote.truncate(MAX_PATHS);
        Verdict::Wrote(wrote, more + over as u64)
    }

    /// Removes the copies given up since the last call.
    fn bury(&self) {
        let dead = std::mem::take(&mut lock(&self.state).graveyard);
        for holder in dead {
            if let Err(e) = fs::remove_dir_all(&holder) {
                tracing::warn!("cannot remove a tree copy {}: {e}", holder.display());
            }
        }
    }
}

impl TreeCopy {
    /// Whether nothing changed it since it was built: its events, or (unwatched, or events
    /// lost) its entries' stamps.
    fn untouched(&self) -> bool {
        match self.watches.is_empty() || self.lost {
            true => differences(&self.stamps, &stamps_of(&self.dir)).is_empty(),
            false => self.changed.is_empty(),
        }
    }
}

impl Drop for TreeLease {
    fn drop(&mut self) {
        let mut s = lock(&self.copies.state);
        // Events since the verdict (nothing of the task runs any more) still count.
        s.drain();
        let back = self.unchanged
            && s.copies.get(&self.copy).is_some_and(|c| c.changed.is_empty() && !c.lost);
        match s.copies.get(&self.copy) {
            Some(c) if back => {
                let key = c.key.clone();
                s.idle.entry(key).or_default().push(self.copy);
            }
            _ => s.forget(self.copy),
        }
    }
}

impl State {
    /// Watches each of `dirs` (inside the copy `id` at `at`); `None`, and nothing watched,
    /// when one cannot be (no inotify, the user's watch limit).
    fn watch(&mut self, id: u64, at: &Path, dirs: &[String]) -> Option<Vec<WatchDescriptor>> {
        let inotify = self.inotify.as_mut()?;
        let mut placed = Vec::with_capacity(dirs.len());
        for d in dirs {
            let path = if d.is_empty() { at.to_owned() } else { at.join(d) };
            match inotify.watches().add(&path, mask()) {
                Ok(wd) => placed.push((wd, d.clone())),
                Err(e) => {
                    tracing::warn!(
                        "cannot watch {} ({e}); this copy is checked by its stamps",
                        path.display()
                    );
                    for (wd, _) in placed {
                        let _ = inotify.watches().remove(wd);
                    }
                    return None;
                }
            }
        }
        let wds = placed.iter().map(|(wd, _)| wd.clone()).collect();
        for (wd, d) in placed {
            self.watched.insert(wd, (id, d));
        }
        Some(wds)
    }

    /// Reads every queued event into the copies it names.
    fn drain(&mut self) {
        let Some(mut inotify) = self.inotify.take() else { return };
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.resize(EVENT_BUFFER, 0);
        let mut complete = false;
        let mut seen: Vec<(u64, String)> = Vec::new();
        let mut lost = false;
        for _ in 0..MAX_READS {
            let events = match inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    complete = true;
                    break;
                }
                Err(e) => {
                    tracing::warn!("the tree copies' events could not be read: {e}");
                    break;
                }
            };
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    lost = true;
                    continue;
                }
                let Some((id, dir)) = self.watched.get(&event.wd) else { continue };
                let (id, dir) = (*id, dir.clone());
                if event.mask.contains(EventMask::IGNORED) {
                    // Its directory went.
                    self.watched.remove(&event.wd);
                    seen.push((id, dir));
                    continue;
                }
                let name = event.name.and_then(|n| n.to_str()).unwrap_or("");
                seen.push((id, join_path(&dir, name)));
            }
        }
        self.inotify = Some(inotify);
        self.buffer = buffer;
        for (id, path) in seen {
            let Some(copy) = self.copies.get_mut(&id) else { continue };
            if copy.changed.len() < MAX_PATHS || copy.changed.contains(&path) {
                copy.changed.insert(path);
            } else {
                copy.more += 1;
            }
        }
        if lost || !complete {
            // Unread or lost: each copy's stamps decide.
            tracing::warn!("tree copies' events were lost; their stamps decide");
            for copy in self.copies.values_mut() {
                copy.lost = true;
            }
        }
    }

    /// Copy `id` unwatched and handed to the graveyard.
    fn forget(&mut self, id: u64) {
        let Some(copy) = self.copies.remove(&id) else { return };
        for wd in &copy.watches {
            // Its `IGNORED` event then finds no watch.
            self.watched.remove(wd);
        }
        if let Some(inotify) = self.inotify.as_mut() {
            for wd in copy.watches {
                let _ = inotify.watches().remove(wd);
            }
        }
        for ids in self.idle.values_mut() {
            ids.retain(|i| *i != id);
        }
        self.graveyard.push(copy.holder);
    }
}

/// `tree` and a path inside it.
fn join_path(tree: &str, inner: &str) -> String {
    match (tree.is_empty(), inner.is_empty()) {
        (_, true) => tree.to_owned(),
        (true, false) => inner.to_owned(),
        (false, false) => format!("{tree}/{inner}"),
    }
}

/// Every entry under `dir` (never following a link), by path inside it.
fn stamps_of(dir: &Path) -> BTreeMap<String, Stamp> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((at, rel)) = stack.pop() {
        if let Ok(m) = fs::symlink_metadata(&at) {
            out.insert(rel.clone(), stamp(&m));
            if !m.is_dir() {
                continue;
            }
        }
        let Ok(entries) = fs::read_dir(&at) else { continue };
        for e in entries.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                // A name that is not UTF-8 was never built: the listing changed.
                out.insert(
                    join_path(&rel, "\u{fffd}"),
                    Stamp { ino: 0, ctime: (0, 0), size: 0, mode: 0 },
                );
                continue;
            };
            stack.push((e.path(), join_path(&rel, &name)));
        }
    }
    out
}

fn stamp(m: &fs::Metadata) -> Stamp {
    Stamp { ino: m.ino(), ctime: (m.ctime(), m.ctime_nsec()), size: m.size(), mode: m.mode() }
}

/// The paths whose stamps differ, or that are in one record only.
fn differences(before: &BTreeMap<String, Stamp>, now: &BTreeMap<String, Stamp>) -> Vec<String> {
    let mut out: Vec<String> =
        before.iter().filter(|(p, s)| now.get(*p) != Some(s)).map(|(p, _)| p.clone()).collect();
    out.extend(now.keys().filter(|p| !before.contains_key(*p)).cloned());
    out.sort();
    out
}

#[cfg(test)]
mod tests;
