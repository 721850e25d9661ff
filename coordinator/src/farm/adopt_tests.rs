//! A restarted coordinator adopts what its workers still run (`adopt.rs`), driven by hand
//! with a fake clock: the persisted rows of one incarnation are restored into a fresh core.

use std::collections::BTreeMap;
use std::time::Duration;

use prova_protocol::TaskId;
use prova_protocol::manifest::OutputManifest;
use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
use prova_protocol::work::{
    Assignment, Finished, FromWorker, HandBack, Outputs, Placement, ToWorker,
};

use super::*;

const T0: Duration = Duration::ZERO;

fn caps(slots: u32) -> WorkerCaps {
    WorkerCaps { slots, os: "linux".into(), arch: "x86_64".into(), labels: BTreeMap::new() }
}

fn w(name: &str) -> WorkerId {
    WorkerId(name.into())
}

fn key(n: u64) -> Digest {
    Digest::of(&n.to_le_bytes())
}

/// Task `p#t<n>` of run `run`, keyed `key(n)`, with outputs `dist/**`.
fn item(run: u64, n: u64) -> Item {
    let mut spec =
        TaskSpec::new(TaskId::new("p", &format!("t{n}")), "p", CommandLine::Shell("true".into()));
    spec.outputs = vec!["dist/**".into()];
    Item {
        origin: Origin { run: RunId(run), attempt: AttemptId(n) },
        assignment: Assignment {
            attempt: AttemptId(n),
            spec,
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
        priority: 1,
        reqs: Requirements::default(),
        avoid: None,
        blobs: vec![],
        key: Some(key(n)),
    }
}

fn finished(lease: AttemptId) -> FromWorker {
    let mut f = Finished::never_ran(lease, ExitKind::Code(0));
    f.tries = 1;
    let manifest = OutputManifest::new(Vec::new());
    let fingerprint = manifest.fingerprint();
    f.outputs = Some(Outputs { manifest, fingerprint, artifact: None });
    FromWorker::Finished(Box::new(f))
}

fn assigned(cmds: &[FarmCommand]) -> Vec<(WorkerId, AttemptId)> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Send { worker, msg: ToWorker::Assign(a) } => {
                Some((worker.clone(), a.attempt))
            }
            _ => None,
        })
        .collect()
}

fn cancels(cmds: &[FarmCommand]) -> Vec<AttemptId> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Send { msg: ToWorker::Cancel { attempt }, .. } => Some(*attempt),
            _ => None,
        })
        .collect()
}

/// Reports delivered to runs: (run, the run's attempt, kind).
fn delivered(cmds: &[FarmCommand]) -> Vec<(RunId, AttemptId, &'static str)> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Deliver { run, msg, .. } => {
                let (a, kind) = match msg {
                    FromWorker::Started { attempt, .. } => (*attempt, "Started"),
                    FromWorker::Output { attempt, .. } => (*attempt, "Output"),
                    FromWorker::Ready { attempt } => (*attempt, "Ready"),
                    FromWorker::Finished(f) => (f.attempt, "Finished"),
                };
                Some((*run, a, kind))
            }
            _ => None,
        })
        .collect()
}

/// The first incarnation: `w1` runs `p#t1` and `p#t2` for run 1; its journal is what it
/// persisted.
fn first_incarnation() -> (Vec<LeaseRecord>, AttemptId, AttemptId) {
    let mut f = FarmCore::with_first_lease(1_000);
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w1"), caps: caps(2), running: vec![] });
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1))));
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 2))));
    let j = f.take_journal();
    assert_eq!(j.placed.len(), 2, "{j:?}");
    assert!(j.ended.is_empty());
    let (l1, l2) = (j.placed[0].lease, j.placed[1].lease);
    assert_eq!(j.placed[0].key, key(1));
    (j.placed, l1, l2)
}

