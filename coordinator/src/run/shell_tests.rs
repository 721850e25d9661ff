//! The shell around a run, with a real cache layer (a store in a temporary directory) and
//! the answers of its off-driver work taken by hand: what a driver sees.

use std::collections::HashMap;
use std::path::PathBuf;

use prova_protocol::events::{RunEvent, TaskStatus};
use prova_protocol::spec::{CommandLine, TaskSpec};
use prova_protocol::{Digest, TaskId, WorkerId};
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::cache::{CacheThread, Entry, Store};
use crate::layers::LocalLayer;
use crate::plan::{PlannedTask, RunPlan, TaskKind};
use crate::run::machine::machine_tests::keys_for;
use crate::run::types::{CachePolicy, ExecMode, RunCache, RunOptions};

fn plan(root: PathBuf, n: usize) -> RunPlan {
    let tasks = (0..n)
        .map(|i| {
            let id = TaskId::new(&format!("p{i}"), "build");
            let mut spec =
                TaskSpec::new(id.clone(), format!("p{i}"), CommandLine::Shell("true".into()));
            spec.outputs = vec!["dist/**".into()];
            PlannedTask {
                id,
                project: usize::MAX,
                kind: TaskKind::Command,
                spec,
                cacheable: true,
                deps: vec![],
                requested: true,
                inputs: vec![],
            }
        })
        .collect();
    RunPlan { root, tasks }
}

/// A hit for `key` whose outputs are not on disk (a restore would be asked for).
fn hit(key: Digest) -> Entry {
    Entry {
        namespace: "trusted".into(),
        key,
        task: String::new(),
        artifact: None,
        log: None,
        manifest: Vec::new(),
        components: Vec::new(),
        fingerprint: None,
        duration_ms: 1,
        created_ms: 1,
        last_used_ms: 1,
    }
}

struct World {
    shell: Shell,
    answers: mpsc::Receiver<Answer>,
    events: mpsc::Receiver<RunEvent>,
    done: oneshot::Receiver<prova_protocol::events::RunSummary>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// A run of `n` tasks, each with a hit in the layer's store asked about before it starts.
fn world(n: usize) -> World {
    let ws = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let (store, _join) = CacheThread::spawn(Store::open(cache_dir.path()).unwrap()).unwrap();
    let layer = LocalLayer::new(store, "trusted", &cache_dir.path().join("tmp"));
    let plan = plan(ws.path().to_owned(), n);
    let keys = keys_for(&plan);
    let hits: HashMap<usize, Entry> = (0..n).map(|i| (i, hit(keys.key(i).unwrap()))).collect();
    let (events_tx, events) = mpsc::channel(1024);
    let (done_tx, done) = oneshot::channel();
    let (answers_tx, answers) = mpsc::channel(64);
    let answers_fn: Answers = Arc::new(move |side, input| {
        let tx = answers_tx.clone();
        Box::pin(async move {
            let _ = tx.send(Answer { side, input }).await;
        })
    });
    let args = RunShellArgs {
        plan,
        options: RunOptions { concurrency: 4, ..Default::default() },
        weights: vec![],
        worker: WorkerId("local".into()),
        events: EventSink::NeverWait { tx: events_tx, reserve: 64 },
        done: done_tx,
        first_attempt: 1,
        cache: Some(RunCache {
            layer: Arc::new(layer),
            policy: CachePolicy::READ_WRITE,
            keys,
            hits,
            staging: cache_dir.path().join("tmp"),
            protected: Default::default(),
        }),
        exec: ExecMode::InPlace,
        local_proof_sources: None,
    };
    World { shell: Shell::new(args, answers_fn), answers, events, done, _dirs: (ws, cache_dir) }
}

/// The next answer of work the shell started off the driver (bounded: a lost answer fails).
async fn next_answer(w: &mut World) -> Answer {
    let wait = tokio::time::timeout(std::time::Duration::from_secs(30), w.answers.recv());
    wait.await.expect("an answer within 30 s").expect("the answer channel is open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_while_hits_resolve_is_held_and_ends_the_run_once_they_do() {
    let mut w = world(3);
    let mut out = Vec::new();
    w.shell.begin(&mut out).await;
    assert!(out.is_empty(), "nothing is handed out before the hits are resolved: {out:?}");
    w.shell.interrupt(&mut out).await;
    assert!(out.is_empty() && !w.shell.is_over(), "the interrupt was taken before the hits");

    // The hits' answer, then the restores they started: the held interrupt is taken after
    // the hits, so every restore's task ends aborted and nothing is ever handed out.
    while !w.shell.is_over() {
        let answer = next_answer(&mut w).await;
        w.shell.answer(answer, &mut out).await;
    }
    assert!(out.iter().all(|o| !matches!(o, Outward::Assign { .. })), "{out:?}");
    w.shell.finish().await;
    let summary = w.done.await.expect("a summary");
    assert!(summary.interrupted);
    assert_eq!(summary.tasks.len(), 3);
    assert!(summary.tasks.iter().all(|t| t.status == TaskStatus::Aborted), "{summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_restore_off_the_driver_and_answer_back() {
    let mut w = world(2);
    let mut out = Vec::new();
    w.shell.begin(&mut out).await;
    // The hits' answer, then each hit's restore, run off the driver, answers back; the store
    // holds no artifact, so each restore fails and its task is handed out to run.
    let mut handed = 0;
    while handed < 2 {
        let answer = next_answer(&mut w).await;
        w.shell.answer(answer, &mut out).await;
        handed = out.iter().filter(|o| matches!(o, Outward::Assign { .. })).count();
    }
    assert!(!w.shell.is_over());
    assert!(w.events.try_recv().is_ok(), "the run said why each restore failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_must_arrive_and_finds_no_room_stops_the_run() {
    // Room for one event and no reserve: the client is not reading. The failed restores'
    // notices fill it; the next one stops the run, which cancels what it handed out.
    let mut w = world(3);
    let (tx, _unread) = mpsc::channel(1);
    w.shell.events = EventSink::NeverWait { tx, reserve: 0 };
    let mut out = Vec::new();
    w.shell.begin(&mut out).await;
    while !out.iter().any(|o| matches!(o, Outward::Cancel(_))) {
        let answer = next_answer(&mut w).await;
        w.shell.answer(answer, &mut out).await;
    }
    let mut assigned: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Outward::Assign { assignment, .. } => Some(assignment.attempt),
            Outward::Cancel(_) => None,
        })
        .collect();
    let mut cancelled: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Outward::Cancel(a) => Some(*a),
            Outward::Assign { .. } => None,
        })
        .collect();
    // In any order: the run cancels what it holds as it finds it.
    assigned.sort_unstable_by_key(|a| a.0);
    cancelled.sort_unstable_by_key(|a| a.0);
    assert!(!assigned.is_empty(), "{out:?}");
    assert_eq!(assigned, cancelled, "every attempt handed out is cancelled: {out:?}");
}
