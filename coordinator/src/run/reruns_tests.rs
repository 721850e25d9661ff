//! The re-run bookkeeping driven by hand: queue, hand out, conclude, interrupt — and what
//! each step makes the actor announce.

use prova_protocol::TaskId;
use prova_protocol::events::{CacheStatus, TaskStatus};
use prova_protocol::spec::ExecStats;

use super::*;

fn report(name: &str) -> TaskReport {
    TaskReport {
        task: TaskId::new("p", name),
        status: TaskStatus::Succeeded,
        cache: CacheStatus::Saved,
        exit: None,
        attempts: 1,
        stats: ExecStats::default(),
        key: None,
        worker: None,
        note: None,
        verdicts: Vec::new(),
    }
}

fn proven() -> Verdict {
    Verdict::ProvenDeterministic {
        rerun_worker: None,
        single_machine: true,
        perturbations: Default::default(),
        ignored: Vec::new(),
    }
}

/// A task whose final report was made (and held, if anything about it is awaited).
fn finish(t: &mut TaskState, name: &str) -> bool {
    t.report = Some(report(name));
    hold_report(t)
}

#[test]
fn re_runs_start_in_queue_order_within_the_bound() {
    let mut state = TaskState::for_tasks(3);
    let mut r = Reruns::new(2);
    for (n, t) in state.iter_mut().enumerate() {
        r.queue(n, t);
    }
    assert_eq!(r.outstanding(), 3);
    assert_eq!(r.next(false), Some(0));
    r.started(0, AttemptId(10));
    assert_eq!(r.next(false), Some(1));
    r.started(1, AttemptId(11));
    assert_eq!(r.next(false), None, "two in flight: the bound");
    r.ended(0, AttemptId(10));
    assert_eq!(r.next(false), Some(2));
    assert_eq!(r.next(false), None, "the queue is empty");
    // Ending an attempt that is not in flight changes nothing.
    r.started(2, AttemptId(12));
    r.ended(2, AttemptId(99));
    assert_eq!(r.interrupt(&mut state).1, vec![AttemptId(11), AttemptId(12)]);
}

#[test]
fn a_bound_of_zero_still_runs_one_and_an_interrupted_run_starts_none() {
    let mut state = TaskState::for_tasks(1);
    let mut r = Reruns::new(0);
    r.queue(0, &mut state[0]);
    assert_eq!(r.next(true), None);
    assert_eq!(r.next(false), Some(0));
}

#[test]
fn a_report_is_held_until_its_last_proof_concludes_and_then_carries_every_verdict() {
    let mut state = TaskState::for_tasks(1);
    let mut r = Reruns::new(4);
    r.queue(0, &mut state[0]);
    r.queue(0, &mut state[0]);
    assert!(finish(&mut state[0], "a"), "awaited: held");
    assert!(matches!(r.conclude(&mut state[0], proven()), Announce::Nothing));
    assert_eq!(r.outstanding(), 1);
    let Announce::Report(done) = r.conclude(&mut state[0], Verdict::NoOutputs) else {
        panic!("the last proof did not release the report");
    };
    assert_eq!(done.verdicts, vec![proven(), Verdict::NoOutputs]);
    assert_eq!(r.outstanding(), 0);
    assert!(!state[0].held);
    // Released once: nothing more to send.
    assert!(release(&mut state[0]).is_none());
}

#[test]
fn a_report_sent_before_its_proof_gets_the_verdict_on_its_own() {
    let mut state = TaskState::for_tasks(1);
    let mut r = Reruns::new(1);
    assert!(!finish(&mut state[0], "a"), "nothing awaited: sent now");
    // A proof concluding afterwards (none was queued) still joins the report.
    assert!(matches!(r.conclude(&mut state[0], proven()), Announce::Verdict(v) if v == proven()));
    assert_eq!(state[0].report.as_ref().map(|r| r.verdicts.len()), Some(1));
    assert_eq!(r.outstanding(), 0, "never below zero");
}

