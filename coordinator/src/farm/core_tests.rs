//! Placement and lease bookkeeping, driven by hand with a fake clock.

use std::collections::BTreeMap;
use std::time::Duration;

use prova_protocol::TaskId;
use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
use prova_protocol::work::{Assignment, Finished, FromWorker, HandBack, Placement, ToWorker};

use super::*;

fn caps(slots: u32) -> WorkerCaps {
    WorkerCaps { slots, os: "linux".into(), arch: "x86_64".into(), labels: BTreeMap::new() }
}

fn w(name: &str) -> WorkerId {
    WorkerId(name.into())
}

pub(super) fn item(run: u64, attempt: u64, priority: u64) -> Item {
    Item {
        origin: Origin { run: RunId(run), attempt: AttemptId(attempt) },
        assignment: Assignment {
            attempt: AttemptId(attempt),
            spec: TaskSpec::new(
                TaskId::new("p", &format!("t{attempt}")),
                "p",
                CommandLine::Shell("true".into()),
            ),
            placement: Placement::ExecRoot {
                inputs: vec![],
                upstream: vec![],
                local_source: None,
                local_blobs: None,
            },
            clean_outputs: false,
            collect_outputs: true,
            pack_to: None,
            perturb: None,
            trace_reads: false,
            survey_on_failure: false,
        },
        priority,
        reqs: Requirements::default(),
        avoid: None,
        blobs: vec![],
        key: None,
    }
}

fn finished(lease: AttemptId, ok: bool) -> FromWorker {
    let mut f = Finished::never_ran(lease, if ok { ExitKind::Code(0) } else { ExitKind::Code(1) });
    f.tries = 1;
    FromWorker::Finished(Box::new(f))
}

/// (worker, lease, the spec's task) of every assignment in `cmds`.
fn assigned(cmds: &[FarmCommand]) -> Vec<(WorkerId, AttemptId, String)> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Send { worker, msg: ToWorker::Assign(a) } => {
                Some((worker.clone(), a.attempt, a.spec.id.task().to_owned()))
            }
            _ => None,
        })
        .collect()
}

const T0: Duration = Duration::ZERO;

#[test]
fn places_by_priority_within_capacity() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 5))));
    // The first item took the only slot.
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 2, 9))));
    assert!(assigned(&cmds).is_empty());
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 3, 1))));
    assert_eq!(f.queued(), 2);
    // Finishing the first frees the slot for the highest priority waiting (t2, not t3).
    let lease = f.leases().next().unwrap().0;
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    assert!(
        matches!(&cmds[0], FarmCommand::Deliver { run: RunId(1), msg: FromWorker::Finished(fin), .. } if fin.attempt == AttemptId(1))
    );
    assert_eq!(assigned(&cmds)[0].2, "t2");
}

#[test]
fn platform_and_labels_are_respected() {
    let mut f = FarmCore::new();
    let mut gpu = caps(4);
    gpu.labels.insert("pool".into(), "gpu".into());
    f.handle(T0, FarmEvent::WorkerJoined { id: w("cpu"), caps: caps(4), running: vec![] });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("gpu"), caps: gpu, running: vec![] });
    let mut it = item(1, 1, 1);
    it.reqs.labels.insert("pool".into(), "gpu".into());
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(it)));
    assert_eq!(assigned(&cmds)[0].0, w("gpu"));
    let mut arm = item(1, 2, 1);
    arm.reqs.arch = Some("aarch64".into());
    assert!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(arm)))).is_empty());
}

#[test]
fn locality_prefers_the_worker_holding_the_inputs() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(4), running: vec![] });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(4), running: vec![] });
    let blob = Digest::of(b"input");
    f.handle(T0, FarmEvent::Holds { id: w("b"), blobs: vec![blob] });
    let mut it = item(1, 1, 1);
    it.blobs = vec![blob];
    assert_eq!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it))))[0].0, w("b"));
}

#[test]
fn avoid_sends_the_rerun_elsewhere_and_falls_back_on_a_single_worker() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(4), running: vec![] });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1), running: vec![] });
    let mut it = item(1, 1, 1);
    it.avoid = Some(w("a"));
    assert_eq!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it))))[0].0, w("b"));
    // b is full now: another re-run avoiding a waits for b rather than landing on a.
    let mut it = item(1, 2, 1);
    it.avoid = Some(w("a"));
    assert!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it)))).is_empty());
    // With a single worker in the farm, the avoided worker is used.
    let mut solo = FarmCore::new();
    solo.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let mut it = item(1, 1, 1);
    it.avoid = Some(w("a"));
    assert_eq!(assigned(&solo.handle(T0, FarmEvent::Submit(Box::new(it))))[0].0, w("a"));
}

#[test]
fn a_lost_worker_requeues_its_leases_on_another() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    let (_, first_lease, _) = assigned(&cmds)[0].clone();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1), running: vec![] });
    let cmds = f.handle(T0, FarmEvent::WorkerLeft { id: w("a") });
    let (worker, lease, _) = assigned(&cmds)[0].clone();
    assert_eq!(worker, w("b"));
    assert_ne!(lease, first_lease, "a requeued item gets a fresh lease");
}

