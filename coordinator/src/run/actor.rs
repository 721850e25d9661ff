//! The run actor: the kameo shell around [`Scheduler`]. It owns one run: feeds scheduler
//! events, carries out its commands (restore a hit, or hand the task to a worker; skip;
//! abort), keeps the attempt → node map (a report for an attempt it no longer holds is
//! ignored), and reports events and the summary. Cache restores and saves live in
//! [`super::cached`]; proofs (`--verify`) in [`super::verify`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::events::{
    CacheStatus, NoticeLevel, RunEvent, RunSummary, TaskReport, TaskStatus,
};
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Assignment, Finished, FromWorker, Placement};
use prova_protocol::{AttemptId, Digest, WorkerId};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::core::{self as decide, AfterExecution, CacheUse, Purpose, TaskState};
use super::types::{ExecMode, RunActorArgs, RunCache, RunOptions};
use super::verify::Proofs;
use super::{AssignHints, WorkSink};
use crate::plan::{RunPlan, TaskKind};
use crate::scheduler::core::{Command, Event, Options, Scheduler, SkipReason};

/// Stop the run: abort running tasks, skip the rest.
#[derive(Debug)]
pub struct Interrupt;

/// Start the run.
#[derive(Debug)]
pub struct Begin;

/// The run actor.
pub struct RunActor {
    pub(super) plan: RunPlan,
    pub(super) sched: Scheduler,
    pub(super) work: Arc<dyn WorkSink>,
    pub(super) worker: WorkerId,
    pub(super) events: mpsc::Sender<RunEvent>,
    done: Option<oneshot::Sender<RunSummary>>,
    started: Instant,
    next_attempt: u64,
    pub(super) attempts: HashMap<AttemptId, (usize, Purpose)>,
    /// One state per task ([`TaskState`]).
    pub(super) state: Vec<TaskState>,
    pub(super) interrupted: bool,
    pub(super) cache: Option<RunCache>,
    pub(super) options: RunOptions,
    /// Restores, saves and proof steps in flight, by node (aborted if the actor stops).
    pub(super) side: HashMap<usize, OwnedTask<()>>,
    /// Keys of hits, touched in one batch at the end.
    pub(super) hit_keys: Vec<Digest>,
    /// Hits whose outputs were found current, all in one batch before the first dispatch
    /// (`cached::resolve_hits`): dispatched, such a hit finishes on the spot, with no restore.
    pub(super) current: HashMap<usize, crate::layers::Restored>,
    /// Project directories something of this run may have written to since (a task ran in
    /// place there, or a restore started): a pre-resolved hit there is checked again.
    pub(super) touched: HashSet<String>,
    pub(super) exec: ExecMode,
    /// Proof state (`--verify`).
    pub(super) proofs: Proofs,
    /// The scheduler finished (`ok`) while proofs were still running.
    deferred_done: Option<bool>,
    pub(super) local_proof_sources: Option<(PathBuf, PathBuf)>,
    /// Snapshots for the post-run check of undeclared writes (`run::written`).
    written: super::written::Watch,
    /// Counts this actor in [`live_run_actors`] until its state is dropped.
    _live: LiveRun,
}

static LIVE_RUN_ACTORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Run actors whose state is alive in this process: a coordinator with no run going holds
/// none (what `prova farm status --json` reports as `held.run_actors`).
pub fn live_run_actors() -> u64 {
    LIVE_RUN_ACTORS.load(std::sync::atomic::Ordering::Relaxed)
}

/// One count of [`live_run_actors`], given back when dropped.
struct LiveRun;

impl LiveRun {
    fn new() -> Self {
        LIVE_RUN_ACTORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        LIVE_RUN_ACTORS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Actor for RunActor {
    type Args = RunActorArgs;
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
        let written = super::written::Watch::new(args.plan.root.clone(), n);
        let max_reruns = args.options.concurrency.clamp(1, 64);
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
            state: TaskState::for_tasks(n),
            interrupted: false,
            cache: args.cache,
            options: args.options,
            side: HashMap::new(),
            hit_keys: Vec::new(),
            current: HashMap::new(),
            touched: HashSet::new(),
            exec: args.exec,
            proofs: Proofs::new(max_reruns),
            deferred_done: None,
            local_proof_sources: args.local_proof_sources,
            written,
            _live: LiveRun::new(),
        })
    }
}

impl RunActor {
    pub(super) async fn feed(&mut self, event: Event, ctx: &mut Context<Self, ()>) {
        let mut queue = VecDeque::from([event]);
        while let Some(ev) = queue.pop_front() {
            let now = self.started.elapsed();
            for cmd in self.sched.handle(now, ev) {
                if let Some(follow) = self.apply(cmd, ctx).await {
                    queue.push_back(follow);
                }
            }
        }
    }

