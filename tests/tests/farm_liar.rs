//! Issue 29: a lying worker (forged manifests, [`prova_tests::liar`]) beside an honest idle one
//! costs no task. Each result the farm refuses is the worker's fault: the task runs on the
//! honest worker, the liar is quarantined after a few refusals (shown in `farm status`), and
//! the run exits 0 with every task done by the honest worker; the dashboard and `/metrics`
//! show the quarantine too. `prova farm release` ends the quarantine; a reconnect does not.

use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, worker_of};
use prova_tests::http::{get, sample};
use prova_tests::liar::{Forgery, LyingWorker};

const HOOK: &str = ".git/hooks/pre-commit";
const PROJECTS: usize = 8;

/// `PROJECTS` projects whose `build` copies its sources into `dist/out.txt`.
fn workspace() -> TempWorkspace {
    let names: Vec<String> = (0..PROJECTS).map(|i| format!("\"p{i}\"")).collect();
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        &format!(
            "[workspace]\nprojects = [{}]\n\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/* > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
            names.join(", ")
        ),
    );
    for i in 0..PROJECTS {
        ws = ws.file(&format!("p{i}/src/a.txt"), &format!("p{i}\n"));
    }
    ws.file(".git/hooks/pre-commit.sample", "#!/bin/sh\n")
}

/// A forgery that plants a hook beside a plausible output.
fn forgery() -> Forgery {
    Forgery::new().file("{project}/dist/out.txt", b"forged\n", 0o644).file(
        HOOK,
        b"#!/bin/sh\necho pwned\n",
        0o755,
    )
}

#[test]
fn a_lying_worker_beside_an_honest_one_is_quarantined_and_the_run_exits_0() {
    // The honest worker has 2 slots, the liar 8: placement prefers the liar at first.
    let farm =
        Cluster::builder().workers(1).slots(2).coordinator_args(["--http", "127.0.0.1:0"]).start();
    let liar = LyingWorker::join(&farm, "liar", forgery());
    let ws = workspace();
    let started = std::time::Instant::now();
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    // The figures of issue 29's closing note (bench/README.md), printed with --nocapture.
    eprintln!(
        "lying-worker run: exit {:?}, {} tasks, {} assigned to the liar, {:.1} s",
        out.code(),
        PROJECTS,
        liar.assignments(),
        started.elapsed().as_secs_f64()
    );
    assert!(liar.assignments() >= 3, "the liar was asked too little to be caught\n{out}");
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    for i in 0..PROJECTS {
        let t = format!("p{i}#build");
        assert_eq!(out.status_of(&t), "succeeded", "{out}");
        assert_eq!(out.report(&t)["worker"], "w1", "{t} was not done by the honest worker\n{out}");
        assert_eq!(ws.read(&format!("p{i}/dist/out.txt")), format!("p{i}\n"));
    }
    assert!(!ws.exists(HOOK), "the hook was planted\n{out}");

    let status = farm.status();
    let l =
        worker_of(&status, "liar").unwrap_or_else(|| panic!("the liar is not listed\n{status:#}"));
    let why = l["quarantined"].as_str().unwrap_or_else(|| panic!("not quarantined\n{status:#}"));
    assert!(why.contains("results refused") && why.contains(HOOK), "{why}");
    eprintln!("lying-worker run: the liar quarantined: {why}");
    assert!(worker_of(&status, "w1").is_some_and(|w| w["quarantined"].is_null()), "{status:#}");
    let log = farm.coordinator_log();
    assert!(
        log.lines().any(|l| l.contains("WARN") && l.contains("quarantined") && l.contains("liar")),
        "{log}"
    );
    // The dashboard's worker row says so, and why; /metrics counts it.
    let http = farm.http_addr().expect("the coordinator prints its HTTP address").to_owned();
    let (code, page) = get(&http, "/", None);
    assert_eq!(code, 200, "{page}");
    let row = page
        .split("<tr class=\"worker quarantined\"><td>liar</td>")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no quarantined row for the liar on the dashboard\n{page}"));
    assert!(row.contains("quarantined: ") && row.contains("results refused"), "{row}");
    assert!(page.contains("<tr class=\"worker ok\"><td>w1</td>"), "{page}");
    let (_, metrics) = get(&http, "/metrics", None);
    assert_eq!(
        sample(&metrics, "prova_workers_unavailable{why=\"quarantined\"}"),
        Some(1.0),
        "{metrics}"
    );

    // Quarantined, it gets nothing of the next run.
    let before = liar.assignments();
    let again = workspace().file("p0/src/b.txt", "more\n");
    farm.run(&again, ["build", "--all", "--json"]).assert_code(0);
    assert_eq!(liar.assignments(), before, "a quarantined worker was given work");

    // An admin releases it.
    let admin = farm.client_certs("admin", "ops");
    let mut args = vec!["farm".to_owned(), "release".to_owned(), "liar".to_owned()];
    args.extend(farm.remote_args(&admin));
    let released = prova_tests::ProvaCmd::new(farm.root(), args).run();
    released.assert_code(0);
    assert!(released.stdout.starts_with("released liar (it was quarantined: "), "{released}");
    let status = farm.status();
    assert!(worker_of(&status, "liar").is_some_and(|w| w["quarantined"].is_null()), "{status:#}");
    drop(liar);
}

#[test]
fn only_an_admin_may_release_a_worker() {
    let farm = Cluster::builder().workers(1).start();
    let mut args = vec!["farm".to_owned(), "release".to_owned(), "w1".to_owned()];
    args.extend(farm.remote_args(&farm.ci_certs()));
    let out = prova_tests::ProvaCmd::new(farm.root(), args).run();
    assert_ne!(out.code(), Some(0), "{out}");
    assert!(out.stderr.contains("cannot release workers"), "{out}");
}