#[test]
fn a_stale_lease_report_is_refused() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1), running: vec![] });
    f.handle(T0, FarmEvent::WorkerLeft { id: w("a") });
    // a comes back and reports the old lease: refused, nothing delivered.
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    assert!(matches!(&cmds[..], [FarmCommand::Refuse { lease: l, .. }] if *l == lease), "{cmds:?}");
    // A report from the wrong worker for a live lease is refused too.
    let live = f.leases().next().unwrap().0;
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(live, true) });
    assert!(matches!(&cmds[..], [FarmCommand::Refuse { .. }]));
}

#[test]
fn expired_leases_requeue_and_heartbeats_renew_them() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(2), running: vec![] });
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    let t1 = LEASE_TTL - Duration::from_secs(1);
    f.handle(t1, FarmEvent::Heartbeat { id: w("a"), running: vec![lease] });
    assert!(
        f.handle(LEASE_TTL + Duration::from_secs(1), FarmEvent::Tick).is_empty(),
        "renewed lease expired"
    );
    let cmds = f.handle(t1 + LEASE_TTL, FarmEvent::Tick);
    assert!(cmds.iter().any(|c| matches!(c, FarmCommand::Send { msg: ToWorker::Cancel { attempt }, .. } if *attempt == lease)));
    let again = assigned(&cmds);
    assert_eq!(again.len(), 1, "requeued and placed again: {cmds:?}");
    assert_ne!(again[0].1, lease);
}

#[test]
fn the_retry_budget_bounds_worker_losses() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    let mut failed = None;
    for round in 0..=RETRY_BUDGET + 1 {
        let id = w(&format!("w{round}"));
        f.handle(T0, FarmEvent::WorkerJoined { id: id.clone(), caps: caps(1), running: vec![] });
        for c in f.handle(T0, FarmEvent::WorkerLeft { id }) {
            if let FarmCommand::Fail { origin, reason } = c {
                failed = Some((origin, reason));
            }
        }
    }
    let (origin, reason) = failed.expect("the item failed");
    assert_eq!(origin.attempt, AttemptId(1));
    assert!(reason.contains("retry budget"), "{reason}");
}

#[test]
fn identical_keys_from_two_runs_execute_once() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(4), running: vec![] });
    let key = Digest::of(b"key");
    let mut first = item(1, 10, 1);
    first.key = Some(key);
    let mut second = item(2, 20, 1);
    second.key = Some(key);
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(first))))[0].1;
    assert!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(second)))).is_empty());
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    let delivered: Vec<(RunId, AttemptId)> = cmds
        .iter()
        .filter_map(|c| match c {
            FarmCommand::Deliver { run, msg: FromWorker::Finished(fin), .. } => {
                Some((*run, fin.attempt))
            }
            _ => None,
        })
        .collect();
    assert_eq!(delivered, [(RunId(1), AttemptId(10)), (RunId(2), AttemptId(20))]);
}

#[test]
fn an_item_no_worker_can_run_fails_after_the_wait() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let mut it = item(1, 1, 1);
    it.reqs.os = Some("macos".into());
    f.handle(T0, FarmEvent::Submit(Box::new(it)));
    assert!(f.handle(NO_WORKER_WAIT - Duration::from_secs(1), FarmEvent::Tick).is_empty());
    let cmds = f.handle(NO_WORKER_WAIT, FarmEvent::Tick);
    assert!(
        matches!(&cmds[..], [FarmCommand::Fail { reason, .. }] if reason.contains("os=macos")),
        "{cmds:?}"
    );
}

#[test]
fn cancel_of_a_queued_item_aborts_it_unrun_and_of_a_leased_one_cancels_on_the_worker() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 2, 1))));
    let cmds = f.handle(T0, FarmEvent::Cancel(Origin { run: RunId(1), attempt: AttemptId(2) }));
    // Not a failure: it never ran (an interrupted run lists it skipped).
    assert!(
        matches!(&cmds[..], [FarmCommand::Deliver { run: RunId(1), msg: FromWorker::Finished(fin), .. }]
            if fin.attempt == AttemptId(2) && fin.exit == ExitKind::Aborted && fin.tries == 0),
        "{cmds:?}"
    );
    let cmds = f.handle(T0, FarmEvent::Cancel(Origin { run: RunId(1), attempt: AttemptId(1) }));
    assert!(
        matches!(&cmds[..], [FarmCommand::Send { msg: ToWorker::Cancel { attempt }, .. }] if *attempt == lease)
    );
}

/// Joins `id` with `slots`, running `running`.
fn rejoin(f: &mut FarmCore, id: &str, slots: u32, running: Vec<AttemptId>) -> Vec<FarmCommand> {
    f.handle(T0, FarmEvent::WorkerJoined { id: w(id), caps: caps(slots), running })
}

