//! Simulation tests: a fake driver executes dispatched nodes in simulated time (each takes
//! its weight in ms, fails if listed) and feeds completions back in time order.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

struct Sim {
    sched: Scheduler,
    /// (finish time, node) of nodes in flight.
    running: BTreeMap<(u64, Node), bool>,
    weights: Vec<u64>,
    failing: Vec<Node>,
    dispatched: Vec<Node>,
    skipped: Vec<(Node, SkipReason)>,
    max_in_flight: usize,
    done: Option<bool>,
    now: u64,
}

impl Sim {
    fn new(deps: Vec<Vec<Node>>, weights: Vec<u64>, opts: Options) -> Self {
        let plan = Plan { persistent: vec![false; deps.len()], deps, weight: weights.clone() };
        Self {
            sched: Scheduler::new(&plan, opts),
            running: BTreeMap::new(),
            weights,
            failing: Vec::new(),
            dispatched: Vec::new(),
            skipped: Vec::new(),
            max_in_flight: 0,
            done: None,
            now: 0,
        }
    }

    fn apply(&mut self, cmds: Vec<Command>) {
        for c in cmds {
            match c {
                Command::Dispatch(n) => {
                    self.dispatched.push(n);
                    self.running
                        .insert((self.now + self.weights[n], n), !self.failing.contains(&n));
                    self.max_in_flight = self.max_in_flight.max(self.running.len());
                }
                Command::Skip(n, why) => self.skipped.push((n, why)),
                Command::Done { ok } => self.done = Some(ok),
                Command::Abort(_) | Command::StopPersistent(_) => {}
            }
        }
    }

    fn run(mut self) -> Self {
        let cmds = self.sched.handle(Duration::ZERO, Event::Start);
        self.apply(cmds);
        while let Some(((t, n), ok)) = self.running.pop_first() {
            self.now = t;
            let cmds = self.sched.handle(Duration::from_millis(t), Event::Finished { node: n, ok });
            self.apply(cmds);
        }
        self
    }
}

fn opts(j: usize, cont: bool) -> Options {
    Options { concurrency: j, continue_on_failure: cont }
}

#[test]
fn runs_everything_in_dependency_order() {
    // 0 <- 1 <- 2, 0 <- 3
    let sim = Sim::new(vec![vec![], vec![0], vec![1], vec![0]], vec![1; 4], opts(4, false)).run();
    assert_eq!(sim.done, Some(true));
    assert_eq!(sim.dispatched[0], 0);
    let pos = |n| sim.dispatched.iter().position(|&x| x == n).unwrap();
    assert!(pos(1) < pos(2));
    assert_eq!(sim.dispatched.len(), 4);
}

#[test]
fn critical_path_goes_first() {
    // Roots 0 (short chain) and 2 (long chain 2 <- 3 <- 4); with -j1 the long chain's root
    // must start first even though its index is higher.
    let deps = vec![vec![], vec![0], vec![], vec![2], vec![3]];
    let sim = Sim::new(deps, vec![1, 1, 5, 5, 5], opts(1, false)).run();
    assert_eq!(sim.dispatched[0], 2);
    assert_eq!(sim.sched.priority(2), 15);
    assert_eq!(sim.sched.priority(0), 2);
}

#[test]
fn equal_priorities_break_ties_by_index() {
    let sim = Sim::new(vec![vec![]; 4], vec![1; 4], opts(1, false)).run();
    assert_eq!(sim.dispatched, [0, 1, 2, 3]);
}

#[test]
fn concurrency_bound_is_respected() {
    let n = 50;
    let deps = (0..n).map(|i| if i < 10 { vec![] } else { vec![i % 10] }).collect();
    for j in [1, 3, 8] {
        let sim = Sim::new(Vec::clone(&deps), vec![3; n], opts(j, false)).run();
        assert_eq!(sim.max_in_flight, j, "-j {j}");
        assert_eq!(sim.dispatched.len(), n);
        assert_eq!(sim.done, Some(true));
    }
}

#[test]
fn failure_stops_new_work_and_skips_dependents() {
    // 0 (on the critical path) fails quickly; 1 depends on 0; 2 and 3 are independent, and
    // only 0 and 2 fit in the two slots.
    let mut sim =
        Sim::new(vec![vec![], vec![0], vec![], vec![]], vec![1, 20, 10, 5], opts(2, false));
    sim.failing = vec![0];
    let sim = sim.run();
    assert_eq!(sim.done, Some(false));
    // 2 was dispatched alongside 0 (higher priority), so it finishes; 3 never starts.
    assert!(sim.dispatched.contains(&2));
    assert!(!sim.dispatched.contains(&3));
    assert!(sim.skipped.contains(&(1, SkipReason::DependencyFailed(0))));
    assert!(sim.skipped.contains(&(3, SkipReason::RunStopped)));
}

