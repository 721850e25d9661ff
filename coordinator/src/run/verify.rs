//! Proofs (`--verify`, brief §1; the reference design `000_*`): the inputs proof reads the
//! trace of a task's own execution in an exec root holding only its declared inputs; the
//! determinism proof re-runs a saved execution elsewhere — another worker, another exec-root
//! path, perturbed — and compares the output trees by content. Every execution lands in the
//! fingerprint ledger. The canonical (first) bytes stay on disk and in the cache whatever
//! the verdict; a re-run is never saved.

use std::collections::VecDeque;

use kameo::prelude::*;
use prova_protocol::artifact::confine::check_manifest_confined;
use prova_protocol::events::{
    CacheStatus, Divergence, LOG_TAIL_LINES, MAX_NAMED_PATHS, RunEvent, TaskReport, TaskStatus,
    Verdict,
};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::OutputManifest;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Finished, Perturb, TRACE_READ_FAILED};
use prova_protocol::{AttemptId, Digest, WorkerId};

use super::actor::{Purpose, RunActor};
use crate::cache::Execution;
use crate::layers::local::now_ms;
use crate::plan::TaskKind;

/// Longest log line a verdict carries (longer ones are cut, marked `…`).
const LOG_LINE_CHARS: usize = 400;

/// The last [`LOG_TAIL_LINES`] non-empty lines of a log, each bounded.
fn log_tail(log: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(log);
    let mut lines: Vec<String> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(LOG_TAIL_LINES)
        .map(|l| {
            if l.chars().count() > LOG_LINE_CHARS {
                let mut cut: String = l.chars().take(LOG_LINE_CHARS).collect();
                cut.push('…');
                cut
            } else {
                l.to_owned()
            }
        })
        .collect();
    lines.reverse();
    lines
}

/// How long the end of a run waits for its ledger writes.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The first execution of a task, as the determinism proof compares against it.
#[derive(Clone, Debug)]
struct Primary {
    manifest: OutputManifest,
    fingerprint: Digest,
    artifact: Option<Digest>,
    worker: Option<WorkerId>,
}

/// Proof bookkeeping of a run.
pub(super) struct Proofs {
    primary: Vec<Option<Primary>>,
    rerun_worker: Vec<Option<WorkerId>>,
    /// Verdicts concluded before the task's final report (the inputs proof).
    pending: Vec<Vec<Verdict>>,
    /// Per task: proofs still to conclude after its final report (a queued or running
    /// re-run, a comparison).
    awaiting: Vec<usize>,
    /// Per task: its `TaskFinished` event is held until `awaiting` reaches 0, so the event
    /// carries every verdict (`--json` readers see one complete report).
    held: Vec<bool>,
    queue: VecDeque<usize>,
    in_flight: Vec<(usize, AttemptId)>,
    max_in_flight: usize,
    /// Re-runs queued or running, and comparisons in progress.
    outstanding: usize,
    /// Ledger writes and comparisons (not aborted by a node's save or restore).
    background: Vec<OwnedTask<()>>,
}

impl Proofs {
    pub(super) fn new(n: usize, max_in_flight: usize) -> Self {
        Self {
            primary: vec![None; n],
            rerun_worker: vec![None; n],
            pending: vec![Vec::new(); n],
            awaiting: vec![0; n],
            held: vec![false; n],
            queue: VecDeque::new(),
            in_flight: Vec::new(),
            max_in_flight: max_in_flight.max(1),
            outstanding: 0,
            background: Vec::new(),
        }
    }

    pub(super) fn outstanding(&self) -> usize {
        self.outstanding
    }

    pub(super) fn set_rerun_worker(&mut self, node: usize, w: WorkerId) {
        self.rerun_worker[node] = Some(w);
    }

    /// Verdicts waiting for `node`'s final report.
    pub(super) fn take_pending(&mut self, node: usize) -> Vec<Verdict> {
        std::mem::take(&mut self.pending[node])
    }

    /// Waits (bounded) for ledger writes and comparisons still running: the run's summary
    /// must not outlive its evidence, and the actor's stop would abort them.
    pub(super) async fn drain(&mut self) {
        let tasks = std::mem::take(&mut self.background);
        let all = async {
            for t in tasks {
                let _ = t.join().await;
            }
        };
        if tokio::time::timeout(DRAIN_TIMEOUT, all).await.is_err() {
            tracing::warn!("ledger writes did not finish within {DRAIN_TIMEOUT:?}");
        }
    }