#[test]
fn a_worker_registering_again_without_its_leases_loses_them_at_once() {
    // A worker is SIGKILLed and restarted under the same name before its old connection is
    // seen to close: the fresh process runs nothing, so its leases are requeued now, not at
    // their expiry, and the loss counts against the budget.
    let mut f = FarmCore::new();
    rejoin(&mut f, "a", 1, vec![]);
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    let cmds = rejoin(&mut f, "a", 1, vec![]);
    let again = assigned(&cmds);
    assert_eq!(again.len(), 1, "requeued and placed again: {cmds:?}");
    assert_ne!(again[0].1, lease);
    // The old lease is gone: a report on it is refused.
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    assert!(matches!(&cmds[..], [FarmCommand::Refuse { .. }]), "{cmds:?}");
    // Every such restart is a loss: past the budget the item fails.
    let mut failed = None;
    for _ in 0..RETRY_BUDGET {
        for c in rejoin(&mut f, "a", 1, vec![]) {
            if let FarmCommand::Fail { reason, .. } = c {
                failed = Some(reason);
            }
        }
    }
    let reason = failed.expect("the item failed after the budget");
    assert!(
        reason.contains("registered again without it") && reason.contains("retry budget"),
        "{reason}"
    );
}

#[test]
fn a_worker_registering_again_keeps_the_leases_it_still_runs() {
    // A reconnect (the worker process lived on): what it still runs stays leased to it.
    let mut f = FarmCore::new();
    rejoin(&mut f, "a", 2, vec![]);
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    let cmds = rejoin(&mut f, "a", 2, vec![lease]);
    assert!(cmds.is_empty(), "{cmds:?}");
    assert_eq!(f.workers().next().map(|(_, _, busy)| busy), Some(1));
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    assert!(matches!(&cmds[..], [FarmCommand::Deliver { run: RunId(1), .. }]), "{cmds:?}");
}

#[test]
fn attempts_a_worker_runs_without_a_live_lease_are_cancelled_and_hold_their_slots() {
    // A coordinator restarted under a worker that still runs an attempt of the old one: the
    // new farm cancels it, and does not give its slot away until it ends.
    let mut f = FarmCore::with_first_lease(1000);
    let old = AttemptId(7);
    let cmds = rejoin(&mut f, "a", 1, vec![old]);
    assert!(
        matches!(&cmds[..], [FarmCommand::Send { msg: ToWorker::Cancel { attempt }, .. }] if *attempt == old),
        "{cmds:?}"
    );
    assert!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))))).is_empty());
    // Its report is refused, and frees the slot.
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(old, true) });
    assert!(matches!(&cmds[0], FarmCommand::Refuse { lease, .. } if *lease == old), "{cmds:?}");
    assert_eq!(assigned(&cmds).len(), 1, "{cmds:?}");
    // A heartbeat that no longer lists a stale attempt frees its slot too.
    let mut g = FarmCore::new();
    rejoin(&mut g, "a", 1, vec![old]);
    g.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    let cmds = g.handle(T0, FarmEvent::Heartbeat { id: w("a"), running: vec![] });
    assert_eq!(assigned(&cmds).len(), 1, "{cmds:?}");
}

#[test]
fn lease_ids_start_where_the_coordinator_says() {
    // Each coordinator incarnation starts its ids past the previous one's (see the actor):
    // an attempt a worker still runs for an old coordinator never matches a new lease.
    let mut f = FarmCore::with_first_lease(1_000_000);
    rejoin(&mut f, "a", 1, vec![]);
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    assert_eq!(lease, AttemptId(1_000_000));
}

#[test]
fn an_expired_lease_does_not_send_the_item_back_to_the_silent_worker() {
    // Locality prefers the worker that holds the inputs; when that worker went silent (its
    // lease expired), the item goes to another, and the silent one gets nothing new until it
    // shows life.
    let mut f = FarmCore::new();
    rejoin(&mut f, "a", 2, vec![]);
    let blob = Digest::of(b"input");
    f.handle(T0, FarmEvent::Holds { id: w("a"), blobs: vec![blob] });
    let mut it = item(1, 1, 1);
    it.blobs = vec![blob];
    let (first, lease, _) = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it))))[0].clone();
    assert_eq!(first, w("a"));
    rejoin(&mut f, "b", 2, vec![]);
    f.handle(T0 + Duration::from_secs(1), FarmEvent::Heartbeat { id: w("b"), running: vec![] });
    let cmds = f.handle(LEASE_TTL + Duration::from_secs(1), FarmEvent::Tick);
    let again = assigned(&cmds);
    assert_eq!(again.len(), 1, "{cmds:?}");
    assert_eq!(again[0].0, w("b"), "sent back to the silent worker: {cmds:?}");
    assert_ne!(again[0].1, lease);
    // Its slot is free again (the lease is gone), yet it is silent: a status shows both.
    assert!(f.is_silent(&w("a")) && !f.is_silent(&w("b")));
    assert_eq!(f.workers().find(|(id, _, _)| **id == w("a")).map(|(_, _, busy)| busy), Some(0));
    let mut next = item(1, 2, 1);
    next.blobs = vec![blob];
    assert_eq!(assigned(&f.handle(LEASE_TTL, FarmEvent::Submit(Box::new(next))))[0].0, w("b"));
    // A heartbeat from it and it is a candidate again (and locality picks it).
    f.handle(LEASE_TTL, FarmEvent::Heartbeat { id: w("a"), running: vec![] });
    assert!(!f.is_silent(&w("a")));
    let mut third = item(1, 3, 1);
    third.blobs = vec![blob];
    assert_eq!(assigned(&f.handle(LEASE_TTL, FarmEvent::Submit(Box::new(third))))[0].0, w("a"));
}

