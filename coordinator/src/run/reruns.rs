//! The determinism proof's bookkeeping, sans-IO: which re-runs are queued and in flight (at
//! most `max_in_flight` at once, none started once interrupted), how many proofs are still
//! outstanding (the run's end waits for them, [`super::core::run_may_end`]), and when a
//! task's final report is held or released so its `TaskFinished` carries every verdict. The
//! actor ([`super::verify`]) hands out the attempts, cancels them and sends the events these
//! answers name. Tested in `reruns_tests.rs`.

use std::collections::VecDeque;

use prova_protocol::AttemptId;
use prova_protocol::events::{TaskReport, Verdict};

use super::core::TaskState;

/// Re-runs queued and in flight, and proofs outstanding.
#[derive(Debug)]
pub(crate) struct Reruns {
    queue: VecDeque<usize>,
    in_flight: Vec<(usize, AttemptId)>,
    max_in_flight: usize,
    /// Re-runs queued or running, and comparisons in progress.
    outstanding: usize,
}

/// What a concluded proof makes the actor announce.
#[derive(Clone, Debug)]
pub(crate) enum Announce {
    /// The task's held report is complete: send `TaskFinished` and its verdicts.
    Report(TaskReport),
    /// The report was already sent: send the verdict on its own.
    Verdict(Verdict),
    /// Held, and other proofs about the task are still to conclude.
    Nothing,
}

impl Reruns {
    /// No re-runs; at most `max_in_flight` (at least 1) at once.
    pub(super) fn new(max_in_flight: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            in_flight: Vec::new(),
            max_in_flight: max_in_flight.max(1),
            outstanding: 0,
        }
    }

    /// Proofs still to conclude.
    pub(super) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Queues a re-run of the task `node` (whose state is `t`): a proof about it is now
    /// awaited.
    pub(super) fn queue(&mut self, node: usize, t: &mut TaskState) {
        self.queue.push_back(node);
        self.outstanding += 1;
        t.awaiting += 1;
    }

    /// The next queued re-run to hand out, while there is room and the run goes on.
    pub(super) fn next(&mut self, interrupted: bool) -> Option<usize> {
        if interrupted || self.in_flight.len() >= self.max_in_flight {
            return None;
        }
        self.queue.pop_front()
    }

    /// The re-run of `node` was handed out as `attempt`.
    pub(super) fn started(&mut self, node: usize, attempt: AttemptId) {
        self.in_flight.push((node, attempt));
    }

    /// The re-run `attempt` of `node` ended (its comparison may still be running).
    pub(super) fn ended(&mut self, node: usize, attempt: AttemptId) {
        self.in_flight.retain(|&(n, a)| !(n == node && a == attempt));
    }

    /// A proof about the task concluded with `verdict`: it joins the task's report; the
    /// answer says what to announce.
    pub(super) fn conclude(&mut self, t: &mut TaskState, verdict: Verdict) -> Announce {
        if let Some(r) = &mut t.report {
            r.verdicts.push(verdict.clone());
        }
        t.awaiting = t.awaiting.saturating_sub(1);
        self.outstanding = self.outstanding.saturating_sub(1);
        if t.held {
            release(t).map_or(Announce::Nothing, Announce::Report)
        } else {
            Announce::Verdict(verdict)
        }
    }

    /// The run was interrupted: queued re-runs will not start (the nodes whose reports that
    /// frees, to release), running ones are to be cancelled (their attempts).
    pub(super) fn interrupt(&mut self, state: &mut [TaskState]) -> (Vec<usize>, Vec<AttemptId>) {
        let queued: Vec<usize> = self.queue.drain(..).collect();
        self.outstanding = self.outstanding.saturating_sub(queued.len());
        for &node in &queued {
            state[node].awaiting = state[node].awaiting.saturating_sub(1);
        }
        (queued, self.in_flight.iter().map(|&(_, a)| a).collect())
    }
}

/// Whether the task's final report must wait for its proofs (then it is held: `true`);
/// `false`: send it now.
pub(crate) fn hold_report(t: &mut TaskState) -> bool {
    if t.awaiting > 0 {
        t.held = true;
        return true;
    }
    false
}

/// The held report, once nothing about the task is still to conclude (it is released once).
pub(crate) fn release(t: &mut TaskState) -> Option<TaskReport> {
    if t.awaiting == 0 && std::mem::take(&mut t.held) { t.report.clone() } else { None }
}

/// Every report still held, in node order (the run ends, interrupted, with proofs
/// unfinished): nothing is awaited any more.
pub(crate) fn release_all(state: &mut [TaskState]) -> Vec<TaskReport> {
    state
        .iter_mut()
        .filter_map(|t| {
            t.awaiting = 0;
            release(t)
        })
        .collect()
}

#[cfg(test)]
#[path = "reruns_tests.rs"]
mod reruns_tests;
