//! `prova run --remote-exec` (issue 32) against a real REAPI farm: BuildGrid with PostgreSQL
//! and bots that are real `prova worker --reapi-bot` processes (`tests/src/reapi_farm.rs`).
//! The demo workspace and the TypeScript fixture build through BuildGrid with outputs
//! identical (sha256) to a local build; a `--verify` run there names a nondeterministic task
//! and records the executing bot; Ctrl-C cancels a running action (its process on the bot is
//! killed); an unreachable server and a cache-only server are one clear error each; a bot
//! whose `PATH` gives other programs than the client's key folds runs nothing of it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use prova_tests::buildgrid::BuildGrid;
use prova_tests::reapi_farm::ReapiFarm;
use prova_tests::{TempWorkspace, repo_root, tscomposite, verify};

/// The sha256 of every file under `dirs` (workspace-relative), by path; symlinks by target.
fn sha256_under(root: &Path, dirs: &[String]) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    let mut links = BTreeMap::new();
    let mut stack: Vec<String> = dirs.to_vec();
    while let Some(rel) = stack.pop() {
        let p = root.join(&rel);
        let Ok(meta) = std::fs::symlink_metadata(&p) else { continue };
        if meta.file_type().is_symlink() {
            let t = std::fs::read_link(&p).expect("readlink");
            links.insert(rel, format!("-> {}", t.display()));
        } else if meta.is_dir() {
            for e in std::fs::read_dir(&p).expect("listing outputs").flatten() {
                stack.push(format!("{rel}/{}", e.file_name().to_string_lossy()));
            }
        } else {
            files.push(rel);
        }
    }
    let mut out = links;
    if !files.is_empty() {
        let o =
            Command::new("sha256sum").args(&files).current_dir(root).output().expect("sha256sum");
        assert!(o.status.success(), "sha256sum failed");
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            if let Some((h, f)) = l.split_once("  ") {
                out.insert(f.to_owned(), h.to_owned());
            }
        }
    }
    out
}

fn demo() -> TempWorkspace {
    TempWorkspace::copy_of(&repo_root().join("examples/demo"), &["dist", "gen", ".prova"])
}

fn demo_dists(ws: &TempWorkspace) -> Vec<String> {
    let mut out = Vec::new();
    for group in ["libs", "apps"] {
        for e in std::fs::read_dir(ws.path(group)).expect("the demo's projects").flatten() {
            out.push(format!("{group}/{}/dist", e.file_name().to_string_lossy()));
        }
    }
    out.sort();
    out
}

/// A workspace of one project `p` (`src/a.txt`), `[workspace]` lines `workspace` and the
/// task table `task` in `p/prova.toml`.
fn one_project(workspace: &str, task: &str) -> TempWorkspace {
    TempWorkspace::new()
        .file("prova.toml", &format!("[workspace]\nprojects = [\"p\"]\n{workspace}"))
        .file("p/src/a.txt", "a\n")
        .file("p/prova.toml", task)
}

/// Every executed task's report names a bot of the farm as its worker.
#[track_caller]
fn ran_on_bots(out: &prova_tests::Output, bots: &[&str]) {
    for r in out.summary()["tasks"].as_array().expect("tasks") {
        if r["status"] == "succeeded" && r["cache"]["status"] != "hit" {
            let w = r["worker"].as_str().unwrap_or_default();
            assert!(bots.iter().any(|b| w.starts_with(b)), "{} ran on {w:?}\n{out}", r["task"]);
        }
    }
}

