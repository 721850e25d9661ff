//! The IO side of one run, for whoever drives it: the run actor in local mode
//! ([`super::actor`]), the farm actor for the runs clients submit (`farm/runs.rs`). A
//! [`Shell`] holds the run's state machine ([`Run`]), feeds it every input and carries out
//! what it yields — run events into the event queue, cache-layer calls off the driver
//! (through [`OwnedTask`]; the IO of the longer ones in [`super::effects`]), ledger rows, the
//! post-run check of undeclared writes ([`super::written`]) — except assignments and
//! cancels, which it hands back as [`Outward`] work for the driver to place. Nothing here
//! waits on a worker, a farm or another run; with [`EventSink::NeverWait`] nothing here
//! waits at all, so one task may drive many shells.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use prova_protocol::AttemptId;
use prova_protocol::events::{NoticeLevel, RunEvent, RunSummary};
use prova_protocol::task::OwnedTask;
use prova_protocol::work::Assignment;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::AssignHints;
use super::effects::{self, Background};
use super::machine::{CacheSide, Command, Input, Run, Setup};
use super::types::RunShellArgs;
use crate::layers::CacheLayer;

/// Work the driver carries out: hand an attempt out, or cancel one.
#[derive(Debug)]
pub(crate) enum Outward {
    /// Place this attempt; if that fails, answer `Input::AssignFailed` (local mode only).
    Assign { assignment: Box<Assignment>, hints: AssignHints },
    /// Cancel this attempt (it still reports `Finished`).
    Cancel(AttemptId),
}

/// Where the answer of work started off the driver goes back: the driver's own mailbox.
/// `side`: the node whose task in the shell's side table it ends.
pub(crate) type Answers =
    Arc<dyn Fn(Option<usize>, Input) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The answer of work started off the driver, for [`Shell::answer`].
pub(crate) struct Answer {
    pub(crate) side: Option<usize>,
    pub(crate) input: Input,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer").field("side", &self.side).finish_non_exhaustive()
    }
}

/// Where a run's events go.
pub(crate) enum EventSink {
    /// Waits while the queue is full: a local run's renderer keeps up, or the run waits.
    Wait(mpsc::Sender<RunEvent>),
    /// Never waits (the farm drives many runs in one task, and a client that stops reading
    /// must not stall it). The queue holds `reserve` events that must arrive (sized from the
    /// plan: [`event_reserve`]) and live output beyond them, which is dropped once less than
    /// `reserve` is free (the task's log still has it). Should an event that must arrive
    /// find it full all the same, the run is interrupted: its client stopped reading.
    NeverWait { tx: mpsc::Sender<RunEvent>, reserve: usize },
}

/// Live output a farm run may have queued beyond its reserve before more is dropped.
pub(crate) const OUTPUT_ALLOWANCE: usize = 4096;

/// Events that must reach a run's client and that it can emit, all told: per task, a start
/// per try of its execution and of a determinism re-run, its ready, its final report, two
/// verdicts, a restored log and a few notices.
pub(crate) fn event_reserve(plan: &super::RunPlan) -> usize {
    plan.tasks
        .iter()
        .map(|t| 2 * (t.spec.retries as usize + 1) + 16)
        .fold(64usize, usize::saturating_add)
}

/// The IO side of one run.
pub(crate) struct Shell {
    /// The run itself: every decision and its order.
    run: Run,
    /// The cache layer, when the run has a cache.
    layer: Option<Arc<dyn CacheLayer>>,
    events: EventSink,
    /// Live output dropped so far (logged once).
    dropped: u64,
    done: Option<oneshot::Sender<RunSummary>>,
    /// The summary, once the machine handed it out (taken by [`Shell::finish`]).
    summary: Option<RunSummary>,
    answers: Answers,
    /// When the run began: the machine's clock.
    started: Instant,
    /// Lookups, restores, saves and reads in flight, by node (aborted with the shell).
    side: HashMap<usize, OwnedTask<()>>,
    /// Ledger writes and comparisons, waited for at the end.
    background: Background,
    /// Snapshots for the post-run check of undeclared writes (`run::written`).
    written: super::written::Watch,
    /// Inputs that arrived while the first batch of hits was being resolved (the machine
    /// takes nothing before that answer); `None`: not resolving.
    held: Option<Vec<Input>>,
    /// Counts this run in [`live_run_actors`] until dropped.
    _live: LiveRun,
}

/// Inputs held while hits resolve: only an interrupt can come then (nothing was handed out).
const HELD_MAX: usize = 16;

