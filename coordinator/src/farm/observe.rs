//! What an operator sees of the farm's runs: counters and a bounded book of live and recent
//! runs and their proof failures, fed by the `run->client` relay in `client_session.rs`
//! (every `RunEvent`, then the summary) and read by the HTTP listener (`crate::http`).
//! Nothing here decides anything; the runs' state machines and the farm core do.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prova_protocol::RunId;
use prova_protocol::events::{CacheStatus, RunEvent, RunSummary, TaskReport, TaskStatus, Verdict};
use serde::Serialize;

/// Recent runs kept (live runs are always kept).
pub const RECENT_RUNS: usize = 200;
/// Tasks kept per run for its view.
pub const TASKS_PER_RUN: usize = 1000;
/// Proof failures kept.
pub const PROOFS_KEPT: usize = 200;
/// Upper bounds (seconds) of the task duration histogram's buckets.
pub const DURATION_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 1800.0];

/// Counters since the coordinator started.
#[derive(Debug, Default)]
pub struct Counters {
    /// Tasks finished, by status (`succeeded`, `failed`, `skipped`, `aborted`).
    pub tasks: Mutex<BTreeMap<&'static str, u64>>,
    /// Cache lookups by (tier, `hit` | `miss`).
    pub cache: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// Verdicts by kind (`proven-deterministic`, `nondeterministic`, …).
    pub verdicts: Mutex<BTreeMap<String, u64>>,
    /// Executed tasks' durations: counts per bucket of [`DURATION_BUCKETS`] (+Inf last).
    pub durations: Mutex<([u64; DURATION_BUCKETS.len() + 1], f64)>,
    /// Runs started and finished.
    pub runs_started: AtomicU64,
    /// Runs finished.
    pub runs_finished: AtomicU64,
    /// Blob bytes received from peers (uploads, worker outputs).
    pub bytes_in: AtomicU64,
    /// Blob bytes sent to peers.
    pub bytes_out: AtomicU64,
}

/// One task of a run's view.
#[derive(Clone, Debug, Serialize)]
pub struct TaskRow {
    /// `project#task`.
    pub task: String,
    /// `succeeded`, `failed`, …
    pub status: &'static str,
    /// `hit`, `saved`, `not-saved`, `uncached`.
    pub cache: &'static str,
    /// The worker of its last attempt.
    pub worker: Option<String>,
    /// Wall milliseconds of its last attempt.
    pub ms: u64,
    /// When it started, milliseconds after its run did (its finish less its wall time).
    pub start_ms: u64,
}

/// One run, live or recent.
#[derive(Clone, Debug, Serialize)]
pub struct RunRow {
    /// Its id.
    pub id: u64,
    /// The certificate that submitted it.
    pub who: String,
    /// Its tier (`trusted`, `untrusted/<name>`).
    pub namespace: String,
    /// Unix ms at submission.
    pub started_ms: u64,
    /// Tasks in the run.
    pub total: usize,
    /// Tasks finished so far.
    pub done: usize,
    /// Cache hits.
    pub hits: usize,
    /// Failed tasks.
    pub failures: usize,
    /// Verdicts by kind.
    pub verdicts: BTreeMap<String, u64>,
    /// Still going.
    pub live: bool,
    /// Every task succeeded and every proof held (when finished).
    pub ok: Option<bool>,
    /// Wall milliseconds (when finished).
    pub wall_ms: Option<u64>,
    /// Finished tasks (the first [`TASKS_PER_RUN`]).
    pub tasks: Vec<TaskRow>,
}

/// A failed proof: a key whose executions disagree, with the files.
#[derive(Clone, Debug, Serialize)]
pub struct ProofRow {
    /// The run it was seen in.
    pub run: u64,
    /// `project#task`.
    pub task: String,
    /// The verdict's kind.
    pub verdict: String,
    /// The task's key, hex.
    pub key: Option<String>,
    /// Files that differ (changed, added, removed), bounded by the verdict.
    pub files: Vec<String>,
}

/// The observer: shared by every client session and the HTTP listener.
#[derive(Debug)]
pub struct Observer {
    started: Instant,
    /// The counters.
    pub counters: Counters,
    runs: Mutex<VecDeque<RunRow>>,
    proofs: Mutex<VecDeque<ProofRow>>,
}

impl Default for Observer {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            counters: Counters::default(),
            runs: Mutex::new(VecDeque::new()),
            proofs: Mutex::new(VecDeque::new()),
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A verdict's kind, as its `--json` tag spells it.
pub fn verdict_kind(v: &Verdict) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|j| j.get("verdict").and_then(|k| k.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn status_name(s: &TaskStatus) -> &'static str {
    match s {
        TaskStatus::Succeeded => "succeeded",
        TaskStatus::Failed => "failed",
        TaskStatus::Skipped => "skipped",
        TaskStatus::Aborted => "aborted",
    }
}

fn cache_name(c: &CacheStatus) -> &'static str {
    match c {
        CacheStatus::Hit { .. } => "hit",
        CacheStatus::Saved => "saved",
        CacheStatus::NotSaved { .. } => "not-saved",
        CacheStatus::Uncached => "uncached",
    }
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, k: K, by: u64) {
    if let Ok(mut m) = map.lock() {
        *m.entry(k).or_default() += by;
    }
}

