//! The determinism proof (`--verify`, `--verify=determinism`) in local mode, on the real
//! binary: a task that executed is executed again in a second exec root at another path,
//! under a perturbed environment (hostname, user, `TZ`, locale, umask, environment order),
//! and the two output trees are compared by content. The canonical (first) bytes stay; the
//! re-run is never saved; `--verify` never changes a key.

use prova_tests::verify::{
    cache_word, has_verify_line, key, name, only_verdict, path_with_failing, prova,
    sandbox_or_skip, task, task_with, verdict_events, verdict_names, verdicts, verify_line,
    workspace,
};
use serde_json::Value;

/// Writes its input: a pure function of `src/a.txt`.
fn det() -> String {
    task("det", "mkdir -p out && cat src/a.txt > out/det.txt", &["out/det.txt"])
}

/// Appends the current time (nanoseconds) to its output.
fn clock() -> String {
    task("clock", "mkdir -p out && date +%s%N >> out/clock.txt", &["out/clock.txt"])
}

/// Reads its input, writes nothing: a lint.
fn lint() -> String {
    task("lint", "cat src/a.txt", &[])
}

/// Asserts `v` is a `nondeterministic` verdict of the local re-run whose only difference is
/// the changed file `path` (workspace-relative), with a unified diff whose first-run side is
/// `canonical` — the bytes in the workspace. Returns the diff.
#[track_caller]
fn assert_changed(v: &Value, path: &str, canonical: &str, out: &prova_tests::Output) -> String {
    assert_eq!(name(v), "nondeterministic", "{v}\n{out}");
    assert_eq!(v["changed"], serde_json::json!([path]), "{v}\n{out}");
    assert_eq!(v["added"], serde_json::json!([]), "{v}\n{out}");
    assert_eq!(v["removed"], serde_json::json!([]), "{v}\n{out}");
    assert_eq!(v["single_machine"], true, "local mode re-runs on the same machine: {v}");
    assert_eq!(v["rerun_worker"], "local", "{v}");
    let files = v["files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{v}");
    assert_eq!(files[0]["path"], path, "{v}");
    let diff = files[0]["diff"].as_str().unwrap_or_else(|| panic!("a text file has a diff: {v}"));
    let head = format!("--- {path} (first run)\n+++ {path} (re-run)\n@@ -1 +1 @@\n");
    assert!(diff.starts_with(&head), "not a unified diff of {path}:\n{diff}");
    let lines: Vec<&str> = diff.lines().collect();
    assert_eq!(lines.len(), 5, "one line changed:\n{diff}");
    assert_eq!(lines[3], format!("-{}", canonical.trim_end()), "the first run's line:\n{diff}");
    assert!(lines[4].starts_with('+') && lines[4][1..] != lines[3][1..], "{diff}");
    diff.to_owned()
}

