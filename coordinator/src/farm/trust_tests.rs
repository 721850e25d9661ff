//! Lying workers and unfit ones (`trust.rs`, the core's health), driven by hand with a fake
//! clock.

use std::collections::BTreeMap;
use std::time::Duration;

use prova_protocol::TaskId;
use prova_protocol::manifest::{ManifestEntry, OutputManifest};
use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
use prova_protocol::work::{Assignment, Finished, FromWorker, Outputs, Placement, ToWorker};

use super::*;

const T0: Duration = Duration::ZERO;

fn caps(slots: u32) -> WorkerCaps {
    WorkerCaps { slots, os: "linux".into(), arch: "x86_64".into(), labels: BTreeMap::new() }
}

fn w(name: &str) -> WorkerId {
    WorkerId(name.into())
}

fn join(f: &mut FarmCore, name: &str, slots: u32) -> Vec<FarmCommand> {
    f.handle(T0, FarmEvent::WorkerJoined { id: w(name), caps: caps(slots), running: vec![] })
}

/// `p#t<n>` of run 1 (attempt n), outputs `dist/**`, keyed.
fn item(n: u64) -> Item {
    let mut spec =
        TaskSpec::new(TaskId::new("p", &format!("t{n}")), "p", CommandLine::Shell("true".into()));
    spec.outputs = vec!["dist/**".into()];
    Item {
        origin: Origin { run: RunId(1), attempt: AttemptId(n) },
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
        key: Some(Digest::of(&n.to_le_bytes())),
    }
}

/// A result with `entries` as its manifest (honest fingerprint).
fn result(lease: AttemptId, entries: Vec<ManifestEntry>) -> FromWorker {
    let mut f = Finished::never_ran(lease, ExitKind::Code(0));
    f.tries = 1;
    let manifest = OutputManifest::new(entries);
    let fingerprint = manifest.fingerprint();
    f.outputs = Some(Outputs { manifest, fingerprint, artifact: None });
    FromWorker::Finished(Box::new(f))
}

/// A lie: a directory in `.git`, outside the task's outputs.
fn lie(lease: AttemptId) -> FromWorker {
    result(lease, vec![ManifestEntry::dir(".git/hooks", 0o755)])
}

fn honest(lease: AttemptId) -> FromWorker {
    let out = ManifestEntry {
        path: "p/dist/out.txt".into(),
        kind: prova_protocol::manifest::EntryKind::File,
        mode: 0o644,
        size: 1,
        digest: Some(Digest::of(b"x")),
        mtime_ns: 0,
        link_target: None,
    };
    result(lease, vec![out])
}

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

fn delivered_finished(cmds: &[FarmCommand]) -> Vec<(RunId, AttemptId)> {
    cmds.iter()
        .filter_map(|c| match c {
            FarmCommand::Deliver { run, msg: FromWorker::Finished(f), .. } => {
                Some((*run, f.attempt))
            }
            _ => None,
        })
        .collect()
}

fn lease_of(f: &FarmCore, worker: &str, origin_attempt: u64) -> AttemptId {
    f.leases()
        .find(|(_, wk, o)| wk.0 == worker && o.attempt == AttemptId(origin_attempt))
        .map(|(l, ..)| l)
        .unwrap_or_else(|| panic!("no lease of t{origin_attempt} on {worker}"))
}

#[test]
fn a_refused_result_runs_elsewhere_and_reaches_no_run() {
    let mut f = FarmCore::new();
    join(&mut f, "liar", 8);
    f.handle(T0, FarmEvent::Submit(Box::new(item(1))));
    join(&mut f, "honest", 1);
    let l = lease_of(&f, "liar", 1);
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("liar"), msg: lie(l) });
    assert!(delivered_finished(&cmds).is_empty(), "a lie reaches no run: {cmds:?}");
    assert!(
        cmds.iter()
            .any(|c| matches!(c, FarmCommand::Distrust { worker, .. } if *worker == w("liar")))
    );
    assert_eq!(assigned(&cmds).iter().map(|a| a.0.clone()).collect::<Vec<_>>(), [w("honest")]);
    let again = lease_of(&f, "honest", 1);
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("honest"), msg: honest(again) });
    assert_eq!(delivered_finished(&cmds), [(RunId(1), AttemptId(1))]);
}

