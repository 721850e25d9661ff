//! The run actor: the kameo shell around [`Scheduler`]. It owns one run: feeds scheduler
//! events, carries out its commands (restore a hit, or hand the task to a worker; skip;
//! abort), files entries after successful executions, keeps the attempt → node map (a report
//! for an attempt it no longer holds is ignored), and reports events and the summary.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::events::{
    CacheStatus, NoticeLevel, RunEvent, RunSummary, TaskReport, TaskStatus,
};
use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Assignment, Finished, FromWorker, Placement};
use prova_protocol::{AttemptId, Digest, WorkerId};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::plan::{RunPlan, TaskKind};
use super::{AssignHints, WorkSink};
use crate::cache::Entry;
use crate::keys::PlanKeys;
use crate::layers::{CacheLayer, Restored, SaveOutcome, SaveRequest};
use crate::scheduler::core::{Command, Event, Options, Scheduler, SkipReason};

/// Knobs of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// `-j`.
    pub concurrency: usize,
    /// `--continue`.
    pub continue_on_failure: bool,
}

/// Whether a run reads and writes the cache (`--force`: write only; `--no-cache`: neither).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachePolicy {
    /// Hits are restored.
    pub read: bool,
    /// Executions are saved.
    pub write: bool,
}

/// The cache side of a run.
pub struct RunCache {
    /// The layer entries come from and go to.
    pub layer: Arc<dyn CacheLayer>,
    /// Read/write.
    pub policy: CachePolicy,
    /// Every task's key.
    pub keys: PlanKeys,
    /// Entries found for cacheable tasks before the run (by node).
    pub hits: HashMap<usize, Entry>,
    /// Where workers stage packed artifacts (the cache's `tmp/`).
    pub staging: PathBuf,
}

/// Where a run's tasks execute.
#[derive(Clone, Debug, Default)]
pub enum ExecMode {
    /// In the workspace (local mode).
    #[default]
    InPlace,
    /// In exec roots holding only declared inputs and upstream artifacts (the farm; local
    /// proof runs). `local_source`/`local_blobs`: where a local worker finds the bytes (the
    /// workspace root and the cache's blob directory); `None` for farm workers, which fetch
    /// them from the coordinator.
    ExecRoot {
        /// The workspace root, for a local worker.
        local_source: Option<PathBuf>,
        /// The cache's `blobs/` directory, for a local worker.
        local_blobs: Option<PathBuf>,
    },
}

/// What a run actor is built from.
pub struct RunArgs {
    /// The resolved tasks.
    pub plan: RunPlan,
    /// Knobs.
    pub options: RunOptions,
    /// Estimated durations for the critical path, by task (ms).
    pub weights: Vec<u64>,
    /// Where assignments go.
    pub work: Arc<dyn WorkSink>,
    /// Which worker the sink reaches (for reports).
    pub worker: WorkerId,
    /// Where run events go (bounded).
    pub events: mpsc::Sender<RunEvent>,
    /// Receives the summary when the run is over.
    pub done: oneshot::Sender<RunSummary>,
    /// First attempt id to hand out (distinct per run on a shared worker).
    pub first_attempt: u64,
    /// The cache, unless the run has none.
    pub cache: Option<RunCache>,
    /// Where tasks execute.
    pub exec: ExecMode,
}

/// Stop the run: abort running tasks, skip the rest.
#[derive(Debug)]
pub struct Interrupt;

/// Start the run.
#[derive(Debug)]
pub struct Begin;

/// A restore finished.
struct RestoreDone {
    node: usize,
    /// The entry's artifact (downstream exec roots unpack it).
    artifact: Option<(Digest, u64)>,
    /// The entry's recorded execution time: what the hit saved.
    saved_ms: u64,
    result: Result<Option<Restored>, String>,
}

/// A save finished.
struct SaveDone {
    node: usize,
    result: Result<SaveOutcome, String>,
    finished: Box<Finished>,
}

