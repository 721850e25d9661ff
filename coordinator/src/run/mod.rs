//! Running a plan: the per-run scheduler actor and the link to workers.
//!
//! - [`plan`]: graph → resolved specs ([`RunPlan`]).
//! - [`actor`]: [`RunActor`], the kameo shell around the sans-IO scheduler core: it carries
//!   out dispatch/skip/abort commands, sends assignments down a [`WorkSink`], turns worker
//!   reports into run events, and returns a `RunSummary`.

pub mod actor;
pub mod plan;

use std::future::Future;
use std::pin::Pin;

use prova_protocol::work::ToWorker;
use tokio::sync::mpsc;

pub use actor::{Begin, CachePolicy, Interrupt, RunActor, RunArgs, RunCache, RunOptions};
pub use plan::{PlannedTask, RunPlan, TaskKind};

/// The link is gone: the worker (or the farm dispatcher) stopped.
#[derive(Debug, thiserror::Error)]
#[error("the worker link is closed")]
pub struct LinkClosed;

/// Where a run's assignments and cancels go: the in-process worker's channel in local mode,
/// the farm's dispatcher in the farm.
pub trait WorkSink: Send + Sync + 'static {
    /// Delivers one message (waits while the link is full).
    fn send(
        &self,
        msg: ToWorker,
    ) -> Pin<Box<dyn Future<Output = Result<(), LinkClosed>> + Send + '_>>;
}

impl WorkSink for mpsc::Sender<ToWorker> {
    fn send(
        &self,
        msg: ToWorker,
    ) -> Pin<Box<dyn Future<Output = Result<(), LinkClosed>> + Send + '_>> {
        Box::pin(async move { mpsc::Sender::send(self, msg).await.map_err(|_| LinkClosed) })
    }
}
