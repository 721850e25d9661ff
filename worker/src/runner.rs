//! One assignment from start to `Finished`: where it runs (in place, or an exec root built
//! from its declared inputs and upstream artifacts, sandboxed when the worker can), the
//! command line and environment, the tries (cleaning declared outputs before each), output
//! and readiness streamed to the link, then the outputs of a success collected,
//! fingerprinted, packed (and uploaded by a farm worker).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{
    Assignment, Finished, FromWorker, HandBack, Placement, ReadsReport, TRACE_READ_FAILED,
    WroteOutside,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::blobcache::BlobCache;
use crate::exec::{self, Executor, ProcessIo, ProcessRequest};
use crate::execroot::strays::{StrayCheck, Survey};
use crate::mask::SecretMask;
use crate::outputs;
use crate::remote::RemoteBlobs;
use crate::rootprep;

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

/// Everything an assignment may use on this worker.
pub struct WorkerContext {
    /// How processes are run.
    pub executor: Arc<dyn Executor>,
    /// Limits and baseline environment.
    pub config: RunnerConfig,
    /// Where exec roots and staged artifacts live.
    pub work_dir: PathBuf,
    /// The blob cache exec roots are materialised from (exec-root placements need it).
    pub blobs: Option<BlobCache>,
    /// The coordinator, for a farm worker.
    pub remote: Option<Arc<dyn RemoteBlobs>>,
    /// Run exec-root tasks under bubblewrap.
    pub sandbox: bool,
    /// strace is available for `trace_reads`.
    pub strace: bool,
    /// A farm worker's work dir against its disk floor (`crate::health`).
    pub disk: Option<Arc<crate::health::DiskHealth>>,
}

impl WorkerContext {
    /// A context for in-place execution only (local mode's default worker).
    pub fn in_place(executor: Arc<dyn Executor>, config: RunnerConfig) -> Self {
        Self {
            executor,
            config,
            work_dir: PathBuf::new(),
            blobs: None,
            remote: None,
            disk: None,
            sandbox: false,
            strace: false,
        }
    }
}

/// Bound on output chunks in flight between the executor and the link.
const OUTPUT_QUEUE: usize = 64;

