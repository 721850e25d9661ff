//! The run actor: the kameo shell around [`Scheduler`]. It owns one run: feeds scheduler
//! events, carries out its commands, keeps the attempt → node map (so a report for an attempt
//! it no longer holds is ignored), and reports events and the final summary.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::events::{
    CacheStatus, NoticeLevel, RunEvent, RunSummary, TaskReport, TaskStatus,
};
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::work::{Assignment, Finished, FromWorker, Placement, ToWorker};
use prova_protocol::{AttemptId, WorkerId};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::WorkSink;
use super::plan::{RunPlan, TaskKind};
use crate::scheduler::core::{Command, Event, Options, Scheduler, SkipReason};

/// Knobs of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// `-j`.
    pub concurrency: usize,
    /// `--continue`.
    pub continue_on_failure: bool,
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
}

/// Stop the run: abort running tasks, skip the rest.
#[derive(Debug)]
pub struct Interrupt;

/// Start the run.
#[derive(Debug)]
pub struct Begin;

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
    interrupted: bool,
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
            interrupted: false,
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
            Command::Dispatch(node) => self.dispatch(node).await,
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
                self.finish(node, TaskStatus::Skipped, None, 0, ExecStats::default(), Some(note))
                    .await;
                None
            }
            Command::Abort(node) | Command::StopPersistent(node) => {
                self.stopping[node] = true;
                if let Some(attempt) = self.live[node]
                    && self.work.send(ToWorker::Cancel { attempt }).await.is_err()
                {
                    return Some(self.lost(node).await);
                }
                None
            }
            Command::Done { ok } => {
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

    async fn dispatch(&mut self, node: usize) -> Option<Event> {
        let task = &self.plan.tasks[node];
        if task.kind == TaskKind::Group {
            self.finish(node, TaskStatus::Succeeded, None, 0, ExecStats::default(), None).await;
            return Some(Event::Finished { node, ok: true });
        }
        let attempt = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        self.attempts.insert(attempt, node);
        self.live[node] = Some(attempt);
        let assignment = Assignment {
            attempt,
            spec: task.spec.clone(),
            placement: Placement::InPlace { workspace_root: self.plan.root.clone() },
            clean_outputs: false,
            collect_outputs: false,
            pack_to: None,
            perturb: None,
        };
        if self.work.send(ToWorker::Assign(Box::new(assignment))).await.is_err() {
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
        self.finish(node, TaskStatus::Failed, None, 0, ExecStats::default(), Some(note)).await;
        Event::Finished { node, ok: false }
    }

    async fn finish(
        &mut self,
        node: usize,
        status: TaskStatus,
        exit: Option<ExitKind>,
        attempts: u32,
        stats: ExecStats,
        note: Option<String>,
    ) {
        let report = TaskReport {
            task: self.plan.tasks[node].id.clone(),
            status,
            cache: CacheStatus::Uncached,
            exit,
            attempts,
            stats,
            key: None,
            worker: (attempts > 0).then(|| self.worker.clone()),
            note,
        };
        self.reports[node] = Some(report.clone());
        let _ = self.events.send(RunEvent::TaskFinished(report)).await;
    }

    async fn on_finished(&mut self, f: Finished) -> Option<Event> {
        let node = self.attempts.remove(&f.attempt)?;
        self.live[node] = None;
        let persistent = self.plan.tasks[node].kind == TaskKind::Persistent;
        let status = match &f.exit {
            _ if persistent && self.stopping[node] && !self.interrupted => TaskStatus::Succeeded,
            ExitKind::Aborted => TaskStatus::Aborted,
            e if e.success() => TaskStatus::Succeeded,
            _ => TaskStatus::Failed,
        };
        let note = match (&status, &f.exit) {
            (TaskStatus::Failed, e) => Some(e.describe()),
            _ => None,
        };
        if f.log_omitted > 0 {
            let _ = self
                .events
                .send(RunEvent::Notice {
                    task: Some(self.plan.tasks[node].id.clone()),
                    level: NoticeLevel::Info,
                    message: format!(
                        "{} bytes of output were omitted from the stored log",
                        f.log_omitted
                    ),
                })
                .await;
        }
        let ok = status == TaskStatus::Succeeded;
        self.finish(node, status, Some(f.exit), f.tries, f.stats, note).await;
        Some(Event::Finished { node, ok })
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
                    let task = self.plan.tasks[node].id.clone();
                    let _ = self.events.send(RunEvent::TaskReady { task }).await;
                    self.feed(Event::Ready { node }, ctx).await;
                }
            }
            FromWorker::Finished(f) => {
                if let Some(ev) = self.on_finished(*f).await {
                    self.feed(ev, ctx).await;
                }
            }
        }
    }
}
