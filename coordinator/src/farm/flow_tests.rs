//! Flow control between the farm actor and the runs it drives: a run that submits
//! thousands of ready tasks while their reports stream back must finish (when runs were
//! actors of their own and each side waited on the other's mailbox, a 2,000-task remote run
//! hung before its first event, and `farm status` with it), and a run whose client stops
//! reading must not stall the farm or another run.
//!
//! The worker here is a peer stand-in on the farm's real worker link: it answers every
//! assignment at once with `Started` and a successful `Finished`, which is the fastest a
//! report stream can come back and so the hardest case for the farm.

use std::time::Duration;

use kameo::prelude::*;
use prova_protocol::events::TaskStatus;
use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
use prova_protocol::task::OwnedTask;
use prova_protocol::wire::{CoordinatorMsg, WorkerInfo, WorkerMsg};
use prova_protocol::work::{Finished, FromWorker, Isolation, ToWorker};
use prova_protocol::{TaskId, WorkerId};
use tokio::sync::{mpsc, oneshot};

use super::actor::{FarmActor, FromWorkerSession, WorkerUp};
use super::client_session::FARM_RUN_CONCURRENCY;
use super::runs::{StartRun, run_events};
use super::worker_session::WORKER_QUEUE;
use crate::run::plan::{PlannedTask, RunPlan, TaskKind};
use crate::run::shell::EventSink;
use crate::run::{ExecMode, RunOptions, RunShellArgs, VerifyOptions};

/// Far beyond any healthy run of this size (well under a second); only a stall reaches it.
const STALL: Duration = Duration::from_secs(60);

fn plan(n: usize) -> RunPlan {
    let tasks = (0..n)
        .map(|i| {
            let id = TaskId::new(&format!("p{i}"), "build");
            PlannedTask {
                id: id.clone(),
                project: usize::MAX,
                kind: TaskKind::Command,
                spec: TaskSpec::new(id, format!("p{i}"), CommandLine::Shell("true".into())),
                cacheable: false,
                deps: vec![],
                requested: true,
                inputs: vec![],
            }
        })
        .collect();
    RunPlan { root: "/nonexistent".into(), tasks }
}

/// Registers a worker with `slots` that reports every assignment done as soon as it arrives.
async fn instant_worker(farm: &ActorRef<FarmActor>, name: &str, slots: u32) {
    let id = WorkerId(name.into());
    let (tx, mut rx) = mpsc::channel::<CoordinatorMsg>(WORKER_QUEUE);
    let info = WorkerInfo {
        slots,
        os: std::env::consts::OS.into(),
        arch: std::env::consts::ARCH.into(),
        labels: Default::default(),
        sandbox: "none: test".into(),
        running: vec![],
        health: None,
    };
    farm.tell(WorkerUp { id: id.clone(), info, version: "test".into(), tx })
        .await
        .expect("the farm is up");
    let farm = farm.clone();
    let worker = OwnedTask::spawn("test.instant-worker", async move {
        while let Some(msg) = rx.recv().await {
            let CoordinatorMsg::Work(ToWorker::Assign(a)) = msg else { continue };
            let attempt = a.attempt;
            let mut done = Finished::never_ran(attempt, ExitKind::Code(0));
            done.tries = 1;
            done.isolation = Isolation::Unsandboxed;
            let text = format!("output of {attempt}\n").into_bytes();
            for report in [
                FromWorker::Started { attempt, try_no: 1 },
                FromWorker::Output { attempt, text },
                FromWorker::Finished(Box::new(done)),
            ] {
                let msg = WorkerMsg::Report(report);
                if farm.tell(FromWorkerSession { id: id.clone(), msg }).await.is_err() {
                    return;
                }
            }
        }
    });
    drop(worker.detach());
}

/// Runs `n` independent tasks through the farm; `Some(statuses)` unless it stalled.
async fn run_through_farm(farm: &ActorRef<FarmActor>, n: usize) -> Option<Vec<TaskStatus>> {
    let (events, mut events_rx) = run_events(&plan(n));
    // The client side: events are read as they come.
    let client =
        OwnedTask::spawn("test.client", async move { while events_rx.recv().await.is_some() {} });
    drop(client.detach());
    let done = start_run(farm, n, events).await;
    let summary = tokio::time::timeout(STALL, done).await.ok()?.expect("a summary");
    Some(summary.tasks.iter().map(|t| t.status).collect())
}

/// Starts a run of `n` independent tasks whose events go to `events`.
async fn start_run(
    farm: &ActorRef<FarmActor>,
    n: usize,
    events: EventSink,
) -> oneshot::Receiver<prova_protocol::events::RunSummary> {
    let (done, done_rx) = oneshot::channel();
    let args = RunShellArgs {
        plan: plan(n),
        options: RunOptions {
            concurrency: FARM_RUN_CONCURRENCY,
            continue_on_failure: false,
            verify: VerifyOptions::default(),
            upstreams: Default::default(),
        },
        weights: vec![1; n],
        worker: WorkerId("farm".into()),
        events,
        done,
        first_attempt: 1,
        cache: None,
        exec: ExecMode::ExecRoot { local_source: None, local_blobs: None },
        local_proof_sources: None,
    };
    farm.ask(StartRun { args, namespace: "trusted".into() }).await.expect("started");
    done_rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_ready_tasks_with_instant_reports_do_not_stall_the_farm() {
    let farm = FarmActor::spawn(None);
    instant_worker(&farm, "w1", 16).await;
    instant_worker(&farm, "w2", 16).await;
    let n = 3_000;
    let statuses = run_through_farm(&farm, n)
        .await
        .expect("the run stalled: the farm and its run wait on each other");
    assert_eq!(statuses.len(), n);
    assert!(statuses.iter().all(|s| *s == TaskStatus::Succeeded), "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_at_once_both_finish() {
    let farm = FarmActor::spawn(None);
    instant_worker(&farm, "w1", 8).await;
    let (a, b) = tokio::join!(run_through_farm(&farm, 1_500), run_through_farm(&farm, 1_500));
    for statuses in [a, b] {
        let statuses = statuses.expect("a run stalled");
        assert_eq!(statuses.len(), 1_500);
        assert!(statuses.iter().all(|s| *s == TaskStatus::Succeeded));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_client_stops_reading_does_not_stall_another() {
    let farm = FarmActor::spawn(None);
    instant_worker(&farm, "w1", 8).await;
    // Its client never reads an event (and its queue is far too small): the run is stopped
    // once an event that must arrive finds no room, and ends with a summary.
    let (tx, _unread) = mpsc::channel(4);
    let stuck = start_run(&farm, 2_000, EventSink::NeverWait { tx, reserve: 2 }).await;
    let statuses = run_through_farm(&farm, 500).await.expect("the other run stalled");
    assert!(statuses.iter().all(|s| *s == TaskStatus::Succeeded));
    assert_eq!(statuses.len(), 500);
    let summary = tokio::time::timeout(STALL, stuck).await.expect("the stuck run ended");
    let summary = summary.expect("a summary");
    assert!(summary.interrupted, "{summary:?}");
}
