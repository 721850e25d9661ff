//! prova's workspace model: what a workspace *is*, read from its files — the lowest layer of
//! the coordinator's crates (beside `prova-store`). It knows nothing of keys, caches or runs.
//!
//! # Layout (bottom to top; a module imports only those before it)
//! - [`location`]: `file:line:col` ([`location::Location`]), a value [`location::Located`]
//!   where it was written, line/column arithmetic.
//! - [`suggest`]: did-you-mean suggestions for misspelt names.
//! - [`lockfile`]: per-project external dependencies from `package-lock.json`,
//!   `pnpm-lock.yaml`, `yarn.lock`, `Cargo.lock`.
//! - [`workspace`]: the resolved model — [`workspace::Workspace`], its projects and their
//!   merged [`workspace::TaskDef`]s with their [`workspace::TaskPolicy`].
//! - [`graph`]: `project#task` nodes and edges, the `--filter` grammar, rendering,
//!   [`graph::topo_sort`].
//! - [`config`]: reading `prova.toml` and `package.json` into the model
//!   ([`workspace::Workspace::load`]), [`config::ConfigError`] with `file:line:col` and
//!   did-you-mean help, the check that no output can match an input.

pub mod config;
pub mod graph;
pub mod location;
pub mod lockfile;
pub mod suggest;
pub mod workspace;
