//! The installed trees held to their keyed digests while a run's tasks execute. A task's key
//! folds each tree's digest as the run found it before anything ran; a tree that changes
//! while the task runs (an `npm install` in another terminal, a postinstall, the task itself
//! writing into `node_modules`) leaves an entry under that key holding what the task made
//! from the changed tree, served once the tree is back (`npm ci` from the same lockfile).
//! So before a save, [`TreeGuard::changed`] names the first of the task's trees whose digest
//! is no longer the keyed one, and the entry is withheld.
//!
//! - **Once per tree, then events**: a tree is walked once for its stamp, each directory
//!   watched before it is read (inotify; any entry of a watched directory created, written,
//!   closed after writing, changed in mode or times, moved or removed is an event, and a
//!   directory made later is an event of its parent), and its digest taken as a run would:
//!   the record's ([`super::stamps`]) when the stamp is the recorded one, else built from the
//!   files through the memo. A run that will execute does this for every tree in the
//!   background while its first tasks run ([`TreeGuard::prime`]); a check finds a tree not
//!   yet done and does it then. Each check drains the events first: a tree with none since
//!   keeps that digest, one with any is walked and computed again. An overflowed queue is an
//!   event in every tree.
//! - **No watch, no shortcut**: where a watch cannot be placed (a directory gone mid-walk),
//!   the digest is computed afresh at the next check. At the user's watch limit
//!   (`fs.inotify.max_user_watches`, shared with editors) every watch is let go at once and
//!   each check computes from then on.
//! - **Compared by content**: a task writing the same bytes into its tree every run (a
//!   tool's cache under `node_modules/.cache`) moves stamps, not the digest, so its next run
//!   saves.
//! - A tree changed and put back while the task ran (A, B, A) is not seen: the digest is
//!   what it was.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use prova_protocol::Digest;

use super::walk::{self, Keep};
use super::{TreePass, TreeScanError, build, stamps};
use crate::cache::MemoRow;

/// A tree's links whose first hop leaves it, each with that hop.
type Leaving = Vec<(String, String)>;

/// Bytes read from the event queue at a time.
const EVENT_BUFFER: usize = 64 * 1024;

/// Most event reads one drain makes before it counts the queue as overflowed (a task writing
/// into its tree without pause must not keep a save waiting).
const MAX_READS: usize = 256;

/// What a watched directory reports: any change of an entry or of itself.
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

/// A run's installed trees, checked against their keyed digests before each save.
#[derive(Debug)]
pub struct TreeGuard {
    /// The workspace root.
    root: PathBuf,
    /// Where the trees' manifests and record are (`.prova/trees`).
    store: PathBuf,
    /// The run's trees.
    trees: Vec<String>,
    /// The projects' directories, sorted.
    real_dirs: Vec<String>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The watches; `None` when inotify could not be set up (every check computes).
    inotify: Option<Inotify>,
    /// The trees each watch serves (one directory can be in two configured trees).
    by_watch: HashMap<WatchDescriptor, Vec<String>>,
    /// Each tree's digest (and its links whose first hop leaves it), computed with every
    /// directory watched and no event since.
    known: HashMap<String, (Digest, Leaving)>,
    /// How many drained events touched each tree.
    events: HashMap<String, u64>,
    /// How many times the queue overflowed or could not be read to its end.
    overflows: u64,
    /// No more watches are placed (the limit was met): each check computes.
    limited: bool,
    /// The trees' record, read at the first computation (no other run writes it while this
    /// one holds the workspace lock).
    record: Option<stamps::Stamps>,
    /// What events are read into: made at the first drain, kept for every later one.
    buffer: Vec<u8>,
}

impl TreeGuard {
    /// A guard over `trees`, the installed trees of the workspace at `root` whose projects
    /// lie in `real_dirs`; nothing is watched until a check.
    pub fn new(root: &Path, trees: Vec<String>, mut real_dirs: Vec<String>) -> Self {
        real_dirs.sort();
        let inotify = Inotify::init()
            .map_err(|e| tracing::debug!("the installed trees are not watched: {e}"))
            .ok();
        TreeGuard {
            root: root.to_owned(),
            store: root.join(".prova").join("trees"),
            trees,
            real_dirs,
            state: Mutex::new(State { inotify, ..State::default() }),
        }
    }