    fn spawn(
        &mut self,
        name: &'static str,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.background.retain(|t| !t.is_finished());
        self.background.push(OwnedTask::spawn(name, fut));
    }
}

/// What a determinism re-run changes that no declared input may depend on (brief §7): the
/// exec root's path (a fresh root elsewhere on the worker) and the order its files are made
/// in, the hostname and uid (under the sandbox), the umask, the time zone, the locale, the
/// user name, the environment order, `SOURCE_DATE_EPOCH` (set), the wall clock (+7 days,
/// libfaketime), the CPUs (one), and `TMPDIR`. The worker reports which it applied
/// (`Finished::perturbed`; `worker::perturb`).
/// Names the task declares in `env` (`declared`) keep their values, set or unset.
pub fn perturbation(attempt: AttemptId, declared: &[String]) -> Perturb {
    let host_lang = std::env::var("LANG").unwrap_or_default();
    let lang =
        if host_lang.starts_with('C') || host_lang.is_empty() { "en_US.UTF-8" } else { "C.UTF-8" };
    let name = format!("prova-rerun-{}", attempt.0);
    Perturb {
        umask: Some(0o077),
        env: vec![
            // A POSIX zone rule (UTC+12:45), so the perturbation holds without tzdata installed.
            ("TZ".to_owned(), "<+1245>-12:45".to_owned()),
            ("LANG".to_owned(), lang.to_owned()),
            ("LC_ALL".to_owned(), lang.to_owned()),
            ("USER".to_owned(), "prova-rerun".to_owned()),
            ("LOGNAME".to_owned(), "prova-rerun".to_owned()),
            ("HOSTNAME".to_owned(), name.clone()),
            // Unset in every first execution (not in the baseline): reproducible-build tools
            // change their timestamps when it is set.
            ("SOURCE_DATE_EPOCH".to_owned(), "1000000000".to_owned()),
        ]
        .into_iter()
        .filter(|(k, _)| !declared.contains(k))
        .collect(),
        reverse_env: true,
        hostname: Some(name),
        uid: Some(4242),
        root_parent: None,
        clock: Some("+7d".to_owned()),
        one_cpu: true,
        tmpdir: !declared.iter().any(|k| k == "TMPDIR"),
        shuffle_inputs: true,
    }
}

/// What a re-run's worker says it perturbed; an older worker that reports nothing is
/// said so, rather than claiming coverage it did not give.
fn rerun_perturbations(f: &Finished) -> prova_protocol::events::Perturbations {
    f.perturbed.clone().unwrap_or_else(|| {
        let mut p = prova_protocol::events::Perturbations::default();
        p.skipped("all", "the worker did not report its perturbations");
        p
    })
}

/// A comparison finished.
pub(super) struct ProofDone {
    node: usize,
    verdict: Verdict,
}

impl RunActor {
    /// Records a primary execution in the ledger and remembers its outputs for the proof.
    pub(super) fn record_primary(&mut self, node: usize, f: &Finished) {
        let Some(key) = self.key_of(node) else { return };
        let worker = self.ran_on[node].clone().unwrap_or_else(|| self.worker.clone());
        if let Some(o) = &f.outputs
            && f.exit.success()
        {
            self.proofs.primary[node] = Some(Primary {
                manifest: o.manifest.clone(),
                fingerprint: o.fingerprint,
                artifact: o.artifact.map(|(d, _)| d),
                worker: Some(worker.clone()),
            });
        }
        if !matches!(f.exit, prova_protocol::spec::ExitKind::Code(_)) && !f.exit.success() {
            return; // killed, timed out or never started: not evidence about the task
        }
        self.record(node, key, worker, false, f, None);
    }

