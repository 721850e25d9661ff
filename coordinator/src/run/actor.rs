//! The run actor: the kameo shell around the run's state machine ([`Run`]). It feeds the
//! machine every input — `Begin`, `Interrupt`, a worker's report, the answer of a lookup,
//! restore, save, read or comparison it started — and carries out every command the
//! machine yields, in order: run events down the event channel, assignments and cancels down
//! the [`WorkSink`], cache-layer calls (off the actor, through [`OwnedTask`]; the IO of the
//! longer ones in [`super::effects`]), ledger rows, the post-run check of undeclared writes
//! ([`super::written`]), and the summary. Every decision is the machine's.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::WorkerId;
use prova_protocol::events::{NoticeLevel, RunEvent, RunSummary};
use prova_protocol::task::OwnedTask;
use prova_protocol::work::FromWorker;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::WorkSink;
use super::effects::{self, Background};
use super::machine::{CacheSide, Command, Input, Run, Setup};
use super::types::RunActorArgs;
use crate::layers::CacheLayer;

/// Stop the run: abort running tasks, skip the rest.
#[derive(Debug)]
pub struct Interrupt;

/// Start the run.
#[derive(Debug)]
pub struct Begin;

/// A report relayed by the farm, with the worker it came from.
pub struct FromFarm {
    /// The report (already translated to this run's attempt id).
    pub msg: FromWorker,
    /// Where it ran.
    pub worker: WorkerId,
}

/// The answer of work the actor started off itself, for the machine; `side`: the node whose
/// task in [`RunActor::side`] it ends.
struct Answer {
    side: Option<usize>,
    input: Input,
}

/// The run actor.
pub struct RunActor {
    /// The run itself: every decision and its order.
    run: Run,
    /// The cache layer, when the run has a cache.
    layer: Option<Arc<dyn CacheLayer>>,
    work: Arc<dyn WorkSink>,
    events: mpsc::Sender<RunEvent>,
    done: Option<oneshot::Sender<RunSummary>>,
    /// When the run began: the machine's clock.
    started: Instant,
    /// Lookups, restores, saves and reads in flight, by node (aborted if the actor stops).
    side: HashMap<usize, OwnedTask<()>>,
    /// Ledger writes and comparisons, waited for at the end.
    background: Background,
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
        Ok(Self {
            run,
            layer,
            work: args.work,
            events: args.events,
            done: Some(args.done),
            started: Instant::now(),
            side: HashMap::new(),
            background: Background::default(),
            written,
            _live: LiveRun::new(),
        })
    }
}

impl RunActor {
    /// Hands `input` to the machine and carries out what it asks, in order.
    async fn step(&mut self, input: Input, ctx: &mut Context<Self, ()>) {
        self.run.handle(self.started.elapsed(), input);
        while let Some(cmd) = self.run.poll() {
            self.execute(cmd, ctx).await;
        }
    }

    /// Carries out one command; an immediate answer goes back to the machine at once.
    async fn execute(&mut self, cmd: Command, ctx: &mut Context<Self, ()>) {
        let now = self.started.elapsed();
        match cmd {
            Command::Emit(ev) => {
                let _ = self.events.send(ev).await;
            }
            Command::ResolveHits(queries) => {
                let result = match &self.layer {
                    Some(layer) => layer.resolve_current(queries).await,
                    None => Ok(Vec::new()),
                };
                self.run.handle(now, Input::HitsResolved(result));
            }
            Command::Assign { assignment, hints } => {
                let attempt = assignment.attempt;
                if self.work.assign(*assignment, hints).await.is_err() {
                    self.run.handle(now, Input::AssignFailed(attempt));
                }
            }
            Command::Cancel(attempt) => {
                if self.work.cancel(attempt).await.is_err() {
                    self.run.handle(now, Input::CancelFailed(attempt));
                }
            }
            Command::Discard(path) => {
                let _ = std::fs::remove_file(path);
            }
            Command::WatchBefore { node, project_dir, check } => {
                self.written.before_run(node, &project_dir, check);
            }
            Command::WatchAfter { node, ok } => self.check_written(node, ok).await,
            Command::Touch(keys) => {
                if let Some(layer) = &self.layer {
                    let _ = layer.touch(keys).await;
                }
            }
            Command::Finish(summary) => {
                self.background.drain().await;
                if let Some(done) = self.done.take() {
                    let _ = done.send(summary);
                }
                ctx.stop();
            }
            other => self.start_off_actor(other, ctx),
        }
    }

