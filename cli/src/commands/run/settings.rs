//! `prova run`'s settings: every decision the flags, the environment and the workspace's
//! config make, resolved once by a pure function ([`RunSettings::resolve`]) before anything
//! runs, as ripgrep's `HiArgs` are from its `LowArgs`. The action (`super::run`) reads only
//! these settings; the environment it needs is captured once ([`RunEnv::capture`]) and
//! passed in, so every rule here has a unit test.
//!
//! Two decisions wait on the farm's answer, not on the flags: whether a `--remote` run is
//! remote at all (an unreachable farm falls back to local mode), so [`RunSettings::reach`]
//! resolves what depends on it once the dial is done.

use std::path::PathBuf;
use std::time::Duration;

use prova_coordinator::layers::reapi::ReapiConfig;
use prova_coordinator::run::{CachePolicy, RunOptions, VerifyOptions};
use prova_coordinator::scheduler::defaults::RunDefaults;
use prova_protocol::TaskId;
use prova_protocol::wire::{Proof, RunOptionsWire, UpstreamMode, VerifySample};

use crate::args::{CacheSpec, ColorWhen, DownloadMode, Fallback, RunArgs};
use crate::commands::common::{self, CacheMode};
use crate::remote::{FarmTarget, TargetError};
use crate::render::Style;

/// What `prova run` reads of its process: captured once by the action, passed in.
#[derive(Clone, Debug, Default)]
pub struct RunEnv {
    /// The cores this machine has (`-j`'s default).
    pub cores: usize,
    /// `--color`.
    pub color: Option<ColorWhen>,
    /// Whether stdout is a terminal (colour under `--color auto`).
    pub stdout_terminal: bool,
    /// Whether stderr is a terminal (the progress line).
    pub stderr_terminal: bool,
    /// The variables the settings read: [`RunEnv::VARS`], when set.
    pub vars: Vec<(String, String)>,
    /// The working directory (a relative `--cache-dir` is taken from it).
    pub cwd: Option<PathBuf>,
}

impl RunEnv {
    /// The variables a run's settings depend on (colour, CI).
    pub const VARS: [&'static str; 6] =
        ["NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "CLICOLOR", "TERM", "CI"];

    /// This process's.
    pub fn capture() -> Self {
        use std::io::IsTerminal as _;
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            color: Some(crate::color::choice()),
            stdout_terminal: std::io::stdout().is_terminal(),
            stderr_terminal: std::io::stderr().is_terminal(),
            vars: Self::VARS
                .iter()
                .filter_map(|k| Some(((*k).to_owned(), std::env::var(k).ok()?)))
                .collect(),
            cwd: std::env::current_dir().ok(),
        }
    }

    fn var(&self, name: &str) -> Option<String> {
        self.vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }
}

/// What the workspace's config says that a run's settings depend on.
#[derive(Clone, Default)]
pub struct RunConfig {
    /// The workspace root (the default cache directory is under it).
    pub root: PathBuf,
    /// `[workspace] fallback = "none"`.
    pub farm_required: bool,
    /// Where tasks execute remotely (`--remote-exec` over `[exec.reapi]`), not read for a dry
    /// run; `None` to run here.
    pub exec_reapi: Option<ReapiConfig>,
}

/// A flag combination or value `prova run` refuses before anything runs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// `--verify-allow` not naming a task id.
    #[error("--verify-allow {0}: write a task id, project#task")]
    AllowSyntax(String),
    /// `--verify-allow` naming a task outside the run.
    #[error("--verify-allow {0}: no such task in this run")]
    AllowUnknown(String),
    /// `--exclude-dependencies` with a farm.
    #[error(
        "--exclude-dependencies reads the dependencies' outputs in your workspace, which a farm \
         cannot see: use --only (it restores cached dependencies)"
    )]
    ExcludeRemote,
    /// `--exclude-dependencies` with a proof.
    #[error(
        "--exclude-dependencies cannot be proven: a proof's exec roots take the dependencies' \
         outputs from the cache; use --only (it restores cached ones)"
    )]
    ExcludeVerify,
    /// `--remote` without `--certs`.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// Remote execution refused (`crate::reapi_exec::refusal`).
    #[error("{0}")]
    RemoteExec(&'static str),
}

/// The cache side of the settings.
#[derive(Clone, Debug)]
pub struct CacheSettings {
    /// `--no-cache`: a scratch store, no salt of its own.
    pub off: bool,
    /// Executions are saved in the local layer (not `--no-cache`, not a `--cache` that
    /// leaves its writes out): what remote execution needs to bring results home.
    pub writes_local: bool,
    /// What the run asks of the local cache (and through it the REAPI layer).
    pub local: CachePolicy,
    /// What a remote run asks of the farm's cache (`--cache farm:MODE`).
    pub farm: CachePolicy,
    /// How the cache is opened for a local run and for a remote one.
    pub open_local: CacheMode,
    /// ... and for a remote run (it files what it downloads).
    pub open_remote: CacheMode,
    /// `--cache` as given (the REAPI layer reads its `reapi:` part).
    pub spec: Option<CacheSpec>,
    /// The cache directory (`--cache-dir`, `PROVA_CACHE_DIR`, else under the workspace).
    pub dir: PathBuf,
}

