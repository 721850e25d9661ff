//! The cache side of a run: restoring a hit instead of running the task, and filing an
//! execution's outputs (or withholding them, with the reason).

use kameo::prelude::*;
use prova_protocol::Digest;
use prova_protocol::events::{CacheStatus, NoticeLevel, RunEvent, TaskStatus};
use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::ExecStats;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::Finished;

use super::actor::RunActor;
use super::core::{self as decide, AfterSave};
use crate::layers::{HitQuery, LayerError, Restored, SaveOutcome, SaveRequest};
use crate::scheduler::core::Event;

/// Restoring a saved entry into the workspace after an exec-root execution failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum RestoreError {
    /// The layer failed.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// The entry just saved was not found.
    #[error("the entry vanished after saving")]
    Vanished,
}

/// Saving an execution failed (the task is reported `NotSaved`, `saving failed: …`).
#[derive(Debug, thiserror::Error)]
pub(super) enum SaveError {
    /// The layer refused or failed the save.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// The entry was saved, but its outputs could not be put back into the workspace.
    #[error("restoring the outputs into the workspace failed: {0}")]
    IntoWorkspace(#[source] RestoreError),
}

/// The lookup of a key settled during the run finished.
pub(super) struct Probed {
    node: usize,
    /// The key looked up.
    key: Digest,
    result: Result<Option<crate::cache::Entry>, LayerError>,
}

/// A restore finished.
pub(super) struct RestoreDone {
    node: usize,
    /// The entry's artifact (downstream exec roots unpack it).
    artifact: Option<(Digest, u64)>,
    /// The entry's output fingerprint (its dependents' keys fold it).
    fingerprint: Option<Digest>,
    /// The entry's recorded execution time: what the hit saved.
    saved_ms: u64,
    result: Result<Option<Restored>, LayerError>,
}

/// A save finished.
pub(super) struct SaveDone {
    node: usize,
    result: Result<SaveOutcome, SaveError>,
    finished: Box<Finished>,
    /// The outputs came out with fewer files than the task's newest entry: the warning.
    shrunk: Option<String>,
    /// Declared output patterns no file matched (warned about when the entry is saved).
    matched_nothing: Vec<String>,
    /// Upstreams that kept their bytes but moved this task's key (it is not confined, so it
    /// was not cut off): the note.
    blocked_cutoff: Vec<String>,
}

impl RunActor {
    pub(super) fn output_globs(&self, node: usize) -> PathGlobs {
        let spec = &self.plan.tasks[node].spec;
        PathGlobs::new(&spec.project_dir, &spec.outputs).unwrap_or_else(|_| PathGlobs::empty())
    }

    /// Refuses what a farm worker returned when its manifest is not the task's declared
    /// outputs (a lying or compromised worker: a `.git/hooks` file, another project's
    /// source, a link out of the project) or its fingerprint is not the manifest's. Called
    /// before anything of the report is recorded, stored or handed downstream: the task
    /// fails, naming the worker and the first offending path, and nothing is filed in any
    /// namespace. `None` when the report may proceed.
    pub(super) async fn refuse_unconfined(&mut self, node: usize, f: &Finished) -> Option<Event> {
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
        let r = self.report(
            node,
            TaskStatus::Failed,
            cache,
            Some(f.exit.clone()),
            f.tries,
            f.stats,
            Some(note),
        );
        self.finish(node, r).await;
        Some(Event::Finished { node, ok: false })
    }

