//! The one forwarder of farm messages: a bounded queue drained, in order, into a [`Hop`] (an
//! actor's mailbox or a peer's control stream) by one [`OwnedTask`] named after the hop.
//! Whoever sends into the queue never waits on the far side's mailbox or socket — that is
//! what keeps the farm out of the deadlock `flow_tests.rs` guards against (the farm waiting
//! on a run's mailbox while the run waits on the farm's).
//!
//! Every message forwarded is logged at debug level under the hop's name with what it
//! carries ([`Traced`]): `RUST_LOG=prova_coordinator::farm=debug` shows the path of one
//! assignment (`client->farm`, `farm->worker`, `worker->farm`, `run->client`, `farm->client`; see
//! ARCHITECTURE.md, "A farm assignment, hop by hop").

use std::future::Future;

use kameo::prelude::*;
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::frame;
use prova_protocol::wire::{CoordinatorMsg, CoordinatorReply};
use prova_protocol::work::{FromWorker, ToWorker};
use prova_protocol::{AttemptId, TaskId};
use tokio::sync::mpsc;

/// The far side of a hop is gone: the forwarder stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopClosed;

/// Where a forwarder delivers.
pub trait Hop<M>: Send + 'static {
    /// Delivers one message; waits while the far side is busy.
    fn deliver(&mut self, msg: M) -> impl Future<Output = Result<(), HopClosed>> + Send;

    /// Called once the queue is closed and drained (e.g. to finish a stream).
    fn finish(&mut self) {}
}

impl<A, M> Hop<M> for ActorRef<A>
where
    A: Actor + Message<M, Reply = ()>,
    M: Send + 'static,
{
    async fn deliver(&mut self, msg: M) -> Result<(), HopClosed> {
        self.tell(msg).await.map_err(|_| HopClosed)
    }
}

/// A peer's control stream: each message one frame.
pub struct Stream(pub quinn::SendStream);

impl<M: serde::Serialize + Send + Sync + 'static> Hop<M> for Stream {
    async fn deliver(&mut self, msg: M) -> Result<(), HopClosed> {
        frame::write_msg(&mut self.0, &msg).await.map_err(|_| HopClosed)
    }

    fn finish(&mut self) {
        let _ = self.0.finish();
    }
}

/// What a forwarded message is, for the hop's debug log: its kind and, when it concerns one
/// attempt, which (the run's attempt id on the run side, the lease id on the worker side).
pub trait Traced {
    /// The message's kind.
    fn kind(&self) -> &'static str;
    /// The attempt it concerns.
    fn attempt(&self) -> Option<AttemptId> {
        None
    }
    /// The task, on the messages that carry it (an assignment): it ties the run's attempt id
    /// to the lease id the farm gives the same work.
    fn task(&self) -> Option<&TaskId> {
        None
    }
}

impl Traced for FromWorker {
    fn kind(&self) -> &'static str {
        match self {
            Self::Started { .. } => "Started",
            Self::Output { .. } => "Output",
            Self::Ready { .. } => "Ready",
            Self::Finished(_) => "Finished",
        }
    }
    fn attempt(&self) -> Option<AttemptId> {
        Some(match self {
            Self::Started { attempt, .. } | Self::Output { attempt, .. } => *attempt,
            Self::Ready { attempt } => *attempt,
            Self::Finished(f) => f.attempt,
        })
    }
}

impl Traced for CoordinatorMsg {
    fn kind(&self) -> &'static str {
        match self {
            Self::Work(ToWorker::Assign(_)) => "Assign",
            Self::Work(ToWorker::Cancel { .. }) => "Cancel",
            Self::Refused { .. } => "Refused",
            Self::Leave => "Leave",
        }
    }
    fn attempt(&self) -> Option<AttemptId> {
        Some(match self {
            Self::Work(ToWorker::Assign(a)) => a.attempt,
            Self::Work(ToWorker::Cancel { attempt }) | Self::Refused { attempt, .. } => *attempt,
            Self::Leave => return None,
        })
    }
    fn task(&self) -> Option<&TaskId> {
        match self {
            Self::Work(ToWorker::Assign(a)) => Some(&a.spec.id),
            _ => None,
        }
    }
}

