//! Operating a farm from the terminal (issue 17, beside farm_ops.rs): `farm status` names the coordinator's
//! version, uptime, cache and hit rate and each worker's version; a certificate that does not
//! name the host dialled is an error that says which `--san` to issue (and `--server-name`
//! is the way around it, for clients as for workers); `--log-format json` makes every log
//! line of a daemon one JSON object.

use prova_tests::cluster::{Cluster, Sandbox};
use prova_tests::verify::{task, workspace};
use prova_tests::{ProvaCmd, TempWorkspace};
use serde_json::Value;

fn one_task() -> TempWorkspace {
    workspace(&task("one", "mkdir -p out && cat src/a.txt > out/one.txt", &["out/one.txt"]))
}

fn status_as(farm: &Cluster, extra: &[&str]) -> prova_tests::Output {
    let mut args = vec!["farm".to_owned(), "status".to_owned()];
    args.extend(farm.remote_args(&farm.ci_certs()));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    ProvaCmd::new(farm.root(), args).run()
}

#[test]
fn farm_status_names_the_coordinator_its_cache_and_hit_rate() {
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::None).start();
    let st = farm.status();
    let c = &st["coordinator"];
    assert!(c["version"].as_str().is_some_and(|v| v.starts_with("prova ")), "{st}");
    assert!(c["uptime_secs"].is_u64(), "{st}");
    assert_eq!((c["hits"].as_u64(), c["misses"].as_u64()), (Some(0), Some(0)), "{st}");
    assert_eq!(st["workers"][0]["version"], c["version"], "the worker's build: {st}");

    farm.run(&one_task(), ["one", "--all"]).assert_code(0);
    farm.run(&one_task(), ["one", "--all"]).assert_code(0); // a fresh checkout: a farm hit
    let st = farm.status();
    let c = &st["coordinator"];
    assert_eq!((c["hits"].as_u64(), c["misses"].as_u64()), (Some(1), Some(1)), "{st}");
    assert_eq!(c["cache_entries"].as_u64(), Some(1), "{st}");
    assert!(c["cache_bytes"].as_u64().is_some_and(|b| b > 0), "{st}");

    let text = status_as(&farm, &[]);
    text.assert_code(0);
    let first = text.stdout.lines().next().unwrap_or_default();
    assert!(first.starts_with("coordinator prova "), "{text}");
    assert!(first.contains("cache 1 entries") && first.contains("hit rate 50% (1 of 2)"), "{text}");
}

#[test]
fn a_certificate_without_the_dialled_name_says_which_san_to_issue() {
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::None).start();
    // The coordinator's certificate names localhost and 127.0.0.1, not this.
    let wrong = status_as(&farm, &["--server-name", "coord.elsewhere.test"]);
    assert_eq!(wrong.code(), Some(2), "{wrong}");
    assert!(
        wrong.stderr.contains("does not name `coord.elsewhere.test`")
            && wrong.stderr.contains("--san coord.elsewhere.test")
            && wrong.stderr.contains("--server-name"),
        "{wrong}"
    );
    assert_eq!(wrong.stderr.lines().count(), 1, "one line: {wrong}");
    // A name it does carry, however the address was written.
    status_as(&farm, &["--server-name", "localhost"]).assert_code(0);
    // The same for a run (and not a fallback: it answered, and refused).
    let ws = one_task();
    let mut args = vec!["run".to_owned(), "one".to_owned(), "--all".to_owned()];
    args.extend(farm.remote_args(&farm.ci_certs()));
    args.extend(["--server-name".to_owned(), "coord.elsewhere.test".to_owned()]);
    args.extend(["--fallback".to_owned(), "local".to_owned()]);
    let run = ws.prova(args).run();
    assert_eq!(run.code(), Some(2), "{run}");
    assert!(run.stderr.contains("--san coord.elsewhere.test"), "{run}");
    assert!(!ws.path("p/out/one.txt").exists(), "nothing ran locally");
}

#[test]
fn log_format_json_makes_every_daemon_line_an_object() {
    let farm = Cluster::builder()
        .workers(1)
        .sandbox(Sandbox::None)
        .coordinator_args(["--log-format", "json"])
        .start();
    farm.run(&one_task(), ["one", "--all"]).assert_code(0);
    let log = farm.coordinator_log();
    let lines: Vec<Value> = log
        .lines()
        // The harness marks each start of the daemon with a `--- start N` line of its own.
        .filter(|l| !l.trim().is_empty() && !l.starts_with("--- start "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{log}")))
        .collect();
    let joined = lines
        .iter()
        .find(|l| l["message"] == "worker joined")
        .unwrap_or_else(|| panic!("no worker joined line\n{log}"));
    assert_eq!(joined["level"], "INFO", "{joined}");
    assert!(joined["timestamp"].is_string() && joined["worker"].is_string(), "{joined}");
    assert!(joined["version"].as_str().is_some_and(|v| v.starts_with("prova ")), "{joined}");
    assert!(joined.get("spans").is_none(), "no actor internals: {joined}");
    assert!(lines.iter().any(|l| l["message"] == "run started"), "{log}");
    assert!(lines.iter().any(|l| l["message"] == "run finished"), "{log}");
}
