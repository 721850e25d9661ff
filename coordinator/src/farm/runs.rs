//! The runs clients submit, driven by the farm actor itself: each run's [`Shell`] (its state
//! machine and the IO around it) lives in the farm actor, so a worker's report reaches the
//! run in the turn the core accepts it, and what the run hands out in answer is placed by
//! the core in that same turn — no queue, forwarder or mailbox between the farm and a run.
//! Nothing a run does there waits: its events go into a queue sized for every event that
//! must arrive ([`EventSink::NeverWait`]), its cache calls run off the actor and answer
//! with [`RunAnswer`].

use std::collections::VecDeque;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::digest::Fold;
use prova_protocol::events::RunEvent;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Assignment, FromWorker, Placement};
use prova_protocol::{Digest, RunId, WorkerId};
use tokio::sync::mpsc;

use super::actor::FarmActor;
use super::core::{FarmEvent, Item, Origin, Requirements};
use crate::run::shell::{Answer, Answers, EventSink, Outward, Shell};
use crate::run::shell::{OUTPUT_ALLOWANCE, event_reserve};
use crate::run::{AssignHints, RunPlan, RunShellArgs};

/// A submitted run, as the farm holds it.
pub(super) struct FarmRun {
    shell: Shell,
    /// The cache namespace it writes: executions are shared within it only.
    namespace: String,
}

/// The event queue of a run of `plan` (see [`EventSink::NeverWait`]): the sender for
/// [`StartRun`] and the receiver its client's relay drains.
pub(crate) fn run_events(plan: &RunPlan) -> (EventSink, mpsc::Receiver<RunEvent>) {
    let reserve = event_reserve(plan);
    let (tx, rx) = mpsc::channel(reserve.saturating_add(OUTPUT_ALLOWANCE));
    (EventSink::NeverWait { tx, reserve }, rx)
}

/// Start a submitted run; the reply is its id.
pub(crate) struct StartRun {
    /// What it is built from (its events: [`run_events`]).
    pub(crate) args: RunShellArgs,
    /// The cache namespace it writes.
    pub(crate) namespace: String,
}

impl Message<StartRun> for FarmActor {
    type Reply = Result<RunId, std::convert::Infallible>;

    async fn handle(&mut self, m: StartRun, ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        let run = self.new_run_id();
        let shell = Shell::new(m.args, answers_to(ctx.actor_ref().downgrade(), run));
        self.runs.insert(run, FarmRun { shell, namespace: m.namespace });
        let mut out = Vec::new();
        if let Some(r) = self.runs.get_mut(&run) {
            r.shell.begin(&mut out).await;
        }
        let queue = self.placed(run, out);
        self.feed_all(queue).await;
        Ok(run)
    }
}

/// Answers of a run's work off the farm actor come back to it as [`RunAnswer`]s.
fn answers_to(farm: WeakActorRef<FarmActor>, run: RunId) -> Answers {
    Arc::new(move |side, input| {
        let farm = farm.clone();
        Box::pin(async move {
            if let Some(farm) = farm.upgrade() {
                let _ = farm.tell(RunAnswer { run, answer: Answer { side, input } }).await;
            }
        })
    })
}

/// The answer of a lookup, restore, save, read or comparison a run started off the actor.
pub(crate) struct RunAnswer {
    run: RunId,
    answer: Answer,
}

impl Message<RunAnswer> for FarmActor {
    type Reply = ();

    async fn handle(&mut self, m: RunAnswer, _ctx: &mut Context<Self, ()>) {
        let Some(r) = self.runs.get_mut(&m.run) else { return };
        let mut out = Vec::new();
        r.shell.answer(m.answer, &mut out).await;
        let queue = self.placed(m.run, out);
        self.feed_all(queue).await;
    }
}

/// Stop a run (its client interrupted it, or went away).
pub(crate) struct InterruptRun(pub(crate) RunId);

impl Message<InterruptRun> for FarmActor {
    type Reply = ();

    async fn handle(&mut self, m: InterruptRun, _ctx: &mut Context<Self, ()>) {
        let Some(r) = self.runs.get_mut(&m.0) else { return };
        let mut out = Vec::new();
        r.shell.interrupt(&mut out).await;
        let queue = self.placed(m.0, out);
        self.feed_all(queue).await;
    }
}

impl FarmActor {
    /// Hands a worker's report (translated to the run's attempt id) to its run, in this
    /// turn; what the run hands out in answer joins `queue` for the core.
    pub(super) async fn deliver(
        &mut self,
        run: RunId,
        msg: FromWorker,
        worker: WorkerId,
        queue: &mut VecDeque<FarmEvent>,
    ) {
        let Some(r) = self.runs.get_mut(&run) else { return };
        let mut out = Vec::new();
        r.shell.report(msg, worker, &mut out).await;
        queue.extend(self.placed(run, out));
    }

    /// The core's events for what run `run` handed out; a run that is over is ended here
    /// (its ledger waited for off the actor, then its summary handed back).
    fn placed(&mut self, run: RunId, out: Vec<Outward>) -> VecDeque<FarmEvent> {
        let Some(r) = self.runs.get_mut(&run) else { return VecDeque::new() };
        let events = out
            .into_iter()
            .map(|work| match work {
                Outward::Assign { assignment, hints } => {
                    FarmEvent::Submit(Box::new(item_of(run, &r.namespace, *assignment, hints)))
                }
                Outward::Cancel(attempt) => FarmEvent::Cancel(Origin { run, attempt }),
            })
            .collect();
        if r.shell.is_over() {
            let finish = r.shell.finish();
            drop(OwnedTask::spawn("farm.run.finish", finish).detach());
            self.runs.remove(&run);
            self.run_over(run);
        }
        events
    }
}

/// The item the core places for an assignment of run `run`.
fn item_of(run: RunId, namespace: &str, assignment: Assignment, hints: AssignHints) -> Item {
    let blobs = match &assignment.placement {
        Placement::ExecRoot { inputs, upstream, .. } => {
            inputs.iter().map(|i| i.digest).chain(upstream.iter().map(|(d, _)| *d)).collect()
        }
        Placement::InPlace { .. } => Vec::new(),
    };
    Item {
        origin: Origin { run, attempt: assignment.attempt },
        reqs: requirements(&hints),
        priority: hints.priority,
        avoid: hints.avoid,
        key: hints.key.map(|k| dedup_key(namespace, &k)),
        blobs,
        assignment,
    }
}

fn requirements(hints: &AssignHints) -> Requirements {
    let mut r = Requirements::default();
    if let Some((os, arch)) = hints.platform.as_deref().and_then(|p| p.split_once('/')) {
        r.os = Some(os.to_owned());
        r.arch = Some(arch.to_owned());
    }
    r.labels = hints.labels.clone();
    r
}

/// The key two runs' executions are shared under: the task key within the run's trust tier.
/// A trusted (ci) run never waits on, and adopts, an execution a client run asked for.
pub(super) fn dedup_key(namespace: &str, key: &Digest) -> Digest {
    Fold::new("prova.farm.dedup.v1").str(namespace).digest(key).finish()
}

#[cfg(test)]
mod dedup_tests {
    use super::*;

    #[test]
    fn executions_are_shared_within_a_trust_tier_only() {
        let k = Digest::of(b"task key");
        let other = Digest::of(b"another key");
        assert_eq!(dedup_key("trusted", &k), dedup_key("trusted", &k));
        assert_ne!(dedup_key("trusted", &k), dedup_key("untrusted", &k));
        assert_ne!(dedup_key("trusted", &k), dedup_key("trusted", &other));
    }
}
