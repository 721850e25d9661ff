//! The resolution of `prova run`'s flags, environment and config into [`RunSettings`]:
//! defaults, conflicting flags (clap's and ours), environment overrides.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser as _;
use prova_coordinator::layers::reapi::{Endpoint, ReapiConfig, Upload};
use prova_coordinator::run::CachePolicy;
use prova_protocol::TaskId;
use prova_protocol::wire::{Proof, UpstreamMode};

use super::*;
use crate::args::{Cli, CliCommand};

fn parse(line: &str) -> Result<RunArgs, clap::Error> {
    let argv = std::iter::once("prova").chain(["run"]).chain(line.split_whitespace());
    match Cli::try_parse_from(argv)?.command {
        CliCommand::Run(a) => Ok(a),
        other => panic!("not a run: {other:?}"),
    }
}

fn args(line: &str) -> RunArgs {
    parse(line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// A pipe on both streams, 8 cores, no variables.
fn env() -> RunEnv {
    RunEnv { cores: 8, ..RunEnv::default() }
}

fn with_vars(vars: &[(&str, &str)]) -> RunEnv {
    let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    RunEnv { vars, ..env() }
}

fn in_run(id: &TaskId) -> bool {
    id.as_str() == "web#build" || id.as_str() == "api#build"
}

fn resolve_in(line: &str, env: &RunEnv, config: RunConfig) -> Result<RunSettings, SettingsError> {
    RunSettings::resolve(args(line), env, config, &in_run)
}

fn resolve(line: &str) -> RunSettings {
    resolve_in(line, &env(), RunConfig::default()).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn reapi() -> ReapiConfig {
    ReapiConfig {
        endpoint: Endpoint::parse("grpc://127.0.0.1:1").expect("an endpoint"),
        instance_name: String::new(),
        token: None,
        timeout: Duration::from_secs(1),
        ca_file: None,
        cert_file: None,
        key_file: None,
        upload: Upload::Ci,
    }
}

const RW: CachePolicy = CachePolicy::READ_WRITE;
const OFF: CachePolicy = CachePolicy::OFF;
const READ: CachePolicy = CachePolicy::of(true, false);

#[test]
fn defaults_use_every_core_the_local_cache_and_wait_for_the_lock() {
    let s = resolve("build");
    assert_eq!(s.options.concurrency, 8);
    assert!(!s.options.continue_on_failure && !s.options.verify.any());
    assert_eq!(s.options.upstreams, UpstreamMode::Run);
    assert_eq!((s.cache.local, s.cache.farm), (RW, RW));
    assert_eq!(
        (s.cache.open_local, s.cache.open_remote),
        (CacheMode::ReadWrite, CacheMode::ReadWrite)
    );
    assert!(s.cache.writes_local && !s.cache.off);
    assert!(s.lock_wait && !s.dry_run && s.farm.is_none() && s.remote_exec.is_none());
    assert_eq!(s.defaults, RunDefaults::default());
    assert!(!s.style.color && !s.style.json && !s.progress, "a pipe: no colour, no progress");
    let r = s.reach(false).expect("a local run");
    assert_eq!(
        r,
        Reach { remote: false, writes_workspace: true, cache_mode: CacheMode::ReadWrite }
    );
}

#[test]
fn concurrency_is_at_least_one_and_the_flags_are_carried() {
    let s = resolve("build -j 0 --continue --retry 2 --timeout 90s --no-wait -- --x");
    assert_eq!(s.options.concurrency, 1);
    assert!(s.options.continue_on_failure && !s.lock_wait);
    assert_eq!(s.defaults.retry, Some(2));
    assert_eq!(s.defaults.timeout, Some(Duration::from_secs(90)));
    assert_eq!(s.forward, vec!["--x".to_owned()]);
    assert_eq!(resolve("build -j 3").options.concurrency, 3);
}

#[test]
fn cache_flags_decide_the_policies_and_how_the_cache_opens() {
    let s = resolve("build --no-cache");
    assert_eq!((s.cache.local, s.cache.farm), (OFF, OFF));
    assert_eq!((s.cache.open_local, s.cache.open_remote), (CacheMode::Scratch, CacheMode::Scratch));
    assert!(s.cache.off && !s.cache.writes_local);
    let s = resolve("build --force");
    let force = CachePolicy::FORCE;
    assert_eq!((s.cache.local, s.cache.farm), (force, force));
    assert!(!force.read && force.write && force.read_left_out);
    assert!(s.wire_options().read_left_out, "the farm restores what --only leaves out");
    assert_eq!(s.cache.open_local, CacheMode::ReadWrite);
    let s = resolve("build --cache local:r");
    assert_eq!((s.cache.local, s.cache.farm), (READ, OFF), "a --cache without farm leaves it out");
    assert_eq!(
        (s.cache.open_local, s.cache.open_remote),
        (CacheMode::ReadOnly, CacheMode::ReadWrite)
    );
    assert!(!s.cache.writes_local);
    let s = resolve("build --cache local:");
    assert_eq!(s.cache.open_local, CacheMode::Scratch);
    // The REAPI layer files its hits locally: the local cache opens read-write.
    let s = resolve("build --cache local:r,reapi:rw");
    assert_eq!(s.cache.local, RW);
    assert_eq!(s.cache.open_local, CacheMode::ReadWrite);
    assert!(!s.cache.writes_local, "the local layer's own writes are left out");
    let s = resolve("build --cache local:rw,farm:r --remote 127.0.0.1:1 --certs c");
    assert_eq!((s.cache.local, s.cache.farm), (RW, READ));
    assert!(!s.farm_layer_unused());
    assert!(resolve("build --cache local:rw,farm:r").farm_layer_unused());
}

#[test]
fn clap_refuses_conflicting_cache_and_upstream_flags() {
    for line in [
        "build --force --no-cache",
        "build --force --cache local:r",
        "build --no-cache --cache local:r",
        "build --only --exclude-dependencies",
        "build --verify-sample 0.5",
        "build --remote-exec grpc://h:1 --remote h:2",
        "build --remote-exec grpc://h:1 --no-cache",
    ] {
        assert!(parse(line).is_err(), "{line} parsed");
    }
}

#[test]
fn colour_follows_the_flag_then_the_environment_never_in_json() {
    let forced = with_vars(&[("FORCE_COLOR", "1")]);
    assert!(resolve_in("build", &forced, RunConfig::default()).unwrap().style.color);
    let json = resolve_in("build --json", &forced, RunConfig::default()).unwrap();
    assert!(!json.style.color && json.style.json);
    let terminal = RunEnv { stdout_terminal: true, ..with_vars(&[("NO_COLOR", "1")]) };
    assert!(!resolve_in("build", &terminal, RunConfig::default()).unwrap().style.color);
    let always = RunEnv { color: Some(ColorWhen::Always), ..terminal };
    assert!(resolve_in("build", &always, RunConfig::default()).unwrap().style.color);
    let never = RunEnv { color: Some(ColorWhen::Never), ..forced };
    assert!(!resolve_in("build", &never, RunConfig::default()).unwrap().style.color);
}

#[test]
fn progress_is_drawn_on_a_terminal_outside_ci_and_json() {
    let tty = RunEnv { stderr_terminal: true, ..env() };
    assert!(resolve_in("build", &tty, RunConfig::default()).unwrap().progress);
    assert!(!resolve_in("build --json", &tty, RunConfig::default()).unwrap().progress);
    let ci = RunEnv { stderr_terminal: true, ..with_vars(&[("CI", "true")]) };
    let s = resolve_in("build", &ci, RunConfig::default()).unwrap();
    assert!(!s.progress);
    assert_eq!(s.ci.as_deref(), Some("true"), "the REAPI cache's upload rule reads it");
}

#[test]
fn verify_modes_allow_list_and_sample() {
    let s = resolve("build --verify");
    assert!(s.options.verify.determinism && !s.options.verify.inputs);
    let s = resolve(
        "build --verify=all --verify-allow web#build,api#build --verify-sample 0.25 --verify-seed 7",
    );
    assert!(s.options.verify.determinism && s.options.verify.inputs);
    assert_eq!(s.options.verify.allow.len(), 2);
    let sample = s.options.verify.sample.expect("a sample");
    assert_eq!((sample.ppm, sample.seed), (250_000, 7));
    let wire = s.wire_options();
    assert_eq!(wire.verify, vec![Proof::Determinism, Proof::Inputs]);
    assert_eq!(wire.verify_allow.len(), 2);
    let err = |line| resolve_in(line, &env(), RunConfig::default()).err();
    assert_eq!(
        err("build --verify --verify-allow web"),
        Some(SettingsError::AllowSyntax("web".into()))
    );
    assert_eq!(
        err("build --verify --verify-allow docs#build"),
        Some(SettingsError::AllowUnknown("docs#build".into()))
    );
}

#[test]
fn exclude_dependencies_is_refused_with_a_proof_and_with_a_farm_it_reaches() {
    let err = resolve_in("build --exclude-dependencies --verify", &env(), RunConfig::default());
    assert_eq!(err.err(), Some(SettingsError::ExcludeVerify));
    let s = resolve("build --exclude-dependencies --remote 127.0.0.1:1 --certs c");
    assert_eq!(s.options.upstreams, UpstreamMode::Exclude);
    assert_eq!(s.reach(true), Err(SettingsError::ExcludeRemote));
    // An unreachable farm falls back to local mode, where it is fine.
    assert!(s.reach(false).is_ok());
    assert_eq!(resolve("build --only").options.upstreams, UpstreamMode::Only);
}

#[test]
fn an_unreachable_farm_is_required_by_the_flags_or_else_the_config() {
    let required = |line: &str, config: bool| {
        let config = RunConfig { farm_required: config, ..RunConfig::default() };
        let s = resolve_in(&format!("build --remote h:1 --certs c {line}"), &env(), config);
        s.expect("settings").farm.expect("a farm").required
    };
    assert_eq!(required("", false), None);
    assert_eq!(required("", true), Some("[workspace] fallback = \"none\""));
    assert_eq!(required("--fallback local", true), None, "the flag overrides the setting");
    assert_eq!(required("--fallback none", false), Some("--fallback none"));
    assert_eq!(required("--farm-required --fallback local", false), Some("--farm-required"));
    let s = resolve("build --remote h:1 --certs c --fallback local --reattach-timeout 5");
    let farm = s.farm.expect("a farm");
    assert!(farm.fallback_named);
    assert_eq!(farm.reattach, Duration::from_secs(5));
    assert_eq!(farm.download, DownloadMode::All);
}

#[test]
fn what_a_run_writes_depends_on_where_it_ran() {
    let s = resolve("build --remote h:1 --certs c --download none --cache local:r");
    let remote = s.reach(true).expect("remote");
    assert!(!remote.writes_workspace, "nothing comes back: no lock");
    assert_eq!(remote.cache_mode, CacheMode::ReadWrite, "downloads are filed locally");
    let local = s.reach(false).expect("fallen back");
    assert!(local.writes_workspace);
    assert_eq!(local.cache_mode, CacheMode::ReadOnly);
    let dry = resolve("build --dry-run").reach(false).expect("dry");
    assert!(!dry.writes_workspace);
}

#[test]
fn remote_execution_is_refused_where_it_cannot_bring_results_home() {
    let config = || RunConfig { exec_reapi: Some(reapi()), ..RunConfig::default() };
    let s = resolve_in("build", &env(), config()).expect("settings");
    assert!(s.remote_exec.is_some() && s.reach(false).is_ok());
    assert!(matches!(s.reach(true), Err(SettingsError::RemoteExec(_))), "one farm at a time");
    let s = resolve_in("build --cache local:r", &env(), config()).expect("settings");
    assert!(matches!(s.reach(false), Err(SettingsError::RemoteExec(_))));
    let s = resolve_in("build --verify=inputs", &env(), config()).expect("settings");
    assert!(matches!(s.reach(false), Err(SettingsError::RemoteExec(_))));
    let s = resolve_in("build --dry-run --cache local:r", &env(), config()).expect("settings");
    assert!(s.remote_exec.is_none() && s.reach(false).is_ok(), "a dry run executes nothing");
}

#[test]
fn the_cache_directory_is_under_the_workspace_unless_named() {
    let env = RunEnv { cwd: Some(PathBuf::from("/here")), ..env() };
    let config = || RunConfig { root: PathBuf::from("/ws"), ..RunConfig::default() };
    let dir = |line: &str| resolve_in(line, &env, config()).expect("settings").cache.dir;
    assert_eq!(dir("build"), PathBuf::from("/ws/.prova/cache"));
    assert_eq!(dir("build --cache-dir /elsewhere"), PathBuf::from("/elsewhere"));
    assert_eq!(dir("build --cache-dir rel"), PathBuf::from("/here/rel"), "from the working dir");
}

#[test]
fn a_farm_is_named_by_its_address_certificate_and_server_name() {
    let farm = resolve("build --remote coord.example:7700 --certs c").farm.expect("a farm");
    assert_eq!(farm.target.addr, "coord.example:7700");
    assert_eq!(farm.target.certs, PathBuf::from("c"));
    assert_eq!(farm.target.server_name, "coord.example", "the address's host unless told");
    let farm = resolve("build --remote 10.0.0.1:7700 --certs c --server-name farm.internal")
        .farm
        .expect("a farm");
    assert_eq!(farm.target.server_name, "farm.internal");
    let err = resolve_in("build --remote h:1", &env(), RunConfig::default()).err();
    assert_eq!(err, Some(SettingsError::Target(crate::remote::TargetError::NoCerts)));
}