/// The run actor.
pub struct RunActor {
    plan: RunPlan,
    sched: Scheduler,
    work: Arc<dyn WorkSink>,
    worker: WorkerId,
    events: mpsc::Sender<RunEvent>,
    done: Option<oneshot::Sender<RunSummary>>,
    started: Instant,
    next_attempt: u64,
    attempts: HashMap<AttemptId, usize>,
    live: Vec<Option<AttemptId>>,
    reports: Vec<Option<TaskReport>>,
    stopping: Vec<bool>,
    /// Persistent nodes whose worker reported them ready.
    ready: Vec<bool>,
    interrupted: bool,
    cache: Option<RunCache>,
    /// Restores and saves in flight, by node (aborted if the actor stops).
    side: HashMap<usize, OwnedTask<()>>,
    /// Keys of hits, touched in one batch at the end.
    hit_keys: Vec<Digest>,
    exec: ExecMode,
    /// Each node's artifact once known (hit or save): what downstream exec roots unpack.
    artifacts: Vec<Option<(Digest, u64)>>,
    /// Where each node's last attempt ran (farm reports say; local mode is one worker).
    ran_on: Vec<Option<WorkerId>>,
}

impl Actor for RunActor {
    type Args = RunArgs;
    type Error = Infallible;

    async fn on_start(args: Self::Args, _me: ActorRef<Self>) -> Result<Self, Self::Error> {
        let mut sched_plan = args.plan.sched_plan(&|_| None);
        if args.weights.len() == sched_plan.weight.len() {
            sched_plan.weight = args.weights;
        }
        let sched = Scheduler::new(
            &sched_plan,
            Options {
                concurrency: args.options.concurrency,
                continue_on_failure: args.options.continue_on_failure,
            },
        );
        let n = args.plan.tasks.len();
        Ok(Self {
            plan: args.plan,
            sched,
            work: args.work,
            worker: args.worker,
            events: args.events,
            done: Some(args.done),
            started: Instant::now(),
            next_attempt: args.first_attempt,
            attempts: HashMap::new(),
            live: vec![None; n],
            reports: vec![None; n],
            stopping: vec![false; n],
            ready: vec![false; n],
            interrupted: false,
            cache: args.cache,
            side: HashMap::new(),
            hit_keys: Vec::new(),
            exec: args.exec,
            artifacts: vec![None; n],
            ran_on: vec![None; n],
        })
    }
}

impl RunActor {
    async fn feed(&mut self, event: Event, ctx: &mut Context<Self, ()>) {
        let mut queue = std::collections::VecDeque::from([event]);
        while let Some(ev) = queue.pop_front() {
            let now = self.started.elapsed();
            for cmd in self.sched.handle(now, ev) {
                if let Some(follow) = self.apply(cmd, ctx).await {
                    queue.push_back(follow);
                }
            }
        }
    }

    /// Carries out one command; returns an event to feed back when the command completes
    /// synchronously (a group task, a failed send).
    async fn apply(&mut self, cmd: Command, ctx: &mut Context<Self, ()>) -> Option<Event> {
        match cmd {
            Command::Dispatch(node) => self.dispatch(node, ctx).await,
            Command::Skip(node, why) => {
                let note = match why {
                    SkipReason::DependencyFailed(dep) => {
                        format!("{} failed", self.plan.tasks[dep].id)
                    }
                    SkipReason::RunStopped => {
                        "the run stopped after a failure (use --continue to keep going)".to_owned()
                    }
                    SkipReason::Interrupted => "the run was interrupted".to_owned(),
                };
                let r = self.report(
                    node,
                    TaskStatus::Skipped,
                    CacheStatus::Uncached,
                    None,
                    0,
                    ExecStats::default(),
                    Some(note),
                );
                self.finish(node, r).await;
                None
            }
            Command::Abort(node) | Command::StopPersistent(node) => {
                self.stopping[node] = true;
                if let Some(attempt) = self.live[node]
                    && self.work.cancel(attempt).await.is_err()
                {
                    return Some(self.lost(node).await);
                }
                None
            }
            Command::Done { ok } => {
                if let Some(c) = &self.cache
                    && !self.hit_keys.is_empty()
                {
                    let _ = c.layer.touch(std::mem::take(&mut self.hit_keys)).await;
                }
                let summary = RunSummary {
                    ok: ok && !self.interrupted,
                    interrupted: self.interrupted,
                    wall_ms: self.started.elapsed().as_millis() as u64,
                    tasks: self.reports.iter_mut().filter_map(Option::take).collect(),
                };
                if let Some(done) = self.done.take() {
                    let _ = done.send(summary);
                }
                ctx.stop();
                None
            }
        }
    }