#[test]
fn a_leaving_worker_gets_no_more_work_and_hands_its_leases_back_free() {
    let mut f = FarmCore::new();
    rejoin(&mut f, "a", 1, vec![]);
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    let cmds = f.handle(T0, FarmEvent::WorkerLeaving { id: w("a") });
    assert!(cmds.is_empty(), "nowhere to go yet: {cmds:?}");
    assert_eq!(f.workers().count(), 0, "out of the farm at once");
    assert_eq!(f.queued(), 1);
    // Its late report is refused; another worker takes the item.
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    assert!(matches!(&cmds[..], [FarmCommand::Refuse { .. }]), "{cmds:?}");
    let again = assigned(&rejoin(&mut f, "b", 1, vec![]));
    assert_eq!(again.len(), 1);
    // Handing back is free: the item still survives a full budget of losses on its own.
    let mut failed = Vec::new();
    for round in 0..=RETRY_BUDGET + 1 {
        let id = format!("solo{round}");
        if round > 0 {
            rejoin(&mut f, &id, 1, vec![]);
        }
        let holder = f.leases().next().map(|(_, w, _)| w.clone()).expect("leased");
        failed.extend(failed_attempts(&f.handle(T0, FarmEvent::WorkerLeft { id: holder })));
        if !failed.is_empty() {
            assert_eq!(round, RETRY_BUDGET, "failed after its own losses only");
            return;
        }
    }
    panic!("never failed");
}

// ----- crash loops: a loss is charged to the task the evidence points at ------------------

/// Every `Fail` in `cmds`, by the attempt id its run uses.
fn failed_attempts(cmds: &[FarmCommand]) -> Vec<AttemptId> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Fail { origin, .. } => Some(origin.attempt),
            _ => None,
        })
        .collect()
}

fn handed_back(lease: AttemptId, why: HandBack) -> FromWorker {
    FromWorker::Finished(Box::new(Finished::handed_back(lease, why)))
}

fn delivered(cmds: &[FarmCommand]) -> usize {
    cmds.iter().filter(|c| matches!(c, FarmCommand::Deliver { .. })).count()
}

fn failures(cmds: &[FarmCommand]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Fail { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// Joins `id` (2 slots), and loses it at once if it was given the crash-looping task
/// `killer` (attempt id of its run); returns what failed and the tasks it was given.
fn join_and_crash_on(f: &mut FarmCore, id: &str, killer: &str) -> (Vec<AttemptId>, Vec<String>) {
    let cmds = rejoin(f, id, 2, vec![]);
    let given: Vec<String> = assigned(&cmds).into_iter().map(|(_, _, t)| t).collect();
    let mut failed = failed_attempts(&cmds);
    if given.iter().any(|t| t == killer) {
        failed.extend(failed_attempts(&f.handle(T0, FarmEvent::WorkerLeft { id: w(id) })));
    }
    (failed, given)
}

#[test]
fn a_crash_loop_fails_its_task_only_and_the_tasks_beside_it_are_requeued_free() {
    // t1 kills every worker it runs on; each worker has two slots, so a healthy task runs
    // beside it each time. The healthy ones were there at one loss each, t1 at all of them.
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 100))));
    for n in 0..8 {
        f.handle(T0, FarmEvent::Submit(Box::new(item(1, 10 + n, 1))));
    }
    let mut failed = Vec::new();
    for round in 0..12 {
        let (f_round, _) = join_and_crash_on(&mut f, &format!("w{round}"), "t1");
        failed.extend(f_round);
        if !failed.is_empty() {
            break;
        }
    }
    assert_eq!(failed, [AttemptId(1)], "only the crash loop fails");
    // A healthy worker runs everything else to the end.
    let cmds = rejoin(&mut f, "healthy", 16, vec![]);
    let mut done = Vec::new();
    for (_, lease, _) in assigned(&cmds) {
        for c in
            f.handle(T0, FarmEvent::Report { worker: w("healthy"), msg: finished(lease, true) })
        {
            if let FarmCommand::Deliver { msg: FromWorker::Finished(fin), .. } = c {
                done.push(fin.attempt.0);
            }
        }
    }
    done.sort_unstable();
    assert_eq!(done, (10..18).collect::<Vec<_>>(), "every healthy task finished");
}

#[test]
fn a_crash_loop_beside_the_same_task_is_told_apart_by_placing_them_apart() {
    // Only two tasks: the crash loop and one healthy task, which would be placed together on
    // every 2-slot worker. After the loss they shared they are not placed together again,
    // so the next loss names the culprit alone.
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 100))));
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 2, 1))));
    let (failed, given) = join_and_crash_on(&mut f, "w0", "t1");
    assert!(failed.is_empty());
    assert_eq!(given.len(), 2, "both placed at first: {given:?}");
    let mut failed = Vec::new();
    for round in 1..10 {
        let (f_round, given) = join_and_crash_on(&mut f, &format!("w{round}"), "t1");
        failed.extend(f_round);
        if round == 1 {
            assert_eq!(given, ["t1"], "the suspects of one loss placed together again");
        }
        if failed.contains(&AttemptId(1)) {
            break;
        }
    }
    assert_eq!(failed, [AttemptId(1)], "the crash loop failed, the other did not");
    let cmds = rejoin(&mut f, "healthy", 2, vec![]);
    assert_eq!(
        assigned(&cmds).into_iter().map(|(_, _, t)| t).collect::<Vec<_>>(),
        ["t2"],
        "{cmds:?}"
    );
}

