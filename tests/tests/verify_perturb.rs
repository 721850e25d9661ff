//! The determinism re-run's perturbations, end to end on the real binary: each one catches a
//! task whose output depends on it (the wall clock at second resolution, the CPU count,
//! directory listing order, `TMPDIR`, the locale, `SOURCE_DATE_EPOCH`, an output mode), none
//! breaks a correct task (`whoami`), every verdict lists what it perturbed (`--json` and
//! text), and a re-run that fails says so with its log's tail — never "flaky".

use prova_tests::verify::{hermeticity, name, only_verdict, prova, task, workspace};
use serde_json::Value;

/// The names of the perturbations a verdict says it applied.
fn applied(v: &Value) -> Vec<String> {
    v["perturbations"]["applied"]
        .as_array()
        .unwrap_or_else(|| panic!("no perturbations in {v}"))
        .iter()
        .filter_map(|p| p["what"].as_str().map(str::to_owned))
        .collect()
}

/// The detail of applied perturbation `what`.
fn detail(v: &Value, what: &str) -> String {
    v["perturbations"]["applied"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["what"] == what))
        .and_then(|p| p["detail"].as_str())
        .unwrap_or_else(|| panic!("{what} not applied: {v}"))
        .to_owned()
}

/// Runs `task_toml`'s task `t` with `--verify --json`, expecting exit `code`; its verdict.
fn verify(ws: &prova_tests::TempWorkspace, t: &str, code: i32) -> (Value, prova_tests::Output) {
    let out = prova(ws, ["run", t, "--all", "--verify", "--json"]).run();
    out.assert_code(code);
    let v = only_verdict(&out, &format!("p#{t}"));
    (v, out)
}

fn libfaketime_installed() -> bool {
    let dirs = ["/usr/lib/faketime", "/usr/lib64/faketime", "/usr/local/lib/faketime"];
    let mut found = dirs.iter().any(|d| std::path::Path::new(d).join("libfaketime.so.1").is_file());
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        found |= rd.flatten().any(|e| e.path().join("faketime/libfaketime.so.1").is_file());
    }
    found
}

#[test]
fn a_task_writing_the_time_in_seconds_is_caught_by_the_shifted_clock() {
    if !libfaketime_installed() {
        prova_tests::skip_for_missing("libfaketime is not installed (apt-get install faketime)");
        return;
    }
    let ws = workspace(&task("secs", "mkdir -p out && date +%s > out/secs.txt", &["out/secs.txt"]));
    let (v, out) = verify(&ws, "secs", 1);
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/secs.txt"]), "{v}");
    assert_eq!(detail(&v, "clock"), "+7d (libfaketime)", "{v}");
    // Seven days apart, give or take the seconds between the runs.
    let first: i64 = ws.read("p/out/secs.txt").trim().parse().expect("seconds");
    let diff = v["files"][0]["diff"].as_str().unwrap_or_default();
    let rerun: i64 = diff
        .lines()
        .find_map(|l| l.strip_prefix('+').filter(|l| !l.starts_with("++")))
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no re-run line in {diff}"));
    assert!((rerun - first - 7 * 86_400).abs() < 3_600, "{first} → {rerun}");
}

#[test]
fn a_task_writing_the_cpu_count_is_caught() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ws = workspace(&task("cpus", "mkdir -p out && nproc > out/n.txt", &["out/n.txt"]));
    if cpus < 2 {
        let (v, out) = verify(&ws, "cpus", 0);
        let skipped = v["perturbations"]["not_applied"].to_string();
        assert!(skipped.contains("one CPU"), "a one-CPU machine says it could not: {v}\n{out}");
        eprintln!("skipped: this machine has one CPU");
        return;
    }
    let (v, out) = verify(&ws, "cpus", 1);
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/n.txt"]), "{v}");
    assert_eq!(detail(&v, "cpus"), format!("1 of {cpus}"), "{v}");
    assert_eq!(ws.read("p/out/n.txt").trim(), cpus.to_string());
}

#[test]
fn a_task_writing_an_unsorted_directory_listing_is_caught() {
    let mut ws = prova_tests::TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file(
            "p/prova.toml",
            "[tasks.ls]\ncommand = \"mkdir -p out && ls -U src > out/ls.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"out/ls.txt\"]\n",
        );
    for i in 0..12 {
        ws = ws.file(&format!("p/src/f{i:02}.txt"), &format!("{i}\n"));
    }
    let out = prova(&ws, ["run", "ls", "--all", "--verify", "--json"]).run();
    let v = only_verdict(&out, "p#ls");
    if !applied(&v).contains(&"dir-order".to_owned()) {
        eprintln!("skipped: no tmpfs for the re-run's exec root here: {v}");
        return;
    }
    out.assert_code(1);
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/ls.txt"]), "{v}");
}

