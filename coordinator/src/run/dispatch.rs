//! Dispatching a task, in the run's state machine ([`Run`]): its key settled from what its
//! upstreams resolved to (a moved key looked up first), a group done on the spot, a hit
//! restored or a miss run; an attempt shaped ([`super::core::attempt_shape`]) and handed
//! out as [`Command::Assign`]; a link gone failing the task.

use std::path::PathBuf;

use prova_protocol::events::{CacheStatus, NoticeLevel, TaskStatus};
use prova_protocol::spec::ExecStats;
use prova_protocol::work::{Assignment, Placement};
use prova_protocol::{AttemptId, Digest};

use super::AssignHints;
use super::core::{self as decide, Purpose};
use super::machine::{Command, Run};
use crate::plan::TaskKind;
use crate::scheduler::core::Event;

impl Run {
    pub(super) fn dispatch(&mut self, node: usize) -> Option<Event> {
        let step = super::excluded::step(self.options.upstreams, &self.plan.tasks[node]);
        // Its upstreams are resolved now: its key folds what they actually produced.
        match self.settle_key(node) {
            decide::Settled::Same => {}
            decide::Settled::Moved(key) => {
                if step != super::excluded::Step::Assume && self.start_probe(node, key) {
                    return None;
                }
            }
            decide::Settled::Unknown(upstream) => {
                let msg = format!(
                    "its key could not be computed (the outputs of `{}` are unknown): it runs uncached",
                    self.plan.tasks[upstream].id
                );
                self.notice(node, NoticeLevel::Warn, msg);
            }
        }
        if step == super::excluded::Step::Assume {
            return self.assume(node);
        }
        if self.plan.tasks[node].kind == TaskKind::Group {
            let mut r = self.report(
                node,
                TaskStatus::Succeeded,
                CacheStatus::Uncached,
                None,
                0,
                ExecStats::default(),
                None,
            );
            if self.options.verify.any() {
                r.verdicts.push(decide::not_run_verdict(true));
            }
            self.finish(node, r);
            return Some(Event::Finished { node, ok: true });
        }
        self.restore_or_run(node)
    }

    /// A hit finishes on the spot when current, restores otherwise; a miss runs.
    pub(super) fn restore_or_run(&mut self, node: usize) -> Option<Event> {
        if let Some(done) = self.finish_current_hit(node) {
            return Some(done);
        }
        if self.start_restore(node) {
            return None;
        }
        self.primary(node)
    }

    /// Keys `node` from what its upstreams resolved to in this run (their output
    /// fingerprints, or their keys); a key that moved from the one predicted before the run
    /// drops the hit found under the prediction.
    fn settle_key(&mut self, node: usize) -> decide::Settled {
        let Some(c) = &mut self.cache else { return decide::Settled::Same };
        let before = c.keys.key(node);
        let state = &self.state;
        let after = c.keys.settle(&self.plan, node, &|d| state[d].fingerprint);
        let settled = match after {
            None => decide::settled(
                &c.keys.output_upstreams(&self.plan, node),
                &self.state,
                before,
                after,
            ),
            Some(_) => decide::settled(&[], &self.state, before, after),
        };
        if !matches!(settled, decide::Settled::Same) {
            c.hits.remove(&node);
            self.current.remove(&node);
        }
        settled
    }

    /// A fresh attempt id mapped to `node`.
    fn new_attempt(&mut self, node: usize, purpose: Purpose) -> AttemptId {
        let attempt = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        self.attempts.insert(attempt, (node, purpose));
        attempt
    }

    /// Where `attempt` stages its packed artifact.
    pub(super) fn staged_path(&self, attempt: AttemptId) -> PathBuf {
        match &self.cache {
            Some(c) => c.staging.join(format!("{}-{attempt}.tar.zst", self.pid)),
            None => PathBuf::new(),
        }
    }

    /// Removes what `attempt` staged (it will not be saved).
    pub(super) fn discard_staged(&mut self, attempt: AttemptId) {
        if self.cache.is_some() {
            let path = self.staged_path(attempt);
            self.push(Command::Discard(path));
        }
    }

    /// The placement of an exec-root attempt of `node` (`local` for a local worker's proof).
    fn exec_root_placement(&self, node: usize) -> Placement {
        let (local_source, local_blobs) = decide::exec_root_sources(
            &self.exec,
            self.local_proof_sources.as_ref(),
            &self.plan.root,
        );
        Placement::ExecRoot {
            inputs: self.plan.tasks[node].inputs.clone(),
            upstream: decide::upstream_artifacts(&self.plan.tasks, &self.state, node),
            local_source,
            local_blobs,
        }
    }