/// Two tasks on worker `a` (2 slots, label `pool=a`); the second needs that label, so only
/// the first can be placed on the one-slot workers that come later.
fn two_on_a(f: &mut FarmCore) {
    let mut a = caps(2);
    a.labels.insert("pool".into(), "a".into());
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: a, running: vec![] });
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    let mut pinned = item(1, 2, 1);
    pinned.reqs.labels.insert("pool".into(), "a".into());
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(pinned)));
    assert_eq!(f.leases().count(), 2, "{cmds:?}");
}

/// Loses the worker running task t1 — alone there — again and again until something fails;
/// returns how many losses that took. A fresh one-slot worker joins before each loss, so
/// the requeued t1 goes there (not back to a silent worker beside another task).
fn solo_losses_until_failure(f: &mut FarmCore, now: Duration) -> u32 {
    let join = |f: &mut FarmCore, n: u32| {
        let id = w(&format!("solo{n}"));
        f.handle(now, FarmEvent::WorkerJoined { id, caps: caps(1), running: vec![] });
    };
    join(f, 0);
    for round in 0..=RETRY_BUDGET + 2 {
        join(f, round + 1);
        let holder = f
            .leases()
            .find(|(_, _, o)| o.attempt == AttemptId(1))
            .map(|(_, w, _)| w.clone())
            .expect("t1 is leased");
        let there: Vec<AttemptId> =
            f.leases().filter(|(_, w, _)| **w == holder).map(|(_, _, o)| o.attempt).collect();
        assert_eq!(there, [AttemptId(1)], "t1 alone on {holder} at round {round}");
        let failed = failed_attempts(&f.handle(now, FarmEvent::WorkerLeft { id: holder }));
        if !failed.is_empty() {
            assert_eq!(failed, [AttemptId(1)]);
            return round + 1;
        }
    }
    panic!("t1 never failed");
}

#[test]
fn a_worker_lost_with_several_tasks_charges_none_of_them() {
    // A worker running two healthy tasks is lost (a reboot, a cut): nothing points at either,
    // so the loss is free — t1 still has its whole budget for losses it alone is at.
    let mut f = FarmCore::new();
    two_on_a(&mut f);
    assert!(failed_attempts(&f.handle(T0, FarmEvent::WorkerLeft { id: w("a") })).is_empty());
    assert_eq!(solo_losses_until_failure(&mut f, T0), RETRY_BUDGET + 1);
}

#[test]
fn a_silent_worker_with_several_tasks_charges_none_of_them_at_expiry() {
    // The same when the two leases expire together (the worker went silent).
    let mut f = FarmCore::new();
    two_on_a(&mut f);
    let later = LEASE_TTL + Duration::from_secs(1);
    let cmds = f.handle(later, FarmEvent::Tick);
    assert!(failed_attempts(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(solo_losses_until_failure(&mut f, later), RETRY_BUDGET + 1);
}

#[test]
fn a_worker_restarted_under_several_tasks_charges_none_of_them() {
    // And when the worker registers again without them (it restarted) — with no slot now,
    // so t1 goes to the one-slot workers and t2 waits for `a`.
    let mut f = FarmCore::new();
    two_on_a(&mut f);
    let mut a = caps(0);
    a.labels.insert("pool".into(), "a".into());
    let cmds = f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: a, running: vec![] });
    assert!(failed_attempts(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(solo_losses_until_failure(&mut f, T0), RETRY_BUDGET + 1);
}

#[test]
fn a_handed_back_assignment_runs_on_another_worker_and_never_reaches_the_run() {
    for why in [
        HandBack::NoSlot,
        HandBack::NoDisk("12 MiB free, floor 64 MiB".into()),
        HandBack::ShuttingDown,
        HandBack::Outputs("No space left on device".into()),
    ] {
        let mut f = FarmCore::new();
        f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
        f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1), running: vec![] });
        let first = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))));
        let (on, lease, _) = first[0].clone();
        let other = if on == w("a") { w("b") } else { w("a") };
        let cmds = f.handle(T0, FarmEvent::Report { worker: on, msg: handed_back(lease, why) });
        assert_eq!(delivered(&cmds), 0, "a hand-back is no result: {cmds:?}");
        assert!(failures(&cmds).is_empty(), "{cmds:?}");
        let again = assigned(&cmds);
        assert_eq!(again.len(), 1, "requeued and placed at once: {cmds:?}");
        assert_eq!(again[0].0, other, "on the other worker");
        assert_ne!(again[0].1, lease, "under a fresh lease");
    }
}

