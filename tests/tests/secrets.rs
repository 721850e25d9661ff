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