#[test]
fn builds_verifies_and_cancels_through_a_real_buildgrid() {
    let Some(mut farm) = ReapiFarm::start() else { return };
    farm.add_bot("bot-a", 2);
    farm.add_bot("bot-b", 2);
    let endpoint = farm.endpoint();

    // The demo: the same bytes as a local build, every task executed by a bot.
    let local = demo();
    local.prova(["run", "build", "--all"]).run().assert_code(0);
    let remote = demo();
    // What a run killed outright left: its scratch directory, named for its gone pid.
    let dead = prova_tests::dead_pid();
    let killed = format!(".prova/tmp/reapi-{dead}-exec");
    remote.write(&format!("{killed}/upstream/x"), "left behind\n");
    let out = remote
        .prova(["run", "build", "--all", "--json", "--remote-exec", &endpoint])
        .timeout(Duration::from_secs(240))
        .run();
    out.assert_code(0);
    ran_on_bots(&out, &["bot-a", "bot-b"]);
    let left: Vec<String> = std::fs::read_dir(remote.path(".prova/tmp"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(
        !left.iter().any(|n| n.starts_with("reapi-")),
        "a scratch directory stayed in .prova/tmp (the killed run's, or this one's): {left:?}"
    );
    let dists = demo_dists(&local);
    let want = sha256_under(local.root(), &dists);
    assert!(!want.is_empty(), "the local demo build wrote outputs");
    assert_eq!(sha256_under(remote.root(), &dists), want, "demo outputs\n{}", farm.log());
    // Saved like any execution: the next run hits every task locally.
    let again = remote.prova(["run", "build", "--all", "--json", "--remote-exec", &endpoint]).run();
    again.assert_code(0);
    assert_eq!(again.summary()["totals"]["ran"], 0, "{again}");

    // The TypeScript fixture, with [exec.reapi] instead of the flag: node_modules trees in
    // the input roots, composite tsc -b builds, identical outputs.
    let local = tscomposite::tscomposite();
    local.prova(["run", "build", "--all"]).timeout(Duration::from_secs(300)).run().assert_code(0);
    let remote = tscomposite::tscomposite();
    let config = remote.read("prova.toml");
    remote.write(
        "prova.toml",
        &format!("{config}\n[exec.reapi]\nendpoint = \"{endpoint}\"\ntimeout = \"20s\"\n"),
    );
    let out =
        remote.prova(["run", "build", "--all", "--json"]).timeout(Duration::from_secs(300)).run();
    out.assert_code(0);
    ran_on_bots(&out, &["bot-a", "bot-b"]);
    let want = tscomposite::outputs_sha256(local.root());
    assert!(!want.is_empty(), "the local TypeScript build wrote outputs");
    assert_eq!(tscomposite::outputs_sha256(remote.root()), want, "TypeScript outputs");

    // --verify on the farm: a fresh, salted execution; the nondeterministic task is named and
    // the ledger records the bots.
    let tasks =
        verify::task("pure", "mkdir -p out && cat src/a.txt > out/pure.txt", &["out/pure.txt"])
            + &verify::task(
                "clock",
                "mkdir -p out && date +%s%N > out/clock.txt",
                &["out/clock.txt"],
            );
    let ws = verify::workspace(&tasks);
    let out = verify::prova(
        &ws,
        [
            "run",
            "pure",
            "clock",
            "--all",
            "--force",
            "--verify",
            "--json",
            "--remote-exec",
            &endpoint,
        ],
    )
    .run();
    out.assert_code(1);
    assert_eq!(verify::verdict_names(&out, "p#clock"), ["nondeterministic"], "{out}");
    assert_eq!(verify::verdict_names(&out, "p#pure"), ["proven-deterministic"], "{out}");
    let (_, report) = verify::hermeticity(&ws);
    let text = report.to_string();
    assert!(text.contains("bot-a") || text.contains("bot-b"), "the ledger names the bots: {text}");

    // An empty directory among the outputs comes back from the bot, and from the cache.
    let ws = verify::workspace(&verify::task(
        "dirs",
        "mkdir -p out/empty && cat src/a.txt > out/a.txt",
        &["out/**"],
    ));
    for round in ["executed", "hit"] {
        let out = ws.prova(["run", "dirs", "--all", "--json", "--remote-exec", &endpoint]).run();
        out.assert_code(0);
        assert!(ws.path("p/out/empty").is_dir(), "{round}: out/empty absent\n{out}");
        assert_eq!(ws.read("p/out/a.txt"), "hello\n", "{round}");
        std::fs::remove_dir_all(ws.path("p/out")).expect("remove the outputs");
    }

    // Ctrl-C: the action is cancelled on the farm, and its process on the bot dies.
    let marker = tempfile::tempdir().expect("a marker dir");
    let pid_file = marker.path().join("pid");
    let ws = verify::workspace(&verify::task(
        "slow",
        &format!("echo $$ > {} && exec sleep 300", pid_file.display()),
        &["out/slow.txt"],
    ));
    let running = ws
        .prova(["run", "slow", "--all", "--remote-exec", &endpoint])
        .timeout(Duration::from_secs(120))
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid = loop {
        if let Some(pid) =
            std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the slow task never started on a bot\n{}", farm.log());
        // Polling for the task's own marker file (what is waited for), not a synchronising sleep.
        std::thread::sleep(Duration::from_millis(50));
    };
    running.signal(Signal::SIGINT);
    let out = running.wait();
    assert_ne!(out.code(), Some(0), "an interrupted run fails\n{out}");
    prova_tests::procs::wait_all_gone(&[pid], Duration::from_secs(30))
        .unwrap_or_else(|left| panic!("the cancelled action still runs on the bot: {left:?}"));
}

#[test]
fn an_unreachable_server_is_one_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let ws = verify::workspace(&verify::complete());
    let url = format!("grpc://127.0.0.1:{port}");
    let out = ws.prova(["run", "complete", "--all", "--remote-exec", &url]).run();
    out.assert_code(2).assert_stderr_contains(&format!("--remote-exec {url}"));
    assert_eq!(out.stderr.matches(&url).count(), 1, "the endpoint named once: {}", out.stderr);
    assert_eq!(
        out.stderr.lines().filter(|l| !l.trim().is_empty()).count(),
        1,
        "one line:\n{}",
        out.stderr
    );
    assert!(!ws.exists("p/out/complete.txt"), "nothing ran locally instead");
}

#[test]
fn a_cache_only_server_is_one_clear_error() {
    let Some(grid) = BuildGrid::start() else { return };
    let ws = verify::workspace(&verify::complete());
    let out = ws.prova(["run", "complete", "--all", "--remote-exec", &grid.endpoint()]).run();
    out.assert_code(2).assert_stderr_contains("does not offer remote execution");
    let url = grid.endpoint();
    assert_eq!(out.stderr.matches(&url).count(), 1, "the endpoint named once: {}", out.stderr);
    assert_eq!(
        out.stderr.lines().filter(|l| !l.trim().is_empty()).count(),
        1,
        "one line:\n{}",
        out.stderr
    );
}

#[test]
fn remote_execution_needs_a_cache_it_can_write() {
    let ws = verify::workspace(&verify::complete());
    for flags in [&["--no-cache"][..], &["--cache", "local:r"][..]] {
        let mut args = vec!["run", "complete", "--all", "--remote-exec", "grpc://127.0.0.1:1"];
        args.extend(flags);
        ws.prova(args).run().assert_code(2).assert_stderr_contains("cache");
    }
}

/// The inputs proof traces the task's reads (bubblewrap + strace around the execution); a
/// REAPI action cannot ask a bot for that, so the proof is refused before anything runs —
/// never a run that ends "ok" with no inputs verdict.
#[test]
fn the_inputs_proof_is_refused_on_a_reapi_farm() {
    let ws = verify::workspace(&(verify::tolerant() + &verify::complete()));
    ws.write("p/src/secret.txt", "undeclared\n");
    for mode in ["--verify=inputs", "--verify=all"] {
        let out = ws
            .prova([
                "run",
                "tolerant",
                "complete",
                "--all",
                "--force",
                mode,
                "--remote-exec",
                "grpc://127.0.0.1:1",
            ])
            .run();
        out.assert_code(2).assert_stderr_contains("--verify=inputs");
        assert!(out.stderr.contains("REAPI"), "says why: {}", out.stderr);
        assert!(!ws.exists("p/out/tolerant.txt"), "nothing ran");
    }
    // [exec.reapi] instead of the flag: the same refusal.
    ws.write(
        "prova.toml",
        "[workspace]\nprojects = [\"p\"]\n[exec.reapi]\nendpoint = \"grpc://127.0.0.1:1\"\n",
    );
    let out = ws.prova(["run", "tolerant", "--all", "--verify=inputs"]).run();
    out.assert_code(2).assert_stderr_contains("--verify=inputs");
    // Here, the proof runs as ever.
    let out = ws
        .prova(["run", "tolerant", "--all", "--force", "--verify=inputs", "--remote-exec", "local"])
        .run();
    if verify::sandbox_or_skip() {
        out.assert_code(1);
    }
}

/// A `sandbox = true` task runs traced, and fails when it reads what it did not declare; on a
/// REAPI farm it would run untraced, so a run in which one must execute is refused (a hit is
/// restored as usual).
#[test]
fn a_sandboxed_task_that_must_execute_is_refused_on_a_reapi_farm() {
    if !verify::sandbox_or_skip() {
        return;
    }
    let ws = verify::workspace(&verify::task_with(
        "sb",
        "mkdir -p out && cat src/a.txt > out/sb.txt",
        &["out/sb.txt"],
        "sandbox = true",
    ));
    let refused = ws.prova(["run", "sb", "--all", "--remote-exec", "grpc://127.0.0.1:1"]).run();
    refused.assert_code(2).assert_stderr_contains("`p#sb` sets `sandbox = true`");
    assert!(!ws.exists("p/out/sb.txt"), "nothing ran");
    // Cached here first: then it is a hit, not refused (the error is the unreachable farm's).
    ws.prova(["run", "sb", "--all"]).run().assert_code(0);
    let out = ws.prova(["run", "sb", "--all", "--remote-exec", "grpc://127.0.0.1:1"]).run();
    assert!(!out.stderr.contains("sandbox = true"), "a hit is not refused: {}", out.stderr);
}

/// A bot runs what its own `PATH` gives, and its outputs are saved under the client's key:
/// the action's guard checks the programs and runtime inputs that key folds on the bot. A
/// bot holding a `tool` the client found nowhere, or another build of it, or whose runtime
/// input gives another result, runs nothing of the task; one that matches runs it.
#[test]
fn a_bot_with_other_programs_than_the_key_folds_runs_nothing_of_the_task() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(mut farm) = ReapiFarm::start() else { return };
    let bin = tempfile::tempdir().expect("bin");
    let install = |dir: &Path, says: &str| {
        std::fs::create_dir_all(dir).expect("mkdir");
        let p = dir.join("tool");
        std::fs::write(&p, format!("#!/bin/sh\necho {says}\n")).expect("write tool");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    let (bot_bin, client_bin) = (bin.path().join("bot"), bin.path().join("client"));
    install(&bot_bin, "bot-build");
    let path = std::env::var("PATH").unwrap_or_default();
    let bot_path = format!("{}:{path}", bot_bin.display());
    farm.add_bot_with_env("bot-t", 1, &[("PATH", &bot_path)]);
    let endpoint = farm.endpoint();
    let ws = one_project(
        "",
        "[tasks.build]\ncommand = \"mkdir -p dist && (tool > dist/out.txt || echo fallback > \
             dist/out.txt)\"\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
    );
    let run_in = |ws: &TempWorkspace, client_path: &str| {
        ws.prova(["run", "build", "--all", "--json", "--remote-exec", &endpoint])
            .env("PATH", client_path)
            .timeout(Duration::from_secs(120))
            .run()
    };
    // The client has no `tool`: its key says the fallback ran.
    let out = run_in(&ws, &path);
    out.assert_code(1);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("program `tool` differs on this bot"), "{said}");
    let note = out.report("p#build")["note"].as_str().unwrap_or_default().to_owned();
    assert!(note.contains("exit code 125 (program `tool` differs on this bot"), "{note}");
    assert!(said.contains("on the client found nowhere on its PATH"), "{said}");
    assert!(!ws.exists("p/dist/out.txt"), "nothing of it came home: {said}");
    // Another build on the client.
    install(&client_bin, "client-build");
    let client_path = format!("{}:{path}", client_bin.display());
    let out = run_in(&ws, &client_path);
    out.assert_code(1);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("program `tool` differs on this bot: here `"), "{said}");
    // The same bytes: the bot runs it, and the result is saved.
    install(&client_bin, "bot-build");
    let out = run_in(&ws, &client_path);
    out.assert_code(0);
    assert_eq!(ws.read("p/dist/out.txt"), "bot-build\n");
    assert_eq!(out.cache_of("p#build"), "saved", "{out}");

    // A runtime input (`runtime = ["tool"]`, no program folded): it must give on the bot what
    // it gave on the client.
    let ws = one_project(
        "runtime_binary = false\n",
        "[tasks.build]\ncommand = \"mkdir -p dist && tool > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\nruntime = [\"tool\"]\n",
    );
    install(&client_bin, "client-build");
    let out = run_in(&ws, &client_path);
    out.assert_code(1);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("runtime input `tool` differs on this bot"), "{said}");
    assert!(!ws.exists("p/dist/out.txt"), "{said}");
    install(&client_bin, "bot-build");
    let out = run_in(&ws, &client_path);
    out.assert_code(0);
    assert_eq!(ws.read("p/dist/out.txt"), "bot-build\n");
}

