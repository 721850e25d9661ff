//! Proofs on the farm (`prova run … --remote … --verify`), on a real coordinator and real
//! workers (subprocesses): the determinism re-run lands on the *other* worker (or, on a
//! one-worker farm, on the same one and says so), a task whose bytes depend on the worker it
//! ran on is caught and listed by the farm's ledger with both workers, `--trust proven`
//! withholds a ci entry until a second worker agrees, and the inputs proof runs under
//! bubblewrap and strace on a worker whose `--work-dir` is relative.
//!
//! Each test starts its own small cluster and workspaces; which worker ran what is read from
//! the run's `--json` events and checked against evidence the worker left behind (the exec
//! root a task printed, the blobs a worker fetched).

use std::path::Path;

use prova_tests::cluster::{Cluster, Sandbox, in_roots_of};
use prova_tests::verify::{
    cache_word, complete, key, name, only_verdict, sandbox_or_skip, task, tolerant, verdict_events,
    workspace,
};
use prova_tests::{Output, TempWorkspace};
use serde_json::{Value, json};

/// Copies its declared input to `out/det.txt` and prints where it ran (stdout is not an
/// output, so the bytes do not depend on it).
fn det() -> String {
    task(
        "det",
        "echo ran in $(pwd) && mkdir -p out && cat src/a.txt > out/det.txt",
        &["out/det.txt"],
    )
}

/// The first `ran in DIR` line of `task`'s output (the primary execution's exec root).
#[track_caller]
fn ran_in(out: &Output, task: &str) -> String {
    out.output_of(task)
        .lines()
        .find_map(|l| l.strip_prefix("ran in ").map(str::to_owned))
        .unwrap_or_else(|| panic!("{task} did not say where it ran\n{out}"))
}

/// The workers named by `task_started` events of `task`.
fn started_on(out: &Output, task: &str) -> Vec<String> {
    out.events()
        .iter()
        .filter(|e| e["event"] == "task_started" && e["task"] == task)
        .filter_map(|e| e["worker"].as_str().map(str::to_owned))
        .collect()
}

/// Files in a worker's blob cache (`<work dir>/blobs/<2 hex>/<digest>`): what it fetched.
fn blobs_in(work_dir: &Path) -> usize {
    let Ok(dirs) = std::fs::read_dir(work_dir.join("blobs")) else { return 0 };
    dirs.filter_map(Result::ok)
        .filter(|d| d.path().is_dir())
        .map(|d| std::fs::read_dir(d.path()).map_or(0, |f| f.filter_map(Result::ok).count()))
        .sum()
}

/// The farm cache's entries in the trusted tier (namespace `""`, what ci runs read) and in
/// `pending` (waiting for a second worker's agreement), and the whole `cache stats` for a
/// failure message.
fn tiers(farm: &Cluster) -> ((u64, u64), Value) {
    let stats = farm.farm_cache_stats();
    let n = |ns: &str| stats["entries"][ns].as_u64().unwrap_or(0);
    ((n(""), n("pending")), stats)
}

/// The index of the worker a run reports for `task` (its primary execution), checked against
/// the `task_started` event and the exec root the task printed.
#[track_caller]
fn primary_worker(farm: &Cluster, out: &Output, task: &str) -> usize {
    let name = out.report(task)["worker"]
        .as_str()
        .unwrap_or_else(|| panic!("{task} ran nowhere\n{out}"))
        .to_owned();
    assert_eq!(started_on(out, task), [name.as_str()], "one start, where it was reported\n{out}");
    let i = farm.worker_index(&name);
    let dir = ran_in(out, task);
    assert!(
        in_roots_of(Path::new(&dir), &farm.work_dir(i)),
        "{task} reports {name} but ran in {dir}\n{out}"
    );
    i
}