    /// Hands out an attempt of `node` for `purpose`; returns its id.
    pub(super) fn assign(&mut self, node: usize, purpose: Purpose) -> AttemptId {
        let attempt = self.new_attempt(node, purpose);
        if purpose == Purpose::Primary {
            self.state[node].live = Some(attempt);
        }
        let shape = decide::attempt_shape(
            purpose,
            self.cache_use(node),
            self.cache.is_some(),
            crate::keys::progressive::folds_outputs(&self.plan.tasks[node]),
            self.farm_worker(),
            &self.exec,
            self.traces_inputs(node),
        );
        let spec = &self.plan.tasks[node].spec;
        let placement = if shape.in_place {
            let protected = self.cache.as_ref().and_then(|c| c.protected.get(spec.id.as_str()));
            let protected = protected.cloned().unwrap_or_default();
            Placement::InPlace { workspace_root: self.plan.root.clone(), protected }
        } else {
            self.exec_root_placement(node)
        };
        let pack_to = (self.cache.is_some() && shape.pack).then(|| self.staged_path(attempt));
        let project_dir = spec.project_dir.clone();
        if shape.in_place {
            let check = self.cacheable(node);
            let project_dir = project_dir.clone();
            self.push(Command::WatchBefore { node, project_dir, check });
        }
        if purpose == Purpose::Primary {
            // It writes there in place, or its outputs are restored there after (a proof).
            self.touched.insert(project_dir);
        }
        let perturb = shape.perturb.then(|| {
            super::verify::perturbation_for(attempt, &self.declared_env(node), &self.host_lang)
        });
        let assignment = Assignment {
            attempt,
            spec: self.plan.tasks[node].spec.clone(),
            placement,
            clean_outputs: shape.clean_outputs,
            collect_outputs: shape.collect_outputs,
            pack_to,
            perturb,
            trace_reads: shape.traced,
            // Traced only because it is confined (no inputs proof asked): no survey first.
            survey_on_failure: shape.traced && !self.proves_inputs(node),
        };
        let hints = AssignHints {
            // A re-run never holds back the critical path.
            priority: if shape.prioritised { self.sched.priority(node) } else { 0 },
            // Re-runs must execute: never merged with another run's execution of the key.
            key: shape.merge_by_key.then(|| self.key_of(node)).flatten(),
            avoid: decide::avoid_worker(purpose, &self.state[node]),
            platform: self
                .cache
                .as_ref()
                .and_then(|c| c.keys.components.get(node))
                .and_then(|c| c.platform.clone()),
            labels: self.plan.tasks[node].spec.labels.clone(),
        };
        self.push(Command::Assign { assignment: Box::new(assignment), hints });
        if purpose == Purpose::Primary && self.reruns_beside(node, shape.in_place) {
            self.start_early_rerun(node);
        }
        attempt
    }

    /// An assignment could not be handed out: the link is gone.
    pub(super) fn assign_failed(&mut self, attempt: AttemptId) {
        match self.attempts.get(&attempt).copied() {
            Some((node, Purpose::Primary)) => {
                let ev = self.lost(node);
                self.feed(ev);
            }
            Some((node, Purpose::Rerun)) => {
                self.attempts.remove(&attempt);
                self.reruns.ended(node, attempt);
                // An early re-run not confirmed yet is withdrawn (the first execution, on
                // the same link, fails too); otherwise the proof cannot run.
                if self.reruns.withdraw(node, &mut self.state[node]).is_none() {
                    self.conclude(node, super::verdicts::link_closed_verdict());
                }
                self.try_finish_run();
            }
            None => {}
        }
    }

    /// The env names `node` declares (its key folds their values).
    fn declared_env(&self, node: usize) -> Vec<String> {
        self.cache
            .as_ref()
            .and_then(|c| c.keys.components.get(node))
            .map(|c| c.env.iter().map(|(k, _)| k.clone()).collect())
            .unwrap_or_default()
    }

    pub(super) fn key_of(&self, node: usize) -> Option<Digest> {
        self.cache.as_ref().and_then(|c| c.keys.key(node))
    }

    /// The link is gone: the node fails with a clear note.
    pub(super) fn lost(&mut self, node: usize) -> Event {
        if let Some(a) = self.state[node].live.take() {
            self.attempts.remove(&a);
        }
        let note = "the worker link closed".to_owned();
        let r = self.report(
            node,
            TaskStatus::Failed,
            CacheStatus::Uncached,
            None,
            0,
            ExecStats::default(),
            Some(note),
        );
        self.finish(node, r);
        Event::Finished { node, ok: false }
    }
}
