//! Proofs (`--verify`, brief §1; the reference design `000_*`): the inputs proof reads the
//! trace of a task's own execution in an exec root holding only its declared inputs; the
//! determinism proof re-runs a saved execution elsewhere — another worker, another exec-root
//! path, perturbed — and compares the output trees by content (the re-run is queued after
//! the save, or started beside the first execution and counted once it is saved:
//! [`Run::reruns_beside`], [`super::reruns`]). Every execution lands in the
//! fingerprint ledger. The canonical (first) bytes stay on disk and in the cache whatever
//! the verdict; a re-run is never saved. Which verdict an execution earns is decided in
//! [`super::verdicts`]; this file carries the proofs out (queues re-runs, records ledger
//! rows, holds and releases reports).

use prova_protocol::events::{Divergence, RunEvent, TaskReport, Verdict};
use prova_protocol::work::{Finished, Perturb};
use prova_protocol::{AttemptId, Digest, WorkerId};

use super::core::{self as decide, PrimaryOutputs, Purpose};
use super::machine::{Command, Run};
use super::reruns::{self, Announce, Arrived};
use super::verdicts::{self, Comparison};
use crate::cache::Execution;

/// A diverging re-run to record and compare file by file ([`Command::Diff`]).
#[derive(Debug)]
pub(crate) struct DiffJob {
    /// The task.
    pub node: usize,
    /// The re-run's ledger row (recorded first: a local re-run's artifact becomes a blob).
    pub execution: Execution,
    /// The re-run's staged artifact (local).
    pub staged: Option<std::path::PathBuf>,
    /// The first execution's artifact.
    pub first: Digest,
    /// The re-run's artifact.
    pub rerun: Digest,
    /// What diverged (its files filled by the comparison).
    pub divergence: Divergence,
    /// Whether the divergence is allowed (`--verify-allow`).
    pub allowed: bool,
}

/// What a determinism re-run changes that no declared input may depend on (brief §7): the
/// exec root's path (a fresh root elsewhere on the worker) and the order its files are made
/// in, the hostname and uid (under the sandbox), the umask, the time zone, the locale, the
/// user name, the environment order, `SOURCE_DATE_EPOCH` (set), the wall clock (+7 days,
/// libfaketime), the CPUs (one), and `TMPDIR`. The worker reports which it applied
/// (`Finished::perturbed`; `worker::perturb`).
/// Names the task declares in `env` (`declared`) keep their values, set or unset.
pub fn perturbation(attempt: AttemptId, declared: &[String]) -> Perturb {
    perturbation_for(attempt, declared, &std::env::var("LANG").unwrap_or_default())
}