#[test]
fn the_rerun_lands_on_the_other_worker() {
    let farm = Cluster::start(2);
    let ws = workspace(&det());
    assert_eq!(blobs_in(&farm.work_dir(0)) + blobs_in(&farm.work_dir(1)), 0, "a fresh farm");

    let out = farm.run(&ws, ["det", "--all", "--verify", "--json"]);
    out.assert_code(0);
    let first = primary_worker(&farm, &out, "p#det");
    let other = 1 - first;

    let v = only_verdict(&out, "p#det");
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    assert_eq!(v["rerun_worker"], farm.worker_name(other), "the re-run avoids {first}\n{out}");
    assert_eq!(v["single_machine"], false, "{out}");
    assert_eq!(verdict_events(&out, "p#det"), vec![v], "the stream carries the same verdict");
    assert_eq!(cache_word(&out, "p#det"), "saved", "{out}");
    assert_eq!(ws.read("p/out/det.txt"), "hello\n", "the canonical bytes are in the workspace");

    // The other worker really executed something: it fetched the task's input.
    assert!(
        blobs_in(&farm.work_dir(other)) > 0,
        "{} fetched no blob, so it cannot have run the re-run\n{}",
        farm.worker_name(other),
        farm.logs()
    );
    // Both executions agree: the farm's ledger lists no key.
    let (h, report) = farm.hermeticity();
    h.assert_code(0);
    assert_eq!(report["keys"], json!([]), "{h}");
}

/// Writes `out/same.txt` (its input) and `out/where.txt`: the `workers/<name>` part of its
/// exec root's path, or of its `TMPDIR` (a re-run's root on `/dev/shm` is named by a hash
/// of the worker's work dir) — the same for every execution on one worker, different on
/// another.
fn where_() -> String {
    task(
        "where",
        "echo ran in $(pwd) && mkdir -p out && cat src/a.txt > out/same.txt && \
         { pwd; echo $TMPDIR; } | grep -o 'workers/w[0-9]*' | head -n 1 > out/where.txt",
        &["out/same.txt", "out/where.txt"],
    )
}

#[test]
fn output_that_depends_on_the_worker_is_caught_and_listed_with_both_workers() {
    // Roots in the work dirs: the task's path names its worker.
    let farm = Cluster::builder().workers(2).sandbox(Sandbox::None).roots_in_work_dirs().start();
    let ws = workspace(&where_());

    let out = farm.run(&ws, ["where", "--all", "--verify", "--json"]);
    out.assert_code(1);
    assert_eq!(out.summary()["ok"], false, "{out}");
    let first = primary_worker(&farm, &out, "p#where");
    let (w_first, w_other) = (farm.worker_name(first), farm.worker_name(1 - first));
    // The task succeeded and its canonical (first) bytes are kept.
    assert_eq!(out.status_of("p#where"), "succeeded", "{out}");
    assert_eq!(ws.read("p/out/where.txt"), format!("workers/{w_first}\n"), "{out}");

    let v = only_verdict(&out, "p#where");
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], json!(["p/out/where.txt"]), "only where.txt differs\n{out}");
    assert_eq!(v["added"], json!([]), "{out}");
    assert_eq!(v["removed"], json!([]), "{out}");
    assert_eq!(v["rerun_worker"], w_other, "{out}");
    assert_eq!(v["single_machine"], false, "{out}");
    let diff = v["files"][0]["diff"].as_str().unwrap_or_else(|| panic!("no diff\n{out}"));
    assert!(diff.contains(&format!("-workers/{w_first}")), "{diff}");
    assert!(diff.contains(&format!("+workers/{w_other}")), "{diff}");

    // The farm's ledger: that key, one fingerprint per worker, the differing file.
    let (h, report) = farm.hermeticity();
    h.assert_code(1);
    let keys = report["keys"].as_array().unwrap_or_else(|| panic!("no keys\n{h}"));
    assert_eq!(keys.len(), 1, "{h}");
    let k = &keys[0];
    assert_eq!(k["task"], "p#where", "{h}");
    assert_eq!(k["key"], key(&out, "p#where"), "the ledger's key is the run's\n{h}");
    assert_eq!(k["nondeterministic"], true, "{h}");
    assert_eq!(k["flaky"], false, "{h}");
    assert_eq!(k["changed"], json!(["p/out/where.txt"]), "{h}");
    let sides: Vec<Value> =
        k["fingerprints"].as_array().unwrap_or_else(|| panic!("{h}")).to_owned();
    assert_eq!(sides.len(), 2, "{h}");
    assert_eq!(sides[0]["workers"], json!([w_first]), "the first execution's side\n{h}");
    assert_eq!(sides[1]["workers"], json!([w_other]), "the re-run's side\n{h}");
    assert_ne!(sides[0]["fingerprint"], sides[1]["fingerprint"], "{h}");

    let text = farm.hermeticity_text();
    text.assert_code(1);
    text.assert_stdout_contains("1 key whose executions disagree");
    text.assert_stdout_contains("p#where (nondeterministic) key");
    text.assert_stdout_contains(&format!("1 execution(s) on {w_first} ["));
    text.assert_stdout_contains(&format!("1 execution(s) on {w_other} ["));
    text.assert_stdout_contains("changed: p/out/where.txt");
}

