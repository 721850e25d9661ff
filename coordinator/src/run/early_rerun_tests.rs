//! Early determinism re-runs driven through the state machine: a local proof run starts a
//! task's re-run beside its first execution; the re-run's result counts only once the first
//! execution is saved, and is dropped — never compared, recorded or reported — when it is
//! not (a failure, a save withheld, an interrupt). The farm, and a first execution in the
//! workspace, keep the re-run after the save.

use std::path::PathBuf;

use prova_protocol::AttemptId;
use prova_protocol::events::{CacheStatus, TaskStatus, Verdict};
use prova_protocol::spec::ExitKind;
use prova_protocol::work::Assignment;

use crate::layers::SaveOutcome;
use crate::run::machine::machine_tests::{
    Drive, Knobs, assigned, finished, ledger, outputs, reports, rerun_after_save, save_of, saved,
    summary, task,
};
use crate::run::machine::{Command, Input};
use crate::run::types::{ExecMode, VerifyOptions};

/// `--verify=all` in local mode: each first execution is traced in an exec root.
fn all(concurrency: usize) -> Knobs {
    let verify = VerifyOptions { determinism: true, inputs: true, ..Default::default() };
    Knobs { verify, concurrency, ..Knobs::default() }
}

/// The first execution and the re-run among `a` (the re-run is the perturbed one).
fn pair<'a>(a: &[&'a Assignment]) -> (&'a Assignment, &'a Assignment) {
    let primary = a.iter().find(|a| a.perturb.is_none()).expect("a first execution");
    let rerun = a.iter().find(|a| a.perturb.is_some()).expect("a re-run beside it");
    (primary, rerun)
}

/// A one-task `--verify=all` run, begun: its first execution's and its re-run's attempts.
fn begun() -> (Drive, AttemptId, AttemptId) {
    let mut d = Drive::new(vec![task("a", &["dist/**"], vec![])], all(2));
    let cmds = d.give(Input::Begin);
    let (primary, rerun) = pair(&assigned(&cmds));
    let (primary, rerun) = (primary.attempt, rerun.attempt);
    (d, primary, rerun)
}

fn determinism(r: &prova_protocol::events::TaskReport) -> Vec<&Verdict> {
    r.verdicts.iter().filter(|v| matches!(v, Verdict::ProvenDeterministic { .. })).collect()
}

fn cancels(cmds: &[Command]) -> Vec<AttemptId> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Cancel(a) => Some(*a),
            _ => None,
        })
        .collect()
}