    fn record(
        &mut self,
        node: usize,
        key: Digest,
        worker: WorkerId,
        rerun: bool,
        f: &Finished,
        staged: Option<std::path::PathBuf>,
    ) {
        let Some(c) = &self.cache else { return };
        let e = Execution {
            key,
            task: self.plan.tasks[node].id.to_string(),
            worker: worker.0,
            platform: c.keys.components[node]
                .platform
                .clone()
                .unwrap_or_else(|| "portable".to_owned()),
            rerun,
            ok: f.exit.success(),
            fingerprint: f.outputs.as_ref().filter(|_| f.exit.success()).map(|o| o.fingerprint),
            manifest: f.outputs.as_ref().and_then(|o| rmp_serde::to_vec_named(&o.manifest).ok()),
            artifact: if rerun {
                f.outputs.as_ref().and_then(|o| o.artifact.map(|(d, _)| d))
            } else {
                None
            },
            time_ms: now_ms(),
            // Every try before the last failed (a success ends the tries): a pass after
            // failures with one key, in one environment, is flaky.
            failed_tries: if f.exit.success() { f.tries.saturating_sub(1) } else { 0 },
        };
        let layer = c.layer.clone();
        self.proofs.spawn("run.ledger", async move {
            if let Err(e) = layer.record(e, staged).await {
                tracing::warn!("recording an execution in the ledger failed: {e}");
            }
        });
    }

    /// The inputs proof's verdict from a traced execution, held for the task's final report.
    /// A run that failed with only its declared inputs visible is never proven complete: it
    /// names the undeclared paths it touched, or says it fails there, with its log's tail.
    pub(super) async fn inputs_verdict(&mut self, node: usize, f: &Finished, status: TaskStatus) {
        if !(self.options.verify.inputs && self.cacheable(node)) {
            return;
        }
        let Some(reads) = &f.reads else { return };
        let failed = match &f.exit {
            ExitKind::Aborted => {
                let reason = "the run was interrupted: nothing to prove".to_owned();
                self.proofs.pending[node].push(Verdict::NotVerified { reason });
                return;
            }
            ExitKind::SpawnFailed(_) => {
                let reason = format!("the task did not run ({})", f.exit.describe());
                self.proofs.pending[node].push(Verdict::NotVerified { reason });
                return;
            }
            e if status == TaskStatus::Failed || !e.success() => Some(e.describe()),
            _ => None,
        };
        let log_tail = if failed.is_some() { log_tail(&f.log) } else { Vec::new() };
        let verdict = if reads.traced {
            let spec = &self.plan.tasks[node].spec;
            let writes =
                super::undeclared::undeclared_writes(&spec.project_dir, &spec.outputs, reads);
            let mut paths = self.undeclared_paths(node, reads);
            paths.retain(|p| writes.binary_search(p).is_err());
            let suggest = match &self.options.verify.workspace {
                Some(view) => {
                    super::undeclared::suggest_globs(&spec.project_dir, &paths, |p| view.is_dir(p))
                }
                None => super::undeclared::suggest_globs(&spec.project_dir, &paths, |_| false),
            };
            let more = paths.len().saturating_sub(MAX_NAMED_PATHS);
            paths.truncate(MAX_NAMED_PATHS);
            if !writes.is_empty() {
                let more = writes.len().saturating_sub(MAX_NAMED_PATHS);
                let paths = writes[..writes.len().min(MAX_NAMED_PATHS)].to_vec();
                self.proofs.pending[node].push(Verdict::UndeclaredOutputs { paths, more });
            }
            match (paths.is_empty(), failed) {
                // The writes outside the outputs are the finding (and may be why it failed).
                (true, _) if !writes.is_empty() => return,
                (true, None) => Verdict::ProvenComplete,
                (true, Some(reason)) => Verdict::SandboxFailed { reason, traced: true, log_tail },
                (false, failed) => Verdict::UndeclaredInputs {
                    paths,
                    traced: true,
                    more,
                    failed,
                    log_tail,
                    suggest,
                },
            }
        } else if let Some(e) = f.output_error.as_ref().filter(|e| e.starts_with(TRACE_READ_FAILED))
        {
            // A tracer ran but its trace could not be read: no paths, but a failure is
            // still a failure with only the declared inputs visible.
            match failed {
                Some(reason) => Verdict::SandboxFailed { reason, traced: false, log_tail },
                None => Verdict::NotVerified { reason: e.clone() },
            }
        } else if let Some(reason) = failed {
            Verdict::UndeclaredInputs {
                paths: Vec::new(),
                traced: false,
                more: 0,
                failed: Some(reason),
                log_tail,
                suggest: Vec::new(),
            }
        } else {
            Verdict::NotVerified {
                reason: "strace is not installed: reads of undeclared inputs cannot be named (install strace)".to_owned(),
            }
        };
        self.proofs.pending[node].push(verdict);
    }

