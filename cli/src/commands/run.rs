//! `prova run`: select, resolve the flags, environment and config into [`RunSettings`]
//! (`settings.rs`, pure), then act on them: take the workspace lock (not for `--dry-run`),
//! open the cache as the settings say (read-only for `local:r`, not at all for
//! `--no-cache`), prepare (keys), then either print the plan (`--dry-run`, `dry.rs`) or run
//! it, locally or on a farm (`farm.rs`), and report.

mod dry;
mod farm;
pub mod settings;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use prova_coordinator::cache::{CacheThread, Entry};
use prova_coordinator::config::discover::Root;
use prova_coordinator::graph::TaskGraph;
use prova_coordinator::keys::KeySalt;
use prova_coordinator::layers::LocalLayer;
use prova_coordinator::layers::reapi::ReapiLayer;
use prova_coordinator::prepare::{KeyStats, Listing, Prepared, prepare};
use prova_coordinator::run::{RunCache, RunOptions, TaskKind};
use prova_coordinator::scheduler::defaults;
use prova_coordinator::trees::TreeGuard;
use prova_coordinator::workspace::Workspace;
use prova_protocol::Digest;
use prova_protocol::TaskId;
use prova_protocol::events::{NoticeLevel, RunEvent, RunSummary};
use prova_protocol::task::OwnedTask;
use prova_worker::sandbox::SandboxStatus;
use tokio::sync::mpsc;

use self::settings::{Reach, RunConfig, RunEnv, RunSettings};
use super::common::{self, Loaded};
use super::history;
use crate::args::RunArgs;
use crate::exit::Code;
use crate::remote::Session;
use crate::render::json::RunMeta;
use crate::render::trace::Timeline;
use crate::render::{Renderer, summary};

/// Bound on run events waiting for the renderer.
const EVENT_QUEUE: usize = 1024;

/// The workspace lock while the run holds it: released early once only persistent tasks
/// (dev servers, never cached) are left, so `prova run dev` does not shut the workspace to
/// every other run while it serves.
type HeldLock = Arc<Mutex<Option<crate::lock::WorkspaceLock>>>;

