//! A farm that cannot be reached (issue 12, "layered cache"; issue 28, "the first five
//! minutes"): the farm degrades like any cache layer — one warning naming the address, and
//! the run goes on in local mode, with the local cache, the sandbox checks and the lock of a
//! local run, exit code from the tasks — as Turborepo goes on when its remote cache is down.
//! `--farm-required` (or `--fallback none`, `[workspace] fallback = "none"`) makes it an
//! infrastructure error (exit 2), not a task failure. A farm that answers and refuses is
//! never a reason to fall back.

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
fn a_down_coordinator_is_one_warning_and_the_run_goes_on_locally() {
    let mut farm = Cluster::start(1);
    let ws = workspace();
    farm.stop_coordinator();
    let run = || {
        farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).env("MODE", "dev").run()
    };
    let out = run();
    assert_eq!(out.code(), Some(0), "the tasks' exit code, not the farm's: {out}");
    let lines = unreachable_lines(&out.stderr, farm.addr());
    assert_eq!(lines.len(), 1, "one line naming the address: {out}");
    assert!(lines[0].starts_with("prova: warning: cannot reach the farm at"), "{out}");
    assert!(lines[0].contains("running locally"), "{out}");
    assert!(lines[0].contains("--farm-required"), "the line says how to make it an error: {out}");
    assert_eq!(ws.read("app/dist/out.txt"), "a\n");
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    // The local cache took the entries: a second degraded run hits, and so does local mode.
    let again = run();
    assert_eq!(again.cache_of("app#build"), "hit", "{again}");
    let local = ws.prova(["run", "build", "--all", "--json"]).env("MODE", "dev").run();
    assert_eq!(local.cache_of("lib#build"), "hit", "{local}");
}

#[test]
fn a_run_of_local_hits_passes_with_the_coordinator_dead() {
    // The case issue 28 names: everything hits locally, the coordinator is gone; turbo warns
    // and goes on, and so does prova.
    let mut farm = Cluster::start(1);
    let ws = workspace();
    let first = farm.run(&ws, ["build", "--all", "--json"]);
    assert_eq!(first.code(), Some(0), "{first}\n{}", farm.logs());
    farm.stop_coordinator();
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    assert_eq!(out.code(), Some(0), "{out}");
    for t in ["lib#build", "app#build"] {
        assert_eq!(out.cache_of(t), "hit", "{t}\n{out}");
    }
    assert_eq!(unreachable_lines(&out.stderr, farm.addr()).len(), 1, "{out}");
}

#[test]
fn farm_required_makes_a_down_coordinator_one_line_and_exit_2() {
    let mut farm = Cluster::start(1);
    let ws = workspace();
    farm.stop_coordinator();
    for flags in [&["--farm-required"][..], &["--fallback", "none"]] {
        let mut args = vec!["build", "--all", "--json"];
        args.extend(flags);
        let out = farm.run_cmd(&ws, &farm.ci_certs(), args).run();
        assert_eq!(out.code(), Some(2), "{flags:?}: an infrastructure error: {out}");
        let lines = unreachable_lines(&out.stderr, farm.addr());
        assert_eq!(lines.len(), 1, "one line naming the address: {out}");
        assert!(lines[0].contains("cannot reach"), "{out}");
        assert!(lines[0].contains(flags[0]), "the line names what asked for the farm: {out}");
        assert!(!ws.path("app/dist/out.txt").exists(), "nothing ran: {out}");
        assert!(!out.stdout.contains("\"task_finished\""), "no task reported: {out}");
    }
    // --farm-required wins over a fallback set anywhere else (a CI-wide PROVA_FALLBACK).
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--farm-required"])
        .env("PROVA_FALLBACK", "local")
        .run();
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("(--farm-required)"), "{out}");
}