#[test]
fn hand_backs_never_count_against_the_retry_budget() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1), running: vec![] });
    let mut cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    let mut now = T0;
    for _ in 0..=RETRY_BUDGET + 1 {
        let (on, lease, _) = assigned(&cmds)[0].clone();
        now += HANDBACK_BACKOFF;
        cmds = f.handle(
            now,
            FarmEvent::Report { worker: on, msg: handed_back(lease, HandBack::NoSlot) },
        );
        assert!(failures(&cmds).is_empty(), "{cmds:?}");
        assert_eq!(assigned(&cmds).len(), 1, "{cmds:?}");
    }
    // A real loss after them is the first one charged.
    let (on, _, _) = assigned(&cmds)[0].clone();
    now += HANDBACK_BACKOFF;
    let cmds = f.handle(now, FarmEvent::WorkerLeft { id: on });
    assert!(failures(&cmds).is_empty(), "one loss is within the budget: {cmds:?}");
    let (on, lease, _) = assigned(&cmds)[0].clone();
    let cmds = f.handle(now, FarmEvent::Report { worker: on, msg: finished(lease, true) });
    assert_eq!(delivered(&cmds), 1, "{cmds:?}");
}

#[test]
fn a_worker_that_handed_work_back_takes_none_until_its_backoff_ends() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(2), running: vec![] });
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    let why = HandBack::NoDisk("full".into());
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: handed_back(lease, why) });
    assert!(assigned(&cmds).is_empty(), "not straight back to the worker that refused: {cmds:?}");
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 2, 1))));
    assert!(assigned(&cmds).is_empty(), "no new work either: {cmds:?}");
    let cmds = f.handle(T0 + HANDBACK_BACKOFF, FarmEvent::Tick);
    assert_eq!(assigned(&cmds).len(), 2, "both placed once the backoff is over: {cmds:?}");
}

#[test]
fn an_item_every_worker_keeps_handing_back_fails_naming_why() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let mut cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    let mut now = T0;
    let mut failed = Vec::new();
    for _ in 0..HANDBACK_LIMIT + 2 {
        let Some((on, lease, _)) = assigned(&cmds).first().cloned() else { break };
        let why = HandBack::NoDisk("3 MiB free, floor 64 MiB".into());
        let report = FarmEvent::Report { worker: on, msg: handed_back(lease, why) };
        failed.extend(failures(&f.handle(now, report)));
        now += HANDBACK_BACKOFF;
        cmds = f.handle(now, FarmEvent::Tick);
        failed.extend(failures(&cmds));
    }
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("short of disk: 3 MiB free"), "{}", failed[0]);
    assert!(failed[0].contains("handed back"), "{}", failed[0]);
}

fn dismissed(cmds: &[FarmCommand]) -> Vec<WorkerId> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Dismiss { worker } => Some(worker.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_drained_worker_finishes_what_it_runs_takes_nothing_new_then_is_dismissed_once() {
    let mut f = FarmCore::new();
    rejoin(&mut f, "a", 2, vec![]);
    let first = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))));
    let (_, lease, _) = first[0].clone();
    let cmds = f.handle(T0, FarmEvent::Drain { id: w("a") });
    assert!(dismissed(&cmds).is_empty(), "it still runs a task: {cmds:?}");
    // A free slot, yet no new work for it; another worker takes it.
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 2, 1))));
    assert!(assigned(&cmds).is_empty(), "{cmds:?}");
    let cmds = rejoin(&mut f, "b", 1, vec![]);
    assert_eq!(assigned(&cmds).iter().map(|a| a.0.clone()).collect::<Vec<_>>(), [w("b")]);
    // Its running task ends normally: delivered (a result, not a loss), and then it is told
    // to leave — once.
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    assert!(cmds.iter().any(|c| matches!(c, FarmCommand::Deliver { run: RunId(1), .. })));
    assert_eq!(dismissed(&cmds), [w("a")], "{cmds:?}");
    assert!(dismissed(&f.handle(T0, FarmEvent::Tick)).is_empty(), "dismissed once");
    // Its leaving then hands back nothing (it held nothing) and it is gone.
    let cmds = f.handle(T0, FarmEvent::WorkerLeaving { id: w("a") });
    assert!(assigned(&cmds).is_empty() && f.queued() == 0, "{cmds:?}");
    assert_eq!(f.workers().map(|(id, _, _)| id.clone()).collect::<Vec<_>>(), [w("b")]);
}

#[test]
fn an_idle_worker_drained_is_dismissed_at_once_and_an_unknown_one_is_ignored() {
    let mut f = FarmCore::new();
    rejoin(&mut f, "a", 1, vec![]);
    assert_eq!(dismissed(&f.handle(T0, FarmEvent::Drain { id: w("a") })), [w("a")]);
    assert!(f.handle(T0, FarmEvent::Drain { id: w("nobody") }).is_empty());
    // Work for a farm whose only worker drains waits (and fails only after the no-worker
    // wait), never lands on it.
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    assert!(assigned(&cmds).is_empty(), "{cmds:?}");
}

/// Every lease of `cmds`, finished successfully by its worker.
fn finish_all(f: &mut FarmCore, now: Duration, cmds: &[FarmCommand]) -> Vec<FarmCommand> {
    let mut out = Vec::new();
    for (worker, lease, _) in assigned(cmds) {
        out.extend(f.handle(now, FarmEvent::Report { worker, msg: finished(lease, true) }));
    }
    out
}

