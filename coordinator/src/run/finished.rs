//! A primary execution's `Finished` report, in the run's state machine ([`Run`]): refused
//! when a farm worker lied about its outputs, failed on a sandbox violation or a write beside
//! its outputs, recorded in the ledger, then saved or reported now
//! ([`super::core::after_execution`]). Sans-IO: what it does goes out as commands.

use prova_protocol::WorkerId;
use prova_protocol::events::RunEvent;
use prova_protocol::events::{CacheStatus, NoticeLevel, TaskStatus};
use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::ExitKind;
use prova_protocol::work::{Finished, FromWorker};

use super::core::{self as decide, AfterExecution, Purpose};
use super::machine::{Command, Run};
use crate::scheduler::core::Event;

impl Run {
    /// The task's declared outputs as globs (none when they do not parse).
    pub(super) fn output_globs(&self, node: usize) -> PathGlobs {
        let spec = &self.plan.tasks[node].spec;
        PathGlobs::new(&spec.project_dir, &spec.outputs).unwrap_or_else(|_| PathGlobs::empty())
    }

    fn status_of(&self, node: usize, exit: &ExitKind) -> TaskStatus {
        decide::task_status(self.plan.tasks[node].kind, &self.state[node], self.interrupted, exit)
    }

    fn failure_note(&self, node: usize, exit: &ExitKind) -> String {
        decide::failure_note(self.plan.tasks[node].kind, &self.state[node], exit)
    }

    /// An attempt finished: a re-run is compared, a primary execution reported (or saved
    /// first); `Some` is the scheduler's event when the task is done now.
    pub(super) fn on_finished(&mut self, f: Box<Finished>) -> Option<Event> {
        let (node, purpose) = self.attempts.remove(&f.attempt)?;
        if purpose == Purpose::Rerun {
            self.on_rerun_arrived(node, f);
            return None;
        }
        self.state[node].live = None;
        if self.interrupted && f.tries == 0 && f.exit == ExitKind::Aborted {
            // Cancelled by the interrupt before it started (queued on the farm or a worker):
            // skipped, as the tasks the scheduler had not dispatched yet.
            let note = "the run was interrupted before it started".to_owned();
            let r = self.report(
                node,
                TaskStatus::Skipped,
                CacheStatus::Uncached,
                None,
                0,
                Default::default(),
                Some(note),
            );
            self.finish(node, r);
            return Some(Event::Finished { node, ok: false });
        }
        if let Some(refused) = self.refuse_unconfined(node, &f) {
            return Some(refused);
        }
        // Downstream exec roots unpack this artifact whether or not the entry is saved; its
        // dependents' keys fold its fingerprint.
        self.state[node].artifact = f.outputs.as_ref().and_then(|o| o.artifact);
        self.state[node].fingerprint = f.outputs.as_ref().map(|o| o.fingerprint);
        if f.log_omitted > 0 {
            let msg = format!("{} bytes of output were omitted from the stored log", f.log_omitted);
            self.notice(node, NoticeLevel::Info, msg);
        }
        let status = self.status_of(node, &f.exit);
        let ok = status == TaskStatus::Succeeded;
        self.push(Command::WatchAfter { node, ok });
        self.record_primary(node, &f);
        self.after_primary(node, f, status)
    }

    /// A primary execution that was not refused: its proofs' verdicts, then its failure, its
    /// save or its report.
    fn after_primary(
        &mut self,
        node: usize,
        f: Box<Finished>,
        status: TaskStatus,
    ) -> Option<Event> {
        let cacheable = self.cacheable(node);
        let found = if cacheable && self.traces_inputs(node) {
            let t = &self.plan.tasks[node];
            let trees: Vec<&str> =
                t.inputs.iter().filter(|i| i.tree).map(|i| i.path.as_str()).collect();
            super::verdicts::inputs_verdicts(&t.spec, &trees, &self.options.verify, &f, status)
        } else {
            Vec::new()
        };
        if self.sandboxed(node)
            && let Some(note) = super::verdicts::sandbox_violation(&found)
        {
            // A sandboxed task that read or wrote what it did not declare fails; nothing of
            // it is saved.
            self.discard_staged(f.attempt);
            let reason = "sandbox violation".to_owned();
            let mut r = self.failed(node, &f, CacheStatus::NotSaved { reason }, note);
            // A farm's client judges what the task looked up against its workspace, and
            // words the note as a local run does (`remote::run::Judge`): it gets the
            // verdicts, and keeps them only under `--verify=inputs`.
            if self.options.verify.inputs || self.farm_worker() {
                r.verdicts = found;
            }
            self.finish(node, r);
            return Some(Event::Finished { node, ok: false });
        }
        if status == TaskStatus::Succeeded
            && let Some(w) = &f.wrote_outside
        {
            // It wrote beside its outputs in its exec root: what it wrote is gone with the
            // root, so it fails rather than pass without it; nothing of it is saved.
            self.discard_staged(f.attempt);
            let reason = "it wrote outside its declared outputs".to_owned();
            let note = decide::wrote_outside_note(w);
            let mut r = self.failed(node, &f, CacheStatus::NotSaved { reason }, note);
            if self.options.verify.inputs && cacheable {
                r.verdicts = self.skipped_proof(node).map_or(found, |s| vec![s]);
            }
            self.finish(node, r);
            return Some(Event::Finished { node, ok: false });
        }
        if self.options.verify.inputs && cacheable {
            match self.skipped_proof(node) {
                Some(skipped) => self.state[node].pending.push(skipped),
                None => self.state[node].pending.extend(found),
            }
        }
        self.save_or_report(node, f, status)
    }

