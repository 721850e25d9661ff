//! A farm that cannot be reached (issue 12, "layered cache"): the run says so in one line
//! naming the address, and with `--fallback local` it runs in local mode instead — with the
//! local cache, the sandbox checks and the lock of a local run — so a down coordinator never
//! stops a developer. Without `--fallback` it is an infrastructure error (exit 2), not a
//! task failure.

use prova_tests::TempWorkspace;
use prova_tests::cluster::Cluster;

fn workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"lib\", \"app\"]\n\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/* > dist/out.txt\"\ndeps = [\"^build\"]\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\nenv = [\"MODE\"]\n",
        )
        .file("app/prova.toml", "[project]\ndeps = [\"lib\"]\n")
        .file("app/src/a.txt", "a\n")
        .file("lib/src/l.txt", "l\n")
}

/// The lines of `stderr` that speak of the farm being unreachable.
fn unreachable_lines(stderr: &str, addr: &str) -> Vec<String> {
    stderr.lines().filter(|l| l.contains(addr)).map(str::to_owned).collect()
}

#[test]
fn a_down_coordinator_is_one_line_and_exit_2_without_fallback() {
    let mut farm = Cluster::start(1);
    let ws = workspace();
    farm.stop_coordinator();
    let out = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).run();
    assert_eq!(out.code(), Some(2), "an unreachable farm is an infrastructure error: {out}");
    let lines = unreachable_lines(&out.stderr, farm.addr());
    assert_eq!(lines.len(), 1, "one line naming the address: {out}");
    assert!(lines[0].contains("cannot reach"), "{out}");
    assert!(lines[0].contains("--fallback local"), "the line says how to go on: {out}");
    assert!(!ws.path("app/dist/out.txt").exists(), "nothing ran: {out}");
    assert!(!out.stdout.contains("\"task_finished\""), "no task reported: {out}");
}

#[test]
fn with_fallback_local_a_down_coordinator_runs_locally_and_caches_locally() {
    let mut farm = Cluster::start(1);
    let ws = workspace();
    farm.stop_coordinator();
    let run = || {
        farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json", "--fallback", "local"])
            .env("MODE", "dev")
            .run()
    };
    let out = run();
    assert_eq!(out.code(), Some(0), "{out}");
    let lines = unreachable_lines(&out.stderr, farm.addr());
    assert_eq!(lines.len(), 1, "one line naming the address: {out}");
    assert!(lines[0].contains("running locally"), "{out}");
    assert_eq!(ws.read("app/dist/out.txt"), "a\n");
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    // The local cache took the entries: a second fallback run hits, and so does local mode.
    let again = run();
    assert_eq!(again.cache_of("app#build"), "hit", "{again}");
    let local = ws.prova(["run", "build", "--all", "--json"]).env("MODE", "dev").run();
    assert_eq!(local.cache_of("lib#build"), "hit", "{local}");
}

#[test]
fn fallback_is_not_taken_when_the_farm_answers() {
    let farm = Cluster::start(1);
    let ws = workspace();
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json", "--fallback", "local"])
        .run();
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert!(unreachable_lines(&out.stderr, farm.addr()).is_empty(), "{out}");
    assert!(farm.farm_entries() >= 2, "the run went to the farm: {out}");
}

#[test]
fn a_refused_certificate_is_not_a_reason_to_fall_back() {
    // The farm answered and said no: running locally would hide a real misconfiguration.
    let farm = Cluster::start(1);
    let other = Cluster::start(0);
    let ws = workspace();
    let out = farm
        .run_cmd(&ws, &other.ci_certs(), ["build", "--all", "--json", "--fallback", "local"])
        .run();
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(!out.stderr.contains("running locally"), "{out}");
    assert!(!ws.path("app/dist/out.txt").exists(), "{out}");
}

#[test]
fn a_remote_run_that_hits_the_local_cache_everywhere_asks_the_farm_nothing() {
    // The local layer comes first: once a farm run brought its outputs home (filed as trusted
    // local entries, the ci bundle writes the trusted tier), the same run again is served
    // from here, and the farm sees no run.
    let farm = Cluster::start(1);
    let ws = workspace();
    let first = farm.run(&ws, ["build", "--all", "--json"]);
    assert_eq!(first.code(), Some(0), "{first}\n{}", farm.logs());
    assert!(first.stdout.contains("input blobs to the farm"), "{first}");
    let again = farm.run(&ws, ["build", "--all", "--json"]);
    assert_eq!(again.code(), Some(0), "{again}");
    for t in ["lib#build", "app#build"] {
        assert_eq!(again.cache_of(t), "hit", "{t}\n{again}");
    }
    assert!(again.stdout.contains("nothing was sent to the farm"), "{again}");
    assert!(!again.stdout.contains("input blobs to the farm"), "nothing uploaded: {again}");
    // A changed input misses locally: that run goes to the farm.
    ws.write("app/src/a.txt", "changed\n");
    let changed = farm.run(&ws, ["build", "--all", "--json"]);
    assert_eq!(changed.code(), Some(0), "{changed}");
    assert!(!changed.stdout.contains("nothing was sent to the farm"), "{changed}");
    assert!(changed.stdout.contains("input blobs to the farm"), "{changed}");
}

#[test]
fn workspace_fallback_local_is_the_default_a_flag_overrides() {
    let mut farm = Cluster::start(1);
    let ws = workspace().file(
        "prova.toml",
        "[workspace]\nprojects = [\"lib\", \"app\"]\nfallback = \"local\"\n\n[tasks.build]\n\
         command = \"mkdir -p dist && cat src/* > dist/out.txt\"\ndeps = [\"^build\"]\n\
         inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
    );
    farm.stop_coordinator();
    // The setting alone falls back, and says which setting did.
    let out = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).run();
    assert_eq!(out.code(), Some(0), "{out}");
    let lines = unreachable_lines(&out.stderr, farm.addr());
    assert_eq!(lines.len(), 1, "one line naming the address: {out}");
    assert!(lines[0].contains("running locally ([workspace] fallback = \"local\")"), "{out}");
    assert_eq!(ws.read("app/dist/out.txt"), "a\n");
    // `--fallback none` wins over it: one line, exit 2, nothing ran.
    std::fs::remove_dir_all(ws.path("app/dist")).unwrap();
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json", "--fallback", "none"])
        .run();
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(!ws.path("app/dist/out.txt").exists(), "nothing ran: {out}");
    // A value it does not know is a config error naming the line.
    let bad = workspace()
        .file("prova.toml", "[workspace]\nprojects = [\"lib\"]\nfallback = \"remote\"\n");
    let out = bad.prova(["run", "build", "--all"]).run();
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("prova.toml:3:"), "{out}");
}