#[test]
fn a_resubmitted_task_follows_the_attempt_its_worker_still_runs_and_nothing_runs_twice() {
    let (rows, l1, l2) = first_incarnation();
    // The coordinator restarts: a fresh core with the rows, lease ids far past the old ones.
    let mut f = FarmCore::with_first_lease(5_000);
    f.restore(T0, rows);
    assert_eq!(f.orphans(), 2);
    // w1 comes back still running both: neither is cancelled.
    let cmds =
        f.handle(T0, FarmEvent::WorkerJoined { id: w("w1"), caps: caps(2), running: vec![l1, l2] });
    assert!(cancels(&cmds).is_empty(), "adopted attempts are not stale: {cmds:?}");
    assert_eq!(f.workers().next().map(|(_, _, busy)| busy), Some(2), "they hold its slots");
    // Its reports are taken, not refused.
    let cmds = f.handle(
        T0,
        FarmEvent::Report {
            worker: w("w1"),
            msg: FromWorker::Output { attempt: l1, text: b"x".to_vec() },
        },
    );
    assert!(cmds.is_empty(), "{cmds:?}");
    // The client re-attached: run 7 submits the same keys (attempts 11 and 12).
    let mut again = item(7, 1);
    again.origin.attempt = AttemptId(11);
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(again)));
    assert!(assigned(&cmds).is_empty(), "followed, not placed: {cmds:?}");
    assert_eq!(delivered(&cmds), [(RunId(7), AttemptId(11), "Started")]);
    // Its result reaches run 7 under run 7's attempt id.
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("w1"), msg: finished(l1) });
    assert_eq!(delivered(&cmds), [(RunId(7), AttemptId(11), "Finished")]);
    let j = f.take_journal();
    assert_eq!(j.placed.iter().map(|r| (r.lease, r.run)).collect::<Vec<_>>(), [(l1, RunId(7))]);
    assert!(j.ended.is_empty(), "the row stays until run 7 is over (its save)");
    // l2 finishes before anyone asks: kept, then delivered at once when run 7 submits it.
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("w1"), msg: finished(l2) });
    assert!(cmds.is_empty(), "{cmds:?}");
    let mut again = item(7, 2);
    again.origin.attempt = AttemptId(12);
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(again)));
    assert!(assigned(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(
        delivered(&cmds),
        [(RunId(7), AttemptId(12), "Started"), (RunId(7), AttemptId(12), "Finished")]
    );
    assert_eq!(f.orphans(), 0);
    assert_eq!(f.workers().next().map(|(_, _, busy)| busy), Some(0));
}

#[test]
fn a_report_resent_after_the_restart_is_adopted_even_when_the_worker_no_longer_runs_it() {
    // The attempt finished while the coordinator was down (or its report died with it): the
    // worker registers without it and resends the report right after.
    let (rows, l1, _) = first_incarnation();
    let mut f = FarmCore::with_first_lease(5_000);
    f.restore(T0, rows);
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w1"), caps: caps(2), running: vec![] });
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("w1"), msg: finished(l1) });
    assert!(cmds.iter().all(|c| !matches!(c, FarmCommand::Refuse { .. })), "{cmds:?}");
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(7, 1))));
    assert!(assigned(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(delivered(&cmds).last().map(|d| d.2), Some("Finished"));
}

#[test]
fn orphans_nobody_comes_back_for_are_dropped_and_the_task_runs_afresh() {
    let (rows, l1, l2) = first_incarnation();
    let mut f = FarmCore::with_first_lease(5_000);
    f.restore(T0, rows);
    // Another worker is there; w1 never comes back.
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w2"), caps: caps(2), running: vec![] });
    f.handle(ADOPT_GRACE, FarmEvent::Tick);
    assert_eq!(f.orphans(), 0);
    let j = f.take_journal();
    let mut ended = j.ended.clone();
    ended.sort();
    assert_eq!(ended, [l1, l2], "their rows go");
    let cmds = f.handle(ADOPT_GRACE, FarmEvent::Submit(Box::new(item(7, 1))));
    assert_eq!(assigned(&cmds).len(), 1, "placed afresh: {cmds:?}");
    assert_eq!(assigned(&cmds)[0].0, w("w2"));
}

#[test]
fn a_worker_back_without_an_orphan_and_without_its_report_drops_it_after_a_lease() {
    let (rows, l1, _) = first_incarnation();
    let mut f = FarmCore::with_first_lease(5_000);
    f.restore(T0, rows);
    // A fresh worker process under the old name: it runs nothing and resends nothing.
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w1"), caps: caps(2), running: vec![] });
    f.handle(LEASE_TTL, FarmEvent::Tick);
    assert_eq!(f.orphans(), 0);
    assert!(f.take_journal().ended.contains(&l1));
    let cmds = f.handle(LEASE_TTL, FarmEvent::Submit(Box::new(item(7, 1))));
    assert_eq!(assigned(&cmds).len(), 1, "{cmds:?}");
}

#[test]
fn an_adopted_attempt_that_is_handed_back_runs_afresh() {
    let (rows, l1, _) = first_incarnation();
    let mut f = FarmCore::with_first_lease(5_000);
    f.restore(T0, rows);
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w1"), caps: caps(2), running: vec![l1] });
    let back = FromWorker::Finished(Box::new(Finished::handed_back(
        l1,
        HandBack::Outputs("uploading failed".into()),
    )));
    f.handle(T0, FarmEvent::Report { worker: w("w1"), msg: back });
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(7, 1))));
    assert_eq!(assigned(&cmds).len(), 1, "{cmds:?}");
}

