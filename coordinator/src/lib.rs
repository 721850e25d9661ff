//! prova's coordinator: workspace loading, task graph, keys, layered cache, scheduler,
//! verification, farm server (brief §4). It never depends on the worker crate: workers are
//! reached through [`run::WorkSink`] and the `prova_protocol::work` messages.
//!
//! # Layout
//! Modules form layers; each imports only modules below it (`tests/layers.rs` checks it, and
//! ARCHITECTURE.md draws it). Bottom to top:
//! - model (crate `prova-model`) — [`location`] (`file:line:col`), [`suggest`]
//!   (did-you-mean), [`lockfile`] (per-project externals), [`workspace`] (the resolved
//!   model: [`workspace::Workspace`], its projects and their merged
//!   [`workspace::TaskDef`]s), [`graph`] (`project#task` nodes and edges, the `--filter`
//!   grammar, rendering), [`config`] (reading `prova.toml` and `package.json` into the
//!   model, [`config::ConfigError`], `Workspace::load`).
//! - store (crate `prova-store`) — [`cache`]: the SQLite index, blob files, memo,
//!   durations, fingerprint ledger and its owner thread.
//! - analysis (crate `prova-analysis`) — [`plan`] (a selected graph as a
//!   [`plan::RunPlan`]), [`inputs`] (the file list and each task's inputs), [`digests`]
//!   (file digests through the stat memo), [`trees`] (installed trees), [`keys`] (every
//!   task's key).
//! - cache layers (crate `prova-layers`) — [`layers`]: local (restore into the workspace),
//!   farm, REAPI.
//! - preparation — [`prepare`] (everything before the first task), [`selection`] (`--all`,
//!   `-p`, `--filter`, `--affected`).
//! - run — [`scheduler`] (the sans-IO scheduling core), [`run`] (a run's decisions,
//!   sans-IO, and the actor that carries them out), [`hermeticity`] (the report from the
//!   ledger), [`remote_exec`] (executing on an existing REAPI farm).
//! - farm — [`farm`]: sans-IO placement and leases, the farm actor, the QUIC server.
//! - http — [`http`]: the read-only HTTP listener: health, `/metrics`, the dashboard.
//! - start — [`start`]: a coordinator's start-up (cache, farm actor, QUIC endpoint, HTTP).

// The four lowest layers are crates of their own (`coordinator/model`, `coordinator/store`,
// `coordinator/analysis`, `coordinator/layers`), re-exported under their old paths.
pub use prova_analysis::{digests, inputs, keys, plan, trees};
pub use prova_layers as layers;
pub use prova_model::{config, graph, location, lockfile, suggest, workspace};
pub use prova_store as cache;
pub mod farm;
pub mod hermeticity;
pub mod http;
pub mod prepare;
pub mod remote_exec;
pub mod run;
pub mod scheduler;
pub mod selection;
pub mod start;
