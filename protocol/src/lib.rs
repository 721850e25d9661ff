//! The contract between prova's coordinator, workers and clients. Depends on no other prova
//! crate; everything here is plain data and pure functions.
//!
//! # Layout
//! - [`ids`]: newtype ids (`TaskId` = `project#task`, `RunId`, `AttemptId`, `WorkerId`).
//! - [`digest`]: BLAKE3-256 content digests and the canonical `Fold` used for keys.
//! - [`globs`]: input/output patterns (project-relative, `//` workspace, `!` exclusions).
//! - [`spec`]: `TaskSpec`, what a worker executes; `ExitKind`, `ExecStats`.
//! - [`manifest`]: output manifests, fingerprints and tree diffs.
//! - [`artifact`]: deterministic tar+zstd packing and safe, bounded restore.
//! - [`events`]: the run event stream a client renders.
//! - [`task`]: `OwnedTask`, the one way prova spawns: named, spanned, aborted on drop.
//! - [`work`]: the worker link: assignments, cancels, and what workers report.

pub mod artifact;
pub mod digest;
pub mod events;
pub mod globs;
pub mod ids;
pub mod manifest;
pub mod spec;
pub mod task;
pub mod work;

pub use digest::Digest;
pub use ids::{AttemptId, RunId, TaskId, WorkerId};