    /// Asks the layer, in one batch before the first dispatch, which hits are current in the
    /// workspace already ([`crate::layers::CacheLayer::resolve_current`]); those finish when
    /// dispatched without a restore ([`finish_current_hit`](Self::finish_current_hit)), the
    /// rest restore one by one as before. A warm no-op run's hits thus cost one trip to the
    /// cache thread in all, not a task and several thread hops each.
    pub(super) async fn resolve_hits(&mut self) {
        let nodes: Vec<usize> = match &self.cache {
            Some(c) => {
                let mut n: Vec<usize> =
                    c.hits.keys().copied().filter(|&n| self.cache_use(n).reads).collect();
                n.sort_unstable();
                n
            }
            None => return,
        };
        if nodes.is_empty() {
            return;
        }
        let queries: Vec<(usize, HitQuery)> = nodes
            .into_iter()
            .filter_map(|n| {
                let outputs = self.output_globs(n);
                let project_dir = self.plan.tasks[n].spec.project_dir.clone();
                let entry = self.cache.as_mut()?.hits.remove(&n)?;
                Some((n, HitQuery { entry, outputs, project_dir }))
            })
            .collect();
        let (nodes, queries): (Vec<usize>, Vec<HitQuery>) = queries.into_iter().unzip();
        let Some(c) = &mut self.cache else { return };
        match c.layer.resolve_current(queries).await {
            Ok(back) => {
                for (node, (entry, restored)) in nodes.into_iter().zip(back) {
                    c.hits.insert(node, entry);
                    if let Some(r) = restored {
                        self.current.insert(node, r);
                    }
                }
            }
            // The layer failed as a whole (its cache thread is gone): the hits are lost, and
            // the tasks run, as they would after a failed restore.
            Err(e) => tracing::warn!("resolving the run's hits failed: {e}"),
        }
    }

    /// Finishes `node` as a hit on the spot when the batch found its outputs current and
    /// nothing of this run has touched its project since; `None` when it must restore (or
    /// run).
    pub(super) async fn finish_current_hit(&mut self, node: usize) -> Option<Event> {
        let restored = self.current.remove(&node)?;
        if !self.cache_use(node).reads
            || self.touched.contains(&self.plan.tasks[node].spec.project_dir)
        {
            return None;
        }
        let entry = self.cache.as_mut()?.hits.remove(&node)?;
        let fingerprint = crate::keys::progressive::entry_fingerprint(&entry);
        self.hit_done(node, entry.artifact, fingerprint, entry.duration_ms, restored).await;
        Some(Event::Finished { node, ok: true })
    }

    /// Looks up `key`, settled at dispatch, when the task may read the cache: `true` when the
    /// lookup started (the task restores or runs when it answers, [`Probed`]).
    pub(super) fn start_probe(
        &mut self,
        node: usize,
        key: Digest,
        ctx: &mut Context<Self, ()>,
    ) -> bool {
        if !self.cache_use(node).reads {
            return false;
        }
        let Some(c) = &self.cache else { return false };
        let layer = c.layer.clone();
        let me = ctx.actor_ref().clone();
        self.side.insert(
            node,
            OwnedTask::spawn("run.probe", async move {
                let result = layer.lookup(vec![key]).await.map(|mut found| found.remove(&key));
                let _ = me.tell(Probed { node, key, result }).await;
            }),
        );
        true
    }

    /// Reports `node` a hit of the run's layer (its stored log replayed).
    async fn hit_done(
        &mut self,
        node: usize,
        artifact: Option<(Digest, u64)>,
        fingerprint: Option<Digest>,
        saved_ms: u64,
        restored: Restored,
    ) {
        self.state[node].artifact = artifact;
        self.state[node].fingerprint = fingerprint;
        let task = self.plan.tasks[node].id.clone();
        if !restored.log.is_empty() {
            let _ = self.events.send(RunEvent::Output { task, text: restored.log }).await;
        }
        if let Some(k) = self.key_of(node) {
            self.hit_keys.push(k);
        }
        let layer = self.cache.as_ref().map_or("local", |c| c.layer.name()).to_owned();
        // An upstream folded by outputs executed in this run, yet the key held: a cutoff.
        let cutoff = self.cache.as_ref().is_some_and(|c| {
            c.keys.any_output_upstream(&self.plan, node, |d| {
                self.state[d].report.as_ref().is_some_and(|r| r.attempts > 0)
            })
        });
        let cache = CacheStatus::Hit { layer, saved_ms, cutoff };
        let mut r =
            self.report(node, TaskStatus::Succeeded, cache, None, 0, ExecStats::default(), None);
        if self.options.verify.any() {
            r.verdicts.push(decide::not_run_verdict(false));
        }
        self.finish(node, r).await;
    }