/// Runs the selection.
pub fn run(start: &Path, args: RunArgs) -> anyhow::Result<Code> {
    let started_at = SystemTime::now();
    let meta = RunMeta::new(started_at);
    let rt = common::runtime()?;
    let (start, found) = common::find_root(start)?;
    let early = Early::start(&rt, &found, &args);
    let Loaded { ws, graph } = common::load_found(&start, &found, &args.select)?;
    // `--remote-exec` / `[exec.reapi]`: the tasks execute on a REAPI farm (one clear error,
    // before anything runs, when that cannot be).
    let exec_reapi = match args.dry_run {
        true => None,
        false => crate::reapi_exec::config(&ws.root, args.remote_exec.as_deref())?,
    };
    let config =
        RunConfig { root: ws.root.clone(), farm_required: ws.settings.farm_required, exec_reapi };
    let s = RunSettings::resolve(args, &RunEnv::capture(), config, &|id| graph.get(id).is_some())?;
    // A remote run dials first: its keys fold the farm's salt. A farm that cannot be reached
    // is one warning within seconds and the run goes on in local mode, as Turborepo goes on
    // without its remote cache (everything below then treats it as a local run) — unless
    // the settings require the farm.
    let session = match &s.farm {
        Some(f) => rt.block_on(farm::dial(f))?,
        None => {
            if s.farm_layer_unused() {
                tracing::warn!("--cache farm:…: no --remote, so there is no farm layer to use");
            }
            None
        }
    };
    let reach = s.reach(session.is_some())?;
    // One writer per workspace (cli/src/lock.rs): taken before the keys are computed, so they
    // see the files the previous writer left.
    let (early_lock, early_listing) = early.map(|e| (e.lock, e.listing)).unzip();
    let lock = match (reach.writes_workspace, early_lock) {
        (true, Some(held)) => Some(held),
        (true, None) => Some(crate::lock::acquire(&ws.root, s.lock_wait)?),
        (false, _) => None,
    };
    tracing::debug!(locked = lock.is_some(), early = early_listing.is_some(), "workspace lock");
    // The file list (`git ls-files`), started under the lock — before the load when the lock
    // was free then — overlaps the cache's open; unless that open writes files the listing
    // could see half made (a cache directory in the workspace outside `.prova/`, which the
    // listing leaves out): then the list is made after the open, and an early one dropped.
    let listing = listing_may_overlap_the_cache(&ws.root, &s.cache.dir)
        .then(|| early_listing.unwrap_or_else(|| Listing::start(rt.handle(), &ws)));
    let (cache, cache_join) = common::open_cache_in(&s.cache.dir, reach.cache_mode)?;
    let blobs_dir = cache.dir().join(prova_coordinator::cache::BLOBS_DIR);
    tracing::debug!("cache opened");
    let (sandboxed, sandbox) = probe_sandbox(&ws, &graph, &s, reach)?;
    let act = Act {
        ws: &ws,
        graph: &graph,
        s: &s,
        reach,
        cache: &cache,
        blobs_dir,
        started_at,
        meta: meta.clone(),
        sandboxed,
        sandbox,
        listing,
    };
    // The records earlier runs left pending, folded beside this run's work (a run that
    // records nothing folds nothing).
    let folding = (!s.dry_run).then(|| history::fold_behind(&ws.root)).flatten();
    let outcome = rt.block_on(act.execute(session, Arc::new(Mutex::new(lock))));
    if let Some(fold) = folding {
        let _ = fold.join();
    }
    // The cache thread closes the index when the last handle is gone: while the summary is
    // printed and the history written (another file), and joined before the process exits
    // whatever the outcome, so a close is never cut short.
    drop(cache);
    let code = match outcome {
        Ok(Some(done)) => finish(&ws.root, &s, &meta, done),
        Ok(None) => Ok(Code::Ok),
        Err(e) => Err(e),
    };
    let _ = cache_join.join();
    code
}

/// What a local run that writes the workspace starts before loading it: the workspace lock,
/// taken if it is free (never waited for here: a busy lock is waited for, with its message,
/// once the settings are known), and under it the file list and the walk of the root
/// `node_modules`, so `git ls-files` (a process) and the largest tree's stats overlap the
/// load of the projects. `prepare` uses the list only if it is the loaded workspace's
/// (`Listing::fits`: the same root, no nested repositories) and the walk only if that
/// directory is one of its trees.
struct Early {
    /// The lock, free when asked.
    lock: crate::lock::WorkspaceLock,
    /// The file list started under it.
    listing: Listing,
}

impl Early {
    /// For a run of `args` in the workspace at `root`: `None` for a dry run (it takes no
    /// lock) and a `--remote` one (the farm is dialled first, and the lock not held while
    /// it answers), in a workspace no run has locked yet, or when the lock is busy.
    fn start(rt: &tokio::runtime::Runtime, found: &Root, args: &RunArgs) -> Option<Early> {
        if args.dry_run || args.remote.remote.is_some() {
            return None;
        }
        let root = &found.dir;
        // Only where an earlier run left the lock file: a run whose config is refused must
        // leave the workspace as it found it, so the first run creates `.prova/` only once
        // its workspace has loaded.
        let lock_file = root.join(".prova").join(crate::lock::LOCK_FILE);
        if !std::fs::symlink_metadata(&lock_file).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let lock = crate::lock::acquire(root, false).ok()?;
        let listing = Listing::start_at(rt.handle(), root.to_path_buf(), Vec::new())
            .with_trees(rt.handle(), default_root_tree(found));
        Some(Early { lock, listing })
    }
}

