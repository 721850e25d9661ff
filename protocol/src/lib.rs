//! The contract between prova's coordinator, workers and clients. Depends on no other prova
//! crate; everything here is plain data and pure functions.
//!
//! # Layout
//! - [`ids`]: newtype ids (`TaskId` = `project#task`, `RunId`, `AttemptId`, `WorkerId`).
//! - [`digest`]: BLAKE3-256 content digests and the canonical `Fold` used for keys.
//! - [`key`]: key components (what a cache key folds), the fold, and their diff for `why`.
//! - [`globs`]: input/output patterns (project-relative, `//` workspace, `!` exclusions).
//! - [`spec`]: `TaskSpec`, what a worker executes; `ExitKind`, `ExecStats`; the names of the
//!   environment every task starts from (`HOST_VARS`, `FIXED_VARS`).
//! - [`manifest`]: output manifests, fingerprints and tree diffs.
//! - [`artifact`]: deterministic tar+zstd packing and safe, bounded restore.
//! - [`events`]: the run event stream a client renders.
//! - [`tree`]: installed trees (`node_modules`): the manifest whose digest keys, ships and
//!   mounts one as a whole.
//! - [`pidname`]: names that carry their owner's pid, and whether that owner is gone.
//! - [`task`]: `OwnedTask`, the one way prova spawns: named, spanned, aborted on drop.
//! - [`wire`]: the farm's messages: `Hello`, worker/client/coordinator enums, blob requests.
//! - [`work`]: the worker link: assignments, cancels, and what workers report.
//! - [`transport`]: the farm's QUIC + mTLS transport: cluster CA and role-bound certificates,
//!   TLS/quinn configs, endpoints, length-prefixed frames and digest-verified blob streams.

pub mod artifact;
pub mod digest;
pub mod events;
pub mod globs;
pub mod ids;
pub mod key;
pub mod manifest;
pub mod pidname;
pub mod spec;
pub mod task;
pub mod transport;
pub mod tree;
pub mod wire;
pub mod work;

pub use digest::Digest;
pub use ids::{AttemptId, RunId, TaskId, WorkerId};