    /// The first of `trees` whose digest, or what its links that leave the workspace lead
    /// to, is no longer what the key folded, if any. `memo` gives the trees' memo rows
    /// (scope [`super::memo_scope`]) when a tree must be hashed: asked at most once.
    pub fn changed(
        &self,
        trees: &[Keyed],
        memo: &mut dyn FnMut() -> HashMap<String, MemoRow>,
    ) -> Result<Option<String>, TreeScanError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Option<HashMap<String, MemoRow>> = None;
        for keyed in trees {
            let tree = keyed.tree.as_str();
            state.drain();
            let (digest, leaving) = match state.known.get(tree) {
                Some(known) => known.clone(),
                None => self.compute(&mut state, tree, &mut rows, memo)?,
            };
            if digest.to_hex() != keyed.digest {
                return Ok(Some(tree.to_owned()));
            }
            // Out of the workspace nothing is watched: followed again at every check.
            let beyond = match leaving.is_empty() {
                true => None,
                false => super::Hops::new(&self.root, &self.real_dirs, &self.trees)
                    .beyond_digest(tree, &leaving),
            };
            if beyond.map(|d| d.to_hex()) != keyed.beyond {
                return Ok(Some(tree.to_owned()));
            }
        }
        Ok(None)
    }

    /// Computes every tree's digest now, each watched from then on: what the first save
    /// would do, done while the run's first tasks execute.
    pub fn prime(
        &self,
        memo: &mut dyn FnMut() -> HashMap<String, MemoRow>,
    ) -> Result<(), TreeScanError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Option<HashMap<String, MemoRow>> = None;
        for tree in &self.trees {
            state.drain();
            if !state.known.contains_key(tree) {
                self.compute(&mut state, tree, &mut rows, memo)?;
            }
        }
        Ok(())
    }

    /// `tree`'s digest and links that leave it, computed now with each directory watched
    /// before it is read (so a change after the read is an event), and kept as known unless
    /// an event came meanwhile or a watch could not be placed.
    fn compute(
        &self,
        state: &mut State,
        tree: &str,
        rows: &mut Option<HashMap<String, MemoRow>>,
        memo: &mut dyn FnMut() -> HashMap<String, MemoRow>,
    ) -> Result<(Digest, Leaving), TreeScanError> {
        let started = std::time::Instant::now();
        let before = state.generation(tree);
        let record = state.record.get_or_insert_with(|| stamps::Stamps::read(&self.store));
        let watcher = state.inotify.as_ref().filter(|_| !state.limited);
        let placed = Mutex::new(Vec::new());
        let (unwatched, limit) = (AtomicBool::new(watcher.is_none()), AtomicBool::new(false));
        let visit = |dir: &str| {
            let Some(inotify) = watcher else { return };
            match inotify.watches().add(self.root.join(dir), mask()) {
                Ok(wd) => placed.lock().unwrap_or_else(|p| p.into_inner()).push(wd),
                Err(e) => {
                    // A directory gone since it was listed is a change its parent reports.
                    unwatched.store(true, Ordering::Relaxed);
                    if e.kind() == io::ErrorKind::StorageFull {
                        limit.store(true, Ordering::Relaxed);
                    }
                }
            }
        };
        let seen = walk::walk_visiting(&self.root, &[tree.to_owned()], Keep::Stamp, &visit)?
            .pop()
            .unwrap_or_default();
        let now = match record.digest(tree, &seen) {
            Some(d) => (d, record.leaving(tree).to_vec()),
            // Not as recorded: built from its entries (a directory made since the walk
            // above is an event of its parent, watched there).
            None => build_now(&self.root, &self.store, tree, rows, memo)?,
        };
        for wd in placed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            let trees = state.by_watch.entry(wd).or_default();
            if !trees.iter().any(|t| t == tree) {
                trees.push(tree.to_owned());
            }
        }
        if limit.into_inner() {
            // Every watch let go (the user's editor shares the limit); no digest stands
            // without them.
            tracing::debug!("the installed trees' watches met the user's limit: none kept");
            state.inotify = None;
            state.by_watch.clear();
            state.known.clear();
            state.limited = true;
            return Ok(now);
        }
        // An event since the first watch went up may have come after the walk read its
        // directory: then the digest stands for this check only.
        state.drain();
        let watched = !unwatched.into_inner();
        if watched && state.generation(tree) == before {
            state.known.insert(tree.to_owned(), now.clone());
        }
        tracing::debug!(tree, elapsed = ?started.elapsed(), watched, "tree computed under watches");
        Ok(now)
    }
}