/// The root `node_modules`, when it is an installed tree by default: a root `package.json`,
/// the directory there, and no `trees` in the root `prova.toml` that could say otherwise
/// (a mention anywhere, a comment too, counts: the walk is then left to the loaded
/// settings).
fn default_root_tree(found: &Root) -> Vec<String> {
    let is = |name: &str, dir: bool| {
        std::fs::symlink_metadata(found.dir.join(name))
            .is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
    };
    match !found.text.contains("trees") && is("package.json", false) && is("node_modules", true) {
        true => vec!["node_modules".to_owned()],
        false => Vec::new(),
    }
}

/// What a finished run hands to the report: its summary, key statistics and timeline.
struct Done {
    summary: RunSummary,
    key_stats: KeyStats,
    timeline: Timeline,
}

/// A run being carried out: its settings and what the steps before the runtime opened.
struct Act<'a> {
    ws: &'a Workspace,
    graph: &'a TaskGraph,
    s: &'a RunSettings,
    reach: Reach,
    cache: &'a CacheThread,
    blobs_dir: PathBuf,
    started_at: SystemTime,
    meta: RunMeta,
    /// The run's `sandbox = true` tasks.
    sandboxed: Vec<TaskId>,
    /// Whether bubblewrap runs here (probed only when something needs it).
    sandbox: SandboxStatus,
    /// The workspace's file list, started before the cache's open.
    listing: Option<Listing>,
}

/// Whether the file list may be made while the cache at `cache_dir` opens: the open creates
/// the cache's files, which the list must not catch half made — true unless the cache lies in
/// the workspace outside `.prova/` (the list never holds `.prova/`).
fn listing_may_overlap_the_cache(root: &Path, cache_dir: &Path) -> bool {
    !cache_dir.starts_with(root) || cache_dir.starts_with(root.join(".prova"))
}

/// The run's `sandbox = true` tasks, and the sandbox probed when a proof or one of them
/// needs it: the inputs proof needs the sandbox, without it the proof would pass silently.
/// Probed only then: detecting starts bubblewrap, a cost every warm run paid.
fn probe_sandbox(
    ws: &Workspace,
    graph: &TaskGraph,
    s: &RunSettings,
    reach: Reach,
) -> anyhow::Result<(Vec<TaskId>, SandboxStatus)> {
    let sandboxed: Vec<TaskId> = graph
        .nodes
        .iter()
        .filter(|n| ws.projects[n.project].tasks.get(&n.name).is_some_and(|d| d.policy.sandbox))
        .map(|n| n.id.clone())
        .collect();
    let verify = &s.options.verify;
    let sandbox = if verify.any() || !sandboxed.is_empty() {
        prova_worker::sandbox::detect()
    } else {
        SandboxStatus::Unavailable { reason: "not probed".to_owned() }
    };
    if verify.inputs && !reach.remote && !sandbox.is_available() {
        let why = unavailable(&sandbox);
        anyhow::bail!("--verify=inputs needs the bubblewrap sandbox, which cannot run here: {why}");
    }
    Ok((sandboxed, sandbox))
}

/// Whether a task of the run may execute and save: one the cache does not answer yet.
fn will_save(prepared: &Prepared, hits: &HashMap<usize, Entry>) -> bool {
    let tasks = prepared.plan.tasks.iter().enumerate();
    tasks.into_iter().any(|(i, t)| t.cacheable && !hits.contains_key(&i))
}

/// Computes the installed trees' digests under `guard`'s watches in the background, while the
/// first tasks execute: their saves then find them known.
fn prime_trees(guard: Arc<TreeGuard>, cache: CacheThread, root: &Path) {
    let scope = prova_coordinator::trees::memo_scope(root);
    let primed = OwnedTask::spawn_blocking("run.prime-trees", move || {
        let mut memo = || prova_coordinator::layers::local::tree_memo_rows(&cache, &scope);
        if let Err(e) = guard.prime(&mut memo) {
            tracing::debug!("the installed trees were not primed: {e}");
        }
    });
    primed.detach();
}

