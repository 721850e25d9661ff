//! The run's decisions, sans-IO: one [`TaskState`] per task, and the pure functions the run
//! actor asks before it acts — what a finished execution's status is, whether a lying
//! worker's report is refused, whether a hit is restored and what it reports, whether an
//! execution is saved or reported now, whether a save is tried or withheld (and which stamps
//! it rechecks), what the determinism proof does after a save, how an attempt is shaped and
//! where a re-run may go, and when the run may end. No actors, sockets, files or clocks in
//! here; `core_tests.rs` drives them with plain values. Which verdict an execution (or a pair
//! of them) earns is in [`super::verdicts`]; the re-run bookkeeping in [`super::reruns`]. The
//! actor ([`super::actor`], [`super::cached`], [`super::verify`]) carries the answers out: it
//! sends the assignment, restores the hit, starts the save, writes the ledger row, emits the
//! `RunEvent`, finishes the run.

use std::path::PathBuf;

use prova_protocol::artifact::confine::check_manifest_confined;
use prova_protocol::events::{CacheStatus, TaskReport, TaskStatus, Verdict};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::{EntryKind, OutputManifest};
use prova_protocol::spec::ExitKind;
use prova_protocol::wire::UpstreamMode;
use prova_protocol::work::{Finished, Outputs};
use prova_protocol::{AttemptId, Digest, WorkerId};

use super::types::{CachePolicy, ExecMode};
use crate::plan::{PlannedTask, TaskKind};

/// What an attempt is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// The task's execution (its outputs are the canonical ones).
    Primary,
    /// A determinism re-run: compared, never saved.
    Rerun,
}

/// The first execution of a task, as the determinism proof compares against it.
#[derive(Clone, Debug)]
pub(crate) struct PrimaryOutputs {
    /// Its output tree.
    pub manifest: OutputManifest,
    /// The tree's content fingerprint.
    pub fingerprint: Digest,
    /// Its packed artifact, when packed.
    pub artifact: Option<Digest>,
    /// Where it ran.
    pub worker: Option<WorkerId>,
}

/// Everything a run knows about one task (one per node, indexed like the plan).
#[derive(Clone, Debug, Default)]
pub(crate) struct TaskState {
    /// The primary attempt in flight.
    pub live: Option<AttemptId>,
    /// Its final report, once made.
    pub report: Option<TaskReport>,
    /// The scheduler asked it to stop (an abort, or the end of a persistent task).
    pub stopping: bool,
    /// A persistent task whose worker reported it ready.
    pub ready: bool,
    /// Its artifact once known (a hit or an execution): what downstream exec roots unpack.
    pub artifact: Option<(Digest, u64)>,
    /// The fingerprint of its outputs once known (a hit's entry, an execution's outputs):
    /// what its dependents' keys fold ([`crate::keys::progressive`]).
    pub fingerprint: Option<Digest>,
    /// Where its last primary attempt ran (farm reports say; local mode is one worker).
    pub ran_on: Option<WorkerId>,
    /// Its first execution's outputs, for the determinism proof.
    pub primary: Option<PrimaryOutputs>,
    /// Where its determinism re-run ran.
    pub rerun_worker: Option<WorkerId>,
    /// Verdicts concluded before its final report (the inputs proof).
    pub pending: Vec<Verdict>,
    /// Proofs still to conclude after its final report (a queued or running re-run, a
    /// comparison).
    pub awaiting: usize,
    /// Its `TaskFinished` event is held until `awaiting` reaches 0, so the event carries
    /// every verdict (`--json` readers see one complete report).
    pub held: bool,
}

impl TaskState {
    /// States for `n` tasks.
    pub(super) fn for_tasks(n: usize) -> Vec<Self> {
        vec![Self::default(); n]
    }

    /// Where its last primary attempt ran, or `fallback` (the run's one worker).
    pub(super) fn worker_or(&self, fallback: &WorkerId) -> WorkerId {
        self.ran_on.clone().unwrap_or_else(|| fallback.clone())
    }
}