#[test]
fn with_fallback_local_a_down_coordinator_runs_locally_and_says_which_flag() {
    let mut farm = Cluster::start(1);
    let ws = workspace();
    farm.stop_coordinator();
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json", "--fallback", "local"])
        .env("MODE", "dev")
        .run();
    assert_eq!(out.code(), Some(0), "{out}");
    let lines = unreachable_lines(&out.stderr, farm.addr());
    assert_eq!(lines.len(), 1, "one line naming the address: {out}");
    assert!(lines[0].contains("running locally (--fallback local)"), "{out}");
    assert_eq!(ws.read("app/dist/out.txt"), "a\n");
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
fn workspace_fallback_none_requires_the_farm_and_a_flag_overrides_it() {
    let mut farm = Cluster::start(1);
    let config = |value: &str| {
        format!(
            "[workspace]\nprojects = [\"lib\", \"app\"]\nfallback = \"{value}\"\n\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/* > dist/out.txt\"\ndeps = [\"^build\"]\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n"
        )
    };
    let ws = workspace().file("prova.toml", &config("none"));
    farm.stop_coordinator();
    // The setting alone fails the run, and says which setting did.
    let out = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).run();
    assert_eq!(out.code(), Some(2), "{out}");
    let lines = unreachable_lines(&out.stderr, farm.addr());
    assert_eq!(lines.len(), 1, "one line naming the address: {out}");
    assert!(lines[0].contains("[workspace] fallback = \"none\""), "{out}");
    assert!(!ws.path("app/dist/out.txt").exists(), "nothing ran: {out}");
    // `--fallback local` wins over it.
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json", "--fallback", "local"])
        .run();
    assert_eq!(out.code(), Some(0), "{out}");
    assert_eq!(ws.read("app/dist/out.txt"), "a\n");
    // `fallback = "local"`, written out, is the default: the run goes on.
    let ws = workspace().file("prova.toml", &config("local"));
    let out = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).run();
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(unreachable_lines(&out.stderr, farm.addr())[0].contains("running locally"), "{out}");
    // A value it does not know is a config error naming the line.
    let bad = workspace()
        .file("prova.toml", "[workspace]\nprojects = [\"lib\"]\nfallback = \"remote\"\n");
    let out = bad.prova(["run", "build", "--all"]).run();
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("prova.toml:3:"), "{out}");
}

#[test]
fn the_farm_cache_layer_is_named_in_cache_like_the_others() {
    // `--cache local:rw,farm:r`: the farm executes and reads its cache but files nothing;
    // `farm:rw` files; a `--cache` that leaves the farm out neither reads nor writes it.
    let farm = Cluster::start(1);
    let ws = workspace();
    let read_only = farm.run(&ws, ["build", "--all", "--json", "--cache", "local:rw,farm:r"]);
    assert_eq!(read_only.code(), Some(0), "{read_only}\n{}", farm.logs());
    assert_eq!(farm.farm_entries(), 0, "farm:r wrote to the farm cache: {read_only}");
    let fresh = workspace();
    let rw = farm.run(&fresh, ["build", "--all", "--json", "--cache", "local:rw,farm:rw"]);
    assert_eq!(rw.code(), Some(0), "{rw}");
    assert!(farm.farm_entries() >= 2, "farm:rw filed the entries: {rw}");
    // Another fresh checkout, farm left out: nothing read from the farm, so it executes.
    let other = workspace();
    let out = farm.run(&other, ["build", "--all", "--json", "--cache", "local:rw"]);
    assert_eq!(out.code(), Some(0), "{out}");
    assert_ne!(out.cache_of("app#build"), "hit", "the farm layer was left out: {out}");
    // With it named, the same checkout hits the farm.
    let again = workspace();
    let out = farm.run(&again, ["build", "--all", "--json", "--cache", "local:rw,farm:r"]);
    assert_eq!(out.cache_of("app#build"), "hit", "{out}");
    // An unknown layer lists the three and guesses.
    let out = ws.prova(["run", "build", "--all", "--cache", "remote:rw"]).run();
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("layers: local, farm, reapi"), "{out}");
    assert!(out.stderr.contains("did you mean `farm`?"), "{out}");
}

#[test]
fn a_farm_name_that_does_not_resolve_degrades_too() {
    // Another route to "cannot be reached": no address at all. Same warning, same local run;
    // and required, the same one-line error.
    let farm = Cluster::start(0);
    let ws = workspace();
    let certs = farm.ci_certs().to_string_lossy().into_owned();
    let remote = ["--remote", "no-such-host.invalid:7700", "--certs", certs.as_str()];
    let mut args = vec!["run", "build", "--all", "--json"];
    args.extend(remote);
    let out = ws.prova(args.clone()).run();
    assert_eq!(out.code(), Some(0), "{out}");
    let lines = unreachable_lines(&out.stderr, "no-such-host.invalid:7700");
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].starts_with("prova: warning: cannot reach the farm"), "{out}");
    assert_eq!(ws.read("app/dist/out.txt"), "a\n");
    args.push("--farm-required");
    let out = ws.prova(args).run();
    assert_eq!(out.code(), Some(2), "{out}");
    assert_eq!(unreachable_lines(&out.stderr, "no-such-host.invalid:7700").len(), 1, "{out}");
}
