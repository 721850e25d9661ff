//! The scheduler's sans-IO core: which task may start next. It holds the ready set (a heap
//! ordered by longest remaining path), the in-flight set and the `-j` bound, and turns
//! `(now, event)` into commands. No sockets, clocks, actors or processes in here — the
//! run's shell ([`crate::run::shell`], driven by the run actor in local mode and by the farm actor on a farm coordinator) carries them out,
//! and the simulation tests below drive it with a fake clock.

use std::collections::BinaryHeap;
use std::time::Duration;

/// Index of a node in the scheduled graph.
pub type Node = usize;

/// The shape the scheduler needs of a task graph.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// `deps[n]`: the nodes `n` waits for.
    pub deps: Vec<Vec<Node>>,
    /// Estimated duration of each node, in milliseconds (recorded history, or 1).
    pub weight: Vec<u64>,
    /// Persistent nodes (dev servers): they take no slot, unblock dependents when ready, and
    /// are stopped once every other node is done and each of their dependents is final.
    pub persistent: Vec<bool>,
}

impl Plan {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.deps.len()
    }

    /// Whether the plan has no nodes.
    pub fn is_empty(&self) -> bool {
        self.deps.is_empty()
    }
}

/// Knobs of one run.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Upper bound on nodes in flight (`-j`). Persistent nodes count until they are ready.
    pub concurrency: usize,
    /// Keep scheduling independent work after a failure (`--continue`).
    pub continue_on_failure: bool,
}

/// Something that happened, fed to [`Scheduler::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The run starts.
    Start,
    /// A dispatched node reached a final state (including a stopped persistent node).
    Finished {
        /// Which node.
        node: Node,
        /// Whether it succeeded (a cache hit is a success).
        ok: bool,
    },
    /// A persistent node is ready: its dependents may start.
    Ready {
        /// Which node.
        node: Node,
    },
    /// Ctrl-C / SIGTERM / the client went away: stop everything.
    Interrupt,
}

/// Why a node will not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// This dependency failed (directly or transitively).
    DependencyFailed(Node),
    /// Scheduling stopped after a failure (no `--continue`).
    RunStopped,
    /// The run was interrupted before it started.
    Interrupted,
}

/// What the driver must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Start the node (the driver checks the cache and/or hands it to a worker).
    Dispatch(Node),
    /// The node will not run; report it skipped.
    Skip(Node, SkipReason),
    /// Kill the in-flight node (interrupt): it must still report `Finished`.
    Abort(Node),
    /// Stop this persistent node: everything else is done. It reports `Finished` after.
    StopPersistent(Node),
    /// Every node is final; the run is over.
    Done {
        /// Whether every node succeeded.
        ok: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    Queued,
    Running,
    /// A persistent node that is ready: counts as done for dependents, still alive.
    Serving,
    Stopping,
    Succeeded,
    Failed,
    Skipped,
}

impl State {
    fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Skipped)
    }
}

/// The scheduler of one run.
#[derive(Debug)]
pub struct Scheduler {
    plan_deps: Vec<Vec<Node>>,
    dependents: Vec<Vec<Node>>,
    persistent: Vec<bool>,
    /// Longest remaining path from each node to the end of the graph (its own weight
    /// included): the critical-path priority.
    priority: Vec<u64>,
    unmet: Vec<usize>,
    state: Vec<State>,
    ready: BinaryHeap<(u64, std::cmp::Reverse<Node>)>,
    /// Persistent nodes whose dependencies are met: they take no slot (a dev server would
    /// hold one for ever; `-j 1` with two servers could never start the second), so they
    /// are dispatched at once, beside the regular work.
    ready_persistent: Vec<Node>,
    opts: Options,
    in_flight: usize,
    /// Nodes not yet final, persistent ones excluded.
    open_regular: usize,
    stopped: bool,
    failed: bool,
    done: bool,
    started_at: Vec<Option<Duration>>,
    finished_at: Vec<Option<Duration>>,
}

