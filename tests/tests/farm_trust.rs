//! `--trust proven` is a proof (issue 13): a ci entry is served only when the farm's ledger
//! holds two distinct workers that produced its fingerprint, no successful execution of its key
//! that produced another one, and so no nondeterministic verdict. On a real coordinator and
//! real workers (subprocesses): a key whose ledger holds a disagreeing fingerprint is never
//! promoted, even once two other workers agree; an entry saved under the default trust mode is
//! not served after a restart with `--trust proven` (it is re-proven); a promoted entry whose
//! key disagrees later (another worker, another fingerprint) is served no more; the normal
//! path — two agreeing workers promote, a fresh clone hits — still holds.
//!
//! Which worker ran what is read from the run's `--json` report; the tiers from
//! `prova cache stats` of the farm.

use prova_tests::cluster::Cluster;
use prova_tests::verify::{cache_word, name, only_verdict, task, workspace};
use prova_tests::{Output, TempWorkspace};
use serde_json::Value;

/// Copies its input to `out/det.txt`: the same bytes on every worker.
fn det() -> String {
    task("det", "mkdir -p out && cat src/a.txt > out/det.txt", &["out/det.txt"])
}

/// Writes `one` on worker `w1` and `other` anywhere else (it reads the exec root, which is
/// under the worker's work dir on a farm started with `roots_in_work_dirs`): one key, two
/// fingerprints, decided by where it ran.
fn by_worker() -> String {
    task(
        "det",
        "mkdir -p out && case $(pwd) in */workers/w1/*) echo one;; *) echo other;; esac > out/det.txt",
        &["out/det.txt"],
    )
}

/// The farm cache's entries in the trusted tier (namespace `""`) and in `pending`, and the
/// whole `cache stats` for a failure message.
fn tiers(farm: &Cluster) -> ((u64, u64), Value) {
    let stats = farm.farm_cache_stats();
    let n = |ns: &str| stats["entries"][ns].as_u64().unwrap_or(0);
    ((n(""), n("pending")), stats)
}

/// The worker a run reports for `task`.
#[track_caller]
fn worker_of(out: &Output, task: &str) -> String {
    out.report(task)["worker"]
        .as_str()
        .unwrap_or_else(|| panic!("{task} ran nowhere\n{out}"))
        .to_owned()
}

/// A ci run of `det` in a fresh clone of `tasks`, `--json`, exit 0 asserted.
#[track_caller]
fn ci_run(farm: &Cluster, tasks: &str, extra: &[&str]) -> (TempWorkspace, Output) {
    let ws = workspace(tasks);
    let mut args = vec!["det", "--all", "--json"];
    args.extend_from_slice(extra);
    let out = farm.run(&ws, args);
    out.assert_code(0);
    (ws, out)
}

#[test]
fn a_key_with_a_disagreeing_fingerprint_is_never_promoted_though_two_others_agree() {
    let mut farm = Cluster::builder()
        .workers(3)
        .started(1)
        .coordinator_args(["--trust", "proven"])
        .roots_in_work_dirs()
        .start();
    // w1 writes `one`: the ledger holds that fingerprint for the key.
    let (_, first) = ci_run(&farm, &by_worker(), &[]);
    assert_eq!(worker_of(&first, "p#det"), "w1", "{first}");
    assert_eq!(cache_word(&first, "p#det"), "saved", "{first}");

    // w1 leaves for good; w2 and w3 (both writing `other`) join a restarted coordinator, so
    // the verify run's execution and its re-run are on the two of them.
    farm.kill_worker(0);
    farm.start_worker(1);
    farm.start_worker(2);
    farm.restart_coordinator();
    let (_, proof) = ci_run(&farm, &by_worker(), &["--verify"]);
    assert_ne!(worker_of(&proof, "p#det"), "w1", "{proof}");
    let v = only_verdict(&proof, "p#det");
    assert_eq!(name(&v), "proven-deterministic", "w2 and w3 agree\n{proof}");
    assert_ne!(v["rerun_worker"], "w1", "{proof}");

    // Two workers agree on `other`, but w1 produced `one` for the same key: not a proof.
    let (counts, stats) = tiers(&farm);
    assert_eq!(counts.0, 0, "promoted despite a disagreeing fingerprint\n{stats}");
    let (fresh_ws, fresh) = ci_run(&farm, &by_worker(), &[]);
    assert_ne!(cache_word(&fresh, "p#det"), "hit", "served to a fresh clone\n{fresh}");
    assert_eq!(fresh_ws.read("p/out/det.txt"), "other\n", "{fresh}");
}