#[test]
fn with_one_worker_the_rerun_uses_it_again_and_says_single_machine() {
    let farm = Cluster::start(1);
    let ws = workspace(&det());

    let out = farm.run(&ws, ["det", "--all", "--verify", "--json"]);
    out.assert_code(0);
    assert_eq!(primary_worker(&farm, &out, "p#det"), 0);
    let v = only_verdict(&out, "p#det");
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    assert_eq!(v["rerun_worker"], "w1", "{out}");
    assert_eq!(v["single_machine"], true, "{out}");

    // The text form says so too (forced: the entry is saved now).
    let text = farm.run(&ws, ["det", "--all", "--verify", "--force"]);
    text.assert_code(0);
    let lines = text.task_lines("p#det");
    assert!(
        lines.iter().any(|l| l.starts_with("verify: proven deterministic (single machine")),
        "{text}"
    );
}

#[test]
fn trust_proven_withholds_a_ci_entry_until_a_second_worker_agrees() {
    // w2 joins only for the verify run, so every execution before it is on w1.
    let mut farm =
        Cluster::builder().workers(2).started(1).coordinator_args(["--trust", "proven"]).start();
    let clone = || workspace(&det());

    // A ci run without --verify: executed and saved, but pending, not trusted.
    let a = clone();
    let first = farm.run(&a, ["det", "--all", "--json"]);
    first.assert_code(0);
    assert_eq!(cache_word(&first, "p#det"), "saved", "{first}");
    assert_eq!(first.report("p#det")["worker"], "w1", "{first}");
    let (counts, stats) = tiers(&farm);
    assert_eq!(counts, (0, 1), "(trusted, pending)\n{stats}");

    // Another machine: nothing is served; the task executes again (on w1 again).
    let b = clone();
    let second = farm.run(&b, ["det", "--all", "--json"]);
    second.assert_code(0);
    assert_eq!(cache_word(&second, "p#det"), "saved", "not a hit\n{second}");
    assert_eq!(second.report("p#det")["worker"], "w1", "{second}");
    assert_eq!(started_on(&second, "p#det"), ["w1"], "{second}");
    let (counts, stats) = tiers(&farm);
    assert_eq!(counts, (0, 1), "(trusted, pending)\n{stats}");
    // Checked at the end, once the promotion itself has been checked.
    let home = [(&a, &first), (&b, &second)]
        .map(|(ws, out)| (ws.exists("p/out/det.txt"), out.stdout.clone()));

    // A verify run once a second worker is there: it agrees, and the entry is promoted.
    farm.start_worker(1);
    let c = clone();
    let proof = farm.run(&c, ["det", "--all", "--verify", "--json"]);
    proof.assert_code(0);
    assert_eq!(cache_word(&proof, "p#det"), "saved", "still withheld: executed\n{proof}");
    let v = only_verdict(&proof, "p#det");
    assert_eq!(name(&v), "proven-deterministic", "{proof}");
    assert_eq!(v["single_machine"], false, "{proof}");
    assert_ne!(v["rerun_worker"], proof.report("p#det")["worker"], "{proof}");
    let (counts, stats) = tiers(&farm);
    assert_eq!(counts, (1, 0), "(trusted, pending)\n{stats}");

    // Now it is served: a fresh machine hits it from the farm.
    let d = clone();
    let hit = farm.run(&d, ["det", "--all", "--json"]);
    hit.assert_code(0);
    assert_eq!(cache_word(&hit, "p#det"), "hit", "{hit}");
    assert_eq!(hit.report("p#det")["cache"]["layer"], "farm", "{hit}");
    assert!(started_on(&hit, "p#det").is_empty(), "a hit runs nowhere\n{hit}");
    assert_eq!(d.read("p/out/det.txt"), "hello\n");
    assert_eq!(key(&hit, "p#det"), key(&first, "p#det"), "one key throughout");
    assert_eq!(c.read("p/out/det.txt"), "hello\n", "{proof}");

    // Withheld from everyone else, but not from its own run: a run whose task executed and
    // succeeded has its outputs in its workspace.
    for (came_home, stdout) in home {
        assert!(
            came_home,
            "under --trust proven a ci run's task executed and succeeded, yet its outputs are \
             not in its workspace (its entry is pending, so nothing was downloaded)\n{stdout}"
        );
    }
}

