//! The cache side of the run's state machine ([`Run`]): hits found current before the first
//! dispatch, a key settled at dispatch looked up, a hit restored instead of running the
//! task, and an execution filed (or withheld, with the reason). Sans-IO: the lookups,
//! restores and saves go out as commands ([`Command::Probe`], [`Command::Restore`],
//! [`Command::Save`]) and come back as inputs; the shell carries them out
//! ([`super::effects`]).

use prova_protocol::Digest;
use prova_protocol::events::{CacheStatus, NoticeLevel, RunEvent, TaskStatus};
use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::ExecStats;
use prova_protocol::work::Finished;

use super::core::{self as decide, AfterSave};
use super::effects::SaveError;
use super::machine::{Command, Run};
use crate::cache::Entry;
use crate::layers::{HitQuery, LayerError, Restored, SaveOutcome, SaveRequest};
use crate::scheduler::core::Event;

/// What a hit's entry says, kept while it is restored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HitMeta {
    /// The entry's artifact (downstream exec roots unpack it).
    artifact: Option<(Digest, u64)>,
    /// The entry's output fingerprint (its dependents' keys fold it).
    fingerprint: Option<Digest>,
    /// The entry's recorded execution time: what the hit saved.
    saved_ms: u64,
    /// When the entry was last marked used (the touch at the run's end may skip it).
    last_used_ms: i64,
}

impl HitMeta {
    fn of(entry: &Entry) -> Self {
        Self {
            artifact: entry.artifact,
            fingerprint: crate::keys::progressive::entry_fingerprint(entry),
            saved_ms: entry.duration_ms,
            last_used_ms: entry.last_used_ms,
        }
    }
}

/// An execution being filed.
#[derive(Debug)]
pub(crate) struct PendingSave {
    finished: Box<Finished>,
    /// Declared output patterns no file matched (warned about when the entry is saved).
    matched_nothing: Vec<String>,
}

/// What [`Command::Save`] files, and how.
#[derive(Debug)]
pub(crate) struct SaveJob {
    /// The task.
    pub node: usize,
    /// The entry to file.
    pub req: SaveRequest,
    /// The task's declared outputs.
    pub globs: PathGlobs,
    /// Its declared output patterns (checked against its newest entry).
    pub patterns: Vec<String>,
    /// Its project directory.
    pub project: String,
    /// Once saved, restore the entry into the workspace (it ran in an exec root).
    pub restore_into_workspace: bool,
}

/// A save finished ([`Input::Saved`](super::machine::Input::Saved)).
#[derive(Debug)]
pub(crate) struct SaveDone {
    /// The task.
    pub node: usize,
    /// Filed, withheld, or failed.
    pub result: Result<SaveOutcome, SaveError>,
    /// The outputs came out with fewer files than the task's newest entry: the warning.
    pub shrunk: Option<String>,
    /// Upstreams that kept their bytes but moved this task's key (it is not confined, so it
    /// was not cut off): the note.
    pub blocked_cutoff: Vec<String>,
}

impl Run {
    /// The hits the layer is asked about in one batch before the first dispatch
    /// ([`crate::layers::CacheLayer::resolve_current`]); `None` when there are none. Those
    /// found current finish when dispatched without a restore
    /// ([`finish_current_hit`](Self::finish_current_hit)); the rest restore one by one.
    pub(super) fn hit_queries(&mut self) -> Option<Vec<HitQuery>> {
        let c = self.cache.as_ref()?;
        let mut nodes: Vec<usize> =
            c.hits.keys().copied().filter(|&n| self.cache_use(n).reads).collect();
        nodes.sort_unstable();
        let mut queries = Vec::with_capacity(nodes.len());
        for n in nodes {
            let outputs = self.output_globs(n);
            let project_dir = self.plan.tasks[n].spec.project_dir.clone();
            let Some(entry) = self.cache.as_mut().and_then(|c| c.hits.remove(&n)) else {
                continue;
            };
            self.resolving.push(n);
            queries.push(HitQuery { entry, outputs, project_dir });
        }
        (!queries.is_empty()).then_some(queries)
    }

    /// The batch answered, in the order asked: hits go back to their tasks, the current
    /// ones remembered; then the run starts.
    pub(super) fn hits_resolved(
        &mut self,
        result: Result<Vec<(Entry, Option<Restored>)>, LayerError>,
    ) {
        let nodes = std::mem::take(&mut self.resolving);
        match result {
            Ok(back) => {
                for (node, (entry, restored)) in nodes.into_iter().zip(back) {
                    if let Some(c) = &mut self.cache {
                        c.hits.insert(node, entry);
                    }
                    if let Some(r) = restored {
                        self.current.insert(node, r);
                    }
                }
            }
            // The layer failed as a whole (its cache thread is gone): the hits are lost, and
            // the tasks run, as they would after a failed restore.
            Err(e) => tracing::warn!("resolving the run's hits failed: {e}"),
        }
        self.feed(Event::Start);
    }