/// Runs `a` to completion, reporting `Started`/`Output`/`Ready` on `link`; returns the
/// `Finished` report (the caller sends it, so it can order it after its own bookkeeping).
pub async fn run_assignment(
    a: Assignment,
    ctx: &WorkerContext,
    link: mpsc::Sender<FromWorker>,
    cancel: CancellationToken,
) -> Finished {
    let attempt = a.attempt;
    let fail = |why: String| Finished::never_ran(attempt, ExitKind::SpawnFailed(why));
    let globs = match PathGlobs::new(&a.spec.project_dir, &a.spec.outputs) {
        Ok(g) => g,
        Err(e) => return fail(format!("bad outputs: {e}")),
    };
    let ready_re = match a.spec.ready_when.as_deref().map(regex::Regex::new).transpose() {
        Ok(r) => r,
        Err(e) => return fail(format!("bad ready_when: {e}")),
    };
    let mut argv = exec::command_argv(&a.spec.command, &a.spec.args);
    let mut env = task_env(&ctx.config, &a);
    // A farm task's runtime inputs must give here what they gave on the client.
    if !a.spec.runtime.is_empty() {
        let cwd = if ctx.work_dir.as_os_str().is_empty() { Path::new("/") } else { &ctx.work_dir };
        if let Some(why) =
            exec::runtime::mismatch(&ctx.executor, &a.spec.runtime, &env, cwd, &cancel).await
        {
            return fail(why);
        }
    }
    // And the program its command starts must be the client's build.
    if !a.spec.programs.is_empty()
        && let Some(why) = exec::programs::mismatch(&a.spec.programs, &env).await
    {
        return fail(why);
    }
    // Secret values of the task's declared variables never reach its log (crate::mask).
    let mask = SecretMask::from_env(&a.spec.env);
    let task_argv_len = argv.len();
    let mut inner = Vec::new();
    // Where the task runs: the workspace itself, or an exec root (kept alive until the
    // outputs are collected).
    let mut perturbed = None;
    let (root, cwd, exec_root, isolation, trace_file) = match &a.placement {
        Placement::InPlace { workspace_root, .. } => {
            let cwd = join(workspace_root, &a.spec.project_dir);
            (workspace_root.clone(), cwd, None, "in-place".to_owned(), None)
        }
        Placement::ExecRoot { .. } => match rootprep::prepare(&a, ctx).await {
            Ok(p) => {
                inner = argv.clone();
                let (wrapped, isolation) = rootprep::wrap(&a, ctx, &p, argv, &mut env);
                argv = wrapped.argv;
                perturbed = wrapped.perturbed;
                (p.root.path().to_owned(), p.root.cwd(), Some(p), isolation, wrapped.trace)
            }
            Err(e) => {
                // Fetching inputs or building the root on a full disk is this worker's
                // failure, not the task's: it runs elsewhere.
                if let Some(why) = no_disk(ctx, &e, "preparing the exec root") {
                    let mut back = fail(String::new());
                    hand_back(&mut back, why);
                    return back;
                }
                return fail(e.to_string());
            }
        },
    };
    set_markers(&mut env, &a, &root);
    if a.perturb.as_ref().is_some_and(|p| p.reverse_env) {
        argv = in_env_order(argv, task_argv_len, &env);
    }
    // A local inputs proof first surveys the task with the whole workspace visible, so
    // every undeclared read is named in one round (crate::sandbox::survey).
    let survey = match (&a.placement, &exec_root) {
        (Placement::ExecRoot { local_source: Some(ws), .. }, Some(p))
            if a.trace_reads && ctx.sandbox && ctx.strace =>
        {
            let root = p.root.path().to_owned();
            crate::sandbox::survey::run(&a, ctx, ws, &root, &inner, &env, cancel.clone()).await
        }
        _ => None,
    };
    let strays = survey_strays(exec_root.as_ref(), isolation == "bwrap").await;
    let mut report = Finished::never_ran(attempt, ExitKind::SpawnFailed(String::new()));
    report.isolation = isolation;
    report.perturbed = perturbed;
    // The work dir's lowest free space while the task runs (a farm worker's): a task whose
    // writes met ENOSPC may have removed them before it exited.
    let watch = ctx.disk.as_ref().filter(|_| ctx.remote.is_some()).map(|d| d.watch());
    let max_tries = 1 + if a.spec.persistent { 0 } else { a.spec.retries };
    for try_no in 1..=max_tries {
        if a.clean_outputs
            && !globs.is_empty()
            && let Err(e) = outputs::clean(&root, &globs, protected(&a.placement))
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
            kill_grace: ctx.config.kill_grace,
            log_limit: ctx.config.log_limit,
            ready: if a.spec.persistent { ready_re.clone() } else { None },
        };
        let result =
            run_try(&ctx.executor, req, a.spec.persistent, &link, attempt, &mask, cancel.clone())
                .await;
        report.exit = result.exit;
        report.stats = result.stats;
        report.log = result.log.bytes;
        mask.apply_vec(&mut report.log);
        report.log_omitted = result.log.omitted;
        if report.exit.success()
            || matches!(report.exit, ExitKind::Aborted)
            || cancel.is_cancelled()
        {
            break;
        }
    }
    report.exit_detail = exit_detail(&report.exit, &env);
    // A task that failed while the work dir was below its floor — at its end, or at any
    // moment while it ran (its writes met ENOSPC, most likely) — failed for want of disk
    // here, not of its own: it runs again elsewhere.
    if !report.exit.success()
        && !matches!(report.exit, ExitKind::Aborted)
        && !cancel.is_cancelled()
        && ctx.remote.is_some()
        && let Some(why) = ctx
            .disk
            .as_ref()
            .and_then(|d| d.check())
            .or_else(|| watch.as_ref().and_then(|w| w.dipped()))
    {
        hand_back(
            &mut report,
            HandBack::NoDisk(format!("the work dir ran short while the task ran ({why})")),
        );
        drop(exec_root);
        return report;
    }
    drop(watch);
    if a.trace_reads {
        report.reads = Some(match (&trace_file, &exec_root) {
            (Some(t), Some(p)) => {
                let (t, r) = (t.clone(), p.root.path().to_owned());
                let reads = OwnedTask::spawn_blocking("worker.trace-reads", move || {
                    crate::sandbox::trace_reads(&t, &r)
                })
                .join()
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
                if let Some(f) = &trace_file {
                    let _ = std::fs::remove_file(f);
                }
                match reads {
                    Ok(mut reads) => {
                        // Lookups inside installed trees, settled against the trees here.
                        crate::trees::settle_reads(&mut reads, p.root.trees());
                        if let Some(s) = survey {
                            crate::sandbox::survey::merge(&mut reads, s);
                        }
                        reads
                    }
                    Err(e) => {
                        report.output_error = Some(format!("{TRACE_READ_FAILED}: {e}"));
                        ReadsReport::default()
                    }
                }
            }
            _ => ReadsReport::default(),
        });
    }
    if report.exit.success() {
        report.wrote_outside = stray_writes(strays).await;
    }
    // Collected even beside writes outside the outputs: the coordinator decides (a primary
    // execution fails, a determinism re-run compares its outputs).
    if report.exit.success() && a.collect_outputs {
        collect(&a, ctx, &root, globs, &mut report).await;
    }
    drop(exec_root);
    report
}