    /// The undeclared inputs among a traced run's candidates: judged against the workspace
    /// when this side has it ([`super::undeclared`]); otherwise (a farm coordinator) every
    /// failed lookup outside the task's outputs, for the client to filter.
    fn undeclared_paths(
        &self,
        node: usize,
        reads: &prova_protocol::work::ReadsReport,
    ) -> Vec<String> {
        let spec = &self.plan.tasks[node].spec;
        if let Some(view) = &self.options.verify.workspace {
            return view.undeclared(&spec.id.to_string(), reads);
        }
        let own =
            PathGlobs::new(&spec.project_dir, &spec.outputs).unwrap_or_else(|_| PathGlobs::empty());
        let files = self.options.verify.workspace_files.clone();
        reads
            .missing
            .iter()
            .filter(|p| !own.is_match(p))
            .filter(|p| files.as_ref().is_none_or(|f| f.contains(*p)))
            .cloned()
            .collect()
    }

    /// Why a task that executed cannot get a determinism proof.
    pub(super) fn unprovable(&self, node: usize) -> prova_protocol::events::Verdict {
        let t = &self.plan.tasks[node];
        let reason = match t.kind {
            TaskKind::Persistent => "a persistent task is never cached".to_owned(),
            TaskKind::Group => "a group: it runs nothing".to_owned(),
            TaskKind::Command if !t.cacheable => "not cacheable (`cache = false`)".to_owned(),
            TaskKind::Command => "--no-cache: nothing was saved, so nothing to prove".to_owned(),
        };
        Verdict::NotVerified { reason }
    }

    /// After a save: the determinism proof's next step (a verdict now, or a queued re-run).
    pub(super) async fn after_save(
        &mut self,
        node: usize,
        _f: &Finished,
        saved: bool,
        cache: &CacheStatus,
    ) -> Option<Verdict> {
        if !self.options.verify.determinism {
            return None;
        }
        if !saved {
            let reason = match cache {
                CacheStatus::NotSaved { reason } => {
                    format!("not saved ({reason}): nothing to prove")
                }
                _ => "not saved: nothing to prove".to_owned(),
            };
            return Some(Verdict::NotVerified { reason });
        }
        let primary = self.proofs.primary[node].as_ref()?;
        if primary.manifest.entries.is_empty() {
            return Some(Verdict::NoOutputs);
        }
        self.proofs.queue.push_back(node);
        self.proofs.outstanding += 1;
        self.proofs.awaiting[node] += 1;
        self.pump_reruns().await;
        None
    }

    /// Starts queued re-runs while there is room.
    async fn pump_reruns(&mut self) {
        while self.proofs.in_flight.len() < self.proofs.max_in_flight && !self.interrupted {
            let Some(node) = self.proofs.queue.pop_front() else { break };
            let before = self.next_attempt_peek();
            if self.assign(node, Purpose::Rerun).await.is_some() {
                // The link is gone: the proof cannot run.
                self.conclude(
                    node,
                    Verdict::RerunFailed {
                        reason: "the worker link closed".to_owned(),
                        log_tail: Vec::new(),
                        perturbations: Default::default(),
                    },
                )
                .await;
                continue;
            }
            self.proofs.in_flight.push((node, before));
        }
    }

