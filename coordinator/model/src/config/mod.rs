//! Reading prova's configuration files into the resolved [`Workspace`](crate::workspace)
//! model (brief §3).
//!
//! # Layout
//! - [`schema`]: the typed shape of each file kind (`deny_unknown_fields`, spans kept), with
//!   every field's default and unit documented.
//! - [`parse`]: one TOML file → its schema struct; syntax, unknown-key and wrong-type errors
//!   are turned into [`ConfigError`]s with a `file:line:col`.
//! - [`task`]: checks each `[tasks.X]` table and merges project overrides over the workspace
//!   defaults field by field into a [`TaskDef`](crate::workspace::TaskDef).
//! - [`discover`]: finds the workspace root (upward search) and the project directories (the
//!   `projects` globs, honouring `.gitignore`).
//! - [`package_json`]: a project's name, workspace dependencies, scripts and `workspaces`
//!   from its `package.json`.
//! - [`js`]: project globs from a JS workspace's own list, tasks from `package.json` scripts.
//! - [`load`]: the whole load, in order: root → projects → names → deps → tasks.
//! - [`policy`]: the knobs never keyed (`verify`, `verify_ignore`, `side_effects`) and
//!   the `runtime` commands a task declares.
//! - [`outputs`]: the rule that confines every output pattern to its task's project.
//! - [`overlap`]: no output may be able to match a declared input ([`intersect`]: whether
//!   two globs can match one path).
//! - [`error`]: [`ConfigError`]; [`suggest()`]: the did-you-mean helper.

pub mod discover;
pub mod error;
pub mod intersect;
pub mod js;
pub mod load;
pub mod outputs;
pub mod overlap;
pub mod package_json;
pub mod parse;
pub mod policy;
pub mod reapi;
pub mod schema;
pub mod task;

#[cfg(test)]
mod tests;

pub use crate::location::{LineIndex, Located, Location, line_col, shown_path};
pub use crate::suggest::suggest;
pub use error::ConfigError;

/// The name of every prova config file: the workspace root's and each project's.
pub const CONFIG_FILE: &str = "prova.toml";

/// The JSON Schema of both config file kinds, for editors (`schemas/prova.toml.json`; printed
/// by `prova schema config`, written by `prova init`). `tests/tests/config_schema.rs` keeps it
/// equal to [`schema::TableKind`]'s key lists.
pub const JSON_SCHEMA: &str = include_str!("../../../../schemas/prova.toml.json");