/// What a task may write beside its outputs in an exec root (`execroot::strays`), surveyed
/// before it runs; `None` without an exec root. `sandboxed`: it runs under bubblewrap.
async fn survey_strays(
    exec_root: Option<&rootprep::PreparedRoot>,
    sandboxed: bool,
) -> Option<(StrayCheck, Survey)> {
    let check = exec_root?.root.stray_check(sandboxed);
    if check.is_empty() {
        return None;
    }
    let surveyed = check.clone();
    let before = OwnedTask::spawn_blocking("worker.survey-root", move || surveyed.survey());
    Some((check, before.join().await.ok()?))
}

/// What the task wrote since [`survey_strays`] outside its declared outputs.
async fn stray_writes(strays: Option<(StrayCheck, Survey)>) -> Option<WroteOutside> {
    let (check, before) = strays?;
    let after = OwnedTask::spawn_blocking("worker.stray-writes", move || {
        check.compare(&before, &check.survey())
    });
    after.join().await.ok().flatten()
}

/// The files an in-place clean must not delete (none in an exec root: it holds no sources).
fn protected(placement: &Placement) -> &[prova_protocol::work::ProtectedPath] {
    match placement {
        Placement::InPlace { protected, .. } => protected,
        Placement::ExecRoot { .. } => &[],
    }
}

fn join(root: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() { root.to_owned() } else { root.join(rel) }
}

