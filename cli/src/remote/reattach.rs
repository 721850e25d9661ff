//! A remote run outlives its coordinator's restart (a crash, a rolling upgrade): when the
//! coordinator goes away mid-run, the client keeps its prepared plan, redials for a bounded
//! time (`--reattach-timeout`, with the worker's jittered backoff), uploads what the new one
//! lacks and submits the same run again. What the farm saved before is a hit; what workers
//! still ran is adopted by the new coordinator (`farm/adopt.rs`) and followed, so nothing
//! runs twice. The user sees one run: [`Merge`] drops the repeated events of tasks that had
//! already finished and puts their first reports back into the summary.
//!
//! Not re-attached: a run that does not read the farm cache (`--force`, `--cache` without
//! `r`: re-submitting would run everything again), an interrupted one, or a coordinator that
//! comes back with another cache (its key salt differs: the keys would not be its keys).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use prova_protocol::TaskId;
use prova_protocol::events::{CacheStatus, NoticeLevel, RunEvent, RunSummary, TaskReport};
use prova_protocol::wire::{RemoteTask, RunOptionsWire};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::run::{Judge, RemoteOutcome, submit_merged, upload_missing};
use super::{CoordinatorLost, Session};

/// The events of one run across its sessions: a task's events count once, from the session
/// in which it finished first.
#[derive(Debug, Default)]
pub struct Merge {
    /// The first report of each task that finished, by task, with the session it finished in.
    finished: HashMap<TaskId, (TaskReport, u32)>,
    /// Set when the user interrupted the run (no re-attaching then).
    pub interrupted: bool,
    /// Sessions the run was submitted in.
    pub sessions: u32,
}

impl Merge {
    /// `ev` as the user should see it, or `None` when it repeats what an earlier session
    /// already said of a task that finished there. A task's events after its report in the
    /// same session (its proofs' verdicts) go through.
    pub fn filter(&mut self, ev: RunEvent) -> Option<RunEvent> {
        let task = match &ev {
            RunEvent::TaskStarted { task, .. }
            | RunEvent::Output { task, .. }
            | RunEvent::TaskReady { task }
            | RunEvent::Verdict { task, .. } => task,
            RunEvent::TaskFinished(r) => {
                if self.finished.contains_key(&r.task) {
                    return None;
                }
                self.finished.insert(r.task.clone(), (r.clone(), self.sessions));
                return Some(ev);
            }
            RunEvent::Notice { .. } => return Some(ev),
        };
        let earlier = self.finished.get(task).is_some_and(|(_, s)| *s < self.sessions);
        (!earlier).then_some(ev)
    }

    /// The last session's summary with each task's first report put back (a task saved in
    /// the first session is `saved`, not the `hit` its re-submission found), `ok` recomputed.
    pub fn summary(&self, mut s: RunSummary, wall: Duration) -> RunSummary {
        for r in &mut s.tasks {
            if let Some((first, _)) = self.finished.get(&r.task) {
                *r = first.clone();
            }
        }
        if self.sessions > 1 {
            s.wall_ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
            let tasks_ok =
                s.tasks.iter().all(|t| t.status == prova_protocol::events::TaskStatus::Succeeded);
            let proofs_ok = s.tasks.iter().all(|t| !t.verdicts.iter().any(|v| v.fails()));
            s.ok = tasks_ok && proofs_ok && !s.interrupted;
        }
        s
    }

    /// Tasks the farm reported saved, across sessions.
    pub fn saved(&self) -> usize {
        self.finished.values().filter(|(r, _)| r.cache == CacheStatus::Saved).count()
    }

    /// Tasks finished, across sessions.
    pub fn done(&self) -> usize {
        self.finished.len()
    }
}

/// What a re-submission needs: the run as it was first submitted.
pub struct Resubmit<'a> {
    /// The farm (`--remote`, `--certs`, `--server-name`).
    pub target: &'a super::FarmTarget,
    /// The workspace root (input files are read from it).
    pub root: &'a Path,
    /// The scanned installed trees (their manifests and files are uploaded).
    pub trees: &'a [prova_coordinator::trees::ScannedTree],
    /// `--reattach-timeout`.
    pub window: Duration,
}

