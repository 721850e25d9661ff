//! prova's analysis of a workspace before any task runs: the plan, the file list and each
//! task's inputs, digests, installed trees, keys — the layer of the coordinator's crates
//! above `prova-model` and `prova-store`. It knows nothing of cache layers, runs or the
//! farm; `prova-coordinator` re-exports its modules under their old paths.
//!
//! # Layout (bottom to top; a module imports only those before it)
//! - [`plan`]: a selected graph as a [`plan::RunPlan`].
//! - [`inputs`]: the workspace file list and each task's inputs; what no clean may delete.
//! - [`digests`]: file digests through the stat memo.
//! - [`trees`]: installed trees (`node_modules`, …) scanned and keyed.
//! - [`keys`]: every task's key, and its completion once upstreams are resolved.

// The layers below under the names the coordinator gives them, so `crate::cache`,
// `crate::workspace`, … read as they did when these modules lived in the coordinator.
use prova_model::{config, graph, lockfile, workspace};
use prova_store as cache;

pub mod digests;
pub mod inputs;
pub mod keys;
pub mod plan;
pub mod trees;