    /// Finishes `node` as a hit on the spot when the batch found its outputs current and
    /// nothing of this run has touched its project since; `None` when it must restore (or
    /// run).
    pub(super) fn finish_current_hit(&mut self, node: usize) -> Option<Event> {
        let restored = self.current.remove(&node)?;
        if !self.cache_use(node).reads
            || self.touched.contains(&self.plan.tasks[node].spec.project_dir)
        {
            return None;
        }
        let entry = self.cache.as_mut()?.hits.remove(&node)?;
        self.hit_done(node, HitMeta::of(&entry), restored);
        Some(Event::Finished { node, ok: true })
    }

    /// Looks up `key`, settled at dispatch, when the task may read the cache: `true` when the
    /// lookup started (the task restores or runs when it answers).
    pub(super) fn start_probe(&mut self, node: usize, key: Digest) -> bool {
        if !self.cache_use(node).reads || self.cache.is_none() {
            return false;
        }
        self.push(Command::Probe { node, key });
        true
    }

    /// The lookup of a key settled at dispatch answered.
    pub(super) fn probed(
        &mut self,
        node: usize,
        key: Digest,
        result: Result<Option<Entry>, LayerError>,
    ) {
        if self.interrupted {
            self.finish_interrupted(node);
            return;
        }
        match result {
            Ok(Some(entry)) if entry.key == key => {
                if let Some(c) = &mut self.cache {
                    c.hits.insert(node, entry);
                }
            }
            Ok(_) => {}
            // A lookup that failed is a miss: the task runs, as after a failed restore.
            Err(e) => {
                tracing::warn!(task = %self.plan.tasks[node].id, "looking up its key failed: {e}")
            }
        }
        if let Some(ev) = self.restore_or_run(node) {
            self.feed(ev);
        }
    }

    /// Reports `node` a hit of the run's layer (its stored log replayed).
    fn hit_done(&mut self, node: usize, hit: HitMeta, restored: Restored) {
        self.state[node].artifact = hit.artifact;
        self.state[node].fingerprint = hit.fingerprint;
        let task = self.plan.tasks[node].id.clone();
        if !restored.log.is_empty() {
            self.emit(RunEvent::Output { task, text: restored.log });
        }
        if let Some(k) = self.key_of(node) {
            self.hit_keys.push((k, hit.last_used_ms));
        }
        let layer = self.cache.as_ref().map_or("local", |c| c.layer).to_owned();
        // An upstream folded by outputs executed in this run, yet the key held: a cutoff.
        let cutoff = self.cache.as_ref().is_some_and(|c| {
            c.keys.any_output_upstream(&self.plan, node, |d| {
                self.state[d].report.as_ref().is_some_and(|r| r.attempts > 0)
            })
        });
        let cache = CacheStatus::Hit { layer, saved_ms: hit.saved_ms, cutoff };
        let mut r =
            self.report(node, TaskStatus::Succeeded, cache, None, 0, ExecStats::default(), None);
        if self.options.verify.any() {
            r.verdicts.push(decide::not_run_verdict(false));
        }
        self.finish(node, r);
    }

    /// Starts restoring `node` from its hit, if it has one; `false` when it must run.
    pub(super) fn start_restore(&mut self, node: usize) -> bool {
        if !self.cache_use(node).reads {
            return false;
        }
        let globs = self.output_globs(node);
        let project = self.plan.tasks[node].spec.project_dir.clone();
        let Some(c) = &mut self.cache else { return false };
        let Some(entry) = c.hits.remove(&node) else { return false };
        // A restore writes into the project: later pre-resolved hits there look again.
        self.touched.insert(project);
        self.restoring.insert(node, HitMeta::of(&entry));
        self.push(Command::Restore { node, entry: Box::new(entry), globs });
        true
    }

    /// A restore answered: a hit, or the task runs after all.
    pub(super) fn restored(&mut self, node: usize, result: Result<Option<Restored>, LayerError>) {
        let hit = self.restoring.remove(&node);
        if self.interrupted {
            self.finish_interrupted(node);
            return;
        }
        match (result, hit) {
            (Ok(Some(restored)), Some(hit)) => {
                self.hit_done(node, hit, restored);
                self.feed(Event::Finished { node, ok: true });
            }
            (other, _) => {
                let why = match &other {
                    Err(e) => decide::restore_fallback_notice(Some(e as &dyn std::fmt::Display)),
                    _ => decide::restore_fallback_notice(None),
                };
                self.notice(node, NoticeLevel::Warn, why);
                if let Some(ev) = self.primary(node) {
                    self.feed(ev);
                }
            }
        }
    }