impl Scheduler {
    /// A scheduler for `plan`. The plan must be acyclic (the graph module guarantees it).
    pub fn new(plan: &Plan, opts: Options) -> Self {
        let n = plan.len();
        let mut dependents = vec![Vec::new(); n];
        for (node, deps) in plan.deps.iter().enumerate() {
            for &d in deps {
                dependents[d].push(node);
            }
        }
        let priority = longest_paths(plan, &dependents);
        let unmet = plan.deps.iter().map(Vec::len).collect();
        let persistent: Vec<bool> =
            (0..n).map(|i| plan.persistent.get(i).copied().unwrap_or(false)).collect();
        let open_regular = persistent.iter().filter(|p| !**p).count();
        Self {
            plan_deps: plan.deps.clone(),
            dependents,
            persistent,
            priority,
            unmet,
            state: vec![State::Waiting; n],
            ready: BinaryHeap::new(),
            ready_persistent: Vec::new(),
            opts: Options { concurrency: opts.concurrency.max(1), ..opts },
            in_flight: 0,
            open_regular,
            stopped: false,
            failed: false,
            done: false,
            started_at: vec![None; n],
            finished_at: vec![None; n],
        }
    }

    /// The critical-path priority of a node (higher runs first).
    pub fn priority(&self, node: Node) -> u64 {
        self.priority[node]
    }

    /// Regular nodes currently in flight (dispatched, not final; persistent ones take no slot).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// When a node was dispatched and when it finished, in run time.
    pub fn times(&self, node: Node) -> (Option<Duration>, Option<Duration>) {
        (self.started_at[node], self.finished_at[node])
    }