/// Why the sandbox cannot run (empty when it can).
fn unavailable(sandbox: &SandboxStatus) -> &str {
    match sandbox {
        SandboxStatus::Unavailable { reason } => reason,
        SandboxStatus::Bwrap { .. } => "",
    }
}

impl Act<'_> {
    /// Proofs or `sandbox = true` tasks: tasks may run in exec roots.
    fn exec_roots(&self) -> bool {
        self.s.options.verify.any() || !self.sandboxed.is_empty()
    }

    /// Keys, probes, then the dry run's plan (`None`) or the run itself.
    async fn execute(
        mut self,
        session: Option<Session>,
        lock: HeldLock,
    ) -> anyhow::Result<Option<Done>> {
        tracing::debug!("run starts");
        let salt = self.salt(session.as_ref()).await?;
        let listing = self.listing.take();
        let (mut prepared, options) = self.prepare(salt, listing).await?;
        let layer =
            LocalLayer::new(self.cache.clone(), prova_coordinator::cache::TRUSTED, &self.ws.root)
                .with_input_scopes(prepared.input_scopes.clone())
                .with_protected(prepared.protected.clone());
        let guard = (!prepared.trees.is_empty()).then(|| {
            let trees = prepared.trees.iter().map(|t| t.path.clone()).collect();
            let dirs = self.ws.projects.iter().map(|p| p.dir.clone()).collect();
            Arc::new(TreeGuard::new(&self.ws.root, trees, dirs))
        });
        let layer = match &guard {
            Some(g) => layer.with_tree_guard(g.clone()),
            None => layer,
        };
        let reapi = match self.reach.remote || self.s.cache.off {
            true => None,
            false => {
                let ci = self.s.ci.as_deref();
                crate::local::reapi_layer(&self.ws.root, self.s.cache.spec, &layer, ci).await?
            }
        };
        let probed = std::time::Instant::now();
        let (policy, upstreams) = (self.s.cache.local, self.s.options.upstreams);
        let mut hits = match &reapi {
            _ if !policy.reads_any(upstreams) => HashMap::new(),
            Some(r) => presolve(&mut prepared, |ks| r.probe(ks)).await?,
            None => presolve(&mut prepared, |ks| layer.probe(ks)).await?,
        };
        // `--force`: only the tasks the run leaves out are restored.
        hits.retain(|&i, _| policy.reads(upstreams, &prepared.plan.tasks[i]));
        tracing::debug!(elapsed = ?probed.elapsed(), hits = hits.len(), "cache probed");
        self.refuse_unsandboxed(&prepared, &hits)?;
        let saves = !self.s.dry_run && policy.write && will_save(&prepared, &hits);
        if let Some(guard) = guard.filter(|_| saves) {
            prime_trees(guard, self.cache.clone(), &self.ws.root);
        }
        if self.s.dry_run {
            let upstreams = self.s.options.upstreams;
            let json = self.s.style.json;
            common::print(&dry::dry_run(self.graph, &prepared, &hits, upstreams, json))?;
            return Ok(None);
        }
        let (tx, rx) = mpsc::channel::<RunEvent>(EVENT_QUEUE);
        self.notices(&tx, &prepared).await;
        let render = self.render(rx, &prepared, lock);
        let key_stats = prepared.stats;
        let session = self.skip_farm(session, &prepared, &hits, &tx).await;
        let summary = match session {
            Some(session) => {
                let wire = self.s.wire_options();
                let farm = self.s.farm.as_ref().expect("a session comes from a farm's settings");
                farm::remote_run(session, farm, self.ws, &prepared, self.cache, &layer, wire, tx)
                    .await
            }
            None => self.run_here(prepared, layer, reapi, hits, options, tx).await,
        };
        tracing::debug!(elapsed = ?probed.elapsed(), "run ended");
        let timeline = render.join().await.unwrap_or_default();
        tracing::debug!(elapsed = ?probed.elapsed(), "report drawn");
        Ok(Some(Done { summary: summary?, key_stats, timeline }))
    }

    /// The key salt: a remote run connects before it keys, as its keys fold declared env
    /// values with the farm cache's salt (every client's keys agree), which the local cache
    /// then adopts so entries brought home hit in local mode too.
    async fn salt(&self, session: Option<&Session>) -> anyhow::Result<Option<KeySalt>> {
        let salt = match session {
            Some(s) => s.key_salt,
            None if self.s.cache.off => common::stored_key_salt_in(&self.s.cache.dir),
            None => None, // the opened cache's own
        };
        if let Some(farm) = salt
            && !self.s.cache.off
        {
            let adopted = self.cache.call(move |s| s.adopt_key_salt(&farm)).await?;
            if let Ok(true) = adopted {
                tracing::info!("the local cache adopted the farm's key salt");
            }
        }
        Ok(salt)
    }

    /// Keys, the command line's defaults and the run id on the plan; inputs listed for exec
    /// roots; the run's options with the workspace a proof judges against.
    async fn prepare(
        &self,
        salt: Option<KeySalt>,
        listing: Option<Listing>,
    ) -> anyhow::Result<(Prepared, RunOptions)> {
        let (ws, s) = (self.ws, self.s);
        let env = |k: &str| std::env::var(k).ok();
        let mut prepared =
            prepare(ws, self.graph, &s.forward, &env, self.cache, salt, listing).await?;
        defaults::apply(&mut prepared.plan, ws, &s.defaults);
        let run_id = defaults::new_run_id();
        defaults::mark_run(&mut prepared.plan, &run_id);
        let mut options = s.options.clone();
        if s.remote_exec.is_some() && !self.exec_roots() {
            prepared.fill_inputs(&ws.root); // exec roots on the REAPI farm
        }
        if self.exec_roots() {
            prepared.fill_inputs(&ws.root);
            options.verify.workspace = Some(Arc::new(prepared.workspace_view(ws)));
        }
        Ok((prepared, options))
    }

    /// A `sandbox = true` task that may execute (a hit does not) cannot on a REAPI farm,
    /// which cannot trace it, and needs the sandbox here.
    fn refuse_unsandboxed(
        &self,
        prepared: &Prepared,
        hits: &HashMap<usize, Entry>,
    ) -> anyhow::Result<()> {
        if self.s.dry_run {
            return Ok(());
        }
        let executes =
            |id: &&TaskId| prepared.plan.position(id).is_none_or(|i| !hits.contains_key(&i));
        let Some(id) = self.sandboxed.iter().find(executes) else { return Ok(()) };
        if self.s.remote_exec.is_some() {
            anyhow::bail!("{}", crate::reapi_exec::sandboxed_refusal(id));
        }
        if !self.reach.remote && !self.sandbox.is_available() {
            let why = unavailable(&self.sandbox);
            anyhow::bail!(
                "`{id}` sets `sandbox = true`, but the bubblewrap sandbox cannot run here: {why}"
            );
        }
        Ok(())
    }

    /// The warnings a run starts with: inputs that match nothing, and re-runs the missing
    /// sandbox cannot perturb fully (brief §7: say so plainly).
    async fn notices(&self, tx: &mpsc::Sender<RunEvent>, prepared: &Prepared) {
        let warn = |task, message| RunEvent::Notice { task, level: NoticeLevel::Warn, message };
        for id in &prepared.matched_nothing {
            let message = "its declared inputs match no file: the key cannot see any change (a stale-hit trap)";
            let _ = tx.send(warn(Some(id.clone()), message.to_owned())).await;
        }
        for (pattern, at) in &prepared.fingerprint_unmatched {
            let message = format!(
                "{at}: fingerprint `{pattern}` matches no file (gitignored files are not listed): it is folded as absent, so keys change when it appears"
            );
            let _ = tx.send(warn(None, message)).await;
        }
        // Without the sandbox a local re-run cannot change the hostname or the user id: a
        // task reading them would be "proven" silently.
        if let SandboxStatus::Unavailable { reason } = &self.sandbox
            && self.s.options.verify.determinism
            && !self.reach.remote
        {
            let message = format!(
                "the sandbox cannot run here ({reason}): determinism re-runs cannot change the hostname or the user id, so a task that reads them is not caught"
            );
            let _ = tx.send(warn(None, message)).await;
        }
    }

    /// The render loop on its own thread: events to stdout (rendered into a buffer, written
    /// with the progress line cleared only when an event printed something), the progress
    /// line, the timeline; releases the lock once only persistent tasks are left.
    fn render(
        &self,
        mut rx: mpsc::Receiver<RunEvent>,
        prepared: &Prepared,
        held: HeldLock,
    ) -> OwnedTask<Timeline> {
        let mut unfinished = lock_until(prepared);
        if unfinished.as_ref().is_some_and(|u| u.is_empty())
            && let Ok(mut held) = held.lock()
        {
            held.take(); // persistent tasks only
        }
        let tasks = &prepared.plan.tasks;
        let durations = tasks
            .iter()
            .filter_map(|t| Some((t.id.clone(), *prepared.durations.get(t.id.as_str())?)));
        let progress = crate::render::progress::Progress::new(
            self.s.progress,
            tasks.len(),
            durations.collect(),
            self.s.options.concurrency,
        );
        let mut timeline = Timeline::new();
        timeline.started_at = self.started_at;
        let (style, meta) = (self.s.style, self.meta.clone());
        OwnedTask::spawn_blocking("cli.render", move || {
            use std::io::Write as _;
            let mut r = Renderer::new(Vec::new(), style, meta);
            let mut stdout = std::io::stdout().lock();
            let mut broken = false;
            while let Some(ev) = rx.blocking_recv() {
                progress.event(&ev);
                timeline.event(&ev);
                if let (RunEvent::TaskFinished(report), Some(unfinished)) = (&ev, &mut unfinished)
                    && unfinished.remove(&report.task)
                    && unfinished.is_empty()
                    && let Ok(mut held) = held.lock()
                {
                    held.take();
                }
                if broken {
                    continue; // stdout closed: keep draining so the run is not blocked
                }
                let _ = r.event(&ev);
                let text = r.take();
                if !text.is_empty()
                    && progress
                        .suspend(|| stdout.write_all(&text).and_then(|()| stdout.flush()))
                        .is_err()
                {
                    broken = true;
                }
            }
            progress.finish();
            let _ = stdout.flush();
            timeline
        })
    }

    /// A remote run whose every task hits the local cache needs nothing of the farm: the
    /// outputs come from here, as a local run's would (the local layer is probed first).
    async fn skip_farm(
        &self,
        session: Option<Session>,
        prepared: &Prepared,
        hits: &HashMap<usize, Entry>,
        tx: &mpsc::Sender<RunEvent>,
    ) -> Option<Session> {
        match session {
            Some(s) if !self.s.options.verify.any() && all_hit_locally(prepared, hits) => {
                s.conn.close(0u32.into(), b"all local hits");
                let message =
                    "every task hit the local cache: nothing was sent to the farm".to_owned();
                let _ = tx
                    .send(RunEvent::Notice { task: None, level: NoticeLevel::Info, message })
                    .await;
                None
            }
            other => other,
        }
    }

    /// The run on this machine: the in-process worker, or the REAPI farm's bots.
    async fn run_here(
        &self,
        prepared: Prepared,
        layer: LocalLayer,
        reapi: Option<ReapiLayer>,
        hits: HashMap<usize, Entry>,
        options: RunOptions,
        tx: mpsc::Sender<RunEvent>,
    ) -> anyhow::Result<RunSummary> {
        let staging = layer.tmp_dir().await?;
        let weights = prepared.weights();
        let mut prepared = prepared;
        if self.s.remote_exec.is_some() {
            // A REAPI bot runs what its own PATH and toolchain give: the action checks them (its
            // guard), as a prova worker checks its own.
            let root = &self.ws.root;
            let checks: Vec<_> = (0..prepared.plan.tasks.len())
                .map(|i| {
                    let config = &prepared.keys.components[i].config;
                    let runtime = prova_coordinator::keys::runtime::checks(root, config);
                    (crate::remote::run::program_checks(&prepared, i), runtime)
                })
                .collect();
            for (t, ((programs, absent), runtime)) in prepared.plan.tasks.iter_mut().zip(checks) {
                (t.spec.programs, t.spec.absent_programs, t.spec.runtime) =
                    (programs, absent, runtime);
            }
        }
        let layer: Arc<dyn prova_coordinator::layers::CacheLayer> = match reapi {
            Some(r) => Arc::new(r),
            None => Arc::new(layer),
        };
        let protected = prepared.protected.clone();
        let policy = self.s.cache.local;
        // Moved, not cloned: every task's key components (a clone and its drop were 5 % of a
        // 1,000-package no-op's CPU).
        let run_cache = RunCache { layer, policy, keys: prepared.keys, hits, staging, protected };
        let (root, blobs) = (self.ws.root.clone(), self.blobs_dir.clone());
        if let Some(cfg) = &self.s.remote_exec {
            return crate::reapi_exec::run(
                prepared.plan,
                options,
                tx,
                run_cache,
                weights,
                cfg,
                root,
                blobs,
            )
            .await;
        }
        let proofs = self.exec_roots().then(|| crate::local::LocalProofs {
            work_dir: root.join(".prova").join("worker"),
            sandbox: self.sandbox.is_available(),
            strace: prova_worker::sandbox::strace_available(self.sandbox.is_available()),
            sources: (root.clone(), blobs),
        });
        crate::local::run(prepared.plan, options, tx, Some(run_cache), weights, proofs).await
    }
}

