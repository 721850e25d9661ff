//! What a user can type. Parsing only: commands resolve these into settings.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use prova_protocol::wire::Proof;

/// prova — a task runner for monorepos that proves its cache is safe.
#[derive(Debug, Parser)]
#[command(name = "prova", version, about, propagate_version = true)]
pub struct Cli {
    /// Run as if started in DIR (the workspace is found from there upwards).
    #[arg(short = 'C', long = "cwd", global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// More logging on stderr (-v info, -vv debug); PROVA_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Log lines as `text` (plain unless stderr is a terminal) or `json` (one object per
    /// line: timestamp, level, target, message and fields — for journald, Loki, kubectl).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "PROVA_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// Colour: `auto` (a terminal, unless NO_COLOR or CLICOLOR=0; FORCE_COLOR or
    /// CLICOLOR_FORCE set to anything but 0 colour a pipe too), `always` or `never`.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,

    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    /// On a terminal, as the environment allows (`crate::color`).
    Auto,
    /// Always, even into a pipe or a file.
    Always,
    /// Never.
    Never,
}

/// Subcommands.
///
/// Deferred (`defer = true`, here and on every nested subcommand enum): a subcommand's
/// arguments are built only when it is the one invoked (or its help is shown), not all of
/// them for every run — the whole tree was about 0.4 ms of each start. Two rules follow,
/// checked by `args_tests::the_help_of_every_command_is_its_own`: an `Args` struct carries
/// `//` comments, not `///` (its doc comment would replace the subcommand's about once
/// deferred), and no argument reuses a global's id (`dir`, `verbose`, `log_format`,
/// `color`: a deferred one would be merged with the global).
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum CliCommand {
    /// Run tasks and everything they depend on.
    Run(RunArgs),
    /// Run a selection, then re-run what an edit affects until Ctrl-C; persistent tasks (dev
    /// servers) keep running and restart only when their inputs change.
    ///
    /// Example: `prova watch build --all`
    Watch(WatchArgs),
    /// Print the task graph of a selection (dot or JSON).
    Graph(GraphArgs),
    /// Say which inputs moved since the newest cache entry of a task.
    Why(TaskArgs),
    /// Show a task's key, every key component, and its inputs with digests.
    Show(TaskArgs),
    /// Inspect or trim the cache.
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Create the cluster CA and certificate bundles for a farm.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Run a farm coordinator.
    Coordinator(CoordinatorArgs),
    /// Run a farm worker.
    Worker(WorkerArgs),
    /// Ask a farm about itself.
    #[command(subcommand)]
    Farm(FarmCommand),
    /// Keys whose executions disagree (two output fingerprints, or flaky), with the files.
    Hermeticity(HermeticityArgs),
    /// Show how a task's last two executions differed (a failed determinism proof).
    Diff(TaskArgs),
    /// List the recorded runs of this workspace, newest first.
    Runs(RunsArgs),
    /// Print the summary of the last recorded run again.
    Last(LastArgs),
    /// Write a commented prova.toml for this directory (npm/yarn/pnpm or Cargo workspace).
    ///
    /// Example: `prova init && prova run build --all --dry-run`
    Init(InitArgs),
    /// Print a shell completion script.
    ///
    /// Example: `prova completions bash > ~/.local/share/bash-completion/completions/prova`
    Completions(CompletionsArgs),
    /// List the projects, their tasks and each task's dependencies.
    ///
    /// Example: `prova ls --json | jq '.projects[].name'`
    Ls(LsArgs),
    /// Print a JSON Schema of prova's: `config` (prova.toml, for editors) or `events` (--json).
    ///
    /// Example: `prova schema config --write` (refreshes .prova/prova.schema.json)
    #[command(subcommand)]
    Schema(SchemaCommand),
}

/// `prova schema ...`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum SchemaCommand {
    /// The JSON Schema of prova.toml, root and project files (taplo / Even Better TOML).
    Config {
        /// Write it to .prova/prova.schema.json at the workspace root, the file the
        /// `#:schema` line `prova init` writes points at, instead of printing it.
        #[arg(long)]
        write: bool,
    },
    /// The JSON Schema of the `prova run --json` lines.
    Events,
}