fn discards(cmds: &[Command]) -> Vec<PathBuf> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Discard(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

fn staged(attempt: AttemptId) -> PathBuf {
    PathBuf::from(format!("/ws/.prova/tmp/7-{attempt}.tar.zst"))
}

#[test]
fn a_rerun_that_ends_first_is_held_until_the_save_then_compared() {
    let mut d = Drive::new(vec![task("a", &["dist/**"], vec![])], all(2));
    let cmds = d.give(Input::Begin);
    let a = assigned(&cmds);
    assert_eq!(a.len(), 2, "the re-run starts beside the first execution: {cmds:?}");
    let (primary, rerun) = pair(&a);
    assert!(primary.trace_reads && !rerun.trace_reads);
    let (primary, rerun) = (primary.attempt, rerun.attempt);
    let cmds = d.give(finished(rerun, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    assert!(cmds.is_empty(), "held: nothing compared, recorded or reported yet: {cmds:?}");
    let cmds = d.give(finished(primary, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    assert!(reports(&cmds).is_empty() && summary(&cmds).is_none(), "{cmds:?}");
    let cmds = d.give(saved(save_of(&cmds).expect("saved")));
    let r = reports(&cmds);
    assert_eq!(r.len(), 1, "{cmds:?}");
    assert_eq!(determinism(r[0]).len(), 1, "one determinism verdict: {:?}", r[0].verdicts);
    assert!(ledger(&cmds).iter().any(|e| e.rerun), "the re-run is recorded once compared");
    assert!(summary(&cmds).is_some(), "nothing is left outstanding");
    assert!(assigned(&cmds).is_empty(), "no second re-run is queued");
}

#[test]
fn a_rerun_that_ends_after_the_save_is_compared_as_it_comes() {
    let (mut d, primary, rerun) = begun();
    let cmds = d.give(finished(primary, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    let cmds = d.give(saved(save_of(&cmds).expect("saved")));
    assert!(reports(&cmds).is_empty(), "the report waits for its proof: {cmds:?}");
    assert!(assigned(&cmds).is_empty(), "the early re-run makes the proof: {cmds:?}");
    let cmds = d.give(finished(rerun, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    let r = reports(&cmds);
    assert_eq!(determinism(r[0]).len(), 1, "{:?}", r[0].verdicts);
    assert!(summary(&cmds).is_some());
}

#[test]
fn a_failed_first_execution_cancels_its_running_rerun_and_drops_its_result() {
    let (mut d, primary, rerun) = begun();
    let cmds = d.give(finished(primary, ExitKind::Code(1), 1, None));
    assert_eq!(cancels(&cmds), vec![rerun], "{cmds:?}");
    let r = reports(&cmds);
    assert_eq!(r[0].status, TaskStatus::Failed, "reported now, not held: {cmds:?}");
    assert!(determinism(r[0]).is_empty());
    assert!(summary(&cmds).is_none(), "the cancelled re-run is still to come back");
    // It had finished before the cancel reached it: its result counts for nothing.
    let cmds = d.give(finished(rerun, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    assert_eq!(discards(&cmds), vec![staged(rerun)], "what it staged goes: {cmds:?}");
    assert!(ledger(&cmds).is_empty() && reports(&cmds).is_empty(), "{cmds:?}");
    assert!(summary(&cmds).is_some_and(|s| !s.ok));
}

#[test]
fn a_held_rerun_is_discarded_when_the_first_execution_is_not_saved() {
    let (mut d, primary, rerun) = begun();
    d.give(finished(rerun, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    let cmds = d.give(finished(primary, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    let node = save_of(&cmds).expect("a save is tried");
    let withheld = crate::run::cached::SaveDone {
        node,
        result: Ok(SaveOutcome::Withheld("a newer entry differs".into())),
        shrunk: None,
        blocked_cutoff: vec![],
    };
    let cmds = d.give(Input::Saved(Box::new(withheld)));
    let r = reports(&cmds);
    assert!(matches!(r[0].cache, CacheStatus::NotSaved { .. }), "{cmds:?}");
    assert!(determinism(r[0]).is_empty(), "no proof of what was not saved: {:?}", r[0].verdicts);
    assert!(discards(&cmds).contains(&staged(rerun)), "{cmds:?}");
    assert!(!ledger(&cmds).iter().any(|e| e.rerun), "the dropped re-run is not recorded");
    assert!(summary(&cmds).is_some());
}

#[test]
fn a_queued_early_rerun_never_starts_when_its_first_execution_fails() {
    // One re-run at a time: b's early re-run waits behind a's.
    let tasks = vec![task("a", &["dist/**"], vec![]), task("b", &["dist/**"], vec![])];
    let mut d = Drive::new(tasks, all(1));
    let cmds = d.give(Input::Begin);
    let (pa, ra) = pair(&assigned(&cmds));
    let (pa, ra) = (pa.attempt, ra.attempt);
    let cmds = d.give(finished(pa, ExitKind::Code(0), 1, Some(outputs(b"a"))));
    let cmds = d.give(saved(save_of(&cmds).expect("saved")));
    let b = assigned(&cmds);
    assert_eq!(b.len(), 1, "b runs; its re-run is queued behind a's: {cmds:?}");
    let pb = b[0].attempt;
    let cmds = d.give(finished(pb, ExitKind::Code(1), 1, None));
    assert!(cancels(&cmds).is_empty(), "nothing of b's re-run is running: {cmds:?}");
    let cmds = d.give(finished(ra, ExitKind::Code(0), 1, Some(outputs(b"a"))));
    assert!(assigned(&cmds).is_empty(), "b's re-run never starts: {cmds:?}");
    let r = reports(&cmds);
    assert_eq!(determinism(r[0]).len(), 1, "a is proven: {cmds:?}");
    assert!(summary(&cmds).is_some_and(|s| !s.ok && s.tasks.len() == 2));
}

#[test]
fn an_interrupt_cancels_the_pair_and_the_run_ends_without_a_proof() {
    let (mut d, primary, rerun) = begun();
    let mut cancelled = cancels(&d.give(Input::Interrupt));
    cancelled.sort();
    assert_eq!(cancelled, vec![primary, rerun]);
    let cmds = d.give(finished(rerun, ExitKind::Aborted, 1, None));
    assert!(reports(&cmds).is_empty(), "{cmds:?}");
    let cmds = d.give(finished(primary, ExitKind::Aborted, 1, None));
    let r = reports(&cmds);
    assert_eq!(r[0].status, TaskStatus::Aborted);
    assert!(determinism(r[0]).is_empty());
    assert!(discards(&cmds).contains(&staged(rerun)), "{cmds:?}");
    assert!(summary(&cmds).is_some_and(|s| s.interrupted));
}

#[test]
fn the_farm_and_a_first_execution_in_place_among_its_inputs_rerun_after_the_save() {
    let farm = ExecMode::ExecRoot { local_source: None, local_blobs: None };
    let mut on_farm = all(2);
    on_farm.exec = farm;
    // Determinism alone in local mode: the first execution runs in the workspace, where it
    // cleans and writes its outputs — among which one of its inputs lies.
    let verify = VerifyOptions { determinism: true, ..Default::default() };
    let in_place = Knobs { verify, ..Knobs::default() };
    for (knobs, t) in [(on_farm, task("a", &["dist/**"], vec![])), (in_place, rerun_after_save())] {
        let mut d = Drive::new(vec![t], knobs);
        let cmds = d.give(Input::Begin);
        let a = assigned(&cmds);
        assert_eq!(a.len(), 1, "{cmds:?}");
        let cmds = d.give(finished(a[0].attempt, ExitKind::Code(0), 1, Some(outputs(b"x"))));
        let cmds = d.give(saved(save_of(&cmds).expect("saved")));
        let a = assigned(&cmds);
        assert!(a.len() == 1 && a[0].perturb.is_some(), "re-run after the save: {cmds:?}");
    }
}

#[test]
fn an_early_rerun_that_cannot_be_handed_out_is_withdrawn_not_failed() {
    let (mut d, primary, rerun) = begun();
    let cmds = d.give(Input::AssignFailed(rerun));
    assert!(reports(&cmds).is_empty(), "no verdict before the first execution's: {cmds:?}");
    // The first execution went out before the link closed and is saved: the proof is
    // queued again, after the save, like a farm's.
    let cmds = d.give(finished(primary, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    let cmds = d.give(saved(save_of(&cmds).expect("saved")));
    let a = assigned(&cmds);
    assert!(a.len() == 1 && a[0].perturb.is_some(), "{cmds:?}");
    let cmds = d.give(finished(a[0].attempt, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    assert_eq!(determinism(reports(&cmds)[0]).len(), 1);
    assert!(summary(&cmds).is_some());
}

#[test]
fn a_withdrawn_rerun_whose_cancel_cannot_be_sent_no_longer_holds_the_run() {
    let (mut d, primary, rerun) = begun();
    let cmds = d.give(finished(primary, ExitKind::Code(1), 1, None));
    assert_eq!(cancels(&cmds), vec![rerun]);
    assert!(summary(&cmds).is_none(), "{cmds:?}");
    // The link is gone: its report will never come.
    let cmds = d.give(Input::CancelFailed(rerun));
    assert!(summary(&cmds).is_some_and(|s| !s.ok), "{cmds:?}");
}

#[test]
fn a_first_execution_in_place_apart_from_its_inputs_has_its_rerun_beside_it() {
    // `--verify` alone: the first execution runs in the workspace, its outputs (`p/dist`)
    // apart from its inputs: nothing it cleans or writes is copied into the re-run's root.
    let verify = VerifyOptions { determinism: true, ..Default::default() };
    let mut t = task("a", &["dist/**"], vec![]);
    t.inputs = rerun_after_save().inputs;
    t.inputs[0].path = "p/src/main.c".into();
    let mut d = Drive::new(vec![t], Knobs { verify, ..Knobs::default() });
    let cmds = d.give(Input::Begin);
    let a = assigned(&cmds);
    assert_eq!(a.len(), 2, "{cmds:?}");
    let (primary, rerun) = pair(&a);
    assert!(matches!(primary.placement, prova_protocol::work::Placement::InPlace { .. }));
    let (primary, rerun) = (primary.attempt, rerun.attempt);
    let cmds = d.give(finished(primary, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    let cmds = d.give(saved(save_of(&cmds).expect("saved")));
    assert!(assigned(&cmds).is_empty(), "{cmds:?}");
    let cmds = d.give(finished(rerun, ExitKind::Code(0), 1, Some(outputs(b"x"))));
    assert_eq!(determinism(reports(&cmds)[0]).len(), 1);
    // No outputs declared: nothing to prove, so nothing starts beside it.
    let verify = VerifyOptions { determinism: true, ..Default::default() };
    let mut d = Drive::new(vec![task("lint", &[], vec![])], Knobs { verify, ..Knobs::default() });
    assert_eq!(assigned(&d.give(Input::Begin)).len(), 1);
}