static LIVE_RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs whose state is alive in this process: a coordinator with no run going holds none
/// (what `prova farm status --json` reports as `held.run_actors`).
pub fn live_run_actors() -> u64 {
    LIVE_RUNS.load(std::sync::atomic::Ordering::Relaxed)
}

/// One count of [`live_run_actors`], given back when dropped.
struct LiveRun;

impl LiveRun {
    fn new() -> Self {
        LIVE_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        LIVE_RUNS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Shell {
    /// The shell of a run of `args`, not begun; answers of work it starts off the driver
    /// go to `answers`.
    pub(crate) fn new(args: RunShellArgs, answers: Answers) -> Self {
        let (layer, cache) = match args.cache {
            Some(c) => {
                let side = CacheSide {
                    layer: c.layer.name(),
                    policy: c.policy,
                    keys: c.keys,
                    hits: c.hits,
                    staging: c.staging,
                    protected: c.protected,
                };
                (Some(c.layer), Some(side))
            }
            None => (None, None),
        };
        let written = super::written::Watch::new(args.plan.root.clone(), args.plan.tasks.len());
        let run = Run::new(Setup {
            plan: args.plan,
            options: args.options,
            weights: args.weights,
            worker: args.worker,
            first_attempt: args.first_attempt,
            cache,
            exec: args.exec,
            local_proof_sources: args.local_proof_sources,
            pid: std::process::id(),
            host_lang: std::env::var("LANG").unwrap_or_default(),
        });
        Self {
            run,
            layer,
            events: args.events,
            dropped: 0,
            done: Some(args.done),
            summary: None,
            answers,
            started: Instant::now(),
            side: HashMap::new(),
            background: Background::default(),
            written,
            held: None,
            _live: LiveRun::new(),
        }
    }

    /// Starts the run (its clock starts now); work to place goes into `out`.
    pub(crate) async fn begin(&mut self, out: &mut Vec<Outward>) {
        self.started = Instant::now();
        self.step(Input::Begin, out).await;
    }

    /// Stops the run: running tasks aborted, the rest skipped.
    pub(crate) async fn interrupt(&mut self, out: &mut Vec<Outward>) {
        self.step(Input::Interrupt, out).await;
    }

    /// A worker's report; `worker`: where it ran.
    pub(crate) async fn report(
        &mut self,
        msg: prova_protocol::work::FromWorker,
        worker: prova_protocol::WorkerId,
        out: &mut Vec<Outward>,
    ) {
        self.step(Input::Worker { msg, worker: Some(worker) }, out).await;
    }

    /// The answer of work started off the driver.
    pub(crate) async fn answer(&mut self, answer: Answer, out: &mut Vec<Outward>) {
        if let Some(node) = answer.side {
            self.side.remove(&node);
        }
        self.step(answer.input, out).await;
    }

    /// Hands `input` to the machine and carries out what it asks, in order; work to place
    /// goes into `out`.
    pub(crate) async fn step(&mut self, input: Input, out: &mut Vec<Outward>) {
        let mut next = Some(input);
        while let Some(input) = next.take() {
            if let Some(held) = &mut self.held {
                match input {
                    Input::HitsResolved(_) => {}
                    other => {
                        if held.len() < HELD_MAX {
                            held.push(other);
                        }
                        continue;
                    }
                }
            }
            let resolved = matches!(input, Input::HitsResolved(_));
            self.run.handle(self.started.elapsed(), input);
            let mut stop = false;
            while let Some(cmd) = self.run.poll() {
                stop |= self.execute(cmd, out).await;
            }
            if resolved && let Some(held) = self.held.take() {
                for input in held {
                    Box::pin(self.step(input, out)).await;
                }
            }
            if stop {
                next = Some(Input::Interrupt);
            }
        }
    }

    /// Whether the machine handed its summary out: the driver calls [`Shell::finish`].
    pub(crate) fn is_over(&self) -> bool {
        self.summary.is_some()
    }

    /// What ends the run once it is over: wait (bounded) for its ledger writes and
    /// comparisons, then hand the summary back. Work still in flight is aborted with the
    /// shell.
    pub(crate) fn finish(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let mut background = std::mem::take(&mut self.background);
        let done = self.done.take();
        let summary = self.summary.take();
        async move {
            background.drain().await;
            if let (Some(done), Some(summary)) = (done, summary) {
                let _ = done.send(summary);
            }
        }
    }

    /// Carries out one command; `true`: the run must stop (its client stopped reading).
    async fn execute(&mut self, cmd: Command, out: &mut Vec<Outward>) -> bool {
        match cmd {
            Command::Emit(ev) => return self.emit(ev).await,
            Command::Assign { assignment, hints } => {
                out.push(Outward::Assign { assignment, hints })
            }
            Command::Cancel(attempt) => out.push(Outward::Cancel(attempt)),
            Command::Discard(path) => {
                let _ = std::fs::remove_file(path);
            }
            Command::WatchBefore { node, project_dir, check } => {
                self.written.before_run(node, &project_dir, check);
            }
            Command::WatchAfter { node, ok } => return self.check_written(node, ok).await,
            Command::Finish(summary) => self.summary = Some(summary),
            other => self.start_off_driver(other),
        }
        false
    }

    /// Sends a run event; `true`: one that must arrive found no room (see [`EventSink`]).
    async fn emit(&mut self, ev: RunEvent) -> bool {
        let (tx, reserve) = match &self.events {
            EventSink::Wait(tx) => {
                let _ = tx.send(ev).await;
                return false;
            }
            EventSink::NeverWait { tx, reserve } => (tx, *reserve),
        };
        if matches!(ev, RunEvent::Output { .. }) && tx.capacity() <= reserve {
            if self.dropped == 0 {
                tracing::warn!("the run's client is not keeping up: dropping live output");
            }
            self.dropped += 1;
            return false;
        }
        match tx.try_send(ev) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!("the run's client stopped reading its events: stopping the run");
                true
            }
        }
    }