/// Collects, fingerprints and packs the outputs; a farm worker uploads the artifact and keeps
/// it in its blob cache (a downstream task placed here needs it).
async fn collect(
    a: &Assignment,
    ctx: &WorkerContext,
    root: &Path,
    globs: PathGlobs,
    report: &mut Finished,
) {
    let farm = ctx.remote.is_some() && matches!(a.placement, Placement::ExecRoot { .. });
    let pack_to = match (&a.pack_to, farm) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => Some(ctx.work_dir.join(crate::health::staging_name(a.attempt))),
        (None, false) => None,
    };
    let root2 = root.to_owned();
    let pack2 = pack_to.clone();
    let project = a.spec.project_dir.clone();
    let collected = OwnedTask::spawn_blocking("worker.collect-outputs", move || {
        outputs::collect(&root2, &globs, &project, pack2.as_deref())
    })
    .join()
    .await;
    let (outs, missing) = match collected {
        Ok(Ok(x)) => x,
        // Where the outputs live only here, a failure to store them is this worker's: give
        // the assignment back so it runs where they can be stored (never a success without
        // them). In place, the outputs are in the workspace; only the cache misses them.
        Ok(Err(e @ outputs::OutputError::Pack(_))) if farm => {
            hand_back(report, HandBack::Outputs(e.to_string()));
            return;
        }
        // A full disk is this worker's health, not the outputs': said as such.
        Ok(Err(e @ outputs::OutputError::DiskFull { .. })) if farm => {
            hand_back(report, HandBack::NoDisk(e.to_string()));
            return;
        }
        Ok(Err(e)) => {
            report.output_error = Some(e.to_string());
            return;
        }
        Err(e) => {
            report.output_error = Some(format!("collecting outputs panicked: {e}"));
            return;
        }
    };
    if farm
        && let (Some(path), Some((digest, size)), Some(remote)) =
            (&pack_to, outs.artifact, &ctx.remote)
    {
        if let Err(e) = remote.upload(path, digest, size).await {
            let _ = std::fs::remove_file(path);
            hand_back(report, HandBack::Outputs(format!("uploading the artifact failed: {e}")));
            return;
        }
        match &ctx.blobs {
            Some(b) => {
                let (b, p) = (b.clone(), path.clone());
                let filed = OwnedTask::spawn_blocking("worker.blob-insert", move || {
                    b.insert_file(&p, &digest)
                })
                .join()
                .await;
                if !matches!(filed, Ok(Ok(_))) {
                    // Uploaded, just not kept here: no staging file outlives it.
                    let _ = std::fs::remove_file(path);
                }
            }
            None => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    report.outputs = Some(outs);
    report.missing_literals = missing;
}

/// Why `e` is this worker's want of disk (a full disk or quota in what it meets, or its work
/// dir below the floor now), for a farm worker; `None` otherwise.
fn no_disk(
    ctx: &WorkerContext,
    e: &(dyn std::error::Error + 'static),
    doing: &str,
) -> Option<HandBack> {
    ctx.remote.as_ref()?;
    if crate::health::is_disk_full(e) {
        return Some(HandBack::NoDisk(format!("disk full {doing}: {e}")));
    }
    let why = ctx.disk.as_ref()?.check()?;
    Some(HandBack::NoDisk(format!("{why} after {doing} failed: {e}")))
}

/// Turns `report` into a hand-back: the task ran, but nothing of it is a result here.
fn hand_back(report: &mut Finished, why: HandBack) {
    tracing::warn!(attempt = %report.attempt, "handing the assignment back: {}", why.describe());
    let mut back = Finished::handed_back(report.attempt, why);
    back.tries = report.tries;
    back.isolation = std::mem::take(&mut report.isolation);
    *report = back;
}

/// The task's environment: the baseline less the declared names the client left unset (see
/// [`exec::env::compose_env`]), overridden by the task's own values, then by the
/// perturbations of a determinism re-run (only for names the task did not declare).
fn task_env(cfg: &RunnerConfig, a: &Assignment) -> Vec<(String, String)> {
    let mut env = exec::env::compose_env(&cfg.baseline_env, &a.spec.env, &a.spec.unset_env);
    if let Some(p) = &a.perturb {
        for (k, v) in &p.env {
            if a.spec.env.iter().any(|(name, _)| name == k) || a.spec.unset_env.contains(k) {
                continue;
            }
            match env.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v.clone(),
                None => env.push((k.clone(), v.clone())),
            }
        }
    }
    env
}

/// Longest `PATH` an exit explanation quotes.
const MAX_PATH_SHOWN: usize = 400;

/// What the worker adds to an exit code: the `PATH` a command that was not found (127) was
/// looked up in.
fn exit_detail(exit: &ExitKind, env: &[(String, String)]) -> Option<String> {
    if *exit != ExitKind::Code(127) {
        return None;
    }
    let path = env.iter().rev().find(|(k, _)| k == "PATH").map_or("(unset)", |(_, v)| v.as_str());
    let mut shown: String = path.chars().take(MAX_PATH_SHOWN).collect();
    if shown.len() < path.len() {
        shown.push('…');
    }
    Some(format!("PATH was {shown}"))
}

/// The variables that tell a task it runs under prova (never keyed): `PROVA_TASK`
/// (`project#task`), `PROVA_PROJECT`, `PROVA_WORKSPACE` (the root it runs in: the workspace,
/// or its exec root) and `PROVA_RUN_ID` (set by the client in the spec's env; kept as given).
fn set_markers(env: &mut Vec<(String, String)>, a: &Assignment, root: &Path) {
    let markers = [
        ("PROVA_TASK", a.spec.id.to_string()),
        ("PROVA_PROJECT", a.spec.id.project().to_owned()),
        ("PROVA_WORKSPACE", root.display().to_string()),
    ];
    for (k, v) in markers {
        match env.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = v,
            None => env.push((k.to_owned(), v)),
        }
    }
}