/// A persistent task that ended on its own before it was ready never served: whatever its
/// exit code, what depends on it must not run.
pub(crate) fn exited_unready(kind: TaskKind, t: &TaskState) -> bool {
    kind == TaskKind::Persistent && !t.stopping && !t.ready
}

/// The status of a finished primary execution.
pub(crate) fn task_status(
    kind: TaskKind,
    t: &TaskState,
    interrupted: bool,
    exit: &ExitKind,
) -> TaskStatus {
    let persistent = kind == TaskKind::Persistent;
    match exit {
        _ if persistent && t.stopping && !interrupted => TaskStatus::Succeeded,
        ExitKind::Aborted => TaskStatus::Aborted,
        _ if exited_unready(kind, t) => TaskStatus::Failed,
        e if e.success() => TaskStatus::Succeeded,
        _ => TaskStatus::Failed,
    }
}

/// The note of a failed execution.
pub(crate) fn failure_note(kind: TaskKind, t: &TaskState, exit: &ExitKind) -> String {
    match exit {
        ExitKind::Code(_) | ExitKind::Signal(_) if exited_unready(kind, t) => {
            format!("exited before it was ready ({})", exit.describe())
        }
        _ => exit.describe(),
    }
}

/// Why what a farm worker returned is refused (a lying or compromised worker): a manifest
/// that is not the task's declared outputs (a `.git/hooks` file, another project's source, a
/// link out of the project), or a fingerprint that is not the manifest's. `None`: it may
/// proceed.
pub(crate) fn refusal(outputs: &Outputs, globs: &PathGlobs, project: &str) -> Option<String> {
    match check_manifest_confined(&outputs.manifest, globs, project) {
        Err(e) => Some(format!("outputs outside the task's declared outputs: {e}")),
        Ok(()) if outputs.fingerprint != outputs.manifest.fingerprint() => {
            Some("a fingerprint that is not its manifest's".to_owned())
        }
        Ok(()) => None,
    }
}

/// What the run's cache allows for a task: `cacheable` (it has a cache and the task may be
/// cached), `reads` (a hit may be restored), `writes` (an execution may be saved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheUse {
    /// The task is cacheable and the run has a cache.
    pub cacheable: bool,
    /// Hits are restored.
    pub reads: bool,
    /// Executions are saved.
    pub writes: bool,
}

impl CacheUse {
    /// For `task` under the run's policy (`None`: the run has no cache), its dependencies
    /// `mode`.
    pub(super) fn of(task: &PlannedTask, policy: Option<CachePolicy>, mode: UpstreamMode) -> Self {
        let cacheable = task.cacheable && policy.is_some();
        Self {
            cacheable,
            reads: cacheable && policy.is_some_and(|p| p.reads(mode, task)),
            writes: cacheable && policy.is_some_and(|p| p.write),
        }
    }
}

/// Why a `sandbox = true` task cannot execute in this run, if it cannot: a sandboxed
/// execution runs in an exec root, and its outputs reach the workspace through the cache,
/// so the run must be able to save it.
pub(crate) fn sandbox_refusal(task: &PlannedTask, cache: CacheUse) -> Option<String> {
    (task.spec.proof.sandbox && !(cache.cacheable && cache.writes)).then(|| {
        "`sandbox = true`: it runs in an exec root and its outputs come back through the \
         cache, which this run does not write (--no-cache, --cache without w, or a key that \
         could not be computed): run it without that flag"
            .to_owned()
    })
}

/// The verdict a task that did not execute gets when a proof was asked for: a group runs
/// nothing, a hit did not run.
pub(crate) fn not_run_verdict(group: bool) -> Verdict {
    let reason = if group {
        "a group: it runs nothing".to_owned()
    } else {
        "a cache hit: it did not run (--force re-executes to verify)".to_owned()
    };
    Verdict::NotVerified { reason }
}

