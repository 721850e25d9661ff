//! A connected worker: its control stream carries `WorkerMsg` in and `CoordinatorMsg` out.
//! The session registers the worker with the farm actor and relays; when the stream ends
//! the worker is gone and its leases are requeued.

use std::sync::Arc;

use prova_protocol::WorkerId;
use prova_protocol::transport::{Identity, frame};
use prova_protocol::wire::{CoordinatorMsg, WorkerMsg};

use super::actor::{FromWorkerSession, WorkerDown, WorkerUp};
use super::error::EdgeError;
use super::forward::{Stream, Traced, forward};
use super::server::Shared;

/// Messages queued for one worker at least (assignments, cancels, refusals). The farm sends
/// an assignment only into a free slot and a cancel or refusal only for an attempt the worker
/// holds or reported, so a queue of [`worker_queue`] never fills: the farm never waits on a
/// worker, however slowly it reads.
pub const WORKER_QUEUE: usize = 256;

/// The queue of a worker with `slots`: room for an assignment, a cancel and a refusal per
/// slot, and then some.
pub fn worker_queue(slots: u32) -> usize {
    (slots as usize).saturating_mul(3).saturating_add(WORKER_QUEUE)
}

/// Runs the session until the worker goes. `Err` (a reason for the peer) when it does not
/// begin by registering: a worker certificate gets the worker API and nothing else.
pub async fn run(
    send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    identity: Identity,
    version: String,
    shared: Arc<Shared>,
) -> Result<(), EdgeError> {
    let id = WorkerId(identity.name.clone());
    let info = match frame::read_msg::<_, WorkerMsg>(&mut recv).await {
        Ok(Some(WorkerMsg::Register(info))) => info,
        Ok(None) => return Ok(()),
        other => {
            tracing::info!(worker = %id, "expected Register, got {other:?}");
            return Err(EdgeError::NotRegistered { id });
        }
    };
    let (tx, writer) =
        forward::<CoordinatorMsg, _>("farm->worker", worker_queue(info.slots), Stream(send));
    if shared.farm.tell(WorkerUp { id: id.clone(), info, version, tx: tx.clone() }).await.is_err() {
        return Ok(());
    }
    loop {
        match frame::read_msg::<_, WorkerMsg>(&mut recv).await {
            Ok(Some(msg)) => {
                if let WorkerMsg::Report(r) = &msg {
                    let attempt = r.attempt().map(|a| a.0);
                    tracing::debug!(hop = "worker->farm", kind = r.kind(), attempt, %id, "forward");
                }
                if shared.farm.tell(FromWorkerSession { id: id.clone(), msg }).await.is_err() {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::info!(worker = %id, "control stream: {e}");
                break;
            }
        }
    }
    let _ = shared.farm.tell(WorkerDown { id, tx }).await;
    drop(writer);
    Ok(())
}