    /// Warns when a task run in place wrote beside its outputs (`run::written`).
    async fn check_written(&mut self, node: usize, ok: bool) {
        let spec = &self.run.plan().tasks[node].spec;
        let globs = prova_protocol::globs::PathGlobs::new(&spec.project_dir, &spec.outputs)
            .unwrap_or_else(|_| prova_protocol::globs::PathGlobs::empty());
        let task = spec.id.clone();
        if let Some(message) = self.written.after_run(node, task.as_str(), &globs, ok) {
            let ev = RunEvent::Notice { task: Some(task), level: NoticeLevel::Warn, message };
            let _ = self.events.send(ev).await;
        }
    }

    /// Starts a lookup, restore, save, read, ledger row or comparison off the actor; its
    /// answer comes back as an [`Answer`].
    fn start_off_actor(&mut self, cmd: Command, ctx: &mut Context<Self, ()>) {
        let me = ctx.actor_ref().clone();
        if let Command::ReadOutputs { node, root, globs } = cmd {
            self.side.insert(node, read_outputs(me, node, root, globs));
            return;
        }
        // The rest are the layer's: a run without a cache asks for none of them.
        let Some(layer) = self.layer.clone() else { return };
        match cmd {
            Command::Probe { node, key } => {
                let task = OwnedTask::spawn("run.probe", async move {
                    let result = layer.lookup(vec![key]).await.map(|mut found| found.remove(&key));
                    let input = Input::Probed { node, key, result };
                    let _ = me.tell(Answer { side: Some(node), input }).await;
                });
                self.side.insert(node, task);
            }
            Command::Restore { node, entry, globs } => {
                let project = self.run.plan().tasks[node].spec.project_dir.clone();
                let task = OwnedTask::spawn("run.restore", async move {
                    let result = layer.restore(*entry, globs, project).await;
                    let input = Input::Restored { node, result };
                    let _ = me.tell(Answer { side: Some(node), input }).await;
                });
                self.side.insert(node, task);
            }
            Command::Save(job) => {
                let node = job.node;
                let task = OwnedTask::spawn("run.save", async move {
                    let input = Input::Saved(Box::new(effects::save(layer, *job).await));
                    let _ = me.tell(Answer { side: Some(node), input }).await;
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
                    let input = Input::ProofDone { node, verdict };
                    let _ = me.tell(Answer { side: None, input }).await;
                });
            }
            // Carried out in `execute`.
            _ => {}
        }
    }
}

/// Reads an assumed task's outputs on disk off the actor.
fn read_outputs(
    me: ActorRef<RunActor>,
    node: usize,
    root: std::path::PathBuf,
    globs: prova_protocol::globs::PathGlobs,
) -> OwnedTask<()> {
    OwnedTask::spawn("run.assume", async move {
        let result = effects::read_outputs(root, globs).await;
        let input = Input::OutputsRead { node, result };
        let _ = me.tell(Answer { side: Some(node), input }).await;
    })
}

impl Message<Answer> for RunActor {
    type Reply = ();

    async fn handle(&mut self, m: Answer, ctx: &mut Context<Self, Self::Reply>) {
        if let Some(node) = m.side {
            self.side.remove(&node);
        }
        self.step(m.input, ctx).await;
    }
}

impl Message<Begin> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Begin, ctx: &mut Context<Self, Self::Reply>) {
        self.started = Instant::now();
        self.step(Input::Begin, ctx).await;
    }
}

impl Message<Interrupt> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Interrupt, ctx: &mut Context<Self, Self::Reply>) {
        self.step(Input::Interrupt, ctx).await;
    }
}

impl Message<FromFarm> for RunActor {
    type Reply = ();

    async fn handle(&mut self, m: FromFarm, ctx: &mut Context<Self, Self::Reply>) {
        self.step(Input::Worker { msg: m.msg, worker: Some(m.worker) }, ctx).await;
    }
}

impl Message<FromWorker> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: FromWorker, ctx: &mut Context<Self, Self::Reply>) {
        self.step(Input::Worker { msg, worker: None }, ctx).await;
    }
}
