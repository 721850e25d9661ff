//! Running a plan: the per-run scheduler actor and the link to workers.
//!
//! - [`plan`]: re-exported from [`crate::plan`] (graph → resolved specs, [`RunPlan`]), which
//!   lives below `run` so `inputs` and `keys` import it without reaching up.
//! - [`types`]: what a run is built from ([`RunActorArgs`], [`RunOptions`], [`VerifyOptions`],
//!   [`CachePolicy`], [`ExecMode`]).
//! - `core`: the run's decisions, sans-IO — one `TaskState` per task; a finished
//!   execution's status; refusing a lying worker's report; restoring a hit; trying or
//!   withholding a save; the determinism proof's step after a save; an attempt's shape and
//!   where a re-run may go; when the run may end. Tested without a process (`core_tests.rs`).
//! - `verdicts`: which verdict an execution (inputs proof) or a pair of executions
//!   (determinism proof) earns, as pure functions (`verdicts_tests.rs`).
//! - `reruns`: the determinism proof's bookkeeping, sans-IO — queued and running re-runs,
//!   outstanding proofs, when a report is held or released, early re-runs' results gated
//!   until their first execution's save (`reruns_tests.rs`; whole runs in
//!   `early_rerun_tests.rs`).
//! - `machine`: the run as a state machine, sans-IO (`Run`: `handle(now, input)`, `poll()`
//!   for commands) — the whole order of a run: probe, restore, run, save, prove, report,
//!   finish. Whole runs are tested without a process or a runtime (`machine_tests.rs`). Its
//!   steps by file: `finished` (a primary execution's report), `cached` (hits, restores,
//!   saves), `verify` (proofs: re-runs, ledger rows, reports held until their verdicts are
//!   in), `excluded` (tasks a run did not ask for under `--only` /
//!   `--exclude-dependencies`: restored or assumed from disk, never run).
//! - `shell`: the IO side of one run, for whoever drives it — it feeds the machine inputs
//!   and carries out its commands (events, cache-layer calls off the driver, the longer
//!   ones' IO in `effects`, ledger rows, the summary) and hands assignments and cancels back
//!   to its driver: the run actor, or the farm actor for the runs clients submit.
//! - [`actor`]: [`RunActor`], a kameo mailbox around a shell for this process's runs
//!   (local mode, a REAPI farm): assignments and cancels go down a [`WorkSink`].
//! - [`undeclared`]: which paths a traced run touched are undeclared inputs (and outputs).
//! - `written`: the cheap post-run check of a plain run for files written outside outputs.

pub mod actor;
mod cached;
mod core;
mod dispatch;
mod effects;
mod excluded;
mod finished;
mod machine;
mod reruns;
pub(crate) mod shell;
pub mod types;
pub mod undeclared;
mod verdicts;
mod verify;
mod written;

use std::future::Future;
use std::pin::Pin;

use prova_protocol::AttemptId;
use prova_protocol::work::{Assignment, ToWorker};
use tokio::sync::mpsc;

/// The check of a worker's result against the task's declared outputs: the farm refuses a
/// lie before any run sees it (`farm/trust.rs`), a run refuses one the farm let through.
pub(crate) use self::core::refusal;
pub use crate::plan;
pub use crate::plan::{PlannedTask, RunPlan, TaskKind};
pub use actor::{Begin, FromFarm, Interrupt, RunActor};
pub use shell::live_run_actors;
pub(crate) use types::RunShellArgs;
pub use types::{CachePolicy, ExecMode, RunActorArgs, RunCache, RunOptions, VerifyOptions};
pub use verdicts::sandbox_violation;
pub use verify::perturbation;

/// The link is gone: the worker (or the farm dispatcher) stopped.
#[derive(Debug, thiserror::Error)]
#[error("the worker link is closed")]
pub struct LinkClosed;

/// What placement may use beyond the assignment itself.
#[derive(Clone, Debug, Default)]
pub struct AssignHints {
    /// Critical-path priority (higher first).
    pub priority: u64,
    /// The task's key: identical keys in flight from two runs execute once.
    pub key: Option<prova_protocol::Digest>,
    /// A worker to avoid (a determinism re-run goes elsewhere).
    pub avoid: Option<prova_protocol::WorkerId>,
    /// `os/arch` the task must run on (`None`: portable).
    pub platform: Option<String>,
    /// Labels the worker must carry (the task's `labels`).
    pub labels: std::collections::BTreeMap<String, String>,
}

/// A boxed future of a link operation.
pub type LinkFuture<'a> = Pin<Box<dyn Future<Output = Result<(), LinkClosed>> + Send + 'a>>;

/// Where a run's assignments and cancels go: the in-process worker's channel in local mode,
/// the farm's dispatcher in the farm.
pub trait WorkSink: Send + Sync + 'static {
    /// Hands out one assignment (waits while the link is full).
    fn assign(&self, a: Assignment, hints: AssignHints) -> LinkFuture<'_>;
    /// Cancels an attempt; it still reports `Finished`.
    fn cancel(&self, attempt: AttemptId) -> LinkFuture<'_>;
}

impl WorkSink for mpsc::Sender<ToWorker> {
    fn assign(&self, a: Assignment, _hints: AssignHints) -> LinkFuture<'_> {
        Box::pin(
            async move { self.send(ToWorker::Assign(Box::new(a))).await.map_err(|_| LinkClosed) },
        )
    }

    fn cancel(&self, attempt: AttemptId) -> LinkFuture<'_> {
        Box::pin(
            async move { self.send(ToWorker::Cancel { attempt }).await.map_err(|_| LinkClosed) },
        )
    }
}