/// A tree a task's key folds, as it folded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyed {
    /// The tree's workspace path.
    pub tree: String,
    /// Its digest, hex ([`super::key_pair`]).
    pub digest: String,
    /// What its links that leave the workspace led to, hex ([`super::beyond_pair`]); `None`
    /// when the key folds no such pair.
    pub beyond: Option<String>,
}

impl Keyed {
    /// The trees the key config pairs `config` fold ([`super::KEY_PREFIX`] and
    /// [`super::BEYOND_PREFIX`] pairs).
    pub fn of_config(config: &[(String, String)]) -> Vec<Keyed> {
        let mut keyed: Vec<Keyed> = config
            .iter()
            .filter_map(|(name, hex)| {
                let tree = name.strip_prefix(super::KEY_PREFIX)?.to_owned();
                Some(Keyed { tree, digest: hex.clone(), beyond: None })
            })
            .collect();
        for (name, hex) in config {
            let Some(tree) = name.strip_prefix(super::BEYOND_PREFIX) else { continue };
            match keyed.iter_mut().find(|k| k.tree == tree) {
                Some(k) => k.beyond = Some(hex.clone()),
                // A beyond pair without its tree's: never as keyed.
                None => keyed.push(Keyed {
                    tree: tree.to_owned(),
                    digest: String::new(),
                    beyond: Some(hex.clone()),
                }),
            }
        }
        keyed
    }
}

impl State {
    /// Reads every queued event: the trees they touch lose their known digests.
    fn drain(&mut self) {
        let Some(mut inotify) = self.inotify.take() else { return };
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.resize(EVENT_BUFFER, 0);
        let mut complete = false;
        for _ in 0..MAX_READS {
            let events = match inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    complete = true;
                    break;
                }
                Err(e) => {
                    tracing::debug!("the installed trees' events could not be read: {e}");
                    break;
                }
            };
            for event in events {
                self.take(event.wd, event.mask);
            }
        }
        self.inotify = Some(inotify);
        self.buffer = buffer;
        if !complete {
            // Unread or unreadable: nothing can be trusted to be as computed.
            self.overflowed();
        }
    }

    /// One event: the trees its watch serves lose their known digests.
    fn take(&mut self, wd: WatchDescriptor, mask: EventMask) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            self.overflowed();
            return;
        }
        let Some(trees) = self.by_watch.get(&wd) else { return };
        for t in trees {
            self.known.remove(t);
            *self.events.entry(t.clone()).or_default() += 1;
        }
        if mask.contains(EventMask::IGNORED) {
            self.by_watch.remove(&wd);
        }
    }

    /// Events were lost: no tree keeps its digest.
    fn overflowed(&mut self) {
        self.known.clear();
        self.overflows += 1;
    }

    /// Moves whenever an event touches `tree` or events are lost.
    fn generation(&self, tree: &str) -> u64 {
        self.events.get(tree).copied().unwrap_or(0) + self.overflows
    }
}