impl Observer {
    /// Cache hits and misses of finished tasks since the start, every tier.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        let Ok(m) = self.counters.cache.lock() else { return (0, 0) };
        m.iter().fold((0, 0), |(h, x), ((_, result), n)| match *result {
            "hit" => (h + n, x),
            _ => (h, x + n),
        })
    }

    /// Cache lookups of finished tasks by tier: `(tier, hits, misses)`, in tier order.
    pub fn lookups_by_tier(&self) -> Vec<(String, u64, u64)> {
        let Ok(m) = self.counters.cache.lock() else { return Vec::new() };
        let mut out: Vec<(String, u64, u64)> = Vec::new();
        for ((tier, result), n) in m.iter() {
            if out.last().is_none_or(|l| &l.0 != tier) {
                out.push((tier.clone(), 0, 0));
            }
            if let Some(l) = out.last_mut() {
                if *result == "hit" { l.1 += n } else { l.2 += n }
            }
        }
        out
    }

    /// Seconds since the coordinator started.
    pub fn uptime_secs(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// A run was accepted.
    pub fn run_started(&self, run: RunId, who: &str, namespace: &str, total: usize) {
        self.counters.runs_started.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%run, client = who, tasks = total, namespace, "run started");
        let row = RunRow {
            id: run.0,
            who: who.to_owned(),
            namespace: if namespace.is_empty() { "trusted".into() } else { namespace.into() },
            started_ms: now_ms(),
            total,
            done: 0,
            hits: 0,
            failures: 0,
            verdicts: BTreeMap::new(),
            live: true,
            ok: None,
            wall_ms: None,
            tasks: Vec::new(),
        };
        if let Ok(mut runs) = self.runs.lock() {
            runs.push_front(row);
        }
    }

    /// One of a run's events.
    pub fn event(&self, run: RunId, ev: &RunEvent) {
        let RunEvent::TaskFinished(report) = ev else { return };
        self.task_finished(run, report);
    }

    fn task_finished(&self, run: RunId, r: &TaskReport) {
        let c = &self.counters;
        bump(&c.tasks, status_name(&r.status), 1);
        let tier = self.tier_of(run);
        match &r.cache {
            CacheStatus::Hit { .. } => bump(&c.cache, (tier, "hit"), 1),
            CacheStatus::Saved | CacheStatus::NotSaved { .. } => bump(&c.cache, (tier, "miss"), 1),
            CacheStatus::Uncached => {}
        }
        if r.attempts > 0
            && let Ok(mut d) = c.durations.lock()
        {
            let secs = r.stats.wall_ms as f64 / 1000.0;
            let i =
                DURATION_BUCKETS.iter().position(|b| secs <= *b).unwrap_or(DURATION_BUCKETS.len());
            d.0[i] += 1;
            d.1 += secs;
        }
        for v in &r.verdicts {
            let kind = verdict_kind(v);
            bump(&c.verdicts, kind.clone(), 1);
            if let Verdict::Nondeterministic(d) | Verdict::AllowedNondeterministic(d) = v {
                let files = d.changed.iter().chain(&d.added).chain(&d.removed).cloned().collect();
                self.proof(ProofRow {
                    run: run.0,
                    task: r.task.to_string(),
                    verdict: kind.clone(),
                    key: r.key.map(|k| k.to_hex()),
                    files,
                });
            }
        }
        let Ok(mut runs) = self.runs.lock() else { return };
        let Some(row) = runs.iter_mut().find(|x| x.id == run.0) else { return };
        row.done += 1;
        row.hits += usize::from(matches!(r.cache, CacheStatus::Hit { .. }));
        row.failures += usize::from(r.status == TaskStatus::Failed);
        for v in &r.verdicts {
            *row.verdicts.entry(verdict_kind(v)).or_default() += 1;
        }
        if row.tasks.len() < TASKS_PER_RUN {
            let end = now_ms().saturating_sub(row.started_ms);
            row.tasks.push(TaskRow {
                start_ms: end.saturating_sub(r.stats.wall_ms),
                task: r.task.to_string(),
                status: status_name(&r.status),
                cache: cache_name(&r.cache),
                worker: r.worker.as_ref().map(ToString::to_string),
                ms: r.stats.wall_ms,
            });
        }
    }

    fn proof(&self, p: ProofRow) {
        if let Ok(mut proofs) = self.proofs.lock() {
            proofs.push_front(p);
            proofs.truncate(PROOFS_KEPT);
        }
    }

    fn tier_of(&self, run: RunId) -> String {
        self.runs
            .lock()
            .ok()
            .and_then(|r| r.iter().find(|x| x.id == run.0).map(|x| x.namespace.clone()))
            .map_or_else(
                || "trusted".to_owned(),
                |ns| ns.split('/').next().unwrap_or("").to_owned(),
            )
    }

    /// A run ended with `summary` (`None`: it stopped without one).
    pub fn run_finished(&self, run: RunId, summary: Option<&RunSummary>) {
        self.counters.runs_finished.fetch_add(1, Ordering::Relaxed);
        let Ok(mut runs) = self.runs.lock() else { return };
        let Some(row) = runs.iter_mut().find(|x| x.id == run.0) else { return };
        row.live = false;
        row.ok = summary.map(|s| s.ok);
        row.wall_ms = summary.map(|s| s.wall_ms);
        tracing::info!(
            %run,
            tasks = row.total,
            done = row.done,
            hits = row.hits,
            failed = row.failures,
            ok = ?row.ok,
            wall_ms = ?row.wall_ms,
            "run finished"
        );
        // Drop the oldest finished runs beyond the bound; live ones stay.
        while runs.iter().filter(|r| !r.live).count() > RECENT_RUNS {
            match runs.iter().rposition(|r| !r.live) {
                Some(i) => drop(runs.remove(i)),
                None => break,
            }
        }
    }

    /// Runs in the book, and of those the live ones.
    pub fn book_size(&self) -> (usize, usize) {
        self.runs.lock().map(|r| (r.len(), r.iter().filter(|x| x.live).count())).unwrap_or((0, 0))
    }

    /// Live and recent runs, newest first.
    pub fn runs(&self) -> Vec<RunRow> {
        self.runs.lock().map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }

    /// Proof failures seen, newest first.
    pub fn proofs(&self) -> Vec<ProofRow> {
        self.proofs.lock().map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prova_protocol::TaskId;
    use prova_protocol::spec::ExecStats;

    fn report(task: &str, cache: CacheStatus, status: TaskStatus) -> TaskReport {
        TaskReport {
            task: TaskId::new("p", task),
            status,
            cache,
            exit: None,
            attempts: 1,
            stats: ExecStats { wall_ms: 20, ..ExecStats::default() },
            key: None,
            worker: None,
            note: None,
            verdicts: Vec::new(),
        }
    }

    #[test]
    fn finished_runs_are_bounded_and_live_ones_kept() {
        let o = Observer::default();
        o.run_started(RunId(0), "ci a", "", 1);
        for i in 1..=(RECENT_RUNS as u64 + 50) {
            o.run_started(RunId(i), "ci a", "", 1);
            o.run_finished(RunId(i), None);
        }
        let runs = o.runs();
        assert_eq!(runs.iter().filter(|r| !r.live).count(), RECENT_RUNS);
        assert!(runs.iter().any(|r| r.id == 0 && r.live), "the live run stays");
        assert_eq!(runs[0].id, RECENT_RUNS as u64 + 50, "newest first");
    }

    #[test]
    fn a_runs_tasks_are_capped_and_counted_by_tier() {
        let o = Observer::default();
        o.run_started(RunId(1), "client bob", "untrusted/bob", TASKS_PER_RUN + 10);
        for i in 0..TASKS_PER_RUN + 10 {
            let r = report(&format!("t{i}"), CacheStatus::Saved, TaskStatus::Succeeded);
            o.event(RunId(1), &RunEvent::TaskFinished(r));
        }
        let hit = CacheStatus::Hit { layer: "farm".into(), saved_ms: 1, cutoff: false };
        o.event(RunId(1), &RunEvent::TaskFinished(report("h", hit, TaskStatus::Succeeded)));
        let row = &o.runs()[0];
        assert_eq!((row.done, row.hits, row.tasks.len()), (TASKS_PER_RUN + 11, 1, TASKS_PER_RUN));
        let cache = o.counters.cache.lock().unwrap().clone();
        assert_eq!(
            cache.get(&("untrusted".to_owned(), "miss")),
            Some(&(TASKS_PER_RUN as u64 + 10))
        );
        assert_eq!(cache.get(&("untrusted".to_owned(), "hit")), Some(&1));
        assert_eq!(cache.get(&("trusted".to_owned(), "hit")), None);
        assert_eq!(o.hits_and_misses(), (1, TASKS_PER_RUN as u64 + 10), "farm status's hit rate");
        assert_eq!(
            o.lookups_by_tier(),
            vec![("untrusted".to_owned(), 1, TASKS_PER_RUN as u64 + 10)],
            "the dashboard's per-tier table"
        );
    }
}