impl Traced for CoordinatorReply {
    fn kind(&self) -> &'static str {
        match self {
            Self::Missing { .. } => "Missing",
            Self::Accepted { .. } => "Accepted",
            Self::Event(_) => "Event",
            Self::Artifact(_) => "Artifact",
            Self::Done(_) => "Done",
            Self::Status(_) => "Status",
            Self::Hermeticity(_) => "Hermeticity",
            Self::Error { .. } => "Error",
            Self::Draining { .. } => "Draining",
            Self::Released { .. } => "Released",
        }
    }
}

/// Starts the forwarder of hop `hop` into `to`, with a queue of `capacity`. The task ends
/// once every sender is dropped and the queue drained, or when `to` is gone; dropping the
/// handle aborts it (`detach` it to let the queue drain after its owner is gone).
pub fn forward<M, H>(
    hop: &'static str,
    capacity: usize,
    mut to: H,
) -> (mpsc::Sender<M>, OwnedTask<()>)
where
    M: Traced + Send + 'static,
    H: Hop<M>,
{
    let (tx, mut rx) = mpsc::channel::<M>(capacity);
    let task = OwnedTask::spawn(hop, async move {
        while let Some(msg) = rx.recv().await {
            tracing::debug!(
                hop,
                kind = msg.kind(),
                attempt = msg.attempt().map(|a| a.0),
                task = msg.task().map(tracing::field::display),
                "forward"
            );
            if to.deliver(msg).await.is_err() {
                tracing::debug!(hop, "the far side is gone");
                return;
            }
        }
        to.finish();
    });
    (tx, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prova_protocol::spec::ExitKind;
    use prova_protocol::work::Finished;

    /// A hop that records what reached it and can be closed.
    struct Recorder {
        seen: mpsc::UnboundedSender<Option<AttemptId>>,
        close_after: usize,
    }

    impl Hop<FromWorker> for Recorder {
        async fn deliver(&mut self, msg: FromWorker) -> Result<(), HopClosed> {
            if self.close_after == 0 {
                return Err(HopClosed);
            }
            self.close_after -= 1;
            self.seen.send(msg.attempt()).map_err(|_| HopClosed)
        }

        fn finish(&mut self) {
            let _ = self.seen.send(None);
        }
    }

    fn started(n: u64) -> FromWorker {
        FromWorker::Started { attempt: AttemptId(n), try_no: 1 }
    }

    #[tokio::test]
    async fn messages_arrive_in_order_then_the_hop_is_finished() {
        let (seen, mut got) = mpsc::unbounded_channel();
        let (tx, task) = forward("test", 4, Recorder { seen, close_after: usize::MAX });
        for n in 1..=10 {
            tx.send(started(n)).await.unwrap();
        }
        let done =
            FromWorker::Finished(Box::new(Finished::never_ran(AttemptId(11), ExitKind::Code(0))));
        tx.send(done).await.unwrap();
        drop(tx);
        task.join().await.unwrap();
        let mut order = Vec::new();
        while let Some(a) = got.recv().await {
            order.push(a);
        }
        let want: Vec<_> = (1..=11).map(|n| Some(AttemptId(n))).chain([None]).collect();
        assert_eq!(order, want, "in order, then finish");
    }

    #[tokio::test]
    async fn a_closed_hop_stops_the_forwarder_and_closes_its_queue() {
        let (seen, _got) = mpsc::unbounded_channel();
        let (tx, task) = forward("test", 4, Recorder { seen, close_after: 1 });
        tx.send(started(1)).await.unwrap();
        tx.send(started(2)).await.unwrap();
        task.join().await.unwrap();
        assert!(tx.send(started(3)).await.is_err(), "the queue is closed with its forwarder");
    }
}