/// The digest of the tree at `dir` built from its entries now (files hashed through the
/// memo's `rows`, asked of `memo` the first time they are needed), with its links that leave
/// it.
fn build_now(
    root: &Path,
    store: &Path,
    dir: &str,
    rows: &mut Option<HashMap<String, MemoRow>>,
    memo: &mut dyn FnMut() -> HashMap<String, MemoRow>,
) -> Result<(Digest, Leaving), TreeScanError> {
    let seen = walk::walk(root, &[dir.to_owned()], Keep::Entries)?.pop().unwrap_or_default();
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let rows = rows.get_or_insert_with(memo);
    let (tree, leaving) = build(root, dir, &seen, rows, now_ns, store, &mut TreePass::default())?;
    Ok((tree.digest, leaving))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    /// A workspace with the tree `node_modules` holding `a/b/c/f` and `top`.
    fn ws() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("node_modules/a/b/c")).unwrap();
        fs::write(t.path().join("node_modules/a/b/c/f"), "one").unwrap();
        fs::write(t.path().join("node_modules/top"), "top").unwrap();
        t
    }

    /// The tree's digest as a run's scan keys it.
    fn keyed(root: &Path) -> String {
        let pass = super::super::scan_all(
            root,
            &["node_modules".to_owned()],
            &HashMap::new(),
            0,
            &root.join(".prova/trees"),
        )
        .unwrap();
        pass.trees[0].digest.to_hex()
    }

    fn check(guard: &TreeGuard, keyed: &str) -> Option<String> {
        let keyed =
            Keyed { tree: "node_modules".to_owned(), digest: keyed.to_owned(), beyond: None };
        guard.changed(&[keyed], &mut HashMap::new).unwrap()
    }

    fn guard(root: &Path) -> TreeGuard {
        TreeGuard::new(root, vec!["node_modules".to_owned()], vec![String::new()])
    }

    fn known(guard: &TreeGuard) -> bool {
        guard.state.lock().unwrap().known.contains_key("node_modules")
    }

    #[test]
    fn an_unchanged_tree_is_computed_once_then_held_by_its_watches() {
        let t = ws();
        let (guard, d) = (guard(t.path()), keyed(t.path()));
        assert_eq!(check(&guard, &d), None);
        assert!(known(&guard), "watched, and no event since");
        assert_eq!(check(&guard, &d), None);
        // A read is no event.
        fs::read(t.path().join("node_modules/a/b/c/f")).unwrap();
        guard.state.lock().unwrap().drain();
        assert!(known(&guard));
    }

    #[test]
    fn a_change_deep_in_the_tree_after_the_first_check_is_seen() {
        let t = ws();
        let (guard, d) = (guard(t.path()), keyed(t.path()));
        assert_eq!(check(&guard, &d), None);
        fs::write(t.path().join("node_modules/a/b/c/f"), "two").unwrap();
        assert_eq!(check(&guard, &d).as_deref(), Some("node_modules"));
        // The same bytes again: the digest is the keyed one.
        fs::write(t.path().join("node_modules/a/b/c/f"), "one").unwrap();
        assert_eq!(check(&guard, &d), None);
        assert!(known(&guard));
    }

    #[test]
    fn a_directory_made_after_the_watches_is_watched_once_computed_again() {
        let t = ws();
        let guard = guard(t.path());
        assert_eq!(check(&guard, &keyed(t.path())), None);
        fs::create_dir_all(t.path().join("node_modules/late/deep")).unwrap();
        fs::write(t.path().join("node_modules/late/deep/x"), "1").unwrap();
        let now = keyed(t.path());
        assert_eq!(check(&guard, &now), None, "the tree as it is now");
        assert!(known(&guard));
        // A write inside the new directory, which only the second computation watched.
        fs::write(t.path().join("node_modules/late/deep/x"), "2").unwrap();
        assert_eq!(check(&guard, &now).as_deref(), Some("node_modules"));
    }

    #[test]
    fn modes_renames_and_removals_are_seen() {
        use std::os::unix::fs::PermissionsExt as _;
        let changes: [fn(&Path); 3] = [
            |n| fs::set_permissions(n.join("top"), fs::Permissions::from_mode(0o755)).unwrap(),
            |n| fs::rename(n.join("a/b"), n.join("a/moved")).unwrap(),
            |n| fs::remove_file(n.join("a/b/c/f")).unwrap(),
        ];
        for change in changes {
            let t = ws();
            let (guard, d) = (guard(t.path()), keyed(t.path()));
            assert_eq!(check(&guard, &d), None);
            change(&t.path().join("node_modules"));
            assert_eq!(check(&guard, &d).as_deref(), Some("node_modules"));
        }
    }

    #[test]
    fn a_primed_tree_is_known_before_any_check_and_its_changes_are_events() {
        let t = ws();
        let (guard, d) = (guard(t.path()), keyed(t.path()));
        guard.prime(&mut HashMap::new).unwrap();
        assert!(known(&guard));
        fs::write(t.path().join("node_modules/a/b/c/f"), "two").unwrap();
        assert_eq!(check(&guard, &d).as_deref(), Some("node_modules"));
    }

    #[test]
    fn without_watches_every_check_computes() {
        let t = ws();
        let (guard, d) = (guard(t.path()), keyed(t.path()));
        guard.state.lock().unwrap().limited = true;
        assert_eq!(check(&guard, &d), None);
        assert!(!known(&guard));
        fs::write(t.path().join("node_modules/a/b/c/f"), "two").unwrap();
        assert_eq!(check(&guard, &d).as_deref(), Some("node_modules"));
    }
}
