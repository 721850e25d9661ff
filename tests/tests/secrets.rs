//! Secret values never enter a log (issue 10, "secrets cross tiers through logs"). A task
//! that prints the token it deploys with — on stdout, on stderr, in a long line, twice —
//! leaves it in no copy of its log: not the terminal, not `--json`, not the replay of a hit,
//! not a byte of the local cache, not the farm's cache. Values of ordinary variables stay.

use prova_tests::TempWorkspace;
use prova_tests::cache::files_holding;
use prova_tests::cluster::Cluster;

/// Long enough to be unmistakable in a byte scan, never a substring of anything else.
const DEPLOY: &str = "sentinel-deploy-7f3a9c2e51";
const NPM: &str = "sentinel-npm-0b8d4e6a19";

fn workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n\n[tasks.deploy]\n\
             command = \"echo deploying with $DEPLOY_TOKEN in $NODE_ENV; echo npm $NPM_TOKEN >&2; \
             printf '%0500d' 0; echo \\\" $DEPLOY_TOKEN$DEPLOY_TOKEN\\\"; \
             mkdir -p dist && echo built > dist/out.txt\"\n\
             env = [\"DEPLOY_TOKEN\", \"NODE_ENV\"]\npass_env = [\"NPM_TOKEN\"]\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/src/in.txt", "x\n")
}

fn assert_clean(what: &str, text: &str) {
    for s in [DEPLOY, NPM] {
        assert!(!text.contains(s), "{what} holds a secret value:\n{text}");
    }
}

#[test]
fn a_printed_token_is_masked_everywhere_the_log_goes() {
    let ws = workspace();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "deploy", "--all"];
        args.extend_from_slice(extra);
        ws.prova(args)
            .env("DEPLOY_TOKEN", DEPLOY)
            .env("NPM_TOKEN", NPM)
            .env("NODE_ENV", "production")
            .run()
    };
    let first = run(&["--json"]);
    first.assert_code(0);
    assert_clean("the --json run's stdout", &first.stdout);
    assert_clean("the --json run's stderr", &first.stderr);
    let log = first.output_of("app#deploy");
    assert!(log.contains("deploying with *** in production"), "masked, ordinary kept:\n{log}");
    assert!(log.contains("npm ***"), "stderr masked too:\n{log}");
    assert!(log.contains(" ******"), "a long line, twice:\n{log}");

    // The hit replays the stored log: masked when stored, so masked when replayed.
    let second = run(&[]);
    second.assert_code(0);
    assert!(second.stdout.contains("deploying with ***"), "the replay:\n{second}");
    assert_clean("the replay's stdout", &second.stdout);
    assert_clean("the replay's stderr", &second.stderr);
    let hits = [DEPLOY, NPM].map(|s| files_holding(&ws.path(".prova"), s));
    assert!(hits.iter().all(Vec::is_empty), "the local cache holds a secret: {hits:?}");
}

#[test]
fn the_farm_never_stores_or_relays_a_printed_token() {
    let farm = Cluster::start(1);
    let ws = workspace();
    let out = farm
        .run_cmd(&ws, &farm.ci_certs(), ["deploy", "--all", "--json"])
        .env("DEPLOY_TOKEN", DEPLOY)
        .env("NPM_TOKEN", NPM)
        .env("NODE_ENV", "production")
        .run();
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert_clean("the remote run's stdout", &out.stdout);
    assert_clean("the remote run's stderr", &out.stderr);
    assert!(out.output_of("app#deploy").contains("deploying with ***"), "{out}");
    for dir in [farm.cache_dir(), ws.path(".prova"), farm.work_dir(0)] {
        let hits = [DEPLOY, NPM].map(|s| files_holding(&dir, s));
        assert!(hits.iter().all(Vec::is_empty), "{} holds a secret: {hits:?}", dir.display());
    }
    assert_clean("the daemons' logs", &farm.logs());
}

/// A short declared value (a PIN, a feature flag) whose plain digest a reader of the cache
/// could match against guesses.
const PIN: &str = "1234";

