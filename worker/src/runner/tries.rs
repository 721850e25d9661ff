//! A task's tries (cleaning declared outputs before each), output and readiness streamed to
//! the link as they come, and a farm worker's disk judged when a try fails.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::globs::PathGlobs;
use prova_protocol::spec::ExitKind;
use prova_protocol::work::{Assignment, Finished, FromWorker, HandBack};
use regex::Regex;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::stages::Stop;
use super::{WorkerContext, hand_back, protected};
use crate::exec::{self, Executor, ProcessIo, ProcessRequest};
use crate::mask::SecretMask;
use crate::outputs;

/// Bound on output chunks in flight between the executor and the link.
const OUTPUT_QUEUE: usize = 64;

/// What every try of one assignment runs with.
pub(super) struct Tries<'a> {
    pub a: &'a Assignment,
    pub globs: &'a PathGlobs,
    pub root: &'a Path,
    pub cwd: &'a Path,
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    pub ready: &'a Option<Regex>,
    pub mask: &'a SecretMask,
}

impl Tries<'_> {
    /// Runs the tries into `report` (exit, tries, stats, masked log) until one succeeds, is
    /// aborted or cancelled, or none is left. A clean that fails ends the assignment, and so
    /// does a farm worker's failed task while its work dir was short of disk (a hand-back).
    pub(super) async fn run(
        &self,
        ctx: &WorkerContext,
        link: &mpsc::Sender<FromWorker>,
        cancel: &CancellationToken,
        mut report: Finished,
    ) -> Result<Finished, Stop> {
        let a = self.a;
        let attempt = a.attempt;
        // The work dir's lowest free space while the task runs (a farm worker's): a task
        // whose writes met ENOSPC may have removed them before it exited.
        let watch = ctx.disk.as_ref().filter(|_| ctx.remote.is_some()).map(|d| d.watch());
        // The same of the tmpfs holding a farm task's exec root (a first execution's).
        let tmpfs = ctx
            .tmpfs_roots
            .as_ref()
            .filter(|t| ctx.remote.is_some() && a.perturb.is_none() && t.holds(self.root));
        let tmpfs_watch = tmpfs.map(|t| t.health().watch());
        let max_tries = 1 + if a.spec.persistent { 0 } else { a.spec.retries };
        for try_no in 1..=max_tries {
            if a.clean_outputs
                && !self.globs.is_empty()
                && let Err(e) = outputs::clean(self.root, self.globs, protected(&a.placement))
            {
                report.exit = ExitKind::SpawnFailed(format!("could not clean outputs: {e}"));
                return Err(Box::new(report));
            }
            report.tries = try_no;
            let _ = link.send(FromWorker::Started { attempt, try_no }).await;
            let req = ProcessRequest {
                argv: self.argv.to_vec(),
                cwd: self.cwd.to_owned(),
                env: self.env.to_vec(),
                umask: a.perturb.as_ref().and_then(|p| p.umask),
                timeout: a.spec.timeout_ms.map(Duration::from_millis),
                kill_grace: ctx.config.kill_grace,
                log_limit: ctx.config.log_limit,
                ready: if a.spec.persistent { self.ready.clone() } else { None },
            };
            let result = run_try(
                &ctx.executor,
                req,
                a.spec.persistent,
                link,
                attempt,
                self.mask,
                cancel.clone(),
            )
            .await;
            report.exit = result.exit;
            report.stats = result.stats;
            report.log = result.log.bytes;
            self.mask.apply_vec(&mut report.log);
            report.log_omitted = result.log.omitted;
            if report.exit.success()
                || matches!(report.exit, ExitKind::Aborted)
                || cancel.is_cancelled()
            {
                break;
            }
        }
        // A task that failed while the work dir was below its floor — at its end, or at any
        // moment while it ran (its writes met ENOSPC, most likely) — failed for want of disk
        // here, not of its own: it runs again elsewhere.
        let failed = !report.exit.success()
            && !matches!(report.exit, ExitKind::Aborted)
            && !cancel.is_cancelled();
        if failed
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
            return Err(Box::new(report));
        }
        // The same of the tmpfs its root is on; the worker's roots leave it for good.
        if failed
            && let Some(t) = tmpfs
            && let Some(why) =
                t.health().check().or_else(|| tmpfs_watch.as_ref().and_then(|w| w.dipped()))
        {
            t.give_up(&why);
            let why =
                format!("the tmpfs holding its exec root ran short while the task ran ({why})");
            hand_back(&mut report, HandBack::NoDisk(why));
            return Err(Box::new(report));
        }
        Ok(report)
    }
}

/// One try: the process run, its output (masked) and readiness forwarded to the link in the
/// order they came.
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