/// A task starts on a bot from the environment it starts from on a prova worker: the fixed
/// baseline, the host's `PATH`/`HOME`/…, its declared variables; a variable it declares and
/// the client left unset is unset there too (the bot's own baseline had `TZ=UTC`, and its
/// output was saved under the client's key).
#[test]
fn a_task_starts_on_a_bot_from_a_workers_environment() {
    let Some(mut farm) = ReapiFarm::start() else { return };
    farm.add_bot("bot-e", 1);
    let endpoint = farm.endpoint();
    let ws = one_project(
        "",
        "[tasks.build]\ncommand = \"mkdir -p dist && echo tz=${TZ-unset} lang=${LANG-unset} > \
             dist/out.txt\"\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\nenv = [\"TZ\"]\n",
    );
    let local = ws.prova(["run", "build", "--all", "--no-cache"]).env_remove("TZ").run();
    local.assert_code(0);
    let here = ws.read("p/dist/out.txt");
    assert_eq!(here, "tz=unset lang=C.UTF-8\n");
    std::fs::remove_dir_all(ws.path("p/dist")).expect("rm dist");
    let out = ws
        .prova(["run", "build", "--all", "--json", "--remote-exec", &endpoint])
        .env_remove("TZ")
        .timeout(Duration::from_secs(120))
        .run();
    out.assert_code(0);
    assert_eq!(ws.read("p/dist/out.txt"), here, "{out}");
}