#[test]
fn a_refused_item_never_goes_back_to_the_liar_even_when_it_is_the_only_free_one() {
    let mut f = FarmCore::new();
    join(&mut f, "honest", 1);
    // honest is busy with t1; t2 is lied about on the liar.
    f.handle(T0, FarmEvent::Submit(Box::new(item(1))));
    join(&mut f, "liar", 8);
    f.handle(T0, FarmEvent::Submit(Box::new(item(2))));
    let l2 = lease_of(&f, "liar", 2);
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("liar"), msg: lie(l2) });
    assert!(assigned(&cmds).is_empty(), "waits for honest: {cmds:?}");
    assert_eq!(f.queued(), 1);
    let l1 = f.leases().find(|(_, wk, _)| wk.0 == "honest").map(|(l, ..)| l).expect("t1");
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("honest"), msg: honest(l1) });
    assert_eq!(assigned(&cmds).iter().map(|a| a.0.clone()).collect::<Vec<_>>(), [w("honest")]);
}

#[test]
fn with_no_other_worker_a_refused_result_fails_the_task_at_once_naming_the_worker() {
    let mut f = FarmCore::new();
    join(&mut f, "liar", 8);
    f.handle(T0, FarmEvent::Submit(Box::new(item(1))));
    let l = lease_of(&f, "liar", 1);
    let cmds = f.handle(T0, FarmEvent::Report { worker: w("liar"), msg: lie(l) });
    let reason = cmds
        .iter()
        .find_map(|c| match c {
            FarmCommand::Fail { origin, reason } if origin.attempt == AttemptId(1) => {
                Some(reason.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("not failed: {cmds:?}"));
    assert!(reason.contains("worker `liar` returned outputs outside"), "{reason}");
    assert!(reason.contains(".git/hooks") && reason.contains("no other worker"), "{reason}");
    // And a lying fingerprint is refused the same way.
    let mut f = FarmCore::new();
    join(&mut f, "liar", 8);
    f.handle(T0, FarmEvent::Submit(Box::new(item(1))));
    let l = lease_of(&f, "liar", 1);
    let FromWorker::Finished(mut fin) = honest(l) else { unreachable!() };
    if let Some(o) = fin.outputs.as_mut() {
        o.fingerprint = Digest::of(b"another");
    }
    let cmds =
        f.handle(T0, FarmEvent::Report { worker: w("liar"), msg: FromWorker::Finished(fin) });
    assert!(
        cmds.iter().any(
            |c| matches!(c, FarmCommand::Fail { reason, .. } if reason.contains("fingerprint"))
        ),
        "{cmds:?}"
    );
}

#[test]
fn three_refusals_quarantine_the_liar_which_then_gets_no_work_until_released() {
    let mut f = FarmCore::new();
    join(&mut f, "honest", 1);
    f.handle(T0, FarmEvent::Submit(Box::new(item(1))));
    join(&mut f, "liar", 8);
    for n in 2..=4 {
        f.handle(T0, FarmEvent::Submit(Box::new(item(n))));
    }
    // honest took one; the liar the other three.
    let lied: Vec<u64> = (1..=4)
        .filter(|n| f.leases().any(|(_, wk, o)| wk.0 == "liar" && o.attempt == AttemptId(*n)))
        .collect();
    assert_eq!(lied, [2, 3, 4]);
    let mut quarantined = None;
    for n in &lied {
        let l = lease_of(&f, "liar", *n);
        let cmds = f.handle(T0, FarmEvent::Report { worker: w("liar"), msg: lie(l) });
        for c in cmds {
            if let FarmCommand::Quarantined { worker, reason } = c {
                quarantined = Some((worker, reason));
            }
        }
    }
    let (who, why) = quarantined.expect("quarantined after three refusals");
    assert_eq!(who, w("liar"));
    assert!(why.starts_with("3 results refused within 600 s; the last: outputs outside"), "{why}");
    assert_eq!(f.quarantined().map(|(w, _)| w.0.clone()).collect::<Vec<_>>(), ["liar"]);
    assert_eq!(f.take_journal().quarantined.len(), 1, "persisted");
    // A quarantine survives a reconnect; new work waits for honest.
    join(&mut f, "liar", 8);
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(9))));
    assert!(assigned(&cmds).iter().all(|a| a.0 != w("liar")), "{cmds:?}");
    // Released: work again.
    f.handle(T0, FarmEvent::Release { id: w("liar") });
    assert_eq!(f.quarantined().count(), 0);
    assert_eq!(f.take_journal().released, [w("liar")]);
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(10))));
    assert!(assigned(&cmds).iter().any(|a| a.0 == w("liar")), "{cmds:?}");
}

