//! The run actor: a kameo mailbox around a run's [`Shell`] for the runs of this process
//! (local mode, a REAPI farm). It feeds the shell `Begin`, `Interrupt`, a worker's report
//! and the answers of the work the shell started off it, and sends the assignments and
//! cancels the shell hands back down its [`WorkSink`]. The runs a farm's clients submit
//! have no actor: the farm actor drives their shells itself (`farm/runs.rs`).

use std::convert::Infallible;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::WorkerId;
use prova_protocol::work::FromWorker;

use super::WorkSink;
use super::machine::Input;
use super::shell::{Answer, Answers, Outward, Shell};
use super::types::RunActorArgs;

/// Stop the run: abort running tasks, skip the rest.
#[derive(Debug)]
pub struct Interrupt;

/// Start the run.
#[derive(Debug)]
pub struct Begin;

/// A report with the worker it ran on (a REAPI executor's bots).
pub struct FromFarm {
    /// The report.
    pub msg: FromWorker,
    /// Where it ran.
    pub worker: WorkerId,
}

/// The run actor.
pub struct RunActor {
    shell: Shell,
    work: Arc<dyn WorkSink>,
}

impl Actor for RunActor {
    type Args = RunActorArgs;
    type Error = Infallible;

    async fn on_start(args: Self::Args, me: ActorRef<Self>) -> Result<Self, Self::Error> {
        let (args, work) = args.split();
        let answers: Answers = Arc::new(move |side, input| {
            let me = me.clone();
            Box::pin(async move {
                let _ = me.tell(Answer { side, input }).await;
            })
        });
        Ok(Self { shell: Shell::new(args, answers), work })
    }
}

impl RunActor {
    /// Places the work the shell handed back; an assignment or cancel whose link is gone
    /// goes back to the machine.
    async fn place(&mut self, mut out: Vec<Outward>, ctx: &mut Context<Self, ()>) {
        while !out.is_empty() {
            let mut failed = Vec::new();
            for work in out.drain(..) {
                match work {
                    Outward::Assign { assignment, hints } => {
                        let attempt = assignment.attempt;
                        if self.work.assign(*assignment, hints).await.is_err() {
                            failed.push(Input::AssignFailed(attempt));
                        }
                    }
                    Outward::Cancel(attempt) => {
                        if self.work.cancel(attempt).await.is_err() {
                            failed.push(Input::CancelFailed(attempt));
                        }
                    }
                }
            }
            for input in failed {
                self.shell.step(input, &mut out).await;
            }
        }
        if self.shell.is_over() {
            self.shell.finish().await;
            ctx.stop();
        }
    }
}

impl Message<Answer> for RunActor {
    type Reply = ();

    async fn handle(&mut self, m: Answer, ctx: &mut Context<Self, Self::Reply>) {
        let mut out = Vec::new();
        self.shell.answer(m, &mut out).await;
        self.place(out, ctx).await;
    }
}

impl Message<Begin> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Begin, ctx: &mut Context<Self, Self::Reply>) {
        let mut out = Vec::new();
        self.shell.begin(&mut out).await;
        self.place(out, ctx).await;
    }
}

impl Message<Interrupt> for RunActor {
    type Reply = ();

    async fn handle(&mut self, _: Interrupt, ctx: &mut Context<Self, Self::Reply>) {
        let mut out = Vec::new();
        self.shell.interrupt(&mut out).await;
        self.place(out, ctx).await;
    }
}

impl Message<FromFarm> for RunActor {
    type Reply = ();

    async fn handle(&mut self, m: FromFarm, ctx: &mut Context<Self, Self::Reply>) {
        let mut out = Vec::new();
        let input = Input::Worker { msg: m.msg, worker: Some(m.worker) };
        self.shell.step(input, &mut out).await;
        self.place(out, ctx).await;
    }
}

impl Message<FromWorker> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: FromWorker, ctx: &mut Context<Self, Self::Reply>) {
        let mut out = Vec::new();
        self.shell.step(Input::Worker { msg, worker: None }, &mut out).await;
        self.place(out, ctx).await;
    }
}
