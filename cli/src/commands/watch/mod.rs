//! `prova watch <tasks> [selection]`: run the selection, then re-run it whenever a file one of
//! its tasks reads changes, until Ctrl-C.
//!
//! Each cycle is a child `prova run` of the selection (this executable, `--output-logs
//! new-only` by default): the cache makes every task whose key did not move a hit, so only
//! the affected tasks execute, and the cache's rules — not the watch's — decide what is
//! affected. One line per cycle says why it runs (`watch: 2 files changed (a/x.ts, b/y.ts),
//! re-running`) and one that it is done (`watch: waiting for changes`).
//!
//! **What starts a cycle.** inotify events under the workspace root (`notify`, recursive),
//! debounced: a cycle starts once no event came for `--debounce` ms (150 by default), or at
//! most 20 quiet windows after the first event of a busy burst, and never while a cycle runs
//! (what changes meanwhile starts the next one). Dropped before anything else: `.git`,
//! `.prova` and `--cache-dir`. Then, judged against the selection as the workspace is now
//! (loaded again per cycle, so an edited `prova.toml` counts): a change inside a task's
//! declared outputs (or to an output's directory) is the task's own doing and ignored — a
//! task writing its outputs does not start the next cycle — and so is a file the keys do not
//! see (not in git's list of files, e.g. gitignored) or one no task's key folds
//! (`InputScope::represents`). A `prova.toml` always counts.
//!
//! **Persistent tasks.** A persistent task something in the selection depends on (a server
//! for e2e tests) is part of each cycle, as in `prova run`. One nothing depends on (`dev`) is
//! long-lived: it runs in a child `prova run <task>` of its own, started after the first
//! passing cycle, and kept across cycles. It is restarted — stopped before the cycle, started
//! again after it passes — only when a changed path is folded in its own key or in the key of
//! a task upstream of it, or is the `prova.toml` of the workspace or of one of their projects.
//! A change that touches only other tasks leaves it running. One that exits by itself is
//! started again after the next cycle that touches it.
//!
//! **Ctrl-C / SIGTERM.** Every child is interrupted (SIGINT: the `prova run` stops its tasks
//! and sweeps what they left) and waited for; then the watch exits 1, "interrupted" by the
//! convention of [`crate::exit`]. Children share the watch's process group (see
//! [`child`]), so a terminal's Ctrl-C or a kill of the group reaches them too.

mod child;
mod events;
pub mod settings;
mod snapshot;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use prova_protocol::TaskId;
use prova_protocol::task::OwnedTask;
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::child::{Child, Exited, Role};
use self::settings::WatchSettings;
use self::snapshot::{Change, Snapshot};
use super::common;
use crate::args::{SelectArgs, WatchArgs};
use crate::exit::Code;

/// How many quiet windows a busy burst may last before its cycle starts anyway.
const BURST_WINDOWS: u32 = 20;

/// Changes held for the next cycle; past it the batch counts as "everything".
const PENDING_LIMIT: usize = 100_000;

/// Runs the watch until a signal.
pub fn watch(start: &Path, args: WatchArgs) -> anyhow::Result<Code> {
    let rt = common::runtime()?;
    rt.block_on(run(start, args))
}