fn pin_workspace() -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"app\"]\n\n[tasks.build]\n\
             command = \"mkdir -p dist && echo built > dist/out.txt\"\n\
             env = [\"PIN\"]\ninputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("app/src/in.txt", "x\n")
}

/// The env digest `prova show --json` lists for `PIN`.
fn shown_pin_digest(ws: &TempWorkspace) -> String {
    let out = ws.prova(["show", "app#build", "--json"]).env("PIN", PIN).run();
    out.assert_code(0);
    let json: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("show --json");
    let env = &json["components"]["env"];
    assert_eq!(env[0][0], "PIN", "{json}");
    env[0][1].as_str().expect("a digest").to_owned()
}

#[test]
fn a_short_env_value_is_not_guessable_from_the_cache() {
    let plain = prova_protocol::Digest::of(PIN.as_bytes());
    let a = pin_workspace();
    let b = pin_workspace();
    for ws in [&a, &b] {
        let out = ws.prova(["run", "build", "--all", "--json"]).env("PIN", PIN).run();
        out.assert_code(0);
        assert_eq!(out.cache_of("app#build"), "saved", "{out}");
        // Neither the raw bytes nor the hex of the plain digest are anywhere in the cache.
        let raw = prova_tests::cache::files_holding_bytes(&ws.path(".prova"), &plain.0);
        assert!(raw.is_empty(), "the cache holds BLAKE3({PIN:?}) in {raw:?}");
        let hex = files_holding(&ws.path(".prova"), &plain.to_string());
        assert!(hex.is_empty(), "the cache holds BLAKE3({PIN:?}) as hex in {hex:?}");
    }
    // Keyed per cache: the same value folds differently in two caches, and neither is the
    // plain digest.
    let (da, db) = (shown_pin_digest(&a), shown_pin_digest(&b));
    assert_ne!(da, plain.to_string(), "show lists the plain digest");
    assert_ne!(da, db, "two caches fold the same value alike: the salt is not per cache");
    // Still a key: the same value hits, another value misses.
    let again = a.prova(["run", "build", "--all", "--json"]).env("PIN", PIN).run();
    assert_eq!(again.cache_of("app#build"), "hit", "{again}");
    let other = a.prova(["run", "build", "--all", "--json"]).env("PIN", "1235").run();
    assert_eq!(other.cache_of("app#build"), "saved", "{other}");
    let unset = a.prova(["run", "build", "--all", "--json"]).env_remove("PIN").run();
    assert_eq!(unset.cache_of("app#build"), "saved", "unset is not the value: {unset}");
}

#[test]
fn clients_of_one_farm_key_alike_and_bring_entries_home() {
    let farm = Cluster::start(1);
    let plain = prova_protocol::Digest::of(PIN.as_bytes());
    let (first, second) = (pin_workspace(), pin_workspace());
    let remote = |ws: &TempWorkspace| {
        farm.run_cmd(ws, &farm.ci_certs(), ["build", "--all", "--json"]).env("PIN", PIN).run()
    };
    let out = remote(&first);
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert_eq!(out.cache_of("app#build"), "saved", "{out}");
    // A second clone, with a cache of its own (its own salt until it meets the farm), keys
    // like the first: the farm's salt, handed over in Welcome.
    let out = remote(&second);
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert_eq!(out.cache_of("app#build"), "hit", "a second client missed: {out}");
    // The clone's local cache adopted the farm's salt: the entry brought home hits locally.
    let local = second.prova(["run", "build", "--all", "--json"]).env("PIN", PIN).run();
    local.assert_code(0);
    assert_eq!(local.cache_of("app#build"), "hit", "the entry brought home missed: {local}");
    for dir in [farm.cache_dir(), first.path(".prova"), second.path(".prova")] {
        let raw = prova_tests::cache::files_holding_bytes(&dir, &plain.0);
        assert!(raw.is_empty(), "{} holds BLAKE3({PIN:?}): {raw:?}", dir.display());
    }
}
