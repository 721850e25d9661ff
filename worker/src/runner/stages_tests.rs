//! Each stage of an assignment on its own, with the real executor in a temporary workspace.

use std::path::Path;
use std::sync::Arc;

use prova_protocol::AttemptId;
use prova_protocol::ids::TaskId;
use prova_protocol::spec::{CommandLine, ExitKind, TaskSpec};
use prova_protocol::work::{
    Assignment, Finished, FromWorker, Isolation, Perturb, Placement, ProtectedPath,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Checked, RunnerConfig, WorkerContext, run_assignment};
use crate::exec::LocalExecutor;

fn ctx() -> WorkerContext {
    WorkerContext::in_place(Arc::new(LocalExecutor), RunnerConfig::from_host())
}

/// Task `p#t` in project `p` of `ws`, in place, running `sh -c script`.
fn assignment(ws: &Path, script: &str) -> Assignment {
    Assignment {
        attempt: AttemptId(1),
        spec: TaskSpec::new(TaskId::new("p", "t"), "p", CommandLine::Shell(script.into())),
        placement: Placement::InPlace { workspace_root: ws.to_owned(), protected: Vec::new() },
        clean_outputs: false,
        collect_outputs: false,
        pack_to: None,
        perturb: None,
        trace_reads: false,
        survey_on_failure: false,
    }
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("p")).expect("project dir");
    dir
}

async fn check(a: Assignment) -> Result<Checked, Box<Finished>> {
    Checked::check(a, &ctx(), &CancellationToken::new()).await
}

fn spawn_failed(f: &Finished) -> &str {
    match &f.exit {
        ExitKind::SpawnFailed(why) => why,
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn check_refuses_bad_outputs_and_ready_when_before_anything_runs() {
    let ws = workspace();
    let mut bad_globs = assignment(ws.path(), "touch ran");
    bad_globs.spec.outputs = vec!["dist/[".into()];
    let mut bad_ready = assignment(ws.path(), "touch ran");
    bad_ready.spec.ready_when = Some("(unclosed".into());
    for (a, says) in [(bad_globs, "bad outputs"), (bad_ready, "bad ready_when")] {
        let Err(stop) = check(a).await else { panic!("{says}: checked") };
        assert!(spawn_failed(&stop).starts_with(says), "{:?}", stop.exit);
        assert_eq!((stop.tries, stop.isolation), (0, Isolation::NotRun));
    }
    assert!(!ws.path().join("p/ran").exists());
}

#[tokio::test]
async fn an_in_place_task_runs_in_its_project_with_the_markers_and_no_wrapper() {
    let ws = workspace();
    let a = assignment(ws.path(), "true");
    let own_argv = crate::exec::command_argv(&a.spec.command, &a.spec.args);
    let placed = check(a).await.expect("checked").place(&ctx()).await.expect("placed");
    assert_eq!(placed.root, ws.path());
    assert_eq!(placed.cwd, ws.path().join("p"));
    assert!(placed.exec_root.is_none());
    let wrapped = placed.wrap(&ctx());
    assert_eq!(wrapped.argv, own_argv);
    assert_eq!(wrapped.report.isolation, Isolation::InPlace);
    assert_eq!(wrapped.report.tries, 0);
    let var = |k: &str| wrapped.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(var("PROVA_TASK").as_deref(), Some("p#t"));
    assert_eq!(var("PROVA_PROJECT").as_deref(), Some("p"));
    assert_eq!(var("PROVA_WORKSPACE"), Some(ws.path().display().to_string()));
}

#[tokio::test]
async fn a_reversed_environment_is_rebuilt_right_before_the_tasks_own_argv() {
    let ws = workspace();
    let mut a = assignment(ws.path(), "true");
    a.perturb = Some(Perturb { reverse_env: true, ..Perturb::default() });
    let own_argv = crate::exec::command_argv(&a.spec.command, &a.spec.args);
    let placed = check(a).await.expect("checked").place(&ctx()).await.expect("placed");
    let wrapped = placed.wrap(&ctx());
    assert!(wrapped.argv[0].ends_with("env") && wrapped.argv[1] == "-i", "{:?}", wrapped.argv);
    assert!(wrapped.argv.ends_with(&own_argv), "{:?}", wrapped.argv);
    assert_eq!(wrapped.argv.len(), 2 + wrapped.env.len() + own_argv.len());
}

#[tokio::test]
async fn an_exec_root_on_a_worker_without_a_blob_cache_never_runs() {
    let ws = workspace();
    let mut a = assignment(ws.path(), "touch ran");
    a.placement = Placement::ExecRoot {
        inputs: Vec::new(),
        upstream: Vec::new(),
        local_source: None,
        local_blobs: None,
    };
    let Err(stop) = check(a).await.expect("checked").place(&ctx()).await else {
        panic!("placed without a blob cache")
    };
    assert_eq!(spawn_failed(&stop), "this worker has no blob cache for exec roots");
    assert_eq!((stop.tries, stop.isolation, stop.handback.is_none()), (0, Isolation::NotRun, true));
}

#[tokio::test]
async fn execute_makes_every_try_and_explains_a_command_not_found() {
    let ws = workspace();
    let mut a = assignment(ws.path(), "echo try >> tries; exit 127");
    a.spec.retries = 2;
    a.spec.outputs = vec!["tries".into()];
    a.collect_outputs = true;
    let (link, mut reports) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let wrapped =
        check(a).await.expect("checked").place(&ctx()).await.expect("placed").wrap(&ctx());
    let Ok(executed) = wrapped.execute(&ctx(), &link, &cancel).await else {
        panic!("stopped at execute")
    };
    assert_eq!((executed.report.exit.clone(), executed.report.tries), (ExitKind::Code(127), 3));
    let detail = executed.report.exit_detail.clone().unwrap_or_default();
    assert!(detail.starts_with("PATH was "), "{detail:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("p/tries")).expect("tries"),
        "try\n".repeat(3)
    );
    drop(link);
    let mut started = Vec::new();
    while let Some(r) = reports.recv().await {
        if let FromWorker::Started { try_no, .. } = r {
            started.push(try_no);
        }
    }
    assert_eq!(started, [1, 2, 3]);
    // A failure collects nothing, even when asked to.
    let finished = executed.collect(&ctx()).await.finish();
    assert!(finished.outputs.is_none() && finished.wrote_outside.is_none());
}

#[tokio::test]
async fn a_clean_that_meets_a_protected_file_ends_the_assignment_before_a_try() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("p/dist")).expect("dist");
    std::fs::write(ws.path().join("p/dist/keep.txt"), "tracked").expect("keep");
    let mut a = assignment(ws.path(), "touch ran");
    a.spec.outputs = vec!["dist/**".into()];
    a.clean_outputs = true;
    a.placement = Placement::InPlace {
        workspace_root: ws.path().to_owned(),
        protected: vec![ProtectedPath {
            path: "p/dist/keep.txt".into(),
            why: "git tracks it".into(),
        }],
    };
    let (link, _reports) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let wrapped =
        check(a).await.expect("checked").place(&ctx()).await.expect("placed").wrap(&ctx());
    let Err(stop) = wrapped.execute(&ctx(), &link, &cancel).await else {
        panic!("executed past a protected file")
    };
    assert!(spawn_failed(&stop).starts_with("could not clean outputs"), "{:?}", stop.exit);
    assert_eq!((stop.tries, stop.isolation), (0, Isolation::InPlace));
    assert!(ws.path().join("p/dist/keep.txt").exists());
    assert!(!ws.path().join("p/ran").exists());
}