async fn run(start: &Path, args: WatchArgs) -> anyhow::Result<Code> {
    // Registered before anything starts: a Ctrl-C from here on stops what it started.
    let mut signal = std::pin::pin!(crate::local::signal_listener());
    let cwd = std::env::current_dir().ok();
    let settings = WatchSettings::resolve(args, cwd.as_deref(), crate::color::choice());
    let start = start.to_owned();
    let snap = load(&start, &settings.select).await?;
    let skip: Vec<PathBuf> =
        settings.cache_dir.iter().map(|d| d.canonicalize().unwrap_or_else(|_| d.clone())).collect();
    let mut events = events::watch(&snap.root, skip)
        .map_err(|e| anyhow::anyhow!("cannot watch {}: {e}", snap.root.display()))?;
    let (exits_tx, mut exits) = mpsc::channel(16);
    let debounce = settings.debounce;
    let mut w = Watch {
        exe: std::env::current_exe()?,
        start,
        settings,
        wanted: snap.long_lived.iter().map(|&i| snap.ids[i].clone()).collect(),
        snap,
        exits_tx,
        cycle: None,
        servers: HashMap::new(),
        serial: 0,
    };
    say(&format!("watch: running {}", plural_tasks(w.snap.cycle.len() + w.snap.long_lived.len())));
    w.begin_cycle();
    let mut pending: Vec<Change> = Vec::new();
    let mut burst: Option<(Instant, Instant)> = None; // (first event, last event)
    loop {
        let lost = events.overflowed.load(Ordering::Relaxed);
        let due = match burst {
            Some((first, last)) => (last + debounce).min(first + debounce * BURST_WINDOWS),
            None => Instant::now() + debounce,
        };
        let ready = (burst.is_some() || lost) && w.cycle.is_none();
        tokio::select! {
            // A terminal's Ctrl-C reaches the children too: the stop comes before their ends.
            biased;
            () = &mut signal => break,
            Some(c) = events.rx.recv() => {
                if pending.len() >= PENDING_LIMIT {
                    pending.clear();
                    events.overflowed.store(true, Ordering::Relaxed);
                } else if !events.overflowed.load(Ordering::Relaxed) {
                    pending.push(c);
                }
                let now = Instant::now();
                burst = Some((burst.map_or(now, |(f, _)| f), now));
            }
            Some(ex) = exits.recv() => w.exited(ex),
            () = tokio::time::sleep_until(due), if ready => {
                burst = None;
                let everything = events.overflowed.swap(false, Ordering::Relaxed);
                w.on_changes(std::mem::take(&mut pending), everything).await;
            }
        }
    }
    say("watch: stopping");
    w.stop_all().await;
    Ok(Code::Failed)
}

/// The watch's state between events.
struct Watch {
    exe: PathBuf,
    start: PathBuf,
    settings: WatchSettings,
    snap: Snapshot,
    exits_tx: mpsc::Sender<Exited>,
    /// The cycle's run, while it runs.
    cycle: Option<Child>,
    /// The long-lived persistent tasks running, by id.
    servers: HashMap<TaskId, Child>,
    /// Long-lived tasks to start once a cycle passes.
    wanted: BTreeSet<TaskId>,
    serial: u64,
}

impl Watch {
    /// A debounced batch of changes: what they touch, restarts, the next cycle.
    async fn on_changes(&mut self, changes: Vec<Change>, everything: bool) {
        let fresh = match load(&self.start, &self.settings.select).await {
            Ok(s) => s,
            Err(e) => {
                say(&format!("watch: {e:#}"));
                say("watch: waiting for changes");
                return;
            }
        };
        let before = std::mem::replace(&mut self.snap, fresh);
        let paths = self.snap.relevant(Some(&before), &changes);
        if paths.is_empty() && !everything {
            tracing::info!(changes = changes.len(), "watch: nothing a task reads changed");
            return;
        }
        say(&describe(&paths, everything));
        let snap = &self.snap;
        let touched = |id: &TaskId| match snap.position(id) {
            Some(i) if snap.long_lived.contains(&i) => {
                Some(everything || snap.touched(i, &paths) || !before.is_long_lived(id))
            }
            _ => None, // no longer a long-lived task of the selection
        };
        let mut stopping = Vec::new();
        for id in self.servers.keys().cloned().collect::<Vec<_>>() {
            match touched(&id) {
                Some(false) => continue,
                Some(true) => {
                    say(&format!("watch: stopping {id} (its inputs changed)"));
                    self.wanted.insert(id.clone());
                }
                None => say(&format!("watch: stopping {id} (no longer selected)")),
            }
            if let Some(c) = self.servers.remove(&id) {
                stopping.push(c);
            }
        }
        stop_together(stopping).await;
        for &i in &self.snap.long_lived {
            let id = &self.snap.ids[i];
            if !self.servers.contains_key(id) && touched(id) == Some(true) {
                self.wanted.insert(id.clone());
            }
        }
        self.wanted.retain(|id| touched(id).is_some());
        self.begin_cycle();
    }

    /// Starts the cycle's run; with nothing to run (every task of the selection is
    /// long-lived) the cycle is done at once, and a child that cannot start counts as failed.
    fn begin_cycle(&mut self) {
        if self.snap.cycle.is_empty() {
            self.cycle_done(true);
            return;
        }
        let ids: Vec<String> =
            self.snap.cycle.iter().map(|&i| self.snap.ids[i].to_string()).collect();
        self.serial += 1;
        let args = self.run_args(&ids);
        match Child::start(&self.exe, &args, Role::Cycle, self.serial, self.exits_tx.clone()) {
            Ok(c) => self.cycle = Some(c),
            Err(e) => {
                say(&format!("watch: cannot start `prova run`: {e}"));
                self.cycle_done(false);
            }
        }
    }