// `prova init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Overwrite an existing prova.toml.
    #[arg(long)]
    pub force: bool,
}

// `prova completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print the script for.
    pub shell: clap_complete::Shell,
}

// `prova ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Machine-readable output (one JSON document; README "prova ls --json").
    #[arg(long)]
    pub json: bool,
}

// `prova runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// How many runs to list.
    #[arg(short = 'n', long, default_value_t = 20)]
    pub limit: usize,
    /// Machine-readable output: one JSON object per run.
    #[arg(long)]
    pub json: bool,
}

// `prova last`.
#[derive(Debug, Args)]
pub struct LastArgs {
    /// The summary line of the `--json` event stream instead of the text summary.
    #[arg(long)]
    pub json: bool,
}

// `prova hermeticity`.
#[derive(Debug, Args)]
pub struct HermeticityArgs {
    /// Ask a farm instead of the local ledger.
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// The local cache (without --remote).
    #[command(flatten)]
    pub cache: CacheDirArgs,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `prova certs ...`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum CertsCommand {
    /// Create the cluster CA (`DIR/ca/`) and the coordinator bundle (`DIR/coordinator/`).
    Init {
        /// Where the CA and bundles live.
        // Its own id: the global `-C DIR` is `dir` (a deferred subcommand would merge them).
        #[arg(id = "certs_dir", value_name = "DIR")]
        dir: PathBuf,
        /// Names and addresses the coordinator's certificate carries (default: localhost,
        /// 127.0.0.1 and this host's name); repeatable.
        #[arg(long = "san", value_name = "NAME")]
        sans: Vec<String>,
    },
    /// Issue a bundle (`DIR/NAME/`: CA certificate, certificate, key) for one peer.
    Issue {
        /// Where the CA and bundles live.
        // Its own id: the global `-C DIR` is `dir` (a deferred subcommand would merge them).
        #[arg(id = "certs_dir", value_name = "DIR")]
        dir: PathBuf,
        /// What the holder may do: worker, ci, client or admin.
        #[arg(long)]
        role: String,
        /// The bundle's name (the worker's or client's id).
        #[arg(long)]
        name: String,
    },
}

// How to reach a farm.
#[derive(Debug, Args, Clone, Default)]
pub struct RemoteArgs {
    /// The coordinator, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", env = "PROVA_REMOTE")]
    pub remote: Option<String>,
    /// This client's certificate bundle (CA certificate, certificate, key).
    #[arg(long, value_name = "DIR", env = "PROVA_CERTS")]
    pub certs: Option<PathBuf>,
    /// The name the coordinator's certificate must carry (default: the host of --remote).
    #[arg(long, value_name = "NAME", env = "PROVA_SERVER_NAME")]
    pub server_name: Option<String>,
}

// `prova coordinator`.
#[derive(Debug, Args)]
pub struct CoordinatorArgs {
    /// A config file (TOML; flags override it). See deploy/coordinator.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on (UDP), e.g. 0.0.0.0:7700.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The coordinator's certificate bundle.
    #[arg(long, value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// The farm cache directory.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// When entries enter the trusted tier: `ci` (written by a ci certificate) or `proven`
    /// (and two workers agree on the fingerprint).
    #[arg(long, value_name = "POLICY")]
    pub trust: Option<String>,
    /// Serve the read-only HTTP listener (dashboard, /metrics, /healthz, /readyz) on ADDR,
    /// e.g. 127.0.0.1:7780. Off by default. Anything but 127.0.0.1/::1 needs
    /// --http-token-file.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// A file holding the bearer token the HTTP listener asks for (every path but /healthz).
    #[arg(long, value_name = "FILE")]
    pub http_token_file: Option<PathBuf>,
}

// `prova worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// A config file (TOML; flags override it). See deploy/worker.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The coordinator, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub join: Option<String>,
    /// This worker's certificate bundle.
    #[arg(long, value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// Concurrent tasks (default: the number of cores).
    #[arg(long)]
    pub slots: Option<u32>,
    /// Exec roots, the blob cache and staged artifacts.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
    /// A label placement can require, KEY=VALUE; repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// `bwrap` (the default: refuse to start without it) or `none`.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
    /// Blob cache size bound, e.g. 20G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub blob_cache_size: Option<u64>,
    /// Free space the work dir must keep, e.g. 1G (default 256M): below it the worker hands
    /// work back and evicts its blob cache until space returns.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub min_free_disk: Option<u64>,
    /// Where exec roots go: `auto` (the default: /dev/shm while it has room for a task's
    /// inputs 8 times over and 512M more, else the work dir), `work-dir`, or the absolute
    /// path of a tmpfs (used while it has room for the inputs 8 times over and the disk
    /// floor more). A task that runs the tmpfs short is handed back, and roots stay in the
    /// work dir from then on.
    #[arg(long, value_name = "WHERE")]
    pub exec_roots: Option<String>,
    /// The name the coordinator's certificate must carry (default: the host of --join).
    #[arg(long, value_name = "NAME")]
    pub server_name: Option<String>,
    /// Join a REAPI farm (BuildGrid) as bots at `grpc://HOST:PORT` or `grpcs://HOST:PORT`,
    /// speaking the Remote Workers API, instead of a prova coordinator (no --join, --certs).
    #[arg(long, value_name = "URL", conflicts_with_all = ["join", "certs"])]
    pub reapi_bot: Option<String>,
    /// With --reapi-bot: the REAPI instance name (default: empty).
    #[arg(long, value_name = "NAME", default_value = "", requires = "reapi_bot")]
    pub reapi_instance: String,
    /// With --reapi-bot: the bot's name, reported as the executing worker (default: the
    /// host name).
    #[arg(long, value_name = "NAME", requires = "reapi_bot")]
    pub bot_name: Option<String>,
}