/// The environment in reverse name order, as the task sees it. A process's environment is
/// built sorted by name (`exec::spawn::build`), so a re-run that perturbs the order puts
/// `env -i K=V …` (names descending) right before the task's own argv — the last `task_len`
/// words of `argv`, after any sandbox and tracer — which rebuilds it in that order.
fn in_env_order(argv: Vec<String>, task_len: usize, env: &[(String, String)]) -> Vec<String> {
    let mut env = env.to_vec();
    env.sort_by(|a, b| b.0.cmp(&a.0));
    let at = argv.len().saturating_sub(task_len);
    let (wrappers, task) = argv.split_at(at);
    let env_bin = if Path::new("/usr/bin/env").exists() { "/usr/bin/env" } else { "env" };
    let mut out = wrappers.to_vec();
    out.extend([env_bin.to_owned(), "-i".to_owned()]);
    out.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    out.extend_from_slice(task);
    out
}

async fn run_try(
    executor: &Arc<dyn Executor>,
    req: ProcessRequest,
    persistent: bool,
    link: &mpsc::Sender<FromWorker>,
    attempt: prova_protocol::AttemptId,
    mask: &SecretMask,
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
                    Some(mut text) => {
                        mask.apply_vec(&mut text);
                        let _ = link.send(FromWorker::Output { attempt, text }).await;
                    }
                    None => break,
                },
                fired = async { match ready_rx.as_mut() { Some(rx) => rx.await.is_ok(), None => std::future::pending().await } } => {
                    ready_rx = None;
                    while let Ok(mut text) = out_rx.try_recv() {
                        mask.apply_vec(&mut text);
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
        stats: Default::default(),
        log: exec::CapturedLog::default(),
    })
}

/// An empty report for `attempt` (no try made yet).
pub fn refused(attempt: prova_protocol::AttemptId) -> Finished {
    Finished::never_ran(attempt, ExitKind::SpawnFailed(String::new()))
}

#[cfg(test)]
mod env_order_tests {
    use super::in_env_order;

    fn words(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_env_prefix_goes_right_before_the_tasks_own_argv() {
        let env = vec![("A".to_owned(), "x=y".to_owned()), ("Z".to_owned(), "1".to_owned())];
        let wrapped = words(&["bwrap", "--ro-bind", "/", "/", "--", "sh", "-c", "make"]);
        let got = in_env_order(wrapped, 3, &env);
        let env_bin = got[5].clone();
        assert!(env_bin.ends_with("env"), "{got:?}");
        let want = [
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--",
            &env_bin,
            "-i",
            "Z=1",
            "A=x=y",
            "sh",
            "-c",
            "make",
        ];
        assert_eq!(got, words(&want));
    }
}
