//! File-system events (inotify, through `notify`), turned into workspace-relative
//! [`Change`]s on a bounded channel. What no task can read is dropped here, before the
//! debounce sees it: `.git` directories, `.prova` (the lock, the cache, the run history) and
//! the cache directory. A new directory is walked, so files written into it before its watch
//! existed are not missed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use notify::event::{CreateKind, EventKind, RemoveKind};
use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use super::snapshot::Change;

/// Bound on changes waiting for the watch loop; past it the batch counts as "everything".
const QUEUE: usize = 8192;

/// Bound on the entries walked in one new directory.
const WALK_LIMIT: usize = 10_000;

/// The live watch: events arrive on `rx` until it is dropped.
pub(super) struct Events {
    /// Held for its inotify instance.
    _watcher: notify::RecommendedWatcher,
    /// Changes, in arrival order.
    pub rx: mpsc::Receiver<Change>,
    /// Set when changes were lost (the queue was full, or the kernel's overflowed): the next
    /// cycle treats every task as touched.
    pub overflowed: Arc<AtomicBool>,
}

/// Watches everything under `root` (canonical) but `skip` (absolute directories: the cache).
pub(super) fn watch(root: &Path, skip: Vec<PathBuf>) -> Result<Events, notify::Error> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let overflowed = Arc::new(AtomicBool::new(false));
    let lost = overflowed.clone();
    let base = root.to_owned();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let ev = match res {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!("watch: {e}");
                lost.store(true, Ordering::Relaxed);
                return;
            }
        };
        if ev.need_rescan() {
            lost.store(true, Ordering::Relaxed);
            return;
        }
        let folder = match ev.kind {
            EventKind::Access(_) => return,
            EventKind::Create(CreateKind::Folder) | EventKind::Remove(RemoveKind::Folder) => {
                Some(true)
            }
            _ => None,
        };
        for path in &ev.paths {
            let Some(rel) = relative(&base, path, &skip) else { continue };
            let dir = folder.unwrap_or_else(|| path.is_dir());
            let send = |c: Change| {
                if tx.try_send(c).is_err() {
                    lost.store(true, Ordering::Relaxed);
                }
            };
            if dir && path.is_dir() {
                for f in walk(path) {
                    if let Some(rel) = relative(&base, &f, &skip) {
                        send(Change { path: rel, dir: false });
                    }
                }
            }
            send(Change { path: rel, dir });
        }
    })?;
    watcher.watch(root, RecursiveMode::Recursive)?;
    Ok(Events { _watcher: watcher, rx, overflowed })
}

/// `path` relative to `root`, `/`-separated; `None` for what no task reads (outside the root,
/// not UTF-8, under a `.git` or the root's `.prova`, or under a `skip` directory).
fn relative(root: &Path, path: &Path, skip: &[PathBuf]) -> Option<String> {
    if skip.iter().any(|s| path.starts_with(s)) {
        return None;
    }
    let rel = path.strip_prefix(root).ok()?.to_str()?;
    if rel.is_empty() || is_ignored(rel) {
        return None;
    }
    Some(rel.to_owned())
}

/// `.git` anywhere (nested repositories too) and the workspace's `.prova`.
fn is_ignored(rel: &str) -> bool {
    rel == ".prova" || rel.starts_with(".prova/") || rel.split('/').any(|c| c == ".git")
}

/// The files under a new directory, bounded ([`WALK_LIMIT`]); links are not followed.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > WALK_LIMIT {
                return out;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(_) => out.push(e.path()),
                Err(_) => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::relative;

    #[test]
    fn what_no_task_reads_is_dropped_before_the_debounce() {
        let root = Path::new("/ws");
        let skip = [PathBuf::from("/ws/cache")];
        let rel = |p: &str| relative(root, Path::new(p), &skip);
        assert_eq!(rel("/ws/a/src.txt").as_deref(), Some("a/src.txt"));
        assert_eq!(rel("/ws/.prova/lock"), None);
        assert_eq!(rel("/ws/.prova"), None);
        assert_eq!(rel("/ws/.git/index"), None);
        assert_eq!(rel("/ws/vendor/x/.git/HEAD"), None);
        assert_eq!(rel("/ws/cache/blobs/ab"), None);
        assert_eq!(rel("/elsewhere/a"), None);
        assert_eq!(rel("/ws"), None);
        assert_eq!(rel("/ws/.provax/a").as_deref(), Some(".provax/a"));
    }
}
