//! The run as a state machine, sans-IO (in the manner of quinn-proto's `Connection`): one
//! [`Run`] holds the whole order of a run — probe a key settled at dispatch, restore a hit,
//! hand the task out, save its outputs, prove it, report it, end the run. The shell
//! ([`super::actor`]) feeds it every [`Input`] with [`Run::handle`] (time injected as the
//! time since the run began) and carries out every [`Command`] [`Run::poll`] yields, in
//! order: cache-layer calls, assignments and cancels down the work sink, run events, ledger
//! rows, the summary. No async, no runtime, no actor, no file in here; `machine_tests.rs`
//! drives whole runs with plain values.
//!
//! The decisions it takes are pure functions of [`super::core`], [`super::verdicts`],
//! [`super::reruns`] and [`super::excluded`]; the rest of its behaviour is split by the step
//! it carries: [`super::finished`] (a primary execution's report), [`super::cached`]
//! (restores and saves), [`super::verify`] (proofs), [`super::excluded`] (tasks assumed).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::artifact::ArtifactError;
use prova_protocol::events::{CacheStatus, NoticeLevel, RunEvent, RunSummary, TaskReport};
use prova_protocol::events::{TaskStatus, Verdict};
use prova_protocol::manifest::OutputManifest;
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::work::{Assignment, FromWorker};
use prova_protocol::{AttemptId, Digest, WorkerId};

use super::AssignHints;
use super::cached::{PendingSave, SaveDone, SaveJob};
use super::core::{self as decide, CacheUse, Purpose, TaskState};
use super::reruns::Reruns;
use super::types::{CachePolicy, ExecMode, RunOptions};
use crate::cache::{Entry, Execution};
use crate::keys::PlanKeys;
use crate::layers::{HitQuery, LayerError, Restored};
use crate::plan::RunPlan;
use crate::scheduler::SchedPlan as _;
use crate::scheduler::core::{Command as Sched, Event, Options, Scheduler, SkipReason};

/// What a run knows of its cache, without the layer itself (the shell holds that).
pub(crate) struct CacheSide {
    /// The layer's name, as a hit reports it.
    pub layer: &'static str,
    /// Read/write.
    pub policy: CachePolicy,
    /// Every task's key.
    pub keys: PlanKeys,
    /// Entries found for cacheable tasks before the run (by node).
    pub hits: HashMap<usize, Entry>,
    /// Where workers stage packed artifacts.
    pub staging: PathBuf,
    /// Files each task's in-place clean must never delete, by task id.
    pub protected: Arc<crate::inputs::protect::Protected>,
}

/// What a [`Run`] is built from.
pub(crate) struct Setup {
    /// The resolved tasks.
    pub plan: RunPlan,
    /// Knobs.
    pub options: RunOptions,
    /// Estimated durations for the critical path, by task (ms).
    pub weights: Vec<u64>,
    /// Which worker the sink reaches (for reports).
    pub worker: WorkerId,
    /// First attempt id to hand out.
    pub first_attempt: u64,
    /// The cache, unless the run has none.
    pub cache: Option<CacheSide>,
    /// Where tasks execute.
    pub exec: ExecMode,
    /// Where a local worker's proofs find the workspace and the cache's blobs.
    pub local_proof_sources: Option<(PathBuf, PathBuf)>,
    /// This process's id (names staged artifacts).
    pub pid: u32,
    /// The host's `LANG` (a re-run's perturbation picks another locale).
    pub host_lang: String,
}

/// Everything that happens to a run.
#[derive(Debug)]
pub(crate) enum Input {
    /// Start the run.
    Begin,
    /// The answer to [`Command::ResolveHits`] (`Err`: the layer failed as a whole).
    HitsResolved(Result<Vec<(Entry, Option<Restored>)>, LayerError>),
    /// Stop the run: abort running tasks, skip the rest (Ctrl-C, a client gone).
    Interrupt,
    /// A worker's report; `worker`: where it ran, when the farm says.
    Worker { msg: FromWorker, worker: Option<WorkerId> },
    /// [`Command::Assign`] failed: the link is gone.
    AssignFailed(AttemptId),
    /// [`Command::Cancel`] failed: the link is gone.
    CancelFailed(AttemptId),
    /// The answer to [`Command::Probe`].
    Probed { node: usize, key: Digest, result: Result<Option<Entry>, LayerError> },
    /// The answer to [`Command::Restore`].
    Restored { node: usize, result: Result<Option<Restored>, LayerError> },
    /// The answer to [`Command::Save`].
    Saved(Box<SaveDone>),
    /// The answer to [`Command::ReadOutputs`].
    OutputsRead { node: usize, result: Result<OutputManifest, ArtifactError> },
    /// The answer to [`Command::Diff`]: the determinism proof's verdict.
    ProofDone { node: usize, verdict: Verdict },
}