    /// A re-run ended: compare it with the first execution.
    pub(super) async fn on_rerun_finished(
        &mut self,
        node: usize,
        f: Box<Finished>,
        ctx: &mut Context<Self, ()>,
    ) {
        self.proofs.in_flight.retain(|(n, a)| !(*n == node && *a == f.attempt));
        let rerun_worker =
            self.proofs.rerun_worker[node].clone().unwrap_or_else(|| self.worker.clone());
        let staged = (!self.farm_worker()).then(|| self.staged_path(f.attempt));
        let key = self.key_of(node);
        let primary = self.proofs.primary[node].clone();
        let single_machine = !self.farm_worker()
            || primary.as_ref().and_then(|p| p.worker.as_ref()) == Some(&rerun_worker);
        let perturbations = rerun_perturbations(&f);
        // A farm re-run's report is checked like a first run's (`refuse_unconfined`): a
        // manifest outside the task's declared outputs, or a fingerprint that is not its
        // manifest's, is a lying worker — refused, recorded nowhere, and the proof fails.
        if self.farm_worker()
            && let Some(o) = &f.outputs
        {
            let globs = self.output_globs(node);
            let project = &self.plan.tasks[node].spec.project_dir;
            let why = match check_manifest_confined(&o.manifest, &globs, project) {
                Err(e) => Some(format!("outputs outside the task's declared outputs: {e}")),
                Ok(()) if o.fingerprint != o.manifest.fingerprint() => {
                    Some("a fingerprint that is not its manifest's".to_owned())
                }
                Ok(()) => None,
            };
            if let Some(why) = why {
                tracing::warn!(task = %self.plan.tasks[node].id, worker = %rerun_worker,
                    "refused what the re-run's worker returned: {why}");
                let verdict = Verdict::RerunFailed {
                    reason: format!(
                        "worker `{rerun_worker}` returned {why}; refused, nothing was recorded"
                    ),
                    log_tail: Vec::new(),
                    perturbations,
                };
                self.conclude(node, verdict).await;
                self.try_finish_run(ctx).await;
                return;
            }
        }
        let modes = match (&primary, &f.outputs) {
            (Some(p), Some(o)) => {
                crate::layers::diff::mode_changes(&p.manifest, &o.manifest, 0o077)
            }
            _ => Vec::new(),
        };
        let failed = |reason: String| Verdict::RerunFailed {
            reason,
            log_tail: log_tail(&f.log),
            perturbations: perturbations.clone(),
        };
        let verdict = match (&primary, &f.outputs) {
            _ if matches!(f.exit, prova_protocol::spec::ExitKind::Aborted) => {
                Verdict::NotVerified {
                    reason: "the run was interrupted during the re-run".to_owned(),
                }
            }
            _ if !f.exit.success() => failed(f.exit.describe()),
            (_, None) => failed(
                f.output_error
                    .clone()
                    .unwrap_or_else(|| "the re-run's outputs could not be collected".to_owned()),
            ),
            (None, _) => Verdict::NotVerified {
                reason: "the first execution's outputs are unknown".to_owned(),
            },
            (Some(p), Some(o)) if p.fingerprint == o.fingerprint && modes.is_empty() => {
                Verdict::ProvenDeterministic {
                    rerun_worker: Some(rerun_worker.clone()),
                    single_machine,
                    perturbations,
                }
            }
            (Some(p), Some(o)) => {
                let d = p.manifest.diff(&o.manifest);
                let mut divergence = Divergence {
                    added: d.added,
                    removed: d.removed,
                    changed: d.changed,
                    files: Vec::new(),
                    rerun_worker: Some(rerun_worker.clone()),
                    single_machine,
                    modes,
                    perturbations,
                };
                // Record first (a local re-run's artifact becomes a blob), then compare the
                // two artifacts file by file, off the actor.
                if let (Some(c), Some(key), Some(a), Some((b, _))) =
                    (&self.cache, key, p.artifact, o.artifact)
                {
                    let layer = c.layer.clone();
                    let e = self.execution(node, key, rerun_worker.clone(), &f);
                    let allowed = self.options.verify.allow.contains(&self.plan.tasks[node].id);
                    let me = ctx.actor_ref().clone();
                    self.proofs.spawn("run.proof.diff", async move {
                        let _ = layer.record(e, staged).await;
                        let mut changed = divergence.changed.clone();
                        changed.extend(divergence.added.iter().cloned());
                        changed.extend(divergence.removed.iter().cloned());
                        if let Ok(files) = layer.diff(a, b, changed).await {
                            divergence.files = files;
                        }
                        let verdict = if allowed {
                            Verdict::AllowedNondeterministic(divergence)
                        } else {
                            Verdict::Nondeterministic(divergence)
                        };
                        let _ = me.tell(ProofDone { node, verdict }).await;
                    });
                    return;
                }
                if self.options.verify.allow.contains(&self.plan.tasks[node].id) {
                    Verdict::AllowedNondeterministic(divergence)
                } else {
                    Verdict::Nondeterministic(divergence)
                }
            }
        };
        if let Some(key) = key
            && !matches!(f.exit, prova_protocol::spec::ExitKind::Aborted)
        {
            self.record(node, key, rerun_worker, true, &f, staged);
        }
        self.conclude(node, verdict).await;
        self.try_finish_run(ctx).await;
    }