#[test]
fn only_the_worker_that_ran_an_orphan_may_report_it() {
    let (rows, l1, _) = first_incarnation();
    let mut f = FarmCore::with_first_lease(5_000);
    f.restore(T0, rows);
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w2"), caps: caps(2), running: vec![] });
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("w2"), msg: finished(l1) });
    assert!(matches!(cmds.as_slice(), [FarmCommand::Refuse { .. }]), "{cmds:?}");
    // And a running attempt claimed by another name is cancelled as stale there.
    let cmds =
        f.handle(T0, FarmEvent::WorkerJoined { id: w("w3"), caps: caps(2), running: vec![l1] });
    assert_eq!(cancels(&cmds), [l1]);
}

#[test]
fn a_kept_result_that_lies_is_refused_when_its_run_claims_it() {
    let (rows, l1, _) = first_incarnation();
    let mut f = FarmCore::with_first_lease(5_000);
    f.restore(T0, rows);
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w1"), caps: caps(2), running: vec![] });
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w2"), caps: caps(2), running: vec![] });
    // A manifest outside the task's outputs, kept across the restart.
    let mut forged = Finished::never_ran(l1, ExitKind::Code(0));
    let manifest = OutputManifest::new(vec![prova_protocol::manifest::ManifestEntry::dir(
        ".git/hooks",
        0o755,
    )]);
    let fingerprint = manifest.fingerprint();
    forged.outputs = Some(Outputs { manifest, fingerprint, artifact: None });
    f.handle(
        T0,
        FarmEvent::Report { worker: w("w1"), msg: FromWorker::Finished(Box::new(forged)) },
    );
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(7, 1))));
    assert!(delivered(&cmds).iter().all(|d| d.2 != "Finished"), "{cmds:?}");
    assert_eq!(assigned(&cmds), [(w("w2"), assigned(&cmds)[0].1)], "runs elsewhere");
}

#[test]
fn rows_are_journaled_when_placed_and_when_a_lease_ends_without_a_result() {
    let mut f = FarmCore::with_first_lease(1_000);
    f.handle(T0, FarmEvent::WorkerJoined { id: w("w1"), caps: caps(1), running: vec![] });
    f.handle(T0, FarmEvent::Submit(Box::new(item(1, 1))));
    let mut unkeyed = item(1, 2);
    unkeyed.key = None;
    f.handle(T0, FarmEvent::Submit(Box::new(unkeyed)));
    let j = f.take_journal();
    assert_eq!(j.placed.len(), 1, "only keyed leases: {j:?}");
    let l1 = j.placed[0].lease;
    // Lost with its worker: the row goes (the item is queued again, unplaced).
    f.handle(T0, FarmEvent::WorkerLeft { id: w("w1") });
    assert_eq!(f.take_journal().ended, [l1]);
    assert!(f.take_journal().is_empty());
}
