//! prova's worker: runs tasks. It never depends on the coordinator crate: work arrives as
//! `prova_protocol::work::ToWorker` messages and reports leave as `FromWorker`, over an
//! in-process channel (local mode) or a QUIC session (farm).
//!
//! # Layout
//! - [`exec`]: the process executor — runs one command in its own process group with a
//!   cleared environment; timeout/cancel (SIGTERM → grace → SIGKILL on the group), rusage,
//!   merged line-chunked output, bounded log capture, `ready_when`; the [`exec::Executor`] seam.
//! - [`runner`]: one assignment end to end, as stage types in order (checked, placed,
//!   wrapped, executed, collected): command line, environment (baseline + task +
//!   perturbations), tries with retries, output collection and packing.
//! - [`rootprep`]: exec-root placements: fetch or locate the bytes, materialise the root, wrap
//!   the command in the sandbox and the tracer.
//! - [`mask`]: secret values of a task's declared variables masked out of its output and log.
//! - [`remote`]: the `RemoteBlobs` seam to the coordinator (fetch inputs, upload artifacts).
//! - [`outputs`]: cleaning declared outputs before a try; collecting, fingerprinting and
//!   packing them after.
//! - [`health`]: the work dir's staging files (packed artifacts), cleaned at start-up.
//! - [`session`]: the farm worker's QUIC session: dial, `Hello`, register, relay, heartbeat,
//!   redial with backoff; `QuicBlobs` fetches inputs and uploads artifacts.
//! - [`start`]: a farm worker's start-up from resolved settings (work dir, blob cache, actor,
//!   session); the `prova worker` binary only parses flags into [`start::WorkerSettings`].
//! - [`actor`]: the worker actor — slots, live attempts, cancel.
//! - [`blobcache`]: the worker-local, bounded (LRU, pinnable) content-addressed cache that
//!   exec roots are hardlinked from; locality for placement.
//! - [`execroot`]: exec roots — a fresh directory with exactly a task's declared inputs and
//!   upstream outputs, its output directories made, removed on drop.
//! - [`trees`]: installed trees (`node_modules`) materialised once per digest from the blob
//!   cache, which exec roots mount.
//! - [`treecopies`]: without a sandbox, the copies of installed trees that exec roots mirror
//!   with symlinks, watched while tasks use them: a task that writes one fails, its
//!   neighbours run again, and the copy is built afresh.
//! - [`sandbox`]: bubblewrap around a task (read-only root, writable outputs, no network),
//!   host detection, and `strace` to name undeclared reads.
//! - [`perturb`]: a determinism re-run's perturbations on this machine (clock, CPUs, locale,
//!   `TMPDIR`, the root's path and file order), each reported applied or not and why.
//! - [`shmroots`]: exec roots on a tmpfs (`/dev/shm`): re-runs' for their directory order,
//!   first executions' where it has room (a farm worker's too, `--exec-roots`), since small
//!   files cost a disk more than a task.
//! - [`clockshm`]: libfaketime's shared segment for a re-run, made before it and removed
//!   after, so nothing of it stays in `/dev/shm`.

pub mod actor;
pub mod blobcache;
pub mod clockshm;
pub mod exec;
pub mod execroot;
pub mod health;
pub mod mask;
pub mod outputs;
pub mod perturb;
pub mod reapi_bot;
pub mod remote;
pub mod rootprep;
pub mod runner;
pub mod sandbox;
pub mod session;
pub mod shmroots;
pub mod start;
pub mod treecopies;
pub mod trees;