/// Everything a run asks of the world, in the order it must happen.
#[derive(Debug)]
pub(crate) enum Command {
    /// Send a run event.
    Emit(RunEvent),
    /// Ask the layer which hits are current in the workspace (one batch, before the first
    /// dispatch); answer [`Input::HitsResolved`] before anything else.
    ResolveHits(Vec<HitQuery>),
    /// Look `key` up (settled at dispatch); answer [`Input::Probed`].
    Probe { node: usize, key: Digest },
    /// Restore `entry` into the workspace; answer [`Input::Restored`].
    Restore { node: usize, entry: Box<Entry>, globs: prova_protocol::globs::PathGlobs },
    /// File an execution (its checks against the newest entry first); answer
    /// [`Input::Saved`].
    Save(Box<SaveJob>),
    /// Read an assumed task's declared outputs on disk under `root`; answer
    /// [`Input::OutputsRead`].
    ReadOutputs { node: usize, root: PathBuf, globs: prova_protocol::globs::PathGlobs },
    /// Hand an attempt out; on failure answer [`Input::AssignFailed`].
    Assign { assignment: Box<Assignment>, hints: AssignHints },
    /// Cancel an attempt (it still reports `Finished`); on failure answer
    /// [`Input::CancelFailed`].
    Cancel(AttemptId),
    /// Record an execution in the ledger (its `time_ms` stamped when carried out).
    Record { execution: Box<Execution>, staged: Option<PathBuf> },
    /// Record a diverging re-run, compare the two artifacts file by file, and answer
    /// [`Input::ProofDone`].
    Diff(Box<super::verify::DiffJob>),
    /// Remove a staged artifact that will not be saved.
    Discard(PathBuf),
    /// A task is about to run in place: snapshot its project (`run::written`).
    WatchBefore { node: usize, project_dir: String, check: bool },
    /// A task run in place ended: warn (a notice) if it wrote beside its outputs.
    WatchAfter { node: usize, ok: bool },
    /// Mark the run's hits used: each key with the `last_used_ms` its entry had when found.
    Touch(Vec<(Digest, i64)>),
    /// The run is over: wait for the ledger, hand the summary back, stop.
    Finish(RunSummary),
}

/// One run, from `Begin` to its summary.
pub(crate) struct Run {
    pub(super) plan: RunPlan,
    pub(super) sched: Scheduler,
    pub(super) worker: WorkerId,
    /// The time since the run began, as of the input being handled.
    now: Duration,
    pub(super) next_attempt: u64,
    pub(super) attempts: HashMap<AttemptId, (usize, Purpose)>,
    /// One state per task ([`TaskState`]).
    pub(super) state: Vec<TaskState>,
    pub(super) interrupted: bool,
    pub(super) cache: Option<CacheSide>,
    pub(super) options: RunOptions,
    /// Keys of hits (with their entries' `last_used_ms`), touched in one batch at the end.
    pub(super) hit_keys: Vec<(Digest, i64)>,
    /// Hits whose outputs were found current before the first dispatch: dispatched, such a
    /// hit finishes on the spot, with no restore.
    pub(super) current: HashMap<usize, Restored>,
    /// Project directories something of this run may have written to since (a task ran in
    /// place there, or a restore started): a pre-resolved hit there is checked again.
    pub(super) touched: HashSet<String>,
    pub(super) exec: ExecMode,
    /// Queued and running re-runs, outstanding proofs.
    pub(super) reruns: Reruns,
    /// The nodes of the hits asked about in [`Command::ResolveHits`], in order.
    pub(super) resolving: Vec<usize>,
    /// Restores in flight: what their entry says of the hit.
    pub(super) restoring: HashMap<usize, super::cached::HitMeta>,
    /// Saves in flight: the execution they file.
    pub(super) saving: HashMap<usize, PendingSave>,
    /// The scheduler finished (`ok`) while proofs were still running.
    deferred_done: Option<bool>,
    pub(super) local_proof_sources: Option<(PathBuf, PathBuf)>,
    pub(super) pid: u32,
    pub(super) host_lang: String,
    /// The summary was handed out: every later input is ignored.
    ended: bool,
    out: VecDeque<Command>,
}