/// `prova farm ...`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum FarmCommand {
    /// Workers, slots, queue, running tasks.
    Status {
        /// The farm.
        #[command(flatten)]
        remote: RemoteArgs,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Take a worker out (an admin certificate): it gets no new work, its running tasks
    /// finish, then it leaves the farm and exits. Nothing it ran counts as a loss.
    Drain {
        /// The worker's name (its certificate's, as `farm status` lists it).
        worker: String,
        /// The farm.
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Let a quarantined worker take work again (an admin certificate). A worker is
    /// quarantined when the farm refused its results too often (outputs outside the task's
    /// declared ones); the quarantine outlives its reconnects and the coordinator's restarts.
    Release {
        /// The worker's name (as `farm status` lists it).
        worker: String,
        /// The farm.
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// Which task outputs a remote run brings back into the workspace.
/// What `--verify` proves.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum VerifyMode {
    // Plain comments: doc comments would change `--help` (the flag's own text explains).
    // Re-run elsewhere, perturbed, and compare outputs.
    Determinism,
    // Run with only declared inputs present and name what else was read.
    Inputs,
    // Both.
    All,
}

impl VerifyMode {
    /// The proofs this mode asks for.
    pub fn proofs(self) -> &'static [Proof] {
        match self {
            Self::Determinism => &[Proof::Determinism],
            Self::Inputs => &[Proof::Inputs],
            Self::All => &[Proof::Determinism, Proof::Inputs],
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum DownloadMode {
    /// Every task's.
    #[default]
    All,
    /// Only the requested tasks'.
    Requested,
    /// None.
    None,
}

/// What a remote run does when its farm cannot be reached (`--fallback`).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Fallback {
    /// Run in local mode, with the local cache (the default).
    Local,
    /// Fail the run (as --farm-required; overrides `[workspace] fallback = "local"`).
    None,
}

// Where the cache lives.
#[derive(Debug, Args, Clone, Default)]
pub struct CacheDirArgs {
    /// The cache directory (default: `<workspace>/.prova/cache`); share one across clones.
    #[arg(long, env = "PROVA_CACHE_DIR", value_name = "DIR", global = true)]
    pub cache_dir: Option<PathBuf>,
}

// Waiting for the workspace lock (one writer per workspace; see `cli/src/lock.rs`).
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct LockArgs {
    /// If another prova is writing this workspace, fail at once (exit 3) instead of waiting
    /// for it.
    #[arg(long)]
    pub no_wait: bool,
}

// `prova why` / `prova show`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The task, `project#task`.
    #[arg(value_name = "TASK")]
    pub task: String,

    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,

    /// The cache.
    #[command(flatten)]
    pub cache: CacheDirArgs,
}

/// `prova cache ...`.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum CacheCommand {
    /// Entries, blobs, bytes.
    Stats {
        /// The cache.
        #[command(flatten)]
        cache: CacheDirArgs,
        /// Also run SQLite's full integrity check.
        #[arg(long)]
        check: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Drop least-recently-used entries until the cache fits.
    Prune {
        /// The cache.
        #[command(flatten)]
        cache: CacheDirArgs,
        /// Size bound, e.g. `2G`, `500M`, `1048576`.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: u64,
        /// Waiting for the workspace lock.
        #[command(flatten)]
        lock: LockArgs,
    },
    /// Remove every entry and blob (also when the index is damaged).
    Clean {
        /// The cache.
        #[command(flatten)]
        cache: CacheDirArgs,
        /// Waiting for the workspace lock.
        #[command(flatten)]
        lock: LockArgs,
    },
}

/// A flag or config value that does not parse; its `Display` is what clap (or the config
/// loader) prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// Not a number with a unit.
    NotASize(String),
    /// A negative or NaN size.
    BadSize(String),
    /// A `--cache` part without `:`.
    CacheSyntax(String),
    /// A `--cache` layer other than `local`, `farm`, `reapi`.
    CacheLayer(String),
    /// A `--cache` mode other than r, w, rw.
    CacheMode(String),
}

impl std::fmt::Display for ValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotASize(s) => write!(f, "not a size: {s:?} (try 2G, 500M)"),
            Self::BadSize(s) => write!(f, "not a size: {s:?}"),
            Self::CacheSyntax(part) => write!(f, "`{part}`: want LAYER:MODE, e.g. local:rw"),
            Self::CacheLayer(layer) => {
                write!(f, "unknown cache layer `{layer}` (layers: {})", CACHE_LAYERS.join(", "))?;
                match layer_suggestion(layer) {
                    Some(h) => write!(f, "\n  help: did you mean `{h}`?"),
                    None => Ok(()),
                }
            }
            Self::CacheMode(part) => write!(f, "`{part}`: mode is r, w or rw"),
        }
    }
}

