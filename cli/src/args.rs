//! What a user can type. Parsing only: commands resolve these into settings.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run tasks and everything they depend on.
    Run(RunArgs),
    /// Print the task graph of a selection (dot or JSON).
    Graph(GraphArgs),
}

/// Which tasks of which projects.
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

    /// Projects whose dir or name matches this glob; repeatable.
    #[arg(long = "filter", value_name = "GLOB")]
    pub filters: Vec<String>,

    /// Projects with files changed since this git ref, and their dependents.
    #[arg(long, value_name = "REF")]
    pub affected: Option<String>,
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

/// `prova run`.
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

    /// Print what would run, in order, and run nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// How task output is shown.
    #[arg(long, value_enum, default_value_t)]
    pub output: OutputMode,

    /// Machine-readable output: one JSON event per line, then the summary.
    #[arg(long)]
    pub json: bool,

    /// Arguments after `--` go to the requested tasks (not to their dependencies).
    #[arg(last = true, value_name = "ARGS")]
    pub forward: Vec<String>,
}

/// `prova graph`.
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
