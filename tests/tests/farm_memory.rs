//! Bounded coordinator memory (issue 13): after runs of every ending — success, a task's
//! failure, a cache hit, `--verify`, an interrupted run and a run whose client vanished
//! mid-run — the coordinator holds no per-run state: no run routed or run actor alive, no
//! queued item, lease, follower, dedup key or loss evidence, and its book of recent runs is
//! within its bound. Read from `prova farm status --json` (`coordinator.held`); every wait is
//! on that state, bounded.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use prova_coordinator::farm::observe::RECENT_RUNS;
use prova_tests::TempWorkspace;
use prova_tests::cluster::{POLL, blocking_command, waiting_line};
use prova_tests::inproc::InProcessFarm;
use serde_json::Value;

/// Runs of the plain kinds (the two interrupted ones come on top).
const RUNS: usize = 28;

fn workspace(fail: bool) -> TempWorkspace {
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"a\", \"b\", \"c\"]\n\
             [tasks.build]\n\
             command = 'if [ -e src/fail ]; then echo broken; exit 1; fi; mkdir -p dist && cp src/*.txt dist/'\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("a/src/a.txt", "a\n")
        .file("b/src/b.txt", "b\n")
        .file("c/src/c.txt", "c\n");
    if fail { ws.file("b/src/fail", "") } else { ws }
}

fn blocking() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p\"]\n[tasks.build]\ncommand = '{}'\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
                blocking_command("mkdir -p dist && cp src/in.txt dist/out.txt")
            ),
        )
        .file("p/src/in.txt", "payload\n")
}

/// `coordinator.held` of the farm's status, with the status for messages.
fn held(farm: &InProcessFarm) -> (Value, Value) {
    let st = farm.status();
    (st["coordinator"]["held"].clone(), st)
}

/// Per-run counts that must be zero when no run is going.
const PER_RUN: [&str; 8] = [
    "attached_runs",
    "run_actors",
    "queued",
    "leases",
    "followers",
    "keys",
    "presence",
    "book_live",
];

#[test]
fn the_coordinator_holds_no_per_run_state_once_its_runs_have_ended() {
    let farm = InProcessFarm::start(2);
    let (before, st) = held(&farm);
    for k in PER_RUN {
        assert_eq!(before[k].as_u64(), Some(0), "{k} before any run: {st:#}");
    }

    let ok = workspace(false);
    let bad = workspace(true);
    let mut codes = Vec::new();
    for i in 0..RUNS {
        let out = match i % 4 {
            0 => farm.run(&ok, ["build", "--all", "--no-cache"]),
            1 => farm.run(&ok, ["build", "--all"]), // hits after the first
            2 => farm.run(&bad, ["build", "--all", "--continue", "--no-cache"]),
            _ => farm.run(&ok, ["build", "--all", "--no-cache", "--verify"]),
        };
        codes.push(out.code());
        let want = if i % 4 == 2 { 1 } else { 0 };
        out.assert_code(want);
    }

    // Interrupted: Ctrl-C while its task runs on a worker.
    let ws = blocking();
    let mut run = farm.run_cmd(&ws, ["build", "--all", "--json"]).spawn();
    run.wait_for_lines("the task to start", 1, waiting_line);
    run.signal(Signal::SIGINT);
    let out = run.wait();
    assert_ne!(out.code(), Some(0), "an interrupted run is not green\n{out}");

    // The client vanishes mid-run (SIGKILL: no Interrupt, no close; the connection idles out).
    let ws = blocking();
    let mut run = farm.run_cmd(&ws, ["build", "--all", "--json", "--no-cache"]).spawn();
    run.wait_for_lines("the task to start", 1, waiting_line);
    run.signal(Signal::SIGKILL);
    drop(run.wait());

    // Everything the runs held is given back (the vanished client's once its connection idles
    // out and its run is interrupted).
    let deadline = Instant::now() + Duration::from_secs(90);
    let (after, st) = loop {
        let (h, st) = held(&farm);
        let busy: u64 = st["workers"]
            .as_array()
            .map_or(0, |ws| ws.iter().filter_map(|w| w["busy"].as_u64()).sum());
        if PER_RUN.iter().all(|k| h[k].as_u64() == Some(0)) && busy == 0 {
            break (h, st);
        }
        assert!(Instant::now() < deadline, "per-run state never went back to zero: {st:#}");
        std::thread::sleep(POLL);
    };
    let book = after["book_runs"].as_u64().unwrap_or(u64::MAX);
    // A run whose every task is a local hit never reaches the farm (the `i % 4 == 1` ones
    // after the first): every other one is in the book, finished.
    let reached = RUNS as u64 + 2 - (RUNS as u64 / 4 - 1);
    assert_eq!(book, reached, "{st:#}");
    assert!(book <= RECENT_RUNS as u64, "{st:#}");
    assert_eq!(st["queued"].as_u64(), Some(0), "{st:#}");
    assert_eq!(st["runs"].as_u64(), Some(0), "{st:#}");
    // Blobs remembered for locality are bounded per worker, not per run.
    let blobs = after["worker_blobs"].as_u64().unwrap_or(u64::MAX);
    assert!(
        blobs <= 2 * prova_coordinator::farm::core::HOLDS_PER_WORKER as u64,
        "{blobs} blobs remembered: {st:#}"
    );
}
