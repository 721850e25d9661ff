//! Tasks a run did not ask for, under `--only` and `--exclude-dependencies`
//! ([`UpstreamMode`]). They stay in the plan — their dependents' keys fold what they resolve
//! to ([`crate::keys::progressive`]) — but never execute:
//!
//! - `--only`: a cached one is restored as a hit; one that is not is **assumed** from the
//!   outputs on disk, and refused when it declares outputs and none are there.
//! - `--exclude-dependencies`: neither run nor restored, always assumed from disk.
//!
//! Assuming reads the task's declared outputs as they are in the workspace and uses their
//! fingerprint as what the task resolved to, so a dependent's key folds the bytes it will
//! really read: an entry saved by such a run is as sound as any other. Where the run cannot
//! read the workspace (a farm coordinator) or a proof needs the upstream as an artifact in
//! its exec roots (`--verify`), assuming is refused with the reason.
//!
//! The decisions are pure functions (tested below); [`Run::assume`] carries them out in the
//! run's state machine (the read of the outputs on disk is a command,
//! [`Command::ReadOutputs`]).

use prova_protocol::artifact::ArtifactError;
use prova_protocol::events::{CacheStatus, TaskStatus};
use prova_protocol::manifest::OutputManifest;
use prova_protocol::spec::ExecStats;
use prova_protocol::wire::UpstreamMode;

use super::core::Purpose;
use super::machine::{Command, Run};
use super::types::ExecMode;
use crate::keys::progressive::folds_outputs;
use crate::plan::{PlannedTask, TaskKind};
use crate::scheduler::core::Event;

/// What a dispatched task does under the run's [`UpstreamMode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Hit or run, as any task.
    Normal,
    /// Restore a hit; assume instead of running (`--only`).
    RestoreElseAssume,
    /// Assume at once: no lookup, no restore (`--exclude-dependencies`).
    Assume,
}

/// The step of `task` under `mode`: only tasks the run did not ask for are touched, and a
/// group finishes when its deps do anyway.
pub(crate) fn step(mode: UpstreamMode, task: &PlannedTask) -> Step {
    if task.requested || task.kind == TaskKind::Group {
        return Step::Normal;
    }
    match mode {
        UpstreamMode::Run => Step::Normal,
        UpstreamMode::Only => Step::RestoreElseAssume,
        UpstreamMode::Exclude => Step::Assume,
    }
}

/// How an assumed task resolves before anything is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Assume {
    /// Nothing of it is folded by outputs (no declared outputs, persistent): done, with this
    /// note.
    Done(String),
    /// Read its declared outputs on disk.
    ReadDisk,
    /// It cannot be assumed: it fails with this note (its dependents are skipped).
    Refused(String),
}

fn flag(mode: UpstreamMode) -> &'static str {
    match mode {
        UpstreamMode::Exclude => "--exclude-dependencies",
        _ => "--only",
    }
}

/// Whether the run can read the workspace's files where the task would have run.
pub(crate) fn sees_workspace(exec: &ExecMode) -> bool {
    match exec {
        ExecMode::InPlace => true,
        ExecMode::ExecRoot { local_source, .. } => local_source.is_some(),
    }
}

/// What assuming `task` takes: `sees_workspace` as [`sees_workspace`], `proving` whether
/// the run proves (`--verify`: exec roots take upstream outputs from the cache).
pub(crate) fn assume(
    mode: UpstreamMode,
    task: &PlannedTask,
    sees_workspace: bool,
    proving: bool,
) -> Assume {
    let flag = flag(mode);
    if !folds_outputs(task) {
        return Assume::Done(format!("not run ({flag})"));
    }
    let not_cached = match mode {
        UpstreamMode::Only => "it is not cached for its current inputs, and ",
        _ => "",
    };
    if !sees_workspace {
        return Assume::Refused(format!(
            "{flag}: {not_cached}the farm cannot read the outputs in your workspace: run it, \
             or drop {flag}"
        ));
    }
    if proving {
        return Assume::Refused(format!(
            "{flag}: {not_cached}a proof's exec roots take upstream outputs from the cache, \
             not from disk: run it first, or drop {flag}"
        ));
    }
    Assume::ReadDisk
}

/// What the outputs found on disk (`files` entries) make of an assumed task: `Ok(note)`
/// used, `Err(note)` refused (`--only` with declared outputs and none there).
pub(crate) fn on_disk(mode: UpstreamMode, files: usize) -> Result<String, String> {
    let flag = flag(mode);
    match mode {
        UpstreamMode::Only if files == 0 => Err(format!(
            "{flag}: it is not cached for its current inputs and its declared outputs are \
             absent: run it, or drop {flag}"
        )),
        UpstreamMode::Only => Ok(format!(
            "not run ({flag}): not cached for its current inputs; its outputs on disk were used"
        )),
        _ => Ok(format!("not run ({flag}): its outputs on disk were used ({files} files)")),
    }
}

impl Run {
    /// Runs `node` for the run (a miss, or a failed restore), or assumes it when the run
    /// does not run it ([`Step`]).
    pub(super) fn primary(&mut self, node: usize) -> Option<Event> {
        match step(self.options.upstreams, &self.plan.tasks[node]) {
            Step::Normal => {
                match super::core::sandbox_refusal(&self.plan.tasks[node], self.cache_use(node)) {
                    Some(note) => Some(self.finish_assumed(node, Err(note))),
                    None => {
                        self.assign(node, Purpose::Primary);
                        None
                    }
                }
            }
            Step::RestoreElseAssume | Step::Assume => self.assume(node),
        }
    }