    /// Whether the run is over.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds one event; returns what to do, in order.
    pub fn handle(&mut self, now: Duration, event: Event) -> Vec<Command> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match event {
            Event::Start => {
                for node in 0..self.state.len() {
                    if self.unmet[node] == 0 && self.state[node] == State::Waiting {
                        self.enqueue(node);
                    }
                }
            }
            Event::Finished { node, ok } => self.on_finished(now, node, ok, &mut out),
            Event::Ready { node } => {
                if self.state[node] == State::Running && self.persistent[node] {
                    self.state[node] = State::Serving;
                    self.release_dependents(node);
                }
            }
            Event::Interrupt => {
                self.stopped = true;
                self.failed = true;
                for node in 0..self.state.len() {
                    match self.state[node] {
                        State::Waiting | State::Queued => {
                            self.mark_skipped(now, node, SkipReason::Interrupted, &mut out)
                        }
                        State::Running | State::Serving => {
                            self.state[node] = State::Stopping;
                            out.push(Command::Abort(node));
                        }
                        _ => {}
                    }
                }
                self.ready.clear();
                self.ready_persistent.clear();
            }
        }
        self.dispatch(now, &mut out);
        self.maybe_finish(&mut out);
        out
    }

    fn on_finished(&mut self, now: Duration, node: Node, ok: bool, out: &mut Vec<Command>) {
        let prev = self.state[node];
        if prev.is_final() || matches!(prev, State::Waiting | State::Queued) {
            return; // stale or impossible report: ignore
        }
        if prev == State::Running && !self.persistent[node] {
            self.in_flight -= 1;
        }
        self.finished_at[node] = Some(now);
        // A persistent node we stopped (graph done, or interrupt) did not fail by exiting.
        let ok = ok || (prev == State::Stopping && self.persistent[node]);
        self.state[node] = if ok { State::Succeeded } else { State::Failed };
        if !self.persistent[node] {
            self.open_regular -= 1;
        }
        if ok {
            if prev == State::Running {
                self.release_dependents(node);
            }
        } else {
            self.failed = true;
            self.skip_dependents(now, node, out);
            if !self.opts.continue_on_failure && !self.stopped {
                self.stopped = true;
                while let Some((_, std::cmp::Reverse(q))) = self.ready.pop() {
                    self.mark_skipped(now, q, SkipReason::RunStopped, out);
                }
                for q in std::mem::take(&mut self.ready_persistent) {
                    self.mark_skipped(now, q, SkipReason::RunStopped, out);
                }
                for n in 0..self.state.len() {
                    if self.state[n] == State::Waiting {
                        self.mark_skipped(now, n, SkipReason::RunStopped, out);
                    }
                }
            }
        }
    }

    fn release_dependents(&mut self, node: Node) {
        for i in 0..self.dependents[node].len() {
            let d = self.dependents[node][i];
            self.unmet[d] -= 1;
            if self.unmet[d] == 0 && self.state[d] == State::Waiting && !self.stopped {
                self.enqueue(d);
            }
        }
    }

    fn skip_dependents(&mut self, now: Duration, failed: Node, out: &mut Vec<Command>) {
        let mut stack = vec![failed];
        while let Some(n) = stack.pop() {
            for i in 0..self.dependents[n].len() {
                let d = self.dependents[n][i];
                if matches!(self.state[d], State::Waiting | State::Queued) {
                    self.mark_skipped(now, d, SkipReason::DependencyFailed(failed), out);
                    stack.push(d);
                }
            }
        }
    }

    fn mark_skipped(&mut self, now: Duration, node: Node, why: SkipReason, out: &mut Vec<Command>) {
        if self.state[node].is_final() {
            return;
        }
        self.state[node] = State::Skipped;
        self.finished_at[node] = Some(now);
        if !self.persistent[node] {
            self.open_regular -= 1;
        }
        out.push(Command::Skip(node, why));
    }

    fn enqueue(&mut self, node: Node) {
        self.state[node] = State::Queued;
        if self.persistent[node] {
            self.ready_persistent.push(node);
        } else {
            self.ready.push((self.priority[node], std::cmp::Reverse(node)));
        }
    }

    fn dispatch(&mut self, now: Duration, out: &mut Vec<Command>) {
        if !self.stopped {
            for node in std::mem::take(&mut self.ready_persistent) {
                if self.state[node] == State::Queued {
                    self.state[node] = State::Running;
                    self.started_at[node] = Some(now);
                    out.push(Command::Dispatch(node));
                }
            }
        }
        while self.in_flight < self.opts.concurrency && !self.stopped {
            let Some((_, std::cmp::Reverse(node))) = self.ready.pop() else { break };
            if self.state[node] != State::Queued {
                continue; // skipped while queued
            }
            self.state[node] = State::Running;
            self.in_flight += 1;
            self.started_at[node] = Some(now);
            out.push(Command::Dispatch(node));
        }
    }

    fn maybe_finish(&mut self, out: &mut Vec<Command>) {
        if self.open_regular > 0 {
            return;
        }
        // Every regular node is final. A persistent node something depended on (a server for
        // e2e tests) has served its purpose once every dependent is final — a persistent
        // dependent (a web server over an api server) keeps it alive while it runs: stop it.
        // A persistent node nothing depends on was asked for itself (`prova run dev`): it
        // runs until it exits or the run is interrupted.
        let mut alive = false;
        for node in 0..self.state.len() {
            if !self.persistent[node] {
                continue;
            }
            let served = !self.dependents[node].is_empty()
                && self.dependents[node].iter().all(|&d| self.state[d].is_final());
            match self.state[node] {
                State::Serving | State::Running if served => {
                    self.state[node] = State::Stopping;
                    out.push(Command::StopPersistent(node));
                    alive = true;
                }
                State::Serving | State::Running | State::Stopping => alive = true,
                State::Waiting | State::Queued if self.stopped => {
                    self.state[node] = State::Skipped;
                    out.push(Command::Skip(node, SkipReason::RunStopped));
                }
                State::Waiting | State::Queued => alive = true,
                _ => {}
            }
        }
        if !alive {
            self.done = true;
            out.push(Command::Done { ok: !self.failed });
        }
    }

    /// The nodes a node waits for.
    pub fn deps(&self, node: Node) -> &[Node] {
        &self.plan_deps[node]
    }
}

/// Longest path (sum of weights) from each node through its dependents.
fn longest_paths(plan: &Plan, dependents: &[Vec<Node>]) -> Vec<u64> {
    let n = plan.len();
    let order = crate::graph::topo_sort(n, |i| &plan.deps[i]);
    let mut best = vec![0u64; n];
    for &node in order.iter().rev() {
        let tail = dependents[node].iter().map(|&d| best[d]).max().unwrap_or(0);
        best[node] = plan.weight.get(node).copied().unwrap_or(1).max(1) + tail;
    }
    best
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