#[test]
fn a_deterministic_task_is_proven_on_a_single_machine() {
    let ws = workspace(&det());
    // `--verify` before the task names takes no value from them.
    let out = prova(&ws, ["run", "--verify", "det", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.summary()["ok"], true, "{out}");
    assert_eq!(cache_word(&out, "p#det"), "saved", "{out}");
    let v = only_verdict(&out, "p#det");
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    assert_eq!(v["single_machine"], true, "{out}");
    assert_eq!(v["rerun_worker"], "local", "{out}");
    // The stream announces the same verdict.
    assert_eq!(verdict_events(&out, "p#det"), vec![v], "{out}");
    assert_eq!(ws.read("p/out/det.txt"), "hello\n");
}

#[test]
fn a_task_that_appends_the_time_is_nondeterministic_naming_the_path() {
    let ws = workspace(&format!("{}{}", clock(), det()));
    let out = prova(&ws, ["run", "clock", "det", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let summary = out.summary();
    assert_eq!(summary["ok"], false, "a failed proof turns the run red\n{out}");
    // The task itself succeeded and was saved: the proof, not the task, failed.
    assert_eq!(out.status_of("p#clock"), "succeeded", "{out}");
    assert_eq!(cache_word(&out, "p#clock"), "saved", "{out}");
    let canonical = ws.read("p/out/clock.txt");
    let v = only_verdict(&out, "p#clock");
    assert_changed(&v, "p/out/clock.txt", &canonical, &out);
    assert_eq!(verdict_names(&out, "p#det"), ["proven-deterministic"], "{out}");
    assert_eq!(verdict_events(&out, "p#clock"), vec![v], "{out}");

    // The text run: the stream shows the diff, the summary a Verify line naming the task.
    let text = prova(&ws, ["run", "clock", "det", "--all", "--force", "--verify"]).run();
    text.assert_code(1);
    assert_eq!(verify_line(&text), "Verify:  1 proven deterministic · 1 nondeterministic");
    text.assert_stdout_contains("✗ p#clock — nondeterministic: changed: p/out/clock.txt");
    let lines = text.task_lines("p#clock");
    assert!(
        lines.iter().any(|l| l.starts_with("verify: NONDETERMINISTIC")),
        "no verdict line for p#clock\n{text}"
    );
    assert!(lines.iter().any(|l| l.trim() == "--- p/out/clock.txt (first run)"), "{text}");
    assert!(!text.stdout.contains("✗ p#det"), "{text}");
}

#[test]
fn a_task_without_outputs_gets_no_outputs() {
    let ws = workspace(&lint());
    let out = prova(&ws, ["run", "lint", "--all", "--verify", "--json"]).run();
    out.assert_code(0);
    assert_eq!(verdict_names(&out, "p#lint"), ["no-outputs"], "{out}");
    assert_eq!(out.report("p#lint")["attempts"], 1, "{out}");
    let text = prova(&ws, ["run", "lint", "--all", "--force", "--verify"]).run();
    text.assert_code(0);
    assert_eq!(verify_line(&text), "Verify:  1 no outputs");
}

#[test]
fn verify_allow_greens_only_the_listed_task() {
    let clock2 = task("clock2", "mkdir -p out && date +%s%N > out/clock2.txt", &["out/clock2.txt"]);
    let ws = workspace(&format!("{}{clock2}", clock()));

    let out =
        prova(&ws, ["run", "clock", "--all", "--verify", "--verify-allow", "p#clock", "--json"])
            .run();
    out.assert_code(0);
    assert_eq!(out.summary()["ok"], true, "{out}");
    let v = only_verdict(&out, "p#clock");
    assert_eq!(name(&v), "allowed-nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/clock.txt"]), "{out}");
    assert!(v["files"][0]["diff"].is_string(), "the divergence is still reported: {v}");

    // Another nondeterministic task in the same run still fails it.
    let out = prova(
        &ws,
        ["run", "clock", "clock2", "--all", "--force", "--verify", "--verify-allow", "p#clock"],
    )
    .run();
    out.assert_code(1);
    assert_eq!(verify_line(&out), "Verify:  1 nondeterministic · 1 allowed nondeterministic");
    out.assert_stdout_contains("✗ p#clock2 — nondeterministic: changed: p/out/clock2.txt");
    assert!(!out.stdout.contains("✗ p#clock "), "an allowed task is not a failure\n{out}");
    assert!(
        out.task_lines("p#clock").iter().any(|l| l.contains("allowed by --verify-allow")),
        "{out}"
    );

    // A name that is not in the run is a usage error, not a silent no-op.
    let bad = prova(&ws, ["run", "clock", "--all", "--verify", "--verify-allow", "p#nope"]).run();
    bad.assert_code(2);
    bad.assert_stderr_contains("p#nope");
}

/// The reports of `tasks` as (task, cache word, key, verdict names).
fn shape(out: &prova_tests::Output, tasks: &[&str]) -> Vec<(String, String, String, Vec<String>)> {
    tasks
        .iter()
        .map(|t| ((*t).to_owned(), cache_word(out, t), key(out, t), verdict_names(out, t)))
        .collect()
}

#[test]
fn a_verify_run_hits_a_plain_runs_entries_with_the_same_keys() {
    let tasks = ["p#clock", "p#det", "p#lint"];
    let ws = workspace(&format!("{}{}{}", clock(), det(), lint()));
    let plain = prova(&ws, ["run", "clock", "det", "lint", "--all", "--json"]).run();
    plain.assert_code(0);
    for t in tasks {
        assert_eq!(cache_word(&plain, t), "saved", "{plain}");
        assert!(verdicts(&plain, t).is_empty(), "a plain run proves nothing\n{plain}");
    }
    assert!(!plain.events().iter().any(|e| e["event"] == "verdict"), "{plain}");
    let before = ws.read("p/out/clock.txt");

    let verify = prova(&ws, ["run", "clock", "det", "lint", "--all", "--verify", "--json"]).run();
    verify.assert_code(0);
    for t in tasks {
        assert_eq!(cache_word(&verify, t), "hit", "{verify}");
        assert_eq!(key(&verify, t), key(&plain, t), "--verify changed the key of {t}");
        let v = only_verdict(&verify, t);
        assert_eq!(name(&v), "not-verified", "{verify}");
        assert!(v["reason"].as_str().is_some_and(|r| r.contains("--force")), "{v}");
    }
    assert_eq!(ws.read("p/out/clock.txt"), before, "a hit restores the saved bytes");

    let text = prova(&ws, ["run", "clock", "det", "lint", "--all", "--verify"]).run();
    text.assert_code(0);
    assert_eq!(verify_line(&text), "Verify:  3 not verified");
}

#[test]
fn a_plain_run_hits_a_verify_runs_entries_with_the_same_keys() {
    let tasks = ["p#clock", "p#det", "p#lint"];
    let ws = workspace(&format!("{}{}{}", clock(), det(), lint()));
    let verify = prova(&ws, ["run", "clock", "det", "lint", "--all", "--verify", "--json"]).run();
    verify.assert_code(1);
    let plain = prova(&ws, ["run", "clock", "det", "lint", "--all", "--json"]).run();
    plain.assert_code(0);
    for t in tasks {
        assert_eq!(cache_word(&verify, t), "saved", "{verify}");
        assert_eq!(cache_word(&plain, t), "hit", "{plain}");
        assert_eq!(key(&plain, t), key(&verify, t), "--verify changed the key of {t}");
        assert!(verdicts(&plain, t).is_empty(), "{plain}");
    }
    // `--verify-allow` is not part of a key either.
    let allowed =
        prova(&ws, ["run", "clock", "det", "lint", "--all", "--verify-allow", "p#clock", "--json"])
            .run();
    allowed.assert_code(0);
    assert_eq!(shape(&allowed, &tasks), shape(&plain, &tasks));
    // A plain text run has no Verify section.
    let text = prova(&ws, ["run", "clock", "det", "lint", "--all"]).run();
    text.assert_code(0);
    assert!(!has_verify_line(&text), "{text}");
}

#[test]
fn force_verify_re_executes_and_verifies_a_warm_graph() {
    let ws = workspace(&format!("{}{}{}", clock(), det(), lint()));
    let plain = prova(&ws, ["run", "clock", "det", "lint", "--all", "--json"]).run();
    plain.assert_code(0);
    let warm = prova(&ws, ["run", "clock", "det", "lint", "--all", "--verify", "--json"]).run();
    warm.assert_code(0);
    for t in ["p#clock", "p#det", "p#lint"] {
        assert_eq!(verdict_names(&warm, t), ["not-verified"], "{warm}");
        assert_eq!(warm.report(t)["attempts"], 0, "a hit does not run\n{warm}");
    }

    let forced =
        prova(&ws, ["run", "clock", "det", "lint", "--all", "--force", "--verify", "--json"]).run();
    forced.assert_code(1);
    for t in ["p#clock", "p#det", "p#lint"] {
        assert_eq!(forced.report(t)["attempts"], 1, "--force executes {t}\n{forced}");
        assert_eq!(cache_word(&forced, t), "saved", "{forced}");
        assert_eq!(key(&forced, t), key(&plain, t), "{forced}");
    }
    assert_eq!(verdict_names(&forced, "p#det"), ["proven-deterministic"], "{forced}");
    assert_eq!(verdict_names(&forced, "p#clock"), ["nondeterministic"], "{forced}");
    assert_eq!(verdict_names(&forced, "p#lint"), ["no-outputs"], "{forced}");
}

/// Runs `task` (writing `out/<task>.txt`) with `--verify` and asserts it is caught, the diff
/// showing the workspace's bytes as the first run's. Returns the workspace and the diff.
#[track_caller]
fn assert_caught(tasks_toml: &str, task: &str) -> (prova_tests::TempWorkspace, String) {
    let ws = workspace(tasks_toml);
    let out = prova(&ws, ["run", task, "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let id = format!("p#{task}");
    let path = format!("p/out/{task}.txt");
    let canonical = ws.read(&path);
    let diff = assert_changed(&only_verdict(&out, &id), &path, &canonical, &out);
    (ws, diff)
}

#[test]
fn a_task_embedding_its_working_directory_is_caught() {
    let (ws, diff) =
        assert_caught(&task("cwd", "mkdir -p out && pwd > out/cwd.txt", &["out/cwd.txt"]), "cwd");
    let first = format!("-{}", ws.path("p").display());
    assert!(diff.lines().any(|l| l == first), "the first run ran in the workspace:\n{diff}");
}

#[test]
fn a_task_embedding_the_hostname_is_caught() {
    // The re-run gets another hostname from bubblewrap's UTS namespace.
    if !sandbox_or_skip() {
        return;
    }
    let (ws, _) = assert_caught(
        &task("host", "mkdir -p out && uname -n > out/host.txt", &["out/host.txt"]),
        "host",
    );
    let host = nix::unistd::gethostname().expect("the hostname");
    assert_eq!(ws.read("p/out/host.txt").trim_end(), host.to_string_lossy());
}

#[test]
fn a_task_embedding_the_user_name_is_caught() {
    let (ws, _) = assert_caught(
        &task("user", "mkdir -p out && echo $USER > out/user.txt", &["out/user.txt"]),
        "user",
    );
    assert_eq!(ws.read("p/out/user.txt"), "prova-e2e\n");
}

#[test]
fn a_task_embedding_the_locale_is_caught() {
    let (ws, _) = assert_caught(
        &task("lang", "mkdir -p out && echo $LANG > out/lang.txt", &["out/lang.txt"]),
        "lang",
    );
    assert_eq!(ws.read("p/out/lang.txt"), "C.UTF-8\n");
}

#[test]
fn a_task_depending_on_the_order_of_its_environment_is_caught() {
    // Only the relative order of two variables every task has: the values and the set of
    // names do not change between the runs, the order does. The shell's own environment, as
    // it was exec'ed (what a program that dumps its environment writes; sh rebuilds the one
    // its children get in its own order).
    let cmd = "mkdir -p out && xargs -0 -n1 < /proc/$$/environ | cut -d= -f1 \
               | grep -x -e HOME -e PATH > out/order.txt";
    let ws = workspace(&task("order", cmd, &["out/order.txt"]));
    let out = prova(&ws, ["run", "order", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#order");
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/order.txt"]), "{out}");
    let diff = v["files"][0]["diff"].as_str().unwrap_or_default();
    assert!(diff.contains("-PATH") && diff.contains("+PATH"), "PATH moved past HOME:\n{diff}");
    // The canonical (first) bytes stay: the first run's environment is sorted by name.
    assert_eq!(ws.read("p/out/order.txt"), "HOME\nPATH\n");
}

/// `date -d @0 +%H:%M`: midnight in UTC, something else in most zones. (The re-run's zone
/// comes from the system's tz database, which the sandbox mounts read-only.)
const TZ_COMMAND: &str = "mkdir -p out && date -d @0 +%H:%M > out/tz.txt";

#[test]
fn a_task_reading_an_undeclared_tz_is_caught() {
    let (ws, _) = assert_caught(&task("tz", TZ_COMMAND, &["out/tz.txt"]), "tz");
    assert_eq!(ws.read("p/out/tz.txt"), "00:00\n");
}

#[test]
fn a_task_declaring_tz_is_proven_whether_tz_is_set_or_not() {
    let ws = workspace(&task_with("tz", TZ_COMMAND, &["out/tz.txt"], "env = [\"TZ\"]"));
    let set = prova(&ws, ["run", "tz", "--all", "--verify", "--json"]).run();
    set.assert_code(0);
    assert_eq!(verdict_names(&set, "p#tz"), ["proven-deterministic"], "{set}");
    assert_eq!(ws.read("p/out/tz.txt"), "00:00\n");

    // Unset is a value too: the re-run must not fill it in.
    let unset = prova(&ws, ["run", "tz", "--all", "--verify", "--json"]).env_remove("TZ").run();
    unset.assert_code(0);
    assert_eq!(cache_word(&unset, "p#tz"), "saved", "TZ is part of the key\n{unset}");
    assert_ne!(key(&unset, "p#tz"), key(&set, "p#tz"));
    assert_eq!(verdict_names(&unset, "p#tz"), ["proven-deterministic"], "{unset}");
}

#[test]
fn a_re_run_that_fails_is_rerun_failed() {
    // Succeeds for the invoking user, fails under the re-run's user name.
    let ws = workspace(&task(
        "picky",
        "mkdir -p out && echo ok > out/picky.txt && test x$USER != xprova-rerun",
        &["out/picky.txt"],
    ));
    let out = prova(&ws, ["run", "picky", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    assert_eq!(out.status_of("p#picky"), "succeeded", "{out}");
    let v = only_verdict(&out, "p#picky");
    assert_eq!(name(&v), "rerun-failed", "{out}");
    assert_eq!(v["reason"], "exit code 1", "{out}");
    assert_eq!(ws.read("p/out/picky.txt"), "ok\n");
}

#[test]
fn a_binary_divergence_is_reported_by_sizes_and_digests() {
    let ws = workspace(&task(
        "bin",
        "mkdir -p out && head -c 64 /dev/urandom > out/bin.dat",
        &["out/bin.dat"],
    ));
    let out = prova(&ws, ["run", "bin", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#bin");
    assert_eq!(name(&v), "nondeterministic", "{out}");
    let f = &v["files"][0];
    assert_eq!(f["path"], "p/out/bin.dat", "{v}");
    assert!(f["diff"].is_null(), "no text diff of random bytes: {v}");
    assert_eq!(f["sizes"], serde_json::json!([64, 64]), "{v}");
    let (a, b) = (&f["digests"][0], &f["digests"][1]);
    assert!(a.is_string() && b.is_string() && a != b, "{v}");
}

#[test]
fn a_changed_file_set_is_reported_as_added_and_removed() {
    let ws = workspace(&task(
        "stamp",
        "mkdir -p gen && touch gen/$(date +%s%N).txt && echo fixed > gen/fixed.txt",
        &["gen/**"],
    ));
    let out = prova(&ws, ["run", "stamp", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let v = only_verdict(&out, "p#stamp");
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!([]), "{v}");
    let (added, removed) = (v["added"].as_array().unwrap(), v["removed"].as_array().unwrap());
    assert_eq!((added.len(), removed.len()), (1, 1), "{v}");
    let (added, removed) = (added[0].as_str().unwrap(), removed[0].as_str().unwrap());
    // The first run's file is the one in the workspace; the re-run's is nowhere.
    assert!(ws.exists(removed), "{removed} (first run) is gone from the workspace");
    assert!(!ws.exists(added), "{added} (re-run) leaked into the workspace");
    assert_eq!(ws.read("p/gen/fixed.txt"), "fixed\n");
}

#[test]
fn the_canonical_bytes_stay_after_a_nondeterministic_verdict() {
    let copy = task_with(
        "copy",
        "mkdir -p cp && cp out/clock.txt cp/clock.txt",
        &["cp/**"],
        "deps = [\"clock\"]",
    );
    let ws = workspace(&format!("{}{copy}", clock()));
    let out = prova(&ws, ["run", "copy", "--all", "--verify", "--json"]).run();
    out.assert_code(1);
    let canonical = ws.read("p/out/clock.txt");
    assert_eq!(canonical.lines().count(), 1, "the re-run appended nothing here: {canonical:?}");
    assert_changed(&only_verdict(&out, "p#clock"), "p/out/clock.txt", &canonical, &out);
    // What ran after it read the first run's bytes, and its own re-run got the same ones.
    assert_eq!(ws.read("p/cp/clock.txt"), canonical);
    assert_eq!(verdict_names(&out, "p#copy"), ["proven-deterministic"], "{out}");

    // A plain run hits and leaves the file as it is: the entry holds these bytes.
    let plain = prova(&ws, ["run", "copy", "--all", "--json"]).run();
    plain.assert_code(0);
    assert_eq!(cache_word(&plain, "p#clock"), "hit", "{plain}");
    assert_eq!(ws.read("p/out/clock.txt"), canonical);
    // Restored from the entry into an empty place: the same bytes again.
    std::fs::remove_file(ws.path("p/out/clock.txt")).expect("removing the output");
    let restored = prova(&ws, ["run", "clock", "--all", "--json"]).run();
    restored.assert_code(0);
    assert_eq!(cache_word(&restored, "p#clock"), "hit", "{restored}");
    assert_eq!(ws.read("p/out/clock.txt"), canonical, "the cache entry holds other bytes");
}

#[test]
fn what_cannot_be_proven_is_not_verified_and_counted() {
    let toml = format!(
        "{}{}{}{}{}",
        clock(),
        det(),
        lint(),
        task_with("uncached", "mkdir -p out && date > out/u.txt", &["out/u.txt"], "cache = false"),
        "[tasks.all]\ndeps = [\"clock\", \"det\", \"lint\", \"uncached\"]\n",
    );
    let ws = workspace(&toml);
    let cold = prova(&ws, ["run", "all", "--all", "--verify", "--json"]).run();
    cold.assert_code(1);
    assert_eq!(verdict_names(&cold, "p#all"), ["not-verified"], "a group runs nothing\n{cold}");
    let v = only_verdict(&cold, "p#uncached");
    assert_eq!(name(&v), "not-verified", "{cold}");
    assert!(v["reason"].as_str().is_some_and(|r| r.contains("cache = false")), "{v}");

    let warm = prova(&ws, ["run", "all", "--all", "--verify"]).run();
    warm.assert_code(0);
    assert_eq!(verify_line(&warm), "Verify:  5 not verified");
    let forced = prova(&ws, ["run", "all", "--all", "--verify", "--force"]).run();
    forced.assert_code(1);
    assert_eq!(
        verify_line(&forced),
        "Verify:  1 proven deterministic · 1 nondeterministic · 1 no outputs · 2 not verified"
    );

    // --no-cache saves nothing, so there is nothing to prove.
    let none = prova(&ws, ["run", "clock", "--all", "--verify", "--no-cache", "--json"]).run();
    none.assert_code(0);
    let v = only_verdict(&none, "p#clock");
    assert_eq!(name(&v), "not-verified", "{none}");
    assert!(v["reason"].as_str().is_some_and(|r| r.contains("--no-cache")), "{v}");
}

#[test]
fn without_the_sandbox_the_determinism_proof_says_what_it_cannot_perturb() {
    // bubblewrap is what gives the re-run another hostname and user id; without it a task
    // reading them cannot be caught, and the run must say so rather than prove it silently.
    let (_bin, path) = path_with_failing(&["bwrap"]);
    let ws = workspace(&task("host", "mkdir -p out && uname -n > out/host.txt", &["out/host.txt"]));
    let out = prova(&ws, ["run", "host", "--all", "--verify", "--json"]).env("PATH", &path).run();
    let warned = out.events().iter().any(|e| {
        e["event"] == "notice"
            && e["level"] == "warn"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("sandbox") && m.contains("hostname"))
    });
    assert!(warned, "no warning that the hostname was not perturbed\n{out}");
}
