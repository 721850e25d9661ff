//! The farm under faults, worker side (issue 13): a task's declared environment is the
//! client's, whatever the worker's own process has; a task whose outputs cannot be packed is
//! never `succeeded`; a worker short of disk refuses work, and the task runs elsewhere.

use prova_tests::TempWorkspace;
use prova_tests::cluster::{Cluster, Sandbox};

/// A value only the worker's own process has: it must never reach a task.
const WORKER_ONLY: &str = "sentinel-worker-only-4b1e93";

/// `app#stamp` writes what it sees of `TZ`, `LANG` (both declared) and `WORKER_ONLY_TOKEN`
/// (never declared) into its output.
fn env_workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n\n[tasks.stamp]\n\
             command = \"mkdir -p dist && echo tz=${TZ-unset} lang=${LANG-unset} \
             only=${WORKER_ONLY_TOKEN-unset} > dist/env.txt\"\n\
             env = [\"TZ\", \"LANG\"]\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/src/in.txt", "x\n")
}

/// A farm of one worker whose own environment has `TZ`, `LANG` and a token.
fn farm_with_worker_env(sandbox: Sandbox) -> Cluster {
    Cluster::builder()
        .workers(1)
        .sandbox(sandbox)
        .worker_env("TZ", "Asia/Tokyo")
        .worker_env("LANG", "ja_JP.UTF-8")
        .worker_env("WORKER_ONLY_TOKEN", WORKER_ONLY)
        .start()
}

/// What `app#stamp` saw, never echoing the worker's token.
fn seen(ws: &TempWorkspace) -> String {
    let text = ws.read("app/dist/env.txt");
    assert!(!text.contains(WORKER_ONLY), "the worker's own token reached the task");
    text.trim().to_owned()
}

fn declared_env_is_the_clients(sandbox: Sandbox) {
    let farm = farm_with_worker_env(sandbox);
    let ws = env_workspace();
    let certs = farm.ci_certs();

    // Declared, left unset by the client: unset on the worker too.
    let out = farm
        .run_cmd(&ws, &certs, ["stamp", "--all", "--json"])
        .env_remove("TZ")
        .env_remove("LANG")
        .env_remove("WORKER_ONLY_TOKEN")
        .run();
    out.assert_code(0);
    assert_eq!(out.status_of("app#stamp"), "succeeded", "{out}");
    assert_eq!(seen(&ws), "tz=unset lang=unset only=unset", "{out}");

    // Declared and set by the client: the client's value, not the worker's.
    let out = farm
        .run_cmd(&ws, &certs, ["stamp", "--all", "--json"])
        .env("TZ", "UTC")
        .env_remove("LANG")
        .env_remove("WORKER_ONLY_TOKEN")
        .run();
    out.assert_code(0);
    assert_eq!(seen(&ws), "tz=UTC lang=unset only=unset", "{out}");

    let out = farm
        .run_cmd(&ws, &certs, ["stamp", "--all", "--json"])
        .env_remove("TZ")
        .env("LANG", "C.UTF-8")
        .env_remove("WORKER_ONLY_TOKEN")
        .run();
    out.assert_code(0);
    assert_eq!(seen(&ws), "tz=unset lang=C.UTF-8 only=unset", "{out}");
}

#[test]
fn a_declared_variable_the_client_leaves_unset_is_unset_on_a_sandboxed_worker() {
    declared_env_is_the_clients(Sandbox::Bwrap);
}

#[test]
fn a_declared_variable_the_client_leaves_unset_is_unset_on_an_unsandboxed_worker() {
    declared_env_is_the_clients(Sandbox::None);
}
