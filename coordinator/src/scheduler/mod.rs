//! Scheduling: the sans-IO [`core`] that decides what runs next; [`defaults`]: run-level
//! retries and timeouts.
pub mod core;
pub mod defaults;

use prova_protocol::TaskId;

use crate::plan::{RunPlan, TaskKind};

/// The scheduler's view of a [`RunPlan`]: here rather than in `crate::plan`, which sits
/// below the scheduler (in the `prova-analysis` crate, so an inherent method cannot be added
/// here).
pub trait SchedPlan {
    /// Edges, weights (`history` gives recorded durations in ms) and persistent flags.
    fn sched_plan(&self, history: &dyn Fn(&TaskId) -> Option<u64>) -> core::Plan;
}

impl SchedPlan for RunPlan {
    fn sched_plan(&self, history: &dyn Fn(&TaskId) -> Option<u64>) -> core::Plan {
        core::Plan {
            deps: self.tasks.iter().map(|t| t.deps.clone()).collect(),
            weight: self.tasks.iter().map(|t| history(&t.id).unwrap_or(1)).collect(),
            persistent: self.tasks.iter().map(|t| t.kind == TaskKind::Persistent).collect(),
        }
    }
}