impl std::error::Error for ValueError {}

/// Parses `2G`, `500M`, `64k`, `1048576` (binary units).
pub fn parse_size(s: &str) -> Result<u64, ValueError> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        Some('T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| ValueError::NotASize(s.to_owned()))?;
    if n.is_nan() || n < 0.0 {
        return Err(ValueError::BadSize(s.to_owned()));
    }
    Ok((n * mult as f64) as u64)
}

/// The layers `--cache` names.
pub const CACHE_LAYERS: [&str; 3] = ["local", "farm", "reapi"];

/// The did-you-mean of an unknown layer: Turborepo's `remote` is prova's `farm`.
fn layer_suggestion(layer: &str) -> Option<&'static str> {
    if layer.eq_ignore_ascii_case("remote") {
        return Some("farm");
    }
    let hit = prova_coordinator::config::suggest(layer, CACHE_LAYERS)?;
    CACHE_LAYERS.into_iter().find(|l| *l == hit)
}

/// Which cache layers a run reads and writes. A `--cache` value names the layers it uses,
/// as Turborepo's does: a layer it leaves out is neither read nor written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSpec {
    /// Read the local layer.
    pub read: bool,
    /// Write the local layer.
    pub write: bool,
    /// The REAPI layer (`reapi:r`, `reapi:rw`), when named.
    pub reapi: Option<LayerMode>,
    /// The farm's cache (`farm:r`, `farm:rw`) for a `--remote` run, when named.
    pub farm: Option<LayerMode>,
}