#[test]
fn the_inputs_proof_runs_on_a_sandboxed_worker_with_a_relative_work_dir() {
    if !sandbox_or_skip() {
        return;
    }
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::Bwrap).relative_work_dirs().start();
    // The worker really was given a relative --work-dir (it runs in the cluster root).
    let pid = farm.worker_pid(0).expect("w1 runs");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the worker's cmdline");
    let args: Vec<String> =
        cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let at = args.iter().position(|a| a == "--work-dir").expect("--work-dir is passed");
    assert_eq!(args[at + 1], "workers/w1", "{args:?}");

    let ws: TempWorkspace =
        workspace(&format!("{}{}", complete(), tolerant())).file("p/src/secret.txt", "s3cret\n");
    let out = farm.run(&ws, ["complete", "tolerant", "--all", "--verify=inputs", "--json"]);
    out.assert_code(1);
    assert_eq!(out.summary()["ok"], false, "{out}");
    for t in ["p#complete", "p#tolerant"] {
        assert_eq!(out.status_of(t), "succeeded", "{out}");
        assert_eq!(out.report(t)["worker"], "w1", "{out}");
    }

    let v = only_verdict(&out, "p#complete");
    assert_eq!(name(&v), "proven-complete", "{out}\n{}", farm.logs());
    let v = only_verdict(&out, "p#tolerant");
    assert_eq!(name(&v), "undeclared-inputs", "{out}\n{}", farm.logs());
    assert_eq!(v["paths"], json!(["p/src/secret.txt"]), "{out}");
    assert_eq!(v["traced"], true, "the tracer named the path\n{out}");
    assert_eq!(verdict_events(&out, "p#tolerant"), vec![v], "{out}");
}

#[test]
fn a_task_that_copies_its_inputs_is_proven_whatever_the_roots_file_system() {
    // The re-run's root is on a tmpfs (/dev/shm), the blob cache on disk: its inputs were
    // copies, writable, where the primary's were read-only links — `cp` kept each mode, and a
    // deterministic task was called nondeterministic (mode 0444 → 0600). Seen on the farm.
    let farm = Cluster::start(2);
    let copy = task(
        "copy",
        "mkdir -p out && cp src/a.txt out/copy.txt && cp -p src/a.txt out/kept.txt",
        &["out/copy.txt", "out/kept.txt"],
    );
    let ws = workspace(&copy);
    let out = farm.run(&ws, ["copy", "--all", "--verify", "--json"]);
    out.assert_code(0);
    let v = only_verdict(&out, "p#copy");
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    assert_eq!(v["single_machine"], false, "{out}");
}