    /// Files a successful execution (unless its outputs disqualify it); the task is reported
    /// when the save completes.
    pub(super) fn start_save(&mut self, node: usize, f: Box<Finished>) -> Option<Event> {
        if let Some(reason) = decide::withheld_before_save(&f) {
            self.discard_staged(f.attempt);
            let mut r = self.report(
                node,
                TaskStatus::Succeeded,
                CacheStatus::NotSaved { reason: reason.clone() },
                Some(f.exit.clone()),
                f.tries,
                f.stats,
                None,
            );
            if self.options.verify.determinism {
                r.verdicts.push(decide::not_saved_verdict(Some(&reason)));
            }
            self.finish(node, r);
            return Some(Event::Finished { node, ok: true });
        }
        let spec = &self.plan.tasks[node].spec;
        let matched_nothing = f.outputs.as_ref().map_or_else(Vec::new, |o| {
            decide::outputs_matching_nothing(&spec.project_dir, &spec.outputs, &o.manifest)
        });
        let farm = self.farm_worker();
        // A local task that ran in an exec root (an inputs proof) must also appear in the
        // workspace: what runs after it in place reads its outputs there.
        let restore_into_workspace = decide::restore_into_workspace(
            &self.exec,
            farm,
            self.options.verify.inputs || self.sandboxed(node),
        );
        let staged_path = self.staged_path(f.attempt);
        let (Some(c), Some(outputs), Some(key)) = (&self.cache, &f.outputs, self.key_of(node))
        else {
            return None;
        };
        let staged = outputs.artifact.map(|(d, _)| d);
        let req = SaveRequest {
            task: self.plan.tasks[node].id.to_string(),
            key,
            components: c.keys.components[node].clone(),
            manifest: outputs.manifest.clone(),
            // A farm worker uploaded the artifact already; locally it is staged.
            artifact: staged.map(|d| (d, (!farm).then_some(staged_path))),
            log: f.log.clone(),
            duration_ms: f.stats.wall_ms,
            // An exec-root execution read copies taken at materialisation, not the workspace.
            stamps: if restore_into_workspace { Vec::new() } else { c.keys.stamps[node].clone() },
            // Its programs are this machine's wherever it ran.
            shadows: c.keys.shadows.get(node).cloned().unwrap_or_default(),
        };
        let job = SaveJob {
            node,
            req,
            globs: self.output_globs(node),
            patterns: spec.outputs.clone(),
            project: spec.project_dir.clone(),
            restore_into_workspace,
        };
        self.saving.insert(node, PendingSave { finished: f, matched_nothing });
        self.push(Command::Save(Box::new(job)));
        None
    }

    /// A save answered: the task is reported (its re-run queued under `--verify`).
    pub(super) fn saved(&mut self, msg: SaveDone) {
        let node = msg.node;
        let Some(PendingSave { finished: f, matched_nothing }) = self.saving.remove(&node) else {
            return;
        };
        let saved = matches!(msg.result, Ok(SaveOutcome::Saved));
        if saved && let Some(w) = decide::matched_nothing_warning(&matched_nothing) {
            self.notice(node, NoticeLevel::Warn, w);
        }
        if let Some(w) = msg.shrunk
            && saved
        {
            self.notice(node, NoticeLevel::Warn, w);
        }
        if !msg.blocked_cutoff.is_empty() {
            self.notice(node, NoticeLevel::Info, decide::blocked_cutoff_note(&msg.blocked_cutoff));
        }
        let (cache, saved) = match msg.result {
            Ok(SaveOutcome::Saved) => (CacheStatus::Saved, true),
            Ok(SaveOutcome::Withheld(reason)) => {
                self.discard_staged(f.attempt);
                (CacheStatus::NotSaved { reason }, false)
            }
            Err(e) => {
                self.discard_staged(f.attempt);
                (CacheStatus::NotSaved { reason: format!("saving failed: {e}") }, false)
            }
        };
        let mut r = self.report(
            node,
            TaskStatus::Succeeded,
            cache.clone(),
            Some(f.exit.clone()),
            f.tries,
            f.stats,
            None,
        );
        let primary = self.state[node].primary.as_ref();
        match decide::after_save(self.options.verify.determinism, saved, &cache, primary) {
            AfterSave::Nothing => {}
            AfterSave::Verdict(v) => r.verdicts.push(*v),
            AfterSave::Rerun => r.verdicts.extend(self.queue_rerun(node)),
        }
        self.finish(node, r);
        self.feed(Event::Finished { node, ok: true });
    }
}