/// The summary line (or object), the run history, `--summarize` and `--profile`; the exit
/// code.
fn finish(root: &Path, s: &RunSettings, meta: &RunMeta, done: Done) -> anyhow::Result<Code> {
    let Done { summary, key_stats, timeline } = done;
    let ended_at = SystemTime::now();
    let command = recorded_argv();
    let keys = serde_json::to_value(key_stats).unwrap_or_default();
    // The JSON summary only where it is printed or filed: built from every task's report,
    // it was a few per cent of a 1,000-task no-op that showed the text summary.
    let line = (s.style.json || s.summarize.is_some())
        .then(|| crate::render::json::summary_value(meta, ended_at, &command, &summary, &keys));
    match &line {
        Some(line) if s.style.json => common::print(&format!("{line}\n"))?,
        _ => common::print(&summary::text(&summary))?,
    }
    let recorded = super::history::Recorded {
        meta,
        command: &command,
        summary: &summary,
        keys: &keys,
        timeline: &timeline,
        ended_at,
    };
    let recording = std::time::Instant::now();
    if let Err(e) = history::append(root, &recorded) {
        tracing::warn!("the run was not recorded: {e}");
    }
    tracing::debug!(elapsed = ?recording.elapsed(), "run recorded");
    reports(root, s, meta, line.as_ref(), &timeline)?;
    Ok(if summary.ok { Code::Ok } else { Code::Failed })
}