#[test]
fn a_task_writing_its_tmpdir_is_caught() {
    let ws = workspace(&task("tmp", "mkdir -p out && echo $TMPDIR > out/t.txt", &["out/t.txt"]));
    let (v, out) = verify(&ws, "tmp", 1);
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/t.txt"]), "{v}");
    assert!(detail(&v, "tmpdir").contains("rerun-tmp"), "{v}");
}

#[test]
fn a_task_whose_sort_depends_on_the_locale_is_caught() {
    let ws = workspace(&task("sort", "mkdir -p out && sort src/w.txt > out/s.txt", &["out/s.txt"]))
        .file("p/src/w.txt", "a\nB\n_c\nD\n");
    // The workspace's inputs are src/a.txt only: declare the word list.
    let toml = ws.read("p/prova.toml").replace("[\"src/a.txt\"]", "[\"src/w.txt\"]");
    ws.write("p/prova.toml", &toml);
    let out = prova(&ws, ["run", "sort", "--all", "--verify", "--json"]).run();
    let v = only_verdict(&out, "p#sort");
    let locale = detail(&v, "locale");
    let collating = !["POSIX", "C", "C.UTF-8"].iter().any(|l| l.eq_ignore_ascii_case(&locale));
    if !collating {
        prova_tests::skip_for_missing(&format!(
            "no collating locale is generated here (the re-run used {locale})"
        ));
        return;
    }
    out.assert_code(1);
    assert_eq!(name(&v), "nondeterministic", "{out}");
    assert_eq!(v["changed"], serde_json::json!(["p/out/s.txt"]), "{v}");
}

#[test]
fn a_task_that_asks_whoami_is_proven_and_the_verdict_lists_its_perturbations() {
    let cmd =
        "whoami > /dev/null && hostname > /dev/null && mkdir -p out && cat src/a.txt > out/w.txt";
    let ws = workspace(&task("who", cmd, &["out/w.txt"]));
    let (v, out) = verify(&ws, "who", 0);
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    let got = applied(&v);
    for want in [
        "umask",
        "tz",
        "locale",
        "user",
        "env-order",
        "exec-root-path",
        "tmpdir",
        "source-date-epoch",
    ] {
        assert!(got.contains(&want.to_owned()), "{want} missing from {got:?}");
    }
    // The text form says how many in its one line (a passed proof is one line; the list is
    // in --json, above, and under a failed proof).
    let text = prova(&ws, ["run", "who", "--all", "--force", "--verify"]).run();
    text.assert_code(0);
    let s = &text.stdout;
    let count = format!("{} perturbations", got.len());
    assert!(s.contains("verify: proven deterministic") && s.contains(&count), "{count}: {s}");
}

#[test]
fn a_task_depending_on_source_date_epoch_fails_its_rerun_with_the_log_tail() {
    let cmd = "test -z $SOURCE_DATE_EPOCH || { echo refusing: SOURCE_DATE_EPOCH is set; exit 3; } && mkdir -p out && cat src/a.txt > out/e.txt";
    let ws = workspace(&task("epoch", cmd, &["out/e.txt"]));
    let (v, out) = verify(&ws, "epoch", 1);
    assert_eq!(name(&v), "rerun-failed", "{out}");
    assert_eq!(v["reason"], "exit code 3", "{v}");
    assert_eq!(v["log_tail"], serde_json::json!(["refusing: SOURCE_DATE_EPOCH is set"]), "{v}");
    assert_eq!(detail(&v, "source-date-epoch"), "1000000000", "{v}");
    let text = prova(&ws, ["run", "epoch", "--all", "--force", "--verify"]).run();
    text.assert_code(1);
    let s = &text.stdout;
    assert!(s.contains("re-run FAILED under its perturbations"), "{s}");
    assert!(s.contains("| refusing: SOURCE_DATE_EPOCH is set"), "{s}");
    assert!(s.contains("source-date-epoch 1000000000"), "{s}");
    assert!(!s.to_lowercase().contains("flaky"), "a re-run failure is not flakiness: {s}");
    // Nor in the ledger's report: it is listed as a perturbed re-run failure.
    let (h, report) = hermeticity(&ws);
    let k = &report["keys"][0];
    assert_eq!(k["task"], "p#epoch", "{h}");
    assert_eq!(k["flaky"], false, "{h}");
    assert_eq!(k["rerun_failed_on"], serde_json::json!(["local"]), "{h}");
    assert_eq!(k["failed_on"], serde_json::json!([]), "{h}");
    let text = ws.prova(["hermeticity"]).run();
    assert!(text.stdout.contains("a perturbed re-run failed on local"), "{text}");
    assert!(!text.stdout.contains("flaky"), "{text}");
}