    fn cacheable(&self, node: usize) -> bool {
        self.plan.tasks[node].cacheable && self.cache.is_some()
    }

    async fn dispatch(&mut self, node: usize, ctx: &mut Context<Self, ()>) -> Option<Event> {
        let task = &self.plan.tasks[node];
        if task.kind == TaskKind::Group {
            let r = self.report(
                node,
                TaskStatus::Succeeded,
                CacheStatus::Uncached,
                None,
                0,
                ExecStats::default(),
                None,
            );
            self.finish(node, r).await;
            return Some(Event::Finished { node, ok: true });
        }
        if self.cacheable(node)
            && let Some(c) = &mut self.cache
            && c.policy.read
            && let Some(entry) = c.hits.remove(&node)
        {
            let layer = c.layer.clone();
            let saved_ms = entry.duration_ms;
            let artifact = entry.artifact;
            let globs = PathGlobs::new(&task.spec.project_dir, &task.spec.outputs)
                .unwrap_or_else(|_| PathGlobs::empty());
            let me = ctx.actor_ref().clone();
            self.side.insert(
                node,
                OwnedTask::spawn("run.restore", async move {
                    let result = layer.restore(entry, globs).await.map_err(|e| e.to_string());
                    let _ = me.tell(RestoreDone { node, artifact, saved_ms, result }).await;
                }),
            );
            return None;
        }
        self.assign(node).await
    }

    async fn assign(&mut self, node: usize) -> Option<Event> {
        let task = &self.plan.tasks[node];
        let attempt = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        self.attempts.insert(attempt, node);
        self.live[node] = Some(attempt);
        let cached = self.cacheable(node);
        let write = cached && self.cache.as_ref().is_some_and(|c| c.policy.write);
        let farm = self.farm_worker();
        let pack_to = match (&self.cache, write && !farm) {
            (Some(c), true) => {
                Some(c.staging.join(format!("{}-{attempt}.tar.zst", std::process::id())))
            }
            _ => None,
        };
        let placement = match &self.exec {
            ExecMode::InPlace => Placement::InPlace { workspace_root: self.plan.root.clone() },
            ExecMode::ExecRoot { local_source, local_blobs } => Placement::ExecRoot {
                inputs: task.inputs.clone(),
                upstream: self.upstream_artifacts(node),
                local_source: local_source.clone(),
                local_blobs: local_blobs.clone(),
            },
        };
        let assignment = Assignment {
            attempt,
            spec: task.spec.clone(),
            placement,
            clean_outputs: cached && matches!(self.exec, ExecMode::InPlace),
            // A farm worker always returns its outputs: downstream exec roots need them.
            collect_outputs: write || farm,
            pack_to,
            perturb: None,
            trace_reads: false,
        };
        let hints = AssignHints {
            priority: self.sched.priority(node),
            key: self.cache.as_ref().and_then(|c| c.keys.keys.get(node).copied()),
            avoid: None,
            platform: self
                .cache
                .as_ref()
                .and_then(|c| c.keys.components.get(node))
                .and_then(|c| c.platform.clone()),
        };
        if self.work.assign(assignment, hints).await.is_err() {
            return Some(self.lost(node).await);
        }
        None
    }