    /// Resolves `node` without running it: done, refused, or its outputs read from disk
    /// ([`Command::ReadOutputs`]).
    pub(super) fn assume(&mut self, node: usize) -> Option<Event> {
        let mode = self.options.upstreams;
        let proving = self.options.verify.any();
        match assume(mode, &self.plan.tasks[node], sees_workspace(&self.exec), proving) {
            Assume::Done(note) => Some(self.finish_assumed(node, Ok(note))),
            Assume::Refused(note) => Some(self.finish_assumed(node, Err(note))),
            Assume::ReadDisk => {
                let root = match &self.exec {
                    ExecMode::ExecRoot { local_source: Some(src), .. } => src.clone(),
                    _ => self.plan.root.clone(),
                };
                let globs = self.output_globs(node);
                self.push(Command::ReadOutputs { node, root, globs });
                None
            }
        }
    }

    /// Reports an assumed `node`: skipped with a note (its dependents go on), or failed.
    fn finish_assumed(&mut self, node: usize, outcome: Result<String, String>) -> Event {
        let (status, ok, note) = match outcome {
            Ok(note) => (TaskStatus::Skipped, true, note),
            Err(note) => (TaskStatus::Failed, false, note),
        };
        let r = self.report(
            node,
            status,
            CacheStatus::Uncached,
            None,
            0,
            ExecStats::default(),
            Some(note),
        );
        self.finish(node, r);
        Event::Finished { node, ok }
    }

    /// The outputs of an assumed task were read.
    pub(super) fn outputs_read(
        &mut self,
        node: usize,
        result: Result<OutputManifest, ArtifactError>,
    ) {
        if self.interrupted {
            self.finish_interrupted(node);
            return;
        }
        let outcome = match result {
            Ok(manifest) => {
                let used = on_disk(self.options.upstreams, manifest.entries.len());
                if used.is_ok() {
                    self.state[node].fingerprint = Some(manifest.fingerprint());
                }
                used
            }
            Err(e) => Err(format!("reading its outputs on disk failed: {e}")),
        };
        let ev = self.finish_assumed(node, outcome);
        self.feed(ev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prova_protocol::TaskId;
    use prova_protocol::spec::{CommandLine, TaskSpec};

    fn task(requested: bool, kind: TaskKind, outputs: &[&str], cacheable: bool) -> PlannedTask {
        let id = TaskId::new("lib", "build");
        let mut spec =
            TaskSpec::new(id.clone(), "lib".to_owned(), CommandLine::Shell("true".into()));
        spec.outputs = outputs.iter().map(|s| (*s).to_owned()).collect();
        PlannedTask {
            id,
            project: 0,
            kind,
            spec,
            cacheable,
            deps: Vec::new(),
            requested,
            inputs: Vec::new(),
        }
    }

    #[test]
    fn only_tasks_not_asked_for_are_touched() {
        let up = task(false, TaskKind::Command, &["dist/**"], true);
        let asked = task(true, TaskKind::Command, &["dist/**"], true);
        let group = task(false, TaskKind::Group, &[], false);
        assert_eq!(step(UpstreamMode::Run, &up), Step::Normal);
        assert_eq!(step(UpstreamMode::Only, &up), Step::RestoreElseAssume);
        assert_eq!(step(UpstreamMode::Exclude, &up), Step::Assume);
        for mode in [UpstreamMode::Only, UpstreamMode::Exclude] {
            assert_eq!(step(mode, &asked), Step::Normal);
            assert_eq!(step(mode, &group), Step::Normal);
        }
    }

    #[test]
    fn a_task_folded_by_key_is_done_and_one_by_outputs_reads_the_disk() {
        let tests = task(false, TaskKind::Command, &[], true);
        let uncached = task(false, TaskKind::Command, &["dist/**"], false);
        let build = task(false, TaskKind::Command, &["dist/**"], true);
        assert!(matches!(assume(UpstreamMode::Only, &tests, true, false), Assume::Done(_)));
        // Nothing is read, so neither the farm nor a proof refuses it.
        assert!(matches!(assume(UpstreamMode::Only, &tests, false, true), Assume::Done(_)));
        // Declared outputs, cached or not: its dependents' keys fold the bytes on disk.
        for t in [&build, &uncached] {
            assert_eq!(assume(UpstreamMode::Only, t, true, false), Assume::ReadDisk);
            assert_eq!(assume(UpstreamMode::Exclude, t, true, false), Assume::ReadDisk);
        }
    }

    #[test]
    fn the_farm_and_a_proof_refuse_to_assume_outputs_from_disk() {
        let build = task(false, TaskKind::Command, &["dist/**"], true);
        let Assume::Refused(farm) = assume(UpstreamMode::Only, &build, false, false) else {
            panic!("the farm cannot read the workspace");
        };
        assert!(farm.contains("farm") && farm.contains("--only"), "{farm}");
        let Assume::Refused(proof) = assume(UpstreamMode::Exclude, &build, true, true) else {
            panic!("a proof needs the upstream as an artifact");
        };
        assert!(proof.contains("--exclude-dependencies") && proof.contains("proof"), "{proof}");
    }

    #[test]
    fn only_refuses_absent_outputs_exclude_takes_them_as_they_are() {
        let refused = on_disk(UpstreamMode::Only, 0).expect_err("absent outputs are refused");
        assert!(refused.contains("absent"), "{refused}");
        assert!(on_disk(UpstreamMode::Only, 3).is_ok());
        assert!(on_disk(UpstreamMode::Exclude, 0).is_ok());
    }
}
