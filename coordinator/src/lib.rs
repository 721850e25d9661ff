//! prova's coordinator: workspace loading, task graph, keys, layered cache, scheduler,
//! verification, farm server (brief §4). It never depends on the worker crate: workers are
//! reached through [`run::WorkSink`] and the `prova_protocol::work` messages.
//!
//! # Layout
//! - [`config`]: reading `prova.toml` and `package.json` files; [`config::ConfigError`]
//!   with `file:line:col` and did-you-mean help; [`config::suggest()`].
//! - [`workspace`]: the resolved model — [`workspace::Workspace`], its projects and their
//!   merged [`workspace::TaskDef`]s — and [`workspace::Workspace::load`].
//! - [`graph`]: `project#task` nodes and edges; selection (`--all`, `-p`, `--filter`,
//!   `--affected`); cycle detection; dot/JSON rendering.
//! - [`inputs`]: the workspace file list (git or a walk) and each task's inputs.
//! - [`keys`]: file digests through the stat memo, and every task's key (`prova_protocol::key`).
//! - [`trees`]: installed trees (`node_modules`): which directories, their manifests and
//!   digests through the stat memo, and which tasks fold each.
//! - [`plan`]: a selected graph resolved into a [`plan::RunPlan`] (one `TaskSpec` per node);
//!   below `run`, so `inputs` and `keys` import it.
//! - [`prepare`]: everything before the first task: plan, inputs, digests, keys.
//! - [`cache`]: the store (SQLite index, blob files, memo, durations, fingerprint ledger) and
//!   its owner thread.
//! - [`layers`]: the cache layers a run uses: local (restore into the workspace) and farm.
//! - [`scheduler`]: the sans-IO scheduling core (`(now, event) -> commands`).
//! - [`run`]: a run: its decisions, sans-IO (`run::core`, `run::verdicts`), and the run actor
//!   that drives the scheduler and carries them out (cache steps, proofs).
//! - [`hermeticity`]: the hermeticity report from the fingerprint ledger.
//! - [`farm`]: the farm: sans-IO placement and leases, the farm actor, the QUIC server and
//!   its worker and client sessions.
//! - [`http`]: the read-only HTTP listener: health, `/metrics`, the dashboard.

pub mod cache;
pub mod config;
pub mod farm;
pub mod graph;
pub mod hermeticity;
pub mod http;
pub mod inputs;
pub mod keys;
pub mod layers;
pub mod lockfile;
pub mod plan;
pub mod prepare;
pub mod run;
pub mod scheduler;
pub mod trees;
pub mod workspace;