/// `--remote` and what goes with it.
#[derive(Clone, Debug)]
pub struct FarmSettings {
    /// The farm, the certificate to reach it with and the name it must carry.
    pub target: FarmTarget,
    /// Why an unreachable farm fails the run, when it does (the flag or setting that says so).
    pub required: Option<&'static str>,
    /// `--fallback local` given (the warning names it).
    pub fallback_named: bool,
    /// Which outputs come back.
    pub download: DownloadMode,
    /// How long a run whose coordinator went away redials it.
    pub reattach: Duration,
}

/// Everything `prova run` decided from its flags, environment and config.
#[derive(Clone)]
pub struct RunSettings {
    /// `--dry-run`: print the plan, run nothing, take no lock.
    pub dry_run: bool,
    /// How events are rendered (mode, JSON, colour, which logs).
    pub style: Style,
    /// Whether the live progress line is drawn.
    pub progress: bool,
    /// `--summarize`: `Some(None)` for the default file.
    pub summarize: Option<Option<PathBuf>>,
    /// `--profile`.
    pub profile: Option<PathBuf>,
    /// The cache layers and modes.
    pub cache: CacheSettings,
    /// Concurrency, failure policy, proofs (the workspace view is filled after `prepare`),
    /// what becomes of the tasks not asked for.
    pub options: RunOptions,
    /// `--retry`, `--timeout`.
    pub defaults: RunDefaults,
    /// `--remote`, when given.
    pub farm: Option<FarmSettings>,
    /// Remote execution (`--remote-exec`, `[exec.reapi]`); never for a dry run.
    pub remote_exec: Option<ReapiConfig>,
    /// Wait for the workspace lock (not `--no-wait`).
    pub lock_wait: bool,
    /// Arguments after `--`.
    pub forward: Vec<String>,
    /// `CI`, as the REAPI cache's upload rule reads it.
    pub ci: Option<String>,
}

/// What the settings say once the farm answered or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The run goes to the farm.
    pub remote: bool,
    /// The run writes the workspace (outputs, local cache): takes the lock.
    pub writes_workspace: bool,
    /// How the local cache is opened.
    pub cache_mode: CacheMode,
}

impl RunSettings {
    /// Resolves `args` with the process's `env` and the workspace's `config`; `in_run` says
    /// whether a task id is in the selected graph. Pure.
    pub fn resolve(
        args: RunArgs,
        env: &RunEnv,
        config: RunConfig,
        in_run: &dyn Fn(&TaskId) -> bool,
    ) -> Result<Self, SettingsError> {
        let upstreams = args.upstreams();
        let verify = verify_options(&args, in_run)?;
        if upstreams == UpstreamMode::Exclude && verify.any() {
            return Err(SettingsError::ExcludeVerify);
        }
        let options = RunOptions {
            concurrency: args.concurrency.unwrap_or(env.cores).max(1),
            continue_on_failure: args.keep_going,
            verify,
            upstreams,
        };
        let color = !args.json
            && crate::color::decide(
                env.color.unwrap_or(ColorWhen::Auto),
                env.stdout_terminal,
                &|k| env.var(k),
            );
        let style = Style { mode: args.output, json: args.json, color, logs: args.output_logs };
        let progress = crate::render::progress::Progress::wanted(
            args.json,
            env.stderr_terminal,
            env.var("CI").is_some(),
        );
        let farm = match args.remote.remote {
            Some(_) => Some(FarmSettings {
                target: FarmTarget::from_args(&args.remote)?,
                required: required(&args, config.farm_required),
                fallback_named: args.fallback == Some(Fallback::Local),
                download: args.download,
                reattach: Duration::from_secs(args.reattach_timeout),
            }),
            None => None,
        };
        Ok(Self {
            dry_run: args.dry_run,
            style,
            progress,
            cache: cache_settings(
                &args,
                common::cache_dir_in(&config.root, &args.cache_dir, env.cwd.as_deref()),
            ),
            options,
            defaults: RunDefaults { retry: args.retry, timeout: args.timeout },
            farm,
            remote_exec: if args.dry_run { None } else { config.exec_reapi },
            lock_wait: !args.lock.no_wait,
            summarize: args.summarize,
            profile: args.profile,
            forward: args.forward,
            ci: env.var("CI"),
        })
    }