/// What a run does with one cache layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerMode {
    /// Read it.
    pub read: bool,
    /// Write it.
    pub write: bool,
}

/// Parses `--cache=local:rw` (also `local:r`, `local:w`, `local:` for neither), with an
/// optional REAPI layer: `local:rw,reapi:rw` (`reapi:r` reads only) and the farm's:
/// `local:rw,farm:r`.
pub fn parse_cache_spec(s: &str) -> Result<CacheSpec, ValueError> {
    let mut spec = CacheSpec { read: false, write: false, reapi: None, farm: None };
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (layer, mode) =
            part.split_once(':').ok_or_else(|| ValueError::CacheSyntax(part.to_owned()))?;
        let mut m = LayerMode::default();
        for c in mode.chars() {
            match c {
                'r' => m.read = true,
                'w' => m.write = true,
                _ => return Err(ValueError::CacheMode(part.to_owned())),
            }
        }
        match layer {
            "local" => (spec.read, spec.write) = (spec.read || m.read, spec.write || m.write),
            "reapi" => spec.reapi = Some(m),
            "farm" => spec.farm = Some(m),
            _ => return Err(ValueError::CacheLayer(layer.to_owned())),
        }
    }
    Ok(spec)
}

// Which tasks of which projects.
#[derive(Debug, Args, Clone)]
pub struct SelectArgs {
    /// Task names (`build`) or ids (`web#build`).
    #[arg(required = true, value_name = "TASK")]
    pub tasks: Vec<String>,

    /// Every project.
    #[arg(long)]
    pub all: bool,

    /// This project (by name or dir); repeatable.
    #[arg(short = 'p', long = "project", value_name = "NAME")]
    pub projects: Vec<String>,

    /// Projects by Turborepo's filter grammar; repeatable (a union; `!` excludes): a name or
    /// dir glob (`web`, `libs/*`), `./dir` or `{./dir}`, `web...` (and its dependencies),
    /// `...core` (and its dependents), `^` leaves the project out (`web^...`), `[ref]` or
    /// `[ref...ref]` (changed in git), combined: `...[HEAD^1]`, `{./apps/*}[main]`.
    #[arg(long = "filter", value_name = "SELECTOR")]
    pub filters: Vec<String>,

    /// Projects with files changed since this git ref, and their dependents (nothing
    /// changed is an empty run, exit 0).
    #[arg(long, value_name = "REF")]
    pub affected: Option<String>,

    /// A selection with nothing to run exits 0 (with a warning) instead of 2.
    #[arg(long)]
    pub allow_empty: bool,
}

/// How task output is shown.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum OutputMode {
    /// Lines as they come, each prefixed with `project#task`.
    #[default]
    Prefixed,
    /// Each task's output in one block when it finishes.
    Grouped,
}

/// `--verify-sample`: a fraction in [0, 1], in parts per million.
fn parse_fraction(s: &str) -> Result<u32, String> {
    let f: f64 = s.parse().map_err(|_| format!("`{s}` is not a number; write e.g. 0.1"))?;
    if !(0.0..=1.0).contains(&f) {
        return Err(format!("{s} is not between 0 and 1"));
    }
    Ok((f * 1_000_000.0).round() as u32)
}

/// `--timeout`: a humantime duration longer than zero.
fn parse_duration(
    s: &str,
) -> Result<std::time::Duration, prova_coordinator::config::policy::TimeoutError> {
    prova_coordinator::config::policy::parse_timeout(s)
}

/// Which task output is shown (`--output-logs`, as Turborepo users know it).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum OutputLogs {
    /// Everything: executions' output and the logs cache hits replay.
    #[default]
    Full,
    /// Executions' output; a cache hit shows one line instead of its replayed log.
    NewOnly,
    /// Only the output of tasks that failed (held until they finish).
    ErrorsOnly,
    /// One line per task with its key: no output.
    HashOnly,
    /// No task output at all.
    None,
}