/// [`perturbation`] on a host whose `LANG` is `host_lang`.
pub(crate) fn perturbation_for(
    attempt: AttemptId,
    declared: &[String],
    host_lang: &str,
) -> Perturb {
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

impl Run {
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
        if self.cache.is_some() {
            let execution = self.execution(node, key, worker, false, f);
            self.push(Command::Record { execution: Box::new(execution), staged: None });
        }
    }

    /// The ledger row of an execution of `node` (`time_ms` is stamped when recorded).
    fn execution(
        &self,
        node: usize,
        key: Digest,
        worker: WorkerId,
        rerun: bool,
        f: &Finished,
    ) -> Execution {
        let spec = &self.plan.tasks[node].spec;
        // Outputs count only when the execution succeeded (a diverging re-run's always:
        // [`Self::diverged_execution`]).
        let outputs = f.outputs.as_ref().filter(|_| f.exit.success());
        Execution {
            key,
            task: self.plan.tasks[node].id.to_string(),
            worker: worker.0,
            platform: self
                .cache
                .as_ref()
                .and_then(|c| c.keys.components[node].platform.clone())
                .unwrap_or_else(|| "portable".to_owned()),
            rerun,
            ok: f.exit.success(),
            fingerprint: outputs.map(|o| o.fingerprint),
            compared: outputs.and_then(|o| verdicts::compared_fingerprint(spec, &o.manifest)),
            manifest: f.outputs.as_ref().and_then(|o| rmp_serde::to_vec_named(&o.manifest).ok()),
            artifact: if rerun {
                f.outputs.as_ref().and_then(|o| o.artifact.map(|(d, _)| d))
            } else {
                None
            },
            time_ms: 0,
            // Every try before the last failed (a success ends the tries): a pass after
            // failures with one key, in one environment, is flaky.
            failed_tries: if f.exit.success() { f.tries.saturating_sub(1) } else { 0 },
        }
    }

    /// The ledger row of a re-run whose outputs diverged: its outputs count whatever its
    /// exit, and its tries are not a flake's.
    fn diverged_execution(
        &self,
        node: usize,
        key: Digest,
        worker: WorkerId,
        f: &Finished,
    ) -> Execution {
        let mut e = self.execution(node, key, worker, true, f);
        let spec = &self.plan.tasks[node].spec;
        e.fingerprint = f.outputs.as_ref().map(|o| o.fingerprint);
        e.compared =
            f.outputs.as_ref().and_then(|o| verdicts::compared_fingerprint(spec, &o.manifest));
        e.failed_tries = 0;
        e
    }

    /// Queues a determinism re-run of `node` (after its save, [`decide::after_save`]) —
    /// unless this run skips its proof ([`verdicts::skipped_proof`]: exempt, or not in the
    /// sample), when the verdict saying so is returned for its report (once: under
    /// `--verify=inputs` the inputs proof already recorded it).
    pub(super) fn queue_rerun(&mut self, node: usize) -> Option<Verdict> {
        if let Some(v) = self.skipped_proof(node) {
            return (!self.options.verify.inputs).then_some(v);
        }
        // An early re-run started beside the first execution makes the proof.
        if !self.reruns.confirm(node) {
            self.reruns.queue(node, &mut self.state[node]);
        }
        self.pump_reruns();
        None
    }

    /// Whether the determinism re-run of `node` starts beside its first execution (handed
    /// out now; `in_place`: the first execution runs in the workspace) rather than after its
    /// save. Only off the farm (a local worker, a REAPI farm: the farm places a re-run away
    /// from the first execution's worker, known only once placed); only when a save is
    /// possible and the proof not skipped; and, for a first execution in the workspace, only
    /// when its outputs lie apart from its inputs ([`Self::outputs_apart`]). Until the save
    /// confirms the proof its result is held; if the save never comes, it is withdrawn
    /// ([`super::reruns`]).
    pub(super) fn reruns_beside(&self, node: usize, in_place: bool) -> bool {
        self.options.verify.determinism
            && !self.farm_worker()
            && self.cache_use(node).writes
            && self.skipped_proof(node).is_none()
            && (!in_place || self.outputs_apart(node))
    }

    /// Whether `node` declares outputs and none of them lies where one of its declared
    /// inputs does (no input inside an output's root, no output root inside an input, a
    /// tree's directory included). A first execution in the workspace cleans and writes its
    /// declared outputs there: apart from its inputs, it cannot change the files its re-run's
    /// exec root is being copied from.
    fn outputs_apart(&self, node: usize) -> bool {
        use prova_protocol::globs::is_within;
        let globs = self.output_globs(node);
        let roots = globs.roots();
        !globs.is_empty()
            && self.plan.tasks[node]
                .inputs
                .iter()
                .all(|i| roots.iter().all(|r| !is_within(&i.path, r) && !is_within(r, &i.path)))
    }

    /// Queues the early re-run of `node` (see [`Self::reruns_beside`]).
    pub(super) fn start_early_rerun(&mut self, node: usize) {
        if self.reruns.queue_early(node, &mut self.state[node]) {
            self.pump_reruns();
        }
    }

    /// The first execution of `node` ended without a proof to make: its early re-run, if
    /// any and not confirmed, is cancelled or its result dropped.
    pub(super) fn withdraw_early_rerun(&mut self, node: usize) {
        let Some(w) = self.reruns.withdraw(node, &mut self.state[node]) else { return };
        if let Some(attempt) = w.cancel {
            self.push(Command::Cancel(attempt));
        }
        if let Some(attempt) = w.discard {
            self.discard_staged(attempt);
        }
    }

    /// A confirmed early re-run's result that came before the task's report: compared now.
    pub(super) fn compare_confirmed_rerun(&mut self, node: usize) {
        if let Some(f) = self.reruns.take_confirmed(node) {
            self.on_rerun_finished(node, f);
        }
    }

    /// A re-run's report came: compared now, or held (an early re-run whose first execution
    /// is not saved yet), or dropped (its proof was withdrawn).
    pub(super) fn on_rerun_arrived(&mut self, node: usize, f: Box<Finished>) {
        match self.reruns.arrived(node, f) {
            Arrived::Compare(f) => self.on_rerun_finished(node, f),
            Arrived::Held => self.pump_reruns(),
            Arrived::Dropped(f) => {
                self.discard_staged(f.attempt);
                self.pump_reruns();
                self.try_finish_run();
            }
        }
    }

    /// Why this run skips the proofs of `node`, if it does (see [`verdicts::skipped_proof`]).
    pub(super) fn skipped_proof(&self, node: usize) -> Option<Verdict> {
        let key = self.key_of(node);
        verdicts::skipped_proof(&self.plan.tasks[node].spec, key.as_ref(), &self.options.verify)
    }

    /// Whether the task's own execution is the inputs proof's (traced in an exec root):
    /// under `--verify=inputs` unless its proof is skipped, and always for `sandbox = true`.
    pub(super) fn traces_inputs(&self, node: usize) -> bool {
        self.proves_inputs(node) || self.sandboxed(node)
    }

    /// Whether the run proves `node`'s inputs (`--verify=inputs`, its proof not skipped).
    pub(super) fn proves_inputs(&self, node: usize) -> bool {
        self.options.verify.inputs && self.skipped_proof(node).is_none()
    }

    /// Whether the task sets `sandbox = true`.
    pub(super) fn sandboxed(&self, node: usize) -> bool {
        self.plan.tasks[node].spec.proof.sandbox
    }

    /// Starts queued re-runs while there is room.
    fn pump_reruns(&mut self) {
        while let Some(node) = self.reruns.next(self.interrupted) {
            let attempt = self.assign(node, Purpose::Rerun);
            self.reruns.started(node, attempt);
        }
    }

    /// A re-run ended (and is no longer in flight): compare it with the first execution.
    fn on_rerun_finished(&mut self, node: usize, f: Box<Finished>) {
        let rerun_worker =
            self.state[node].rerun_worker.clone().unwrap_or_else(|| self.worker.clone());
        let staged = (!self.farm_worker()).then(|| self.staged_path(f.attempt));
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
            self.conclude(node, verdict);
            self.try_finish_run();
            return;
        }
        let allowed = self.options.verify.allow.contains(&self.plan.tasks[node].id);
        let spec = &self.plan.tasks[node].spec;
        let verdict =
            match verdicts::compare(primary.as_ref(), &f, &rerun_worker, single_machine, spec) {
                Comparison::Verdict(v) => v,
                Comparison::Diverged(divergence) => {
                    // Record first (a local re-run's artifact becomes a blob), then compare the
                    // two artifacts file by file, off the actor.
                    if let (true, Some(key), Some(first), Some((rerun, _))) = (
                        self.cache.is_some(),
                        self.key_of(node),
                        primary.as_ref().and_then(|p| p.artifact),
                        f.outputs.as_ref().and_then(|o| o.artifact),
                    ) {
                        let execution = self.diverged_execution(node, key, rerun_worker, &f);
                        let job =
                            DiffJob { node, execution, staged, first, rerun, divergence, allowed };
                        self.push(Command::Diff(Box::new(job)));
                        return;
                    }
                    verdicts::divergence_verdict(divergence, allowed)
                }
            };
        // A re-run that never ran (aborted, or the farm gave up placing it: every worker
        // refused or quarantined) is no evidence about the task: nothing is recorded.
        if let Some(key) = self.key_of(node)
            && self.cache.is_some()
            && f.tries > 0
            && !matches!(f.exit, prova_protocol::spec::ExitKind::Aborted)
        {
            let execution = self.execution(node, key, rerun_worker, true, &f);
            self.push(Command::Record { execution: Box::new(execution), staged });
        }
        self.conclude(node, verdict);
        self.try_finish_run();
    }

    /// Announces a task's final report: now, or — while proofs about it are still running —
    /// once the last of them concluded, so `TaskFinished` carries every verdict.
    pub(super) fn announce_finished(&mut self, node: usize, report: TaskReport) {
        if !reruns::hold_report(&mut self.state[node]) {
            self.send_finished(report);
        }
    }

    fn send_finished(&mut self, report: TaskReport) {
        let task = report.task.clone();
        let verdicts = report.verdicts.clone();
        self.emit(RunEvent::TaskFinished(report));
        for verdict in verdicts {
            self.emit(RunEvent::Verdict { task: task.clone(), verdict });
        }
    }

    /// Sends every report still held (the run ends, interrupted, with proofs unfinished).
    pub(super) fn release_all(&mut self) {
        for r in reruns::release_all(&mut self.state) {
            self.send_finished(r);
        }
    }

    /// Adds a verdict to the task's report, announces it, and starts the next re-run.
    pub(super) fn conclude(&mut self, node: usize, verdict: Verdict) {
        match self.reruns.conclude(&mut self.state[node], verdict) {
            Announce::Report(r) => self.send_finished(r),
            Announce::Verdict(verdict) => {
                let task = self.plan.tasks[node].id.clone();
                self.emit(RunEvent::Verdict { task, verdict });
            }
            Announce::Nothing => {}
        }
        self.pump_reruns();
    }

    /// Interrupted: queued re-runs will not start; running ones are cancelled.
    pub(super) fn cancel_reruns(&mut self) {
        let (queued, running) = self.reruns.interrupt(&mut self.state);
        for node in queued {
            if let Some(r) = reruns::release(&mut self.state[node]) {
                self.send_finished(r);
            }
        }
        for attempt in running {
            self.push(Command::Cancel(attempt));
        }
    }
}

#[cfg(test)]
#[path = "early_rerun_tests.rs"]
mod early_rerun_tests;