    /// Starts restoring `node` from its hit, if it has one; `false` when it must run.
    pub(super) fn start_restore(&mut self, node: usize, ctx: &mut Context<Self, ()>) -> bool {
        if !self.cache_use(node).reads {
            return false;
        }
        let globs = self.output_globs(node);
        let project = self.plan.tasks[node].spec.project_dir.clone();
        let Some(c) = &mut self.cache else { return false };
        let Some(entry) = c.hits.remove(&node) else { return false };
        // A restore writes into the project: later pre-resolved hits there look again.
        self.touched.insert(project.clone());
        let layer = c.layer.clone();
        let (saved_ms, artifact) = (entry.duration_ms, entry.artifact);
        let fingerprint = crate::keys::progressive::entry_fingerprint(&entry);
        let me = ctx.actor_ref().clone();
        self.side.insert(
            node,
            OwnedTask::spawn("run.restore", async move {
                let result = layer.restore(entry, globs, project).await;
                let _ =
                    me.tell(RestoreDone { node, artifact, fingerprint, saved_ms, result }).await;
            }),
        );
        true
    }

    /// Files a successful execution (unless its outputs disqualify it); the task is reported
    /// when the save completes.
    pub(super) async fn start_save(
        &mut self,
        node: usize,
        f: Box<Finished>,
        ctx: &mut Context<Self, ()>,
    ) -> Option<Event> {
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
            self.finish(node, r).await;
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
        let globs = self.output_globs(node);
        let project = self.plan.tasks[node].spec.project_dir.clone();
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
        };
        let key = req.key;
        let layer = c.layer.clone();
        let me = ctx.actor_ref().clone();
        let task = req.task.clone();
        let (project_dir, patterns) = (project.clone(), self.plan.tasks[node].spec.outputs.clone());
        self.side.insert(
            node,
            OwnedTask::spawn("run.save", async move {
                // Asked before the save (after it, the newest entry is this one).
                let newest = layer.newest_entry(task).await.ok().flatten();
                let (emptied, shrunk, blocked_cutoff) =
                    against_newest(&project_dir, &patterns, &req, newest.as_ref());
                let mut result = match decide::emptied_refusal(&emptied) {
                    Some(reason) => Ok(SaveOutcome::Withheld(reason)),
                    None => layer.save(req).await.map_err(SaveError::Layer),
                };
                if restore_into_workspace && matches!(result, Ok(SaveOutcome::Saved)) {
                    let restored = match layer.entry(key).await {
                        Ok(Some(entry)) => layer
                            .restore(entry, globs, project)
                            .await
                            .map(|_| ())
                            .map_err(RestoreError::Layer),
                        Ok(None) => Err(RestoreError::Vanished),
                        Err(e) => Err(RestoreError::Layer(e)),
                    };
                    if let Err(e) = restored {
                        result = Err(SaveError::IntoWorkspace(e));
                    }
                }
                let done =
                    SaveDone { node, result, finished: f, shrunk, matched_nothing, blocked_cutoff };
                let _ = me.tell(done).await;
            }),
        );
        None
    }
}

/// What `task`'s newest entry says of the execution `req` is about to file: the declared
/// outputs it emptied (not saved), the fewer-files warning, and the upstreams that kept their
/// bytes but moved its key ([`crate::keys::progressive::blocked_cutoff`]).
fn against_newest(
    project_dir: &str,
    patterns: &[String],
    req: &SaveRequest,
    newest: Option<&crate::cache::Entry>,
) -> (Vec<(String, usize)>, Option<String>, Vec<String>) {
    use prova_protocol::key::KeyComponents;
    use prova_protocol::manifest::OutputManifest;
    let Some(newest) = newest else { return (Vec::new(), None, Vec::new()) };
    // An entry whose manifest does not decode says nothing (its restore refuses it).
    let manifest = rmp_serde::from_slice::<OutputManifest>(&newest.manifest).ok();
    let emptied = manifest.as_ref().map_or_else(Vec::new, |m| {
        decide::emptied_outputs(project_dir, patterns, &req.manifest, m)
    });
    let now = crate::layers::local::output_count(&req.manifest);
    let shrunk = manifest
        .as_ref()
        .and_then(|m| decide::shrunk_warning(patterns, now, crate::layers::local::output_count(m)));
    let blocked = rmp_serde::from_slice::<KeyComponents>(&newest.components)
        .map(|old| crate::keys::progressive::blocked_cutoff(&req.components, &old))
        .unwrap_or_default();
    (emptied, shrunk, blocked)
}