    fn execution(&self, node: usize, key: Digest, worker: WorkerId, f: &Finished) -> Execution {
        Execution {
            key,
            task: self.plan.tasks[node].id.to_string(),
            worker: worker.0,
            platform: self
                .cache
                .as_ref()
                .and_then(|c| c.keys.components[node].platform.clone())
                .unwrap_or_else(|| "portable".to_owned()),
            rerun: true,
            ok: f.exit.success(),
            fingerprint: f.outputs.as_ref().map(|o| o.fingerprint),
            manifest: f.outputs.as_ref().and_then(|o| rmp_serde::to_vec_named(&o.manifest).ok()),
            artifact: f.outputs.as_ref().and_then(|o| o.artifact.map(|(d, _)| d)),
            time_ms: now_ms(),
            failed_tries: 0,
        }
    }

    /// Announces a task's final report: now, or — while proofs about it are still running —
    /// once the last of them concluded, so `TaskFinished` carries every verdict.
    pub(super) async fn announce_finished(&mut self, node: usize, report: TaskReport) {
        if self.proofs.awaiting[node] > 0 {
            self.proofs.held[node] = true;
            return;
        }
        self.send_finished(report).await;
    }

    async fn send_finished(&mut self, report: TaskReport) {
        let task = report.task.clone();
        let verdicts = report.verdicts.clone();
        let _ = self.events.send(RunEvent::TaskFinished(report)).await;
        for verdict in verdicts {
            let _ = self.events.send(RunEvent::Verdict { task: task.clone(), verdict }).await;
        }
    }

    /// Sends the held report of `node` if nothing about it is still to conclude.
    async fn release(&mut self, node: usize) {
        if self.proofs.awaiting[node] == 0
            && std::mem::take(&mut self.proofs.held[node])
            && let Some(r) = self.reports[node].clone()
        {
            self.send_finished(r).await;
        }
    }

    /// Sends every report still held (the run ends, interrupted, with proofs unfinished).
    pub(super) async fn release_all(&mut self) {
        for node in 0..self.proofs.held.len() {
            self.proofs.awaiting[node] = 0;
            self.release(node).await;
        }
    }

    /// Adds a verdict to the task's report, announces it, and starts the next re-run.
    async fn conclude(&mut self, node: usize, verdict: Verdict) {
        let task = self.plan.tasks[node].id.clone();
        if let Some(r) = &mut self.reports[node] {
            r.verdicts.push(verdict.clone());
        }
        self.proofs.awaiting[node] = self.proofs.awaiting[node].saturating_sub(1);
        if self.proofs.held[node] {
            self.release(node).await;
        } else {
            let _ = self.events.send(RunEvent::Verdict { task, verdict }).await;
        }
        self.proofs.outstanding = self.proofs.outstanding.saturating_sub(1);
        Box::pin(self.pump_reruns()).await;
    }

    /// Interrupted: queued re-runs will not start; running ones are cancelled.
    pub(super) async fn cancel_reruns(&mut self) {
        let queued: Vec<usize> = self.proofs.queue.drain(..).collect();
        self.proofs.outstanding = self.proofs.outstanding.saturating_sub(queued.len());
        for &node in &queued {
            self.proofs.awaiting[node] = self.proofs.awaiting[node].saturating_sub(1);
            self.release(node).await;
        }
        for (_, attempt) in self.proofs.in_flight.clone() {
            let _ = self.work.cancel(attempt).await;
        }
    }

    fn next_attempt_peek(&self) -> AttemptId {
        self.peek_attempt()
    }
}

impl Message<ProofDone> for RunActor {
    type Reply = ();

    async fn handle(&mut self, m: ProofDone, ctx: &mut Context<Self, Self::Reply>) {
        self.conclude(m.node, m.verdict).await;
        self.try_finish_run(ctx).await;
    }
}