/// What a restore that did not yield a hit tells the user before the task runs instead.
pub(crate) fn restore_fallback_notice(error: Option<&dyn std::fmt::Display>) -> String {
    match error {
        Some(e) => format!("the cache entry could not be restored ({e}); running the task"),
        None => "the cache entry's artifact is missing or corrupt (quarantined); running the task"
            .to_owned(),
    }
}

/// What follows a primary execution that was not refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AfterExecution {
    /// It succeeded and the run saves: try the save ([`withheld_before_save`] first); the
    /// task is reported when the save completes.
    Save,
    /// Report it now with this cache status; `unprovable`: a proof was asked for that this
    /// execution cannot get (determinism needs a saved entry, the inputs proof a cacheable
    /// task — only those run traced), so its report says why
    /// ([`super::verdicts::unprovable`]).
    Report {
        /// The report's cache status.
        cache: CacheStatus,
        /// Add the "cannot be proven" verdict.
        unprovable: bool,
    },
}

/// Whether a primary execution that ended with `status` (`exit`) is saved or reported now.
pub(crate) fn after_execution(
    cache: CacheUse,
    status: TaskStatus,
    exit: &ExitKind,
    determinism: bool,
    verify_inputs: bool,
) -> AfterExecution {
    let ok = status == TaskStatus::Succeeded;
    if cache.writes && ok {
        return AfterExecution::Save;
    }
    let cache_status = if cache.writes {
        CacheStatus::NotSaved { reason: exit.describe() }
    } else {
        CacheStatus::Uncached
    };
    AfterExecution::Report {
        cache: cache_status,
        unprovable: ok && (determinism || (verify_inputs && !cache.cacheable)),
    }
}

/// Why a successful execution's outputs are withheld before any save is tried (the worker
/// found what the key says no longer true, collecting them failed, a declared literal output
/// is missing, nothing was collected). `None`: try
/// the save (the layer may still withhold it: stale stamps, an undeclared input).
pub(crate) fn withheld_before_save(f: &Finished) -> Option<String> {
    if let Some(why) = &f.withheld {
        Some(why.clone())
    } else if let Some(e) = &f.output_error {
        Some(format!("collecting outputs failed: {e}"))
    } else if let Some(missing) = f.missing_literals.first() {
        Some(format!("declared output `{missing}` does not exist"))
    } else if f.outputs.is_none() {
        Some("no outputs were collected".to_owned())
    } else {
        None
    }
}

/// The declared output patterns of a task that no collected file or link matches after it
/// ran: a typo (`dsit/**`), or a task that writes elsewhere — its cache entry then holds less
/// than the config says. An empty directory is no file: `mkdir -p dist` before a tool that
/// wrote nothing is what [`emptied_outputs`] is about. Exclusions (`!…`) and patterns that
/// do not compile are not judged here.
pub(crate) fn outputs_matching_nothing(
    project_dir: &str,
    patterns: &[String],
    manifest: &OutputManifest,
) -> Vec<String> {
    patterns
        .iter()
        .filter(|p| !p.starts_with('!'))
        .filter(|p| {
            PathGlobs::new(project_dir, std::slice::from_ref(*p))
                .is_ok_and(|g| files_matching(&g, manifest).next().is_none())
        })
        .cloned()
        .collect()
}

/// The files and links of `manifest` that `globs` match (an empty directory is no file).
fn files_matching<'m>(
    globs: &PathGlobs,
    manifest: &'m OutputManifest,
) -> impl Iterator<Item = &'m prova_protocol::manifest::ManifestEntry> {
    manifest.entries.iter().filter(|e| e.kind != EntryKind::Dir && globs.is_match(&e.path))
}

/// The warning for declared output patterns no file matched in a saved entry (`None`: none).
pub(crate) fn matched_nothing_warning(patterns: &[String]) -> Option<String> {
    if patterns.is_empty() {
        return None;
    }
    let named: Vec<String> = patterns.iter().map(|p| format!("`{p}`")).collect();
    Some(format!(
        "declared output{} {} matched no file after it ran (a typo, or it writes elsewhere): \
         the cache entry holds no file of it",
        if named.len() == 1 { "" } else { "s" },
        named.join(", ")
    ))
}