    /// Warns when a task run in place wrote beside its outputs (`run::written`).
    async fn check_written(&mut self, node: usize, ok: bool) -> bool {
        let spec = &self.run.plan().tasks[node].spec;
        let globs = prova_protocol::globs::PathGlobs::new(&spec.project_dir, &spec.outputs)
            .unwrap_or_else(|_| prova_protocol::globs::PathGlobs::empty());
        let task = spec.id.clone();
        match self.written.after_run(node, task.as_str(), &globs, ok) {
            Some(message) => {
                let ev = RunEvent::Notice { task: Some(task), level: NoticeLevel::Warn, message };
                self.emit(ev).await
            }
            None => false,
        }
    }

    /// Starts a lookup, restore, save, read, ledger row or comparison off the driver; its
    /// answer comes back through [`Shell::answers`].
    fn start_off_driver(&mut self, cmd: Command) {
        let answers = self.answers.clone();
        if let Command::ReadOutputs { node, root, globs } = cmd {
            let task = OwnedTask::spawn("run.assume", async move {
                let result = effects::read_outputs(root, globs).await;
                answers(Some(node), Input::OutputsRead { node, result }).await;
            });
            self.side.insert(node, task);
            return;
        }
        if let Command::ResolveHits(queries) = cmd {
            self.held = Some(Vec::new());
            let layer = self.layer.clone();
            self.background.spawn("run.resolve", async move {
                let result = match layer {
                    Some(layer) => layer.resolve_current(queries).await,
                    None => Ok(Vec::new()),
                };
                answers(None, Input::HitsResolved(result)).await;
            });
            return;
        }
        // The rest are the layer's: a run without a cache asks for none of them.
        let Some(layer) = self.layer.clone() else { return };
        match cmd {
            Command::Probe { node, key } => {
                let task = OwnedTask::spawn("run.probe", async move {
                    let result = layer.lookup(vec![key]).await.map(|mut found| found.remove(&key));
                    answers(Some(node), Input::Probed { node, key, result }).await;
                });
                self.side.insert(node, task);
            }
            Command::Restore { node, entry, globs } => {
                let project = self.run.plan().tasks[node].spec.project_dir.clone();
                let task = OwnedTask::spawn("run.restore", async move {
                    let result = layer.restore(*entry, globs, project).await;
                    answers(Some(node), Input::Restored { node, result }).await;
                });
                self.side.insert(node, task);
            }
            Command::Save(job) => {
                let node = job.node;
                let task = OwnedTask::spawn("run.save", async move {
                    let input = Input::Saved(Box::new(effects::save(layer, *job).await));
                    answers(Some(node), input).await;
                });
                self.side.insert(node, task);
            }
            Command::Record { mut execution, staged } => {
                execution.time_ms = crate::layers::local::now_ms();
                self.background.spawn("run.ledger", async move {
                    if let Err(e) = layer.record(*execution, staged).await {
                        tracing::warn!("recording an execution in the ledger failed: {e}");
                    }
                });
            }
            Command::Diff(job) => {
                let node = job.node;
                self.background.spawn("run.proof.diff", async move {
                    let verdict = effects::diff(layer, *job).await;
                    answers(None, Input::ProofDone { node, verdict }).await;
                });
            }
            Command::Touch(used) => {
                self.background.spawn("run.touch", async move {
                    let _ = layer.touch(used).await;
                });
            }
            // Carried out in `execute`.
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod shell_tests;