/// A task that fails on its first try and passes on the retry (`retries = 1`): the counter
/// file lives outside the project, so it outlives the tries.
fn flaky_workspace() -> prova_tests::TempWorkspace {
    prova_tests::TempWorkspace::new()
        .file("prova.toml", "[workspace]\nprojects = [\"p\"]\n")
        .file("p/src/a.txt", "hello\n")
        .file(
            "p/prova.toml",
            "[tasks.flaky]\ncommand = \"n=$(cat ../count 2>/dev/null || echo 0); n=$((n + 1)); \
             echo $n > ../count; echo try $n; mkdir -p out && cat src/a.txt > out/f.txt; [ $n -ge 2 ]\"\n\
             inputs = [\"src/a.txt\"]\noutputs = [\"out/f.txt\"]\nretries = 1\n",
        )
}

#[test]
fn a_task_that_passes_on_a_retry_is_recorded_flaky() {
    let ws = flaky_workspace();
    let out = ws.prova(["run", "flaky", "--all", "--json"]).run();
    out.assert_code(0);
    assert_eq!(out.report("p#flaky")["attempts"], 2, "{out}");
    let (h, report) = hermeticity(&ws);
    h.assert_code(1);
    let keys = report["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1, "{h}");
    let k = &keys[0];
    assert_eq!(k["task"], "p#flaky", "{h}");
    assert_eq!(k["flaky"], true, "{h}");
    assert_eq!(k["nondeterministic"], false, "{h}");
    assert_eq!(k["retried_on"], serde_json::json!(["local"]), "{h}");
    assert_eq!(k["failed_tries"], 1, "{h}");
    let text = ws.prova(["hermeticity"]).run();
    text.assert_code(1);
    assert!(text.stdout.contains("p#flaky (flaky)"), "{text}");
    assert!(text.stdout.contains("1 failed try, then passed on a retry on local"), "{text}");
    assert!(!text.stdout.contains("every recorded execution agrees"), "{text}");
}

#[test]
fn a_task_that_passes_first_time_is_not_flaky() {
    let ws = flaky_workspace();
    ws.write("count", "5\n");
    ws.prova(["run", "flaky", "--all"]).run().assert_code(0);
    let (h, report) = hermeticity(&ws);
    h.assert_code(0);
    assert_eq!(report["keys"], serde_json::json!([]), "{h}");
}

#[test]
fn a_declared_source_date_epoch_is_left_alone() {
    let cmd = "mkdir -p out && echo $SOURCE_DATE_EPOCH > out/e.txt";
    let ws = workspace(&prova_tests::verify::task_with(
        "epoch",
        cmd,
        &["out/e.txt"],
        "env = [\"SOURCE_DATE_EPOCH\"]",
    ));
    let (v, out) = verify(&ws, "epoch", 0);
    assert_eq!(name(&v), "proven-deterministic", "{out}");
    assert!(!applied(&v).contains(&"source-date-epoch".to_owned()), "{v}");
}

#[test]
fn an_output_mode_that_differs_beyond_the_umask_is_named() {
    let cmd = "mkdir -p out && cat src/a.txt > out/m.txt && case $USER in prova-rerun) chmod 444 out/m.txt;; esac";
    let ws = workspace(&task("mode", cmd, &["out/m.txt"]));
    let (v, out) = verify(&ws, "mode", 1);
    assert_eq!(name(&v), "nondeterministic", "{out}");
    let first = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(ws.path("p/out/m.txt")).expect("output").permissions().mode() & 0o7777
    };
    assert_eq!(
        v["modes"],
        serde_json::json!([{"path": "p/out/m.txt", "modes": [first, 0o444]}]),
        "{v}\n{out}"
    );
    let text = prova(&ws, ["run", "mode", "--all", "--force", "--verify"]).run();
    text.assert_code(1);
    let s = &text.stdout;
    assert!(s.contains(&format!("mode: p/out/m.txt {first:04o} → 0444")), "{s}");
}
