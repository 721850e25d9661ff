//! Issue 29: what a task does not declare is the same on every machine. A worker's own `TZ`
//! and locale (JST on one worker, New York on another) never reach a task that did not
//! declare them: one key, one output, on either worker and in a local run whose shell has
//! yet another zone.

use prova_tests::cluster::{Cluster, Sandbox};
use prova_tests::{ProvaCmd, TempWorkspace};

/// What `app#stamp` writes: the epoch in the task's zone, and the variables that shape output.
const STAMP: &str = "mkdir -p dist && { date -d @0 '+%H:%M %Z'; \
    echo \"tz=${TZ-unset} lang=${LANG-unset} lc_all=${LC_ALL-unset} lc_ctype=${LC_CTYPE-unset} \
    term=${TERM-unset} colorterm=${COLORTERM-unset} shell=${SHELL-unset}\"; } > dist/env.txt";

/// The baseline every machine gives a task that declares none of them.
const BASELINE: &str = "00:00 UTC\ntz=UTC lang=C.UTF-8 lc_all=unset lc_ctype=unset term=dumb \
    colorterm=unset shell=/bin/sh\n";

fn workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"app\"]\n\n[tasks.stamp]\ncommand = \"{}\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
                STAMP.replace('"', "\\\"")
            ),
        )
        .file("app/src/in.txt", "x\n")
}

/// A one-worker farm whose worker's own environment has `env`.
fn farm_with(env: &[(&str, &str)]) -> Cluster {
    let mut b = Cluster::builder().workers(1).sandbox(Sandbox::None);
    for (k, v) in env {
        b = b.worker_env(k, v);
    }
    b.start()
}

/// Runs `stamp` on `farm` in a fresh workspace: (its key, what it wrote).
fn stamp_on(farm: &Cluster) -> (String, String) {
    let ws = workspace();
    let out = farm.run(&ws, ["stamp", "--all", "--json"]);
    out.assert_code(0);
    assert_eq!(out.cache_of("app#stamp"), "saved", "{out}");
    let key = out.report("app#stamp")["key"].as_str().unwrap_or_default().to_owned();
    (key, ws.read("app/dist/env.txt"))
}

#[test]
fn workers_in_other_zones_and_locales_give_one_key_one_output() {
    let tokyo = farm_with(&[
        ("TZ", "Asia/Tokyo"),
        ("LANG", "ja_JP.UTF-8"),
        ("LC_ALL", "ja_JP.UTF-8"),
        ("LC_CTYPE", "ja_JP.UTF-8"),
        ("TERM", "xterm-256color"),
        ("COLORTERM", "truecolor"),
        ("SHELL", "/usr/bin/zsh"),
    ]);
    let (k1, jst) = stamp_on(&tokyo);
    drop(tokyo);
    let new_york = farm_with(&[("TZ", "America/New_York"), ("LANG", "de_DE.UTF-8")]);
    let (k2, est) = stamp_on(&new_york);
    assert_eq!(k1, k2, "one task, one key");
    assert_eq!(jst, BASELINE, "the Tokyo worker's own zone and locale reached the task");
    assert_eq!(est, BASELINE, "the New York worker's own zone reached the task");

    // A local run from a shell in yet another zone: the same bytes under the same key.
    let ws = workspace();
    let out = ProvaCmd::new(ws.root(), ["run", "stamp", "--all", "--json"])
        .env("TZ", "Australia/Adelaide")
        .env("LC_ALL", "ja_JP.UTF-8")
        .run();
    out.assert_code(0);
    assert_eq!(out.report("app#stamp")["key"].as_str().unwrap_or_default(), k1, "{out}");
    assert_eq!(ws.read("app/dist/env.txt"), BASELINE, "{out}");
}

#[test]
fn a_task_that_declares_tz_gets_the_clients_value_on_any_worker() {
    // Declared, the shell's value is the task's (and keyed): the baseline only fills in
    // what a task left to it.
    let farm = farm_with(&[("TZ", "Asia/Tokyo")]);
    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n\n[tasks.stamp]\n\
             command = \"mkdir -p dist && date -d @0 +%H:%M > dist/t.txt\"\n\
             env = [\"TZ\"]\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/src/in.txt", "x\n");
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["stamp", "--all", "--json"])
        .env("TZ", "America/New_York")
        .run();
    out.assert_code(0);
    assert_eq!(ws.read("app/dist/t.txt"), "19:00\n", "{out}");
}
