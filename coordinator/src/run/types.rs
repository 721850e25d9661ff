//! What a run is built from: knobs, cache policy, where tasks execute, what to prove.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use prova_protocol::events::{RunEvent, RunSummary};
use prova_protocol::wire::UpstreamMode;
use prova_protocol::{TaskId, WorkerId};
use tokio::sync::{mpsc, oneshot};

use super::WorkSink;
use crate::cache::Entry;
use crate::keys::PlanKeys;
use crate::layers::CacheLayer;
use crate::plan::{PlannedTask, RunPlan};

/// Knobs of a run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// `-j`.
    pub concurrency: usize,
    /// `--continue`.
    pub continue_on_failure: bool,
    /// `--verify`.
    pub verify: VerifyOptions,
    /// `--only` / `--exclude-dependencies`: what becomes of the tasks not asked for.
    pub upstreams: UpstreamMode,
}

/// What a run proves about the tasks it executes (`--verify`, brief §1).
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// Re-run each executed task elsewhere, perturbed, and compare outputs by content.
    pub determinism: bool,
    /// Run each task with only its declared inputs present and name what else it read.
    pub inputs: bool,
    /// Tasks whose divergence is reported but does not fail the run (`--verify-allow`).
    pub allow: BTreeSet<TaskId>,
    /// The workspace the inputs proof judges traced runs against (local mode; on a farm
    /// coordinator `None`: its verdicts carry the evidence, and the client judges).
    pub workspace: Option<Arc<super::undeclared::WorkspaceView>>,
    /// Prove only the keys in this sample (`--verify-sample`, `--verify-seed`); `None`: all.
    pub sample: Option<prova_protocol::wire::VerifySample>,
}

impl VerifyOptions {
    /// Whether any proof is asked for.
    pub fn any(&self) -> bool {
        self.determinism || self.inputs
    }
}

/// Whether a run reads and writes the cache (`--force`: reads only for the tasks it does not
/// execute; `--no-cache`: neither).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachePolicy {
    /// Hits are restored.
    pub read: bool,
    /// Executions are saved.
    pub write: bool,
    /// Hits of the tasks the run leaves out (`--only`'s dependencies) are restored even when
    /// `read` is off: `--force` re-executes the tasks the run executes, and a left-out task
    /// that could not be restored would be taken from disk, or refused under `--verify`.
    pub read_left_out: bool,
}

impl CachePolicy {
    /// Reads and writes.
    pub const READ_WRITE: Self = Self::of(true, true);
    /// Neither (`--no-cache`).
    pub const OFF: Self = Self::of(false, false);
    /// `--force`: saves every execution, restores only the tasks the run leaves out.
    pub const FORCE: Self = Self { read: false, write: true, read_left_out: true };

    /// Reads when `read`, writes when `write`, for every task alike.
    pub const fn of(read: bool, write: bool) -> Self {
        Self { read, write, read_left_out: false }
    }

    /// Whether a hit of `task` is restored when the run's dependencies are `mode`.
    pub fn reads(&self, mode: UpstreamMode, task: &PlannedTask) -> bool {
        self.read
            || (self.read_left_out
                && super::excluded::step(mode, task) == super::excluded::Step::RestoreElseAssume)
    }

    /// Whether any task's hit may be restored when the run's dependencies are `mode` (the
    /// cache is looked up before the run).
    pub fn reads_any(&self, mode: UpstreamMode) -> bool {
        self.read || (self.read_left_out && mode == UpstreamMode::Only)
    }
}

/// The cache side of a run.
pub struct RunCache {
    /// The layer entries come from and go to.
    pub layer: Arc<dyn CacheLayer>,
    /// Read/write.
    pub policy: CachePolicy,
    /// Every task's key.
    pub keys: PlanKeys,
    /// Entries found for cacheable tasks before the run (by node).
    pub hits: HashMap<usize, Entry>,
    /// Where workers stage packed artifacts (the cache's `tmp/`).
    pub staging: PathBuf,
    /// The files among each task's outputs its in-place clean must never delete, by task id
    /// ([`crate::inputs::protect`]; empty on the farm, which cleans nothing in place).
    pub protected: Arc<crate::inputs::protect::Protected>,
}

/// Where a run's tasks execute.
#[derive(Clone, Debug, Default)]
pub enum ExecMode {
    /// In the workspace (local mode).
    #[default]
    InPlace,
    /// In exec roots holding only declared inputs and upstream artifacts (the farm; local
    /// proof runs). `local_source`/`local_blobs`: where a local worker finds the bytes (the
    /// workspace root and the cache's blob directory); `None` for farm workers, which fetch
    /// them from the coordinator.
    ExecRoot {
        /// The workspace root, for a local worker.
        local_source: Option<PathBuf>,
        /// The cache's `blobs/` directory, for a local worker.
        local_blobs: Option<PathBuf>,
    },
}

/// What a run actor is built from.
pub struct RunActorArgs {
    /// The resolved tasks.
    pub plan: RunPlan,
    /// Knobs.
    pub options: RunOptions,
    /// Estimated durations for the critical path, by task (ms).
    pub weights: Vec<u64>,
    /// Where assignments go.
    pub work: Arc<dyn WorkSink>,
    /// Which worker the sink reaches (for reports).
    pub worker: WorkerId,
    /// Where run events go (bounded).
    pub events: mpsc::Sender<RunEvent>,
    /// Receives the summary when the run is over.
    pub done: oneshot::Sender<RunSummary>,
    /// First attempt id to hand out (distinct per run on a shared worker).
    pub first_attempt: u64,
    /// The cache, unless the run has none.
    pub cache: Option<RunCache>,
    /// Where tasks execute.
    pub exec: ExecMode,
    /// Where a local worker's proofs find the workspace and the cache's blobs (local mode).
    pub local_proof_sources: Option<(PathBuf, PathBuf)>,
}

impl RunActorArgs {
    /// The shell's part of these (everything but the work sink), events waited on.
    pub(crate) fn split(self) -> (RunShellArgs, Arc<dyn WorkSink>) {
        let shell = RunShellArgs {
            plan: self.plan,
            options: self.options,
            weights: self.weights,
            worker: self.worker,
            events: super::shell::EventSink::Wait(self.events),
            done: self.done,
            first_attempt: self.first_attempt,
            cache: self.cache,
            exec: self.exec,
            local_proof_sources: self.local_proof_sources,
        };
        (shell, self.work)
    }
}

/// What a run's [`super::shell::Shell`] is built from: a [`RunActorArgs`] without the work
/// sink (the shell hands its work to its driver), with how its events are sent.
pub(crate) struct RunShellArgs {
    pub(crate) plan: RunPlan,
    pub(crate) options: RunOptions,
    pub(crate) weights: Vec<u64>,
    pub(crate) worker: WorkerId,
    pub(crate) events: super::shell::EventSink,
    pub(crate) done: oneshot::Sender<RunSummary>,
    pub(crate) first_attempt: u64,
    pub(crate) cache: Option<RunCache>,
    pub(crate) exec: ExecMode,
    pub(crate) local_proof_sources: Option<(PathBuf, PathBuf)>,
}