/// Submits `tasks` on `session` and brings the run to its end, re-attaching (see the module
/// docs) each time the coordinator goes away, within `re.window` of each loss. `session`
/// is the last one on return (outputs are downloaded through it).
pub async fn submit_reattaching(
    session: &mut Session,
    re: &Resubmit<'_>,
    tasks: Vec<RemoteTask>,
    options: RunOptionsWire,
    events: mpsc::Sender<RunEvent>,
    judge: &mut Judge,
) -> anyhow::Result<RemoteOutcome> {
    let started = Instant::now();
    let mut merge = Merge::default();
    let reads = options.read;
    loop {
        merge.sessions += 1;
        let sent =
            submit_merged(session, tasks.clone(), options.clone(), &events, judge, &mut merge)
                .await;
        let e = match sent {
            Ok(mut outcome) => {
                outcome.summary = merge.summary(outcome.summary, started.elapsed());
                return Ok(outcome);
            }
            Err(e) => session.explain(e),
        };
        let Some(lost) = e.downcast_ref::<CoordinatorLost>() else { return Err(e) };
        let lost = CoordinatorLost { addr: lost.addr.clone(), saved: merge.saved() };
        if merge.interrupted || re.window.is_zero() {
            return Err(lost.into());
        }
        if !reads {
            let message = format!(
                "coordinator {} went away; not re-attaching: this run does not read the farm \
                 cache, so submitting it again would run every task again",
                lost.addr
            );
            notice(&events, NoticeLevel::Warn, message).await;
            return Err(lost.into());
        }
        let message = format!(
            "coordinator {} went away mid-run ({} of {} tasks done); re-attaching for up to {} s",
            lost.addr,
            merge.done(),
            tasks.len(),
            re.window.as_secs()
        );
        notice(&events, NoticeLevel::Warn, message).await;
        let lost_at = Instant::now();
        let Some(next) = redial(re.target, re.window).await else { return Err(lost.into()) };
        if next.key_salt != session.key_salt {
            anyhow::bail!(
                "coordinator {} came back with another cache (its key salt differs): this \
                 run's keys are not its keys; re-run",
                lost.addr
            );
        }
        let old = std::mem::replace(session, next);
        old.conn.close(0u32.into(), b"re-attaching");
        let up = upload_missing(session, re.root, &tasks, re.trees).await?;
        let message = format!(
            "re-attached to {} after {:.1} s ({} input blobs uploaded again); resubmitting: \
             what was saved is a hit, what its workers still run is adopted",
            lost.addr,
            lost_at.elapsed().as_secs_f64(),
            up.blobs
        );
        notice(&events, NoticeLevel::Info, message).await;
    }
}

/// Dials `target` until it answers or `window` passes (each failed dial waits a jittered
/// backoff: 250 ms doubling to 2 s); a second Ctrl-C-free wait, bounded.
async fn redial(target: &super::FarmTarget, window: Duration) -> Option<Session> {
    let deadline = Instant::now() + window;
    let mut backoff = prova_worker::session::Backoff::standard();
    let mut interrupt = Box::pin(crate::local::signal_listener());
    loop {
        match super::connect_to(target).await {
            Ok(s) => return Some(s),
            Err(e) => tracing::debug!("re-attaching: {e:#}"),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_delay().min(left)) => {}
            () = &mut interrupt => return None,
        }
    }
}

async fn notice(events: &mpsc::Sender<RunEvent>, level: NoticeLevel, message: String) {
    let _ = events.send(RunEvent::Notice { task: None, level, message }).await;
}

#[cfg(test)]
mod tests {
    use prova_protocol::events::TaskStatus;
    use prova_protocol::spec::ExecStats;

    use super::*;

    fn report(task: &str, cache: CacheStatus) -> TaskReport {
        TaskReport {
            task: TaskId::parse(task).expect("a task id"),
            status: TaskStatus::Succeeded,
            cache,
            exit: None,
            attempts: 1,
            stats: ExecStats::default(),
            key: None,
            worker: None,
            note: None,
            verdicts: Vec::new(),
        }
    }

    fn hit() -> CacheStatus {
        CacheStatus::Hit { layer: "farm".into(), saved_ms: 0, cutoff: false }
    }

    #[test]
    fn a_task_finished_before_the_loss_is_said_once_and_keeps_its_first_report() {
        let mut m = Merge { sessions: 1, ..Merge::default() };
        let a = TaskId::parse("a#build").expect("id");
        let b = TaskId::parse("b#build").expect("id");
        let started = |task: &TaskId| RunEvent::TaskStarted {
            task: task.clone(),
            attempt: 1,
            worker: prova_protocol::WorkerId("w1".into()),
        };
        assert!(m.filter(started(&a)).is_some());
        assert!(m.filter(RunEvent::TaskFinished(report("a#build", CacheStatus::Saved))).is_some());
        // Its proof's verdict comes after its report, in the same session: it goes through.
        let verdict = |task: &TaskId| RunEvent::Verdict {
            task: task.clone(),
            verdict: prova_protocol::events::Verdict::ProvenComplete,
        };
        assert!(m.filter(verdict(&a)).is_some(), "a verdict after the report is shown");
        assert!(m.filter(started(&b)).is_some());
        // The coordinator went away; the re-submission says it all again.
        m.sessions = 2;
        assert!(m.filter(started(&a)).is_none());
        assert!(m.filter(RunEvent::Output { task: a.clone(), text: b"x".to_vec() }).is_none());
        assert!(m.filter(RunEvent::TaskFinished(report("a#build", hit()))).is_none());
        assert!(m.filter(verdict(&a)).is_none(), "said in the first session");
        // b had not finished: its events go through, once.
        assert!(m.filter(started(&b)).is_some());
        assert!(m.filter(RunEvent::TaskFinished(report("b#build", CacheStatus::Saved))).is_some());
        assert!(m.filter(RunEvent::TaskFinished(report("b#build", CacheStatus::Saved))).is_none());
        let last = RunSummary {
            ok: true,
            interrupted: false,
            wall_ms: 5,
            tasks: vec![report("a#build", hit()), report("b#build", CacheStatus::Saved)],
        };
        let s = m.summary(last, Duration::from_millis(7_000));
        assert_eq!(s.tasks[0].cache, CacheStatus::Saved, "a's first report");
        assert_eq!(s.wall_ms, 7_000, "the whole run's wall time");
        assert!(s.ok);
        assert_eq!((m.saved(), m.done()), (2, 2));
    }
}