#[test]
fn an_entry_saved_under_the_default_trust_mode_is_not_served_under_trust_proven() {
    let mut farm = Cluster::builder().workers(1).start();
    let (_, first) = ci_run(&farm, &det(), &[]);
    assert_eq!(cache_word(&first, "p#det"), "saved", "{first}");
    assert_eq!(tiers(&farm).0, (1, 0), "the default mode trusts at once");
    // It is served under the default mode...
    let (_, hit) = ci_run(&farm, &det(), &[]);
    assert_eq!(cache_word(&hit, "p#det"), "hit", "{hit}");

    // ...but nothing proved it: under --trust proven the re-run executes.
    farm.set_coordinator_args(["--trust", "proven"]);
    farm.restart_coordinator();
    let (ws, again) = ci_run(&farm, &det(), &[]);
    assert_eq!(cache_word(&again, "p#det"), "saved", "an unproven entry was served\n{again}");
    assert_eq!(ws.read("p/out/det.txt"), "hello\n", "{again}");
    let (counts, stats) = tiers(&farm);
    assert_eq!(counts, (0, 1), "(trusted, pending): it waits for a proof\n{stats}");
    // A second look is still a miss (the same worker agreeing with itself proves nothing).
    let (_, third) = ci_run(&farm, &det(), &[]);
    assert_ne!(cache_word(&third, "p#det"), "hit", "{third}");
}

#[test]
fn two_agreeing_workers_promote_and_a_fresh_clone_hits() {
    let farm = Cluster::builder().workers(2).coordinator_args(["--trust", "proven"]).start();
    let (_, proof) = ci_run(&farm, &det(), &["--verify"]);
    let v = only_verdict(&proof, "p#det");
    assert_eq!(name(&v), "proven-deterministic", "{proof}");
    assert_eq!(v["single_machine"], false, "{proof}");
    let (counts, stats) = tiers(&farm);
    assert_eq!(counts, (1, 0), "(trusted, pending)\n{stats}");

    let (ws, hit) = ci_run(&farm, &det(), &[]);
    assert_eq!(cache_word(&hit, "p#det"), "hit", "{hit}");
    assert_eq!(hit.report("p#det")["cache"]["layer"], "farm", "{hit}");
    assert_eq!(ws.read("p/out/det.txt"), "hello\n");
    // A proven entry stays proven across a restart (the probe re-checks the ledger).
    let mut farm = farm;
    farm.restart_coordinator();
    let (_, again) = ci_run(&farm, &det(), &[]);
    assert_eq!(cache_word(&again, "p#det"), "hit", "{again}");
}

#[test]
fn a_promoted_entry_whose_key_disagrees_later_is_no_longer_served() {
    // `one` on w3, `other` elsewhere; w1 and w2 prove `other` first.
    let by_w3 = || by_worker().replace("*/workers/w1/*", "*/workers/w3/*");
    let mut farm = Cluster::builder()
        .workers(3)
        .started(2)
        .coordinator_args(["--trust", "proven"])
        .roots_in_work_dirs()
        .start();
    let (_, proof) = ci_run(&farm, &by_w3(), &["--verify"]);
    assert_eq!(name(&only_verdict(&proof, "p#det")), "proven-deterministic", "{proof}");
    assert_eq!(tiers(&farm).0, (1, 0), "(trusted, pending): w1 and w2 agreed");

    // Later w3, alone on the farm, executes the same key and gets another fingerprint.
    farm.kill_worker(0);
    farm.kill_worker(1);
    farm.start_worker(2);
    farm.restart_coordinator();
    let (_, forced) = ci_run(&farm, &by_w3(), &["--force"]);
    assert_eq!(worker_of(&forced, "p#det"), "w3", "{forced}");
    let (counts, stats) = tiers(&farm);
    assert_eq!(counts.0, 0, "still trusted though its key disagreed since\n{stats}");
    let (_, fresh) = ci_run(&farm, &by_w3(), &[]);
    assert_ne!(cache_word(&fresh, "p#det"), "hit", "served after a disagreement\n{fresh}");
}
