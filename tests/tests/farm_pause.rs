//! A coordinator that stalls (issue 29): SIGSTOP — a GC-like pause, a swap storm, a slow disk
//! under the process — for longer than a lease (15 s) and than the old client idle bound
//! (4 s), but shorter than the pause tolerance (30 s), while a run's tasks execute on two
//! workers. After SIGCONT the run ends green: no task failed, none executed twice, the
//! client never said "went away".
//!
//! Executions are counted outside prova: every task appends its name to a ledger file in the
//! test's own directory (the workers run unsandboxed, so the task may write there); a task
//! whose lease the farm gave away would run again and appear twice.
//!
//! The pause is the fault itself, not synchronisation: the test waits on what the client
//! prints (`--json` events) before it stops the coordinator.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, Sandbox};

/// The stall: past the 15 s lease and the old 4 s idle bound, inside the 30 s tolerance.
const PAUSE: Duration = Duration::from_secs(20);

/// Tasks in the run: enough that some run before, some across and some after the pause.
const TASKS: usize = 96;

/// The client's deadline: the work (a few seconds), the pause, a loaded machine's share.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// Projects `p00`…; `build` sleeps a little, appends its task name to `ledger` and writes its
/// output. Every sixteenth task sleeps through the whole pause, so its lease spans it.
fn workspace(ledger: &Path) -> TempWorkspace {
    let projects: Vec<String> = (0..TASKS).map(|i| format!("\"p{i:02}\"")).collect();
    let ledger = ledger.display();
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        &format!(
            "[workspace]\nprojects = [{}]\n\n[tasks.build]\n\
             command = 'sleep \"$(cat nap)\"; echo \"$PROVA_TASK\" >> {ledger}; mkdir -p dist; \
             cat src.txt > dist/out.txt'\ninputs = [\"src.txt\", \"nap\"]\n\
             outputs = [\"dist/out.txt\"]\n",
            projects.join(", ")
        ),
    );
    for i in 0..TASKS {
        let nap = if i % 16 == 3 { PAUSE.as_secs() + 2 } else { 0 };
        let nap = if nap == 0 { "0.3".to_owned() } else { nap.to_string() };
        ws = ws
            .file(&format!("p{i:02}/src.txt"), &format!("p{i:02}\n"))
            .file(&format!("p{i:02}/nap"), &format!("{nap}\n"));
    }
    ws
}

/// How many times each task executed, from the ledger.
fn executions(ledger: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let mut n = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        *n.entry(line.to_owned()).or_insert(0) += 1;
    }
    n
}

#[test]
fn a_run_rides_through_a_coordinator_paused_past_its_leases() {
    let farm = Cluster::builder().workers(2).slots(4).sandbox(Sandbox::None).start();
    let dir = tempfile::tempdir().expect("a temp dir");
    let ledger = dir.path().join("ledger");
    let ws = workspace(&ledger);
    let mut run = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"])
        .timeout(RUN_TIMEOUT)
        .spawn();
    // Some tasks are done, others running: then the coordinator stops answering.
    run.wait_for_lines("a dozen tasks to finish", 12, |l| l.contains("\"task_finished\""));
    let coordinator = Pid::from_raw(farm.coordinator_pid().expect("the coordinator runs"));
    kill(coordinator, Signal::SIGSTOP).expect("SIGSTOP the coordinator");
    std::thread::sleep(PAUSE); // the fault: the coordinator is stalled
    kill(coordinator, Signal::SIGCONT).expect("SIGCONT the coordinator");
    let out = run.wait();

    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert!(!out.stderr.contains("went away"), "{out}");
    for i in 0..TASKS {
        let task = format!("p{i:02}#build");
        assert_eq!(out.status_of(&task), "succeeded", "{task}\n{out}\n{}", farm.logs());
        assert_eq!(ws.read(&format!("p{i:02}/dist/out.txt")), format!("p{i:02}\n"), "{out}");
    }
    let ran = executions(&ledger);
    let twice: Vec<_> = ran.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "executed more than once: {twice:?}\n{}", farm.logs());
    assert_eq!(ran.len(), TASKS, "{ran:?}");
    // The client noticed the silence and said it was waiting, not that the farm was gone.
    assert!(out.stderr.contains("not answering"), "{out}");
}