// `prova run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Selection.
    #[command(flatten)]
    pub select: SelectArgs,

    /// Tasks in flight at once (default: the number of cores).
    #[arg(short = 'j', long = "concurrency", value_name = "N")]
    pub concurrency: Option<usize>,

    /// Keep running independent tasks after a failure.
    #[arg(long = "continue")]
    pub keep_going: bool,

    /// Run only the tasks asked for, not the tasks they depend on: a cached dependency is
    /// restored, one that is not is taken from the outputs on disk (refused when it declares
    /// outputs and none are there).
    #[arg(long, conflicts_with = "exclude_dependencies")]
    pub only: bool,

    /// Run the tasks asked for without their dependencies, neither run nor restored: the
    /// tasks read what is on disk, and their keys fold it (local mode).
    #[arg(long)]
    pub exclude_dependencies: bool,

    /// Print what would run, in order, and run nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// How task output is shown.
    #[arg(long, value_enum, default_value_t)]
    pub output: OutputMode,

    /// Which task output is shown: `full` (default), `new-only` (a cache hit's log is not
    /// replayed), `errors-only` (only failed tasks' output), `hash-only` (a line with each
    /// task's key), `none`. Applies to `--json` `output` events too.
    #[arg(long, value_enum, value_name = "MODE", default_value_t)]
    pub output_logs: OutputLogs,

    /// Machine-readable output: one JSON event per line, then the summary (schema:
    /// `schemas/events.json`).
    #[arg(long)]
    pub json: bool,

    /// Also write the run's summary (the `--json` summary object) to FILE (default:
    /// `.prova/runs/<run id>.json`). Give a file as `--summarize=FILE`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true)]
    pub summarize: Option<Option<PathBuf>>,

    /// Write a Chrome trace of the run (Trace Event Format: chrome://tracing, Perfetto) to
    /// FILE: one span per task, one lane per slot.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,

    /// Execute every task of the run (no cache reads) and overwrite entries; the dependencies
    /// `--only` leaves out are still restored.
    #[arg(long, conflicts_with_all = ["no_cache", "cache"])]
    pub force: bool,

    /// Neither read nor write the cache.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,

    /// Cache layers and modes, e.g. `local:rw` (default), `local:r`, `local:w`,
    /// `local:rw,farm:r` (with --remote), `local:rw,reapi:rw`; a layer left out is not used.
    #[arg(long, value_name = "SPEC", value_parser = parse_cache_spec)]
    pub cache: Option<CacheSpec>,

    /// The cache directory.
    #[command(flatten)]
    pub cache_dir: CacheDirArgs,

    /// Prove what runs: `determinism` (the default: re-run elsewhere, perturbed, and compare
    /// outputs), `inputs` (run with only declared inputs present, name what else it read),
    /// or `all`. Give a value as `--verify=inputs`.
    #[arg(long, value_name = "PROOF", num_args = 0..=1, require_equals = true, default_missing_value = "determinism", value_enum)]
    pub verify: Option<VerifyMode>,

    /// Tasks whose nondeterminism is reported but does not fail the run; repeatable or
    /// comma-separated (`web#bundle,api#build`).
    #[arg(long, value_name = "TASK", value_delimiter = ',')]
    pub verify_allow: Vec<String>,

    /// With --verify: prove only this fraction of the executed tasks (`0.1`), chosen by key
    /// and --verify-seed, so the same key is in or out of every run with that seed.
    #[arg(long, value_name = "FRACTION", value_parser = parse_fraction, requires = "verify")]
    pub verify_sample: Option<u32>,

    /// With --verify-sample: which sample (another seed rotates to another subset).
    #[arg(long, value_name = "S", default_value_t = 0, requires = "verify_sample")]
    pub verify_seed: u64,

    /// Extra attempts after a failure for every task that sets no `retries` (overrides
    /// `[workspace] retry`). Never keyed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retry: Option<u32>,

    /// Wall-clock limit for every task that sets no `timeout` (overrides `[workspace]
    /// timeout`), e.g. `90s`, `10m`. Never keyed.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<std::time::Duration>,

    /// Run on a farm instead of locally.
    #[command(flatten)]
    pub remote: RemoteArgs,

    /// Execute the tasks on a REAPI farm (Bazel remote execution: BuildGrid, Buildbarn,
    /// BuildBuddy) at `grpc://HOST:PORT` or `grpcs://HOST:PORT`; auth and TLS from
    /// `[exec.reapi]` (which alone also turns it on). `local` runs here despite
    /// `[exec.reapi]`. Results are saved in the local cache and restored into the workspace.
    #[arg(long, value_name = "URL", conflicts_with_all = ["no_cache", "remote"])]
    pub remote_exec: Option<String>,

    /// With --remote: which outputs to bring back.
    #[arg(long, value_enum, default_value_t)]
    pub download: DownloadMode,

    /// With --remote: what to do when the farm cannot be reached (no handshake within
    /// seconds): `local` (the default) warns once and runs in local mode, with the local
    /// cache, as Turborepo does when its remote cache is down; `none` fails (exit 2), as
    /// --farm-required. Default: `[workspace] fallback`, else `local`. A farm that answers
    /// and refuses is never a reason to fall back.
    #[arg(long, value_enum, value_name = "MODE", env = "PROVA_FALLBACK")]
    pub fallback: Option<Fallback>,

    /// With --remote: how long, in seconds, a run whose coordinator went away mid-run
    /// redials it (a restart, a rolling upgrade) before it gives up; once back, the run is
    /// submitted again: what was saved is a hit, what workers still run is adopted, nothing
    /// runs twice. `0` gives up at once.
    #[arg(long, value_name = "SECS", env = "PROVA_REATTACH_TIMEOUT", default_value_t = 120)]
    pub reattach_timeout: u64,

    /// With --remote: a farm that cannot be reached fails the run (exit 2) instead of the run
    /// going on locally (as `--fallback none`; wins over `--fallback` and PROVA_FALLBACK).
    #[arg(long)]
    pub farm_required: bool,

    /// Waiting for the workspace lock.
    #[command(flatten)]
    pub lock: LockArgs,

    /// Arguments after `--` go to the requested tasks (not to their dependencies).
    #[arg(last = true, value_name = "ARGS")]
    pub forward: Vec<String>,
}