#[test]
fn an_interrupt_drops_the_queue_releases_what_it_held_and_cancels_what_runs() {
    let mut state = TaskState::for_tasks(3);
    let mut r = Reruns::new(1);
    for (n, t) in state.iter_mut().enumerate() {
        r.queue(n, t);
        assert!(finish(t, &format!("t{n}")));
    }
    assert_eq!(r.next(false), Some(0));
    r.started(0, AttemptId(5));
    let (queued, running) = r.interrupt(&mut state);
    assert_eq!(queued, vec![1, 2]);
    assert_eq!(running, vec![AttemptId(5)]);
    assert_eq!(r.outstanding(), 1, "the running one still reports");
    assert_eq!(r.next(false), None);
    for n in queued {
        assert_eq!(
            release(&mut state[n]).map(|r| r.task),
            Some(TaskId::new("p", &format!("t{n}")))
        );
    }
    assert!(state[0].held, "the running proof still holds its report");
    // The run ends before it reports: every held report goes out, in node order.
    let rest = release_all(&mut state);
    assert_eq!(
        rest.iter().map(|r| r.task.clone()).collect::<Vec<_>>(),
        vec![TaskId::new("p", "t0")]
    );
    assert!(release_all(&mut state).is_empty());
}

fn done(attempt: u64) -> Box<Finished> {
    Box::new(Finished::never_ran(AttemptId(attempt), prova_protocol::spec::ExitKind::Code(0)))
}

#[test]
fn an_early_rerun_is_held_until_confirmed_and_counted_once() {
    let mut state = TaskState::for_tasks(1);
    let mut r = Reruns::new(2);
    assert!(r.queue_early(0, &mut state[0]));
    assert!(!r.queue_early(0, &mut state[0]), "one early re-run per task");
    assert_eq!((r.outstanding(), state[0].awaiting), (1, 1));
    assert_eq!(r.next(false), Some(0));
    r.started(0, AttemptId(5));
    assert!(matches!(r.arrived(0, done(5)), Arrived::Held));
    assert!(r.take_confirmed(0).is_none(), "not confirmed yet");
    assert!(r.confirm(0), "the early re-run makes the proof: nothing more is queued");
    assert!(r.withdraw(0, &mut state[0]).is_none(), "a confirmed proof goes on");
    let f = r.take_confirmed(0).expect("the held result, once confirmed");
    assert_eq!(f.attempt, AttemptId(5));
    assert!(r.take_confirmed(0).is_none(), "taken once");
    assert_eq!(r.outstanding(), 1, "still outstanding until its verdict concludes");
    assert!(matches!(r.conclude(&mut state[0], proven()), Announce::Verdict(_)));
    assert_eq!((r.outstanding(), state[0].awaiting), (0, 0));
}

#[test]
fn a_withdrawn_early_rerun_is_dropped_wherever_it_is() {
    // Queued: it never starts.
    let mut state = TaskState::for_tasks(3);
    let mut r = Reruns::new(1);
    r.queue(2, &mut state[2]);
    assert_eq!(r.next(false), Some(2));
    r.started(2, AttemptId(1));
    r.queue_early(0, &mut state[0]);
    assert_eq!(r.withdraw(0, &mut state[0]), Some(Withdrawn::default()));
    assert_eq!((r.outstanding(), state[0].awaiting), (1, 0), "only task 2's proof is left");
    r.ended(2, AttemptId(1));
    assert_eq!(r.next(false), None, "the withdrawn re-run never starts");
    // Running: cancelled; outstanding until its report comes back, then dropped.
    r.queue_early(1, &mut state[1]);
    assert_eq!(r.next(false), Some(1));
    r.started(1, AttemptId(7));
    let w = r.withdraw(1, &mut state[1]).expect("withdrawn");
    assert_eq!(w.cancel, Some(AttemptId(7)));
    assert_eq!(state[1].awaiting, 0, "its report is not held for it");
    assert_eq!(r.outstanding(), 2, "the run waits for the cancelled re-run");
    assert!(matches!(r.arrived(1, done(7)), Arrived::Dropped(_)));
    assert_eq!(r.outstanding(), 1);
    assert!(!r.confirm(1), "a dropped re-run makes no proof");
    // Held: its staged artifact is to be discarded.
    let mut state = TaskState::for_tasks(1);
    let mut r = Reruns::new(1);
    r.queue_early(0, &mut state[0]);
    let _ = r.next(false);
    r.started(0, AttemptId(9));
    assert!(matches!(r.arrived(0, done(9)), Arrived::Held));
    let w = r.withdraw(0, &mut state[0]).expect("withdrawn");
    assert_eq!(w.discard, Some(AttemptId(9)));
    assert_eq!((r.outstanding(), state[0].awaiting), (0, 0));
}
