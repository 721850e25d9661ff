//! Proofs (`--verify`, brief §1; the reference design `000_*`): the inputs proof reads the
//! trace of a task's own execution in an exec root holding only its declared inputs; the
//! determinism proof re-runs a saved execution elsewhere — another worker, another exec-root
//! path, perturbed — and compares the output trees by content. Every execution lands in the
//! fingerprint ledger. The canonical (first) bytes stay on disk and in the cache whatever
//! the verdict; a re-run is never saved. Which verdict an execution earns is decided in
//! [`super::verdicts`]; this file carries the proofs out (queues re-runs, records ledger
//! rows, holds and releases reports).

use kameo::prelude::*;
use prova_protocol::events::{RunEvent, TaskReport, Verdict};
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Finished, Perturb};
use prova_protocol::{AttemptId, Digest, WorkerId};

use super::actor::RunActor;
use super::core::{self as decide, PrimaryOutputs, Purpose};
use super::reruns::{self, Announce, Reruns};
use super::verdicts::{self, Comparison};
use crate::cache::Execution;
use crate::layers::local::now_ms;

/// How long the end of a run waits for its ledger writes.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Proof bookkeeping of a run: the re-runs ([`Reruns`], sans-IO; the per-task part is in
/// [`super::core::TaskState`]) and the background work carrying the proofs out.
pub(super) struct Proofs {
    /// Queued and running re-runs, outstanding proofs.
    reruns: Reruns,
    /// Ledger writes and comparisons (not aborted by a node's save or restore).
    background: Vec<OwnedTask<()>>,
}

impl Proofs {
    pub(super) fn new(max_in_flight: usize) -> Self {
        Self { reruns: Reruns::new(max_in_flight), background: Vec::new() }
    }