/// The note of a task that wrote outside its declared outputs in its exec root
/// (`Finished::wrote_outside`): named path by path, the way to keep them, and that nothing
/// of it reached the workspace.
pub(crate) fn wrote_outside_note(w: &prova_protocol::work::WroteOutside) -> String {
    const NAMED: usize = 10;
    let mut named: Vec<String> = w.paths.iter().take(NAMED).map(|p| format!("`{p}`")).collect();
    let rest = w.paths.len().saturating_sub(NAMED) as u64 + w.more;
    if rest > 0 {
        named.push(format!("and {rest} more"));
    }
    format!(
        "it wrote outside its declared outputs: {} — in its exec root, so none of it reached \
         the workspace or the cache; declare what it writes in `outputs`, or write scratch \
         files under $TMPDIR",
        named.join(", ")
    )
}

/// The note of a task that ran though its upstreams' outputs held (`upstreams`): it is not
/// confined, so its key folds their keys too.
pub(crate) fn blocked_cutoff_note(upstreams: &[String]) -> String {
    let named: Vec<String> = upstreams.iter().map(|t| format!("`{t}`")).collect();
    format!(
        "ran though {} re-ran with identical outputs: in place it can read more of its \
         upstreams than their declared outputs (their sources), so its key folds their keys \
         and it is not cut off; `sandbox = true` confines it to its declared inputs and \
         upstream outputs, and cuts it off",
        named.join(", ")
    )
}

/// The declared output patterns that matched no file after an execution although the task's
/// newest entry (of any key) held files for them, each with how many it held. An
/// incremental tool whose state is not a declared output (`tsc -b` and its
/// `tsconfig.tsbuildinfo`) sees that state say "up to date" after prova cleaned the outputs,
/// writes nothing and exits 0: saving that would serve empty outputs from then on.
pub(crate) fn emptied_outputs(
    project_dir: &str,
    patterns: &[String],
    now: &OutputManifest,
    newest: &OutputManifest,
) -> Vec<(String, usize)> {
    outputs_matching_nothing(project_dir, patterns, now)
        .into_iter()
        .filter_map(|p| {
            let g = PathGlobs::new(project_dir, std::slice::from_ref(&p)).ok()?;
            let held = files_matching(&g, newest).count();
            (held > 0).then_some((p, held))
        })
        .collect()
}

/// Why an execution with [`emptied_outputs`] is not saved (`None`: none emptied). The task
/// itself succeeded — its tool exited 0 — but its entry would be a lie.
pub(crate) fn emptied_refusal(emptied: &[(String, usize)]) -> Option<String> {
    let ((first, held), more) = emptied.split_first()?;
    let others = if more.is_empty() {
        String::new()
    } else {
        let named: Vec<String> = more.iter().map(|(p, _)| format!("`{p}`")).collect();
        format!(" (and {})", named.join(", "))
    };
    Some(format!(
        "declared output `{first}`{others} matched no file, though the task's previous entry \
         held {held} there: a build that keeps state outside its declared outputs (e.g. \
         tsconfig.tsbuildinfo) may have skipped its work after prova cleaned them; not saved, \
         so no empty entry is served (declare that state in `outputs`, or delete it and run \
         again)"
    ))
}

/// The warning when an execution's outputs hold fewer files (`now`) than the task's newest
/// entry (`before`): an incremental build may have skipped work.
pub(crate) fn shrunk_warning(outputs: &[String], now: usize, before: usize) -> Option<String> {
    (now < before).then(|| {
        format!(
            "its outputs ({}) came out with {now} files, {before} in its previous entry: unless \
             sources were removed, an incremental build may be skipping work because of state \
             that is not a declared output (e.g. tsconfig.tsbuildinfo)",
            outputs.join(", ")
        )
    })
}