    /// A child ended by itself.
    fn exited(&mut self, ex: Exited) {
        let status = match &ex.status {
            Ok(s) => s.to_string(),
            Err(e) => e.to_string(),
        };
        match ex.role {
            Role::Cycle if self.cycle.as_ref().is_some_and(|c| c.serial == ex.serial) => {
                self.cycle = None;
                let ok = ex.status.as_ref().is_ok_and(std::process::ExitStatus::success);
                if !ok {
                    say(&format!("watch: the run failed ({status})"));
                }
                self.cycle_done(ok);
            }
            Role::Server(id) if self.servers.get(&id).is_some_and(|c| c.serial == ex.serial) => {
                self.servers.remove(&id);
                say(&format!(
                    "watch: {id} ended ({status}); it starts again when its inputs change"
                ));
            }
            _ => {}
        }
    }

    /// After a cycle: the wanted long-lived tasks start if it passed; then the wait.
    fn cycle_done(&mut self, ok: bool) {
        if ok {
            for id in std::mem::take(&mut self.wanted) {
                if self.servers.contains_key(&id) {
                    continue;
                }
                self.serial += 1;
                let args = self.run_args(&[id.to_string()]);
                let role = Role::Server(id.clone());
                match Child::start(&self.exe, &args, role, self.serial, self.exits_tx.clone()) {
                    Ok(c) => {
                        say(&format!("watch: starting {id}"));
                        self.servers.insert(id, c);
                    }
                    Err(e) => say(&format!("watch: cannot start {id}: {e}")),
                }
            }
        } else if !self.wanted.is_empty() {
            let names: Vec<String> = self.wanted.iter().map(ToString::to_string).collect();
            say(&format!("watch: {} start once a run passes", names.join(", ")));
        }
        say("watch: waiting for changes");
    }

    /// `prova -C <root> run --all <ids…>` with the watch's run flags.
    fn run_args(&self, ids: &[String]) -> Vec<String> {
        let root = self.snap.root.to_string_lossy().into_owned();
        let mut out: Vec<String> = vec!["-C".into(), root, "run".into(), "--all".into()];
        out.extend(self.settings.run_flags.iter().cloned());
        out.extend(ids.iter().cloned());
        out
    }

    /// Interrupts every child and waits for them all.
    async fn stop_all(&mut self) {
        let mut all: Vec<Child> = self.servers.drain().map(|(_, c)| c).collect();
        all.extend(self.cycle.take());
        stop_together(all).await;
    }
}

/// Interrupts `children` at once and waits for every one.
async fn stop_together(children: Vec<Child>) {
    let stops: Vec<_> =
        children.into_iter().map(|c| OwnedTask::spawn("watch.stop", c.stop())).collect();
    for s in stops {
        let _ = s.join().await;
    }
}

/// Loads the workspace and plans the selection, off the async threads (it lists files).
async fn load(start: &Path, select: &SelectArgs) -> anyhow::Result<Snapshot> {
    let (start, select) = (start.to_owned(), select.clone());
    OwnedTask::spawn_blocking("watch.load", move || Snapshot::load(&start, &select))
        .join()
        .await
        .map_err(|e| anyhow::anyhow!("loading the workspace: {e}"))?
}

/// `watch: 2 files changed (a/x, b/y), re-running`.
fn describe(paths: &[String], everything: bool) -> String {
    if everything {
        return "watch: more changes than could be followed, re-running everything".to_owned();
    }
    let mut named: Vec<&str> = paths.iter().take(3).map(String::as_str).collect();
    let more;
    if paths.len() > 3 {
        more = format!("{} more", paths.len() - 3);
        named.push(&more);
    }
    let files = if paths.len() == 1 { "file" } else { "files" };
    format!("watch: {} {files} changed ({}), re-running", paths.len(), named.join(", "))
}

fn plural_tasks(n: usize) -> String {
    crate::render::plural(n, "task")
}

/// One line of the watch's own on stdout (a closed pipe is not an error).
fn say(line: &str) {
    let _ = common::print(&format!("{line}\n"));
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn a_cycle_line_names_a_few_paths() {
        let p = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(describe(&p(&["a/x"]), false), "watch: 1 file changed (a/x), re-running");
        assert_eq!(
            describe(&p(&["a", "b", "c", "d", "e"]), false),
            "watch: 5 files changed (a, b, c, 2 more), re-running"
        );
    }
}
