//! The run's timeline as the client saw it — when each task started and finished, and on
//! which lane (the lowest slot free when it started) — and its Chrome trace (`--profile`:
//! Trace Event Format JSON, one complete `X` event per task, `tid` = lane), for
//! `chrome://tracing` or Perfetto. The timeline also feeds the run history.

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use prova_protocol::TaskId;
use prova_protocol::events::{CacheStatus, RunEvent, TaskStatus};
use serde_json::{Value, json};

/// One task's span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Which task.
    pub task: TaskId,
    /// Microseconds from the run's start to the task's start (a hit: its finish).
    pub start_us: u64,
    /// Microseconds it took, as seen here.
    pub dur_us: u64,
    /// The lane (0-based): no two spans of one lane overlap.
    pub lane: usize,
    /// `succeeded`, `failed`, `skipped`, `aborted`.
    pub status: TaskStatus,
    /// `hit`, `saved`, `not_saved`, `uncached`.
    pub cache: &'static str,
}

/// Spans collected from a run's events.
#[derive(Debug)]
pub struct Timeline {
    origin: Instant,
    /// The wall clock at `origin`.
    pub started_at: SystemTime,
    open: HashMap<TaskId, (u64, usize)>,
    /// Lanes in use.
    busy: Vec<bool>,
    /// Finished spans, in finishing order.
    pub spans: Vec<Span>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

impl Timeline {
    /// A timeline starting now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            started_at: SystemTime::now(),
            open: HashMap::new(),
            busy: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Takes one event, received now.
    pub fn event(&mut self, ev: &RunEvent) {
        let at = self.origin.elapsed().as_micros() as u64;
        self.event_at(at, ev);
    }

    /// Takes one event received `at` µs after the start.
    pub fn event_at(&mut self, at: u64, ev: &RunEvent) {
        match ev {
            RunEvent::TaskStarted { task, .. } if !self.open.contains_key(task) => {
                let lane = self.take_lane();
                self.open.insert(task.clone(), (at, lane));
            }
            RunEvent::TaskFinished(r) => {
                if r.status == TaskStatus::Skipped && !self.open.contains_key(&r.task) {
                    return; // never ran: no span
                }
                let (start, lane) = match self.open.remove(&r.task) {
                    Some(open) => open,
                    None => {
                        let lane = self.take_lane();
                        (at, lane)
                    }
                };
                if let Some(b) = self.busy.get_mut(lane) {
                    *b = false;
                }
                let cache = match r.cache {
                    CacheStatus::Hit { .. } => "hit",
                    CacheStatus::Saved => "saved",
                    CacheStatus::NotSaved { .. } => "not_saved",
                    CacheStatus::Uncached => "uncached",
                };
                self.spans.push(Span {
                    task: r.task.clone(),
                    start_us: start,
                    dur_us: at.saturating_sub(start),
                    lane,
                    status: r.status,
                    cache,
                });
            }
            _ => {}
        }
    }

    fn take_lane(&mut self) -> usize {
        match self.busy.iter().position(|b| !b) {
            Some(i) => {
                self.busy[i] = true;
                i
            }
            None => {
                self.busy.push(true);
                self.busy.len() - 1
            }
        }
    }

    /// The Chrome trace: `{"traceEvents":[…],"displayTimeUnit":"ms"}`, lanes named
    /// `slot N`.
    pub fn chrome_trace(&self, run_id: &str) -> Value {
        let mut events: Vec<Value> = vec![json!({
            "name": "process_name", "ph": "M", "pid": 1, "tid": 0,
            "args": { "name": format!("prova run {run_id}") },
        })];
        for lane in 0..self.busy.len() {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": lane + 1,
                "args": { "name": format!("slot {}", lane + 1) },
            }));
        }
        for s in &self.spans {
            events.push(json!({
                "name": s.task.as_str(),
                "cat": s.cache,
                "ph": "X",
                "ts": s.start_us,
                "dur": s.dur_us,
                "pid": 1,
                "tid": s.lane + 1,
                "args": { "status": s.status, "cache": s.cache },
            }));
        }
        json!({ "traceEvents": events, "displayTimeUnit": "ms" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prova_protocol::WorkerId;
    use prova_protocol::events::TaskReport;
    use prova_protocol::spec::ExecStats;

    fn finished(t: &TaskId, status: TaskStatus, cache: CacheStatus) -> RunEvent {
        RunEvent::TaskFinished(TaskReport {
            task: t.clone(),
            status,
            cache,
            exit: None,
            attempts: 0,
            stats: ExecStats::default(),
            key: None,
            worker: None,
            note: None,
            verdicts: vec![],
        })
    }

    #[test]
    fn overlapping_tasks_get_their_own_lanes_and_a_freed_lane_is_reused() {
        let (a, b, c, h, s) = (
            TaskId::new("a", "t"),
            TaskId::new("b", "t"),
            TaskId::new("c", "t"),
            TaskId::new("h", "t"),
            TaskId::new("s", "t"),
        );
        let start = |t: &TaskId| RunEvent::TaskStarted {
            task: t.clone(),
            attempt: 1,
            worker: WorkerId::local(),
        };
        let mut tl = Timeline::new();
        tl.event_at(0, &start(&a));
        tl.event_at(10, &start(&b));
        tl.event_at(20, &start(&a)); // a retry: the span keeps its first start
        tl.event_at(30, &finished(&a, TaskStatus::Succeeded, CacheStatus::Saved));
        tl.event_at(40, &start(&c));
        tl.event_at(45, &finished(&h, TaskStatus::Succeeded, CacheStatus::Uncached));
        tl.event_at(50, &finished(&b, TaskStatus::Failed, CacheStatus::Uncached));
        tl.event_at(60, &finished(&c, TaskStatus::Succeeded, CacheStatus::Saved));
        tl.event_at(70, &finished(&s, TaskStatus::Skipped, CacheStatus::Uncached));
        let got: Vec<(&str, u64, u64, usize)> =
            tl.spans.iter().map(|s| (s.task.as_str(), s.start_us, s.dur_us, s.lane)).collect();
        assert_eq!(
            got,
            [("a#t", 0, 30, 0), ("h#t", 45, 0, 2), ("b#t", 10, 40, 1), ("c#t", 40, 20, 0)]
        );
        let trace = tl.chrome_trace("r1");
        let spans: Vec<&Value> = trace["traceEvents"]
            .as_array()
            .map(|a| a.iter().filter(|e| e["ph"] == "X").collect())
            .unwrap_or_default();
        assert_eq!(spans.len(), 4, "one span per task that ran; the skipped one has none");
    }
}