impl Run {
    /// A run of `setup`, not begun.
    pub(crate) fn new(setup: Setup) -> Self {
        let mut sched_plan = setup.plan.sched_plan(&|_| None);
        if setup.weights.len() == sched_plan.weight.len() {
            sched_plan.weight = setup.weights;
        }
        let options = Options {
            concurrency: setup.options.concurrency,
            continue_on_failure: setup.options.continue_on_failure,
        };
        let n = setup.plan.tasks.len();
        Self {
            sched: Scheduler::new(&sched_plan, options),
            plan: setup.plan,
            worker: setup.worker,
            now: Duration::ZERO,
            next_attempt: setup.first_attempt,
            attempts: HashMap::new(),
            state: TaskState::for_tasks(n),
            interrupted: false,
            cache: setup.cache,
            reruns: Reruns::new(setup.options.concurrency.clamp(1, 64)),
            options: setup.options,
            hit_keys: Vec::new(),
            current: HashMap::new(),
            touched: HashSet::new(),
            exec: setup.exec,
            resolving: Vec::new(),
            restoring: HashMap::new(),
            saving: HashMap::new(),
            deferred_done: None,
            local_proof_sources: setup.local_proof_sources,
            pid: setup.pid,
            host_lang: setup.host_lang,
            ended: false,
            out: VecDeque::new(),
        }
    }

