//! One assignment from start to `Finished`: build the command line and environment, run the
//! tries (cleaning declared outputs before each), stream output and readiness to the link,
//! then collect, fingerprint and pack the outputs of a success.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::{CommandLine, ExecStats, ExitKind};
use prova_protocol::work::{Assignment, Finished, FromWorker, Placement};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::exec::{self, Executor, ProcessIo, ProcessRequest};
use crate::outputs;

/// Limits and the environment baseline, fixed for a worker's lifetime.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// SIGTERM → SIGKILL grace on timeout and cancel.
    pub kill_grace: Duration,
    /// Bytes of combined log kept per try.
    pub log_limit: usize,
    /// The baseline environment every task starts from (see [`exec::env`]).
    pub baseline_env: Vec<(String, String)>,
}

impl RunnerConfig {
    /// The defaults, with the baseline taken from this process's environment.
    pub fn from_host() -> Self {
        Self {
            kill_grace: Duration::from_secs(5),
            log_limit: 4 * 1024 * 1024,
            baseline_env: exec::env::baseline_env(|k| std::env::var(k).ok()),
        }
    }
}

/// Bound on output chunks in flight between the executor and the link.
const OUTPUT_QUEUE: usize = 64;

/// Runs `a` to completion, reporting `Started`/`Output`/`Ready` on `link`; returns the
/// `Finished` report (the caller sends it, so it can order it after its own bookkeeping).
pub async fn run_assignment(
    a: Assignment,
    executor: Arc<dyn Executor>,
    cfg: &RunnerConfig,
    link: mpsc::Sender<FromWorker>,
    cancel: CancellationToken,
) -> Finished {
    let attempt = a.attempt;
    let root = match &a.placement {
        Placement::InPlace { workspace_root } => workspace_root.clone(),
        Placement::ExecRoot { .. } => {
            let mut r = refused(attempt);
            r.exit = ExitKind::SpawnFailed("exec roots need a worker with a blob cache".to_owned());
            return r;
        }
    };
    let cwd =
        if a.spec.project_dir.is_empty() { root.clone() } else { root.join(&a.spec.project_dir) };
    let mut report = refused(attempt);
    let globs = match PathGlobs::new(&a.spec.project_dir, &a.spec.outputs) {
        Ok(g) => g,
        Err(e) => {
            report.exit = ExitKind::SpawnFailed(format!("bad outputs: {e}"));
            return report;
        }
    };
    let ready_re = match a.spec.ready_when.as_deref().map(regex::Regex::new).transpose() {
        Ok(r) => r,
        Err(e) => {
            report.exit = ExitKind::SpawnFailed(format!("bad ready_when: {e}"));
            return report;
        }
    };
    let env = task_env(cfg, &a);
    let argv = match &a.spec.command {
        CommandLine::Shell(cmd) => exec::shell_argv(cmd, &a.spec.args),
        CommandLine::Argv(v) => v.iter().chain(&a.spec.args).cloned().collect(),
    };
    let max_tries = 1 + if a.spec.persistent { 0 } else { a.spec.retries };
    for try_no in 1..=max_tries {
        if a.clean_outputs
            && !globs.is_empty()
            && let Err(e) = outputs::clean(&root, &globs)
        {
            report.exit = ExitKind::SpawnFailed(format!("could not clean outputs: {e}"));
            return report;
        }
        report.tries = try_no;
        let _ = link.send(FromWorker::Started { attempt, try_no }).await;
        let req = ProcessRequest {
            argv: argv.clone(),
            cwd: cwd.clone(),
            env: env.clone(),
            umask: a.perturb.as_ref().and_then(|p| p.umask),
            timeout: a.spec.timeout_ms.map(Duration::from_millis),
            kill_grace: cfg.kill_grace,
            log_limit: cfg.log_limit,
            ready: if a.spec.persistent { ready_re.clone() } else { None },
        };
        let result =
            run_try(&executor, req, a.spec.persistent, &link, attempt, cancel.clone()).await;
        report.exit = result.exit;
        report.stats = result.stats;
        report.log = result.log.bytes;
        report.log_omitted = result.log.omitted;
        if report.exit.success()
            || matches!(report.exit, ExitKind::Aborted)
            || cancel.is_cancelled()
        {
            break;
        }
    }
    if report.exit.success() && a.collect_outputs {
        let pack_to = a.pack_to.clone();
        let root2: PathBuf = root.clone();
        let collected = tokio::task::spawn_blocking(move || {
            outputs::collect(&root2, &globs, pack_to.as_deref())
        })
        .await;
        match collected {
            Ok(Ok((outs, missing))) => {
                report.outputs = Some(outs);
                report.missing_literals = missing;
            }
            Ok(Err(e)) => report.output_error = Some(e.to_string()),
            Err(e) => report.output_error = Some(format!("collecting outputs panicked: {e}")),
        }
    }
    report
}

/// The task's environment: the baseline, overridden by the task's own values, then by the
/// perturbations of a determinism re-run (only for names the task did not declare).
fn task_env(cfg: &RunnerConfig, a: &Assignment) -> Vec<(String, String)> {
    let mut env = exec::env::compose_env(&cfg.baseline_env, &a.spec.env);
    if let Some(p) = &a.perturb {
        for (k, v) in &p.env {
            if a.spec.env.iter().any(|(name, _)| name == k) {
                continue;
            }
            match env.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v.clone(),
                None => env.push((k.clone(), v.clone())),
            }
        }
        if p.reverse_env {
            env.reverse();
        }
    }
    env
}

async fn run_try(
    executor: &Arc<dyn Executor>,
    req: ProcessRequest,
    persistent: bool,
    link: &mpsc::Sender<FromWorker>,
    attempt: prova_protocol::AttemptId,
    cancel: CancellationToken,
) -> exec::ProcessResult {
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(OUTPUT_QUEUE);
    let (ready_tx, ready_rx) = if persistent {
        let (t, r) = oneshot::channel();
        (Some(t), Some(r))
    } else {
        (None, None)
    };
    let fut = executor.run(req, ProcessIo { output: out_tx, ready: ready_tx }, cancel);
    // One loop forwards output and readiness, so "ready" always follows the line that
    // matched `ready_when` (the executor queues that line before it fires).
    let forward = async {
        let mut ready_rx = ready_rx;
        loop {
            tokio::select! {
                biased;
                chunk = out_rx.recv() => match chunk {
                    Some(text) => { let _ = link.send(FromWorker::Output { attempt, text }).await; }
                    None => break,
                },
                fired = async { match ready_rx.as_mut() { Some(rx) => rx.await.is_ok(), None => std::future::pending().await } } => {
                    ready_rx = None;
                    while let Ok(text) = out_rx.try_recv() {
                        let _ = link.send(FromWorker::Output { attempt, text }).await;
                    }
                    if fired {
                        let _ = link.send(FromWorker::Ready { attempt }).await;
                    }
                }
            }
        }
    };
    let (result, ()) = tokio::join!(fut, forward);
    result.unwrap_or_else(|e| exec::ProcessResult {
        exit: ExitKind::SpawnFailed(e.to_string()),
        stats: ExecStats::default(),
        log: exec::CapturedLog::default(),
    })
}

/// An empty report for `attempt` (no try made yet).
pub fn refused(attempt: prova_protocol::AttemptId) -> Finished {
    Finished {
        attempt,
        exit: ExitKind::SpawnFailed(String::new()),
        tries: 0,
        stats: ExecStats::default(),
        log: Vec::new(),
        log_omitted: 0,
        outputs: None,
        missing_literals: Vec::new(),
        output_error: None,
    }
}
