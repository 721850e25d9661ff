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
//! - [`scheduler`]: the sans-IO scheduling core (`(now, event) -> commands`).
//! - [`run`]: a run's plan (resolved specs) and the run actor that drives the scheduler.
//! - [`cache`]: the local cache store (SQLite index, blob files, memo) and its owner thread.

pub mod cache;
pub mod config;
pub mod farm;
pub mod graph;
pub mod inputs;
pub mod keys;
pub mod layers;
pub mod prepare;
pub mod run;
pub mod scheduler;
pub mod workspace;
