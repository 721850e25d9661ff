//! One assignment from start to `Finished`: where it runs (in place, or an exec root built
//! from its declared inputs and upstream artifacts, sandboxed when the worker can), the
//! command line and environment, the tries (cleaning declared outputs before each), output
//! and readiness streamed to the link, then the outputs of a success collected,
//! fingerprinted, packed (and uploaded by a farm worker).
//!
//! [`run_assignment`] walks the stages of `stages`, each a type that owns its inputs and
//! yields the next, so their order is the types' and each can be tested alone
//! (`stages_tests`): [`Checked`] → [`Placed`] → [`Wrapped`] → [`Executed`] → [`Collected`]
//! → [`Finished`]. `tries` runs the tries; `collect` gathers what a run leaves.

mod collect;
mod stages;
#[cfg(test)]
mod stages_tests;
mod tries;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::spec::ExitKind;
use prova_protocol::work::{Assignment, Finished, FromWorker, HandBack, Placement};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use self::stages::{Checked, Collected, Executed, Placed, Stop, Wrapped};
use crate::blobcache::BlobCache;
use crate::exec::{self, Executor};
use crate::remote::RemoteBlobs;

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
    /// strace is available for `trace_reads`, and where it runs beside a sandbox.
    pub strace: Option<crate::sandbox::Tracer>,
    /// A farm worker's work dir against its disk floor (`crate::health`).
    pub disk: Option<Arc<crate::health::DiskHealth>>,
    /// Directories a sandbox never shows even when the task's `PATH` names them or a
    /// directory inside them (local mode: the workspace and the cache;
    /// `crate::sandbox::bwrap::path_dirs`). The work dir is never shown either.
    pub sandbox_hidden: Vec<PathBuf>,
    /// The tmpfs first executions' exec roots go on while it has room
    /// (`crate::shmroots::TmpfsRoots`): a local proof's, a farm worker's unless
    /// `--exec-roots work-dir`. A farm task that ran it short is handed back, and the worker's
    /// roots stay in its work dir from then on (`runner::tries`).
    pub tmpfs_roots: Option<Arc<crate::shmroots::TmpfsRoots>>,
    /// A farm worker without a sandbox: its watched copies of installed trees, which its
    /// roots mirror (`crate::treecopies`).
    pub tree_copies: Option<Arc<crate::treecopies::TreeCopies>>,
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
            strace: None,
            sandbox_hidden: Vec::new(),
            tmpfs_roots: None,
            tree_copies: None,
        }
    }
}

/// Runs `a` to completion, reporting `Started`/`Output`/`Ready` on `link`; returns the
/// `Finished` report (the caller sends it, so it can order it after its own bookkeeping).
/// The stages, in order: [`Checked`] → [`Placed`] → [`Wrapped`] → [`Executed`] →
/// [`Collected`]; a stage that ends the assignment yields its report instead.
pub async fn run_assignment(
    a: Assignment,
    ctx: &WorkerContext,
    link: mpsc::Sender<FromWorker>,
    cancel: CancellationToken,
) -> Finished {
    let task = a.spec.id.clone();
    let run = async {
        let t0 = std::time::Instant::now();
        let checked = Checked::check(a, ctx, &cancel).await?;
        let placed = checked.place(ctx).await?;
        let wrapped = placed.wrap(ctx);
        let t1 = std::time::Instant::now();
        let executed = wrapped.execute(ctx, &link, &cancel).await?;
        let t2 = std::time::Instant::now();
        let done = executed.collect(ctx).await.finish();
        // Where an assignment's time went (placing covers the exec root; running, the
        // task's tries and what a traced run read; collecting, outputs and the root's end).
        tracing::debug!(%task, placing = ?t1 - t0, running = ?t2 - t1, collecting = ?t2.elapsed(),
            "assignment done");
        Ok::<_, Stop>(done)
    };
    run.await.unwrap_or_else(|stop| *stop)
}

/// The files an in-place clean must not delete (none in an exec root: it holds no sources).
fn protected(placement: &Placement) -> &[prova_protocol::work::ProtectedPath] {
    match placement {
        Placement::InPlace { protected, .. } => protected,
        Placement::ExecRoot { .. } => &[],
    }
}

/// `rel` (workspace-relative, `""`: the root) under `root`.
pub(crate) fn join(root: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() { root.to_owned() } else { root.join(rel) }
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