#[test]
fn continue_runs_independent_work_after_failure() {
    // 0 fails; 1 <- 0 and 4 <- 1 skipped transitively; 2, 3 run.
    let deps = vec![vec![], vec![0], vec![], vec![], vec![1]];
    let mut sim = Sim::new(deps, vec![1, 1, 10, 10, 1], opts(1, true));
    sim.failing = vec![0];
    let sim = sim.run();
    assert_eq!(sim.done, Some(false));
    assert!(sim.dispatched.contains(&2) && sim.dispatched.contains(&3));
    assert!(sim.skipped.contains(&(1, SkipReason::DependencyFailed(0))));
    assert!(sim.skipped.contains(&(4, SkipReason::DependencyFailed(0))));
    assert_eq!(sim.skipped.len(), 2);
}

#[test]
fn interrupt_aborts_running_and_skips_the_rest() {
    let plan = Plan {
        deps: vec![vec![], vec![], vec![0]],
        weight: vec![1; 3],
        persistent: vec![false; 3],
    };
    let mut s = Scheduler::new(&plan, opts(1, false));
    assert_eq!(s.handle(Duration::ZERO, Event::Start), [Command::Dispatch(0)]);
    let cmds = s.handle(Duration::from_millis(5), Event::Interrupt);
    assert!(cmds.contains(&Command::Abort(0)));
    assert!(cmds.contains(&Command::Skip(1, SkipReason::Interrupted)));
    assert!(cmds.contains(&Command::Skip(2, SkipReason::Interrupted)));
    assert!(!s.is_done());
    let cmds = s.handle(Duration::from_millis(6), Event::Finished { node: 0, ok: false });
    assert_eq!(cmds, [Command::Done { ok: false }]);
}

#[test]
fn persistent_dependency_unblocks_when_ready_and_is_stopped_at_the_end() {
    // 0: dev server (persistent), 1: e2e tests depend on it.
    let plan =
        Plan { deps: vec![vec![], vec![0]], weight: vec![1, 1], persistent: vec![true, false] };
    let mut s = Scheduler::new(&plan, opts(1, false));
    assert_eq!(s.handle(Duration::ZERO, Event::Start), [Command::Dispatch(0)]);
    // A server takes no slot: the only one stays free for regular work.
    assert_eq!(s.in_flight(), 0);
    assert_eq!(
        s.handle(Duration::from_millis(1), Event::Ready { node: 0 }),
        [Command::Dispatch(1)]
    );
    let cmds = s.handle(Duration::from_millis(2), Event::Finished { node: 1, ok: true });
    assert_eq!(cmds, [Command::StopPersistent(0)]);
    let cmds = s.handle(Duration::from_millis(3), Event::Finished { node: 0, ok: false });
    assert_eq!(cmds, [Command::Done { ok: true }]);
}

#[test]
fn a_requested_persistent_task_runs_until_it_exits() {
    let plan =
        Plan { deps: vec![vec![], vec![0]], weight: vec![1, 1], persistent: vec![false, true] };
    let mut s = Scheduler::new(&plan, opts(2, false));
    s.handle(Duration::ZERO, Event::Start);
    assert_eq!(
        s.handle(Duration::from_millis(1), Event::Finished { node: 0, ok: true }),
        [Command::Dispatch(1)]
    );
    assert!(s.handle(Duration::from_millis(2), Event::Ready { node: 1 }).is_empty());
    assert!(!s.is_done());
    let cmds = s.handle(Duration::from_millis(3), Event::Interrupt);
    assert_eq!(cmds, [Command::Abort(1)]);
    assert_eq!(
        s.handle(Duration::from_millis(4), Event::Finished { node: 1, ok: false }),
        [Command::Done { ok: false }]
    );
}