    /// The link is gone: the node fails with a clear note.
    async fn lost(&mut self, node: usize) -> Event {
        if let Some(a) = self.live[node].take() {
            self.attempts.remove(&a);
        }
        let note = "the worker link closed".to_owned();
        let r = self.report(
            node,
            TaskStatus::Failed,
            CacheStatus::Uncached,
            None,
            0,
            ExecStats::default(),
            Some(note),
        );
        self.finish(node, r).await;
        Event::Finished { node, ok: false }
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        node: usize,
        status: TaskStatus,
        cache: CacheStatus,
        exit: Option<ExitKind>,
        attempts: u32,
        stats: ExecStats,
        note: Option<String>,
    ) -> TaskReport {
        TaskReport {
            task: self.plan.tasks[node].id.clone(),
            status,
            cache,
            exit,
            attempts,
            stats,
            key: self.cache.as_ref().and_then(|c| c.keys.keys.get(node).copied()),
            worker: (attempts > 0)
                .then(|| self.ran_on[node].clone().unwrap_or_else(|| self.worker.clone())),
            note,
        }
    }

    async fn finish(&mut self, node: usize, report: TaskReport) {
        self.reports[node] = Some(report.clone());
        let _ = self.events.send(RunEvent::TaskFinished(report)).await;
    }

    async fn notice(&self, node: usize, level: NoticeLevel, message: String) {
        let task = Some(self.plan.tasks[node].id.clone());
        let _ = self.events.send(RunEvent::Notice { task, level, message }).await;
    }

    async fn on_finished(
        &mut self,
        f: Box<Finished>,
        ctx: &mut Context<Self, ()>,
    ) -> Option<Event> {
        let node = self.attempts.remove(&f.attempt)?;
        self.live[node] = None;
        // Downstream exec roots unpack this artifact whether or not the entry is saved.
        self.artifacts[node] = f.outputs.as_ref().and_then(|o| o.artifact);
        if f.log_omitted > 0 {
            let msg = format!("{} bytes of output were omitted from the stored log", f.log_omitted);
            self.notice(node, NoticeLevel::Info, msg).await;
        }
        let status = self.status_of(node, &f.exit);
        let staged = f.outputs.as_ref().and_then(|o| o.artifact.map(|(d, _)| d));
        let write = self.cacheable(node) && self.cache.as_ref().is_some_and(|c| c.policy.write);
        if write && status == TaskStatus::Succeeded {
            let withheld = if let Some(e) = &f.output_error {
                Some(format!("collecting outputs failed: {e}"))
            } else if let Some(missing) = f.missing_literals.first() {
                Some(format!("declared output `{missing}` does not exist"))
            } else if f.outputs.is_none() {
                Some("no outputs were collected".to_owned())
            } else {
                None
            };
            if let Some(reason) = withheld {
                self.discard_staged(f.attempt);
                let r = self.report(
                    node,
                    status,
                    CacheStatus::NotSaved { reason },
                    Some(f.exit.clone()),
                    f.tries,
                    f.stats,
                    None,
                );
                self.finish(node, r).await;
                return Some(Event::Finished { node, ok: true });
            }
            let Some(c) = &self.cache else { return None };
            let Some(outputs) = &f.outputs else { return None };
            let req = SaveRequest {
                task: self.plan.tasks[node].id.to_string(),
                key: c.keys.keys[node],
                components: c.keys.components[node].clone(),
                manifest: outputs.manifest.clone(),
                // A farm worker uploaded the artifact already; locally it is staged.
                artifact: staged
                    .map(|d| (d, (!self.farm_worker()).then(|| self.staged_path(f.attempt)))),
                log: f.log.clone(),
                duration_ms: f.stats.wall_ms,
                stamps: c.keys.stamps[node].clone(),
            };
            let layer = c.layer.clone();
            let me = ctx.actor_ref().clone();
            self.side.insert(
                node,
                OwnedTask::spawn("run.save", async move {
                    let result = layer.save(req).await.map_err(|e| e.to_string());
                    let _ = me.tell(SaveDone { node, result, finished: f }).await;
                }),
            );
            return None;
        }
        self.discard_staged(f.attempt);
        let cache = if self.cacheable(node) && write {
            CacheStatus::NotSaved { reason: f.exit.describe() }
        } else {
            CacheStatus::Uncached
        };
        let note = (status == TaskStatus::Failed).then(|| self.failure_note(node, &f.exit));
        let ok = status == TaskStatus::Succeeded;
        let r = self.report(node, status, cache, Some(f.exit.clone()), f.tries, f.stats, note);
        self.finish(node, r).await;
        Some(Event::Finished { node, ok })
    }