    /// The report of an execution failed for `note`, with `cache`.
    fn failed(
        &self,
        node: usize,
        f: &Finished,
        cache: CacheStatus,
        note: String,
    ) -> prova_protocol::events::TaskReport {
        let exit = Some(f.exit.clone());
        self.report(node, TaskStatus::Failed, cache, exit, f.tries, f.stats, Some(note))
    }

    /// Saves the execution ([`super::cached`]) or reports it now.
    fn save_or_report(
        &mut self,
        node: usize,
        f: Box<Finished>,
        status: TaskStatus,
    ) -> Option<Event> {
        let v = &self.options.verify;
        let (cache, unprovable) = match decide::after_execution(
            self.cache_use(node),
            status,
            &f.exit,
            v.determinism,
            v.inputs,
        ) {
            AfterExecution::Save => return self.start_save(node, f),
            AfterExecution::Report { cache, unprovable } => (cache, unprovable),
        };
        self.discard_staged(f.attempt);
        let note = (status == TaskStatus::Failed).then(|| {
            let note = self.failure_note(node, &f.exit);
            f.exit_detail.as_ref().map_or_else(|| note.clone(), |d| format!("{note} ({d})"))
        });
        let ok = status == TaskStatus::Succeeded;
        let mut r = self.report(node, status, cache, Some(f.exit.clone()), f.tries, f.stats, note);
        if unprovable {
            r.verdicts.push(super::verdicts::unprovable(&self.plan.tasks[node]));
        }
        self.finish(node, r);
        Some(Event::Finished { node, ok })
    }

    /// Refuses what a farm worker returned when its manifest is not the task's declared
    /// outputs (a lying or compromised worker: a `.git/hooks` file, another project's
    /// source, a link out of the project) or its fingerprint is not the manifest's. Called
    /// before anything of the report is recorded, stored or handed downstream: the task
    /// fails, naming the worker and the first offending path, and nothing is filed in any
    /// namespace. `None` when the report may proceed.
    fn refuse_unconfined(&mut self, node: usize, f: &Finished) -> Option<Event> {
        if !self.farm_worker() {
            return None;
        }
        let outputs = f.outputs.as_ref()?;
        let globs = self.output_globs(node);
        let project = &self.plan.tasks[node].spec.project_dir;
        let why = decide::refusal(outputs, &globs, project)?;
        let worker = self.state[node].worker_or(&self.worker);
        let task = self.plan.tasks[node].id.clone();
        tracing::warn!(%task, %worker, "refused what the worker returned: {why}");
        let note = format!("worker `{worker}` returned {why}; refused, nothing was stored");
        self.discard_staged(f.attempt);
        let cache = CacheStatus::NotSaved { reason: format!("refused: worker `{worker}` lied") };
        let r = self.failed(node, f, cache, note);
        self.finish(node, r);
        Some(Event::Finished { node, ok: false })
    }

    /// A worker's report: progress becomes events, `Finished` the task's next step.
    pub(super) fn on_worker(&mut self, msg: FromWorker, worker: Option<WorkerId>) {
        let attempt = match &msg {
            FromWorker::Started { attempt, .. }
            | FromWorker::Output { attempt, .. }
            | FromWorker::Ready { attempt } => *attempt,
            FromWorker::Finished(f) => f.attempt,
        };
        let held = self.attempts.get(&attempt).copied();
        if let (Some((node, purpose)), Some(w)) = (held, worker) {
            match purpose {
                Purpose::Primary => self.state[node].ran_on = Some(w),
                Purpose::Rerun => self.state[node].rerun_worker = Some(w),
            }
        }
        // A re-run's output is not the task's: it is compared, never shown.
        let primary = match held {
            Some((node, Purpose::Primary)) => Some(node),
            _ => None,
        };
        match msg {
            FromWorker::Started { try_no, .. } => {
                if let Some(node) = primary {
                    let task = self.plan.tasks[node].id.clone();
                    let worker = self.state[node].worker_or(&self.worker);
                    self.emit(RunEvent::TaskStarted { task, attempt: try_no, worker });
                }
            }
            FromWorker::Output { text, .. } => {
                if let Some(node) = primary {
                    let task = self.plan.tasks[node].id.clone();
                    self.emit(RunEvent::Output { task, text });
                }
            }
            FromWorker::Ready { .. } => {
                if let Some(node) = primary {
                    self.state[node].ready = true;
                    let task = self.plan.tasks[node].id.clone();
                    self.emit(RunEvent::TaskReady { task });
                    self.feed(Event::Ready { node });
                }
            }
            FromWorker::Finished(f) => {
                if let Some(ev) = self.on_finished(f) {
                    self.feed(ev);
                }
            }
        }
    }
}
