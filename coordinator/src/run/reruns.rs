//! The determinism proof's bookkeeping, sans-IO: which re-runs are queued and in flight (at
//! most `max_in_flight` at once, none started once interrupted), how many proofs are still
//! outstanding (the run's end waits for them, [`super::core::run_may_end`]), and when a
//! task's final report is held or released so its `TaskFinished` carries every verdict. The
//! actor ([`super::verify`]) hands out the attempts, cancels them and sends the events these
//! answers name. Tested in `reruns_tests.rs`.
//!
//! A re-run may start beside its first execution (an *early* re-run, local mode): both read
//! only the task's declared inputs and its upstreams' artifacts, settled before the first
//! execution starts. Its result is *gated*: held until the first execution's save says the
//! proof is to be made ([`Reruns::confirm`]), dropped when it says not
//! ([`Reruns::withdraw`]: a failure, an execution not saved, no outputs).

use std::collections::{HashMap, VecDeque};

use prova_protocol::AttemptId;
use prova_protocol::events::{TaskReport, Verdict};
use prova_protocol::work::Finished;

use super::core::TaskState;

/// Re-runs queued and in flight, and proofs outstanding.
#[derive(Debug)]
pub(crate) struct Reruns {
    queue: VecDeque<usize>,
    in_flight: Vec<(usize, AttemptId)>,
    max_in_flight: usize,
    /// Re-runs queued or running, and comparisons in progress.
    outstanding: usize,
    /// Early re-runs whose result is not compared yet, by node.
    gates: HashMap<usize, Gate>,
}

/// An early re-run, until its result is compared or dropped.
#[derive(Debug)]
enum Gate {
    /// Not confirmed; no result yet (queued or running).
    Waiting,
    /// Not confirmed; its result is in, held.
    Held(Box<Finished>),
    /// Confirmed; no result yet: it is compared as it comes.
    Open,
    /// Confirmed with its result in: to be taken ([`Reruns::take_confirmed`]).
    Ready(Box<Finished>),
    /// Withdrawn while running: its result is dropped.
    Dropped,
}

/// What becomes of a re-run's result as it arrives ([`Reruns::arrived`]).
#[derive(Debug)]
pub(crate) enum Arrived {
    /// Compare it now (a re-run queued after the save, or a confirmed early one).
    Compare(Box<Finished>),
    /// Held until the first execution's save decides.
    Held,
    /// Its proof was withdrawn: drop it (what it staged is to be discarded).
    Dropped(Box<Finished>),
}

/// What withdrawing an early re-run leaves to do ([`Reruns::withdraw`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Withdrawn {
    /// A running re-run to cancel.
    pub cancel: Option<AttemptId>,
    /// A held result whose staged artifact is to be discarded.
    pub discard: Option<AttemptId>,
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
            gates: HashMap::new(),
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

    /// Queues an early re-run of `node`, beside its first execution: its result is held
    /// until [`Self::confirm`] or [`Self::withdraw`]. `false`: one is already there (the
    /// first execution was handed out again): nothing changed.
    pub(super) fn queue_early(&mut self, node: usize, t: &mut TaskState) -> bool {
        if self.gates.contains_key(&node) {
            return false;
        }
        self.gates.insert(node, Gate::Waiting);
        self.queue(node, t);
        true
    }

    /// The first execution of `node` was saved and its proof is to be made: `true` when an
    /// early re-run is there to make it (nothing more to queue). A result it already
    /// returned is taken with [`Self::take_confirmed`] once the task's report is filed.
    pub(super) fn confirm(&mut self, node: usize) -> bool {
        let Some(gate) = self.gates.remove(&node) else { return false };
        let (confirmed, gate) = match gate {
            Gate::Waiting | Gate::Open => (true, Gate::Open),
            Gate::Held(f) | Gate::Ready(f) => (true, Gate::Ready(f)),
            Gate::Dropped => (false, Gate::Dropped),
        };
        self.gates.insert(node, gate);
        confirmed
    }

    /// A confirmed early re-run's result that came before the confirmation: to compare now.
    pub(super) fn take_confirmed(&mut self, node: usize) -> Option<Box<Finished>> {
        match self.gates.remove(&node)? {
            Gate::Ready(f) => Some(f),
            gate => {
                self.gates.insert(node, gate);
                None
            }
        }
    }

    /// A re-run of `node` returned `f`: compare it, hold it (an early re-run not confirmed
    /// yet) or drop it (withdrawn).
    pub(super) fn arrived(&mut self, node: usize, f: Box<Finished>) -> Arrived {
        self.ended(node, f.attempt);
        match self.gates.remove(&node) {
            None | Some(Gate::Open) => Arrived::Compare(f),
            Some(Gate::Waiting) => {
                self.gates.insert(node, Gate::Held(f));
                Arrived::Held
            }
            Some(Gate::Dropped) => {
                self.outstanding = self.outstanding.saturating_sub(1);
                Arrived::Dropped(f)
            }
            // A second result for one re-run: compared like any other.
            Some(held @ (Gate::Held(_) | Gate::Ready(_))) => {
                self.gates.insert(node, held);
                Arrived::Compare(f)
            }
        }
    }

    /// The first execution of `node` ended without a proof to make (failed, not saved, no
    /// outputs, interrupted), or its early re-run could not be handed out: the early re-run,
    /// if not confirmed, is no longer awaited — a queued one never starts, a running one is
    /// to be cancelled, a held result discarded. `None`: nothing was withdrawn (no early
    /// re-run, or a confirmed one: its proof goes on).
    pub(super) fn withdraw(&mut self, node: usize, t: &mut TaskState) -> Option<Withdrawn> {
        let mut done = Withdrawn::default();
        match self.gates.remove(&node)? {
            Gate::Waiting => {
                if let Some(i) = self.queue.iter().position(|&n| n == node) {
                    self.queue.remove(i);
                } else if let Some(&(_, a)) = self.in_flight.iter().find(|&&(n, _)| n == node) {
                    // Still outstanding until its report comes back ([`Self::arrived`]): the
                    // run ends once what it staged is discarded.
                    done.cancel = Some(a);
                    self.gates.insert(node, Gate::Dropped);
                    t.awaiting = t.awaiting.saturating_sub(1);
                    return Some(done);
                }
            }
            Gate::Held(f) => done.discard = Some(f.attempt),
            gate => {
                // Confirmed (its proof goes on), or already dropped.
                self.gates.insert(node, gate);
                return None;
            }
        }
        self.outstanding = self.outstanding.saturating_sub(1);
        t.awaiting = t.awaiting.saturating_sub(1);
        Some(done)
    }

    /// A withdrawn re-run's cancel could not be sent (the link is gone): its report will
    /// not come; it is no longer outstanding.
    pub(super) fn lost_dropped(&mut self, node: usize, attempt: AttemptId) {
        if matches!(self.gates.get(&node), Some(Gate::Dropped)) {
            self.gates.remove(&node);
            self.ended(node, attempt);
            self.outstanding = self.outstanding.saturating_sub(1);
        }
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
            // An early re-run that will not start: nothing is left to withdraw.
            self.gates.remove(&node);
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