#[tokio::test]
async fn collect_fingerprints_what_a_success_wrote_in_its_outputs() {
    let ws = workspace();
    let mut a = assignment(ws.path(), "mkdir -p dist && echo hi > dist/a.txt");
    a.spec.outputs = vec!["dist/**".into(), "dist/never.txt".into()];
    a.collect_outputs = true;
    let (link, _reports) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let wrapped =
        check(a).await.expect("checked").place(&ctx()).await.expect("placed").wrap(&ctx());
    let Ok(executed) = wrapped.execute(&ctx(), &link, &cancel).await else {
        panic!("stopped at execute")
    };
    assert_eq!(executed.report.exit, ExitKind::Code(0));
    let collected = executed.collect(&ctx()).await;
    let outputs = collected.report.outputs.clone().expect("outputs collected");
    assert!(outputs.manifest.entries.iter().any(|e| e.path == "p/dist/a.txt"), "{outputs:?}");
    assert_eq!(outputs.fingerprint, outputs.manifest.fingerprint());
    assert_eq!(collected.report.missing_literals, ["p/dist/never.txt"]);
    let finished = collected.finish();
    assert_eq!((finished.tries, finished.isolation), (1, Isolation::InPlace));
}

#[tokio::test]
async fn the_pipeline_end_to_end_gives_what_its_stages_give() {
    let ws = workspace();
    let mut a = assignment(ws.path(), "echo out; exit 3");
    a.spec.retries = 1;
    let (link, _reports) = mpsc::channel(64);
    let f = run_assignment(a, &ctx(), link, CancellationToken::new()).await;
    assert_eq!((f.exit, f.tries, f.isolation), (ExitKind::Code(3), 2, Isolation::InPlace));
    assert_eq!(f.log, b"out\n");
}