impl RunArgs {
    /// What becomes of the tasks the selection did not ask for.
    pub fn upstreams(&self) -> prova_protocol::wire::UpstreamMode {
        use prova_protocol::wire::UpstreamMode;
        if self.only {
            UpstreamMode::Only
        } else if self.exclude_dependencies {
            UpstreamMode::Exclude
        } else {
            UpstreamMode::Run
        }
    }
}

// `prova watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Selection.
    #[command(flatten)]
    pub select: SelectArgs,

    /// Tasks in flight at once in each run (default: the number of cores).
    #[arg(short = 'j', long = "concurrency", value_name = "N")]
    pub concurrency: Option<usize>,

    /// Keep running independent tasks after a failure.
    #[arg(long = "continue")]
    pub keep_going: bool,

    /// How task output is shown.
    #[arg(long, value_enum, default_value_t)]
    pub output: OutputMode,

    /// Which task output is shown (as `prova run --output-logs`); by default a cache hit is
    /// one line, so a re-run shows only what executed.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = OutputLogs::NewOnly)]
    pub output_logs: OutputLogs,

    /// The cache directory.
    #[command(flatten)]
    pub cache_dir: CacheDirArgs,

    /// Quiet time (milliseconds) after the last change of a burst before the run starts.
    #[arg(long, value_name = "MS", default_value_t = 150)]
    pub debounce: u64,
}