    /// Whether tasks run on farm workers (exec roots fed by the coordinator).
    fn farm_worker(&self) -> bool {
        matches!(self.exec, ExecMode::ExecRoot { local_source: None, .. })
    }

    /// Artifacts of every task `node` depends on, transitively (an exec root holds all the
    /// upstream outputs a task may read), in a stable order.
    fn upstream_artifacts(&self, node: usize) -> Vec<(Digest, u64)> {
        let mut seen = vec![false; self.plan.tasks.len()];
        let mut stack = self.plan.tasks[node].deps.clone();
        let mut out = Vec::new();
        while let Some(d) = stack.pop() {
            if std::mem::replace(&mut seen[d], true) {
                continue;
            }
            if let Some(a) = self.artifacts[d] {
                out.push((d, a));
            }
            stack.extend(self.plan.tasks[d].deps.iter().copied());
        }
        out.sort_by_key(|(d, _)| *d);
        out.into_iter().map(|(_, a)| a).collect()
    }

    fn status_of(&self, node: usize, exit: &ExitKind) -> TaskStatus {
        let persistent = self.plan.tasks[node].kind == TaskKind::Persistent;
        match exit {
            _ if persistent && self.stopping[node] && !self.interrupted => TaskStatus::Succeeded,
            ExitKind::Aborted => TaskStatus::Aborted,
            _ if self.exited_unready(node) => TaskStatus::Failed,
            e if e.success() => TaskStatus::Succeeded,
            _ => TaskStatus::Failed,
        }
    }

    /// A persistent task that ended on its own before it was ready never served: whatever its
    /// exit code, what depends on it must not run.
    fn exited_unready(&self, node: usize) -> bool {
        self.plan.tasks[node].kind == TaskKind::Persistent
            && !self.stopping[node]
            && !self.ready[node]
    }

    fn failure_note(&self, node: usize, exit: &ExitKind) -> String {
        match exit {
            ExitKind::Code(_) | ExitKind::Signal(_) if self.exited_unready(node) => {
                format!("exited before it was ready ({})", exit.describe())
            }
            _ => exit.describe(),
        }
    }

    fn staged_path(&self, attempt: AttemptId) -> PathBuf {
        match &self.cache {
            Some(c) => c.staging.join(format!("{}-{attempt}.tar.zst", std::process::id())),
            None => PathBuf::new(),
        }
    }

    fn discard_staged(&self, attempt: AttemptId) {
        if self.cache.is_some() {
            let _ = std::fs::remove_file(self.staged_path(attempt));
        }
    }
}

impl Message<Begin> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Begin, ctx: &mut Context<Self, Self::Reply>) {
        self.started = Instant::now();
        self.feed(Event::Start, ctx).await;
    }
}

impl Message<Interrupt> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Interrupt, ctx: &mut Context<Self, Self::Reply>) {
        if !self.interrupted {
            self.interrupted = true;
            self.feed(Event::Interrupt, ctx).await;
        }
    }
}

