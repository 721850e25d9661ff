//! The coordinator's HTTP listener on a real farm (subprocesses): `/metrics` counts what a run
//! did (tasks, cache misses then hits, runs, bytes) and passes `promtool check metrics`;
//! `/healthz` and `/readyz` answer JSON; a listener bound off 127.0.0.1 asks for its bearer
//! token on everything but the probes (`/healthz`, `/readyz`), and without a token file the coordinator refuses to
//! start.

use prova_tests::ProvaCmd;
use prova_tests::cluster::{Cluster, Sandbox};
use prova_tests::http::{get, promtool_check, sample, tool};
use prova_tests::verify::{task, workspace};
use serde_json::Value;

fn two_tasks() -> String {
    format!(
        "{}{}",
        task("one", "mkdir -p out && cat src/a.txt > out/one.txt", &["out/one.txt"]),
        task("two", "mkdir -p out && echo two > out/two.txt", &["out/two.txt"])
    )
}

#[track_caller]
fn metric(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series}\n{text}"))
}

#[test]
fn metrics_move_by_what_a_run_did() {
    let farm = Cluster::builder()
        .workers(2)
        .sandbox(Sandbox::None)
        .coordinator_args(["--http", "127.0.0.1:0"])
        .start();
    let http = farm.http_addr().expect("the coordinator prints its HTTP address").to_owned();

    let (code, body) = get(&http, "/healthz", None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).ok().map(|v| v["status"].clone()),
        Some("up".into())
    );
    let (code, body) = get(&http, "/readyz", None);
    assert_eq!(code, 200, "{body}");
    let ready: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!((ready["ready"].clone(), ready["cache_open"].clone()), (true.into(), true.into()));

    let (code, before) = get(&http, "/metrics", None);
    assert_eq!(code, 200, "{before}");
    assert_eq!(metric(&before, "prova_workers"), 2.0);
    assert_eq!(metric(&before, "prova_worker_slots{state=\"total\"}"), 4.0);
    let succeeded = "prova_tasks_total{outcome=\"succeeded\"}";
    let miss = "prova_cache_lookups_total{tier=\"trusted\",result=\"miss\"}";
    let hit = "prova_cache_lookups_total{tier=\"trusted\",result=\"hit\"}";
    assert_eq!(metric(&before, succeeded), 0.0);
    assert_eq!(metric(&before, "prova_runs_started_total"), 0.0);

    let ws = workspace(&two_tasks());
    farm.run(&ws, ["one", "two", "--all", "--json"]).assert_code(0);
    let (_, after) = get(&http, "/metrics", None);
    assert_eq!(metric(&after, succeeded), 2.0, "{after}");
    assert_eq!(metric(&after, miss), 2.0, "{after}");
    assert_eq!(metric(&after, hit), 0.0, "{after}");
    assert_eq!(metric(&after, "prova_runs_started_total"), 1.0, "{after}");
    assert_eq!(metric(&after, "prova_runs_finished_total"), 1.0, "{after}");
    assert_eq!(metric(&after, "prova_task_duration_seconds_count"), 2.0, "{after}");
    assert!(metric(&after, "prova_artifact_bytes_total{direction=\"in\"}") > 0.0, "{after}");
    assert_eq!(metric(&after, "prova_cache_entries{namespace=\"trusted\"}"), 2.0, "{after}");

    // The same tasks from a fresh checkout (no local cache): two farm hits, nothing executed.
    let fresh = workspace(&two_tasks());
    farm.run(&fresh, ["one", "two", "--all", "--json"]).assert_code(0);
    let (_, again) = get(&http, "/metrics", None);
    assert_eq!(metric(&again, succeeded), 4.0, "{again}");
    assert_eq!(metric(&again, hit), 2.0, "{again}");
    assert_eq!(metric(&again, miss), 2.0, "{again}");
    assert_eq!(metric(&again, "prova_task_duration_seconds_count"), 2.0, "{again}");
    assert_eq!(metric(&again, "prova_runs_finished_total"), 2.0, "{again}");

    // One info line per run start and finish, plain text in a file (stderr is no terminal).
    let log = farm.coordinator_log();
    assert_eq!(log.matches("run started").count(), 2, "{log}");
    assert_eq!(log.matches("run finished").count(), 2, "{log}");
    assert!(log.contains("worker joined"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in a log file\n{log}");

    match tool("promtool") {
        Some(p) => {
            for text in [&before, &after, &again] {
                promtool_check(&p, text).unwrap_or_else(|e| panic!("promtool: {e}\n{text}"));
            }
        }
        None => {
            prova_tests::skip_for_missing("promtool is not on PATH (Debian package prometheus)")
        }
    }
}

#[test]
fn off_loopback_the_token_is_required_and_checked() {
    let secrets = tempfile::tempdir().expect("a temp dir");
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, "tok-3f9a1c7e55b2d094\n").expect("writing the token");
    let farm = Cluster::builder()
        .workers(1)
        .sandbox(Sandbox::None)
        .coordinator_args([
            "--http".to_owned(),
            "127.0.0.2:0".to_owned(),
            "--http-token-file".to_owned(),
            token_file.to_string_lossy().into_owned(),
        ])
        .start();
    let http = farm.http_addr().expect("the coordinator prints its HTTP address").to_owned();
    assert!(http.starts_with("127.0.0.2:"), "{http}");

    for path in ["/metrics", "/api/state", "/api/fragment", "/"] {
        assert_eq!(get(&http, path, None).0, 401, "{path} without a token");
        assert_eq!(
            get(&http, path, Some("tok-3f9a1c7e55b2d095")).0,
            401,
            "{path} with a wrong token"
        );
        assert_eq!(
            get(&http, path, Some("tok-3f9a1c7e55b2d09")).0,
            401,
            "{path} with a prefix of it"
        );
        assert_eq!(get(&http, path, Some("tok-3f9a1c7e55b2d094")).0, 200, "{path} with the token");
    }
    assert_eq!(get(&http, "/healthz", None).0, 200, "the liveness probe stays open");
    assert_eq!(get(&http, "/readyz", None).0, 200, "the readiness probe stays open");
    let (code, body) = get(&http, "/metrics", Some("tok-3f9a1c7e55b2d094"));
    assert_eq!((code, metric(&body, "prova_workers")), (200, 1.0), "{body}");
}

#[test]
fn a_public_listener_without_a_token_file_refuses_to_start() {
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::None).start();
    let cache = tempfile::tempdir().expect("a temp dir");
    for addr in ["127.0.0.2:0", "0.0.0.0:0", "[::]:0"] {
        let out = ProvaCmd::new(
            farm.root(),
            [
                "coordinator".to_owned(),
                "--listen".to_owned(),
                "127.0.0.1:0".to_owned(),
                "--certs".to_owned(),
                farm.certs_dir().join("coordinator").to_string_lossy().into_owned(),
                "--cache-dir".to_owned(),
                cache.path().to_string_lossy().into_owned(),
                "--http".to_owned(),
                addr.to_owned(),
            ],
        )
        .run();
        out.assert_code(2);
        out.assert_stderr_contains("--http-token-file");
    }
}