/// Whether a local task that ran in an exec root (an inputs proof, or every task of a run
/// executed on a REAPI farm: an exec-root mode with a local source) must also appear in the
/// workspace once saved: what runs after it reads its outputs there, and the user expects
/// them. Its save then rechecks no stamps: the execution read copies taken at
/// materialisation, not the workspace.
pub(crate) fn restore_into_workspace(exec: &ExecMode, farm: bool, verify_inputs: bool) -> bool {
    !farm
        && match exec {
            ExecMode::InPlace => verify_inputs,
            ExecMode::ExecRoot { local_source, .. } => local_source.is_some(),
        }
}

/// The determinism verdict of an execution that was not saved.
pub(crate) fn not_saved_verdict(reason: Option<&str>) -> Verdict {
    let reason = match reason {
        Some(reason) => format!("not saved ({reason}): nothing to prove"),
        None => "not saved: nothing to prove".to_owned(),
    };
    Verdict::NotVerified { reason }
}

/// What the determinism proof does once a save completed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AfterSave {
    /// No proof (none asked for, or the first execution's outputs are unknown).
    Nothing,
    /// A verdict now.
    Verdict(Box<Verdict>),
    /// Queue a re-run elsewhere.
    Rerun,
}

/// The determinism proof's next step after a save.
pub(crate) fn after_save(
    determinism: bool,
    saved: bool,
    cache: &CacheStatus,
    primary: Option<&PrimaryOutputs>,
) -> AfterSave {
    if !determinism {
        return AfterSave::Nothing;
    }
    if !saved {
        let reason = match cache {
            CacheStatus::NotSaved { reason } => Some(reason.as_str()),
            _ => None,
        };
        return AfterSave::Verdict(Box::new(not_saved_verdict(reason)));
    }
    match primary {
        None => AfterSave::Nothing,
        Some(p) if p.manifest.entries.is_empty() => {
            AfterSave::Verdict(Box::new(Verdict::NoOutputs))
        }
        Some(_) => AfterSave::Rerun,
    }
}

/// How one attempt is shaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AttemptShape {
    /// Traced in an exec root holding only declared inputs (the inputs proof).
    pub traced: bool,
    /// In the workspace (otherwise an exec root).
    pub in_place: bool,
    /// Packed into the cache's staging directory (local workers; a farm worker uploads).
    pub pack: bool,
    /// Declared outputs removed before it runs (a cacheable task in place).
    pub clean_outputs: bool,
    /// Outputs returned with the report.
    pub collect_outputs: bool,
    /// Perturbed (a determinism re-run).
    pub perturb: bool,
    /// May be merged with another run's execution of the same key (never a re-run).
    pub merge_by_key: bool,
    /// Holds the critical-path priority (a re-run never holds it back: priority 0).
    pub prioritised: bool,
}

/// The shape of an attempt of a task for `purpose`. `has_cache`: the run has a cache;
/// `fingerprinted`: its dependents' keys fold its outputs' fingerprint (it declares outputs);
/// `farm`: tasks run on farm workers.
pub(crate) fn attempt_shape(
    purpose: Purpose,
    cache: CacheUse,
    has_cache: bool,
    fingerprinted: bool,
    farm: bool,
    exec: &ExecMode,
    verify_inputs: bool,
) -> AttemptShape {
    let primary = purpose == Purpose::Primary;
    // An input-completeness proof runs the task's own execution in an exec root with only
    // its declared inputs, traced.
    let traced = primary && cache.cacheable && verify_inputs;
    let in_place = matches!(exec, ExecMode::InPlace) && !traced && primary;
    AttemptShape {
        traced,
        in_place,
        pack: has_cache && (cache.writes || !primary) && !farm,
        clean_outputs: cache.cacheable && in_place,
        // A farm worker always returns its outputs: downstream exec roots need them. A run
        // that only reads the cache, or an uncached task, still collects them: dependents'
        // keys fold their fingerprint.
        collect_outputs: cache.writes
            || cache.reads
            || (has_cache && fingerprinted)
            || farm
            || !primary,
        perturb: !primary,
        merge_by_key: primary,
        prioritised: primary,
    }
}

