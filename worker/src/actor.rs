//! The worker actor: holds the slots and the live attempts, starts an owned task per
//! assignment and cancels on request. Every report goes out on the link (a bounded channel
//! of [`FromWorker`]); the coordinator end of that channel is in-process in local mode and a
//! QUIC session in the farm.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::AttemptId;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Finished, FromWorker, ToWorker};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::runner::{WorkerContext, run_assignment};

/// What a worker actor is built from.
pub struct WorkerArgs {
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
    live: HashMap<AttemptId, (CancellationToken, OwnedTask<()>)>,
}

impl Actor for WorkerActor {
    type Args = WorkerArgs;
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
        for (token, _) in self.live.values() {
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
                if self.live.len() >= self.slots {
                    let _ = self
                        .link
                        .send(FromWorker::Finished(Box::new(refused(
                            attempt,
                            "worker has no free slot",
                        ))))
                        .await;
                    return;
                }
                let token = CancellationToken::new();
                let (context, link, cancel) =
                    (self.context.clone(), self.link.clone(), token.clone());
                let me = ctx.actor_ref().clone();
                let task = OwnedTask::spawn("worker.assignment", async move {
                    let report = run_assignment(*a, &context, link.clone(), cancel).await;
                    let _ = link.send(FromWorker::Finished(Box::new(report))).await;
                    let _ = me.tell(Done(attempt)).await;
                });
                self.live.insert(attempt, (token, task));
            }
            ToWorker::Cancel { attempt } => {
                if let Some((token, _)) = self.live.get(&attempt) {
                    token.cancel();
                }
            }
        }
    }
}

impl Message<Done> for WorkerActor {
    type Reply = ();

    async fn handle(&mut self, Done(attempt): Done, _ctx: &mut Context<Self, Self::Reply>) {
        if let Some((_, task)) = self.live.remove(&attempt) {
            drop(task.detach()); // already finished: nothing to abort
        }
    }
}

fn refused(attempt: AttemptId, why: &str) -> Finished {
    let mut f = crate::runner::refused(attempt);
    f.exit = ExitKind::SpawnFailed(why.to_owned());
    f
}