    /// The next command to carry out, in order.
    pub(crate) fn poll(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// Whether the summary was handed out.
    #[cfg(test)]
    pub(crate) fn is_over(&self) -> bool {
        self.ended
    }

    /// The plan the run carries out.
    pub(crate) fn plan(&self) -> &RunPlan {
        &self.plan
    }

    /// Takes `input` in at `now` (the time since the run began).
    pub(crate) fn handle(&mut self, now: Duration, input: Input) {
        if self.ended {
            return;
        }
        self.now = now;
        match input {
            Input::Begin => self.begin(),
            Input::HitsResolved(result) => self.hits_resolved(result),
            Input::Interrupt => self.interrupt(),
            Input::Worker { msg, worker } => self.on_worker(msg, worker),
            Input::AssignFailed(attempt) => self.assign_failed(attempt),
            Input::CancelFailed(attempt) => match self.attempts.get(&attempt).copied() {
                Some((node, Purpose::Primary)) => {
                    let ev = self.lost(node);
                    self.feed(ev);
                }
                Some((node, Purpose::Rerun)) => {
                    self.reruns.lost_dropped(node, attempt);
                    self.try_finish_run();
                }
                None => {}
            },
            Input::Probed { node, key, result } => self.probed(node, key, result),
            Input::Restored { node, result } => self.restored(node, result),
            Input::Saved(done) => self.saved(*done),
            Input::OutputsRead { node, result } => self.outputs_read(node, result),
            Input::ProofDone { node, verdict } => {
                self.conclude(node, verdict);
                self.try_finish_run();
            }
        }
    }

    pub(super) fn push(&mut self, cmd: Command) {
        self.out.push_back(cmd);
    }

    pub(super) fn emit(&mut self, ev: RunEvent) {
        self.push(Command::Emit(ev));
    }

    pub(super) fn notice(&mut self, node: usize, level: NoticeLevel, message: String) {
        let task = Some(self.plan.tasks[node].id.clone());
        self.emit(RunEvent::Notice { task, level, message });
    }

    /// Feeds the scheduler `event` and carries out its commands (and their follow-ups).
    pub(super) fn feed(&mut self, event: Event) {
        let mut queue = VecDeque::from([event]);
        while let Some(ev) = queue.pop_front() {
            for cmd in self.sched.handle(self.now, ev) {
                if let Some(follow) = self.apply(cmd) {
                    queue.push_back(follow);
                }
            }
        }
    }

    /// Carries out one scheduler command; `Some` is an event to feed back at once.
    fn apply(&mut self, cmd: Sched) -> Option<Event> {
        match cmd {
            Sched::Dispatch(node) => self.dispatch(node),
            Sched::Skip(node, why) => {
                let note = match why {
                    SkipReason::DependencyFailed(dep) => {
                        format!("{} failed", self.plan.tasks[dep].id)
                    }
                    SkipReason::RunStopped => {
                        "the run stopped after a failure (use --continue to keep going)".to_owned()
                    }
                    SkipReason::Interrupted => "the run was interrupted".to_owned(),
                };
                self.finish_skipped(node, note);
                None
            }
            Sched::Abort(node) | Sched::StopPersistent(node) => {
                self.state[node].stopping = true;
                if let Some(attempt) = self.state[node].live {
                    self.push(Command::Cancel(attempt));
                }
                None
            }
            Sched::Done { ok } => {
                self.deferred_done = Some(ok);
                self.try_finish_run();
                None
            }
        }
    }

    fn begin(&mut self) {
        match self.hit_queries() {
            Some(queries) => self.push(Command::ResolveHits(queries)),
            None => self.feed(Event::Start),
        }
    }

    fn interrupt(&mut self) {
        if self.interrupted {
            return;
        }
        self.interrupted = true;
        self.cancel_reruns();
        self.feed(Event::Interrupt);
        self.try_finish_run();
    }

    /// Ends the run once the scheduler is done and no proof is outstanding.
    pub(super) fn try_finish_run(&mut self) {
        if self.ended {
            return;
        }
        let outstanding = self.reruns.outstanding();
        let Some(ok) = decide::run_may_end(self.deferred_done, outstanding, self.interrupted)
        else {
            return;
        };
        if self.cache.is_some() && !self.hit_keys.is_empty() {
            let keys = std::mem::take(&mut self.hit_keys);
            self.push(Command::Touch(keys));
        }
        self.release_all();
        let summary = RunSummary {
            ok: decide::run_ok(ok, &self.state, self.interrupted),
            interrupted: self.interrupted,
            wall_ms: self.now.as_millis() as u64,
            tasks: self.state.iter_mut().filter_map(|t| t.report.take()).collect(),
        };
        self.ended = true;
        self.push(Command::Finish(summary));
    }

    /// Reports `node` skipped, with `note` saying why.
    fn finish_skipped(&mut self, node: usize, note: String) {
        let r = self.report(
            node,
            TaskStatus::Skipped,
            CacheStatus::Uncached,
            None,
            0,
            ExecStats::default(),
            Some(note),
        );
        self.finish(node, r);
    }

    /// What the run's cache allows for `node`: nothing while it has no key (an upstream
    /// it folds by outputs is unresolved, [`crate::keys::progressive`]).
    pub(super) fn cache_use(&self, node: usize) -> CacheUse {
        let policy = self.cache.as_ref().filter(|c| c.keys.key(node).is_some()).map(|c| c.policy);
        CacheUse::of(&self.plan.tasks[node], policy, self.options.upstreams)
    }

    pub(super) fn cacheable(&self, node: usize) -> bool {
        self.cache_use(node).cacheable
    }

    #[expect(clippy::too_many_arguments, reason = "a report's fields, each its own")]
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

    /// Files `node`'s final report and announces it (held while proofs about it run).
    pub(super) fn finish(&mut self, node: usize, mut report: TaskReport) {
        // An early re-run not confirmed by now never will be: no longer awaited.
        self.withdraw_early_rerun(node);
        // Verdicts concluded before the final report (the inputs proof) go first.
        let mut verdicts = std::mem::take(&mut self.state[node].pending);
        verdicts.append(&mut report.verdicts);
        report.verdicts = verdicts;
        self.state[node].report = Some(report.clone());
        self.announce_finished(node, report);
        self.compare_confirmed_rerun(node);
    }

    /// Whether tasks run on farm workers (exec roots fed by the coordinator).
    pub(super) fn farm_worker(&self) -> bool {
        matches!(self.exec, ExecMode::ExecRoot { local_source: None, .. })
    }

    /// A restore, lookup or read answered after an interrupt: the task is reported aborted.
    pub(super) fn finish_interrupted(&mut self, node: usize) {
        let r = self.report(
            node,
            TaskStatus::Aborted,
            CacheStatus::Uncached,
            None,
            0,
            ExecStats::default(),
            None,
        );
        self.finish(node, r);
        self.feed(Event::Finished { node, ok: false });
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
pub(super) mod machine_tests;