    /// What follows from the run reaching its farm (`remote`) or not, and the refusals that
    /// depend on it. Pure.
    pub fn reach(&self, remote: bool) -> Result<Reach, SettingsError> {
        if remote && self.options.upstreams == UpstreamMode::Exclude {
            return Err(SettingsError::ExcludeRemote);
        }
        if self.remote_exec.is_some()
            && let Some(why) = crate::reapi_exec::refusal(
                self.cache.writes_local,
                remote,
                self.options.verify.inputs,
            )
        {
            return Err(SettingsError::RemoteExec(why));
        }
        // A dry run and a remote run that brings nothing back write neither outputs nor the
        // local cache.
        let brings_nothing_back =
            remote && self.farm.as_ref().is_some_and(|f| f.download == DownloadMode::None);
        Ok(Reach {
            remote,
            writes_workspace: !self.dry_run && !brings_nothing_back,
            cache_mode: if remote { self.cache.open_remote } else { self.cache.open_local },
        })
    }

    /// `--cache farm:…` without `--remote`: a layer there is nothing to use for.
    pub fn farm_layer_unused(&self) -> bool {
        self.farm.is_none() && self.cache.spec.is_some_and(|c| c.farm.is_some())
    }

    /// What a remote run asks of the farm.
    pub fn wire_options(&self) -> RunOptionsWire {
        let (policy, options) = (self.cache.farm, &self.options);
        RunOptionsWire {
            continue_on_failure: options.continue_on_failure,
            read: policy.read,
            write: policy.write,
            read_left_out: policy.read_left_out,
            verify: [
                (Proof::Determinism, options.verify.determinism),
                (Proof::Inputs, options.verify.inputs),
            ]
            .into_iter()
            .filter_map(|(p, on)| on.then_some(p))
            .collect(),
            verify_allow: options.verify.allow.iter().cloned().collect(),
            verify_sample: options.verify.sample,
            upstreams: options.upstreams,
        }
    }
}

/// `--verify`, `--verify-allow` (each a task of this run), `--verify-sample`/`--verify-seed`.
fn verify_options(
    args: &RunArgs,
    in_run: &dyn Fn(&TaskId) -> bool,
) -> Result<VerifyOptions, SettingsError> {
    let mut verify = VerifyOptions::default();
    if let Some(mode) = args.verify {
        verify.determinism = mode.proofs().contains(&Proof::Determinism);
        verify.inputs = mode.proofs().contains(&Proof::Inputs);
    }
    for t in &args.verify_allow {
        let id = TaskId::parse(t).ok_or_else(|| SettingsError::AllowSyntax(t.clone()))?;
        if !in_run(&id) {
            return Err(SettingsError::AllowUnknown(t.clone()));
        }
        verify.allow.insert(id);
    }
    verify.sample = args.verify_sample.map(|ppm| VerifySample { ppm, seed: args.verify_seed });
    Ok(verify)
}

/// Why an unreachable farm fails the run: `--farm-required`, `--fallback none`, else
/// `[workspace] fallback = "none"` unless `--fallback local` (the flags override the
/// setting either way).
fn required(args: &RunArgs, config_required: bool) -> Option<&'static str> {
    match args.fallback {
        _ if args.farm_required => Some("--farm-required"),
        Some(Fallback::None) => Some("--fallback none"),
        Some(Fallback::Local) => None,
        None => config_required.then_some("[workspace] fallback = \"none\""),
    }
}

/// `--no-cache`, `--force`, `--cache SPEC`, `--cache-dir`.
fn cache_settings(args: &RunArgs, dir: PathBuf) -> CacheSettings {
    let (on, off) = (CachePolicy::READ_WRITE, CachePolicy::OFF);
    let (local, farm) = if args.no_cache {
        (off, off)
    } else if args.force {
        (CachePolicy::FORCE, CachePolicy::FORCE)
    } else if let Some(spec) = args.cache {
        // The REAPI layer files what it finds locally, so it reads and writes through it.
        // A `--cache` that leaves the farm out neither reads nor writes it (as Turborepo's
        // `--cache=local:rw` leaves its remote cache out).
        let reapi = spec.reapi.unwrap_or_default();
        (
            CachePolicy::of(spec.read || reapi.read, spec.write || reapi.write),
            spec.farm.map_or(off, |m| CachePolicy::of(m.read, m.write)),
        )
    } else {
        (on, on)
    };
    CacheSettings {
        off: args.no_cache,
        writes_local: !args.no_cache && args.cache.is_none_or(|c| c.write),
        local,
        farm,
        open_local: cache_mode(args, false),
        open_remote: cache_mode(args, true),
        spec: args.cache,
        dir,
    }
}

/// How the run opens the cache: not at all when it neither reads nor writes it (`--no-cache`,
/// `--cache local:`), read-only for `--cache local:r`. A remote run files what it downloads
/// in the local cache, so it opens it read-write unless `--no-cache` (then the downloads go
/// through a scratch store).
fn cache_mode(args: &RunArgs, remote: bool) -> CacheMode {
    match args.cache {
        _ if args.no_cache => CacheMode::Scratch,
        _ if args.force || remote => CacheMode::ReadWrite,
        Some(spec) if spec.reapi.is_some() => CacheMode::ReadWrite, // REAPI hits are filed locally
        Some(spec) if !spec.read && !spec.write => CacheMode::Scratch,
        Some(spec) if !spec.write => CacheMode::ReadOnly,
        _ => CacheMode::ReadWrite,
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