#[test]
fn runs_that_end_leave_no_per_run_state_in_the_core() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(2), running: vec![] });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(2), running: vec![] });
    for run in 1..=30u64 {
        let now = Duration::from_secs(run * 100);
        let shared = Digest::of(format!("shared {run}").as_bytes());
        let mut cmds = Vec::new();
        // Two runs in a row share a key (one follows the other's execution); another item
        // is cancelled while queued, one while leased; one is lost with its worker.
        for (n, attempt) in (0..6u64).map(|i| run * 10 + i).enumerate() {
            let mut it = item(run, attempt, 1);
            it.blobs = vec![Digest::of(format!("blob {run} {n}").as_bytes())];
            if n == 0 {
                it.key = Some(shared);
            }
            cmds.extend(f.handle(now, FarmEvent::Submit(Box::new(it))));
        }
        let mut follower = item(run + 1000, run * 10 + 6, 1);
        follower.key = Some(shared);
        cmds.extend(f.handle(now, FarmEvent::Submit(Box::new(follower))));
        let cancel = |attempt| FarmEvent::Cancel(Origin { run: RunId(run), attempt });
        cmds.extend(f.handle(now, cancel(AttemptId(run * 10 + 5))));
        let leased = f.leases().map(|(_, _, o)| o).find(|o| o.attempt.0 == run * 10 + 1);
        if let Some(origin) = leased {
            cmds.extend(f.handle(now, FarmEvent::Cancel(origin)));
        }
        if run % 5 == 0 {
            cmds.extend(f.handle(now, FarmEvent::WorkerLeft { id: w("b") }));
            cmds.extend(f.handle(
                now,
                FarmEvent::WorkerJoined { id: w("b"), caps: caps(2), running: vec![] },
            ));
        }
        // Finish whatever is placed until nothing is left (bounded: each pass ends leases).
        for _ in 0..20 {
            let live: Vec<(WorkerId, AttemptId, String)> =
                f.leases().map(|(l, w, _)| (w.clone(), l, String::new())).collect();
            if live.is_empty() && f.queued() == 0 {
                break;
            }
            cmds = Vec::new();
            for (worker, lease, _) in live {
                cmds.extend(
                    f.handle(now, FarmEvent::Report { worker, msg: finished(lease, true) }),
                );
            }
            finish_all(&mut f, now, &cmds);
        }
        let held = f.held();
        assert_eq!(
            CoreHeld { worker_blobs: 0, ..held },
            CoreHeld::default(),
            "run {run} left state behind"
        );
    }
}

#[test]
fn the_blobs_remembered_per_worker_are_bounded() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let blobs: Vec<Digest> =
        (0..HOLDS_PER_WORKER + 100).map(|i| Digest::of(&i.to_le_bytes())).collect();
    f.handle(T0, FarmEvent::Holds { id: w("a"), blobs: blobs.clone() });
    assert_eq!(f.held().worker_blobs, HOLDS_PER_WORKER);
    // The newest are remembered (locality still prefers the worker holding them).
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1), running: vec![] });
    let mut it = item(1, 1, 1);
    it.blobs = vec![blobs[HOLDS_PER_WORKER + 99]];
    let placed = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it))));
    assert_eq!(placed[0].0, w("a"));
    // Placement adds the item's blobs to its worker's (bounded the same way).
    let mut next = item(1, 2, 1);
    next.blobs = vec![Digest::of(b"another")];
    let placed = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(next))));
    assert_eq!(placed[0].0, w("b"));
    assert_eq!(f.held().worker_blobs, HOLDS_PER_WORKER + 1);
}

/// The `Finished` deliveries of `cmds`: (run, attempt, exit).
fn finishes(cmds: &[FarmCommand]) -> Vec<(RunId, AttemptId, ExitKind)> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Deliver { run, msg: FromWorker::Finished(fin), .. } => {
                Some((*run, fin.attempt, fin.exit.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_leader_cancelled_by_its_run_keeps_running_for_the_runs_that_follow_it() {
    // Run 1 leads a key, run 2 follows its execution; run 1's Ctrl-C must not abort run 2's
    // task (seen by reading: the cancel went to the worker and its "aborted" to both runs).
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] });
    let key = Digest::of(b"shared");
    let (mut first, mut second) = (item(1, 10, 1), item(2, 20, 1));
    first.key = Some(key);
    second.key = Some(key);
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(first))))[0].1;
    f.handle(T0, FarmEvent::Submit(Box::new(second)));
    let cmds = f.handle(T0, FarmEvent::Cancel(Origin { run: RunId(1), attempt: AttemptId(10) }));
    // Run 1 hears at once that its task is aborted; the worker is not told to stop.
    assert_eq!(finishes(&cmds), [(RunId(1), AttemptId(10), ExitKind::Aborted)], "{cmds:?}");
    assert!(
        !cmds.iter().any(|c| matches!(c, FarmCommand::Send { msg: ToWorker::Cancel { .. }, .. })),
        "{cmds:?}"
    );
    // The execution finishes for run 2 alone, as a success.
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("a"), msg: finished(lease, true) });
    assert_eq!(finishes(&cmds), [(RunId(2), AttemptId(20), ExitKind::Code(0))], "{cmds:?}");
    assert_eq!(f.held(), CoreHeld::default(), "nothing left behind");

    // A cancelled leader with no followers is cancelled on its worker, and a run that
    // submits the same key afterwards does not follow it into its abort: it runs itself.
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(2), running: vec![] });
    let mut first = item(1, 10, 1);
    first.key = Some(key);
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(first))))[0].1;
    let cmds = f.handle(T0, FarmEvent::Cancel(Origin { run: RunId(1), attempt: AttemptId(10) }));
    assert!(cmds.iter().any(|c| matches!(c, FarmCommand::Send { msg: ToWorker::Cancel { attempt }, .. } if *attempt == lease)), "{cmds:?}");
    let mut late = item(3, 30, 1);
    late.key = Some(key);
    let placed = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(late))));
    assert_eq!(placed.len(), 1, "the late run executes its own: {placed:?}");
    let mut aborted = Finished::never_ran(lease, ExitKind::Aborted);
    aborted.tries = 1;
    let cmds = f.handle(
        T0,
        FarmEvent::Report { worker: w("a"), msg: FromWorker::Finished(Box::new(aborted)) },
    );
    assert_eq!(finishes(&cmds), [(RunId(1), AttemptId(10), ExitKind::Aborted)], "{cmds:?}");
}