impl RunActor {
    /// A restore or lookup answered after an interrupt: the task is reported aborted.
    pub(super) async fn finish_interrupted(&mut self, node: usize, ctx: &mut Context<Self, ()>) {
        let r = self.report(
            node,
            TaskStatus::Aborted,
            CacheStatus::Uncached,
            None,
            0,
            ExecStats::default(),
            None,
        );
        self.finish(node, r).await;
        self.feed(Event::Finished { node, ok: false }, ctx).await;
    }
}

impl Message<RestoreDone> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: RestoreDone, ctx: &mut Context<Self, Self::Reply>) {
        let node = msg.node;
        self.side.remove(&node);
        if self.interrupted {
            self.finish_interrupted(node, ctx).await;
            return;
        }
        match msg.result {
            Ok(Some(restored)) => {
                self.hit_done(node, msg.artifact, msg.fingerprint, msg.saved_ms, restored).await;
                self.feed(Event::Finished { node, ok: true }, ctx).await;
            }
            other => {
                let why = match &other {
                    Err(e) => decide::restore_fallback_notice(Some(e as &dyn std::fmt::Display)),
                    _ => decide::restore_fallback_notice(None),
                };
                self.notice(node, NoticeLevel::Warn, why).await;
                if let Some(ev) = self.primary(node, ctx).await {
                    self.feed(ev, ctx).await;
                }
            }
        }
    }
}

impl Message<Probed> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: Probed, ctx: &mut Context<Self, Self::Reply>) {
        let node = msg.node;
        self.side.remove(&node);
        if self.interrupted {
            self.finish_interrupted(node, ctx).await;
            return;
        }
        match msg.result {
            Ok(Some(entry)) if entry.key == msg.key => {
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
        if let Some(ev) = self.restore_or_run(node, ctx).await {
            self.feed(ev, ctx).await;
        }
    }
}

impl Message<SaveDone> for RunActor {
    type Reply = ();

    async fn handle(&mut self, msg: SaveDone, ctx: &mut Context<Self, Self::Reply>) {
        let node = msg.node;
        self.side.remove(&node);
        let saved = matches!(msg.result, Ok(SaveOutcome::Saved));
        if saved && let Some(w) = decide::matched_nothing_warning(&msg.matched_nothing) {
            self.notice(node, NoticeLevel::Warn, w).await;
        }
        if let Some(w) = msg.shrunk
            && saved
        {
            self.notice(node, NoticeLevel::Warn, w).await;
        }
        if !msg.blocked_cutoff.is_empty() {
            self.notice(node, NoticeLevel::Info, decide::blocked_cutoff_note(&msg.blocked_cutoff))
                .await;
        }
        let (cache, saved) = match msg.result {
            Ok(SaveOutcome::Saved) => (CacheStatus::Saved, true),
            Ok(SaveOutcome::Withheld(reason)) => {
                self.discard_staged(msg.finished.attempt);
                (CacheStatus::NotSaved { reason }, false)
            }
            Err(e) => {
                self.discard_staged(msg.finished.attempt);
                (CacheStatus::NotSaved { reason: format!("saving failed: {e}") }, false)
            }
        };
        let f = msg.finished;
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
            AfterSave::Rerun => r.verdicts.extend(self.queue_rerun(node).await),
        }
        self.finish(node, r).await;
        self.feed(Event::Finished { node, ok: true }, ctx).await;
    }
}