    pub(super) fn outstanding(&self) -> usize {
        self.reruns.outstanding()
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

/// A comparison finished.
pub(super) struct ProofDone {
    node: usize,
    verdict: Verdict,
}

impl RunActor {
    /// Records a primary execution in the ledger and remembers its outputs for the proof.
    pub(super) fn record_primary(&mut self, node: usize, f: &Finished) {
        let Some(key) = self.key_of(node) else { return };
        let worker = self.state[node].worker_or(&self.worker);
        if let Some(o) = &f.outputs
            && f.exit.success()
        {
            self.state[node].primary = Some(PrimaryOutputs {
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
            compared: f.outputs.as_ref().filter(|_| f.exit.success()).and_then(|o| {
                verdicts::compared_fingerprint(&self.plan.tasks[node].spec, &o.manifest)
            }),
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

    /// Queues a determinism re-run of `node` (after its save, [`decide::after_save`]) —
    /// unless this run skips its proof ([`verdicts::skipped_proof`]: exempt, or not in the
    /// sample), when the verdict saying so is returned for its report (once: under
    /// `--verify=inputs` the inputs proof already recorded it).
    pub(super) async fn queue_rerun(&mut self, node: usize) -> Option<Verdict> {
        if let Some(v) = self.skipped_proof(node) {
            return (!self.options.verify.inputs).then_some(v);
        }
        self.proofs.reruns.queue(node, &mut self.state[node]);
        self.pump_reruns().await;
        None
    }

    /// Why this run skips the proofs of `node`, if it does (see [`verdicts::skipped_proof`]).
    pub(super) fn skipped_proof(&self, node: usize) -> Option<Verdict> {
        let key = self.key_of(node);
        verdicts::skipped_proof(&self.plan.tasks[node].spec, key.as_ref(), &self.options.verify)
    }

    /// Whether the task's own execution is the inputs proof's (traced in an exec root):
    /// under `--verify=inputs` unless its proof is skipped, and always for `sandbox = true`.
    pub(super) fn traces_inputs(&self, node: usize) -> bool {
        (self.options.verify.inputs && self.skipped_proof(node).is_none()) || self.sandboxed(node)
    }

    /// Whether the task sets `sandbox = true`.
    pub(super) fn sandboxed(&self, node: usize) -> bool {
        self.plan.tasks[node].spec.proof.sandbox
    }

    /// Starts queued re-runs while there is room.
    async fn pump_reruns(&mut self) {
        while let Some(node) = self.proofs.reruns.next(self.interrupted) {
            let before = self.peek_attempt();
            if self.assign(node, Purpose::Rerun).await.is_some() {
                // The link is gone: the proof cannot run.
                self.conclude(node, verdicts::link_closed_verdict()).await;
                continue;
            }
            self.proofs.reruns.started(node, before);
        }
    }

    /// A re-run ended: compare it with the first execution.
    pub(super) async fn on_rerun_finished(
        &mut self,
        node: usize,
        f: Box<Finished>,
        ctx: &mut Context<Self, ()>,
    ) {
        self.proofs.reruns.ended(node, f.attempt);
        let rerun_worker =
            self.state[node].rerun_worker.clone().unwrap_or_else(|| self.worker.clone());
        let staged = (!self.farm_worker()).then(|| self.staged_path(f.attempt));
        let key = self.key_of(node);
        let primary = self.state[node].primary.clone();
        let single_machine = !self.farm_worker()
            || primary.as_ref().and_then(|p| p.worker.as_ref()) == Some(&rerun_worker);
        // A farm re-run's report is checked like a first run's (`refuse_unconfined`): a
        // manifest outside the task's declared outputs, or a fingerprint that is not its
        // manifest's, is a lying worker — refused, recorded nowhere, and the proof fails.
        if self.farm_worker()
            && let Some(o) = &f.outputs
            && let Some(why) = decide::refusal(
                o,
                &self.output_globs(node),
                &self.plan.tasks[node].spec.project_dir,
            )
        {
            tracing::warn!(task = %self.plan.tasks[node].id, worker = %rerun_worker,
                "refused what the re-run's worker returned: {why}");
            let verdict = verdicts::refused_rerun_verdict(&rerun_worker, &why, &f);
            self.conclude(node, verdict).await;
            self.try_finish_run(ctx).await;
            return;
        }
        let allowed = self.options.verify.allow.contains(&self.plan.tasks[node].id);
        let spec = &self.plan.tasks[node].spec;
        let verdict =
            match verdicts::compare(primary.as_ref(), &f, &rerun_worker, single_machine, spec) {
                Comparison::Verdict(v) => v,
                Comparison::Diverged(mut divergence) => {
                    // Record first (a local re-run's artifact becomes a blob), then compare the
                    // two artifacts file by file, off the actor.
                    if let (Some(c), Some(key), Some(a), Some((b, _))) = (
                        &self.cache,
                        key,
                        primary.as_ref().and_then(|p| p.artifact),
                        f.outputs.as_ref().and_then(|o| o.artifact),
                    ) {
                        let layer = c.layer.clone();
                        let e = self.execution(node, key, rerun_worker.clone(), &f);
                        let me = ctx.actor_ref().clone();
                        self.proofs.spawn("run.proof.diff", async move {
                            let _ = layer.record(e, staged).await;
                            let mut changed = divergence.changed.clone();
                            changed.extend(divergence.added.iter().cloned());
                            changed.extend(divergence.removed.iter().cloned());
                            if let Ok(files) = layer.diff(a, b, changed).await {
                                divergence.files = files;
                            }
                            let verdict = verdicts::divergence_verdict(divergence, allowed);
                            let _ = me.tell(ProofDone { node, verdict }).await;
                        });
                        return;
                    }
                    verdicts::divergence_verdict(divergence, allowed)
                }
            };
        // A re-run that never ran (aborted, or the farm gave up placing it: every worker
        // refused or quarantined) is no evidence about the task: nothing is recorded.
        if let Some(key) = key
            && f.tries > 0
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
            compared: f.outputs.as_ref().and_then(|o| {
                verdicts::compared_fingerprint(&self.plan.tasks[node].spec, &o.manifest)
            }),
            manifest: f.outputs.as_ref().and_then(|o| rmp_serde::to_vec_named(&o.manifest).ok()),
            artifact: f.outputs.as_ref().and_then(|o| o.artifact.map(|(d, _)| d)),
            time_ms: now_ms(),
            failed_tries: 0,
        }
    }

    /// Announces a task's final report: now, or — while proofs about it are still running —
    /// once the last of them concluded, so `TaskFinished` carries every verdict.
    pub(super) async fn announce_finished(&mut self, node: usize, report: TaskReport) {
        if !reruns::hold_report(&mut self.state[node]) {
            self.send_finished(report).await;
        }
    }

    async fn send_finished(&mut self, report: TaskReport) {
        let task = report.task.clone();
        let verdicts = report.verdicts.clone();
        let _ = self.events.send(RunEvent::TaskFinished(report)).await;
        for verdict in verdicts {
            let _ = self.events.send(RunEvent::Verdict { task: task.clone(), verdict }).await;
        }
    }

    /// Sends every report still held (the run ends, interrupted, with proofs unfinished).
    pub(super) async fn release_all(&mut self) {
        for r in reruns::release_all(&mut self.state) {
            self.send_finished(r).await;
        }
    }

    /// Adds a verdict to the task's report, announces it, and starts the next re-run.
    async fn conclude(&mut self, node: usize, verdict: Verdict) {
        match self.proofs.reruns.conclude(&mut self.state[node], verdict) {
            Announce::Report(r) => self.send_finished(r).await,
            Announce::Verdict(verdict) => {
                let task = self.plan.tasks[node].id.clone();
                let _ = self.events.send(RunEvent::Verdict { task, verdict }).await;
            }
            Announce::Nothing => {}
        }
        Box::pin(self.pump_reruns()).await;
    }

    /// Interrupted: queued re-runs will not start; running ones are cancelled.
    pub(super) async fn cancel_reruns(&mut self) {
        let (queued, running) = self.proofs.reruns.interrupt(&mut self.state);
        for node in queued {
            if let Some(r) = reruns::release(&mut self.state[node]) {
                self.send_finished(r).await;
            }
        }
        for attempt in running {
            let _ = self.work.cancel(attempt).await;
        }
    }
}

impl Message<ProofDone> for RunActor {
    type Reply = ();

    async fn handle(&mut self, m: ProofDone, ctx: &mut Context<Self, Self::Reply>) {
        self.conclude(m.node, m.verdict).await;
        self.try_finish_run(ctx).await;
    }
}
