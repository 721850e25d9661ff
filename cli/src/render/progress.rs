//! The live progress line of a run on a terminal (stderr): done/total, hits, failures, the
//! tasks running with their elapsed time, and an ETA from the recorded durations of what is
//! left. It redraws in place (indicatif) and is cleared before the summary; task output
//! streams above it (every write to stdout goes through [`Progress::suspend`]).
//!
//! Never drawn when stderr is not a terminal, with `CI` set, with `--json`, or with
//! `--output plain`-like piping: [`Progress::wanted`] decides, and a hidden bar costs nothing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use prova_protocol::TaskId;
use prova_protocol::events::{CacheStatus, RunEvent, TaskStatus};

/// How often the line redraws while nothing happens (elapsed times move).
const TICK: Duration = Duration::from_millis(200);
/// Running tasks named on the line; more are counted.
const NAMED: usize = 3;

/// What the line shows, shared with the bar's template keys.
#[derive(Default)]
struct State {
    running: Vec<(TaskId, Instant)>,
    hits: usize,
    failed: usize,
    /// Recorded duration (ms) of every task not finished yet, by id.
    left: HashMap<TaskId, u64>,
    concurrency: usize,
}

/// The progress line of one run.
pub struct Progress {
    bar: ProgressBar,
    state: Arc<Mutex<State>>,
}

impl Progress {
    /// Whether a run should draw one: stderr is a terminal, `CI` is not set, not `--json`.
    pub fn wanted(json: bool, stderr_terminal: bool, ci: bool) -> bool {
        !json && stderr_terminal && !ci
    }

    /// A line for `total` tasks (`durations`: recorded milliseconds by task, for the ETA);
    /// hidden unless `shown`.
    pub fn new(
        shown: bool,
        total: usize,
        durations: HashMap<TaskId, u64>,
        concurrency: usize,
    ) -> Self {
        let state = Arc::new(Mutex::new(State {
            left: durations,
            concurrency: concurrency.max(1),
            ..State::default()
        }));
        let target = if shown {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total as u64), target);
        let (running, eta) = (state.clone(), state.clone());
        let style = ProgressStyle::with_template(
            "{spinner} {pos}/{len} done{counts} · {elapsed}{eta}{running}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .with_key("counts", {
            let s = state.clone();
            move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                if let Ok(s) = s.lock() {
                    if s.hits > 0 {
                        let _ = write!(w, " · {} cached", s.hits);
                    }
                    if s.failed > 0 {
                        let _ = write!(w, " · {} failed", s.failed);
                    }
                }
            }
        })
        .with_key("eta", move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
            if let Ok(s) = eta.lock()
                && let Some(ms) = s.eta_ms()
            {
                let _ = write!(w, " · ~{} left", short(Duration::from_millis(ms)));
            }
        })
        .with_key("running", move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
            if let Ok(s) = running.lock() {
                let _ = w.write_str(&s.running_text(Instant::now()));
            }
        });
        bar.set_style(style);
        if shown {
            bar.enable_steady_tick(TICK);
        }
        Self { bar, state }
    }

    /// Runs `f` (a write to the terminal) with the line cleared, then redraws it.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Takes one run event into the line.
    pub fn event(&self, ev: &RunEvent) {
        let Ok(mut s) = self.state.lock() else { return };
        match ev {
            RunEvent::TaskStarted { task, .. } => {
                if !s.running.iter().any(|(t, _)| t == task) {
                    s.running.push((task.clone(), Instant::now()));
                }
            }
            RunEvent::TaskFinished(r) => {
                s.running.retain(|(t, _)| t != &r.task);
                s.left.remove(&r.task);
                if matches!(r.cache, CacheStatus::Hit { .. }) {
                    s.hits += 1;
                }
                if r.status == TaskStatus::Failed {
                    s.failed += 1;
                }
                drop(s);
                self.bar.inc(1);
                return;
            }
            _ => return,
        }
        drop(s);
        self.bar.tick();
    }

    /// Clears the line for good (before the summary).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl State {
    /// `· running a#b 3s, c#d 1s, +2 more`, longest-running first.
    fn running_text(&self, now: Instant) -> String {
        if self.running.is_empty() {
            return String::new();
        }
        let mut by_age: Vec<&(TaskId, Instant)> = self.running.iter().collect();
        by_age.sort_by_key(|(_, since)| *since);
        let mut s = String::from(" · running ");
        for (i, (t, since)) in by_age.iter().take(NAMED).enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{t} {}", short(now.saturating_duration_since(*since)));
        }
        if by_age.len() > NAMED {
            let _ = write!(s, ", +{} more", by_age.len() - NAMED);
        }
        s
    }

    /// What is left by the recorded durations, spread over the concurrency; `None` without
    /// a history.
    fn eta_ms(&self) -> Option<u64> {
        let total: u64 = self.left.values().sum();
        (total > 0).then(|| total / self.concurrency as u64)
    }
}

/// `850ms`, `12s`, `3m05s`.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..=59 => format!("{s}s"),
        _ => format!("{}m{:02}s", s / 60, s % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_list_names_the_oldest_and_counts_the_rest() {
        let now = Instant::now();
        let ago = |ms| now.checked_sub(Duration::from_millis(ms)).unwrap_or(now);
        let mut s = State { concurrency: 2, ..State::default() };
        assert_eq!(s.running_text(now), "");
        for (i, ms) in [1_000u64, 5_000, 200, 70_000, 30].into_iter().enumerate() {
            s.running.push((TaskId::new(&format!("p{i}"), "build"), ago(ms)));
        }
        assert_eq!(
            s.running_text(now),
            " · running p3#build 1m10s, p1#build 5s, p0#build 1s, +2 more"
        );
    }

    #[test]
    fn the_eta_spreads_what_is_left_over_the_slots() {
        let mut s = State { concurrency: 4, ..State::default() };
        assert_eq!(s.eta_ms(), None, "no history, no estimate");
        s.left.insert(TaskId::new("a", "build"), 4_000);
        s.left.insert(TaskId::new("b", "build"), 4_000);
        assert_eq!(s.eta_ms(), Some(2_000));
    }

    #[test]
    fn a_hidden_line_takes_events_and_counts() {
        let p = Progress::new(false, 2, HashMap::new(), 1);
        let task = TaskId::new("a", "build");
        p.event(&RunEvent::TaskStarted {
            task: task.clone(),
            attempt: 1,
            worker: prova_protocol::WorkerId::local(),
        });
        assert_eq!(p.state.lock().map(|s| s.running.len()).unwrap_or(0), 1);
        p.finish();
    }
}
