//! The worker actor: holds the slots and the live attempts, starts an owned task per
//! assignment and cancels on request. Every report goes out on the link (a bounded channel
//! of [`FromWorker`]); the coordinator end of that channel is in-process in local mode and a
//! QUIC session in the farm.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::AttemptId;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Finished, FromWorker, HandBack, ToWorker};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::runner::{WorkerContext, run_assignment};

/// What a worker actor is built from.
pub struct WorkerActorArgs {
    /// What assignments may use on this worker.
    pub context: WorkerContext,
    /// Concurrent assignments this worker accepts.
    pub slots: usize,
    /// Where reports go.
    pub link: mpsc::Sender<FromWorker>,
}

/// The worker actor.
pub struct WorkerActor {
    context: Arc<WorkerContext>,
    slots: usize,
    link: mpsc::Sender<FromWorker>,
    /// Live attempts: the cancel token, the task, and whether it is persistent (a dev
    /// server takes no slot: the scheduler does not count it against `-j` either).
    live: HashMap<AttemptId, (CancellationToken, OwnedTask<()>, bool)>,
}

impl Actor for WorkerActor {
    type Args = WorkerActorArgs;
    type Error = Infallible;

    async fn on_start(args: Self::Args, _me: ActorRef<Self>) -> Result<Self, Self::Error> {
        Ok(Self {
            context: Arc::new(args.context),
            slots: args.slots.max(1),
            link: args.link,
            live: HashMap::new(),
        })
    }

    async fn on_stop(
        &mut self,
        _me: WeakActorRef<Self>,
        _reason: ActorStopReason,
    ) -> Result<(), Self::Error> {
        // Dropping the owned tasks aborts them; cancel first so processes are killed
        // through the executor's SIGTERM → SIGKILL path rather than orphaned.
        for (token, ..) in self.live.values() {
            token.cancel();
        }
        Ok(())
    }
}

/// The attempts running now (heartbeats renew their leases; a re-registration lists them).
pub struct Running;

impl Message<Running> for WorkerActor {
    type Reply = Result<Vec<AttemptId>, Infallible>;

    async fn handle(&mut self, _: Running, _ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        let mut v: Vec<AttemptId> = self.live.keys().copied().collect();
        v.sort();
        Ok(v)
    }
}

/// The worker's health for its registration and heartbeats (`None` without a disk floor:
/// local mode).
pub struct Health;

impl Message<Health> for WorkerActor {
    type Reply = Result<Option<prova_protocol::wire::WorkerHealth>, Infallible>;

    async fn handle(&mut self, _: Health, _ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        Ok(self.context.disk.as_ref().map(|d| d.report()))
    }
}

/// An attempt's task ended; forget it.
struct Done(AttemptId);

impl Message<ToWorker> for WorkerActor {
    type Reply = ();

    async fn handle(&mut self, msg: ToWorker, ctx: &mut Context<Self, Self::Reply>) {
        match msg {
            ToWorker::Assign(a) => {
                let attempt = a.attempt;
                if self.live.contains_key(&attempt) {
                    return; // duplicate delivery
                }
                let regular = self.live.values().filter(|(.., persistent)| !persistent).count();
                if !a.spec.persistent && regular >= self.slots {
                    let _ = self
                        .link
                        .send(FromWorker::Finished(Box::new(Finished::handed_back(
                            attempt,
                            HandBack::NoSlot,
                        ))))
                        .await;
                    return;
                }
                if let Some(why) = self.context.disk.as_ref().and_then(|d| d.check()) {
                    // Short of disk: give back what the blob cache holds, and the task.
                    if let Some(blobs) = &self.context.blobs {
                        let (n, bytes) = blobs.evict_unpinned();
                        if n > 0 {
                            tracing::info!(blobs = n, bytes, "evicted the blob cache");
                        }
                    }
                    let why = HandBack::NoDisk(why);
                    tracing::warn!(%attempt, "handing the assignment back: {}", why.describe());
                    let back = Finished::handed_back(attempt, why);
                    let _ = self.link.send(FromWorker::Finished(Box::new(back))).await;
                    return;
                }
                let persistent = a.spec.persistent;
                let token = CancellationToken::new();
                let (context, link, cancel) =
                    (self.context.clone(), self.link.clone(), token.clone());
                let me = ctx.actor_ref().clone();
                let task = OwnedTask::spawn("worker.assignment", async move {
                    let report = run_assignment(*a, &context, link.clone(), cancel).await;
                    // Free the slot before the report goes out: the coordinator may answer
                    // `Finished` with the next assignment at once, and that must not find the
                    // slot still taken (it would be refused: "no free slot"). The mailbox is
                    // FIFO, so `Done` is handled before any assignment the report causes.
                    let _ = me.tell(Done(attempt)).await;
                    let _ = link.send(FromWorker::Finished(Box::new(report))).await;
                });
                self.live.insert(attempt, (token, task, persistent));
            }
            ToWorker::Cancel { attempt } => {
                if let Some((token, ..)) = self.live.get(&attempt) {
                    token.cancel();
                }
            }
        }
    }
}

impl Message<Done> for WorkerActor {
    type Reply = ();

    async fn handle(&mut self, Done(attempt): Done, _ctx: &mut Context<Self, Self::Reply>) {
        if let Some((_, task, _)) = self.live.remove(&attempt) {
            // It is sending its report: let it finish.
            drop(task.detach());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prova_protocol::TaskId;
    use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
    use prova_protocol::work::{Assignment, Placement};

    use super::*;
    use crate::exec::LocalExecutor;
    use crate::runner::RunnerConfig;

    fn assignment(attempt: u64, root: &std::path::Path) -> ToWorker {
        ToWorker::Assign(Box::new(Assignment {
            attempt: AttemptId(attempt),
            spec: TaskSpec::new(TaskId::new("p", "t"), "", CommandLine::Argv(vec!["true".into()])),
            placement: Placement::InPlace {
                workspace_root: root.to_owned(),
                protected: Vec::new(),
            },
            clean_outputs: false,
            collect_outputs: false,
            pack_to: None,
            perturb: None,
            trace_reads: false,
            survey_on_failure: false,
        }))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slot_is_free_by_the_time_its_finished_report_arrives() {
        // A coordinator answers `Finished` with the next assignment at once; on a one-slot
        // worker that assignment must find the slot free, every time.
        let dir = tempfile::tempdir().expect("temp dir");
        let (link, mut reports) = mpsc::channel(256);
        let context = WorkerContext::in_place(Arc::new(LocalExecutor), RunnerConfig::from_host());
        let worker = WorkerActor::spawn(WorkerActorArgs { context, slots: 1, link });
        worker.tell(assignment(1, dir.path())).await.expect("assign");
        let mut n = 1;
        while n <= 200 {
            let msg = tokio::time::timeout(Duration::from_secs(30), reports.recv())
                .await
                .expect("a report within 30 s")
                .expect("the link is open");
            if let FromWorker::Finished(f) = msg {
                assert_eq!(f.exit, ExitKind::Code(0), "attempt {}: {:?}", f.attempt, f.exit);
                n += 1;
                worker.tell(assignment(n, dir.path())).await.expect("assign");
            }
        }
        worker.kill();
    }
}
