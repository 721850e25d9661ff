//! What operators and the HTTP listener ask the farm actor (a part of it, beside its shell):
//! drain and release a worker (`prova farm drain|release`), the farm's status, what it holds,
//! what it counted.

use std::collections::HashMap;
use std::convert::Infallible;

use kameo::prelude::*;
use prova_protocol::wire::{FarmStatus, WorkerStatus};
use prova_protocol::{TaskId, WorkerId};

use super::super::core::{CoreHeld, FarmCounts, FarmEvent};
use super::FarmActor;

/// `prova farm drain`: take a worker out; the reply is how many tasks it still runs, or why
/// not (no such worker).
pub struct DrainWorker(pub WorkerId);

/// A drain named a worker the farm does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no worker {0} on the farm")]
pub struct UnknownWorker(pub WorkerId);

impl Message<DrainWorker> for FarmActor {
    type Reply = Result<u32, UnknownWorker>;
    async fn handle(
        &mut self,
        DrainWorker(id): DrainWorker,
        _ctx: &mut Context<Self, Self::Reply>,
    ) -> Self::Reply {
        let running = self.core.running().filter(|(w, _)| **w == id).count() as u32;
        if !self.core.workers().any(|(w, _, _)| *w == id) {
            return Err(UnknownWorker(id));
        }
        tracing::info!(worker = %id, running, "draining worker");
        self.feed(FarmEvent::Drain { id }).await;
        Ok(running)
    }
}

/// `prova farm release`: a quarantined worker may take work again; the reply is why it had
/// been quarantined (`None`: it was not).
pub struct ReleaseWorker(pub WorkerId);

impl Message<ReleaseWorker> for FarmActor {
    type Reply = Result<Option<String>, Infallible>;
    async fn handle(
        &mut self,
        ReleaseWorker(id): ReleaseWorker,
        _ctx: &mut Context<Self, Self::Reply>,
    ) -> Self::Reply {
        let was = self.core.quarantined().find(|(w, _)| **w == id).map(|(_, r)| r.to_owned());
        if was.is_some() {
            tracing::info!(worker = %id, "worker released from quarantine");
        }
        self.feed(FarmEvent::Release { id }).await;
        Ok(was)
    }
}

/// The farm's state.
pub struct GetStatus;

impl Message<GetStatus> for FarmActor {
    type Reply = Result<FarmStatus, Infallible>;
    async fn handle(&mut self, _: GetStatus, _ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        // Running tasks come from the live leases: a lease that expired or was lost is gone
        // from here even while the worker's connection lingers.
        let mut running: HashMap<&WorkerId, Vec<TaskId>> = HashMap::new();
        for (worker, task) in self.core.running() {
            running.entry(worker).or_default().push(task.clone());
        }
        running.values_mut().for_each(|v| v.sort());
        let quarantined: HashMap<&WorkerId, &str> = self.core.quarantined().collect();
        let workers = self
            .core
            .workers()
            .map(|(id, caps, busy)| {
                let link = self.links.get(id);
                WorkerStatus {
                    id: id.clone(),
                    slots: caps.slots,
                    busy,
                    platform: format!("{}/{}", caps.os, caps.arch),
                    labels: caps.labels.clone(),
                    sandbox: link.map(|l| l.info.sandbox.clone()).unwrap_or_default(),
                    running: running.remove(id).unwrap_or_default(),
                    version: link.map(|l| l.version.clone()).unwrap_or_default(),
                    health: link.and_then(|l| l.health.clone()),
                    quarantined: quarantined.get(id).map(|r| (*r).to_owned()),
                    silent: self.core.is_silent(id),
                }
            })
            .collect();
        Ok(FarmStatus {
            workers,
            queued: self.core.queued() as u32,
            runs: self.runs.len() as u32,
            coordinator: None,
        })
    }
}

/// What the farm holds for runs now: its core's per-run state and the runs it routes to.
pub struct GetHeld;

impl Message<GetHeld> for FarmActor {
    type Reply = Result<(CoreHeld, usize), Infallible>;
    async fn handle(&mut self, _: GetHeld, _ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        Ok((self.core.held(), self.runs.len()))
    }
}

/// What the farm counted (lease expiries, requeues), for `/metrics`.
pub struct GetCounts;

impl Message<GetCounts> for FarmActor {
    type Reply = Result<FarmCounts, Infallible>;
    async fn handle(&mut self, _: GetCounts, _ctx: &mut Context<Self, Self::Reply>) -> Self::Reply {
        Ok(self.core.counts())
    }
}