/// The command line as the summary and the history keep it: lossily decoded, and the values
/// of the environment's secret-named variables masked as task logs mask them
/// (`prova run deploy -- --token=$NPM_TOKEN` leaves no token in `.prova/runs.*`).
fn recorded_argv() -> Vec<String> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mask = prova_worker::mask::SecretMask::from_env(&env);
    std::env::args_os()
        .map(|a| {
            let a = a.to_string_lossy().into_owned();
            String::from_utf8_lossy(&mask.apply(a.as_bytes())).into_owned()
        })
        .collect()
}

/// `--summarize` and `--profile`: the summary object and the Chrome trace, as files.
fn reports(
    root: &Path,
    s: &RunSettings,
    meta: &RunMeta,
    summary_line: Option<&serde_json::Value>,
    timeline: &Timeline,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let write = |path: &Path, value: &serde_json::Value| -> anyhow::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(value)?;
        std::fs::write(path, format!("{text}\n"))
            .with_context(|| format!("cannot write {}", path.display()))
    };
    if let (Some(path), Some(summary_line)) = (&s.summarize, summary_line) {
        let path = match path {
            Some(p) => p.clone(),
            None => root.join(".prova").join("runs").join(format!("{}.json", meta.run_id)),
        };
        write(&path, summary_line).context("--summarize")?;
    }
    if let Some(path) = &s.profile {
        write(path, &timeline.chrome_trace(&meta.run_id)).context("--profile")?;
    }
    Ok(())
}