/// What settling a task's key at dispatch found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The key is the one known before (or the task has no cache): what was found for it
    /// holds.
    Same,
    /// A key not looked up yet (pending before the run, or an upstream resolved to other
    /// bytes than predicted): look it up before restoring or running.
    Moved(Digest),
    /// An upstream folded by outputs has no known fingerprint (it ran without returning
    /// outputs): the task runs uncached. The upstream's node.
    Unknown(usize),
}

/// What settling `node`'s key from `before` (known before) to `after` means; `after` is
/// `None` when an upstream it folds by outputs has no fingerprint in `state`.
pub(crate) fn settled(
    output_upstreams: &[usize],
    state: &[TaskState],
    before: Option<Digest>,
    after: Option<Digest>,
) -> Settled {
    match after {
        Some(k) if before == Some(k) => Settled::Same,
        Some(k) => Settled::Moved(k),
        None => {
            let unknown =
                output_upstreams.iter().copied().find(|&d| state[d].fingerprint.is_none());
            unknown.map_or(Settled::Same, Settled::Unknown)
        }
    }
}

/// The worker a re-run must avoid: the one that ran the first execution.
pub(crate) fn avoid_worker(purpose: Purpose, t: &TaskState) -> Option<WorkerId> {
    (purpose == Purpose::Rerun).then(|| t.ran_on.clone()).flatten()
}

/// Where an exec-root attempt's local worker finds the workspace and the cache's blobs:
/// the farm's exec mode says (farm workers: none, they fetch); a local run's proof uses
/// `local_proof_sources`, else the workspace `root` without blobs.
pub(crate) fn exec_root_sources(
    exec: &ExecMode,
    local_proof_sources: Option<&(PathBuf, PathBuf)>,
    root: &std::path::Path,
) -> (Option<PathBuf>, Option<PathBuf>) {
    match (exec, local_proof_sources) {
        (ExecMode::ExecRoot { local_source, local_blobs }, _) => {
            (local_source.clone(), local_blobs.clone())
        }
        (ExecMode::InPlace, Some((ws, blobs))) => (Some(ws.clone()), Some(blobs.clone())),
        (ExecMode::InPlace, None) => (Some(root.to_path_buf()), None),
    }
}

/// Artifacts of the upstreams an exec root of `node` holds
/// ([`crate::plan::exec_root_upstreams`]: every one, direct or transitive, or
/// under `upstream_outputs = "direct"` its direct dependencies'; the same set its key folds),
/// in node order.
pub(crate) fn upstream_artifacts(
    tasks: &[PlannedTask],
    state: &[TaskState],
    node: usize,
) -> Vec<(Digest, u64)> {
    crate::plan::exec_root_upstreams(tasks, node)
        .into_iter()
        .filter_map(|d| state[d].artifact)
        .collect()
}

/// Whether the run may end now: the scheduler said done (`Some(ok)`) and no proof is
/// outstanding — unless interrupted, when outstanding proofs are abandoned. The answer is
/// the scheduler's `ok`.
pub(crate) fn run_may_end(
    sched_done: Option<bool>,
    outstanding_proofs: usize,
    interrupted: bool,
) -> Option<bool> {
    let ok = sched_done?;
    (outstanding_proofs == 0 || interrupted).then_some(ok)
}

/// Whether the run succeeded: the scheduler's `ok`, no failing verdict on any report, not
/// interrupted.
pub(crate) fn run_ok(sched_ok: bool, state: &[TaskState], interrupted: bool) -> bool {
    let proofs_ok = state
        .iter()
        .filter_map(|t| t.report.as_ref())
        .all(|r| !r.verdicts.iter().any(Verdict::fails));
    sched_ok && proofs_ok && !interrupted
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod core_tests;