use crate::farm::clock::RunningClock;

/// The farm actor's composition: every event's time read through a [`RunningClock`].
fn fed(
    f: &mut FarmCore,
    clock: &mut RunningClock,
    wall: Duration,
    ev: FarmEvent,
) -> Vec<FarmCommand> {
    let now = clock.running(wall);
    f.handle(now, ev)
}

fn expired(cmds: &[FarmCommand]) -> bool {
    cmds.iter().any(|c| matches!(c, FarmCommand::Send { msg: ToWorker::Cancel { .. }, .. }))
}

#[test]
fn a_coordinator_stall_longer_than_a_lease_expires_nothing() {
    let s = Duration::from_secs;
    let mut clock = RunningClock::default();
    let mut f = FarmCore::new();
    fed(
        &mut f,
        &mut clock,
        s(0),
        FarmEvent::WorkerJoined { id: w("a"), caps: caps(2), running: vec![] },
    );
    let lease =
        assigned(&fed(&mut f, &mut clock, s(0), FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    for t in 1..=5 {
        if t % 3 == 0 {
            fed(
                &mut f,
                &mut clock,
                s(t),
                FarmEvent::Heartbeat { id: w("a"), running: vec![lease] },
            );
        }
        assert!(!expired(&fed(&mut f, &mut clock, s(t), FarmEvent::Tick)), "t={t}");
    }
    // The coordinator is stopped from 5 s to 25 s: no tick, no heartbeat read. On waking,
    // its first tick comes before the heartbeats that queued up meanwhile.
    let woke = fed(&mut f, &mut clock, s(25), FarmEvent::Tick);
    assert!(!expired(&woke), "the stall counted against the lease: {woke:?}");
    assert_eq!(f.leases().count(), 1);
    // Wall time alone would have expired it (the bug this guards against).
    let mut wall_only = FarmCore::new();
    wall_only.handle(s(0), FarmEvent::WorkerJoined { id: w("a"), caps: caps(2), running: vec![] });
    let l = assigned(&wall_only.handle(s(0), FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    wall_only.handle(s(3), FarmEvent::Heartbeat { id: w("a"), running: vec![l] });
    assert!(expired(&wall_only.handle(s(25), FarmEvent::Tick)));
    // The queued heartbeats are read; the lease lives on.
    fed(&mut f, &mut clock, s(25), FarmEvent::Heartbeat { id: w("a"), running: vec![lease] });
    let cmds = fed(
        &mut f,
        &mut clock,
        s(26),
        FarmEvent::Report { worker: w("a"), msg: finished(lease, true) },
    );
    assert_eq!(finishes(&cmds), [(RunId(1), AttemptId(1), ExitKind::Code(0))], "{cmds:?}");
}

#[test]
fn a_worker_that_died_during_a_stall_is_still_found_out_by_running_time() {
    let s = Duration::from_secs;
    let mut clock = RunningClock::default();
    let mut f = FarmCore::new();
    fed(
        &mut f,
        &mut clock,
        s(0),
        FarmEvent::WorkerJoined { id: w("a"), caps: caps(1), running: vec![] },
    );
    let lease =
        assigned(&fed(&mut f, &mut clock, s(0), FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    fed(&mut f, &mut clock, s(3), FarmEvent::Heartbeat { id: w("a"), running: vec![lease] });
    // Stalled from 3 s to 30 s; then ticks every second and not a word from the worker.
    let mut first_expiry = None;
    for t in 30..120 {
        if expired(&fed(&mut f, &mut clock, s(t), FarmEvent::Tick)) {
            first_expiry = Some(t);
            break;
        }
    }
    let t = first_expiry.expect("the silent worker's lease expires");
    // 15 s of running time after its last heartbeat: the stall's 3 s counted, the rest not.
    assert_eq!(s(t) - clock.stalled(), s(3) + LEASE_TTL, "expired at wall {t} s");
}