    /// Reports `node` skipped, with `note` saying why.
    async fn finish_skipped(&mut self, node: usize, note: String) {
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
                self.finish_skipped(node, note).await;
                None
            }
            Command::Abort(node) | Command::StopPersistent(node) => {
                self.state[node].stopping = true;
                if let Some(attempt) = self.state[node].live
                    && self.work.cancel(attempt).await.is_err()
                {
                    return Some(self.lost(node).await);
                }
                None
            }
            Command::Done { ok } => {
                self.deferred_done = Some(ok);
                self.try_finish_run(ctx).await;
                None
            }
        }
    }

    /// Ends the run once the scheduler is done and no proof is outstanding.
    pub(super) async fn try_finish_run(&mut self, ctx: &mut Context<Self, ()>) {
        let Some(ok) =
            decide::run_may_end(self.deferred_done, self.proofs.outstanding(), self.interrupted)
        else {
            return;
        };
        if let Some(c) = &self.cache
            && !self.hit_keys.is_empty()
        {
            let _ = c.layer.touch(std::mem::take(&mut self.hit_keys)).await;
        }
        self.proofs.drain().await;
        self.release_all().await;
        let summary = RunSummary {
            ok: decide::run_ok(ok, &self.state, self.interrupted),
            interrupted: self.interrupted,
            wall_ms: self.started.elapsed().as_millis() as u64,
            tasks: self.state.iter_mut().filter_map(|t| t.report.take()).collect(),
        };
        if let Some(done) = self.done.take() {
            let _ = done.send(summary);
        }
        ctx.stop();
    }

    /// What the run's cache allows for `node`: nothing while it has no key (an upstream
    /// it folds by outputs is unresolved, [`crate::keys::progressive`]).
    pub(super) fn cache_use(&self, node: usize) -> CacheUse {
        let policy = self.cache.as_ref().filter(|c| c.keys.key(node).is_some()).map(|c| c.policy);
        CacheUse::of(&self.plan.tasks[node], policy)
    }

    pub(super) fn cacheable(&self, node: usize) -> bool {
        self.cache_use(node).cacheable
    }

    async fn dispatch(&mut self, node: usize, ctx: &mut Context<Self, ()>) -> Option<Event> {
        let step = super::excluded::step(self.options.upstreams, &self.plan.tasks[node]);
        // Its upstreams are resolved now: its key folds what they actually produced.
        match self.settle_key(node) {
            decide::Settled::Same => {}
            decide::Settled::Moved(key) => {
                if step != super::excluded::Step::Assume && self.start_probe(node, key, ctx) {
                    return None;
                }
            }
            decide::Settled::Unknown(upstream) => {
                let msg = format!(
                    "its key could not be computed (the outputs of `{}` are unknown): it runs uncached",
                    self.plan.tasks[upstream].id
                );
                self.notice(node, NoticeLevel::Warn, msg).await;
            }
        }
        if step == super::excluded::Step::Assume {
            return self.assume(node, ctx).await;
        }
        let task = &self.plan.tasks[node];
        if task.kind == TaskKind::Group {
            let mut r = self.report(
                node,
                TaskStatus::Succeeded,
                CacheStatus::Uncached,
                None,
                0,
                ExecStats::default(),
                None,
            );
            if self.options.verify.any() {
                r.verdicts.push(decide::not_run_verdict(true));
            }
            self.finish(node, r).await;
            return Some(Event::Finished { node, ok: true });
        }
        self.restore_or_run(node, ctx).await
    }

    /// A hit finishes on the spot when current, restores otherwise; a miss runs.
    pub(super) async fn restore_or_run(
        &mut self,
        node: usize,
        ctx: &mut Context<Self, ()>,
    ) -> Option<Event> {
        if let Some(done) = self.finish_current_hit(node).await {
            return Some(done);
        }
        if self.start_restore(node, ctx) {
            return None;
        }
        self.primary(node, ctx).await
    }

    /// Keys `node` from what its upstreams resolved to in this run (their output
    /// fingerprints, or their keys); a key that moved from the one predicted before the run
    /// drops the hit found under the prediction.
    fn settle_key(&mut self, node: usize) -> decide::Settled {
        let Some(c) = &mut self.cache else { return decide::Settled::Same };
        let before = c.keys.key(node);
        let state = &self.state;
        let after = c.keys.settle(&self.plan, node, &|d| state[d].fingerprint);
        let settled = match after {
            None => decide::settled(
                &c.keys.output_upstreams(&self.plan, node),
                &self.state,
                before,
                after,
            ),
            Some(_) => decide::settled(&[], &self.state, before, after),
        };
        if !matches!(settled, decide::Settled::Same) {
            c.hits.remove(&node);
            self.current.remove(&node);
        }
        settled
    }

    /// A fresh attempt id mapped to `node`.
    pub(super) fn new_attempt(&mut self, node: usize, purpose: Purpose) -> AttemptId {
        let attempt = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        self.attempts.insert(attempt, (node, purpose));
        attempt
    }

    /// The placement of an exec-root attempt of `node` (`local` for a local worker's proof).
    pub(super) fn exec_root_placement(&self, node: usize) -> Placement {
        let (local_source, local_blobs) = decide::exec_root_sources(
            &self.exec,
            self.local_proof_sources.as_ref(),
            &self.plan.root,
        );
        Placement::ExecRoot {
            inputs: self.plan.tasks[node].inputs.clone(),
            upstream: self.upstream_artifacts(node),
            local_source,
            local_blobs,
        }
    }

    pub(super) async fn assign(&mut self, node: usize, purpose: Purpose) -> Option<Event> {
        let attempt = self.new_attempt(node, purpose);
        if purpose == Purpose::Primary {
            self.state[node].live = Some(attempt);
        }
        let cached = self.cacheable(node);
        let shape = decide::attempt_shape(
            purpose,
            self.cache_use(node),
            self.cache.is_some(),
            crate::keys::progressive::folds_outputs(&self.plan.tasks[node]),
            self.farm_worker(),
            &self.exec,
            self.traces_inputs(node),
        );
        let in_place = shape.in_place;
        let placement = if in_place {
            let protected = self
                .cache
                .as_ref()
                .and_then(|c| c.protected.get(self.plan.tasks[node].id.as_str()))
                .cloned()
                .unwrap_or_default();
            Placement::InPlace { workspace_root: self.plan.root.clone(), protected }
        } else {
            self.exec_root_placement(node)
        };
        let pack_to = match (&self.cache, shape.pack) {
            (Some(c), true) => {
                Some(c.staging.join(format!("{}-{attempt}.tar.zst", std::process::id())))
            }
            _ => None,
        };
        if in_place {
            let dir = self.plan.tasks[node].spec.project_dir.clone();
            self.written.before_run(node, &dir, cached);
        }
        if purpose == Purpose::Primary {
            // It writes there in place, or its outputs are restored there after (a proof).
            self.touched.insert(self.plan.tasks[node].spec.project_dir.clone());
        }
        let assignment = Assignment {
            attempt,
            spec: self.plan.tasks[node].spec.clone(),
            placement,
            clean_outputs: shape.clean_outputs,
            collect_outputs: shape.collect_outputs,
            pack_to,
            perturb: shape
                .perturb
                .then(|| super::verify::perturbation(attempt, &self.declared_env(node))),
            trace_reads: shape.traced,
        };
        let hints = AssignHints {
            // A re-run never holds back the critical path.
            priority: if shape.prioritised { self.sched.priority(node) } else { 0 },
            // Re-runs must execute: never merged with another run's execution of the key.
            key: shape.merge_by_key.then(|| self.key_of(node)).flatten(),
            avoid: decide::avoid_worker(purpose, &self.state[node]),
            platform: self
                .cache
                .as_ref()
                .and_then(|c| c.keys.components.get(node))
                .and_then(|c| c.platform.clone()),
            labels: self.plan.tasks[node].spec.labels.clone(),
        };
        if self.work.assign(assignment, hints).await.is_err() {
            return Some(self.lost(node).await);
        }
        None
    }

    /// The env names `node` declares (its key folds their values).
    fn declared_env(&self, node: usize) -> Vec<String> {
        self.cache
            .as_ref()
            .and_then(|c| c.keys.components.get(node))
            .map(|c| c.env.iter().map(|(k, _)| k.clone()).collect())
            .unwrap_or_default()
    }

    pub(super) fn key_of(&self, node: usize) -> Option<Digest> {
        self.cache.as_ref().and_then(|c| c.keys.key(node))
    }

    /// The link is gone: the node fails with a clear note.
    async fn lost(&mut self, node: usize) -> Event {
        if let Some(a) = self.state[node].live.take() {
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
    pub(super) fn report(
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
            key: self.key_of(node),
            worker: (attempts > 0).then(|| self.state[node].worker_or(&self.worker)),
            note,
            verdicts: Vec::new(),
        }
    }

    pub(super) async fn finish(&mut self, node: usize, mut report: TaskReport) {
        // Verdicts concluded before the final report (the inputs proof) go first.
        let mut verdicts = std::mem::take(&mut self.state[node].pending);
        verdicts.append(&mut report.verdicts);
        report.verdicts = verdicts;
        self.state[node].report = Some(report.clone());
        // Held while a determinism re-run is pending (`verify::announce_finished`).
        self.announce_finished(node, report).await;
    }

    /// The id the next attempt will get.
    pub(super) fn peek_attempt(&self) -> AttemptId {
        AttemptId(self.next_attempt)
    }

    pub(super) async fn notice(&self, node: usize, level: NoticeLevel, message: String) {
        let task = Some(self.plan.tasks[node].id.clone());
        let _ = self.events.send(RunEvent::Notice { task, level, message }).await;
    }

    async fn on_finished(
        &mut self,
        f: Box<Finished>,
        ctx: &mut Context<Self, ()>,
    ) -> Option<Event> {
        let (node, purpose) = self.attempts.remove(&f.attempt)?;
        if purpose == Purpose::Rerun {
            self.on_rerun_finished(node, f, ctx).await;
            return None;
        }
        self.state[node].live = None;
        if self.interrupted && f.tries == 0 && f.exit == ExitKind::Aborted {
            // Cancelled by the interrupt before it started (queued on the farm or a worker):
            // skipped, as the tasks the scheduler had not dispatched yet.
            self.finish_skipped(node, "the run was interrupted before it started".to_owned()).await;
            return Some(Event::Finished { node, ok: false });
        }
        if let Some(refused) = self.refuse_unconfined(node, &f).await {
            return Some(refused);
        }
        // Downstream exec roots unpack this artifact whether or not the entry is saved; its
        // dependents' keys fold its fingerprint.
        self.state[node].artifact = f.outputs.as_ref().and_then(|o| o.artifact);
        self.state[node].fingerprint = f.outputs.as_ref().map(|o| o.fingerprint);
        if f.log_omitted > 0 {
            let msg = format!("{} bytes of output were omitted from the stored log", f.log_omitted);
            self.notice(node, NoticeLevel::Info, msg).await;
        }
        let status = self.status_of(node, &f.exit);
        let spec = &self.plan.tasks[node].spec;
        let globs = prova_protocol::globs::PathGlobs::new(&spec.project_dir, &spec.outputs)
            .unwrap_or_else(|_| prova_protocol::globs::PathGlobs::empty());
        let task = spec.id.to_string();
        let ok = status == TaskStatus::Succeeded;
        if let Some(msg) = self.written.after_run(node, &task, &globs, ok) {
            self.notice(node, NoticeLevel::Warn, msg).await;
        }
        self.record_primary(node, &f);
        let cacheable = self.cacheable(node);
        let found = if cacheable && self.traces_inputs(node) {
            let t = &self.plan.tasks[node];
            let trees: Vec<&str> =
                t.inputs.iter().filter(|i| i.tree).map(|i| i.path.as_str()).collect();
            super::verdicts::inputs_verdicts(&t.spec, &trees, &self.options.verify, &f, status)
        } else {
            Vec::new()
        };
        if self.sandboxed(node)
            && let Some(note) = super::verdicts::sandbox_violation(&found)
        {
            // A sandboxed task that read or wrote what it did not declare fails; nothing of
            // it is saved.
            self.discard_staged(f.attempt);
            let mut r = self.report(
                node,
                TaskStatus::Failed,
                CacheStatus::NotSaved { reason: "sandbox violation".to_owned() },
                Some(f.exit.clone()),
                f.tries,
                f.stats,
                Some(note),
            );
            // A farm's client judges what the task looked up against its workspace, and
            // words the note as a local run does (`remote::run::Judge`): it gets the
            // verdicts, and keeps them only under `--verify=inputs`.
            if self.options.verify.inputs || self.farm_worker() {
                r.verdicts = found;
            }
            self.finish(node, r).await;
            return Some(Event::Finished { node, ok: false });
        }
        if status == TaskStatus::Succeeded
            && let Some(w) = &f.wrote_outside
        {
            // It wrote beside its outputs in its exec root: what it wrote is gone with the
            // root, so it fails rather than pass without it; nothing of it is saved.
            self.discard_staged(f.attempt);
            let mut r = self.report(
                node,
                TaskStatus::Failed,
                CacheStatus::NotSaved {
                    reason: "it wrote outside its declared outputs".to_owned(),
                },
                Some(f.exit.clone()),
                f.tries,
                f.stats,
                Some(decide::wrote_outside_note(w)),
            );
            if self.options.verify.inputs && cacheable {
                r.verdicts = self.skipped_proof(node).map_or(found, |s| vec![s]);
            }
            self.finish(node, r).await;
            return Some(Event::Finished { node, ok: false });
        }
        if self.options.verify.inputs && cacheable {
            match self.skipped_proof(node) {
                Some(skipped) => self.state[node].pending.push(skipped),
                None => self.state[node].pending.extend(found),
            }
        }
        let v = &self.options.verify;
        let (cache, unprovable) = match decide::after_execution(
            self.cache_use(node),
            status,
            &f.exit,
            v.determinism,
            v.inputs,
        ) {
            AfterExecution::Save => return self.start_save(node, f, ctx).await,
            AfterExecution::Report { cache, unprovable } => (cache, unprovable),
        };
        self.discard_staged(f.attempt);
        let note = (status == TaskStatus::Failed).then(|| {
            let note = self.failure_note(node, &f.exit);
            f.exit_detail.as_ref().map_or_else(|| note.clone(), |d| format!("{note} ({d})"))
        });
        let ok = status == TaskStatus::Succeeded;
        let mut r = self.report(node, status, cache, Some(f.exit.clone()), f.tries, f.stats, note);
        if unprovable {
            r.verdicts.push(super::verdicts::unprovable(&self.plan.tasks[node]));
        }
        self.finish(node, r).await;
        Some(Event::Finished { node, ok })
    }

    /// Whether tasks run on farm workers (exec roots fed by the coordinator).
    pub(super) fn farm_worker(&self) -> bool {
        matches!(self.exec, ExecMode::ExecRoot { local_source: None, .. })
    }

    /// Artifacts of every task `node` depends on ([`decide::upstream_artifacts`]).
    pub(super) fn upstream_artifacts(&self, node: usize) -> Vec<(Digest, u64)> {
        decide::upstream_artifacts(&self.plan.tasks, &self.state, node)
    }

    fn status_of(&self, node: usize, exit: &ExitKind) -> TaskStatus {
        decide::task_status(self.plan.tasks[node].kind, &self.state[node], self.interrupted, exit)
    }

    fn failure_note(&self, node: usize, exit: &ExitKind) -> String {
        decide::failure_note(self.plan.tasks[node].kind, &self.state[node], exit)
    }

    pub(super) fn staged_path(&self, attempt: AttemptId) -> PathBuf {
        match &self.cache {
            Some(c) => c.staging.join(format!("{}-{attempt}.tar.zst", std::process::id())),
            None => PathBuf::new(),
        }
    }

    pub(super) fn discard_staged(&self, attempt: AttemptId) {
        if self.cache.is_some() {
            let _ = std::fs::remove_file(self.staged_path(attempt));
        }
    }
}