impl Message<RestoreDone> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: RestoreDone, ctx: &mut Context<Self, Self::Reply>) {
        let node = msg.node;
        self.side.remove(&node);
        if self.interrupted {
            let r = self.report(
                node,
                TaskStatus::Aborted,
                CacheStatus::Uncached,
                None,
                0,
                ExecStats::default(),
                None,
            );
            self.finish(node, r).await;
            self.feed(Event::Finished { node, ok: false }, ctx).await;
            return;
        }
        match msg.result {
            Ok(Some(restored)) => {
                self.artifacts[node] = msg.artifact;
                let task = self.plan.tasks[node].id.clone();
                if !restored.log.is_empty() {
                    let _ = self.events.send(RunEvent::Output { task, text: restored.log }).await;
                }
                let saved_ms = msg.saved_ms;
                let key = self.cache.as_ref().map(|c| c.keys.keys[node]);
                if let Some(k) = key {
                    self.hit_keys.push(k);
                }
                let layer = self.cache.as_ref().map_or("local", |c| c.layer.name()).to_owned();
                let cache = CacheStatus::Hit { layer, saved_ms };
                let r = self.report(
                    node,
                    TaskStatus::Succeeded,
                    cache,
                    None,
                    0,
                    ExecStats::default(),
                    None,
                );
                self.finish(node, r).await;
                self.feed(Event::Finished { node, ok: true }, ctx).await;
            }
            other => {
                let why = match other {
                    Err(e) => format!("the cache entry could not be restored ({e}); running the task"),
                    _ => "the cache entry's artifact is missing or corrupt (quarantined); running the task".to_owned(),
                };
                self.notice(node, NoticeLevel::Warn, why).await;
                if let Some(ev) = self.assign(node).await {
                    self.feed(ev, ctx).await;
                }
            }
        }
    }
}

impl Message<SaveDone> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: SaveDone, ctx: &mut Context<Self, Self::Reply>) {
        let node = msg.node;
        self.side.remove(&node);
        let cache = match msg.result {
            Ok(SaveOutcome::Saved) => CacheStatus::Saved,
            Ok(SaveOutcome::Withheld(reason)) => CacheStatus::NotSaved { reason },
            Err(e) => {
                self.discard_staged(msg.finished.attempt);
                CacheStatus::NotSaved { reason: format!("saving failed: {e}") }
            }
        };
        let f = msg.finished;
        let r = self.report(
            node,
            TaskStatus::Succeeded,
            cache,
            Some(f.exit.clone()),
            f.tries,
            f.stats,
            None,
        );
        self.finish(node, r).await;
        self.feed(Event::Finished { node, ok: true }, ctx).await;
    }
}

/// A report relayed by the farm, with the worker it came from.
pub struct FromFarm {
    /// The report (already translated to this run's attempt id).
    pub msg: FromWorker,
    /// Where it ran.
    pub worker: WorkerId,
}

impl Message<FromFarm> for RunActor {
    type Reply = ();

    async fn handle(&mut self, m: FromFarm, ctx: &mut Context<Self, Self::Reply>) {
        let attempt = match &m.msg {
            FromWorker::Started { attempt, .. }
            | FromWorker::Output { attempt, .. }
            | FromWorker::Ready { attempt } => *attempt,
            FromWorker::Finished(f) => f.attempt,
        };
        if let Some(&node) = self.attempts.get(&attempt) {
            self.ran_on[node] = Some(m.worker);
        }
        <Self as Message<FromWorker>>::handle(self, m.msg, ctx).await;
    }
}

impl Message<FromWorker> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: FromWorker, ctx: &mut Context<Self, Self::Reply>) {
        match msg {
            FromWorker::Started { attempt, try_no } => {
                if let Some(&node) = self.attempts.get(&attempt) {
                    let task = self.plan.tasks[node].id.clone();
                    let worker = self.worker.clone();
                    let _ = self
                        .events
                        .send(RunEvent::TaskStarted { task, attempt: try_no, worker })
                        .await;
                }
            }
            FromWorker::Output { attempt, text } => {
                if let Some(&node) = self.attempts.get(&attempt) {
                    let task = self.plan.tasks[node].id.clone();
                    let _ = self.events.send(RunEvent::Output { task, text }).await;
                }
            }
            FromWorker::Ready { attempt } => {
                if let Some(&node) = self.attempts.get(&attempt) {
                    self.ready[node] = true;
                    let task = self.plan.tasks[node].id.clone();
                    let _ = self.events.send(RunEvent::TaskReady { task }).await;
                    self.feed(Event::Ready { node }, ctx).await;
                }
            }
            FromWorker::Finished(f) => {
                if let Some(ev) = self.on_finished(f, ctx).await {
                    self.feed(ev, ctx).await;
                }
            }
        }
    }
}