#[test]
fn stale_and_duplicate_reports_are_ignored() {
    let plan = Plan { deps: vec![vec![], vec![0]], weight: vec![1, 1], persistent: vec![false; 2] };
    let mut s = Scheduler::new(&plan, opts(2, false));
    s.handle(Duration::ZERO, Event::Start);
    // Node 1 was never dispatched: a report for it changes nothing.
    assert!(s.handle(Duration::ZERO, Event::Finished { node: 1, ok: true }).is_empty());
    assert_eq!(
        s.handle(Duration::ZERO, Event::Finished { node: 0, ok: true }),
        [Command::Dispatch(1)]
    );
    assert!(s.handle(Duration::ZERO, Event::Finished { node: 0, ok: false }).is_empty());
    assert_eq!(
        s.handle(Duration::ZERO, Event::Finished { node: 1, ok: true }),
        [Command::Done { ok: true }]
    );
}

#[test]
fn empty_plan_is_done_at_start() {
    let mut s = Scheduler::new(&Plan::default(), opts(4, false));
    assert_eq!(s.handle(Duration::ZERO, Event::Start), [Command::Done { ok: true }]);
}

#[test]
fn deterministic_replay() {
    // The same plan and completions give the same command stream.
    let deps: Vec<Vec<Node>> =
        (0..30).map(|i| if i == 0 { vec![] } else { vec![(i * 7) % i] }).collect();
    let weights: Vec<u64> = (0..30).map(|i| (i * 13 % 7 + 1) as u64).collect();
    let a = Sim::new(deps.clone(), weights.clone(), opts(3, false)).run().dispatched;
    let b = Sim::new(deps, weights, opts(3, false)).run().dispatched;
    assert_eq!(a, b);
}

#[test]
fn a_persistent_task_over_a_persistent_task_keeps_it_alive_while_it_serves() {
    // 0: api server, 1: web server depending on it (requested). Seen hanging: the api was
    // stopped the moment it was ready (no regular node was left), so web never started.
    let plan =
        Plan { deps: vec![vec![], vec![0]], weight: vec![1, 1], persistent: vec![true, true] };
    let mut s = Scheduler::new(&plan, opts(1, false));
    assert_eq!(s.handle(Duration::ZERO, Event::Start), [Command::Dispatch(0)]);
    assert_eq!(
        s.handle(Duration::from_millis(1), Event::Ready { node: 0 }),
        [Command::Dispatch(1)]
    );
    assert!(s.handle(Duration::from_millis(2), Event::Ready { node: 1 }).is_empty());
    assert!(!s.is_done());
    // Web exits by itself: the api it needed has served its purpose.
    assert_eq!(
        s.handle(Duration::from_millis(3), Event::Finished { node: 1, ok: true }),
        [Command::StopPersistent(0)]
    );
    assert_eq!(
        s.handle(Duration::from_millis(4), Event::Finished { node: 0, ok: false }),
        [Command::Done { ok: true }]
    );

    // Interrupted while both serve: both aborted, the run ends when both reported.
    let mut s = Scheduler::new(&plan, opts(1, false));
    s.handle(Duration::ZERO, Event::Start);
    s.handle(Duration::ZERO, Event::Ready { node: 0 });
    let cmds = s.handle(Duration::from_millis(1), Event::Interrupt);
    assert_eq!(cmds, [Command::Abort(0), Command::Abort(1)]);
    assert!(s.handle(Duration::from_millis(2), Event::Finished { node: 1, ok: false }).is_empty());
    assert_eq!(
        s.handle(Duration::from_millis(3), Event::Finished { node: 0, ok: false }),
        [Command::Done { ok: false }]
    );
}

#[test]
fn persistent_tasks_take_no_slot_of_minus_j() {
    // Two servers and a regular task with -j 1: all three start at once (seen failing:
    // the second server was refused "worker has no free slot").
    let plan = Plan {
        deps: vec![vec![], vec![], vec![]],
        weight: vec![1, 1, 5],
        persistent: vec![true, true, false],
    };
    let mut s = Scheduler::new(&plan, opts(1, false));
    let mut cmds = s.handle(Duration::ZERO, Event::Start);
    cmds.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(cmds, [Command::Dispatch(0), Command::Dispatch(1), Command::Dispatch(2)]);
    assert_eq!(s.in_flight(), 1);
    // A server that becomes ready or exits changes no slot count.
    s.handle(Duration::from_millis(1), Event::Ready { node: 0 });
    assert_eq!(s.in_flight(), 1);
    assert!(s.handle(Duration::from_millis(2), Event::Finished { node: 2, ok: true }).is_empty());
    assert_eq!(s.in_flight(), 0);
    assert!(!s.is_done(), "the requested servers run until they exit");
}