#[test]
fn refusals_spread_over_more_than_the_window_do_not_quarantine() {
    let mut f = FarmCore::new();
    join(&mut f, "liar", 8);
    join(&mut f, "honest", 8);
    let mut now = T0;
    for n in 1..=(QUARANTINE_AFTER as u64 + 1) {
        let mut it = item(n);
        it.avoid = Some(w("honest"));
        f.handle(now, FarmEvent::Submit(Box::new(it)));
        let l = lease_of(&f, "liar", n);
        let cmds = f.handle(now, FarmEvent::Report { worker: w("liar"), msg: lie(l) });
        assert!(!cmds.iter().any(|c| matches!(c, FarmCommand::Quarantined { .. })), "{n}");
        now += QUARANTINE_WINDOW / 2 + Duration::from_secs(1);
    }
}

#[test]
fn a_quarantined_workers_other_leases_run_elsewhere_free() {
    let mut f = FarmCore::new();
    join(&mut f, "liar", 8);
    for n in 1..=4 {
        f.handle(T0, FarmEvent::Submit(Box::new(item(n))));
    }
    join(&mut f, "honest", 8);
    let mut all = Vec::new();
    for n in 1..=3 {
        let l = lease_of(&f, "liar", n);
        all.extend(f.handle(T0, FarmEvent::Report { worker: w("liar"), msg: lie(l) }));
    }
    // t4 was on the liar when it was quarantined: stopped there, placed on honest.
    assert!(all.iter().any(|c| matches!(c, FarmCommand::Send { worker, msg: ToWorker::Cancel { .. } } if *worker == w("liar"))));
    assert!(f.leases().all(|(_, wk, _)| wk.0 == "honest"), "every lease on honest");
    assert_eq!(f.leases().count(), 4);
}

#[test]
fn an_unfit_worker_gets_no_work_and_an_item_only_it_could_run_fails_after_the_wait() {
    let mut f = FarmCore::new();
    join(&mut f, "w1", 2);
    f.handle(
        T0,
        FarmEvent::Health {
            id: w("w1"),
            unfit: Some("disk low: 800.0 KiB free, floor 1.0 MiB".into()),
        },
    );
    let cmds = f.handle(T0, FarmEvent::Submit(Box::new(item(1))));
    assert!(assigned(&cmds).is_empty(), "{cmds:?}");
    // Fit again: placed.
    let cmds = f.handle(T0, FarmEvent::Health { id: w("w1"), unfit: None });
    assert_eq!(assigned(&cmds).len(), 1, "{cmds:?}");
    // Unfit for good: the wait counts from when it became unfit, not from the submit.
    let late = NO_WORKER_WAIT * 5;
    f.handle(late, FarmEvent::Health { id: w("w1"), unfit: Some("disk low".into()) });
    f.handle(late, FarmEvent::Submit(Box::new(item(2))));
    let cmds = f.handle(late, FarmEvent::Tick);
    assert!(!cmds.iter().any(|c| matches!(c, FarmCommand::Fail { .. })), "{cmds:?}");
    let cmds = f.handle(late + NO_WORKER_WAIT, FarmEvent::Tick);
    let reason = cmds.iter().find_map(|c| match c {
        FarmCommand::Fail { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert!(reason.as_deref().is_some_and(|r| r.contains("unfit (disk low)")), "{reason:?}");
}

#[test]
fn a_worker_unfit_for_a_moment_fails_nothing_that_waited_long() {
    // Items queued for minutes behind busy slots must not fail the moment the only worker
    // says it is short of disk.
    let mut f = FarmCore::new();
    join(&mut f, "w1", 1);
    f.handle(T0, FarmEvent::Submit(Box::new(item(1))));
    f.handle(T0, FarmEvent::Submit(Box::new(item(2))));
    let late = NO_WORKER_WAIT * 3;
    f.handle(late, FarmEvent::Health { id: w("w1"), unfit: Some("disk low".into()) });
    let cmds = f.handle(late, FarmEvent::Tick);
    assert!(!cmds.iter().any(|c| matches!(c, FarmCommand::Fail { .. })), "{cmds:?}");
}