// `prova graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// Selection.
    #[command(flatten)]
    pub select: SelectArgs,

    /// Graphviz dot (the default).
    #[arg(long, conflicts_with = "json")]
    pub dot: bool,

    /// JSON.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod verify_tests {
    use clap::Parser;

    use super::{Cli, CliCommand, VerifyMode};
    use prova_protocol::wire::Proof;

    fn verify_of(args: &[&str]) -> Result<Option<VerifyMode>, clap::Error> {
        let cli = Cli::try_parse_from([&["prova", "run", "build"], args].concat())?;
        match cli.command {
            CliCommand::Run(run) => Ok(run.verify),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn verify_is_parsed_into_its_mode_before_anything_runs() {
        assert_eq!(verify_of(&[]).unwrap(), None);
        assert_eq!(verify_of(&["--verify"]).unwrap(), Some(VerifyMode::Determinism));
        assert_eq!(verify_of(&["--verify=inputs"]).unwrap(), Some(VerifyMode::Inputs));
        assert_eq!(verify_of(&["--verify=all"]).unwrap(), Some(VerifyMode::All));
        let err = verify_of(&["--verify=ordering"]).expect_err("an unknown proof");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue, "{err}");
    }

    #[test]
    fn each_mode_asks_for_its_proofs() {
        assert_eq!(VerifyMode::Determinism.proofs(), [Proof::Determinism]);
        assert_eq!(VerifyMode::Inputs.proofs(), [Proof::Inputs]);
        assert_eq!(VerifyMode::All.proofs(), [Proof::Determinism, Proof::Inputs]);
    }
}

#[cfg(test)]
mod value_tests {
    use super::{ValueError, parse_cache_spec, parse_size};

    #[test]
    fn bad_values_are_typed_and_read_as_before() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        let e = parse_size("lots").unwrap_err();
        assert_eq!(e, ValueError::NotASize("lots".into()));
        assert_eq!(e.to_string(), "not a size: \"lots\" (try 2G, 500M)");
        assert_eq!(parse_size("-1").unwrap_err().to_string(), "not a size: \"-1\"");
        let cases = [
            ("local", "`local`: want LAYER:MODE, e.g. local:rw"),
            ("s3:rw", "unknown cache layer `s3` (layers: local, farm, reapi)"),
            (
                "lcoal:rw",
                "unknown cache layer `lcoal` (layers: local, farm, reapi)\n  help: did you mean `local`?",
            ),
            (
                "remote:r",
                "unknown cache layer `remote` (layers: local, farm, reapi)\n  help: did you mean `farm`?",
            ),
            (
                "reapy:rw",
                "unknown cache layer `reapy` (layers: local, farm, reapi)\n  help: did you mean `reapi`?",
            ),
            ("local:x", "`local:x`: mode is r, w or rw"),
        ];
        for (spec, want) in cases {
            assert_eq!(parse_cache_spec(spec).unwrap_err().to_string(), want, "{spec}");
        }
        assert_eq!(
            parse_cache_spec("reapi:x").unwrap_err().to_string(),
            "`reapi:x`: mode is r, w or rw"
        );
    }

    #[test]
    fn the_reapi_layer_is_named_beside_the_local_one() {
        use super::{CacheSpec, LayerMode};
        let rw = LayerMode { read: true, write: true };
        let r = LayerMode { read: true, write: false };
        let spec = |read, write, reapi| CacheSpec { read, write, reapi, farm: None };
        let cases = [
            ("local:rw", spec(true, true, None)),
            ("local:rw,reapi:rw", spec(true, true, Some(rw))),
            ("local:rw,reapi:r", spec(true, true, Some(r))),
            ("reapi:r", spec(false, false, Some(r))),
        ];
        for (s, want) in cases {
            assert_eq!(parse_cache_spec(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn the_farm_layer_is_named_like_the_others() {
        use super::{CacheSpec, LayerMode};
        let mode = |read, write| Some(LayerMode { read, write });
        let farm = |read, write, farm| CacheSpec { read, write, reapi: None, farm };
        let cases = [
            ("farm:r", farm(false, false, mode(true, false))),
            ("farm:rw", farm(false, false, mode(true, true))),
            ("farm:w", farm(false, false, mode(false, true))),
            ("local:rw,farm:r", farm(true, true, mode(true, false))),
            ("local:r,farm:", farm(true, false, mode(false, false))),
        ];
        for (s, want) in cases {
            assert_eq!(parse_cache_spec(s), Ok(want), "{s}");
        }
        assert_eq!(
            parse_cache_spec("farm:x").unwrap_err().to_string(),
            "`farm:x`: mode is r, w or rw"
        );
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod args_tests;
