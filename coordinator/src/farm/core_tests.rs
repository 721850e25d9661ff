//! Placement and lease bookkeeping, driven by hand with a fake clock.

use std::collections::BTreeMap;
use std::time::Duration;

use prova_protocol::TaskId;
use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
use prova_protocol::work::{Assignment, Finished, FromWorker, Placement, ToWorker};

use super::*;

fn caps(slots: u32) -> WorkerCaps {
    WorkerCaps { slots, os: "linux".into(), arch: "x86_64".into(), labels: BTreeMap::new() }
}

fn w(name: &str) -> WorkerId {
    WorkerId(name.into())
}

fn item(run: u64, attempt: u64, priority: u64) -> Item {
    Item {
        origin: Origin { run: RunId(run), attempt: AttemptId(attempt) },
        assignment: Assignment {
            attempt: AttemptId(attempt),
            spec: TaskSpec {
                id: TaskId::new("p", &format!("t{attempt}")),
                project_dir: "p".into(),
                command: CommandLine::Shell("true".into()),
                args: vec![],
                env: vec![],
                timeout_ms: None,
                retries: 0,
                outputs: vec![],
                persistent: false,
                ready_when: None,
                network: false,
            },
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
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1) });
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
    f.handle(T0, FarmEvent::WorkerJoined { id: w("cpu"), caps: caps(4) });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("gpu"), caps: gpu });
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
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(4) });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(4) });
    let blob = Digest::of(b"input");
    f.handle(T0, FarmEvent::Holds { id: w("b"), blobs: vec![blob] });
    let mut it = item(1, 1, 1);
    it.blobs = vec![blob];
    assert_eq!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it))))[0].0, w("b"));
}

#[test]
fn avoid_sends_the_rerun_elsewhere_and_falls_back_on_a_single_worker() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(4) });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1) });
    let mut it = item(1, 1, 1);
    it.avoid = Some(w("a"));
    assert_eq!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it))))[0].0, w("b"));
    // b is full now: another re-run avoiding a waits for b rather than landing on a.
    let mut it = item(1, 2, 1);
    it.avoid = Some(w("a"));
    assert!(assigned(&f.handle(T0, FarmEvent::Submit(Box::new(it)))).is_empty());
    // With a single worker in the farm, the avoided worker is used.
    let mut solo = FarmCore::new();
    solo.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1) });
    let mut it = item(1, 1, 1);
    it.avoid = Some(w("a"));
    assert_eq!(assigned(&solo.handle(T0, FarmEvent::Submit(Box::new(it))))[0].0, w("a"));
}

#[test]
fn a_lost_worker_requeues_its_leases_on_another() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1) });
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1))));
    let (_, first_lease, _) = assigned(&cmds)[0].clone();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1) });
    let cmds = f.handle(T0, FarmEvent::WorkerLeft { id: w("a") });
    let (worker, lease, _) = assigned(&cmds)[0].clone();
    assert_eq!(worker, w("b"));
    assert_ne!(lease, first_lease, "a requeued item gets a fresh lease");
}

#[test]
fn a_stale_lease_report_is_refused() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1) });
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    f.handle(T0, FarmEvent::WorkerJoined { id: w("b"), caps: caps(1) });
    f.handle(T0, FarmEvent::WorkerLeft { id: w("a") });
    // a comes back and reports the old lease: refused, nothing delivered.
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1) });
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
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(2) });
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
        f.handle(T0, FarmEvent::WorkerJoined { id: id.clone(), caps: caps(1) });
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
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(4) });
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
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1) });
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
fn cancel_of_a_queued_item_fails_it_and_of_a_leased_one_cancels_on_the_worker() {
    let mut f = FarmCore::new();
    f.handle(T0, FarmEvent::WorkerJoined { id: w("a"), caps: caps(1) });
    let lease = assigned(&f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1, 1)))))[0].1;
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 2, 1))));
    let cmds = f.handle(T0, FarmEvent::Cancel(Origin { run: RunId(1), attempt: AttemptId(2) }));
    assert!(matches!(&cmds[..], [FarmCommand::Fail { .. }]));
    let cmds = f.handle(T0, FarmEvent::Cancel(Origin { run: RunId(1), attempt: AttemptId(1) }));
    assert!(
        matches!(&cmds[..], [FarmCommand::Send { msg: ToWorker::Cancel { attempt }, .. }] if *attempt == lease)
    );
}