/// The tasks whose end releases the workspace lock early: every non-persistent task, when
/// the plan has a persistent one (`None` otherwise: the lock is held to the end of the run).
fn lock_until(prepared: &Prepared) -> Option<HashSet<TaskId>> {
    let tasks = &prepared.plan.tasks;
    tasks.iter().any(|t| t.kind == TaskKind::Persistent).then(|| {
        tasks.iter().filter(|t| t.kind != TaskKind::Persistent).map(|t| t.id.clone()).collect()
    })
}

/// Cache entries present for the plan's cacheable tasks, by node, as `probe` finds them; keys
/// that fold an upstream's outputs are settled from the upstream's entry as the lookups go
/// ([`prova_coordinator::keys::progressive::presolve`]: one batch per level of hits).
async fn presolve<F, Fut, E>(
    prepared: &mut Prepared,
    probe: F,
) -> anyhow::Result<HashMap<usize, Entry>>
where
    F: FnMut(Vec<Digest>) -> Fut,
    Fut: std::future::Future<Output = Result<HashMap<Digest, Entry>, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let plan = &prepared.plan;
    Ok(prova_coordinator::keys::progressive::presolve(plan, &mut prepared.keys, probe).await?)
}

/// Whether every task that runs a command has a local hit (groups run nothing).
fn all_hit_locally(prepared: &Prepared, hits: &HashMap<usize, Entry>) -> bool {
    prepared
        .plan
        .tasks
        .iter()
        .enumerate()
        .all(|(i, t)| t.kind == TaskKind::Group || (t.cacheable && hits.contains_key(&i)))
}

#[cfg(test)]
mod listing_tests {
    use std::path::Path;

    use super::listing_may_overlap_the_cache;

    #[test]
    fn the_listing_overlaps_a_cache_it_cannot_see_and_waits_for_one_it_could() {
        let root = Path::new("/w");
        // The default cache, and any under `.prova/` or outside the workspace.
        assert!(listing_may_overlap_the_cache(root, Path::new("/w/.prova/cache")));
        assert!(listing_may_overlap_the_cache(root, Path::new("/w/.prova/elsewhere")));
        assert!(listing_may_overlap_the_cache(root, Path::new("/home/me/.cache/prova")));
        assert!(listing_may_overlap_the_cache(root, Path::new("/work/cache")));
        // In the workspace outside `.prova/`: the listing could catch its files half made.
        assert!(!listing_may_overlap_the_cache(root, Path::new("/w/cache")));
        assert!(!listing_may_overlap_the_cache(root, Path::new("/w/.provacache")));
        assert!(!listing_may_overlap_the_cache(root, root));
    }
}