impl Message<Begin> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Begin, ctx: &mut Context<Self, Self::Reply>) {
        self.started = Instant::now();
        self.resolve_hits().await;
        self.feed(Event::Start, ctx).await;
    }
}

impl Message<Interrupt> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Interrupt, ctx: &mut Context<Self, Self::Reply>) {
        if !self.interrupted {
            self.interrupted = true;
            self.cancel_reruns().await;
            self.feed(Event::Interrupt, ctx).await;
            self.try_finish_run(ctx).await;
        }
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
        if let Some(&(node, purpose)) = self.attempts.get(&attempt) {
            match purpose {
                Purpose::Primary => self.state[node].ran_on = Some(m.worker),
                Purpose::Rerun => self.state[node].rerun_worker = Some(m.worker),
            }
        }
        <Self as Message<FromWorker>>::handle(self, m.msg, ctx).await;
    }
}

impl Message<FromWorker> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: FromWorker, ctx: &mut Context<Self, Self::Reply>) {
        // A re-run's output is not the task's: it is compared, never shown.
        let primary = |a: &AttemptId, s: &Self| match s.attempts.get(a) {
            Some(&(node, Purpose::Primary)) => Some(node),
            _ => None,
        };
        match msg {
            FromWorker::Started { attempt, try_no } => {
                if let Some(node) = primary(&attempt, self) {
                    let task = self.plan.tasks[node].id.clone();
                    let worker = self.state[node].worker_or(&self.worker);
                    let _ = self
                        .events
                        .send(RunEvent::TaskStarted { task, attempt: try_no, worker })
                        .await;
                }
            }
            FromWorker::Output { attempt, text } => {
                if let Some(node) = primary(&attempt, self) {
                    let task = self.plan.tasks[node].id.clone();
                    let _ = self.events.send(RunEvent::Output { task, text }).await;
                }
            }
            FromWorker::Ready { attempt } => {
                if let Some(node) = primary(&attempt, self) {
                    self.state[node].ready = true;
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
