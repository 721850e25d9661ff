//! One module per subcommand. Each resolves its arguments into settings, acts, and returns
//! an exit code; errors returned here are usage/config/infrastructure errors (exit 2).

pub mod cache;
pub mod certs;
pub mod common;
pub mod completions;
pub mod daemons;
pub mod farm;
pub mod graph;
pub mod history;
pub mod init;
pub mod inspect;
pub mod ls;
pub mod proofs;
pub mod run;
pub mod schema;
pub mod watch;

use crate::args::{Cli, CliCommand};
use crate::exit::Code;

/// Runs the parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<Code> {
    let start = match &cli.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    match cli.command {
        CliCommand::Run(args) => run::run(&start, args),
        CliCommand::Watch(args) => watch::watch(&start, args),
        CliCommand::Graph(args) => graph::graph(&start, args),
        CliCommand::Why(args) => inspect::why(&start, args),
        CliCommand::Show(args) => inspect::show(&start, args),
        CliCommand::Cache(cmd) => cache::cache(&start, cmd),
        CliCommand::Certs(cmd) => certs::certs(cmd),
        CliCommand::Coordinator(args) => daemons::coordinator(args),
        CliCommand::Worker(args) => daemons::worker(args),
        CliCommand::Farm(cmd) => farm::farm(cmd),
        CliCommand::Hermeticity(args) => proofs::hermeticity(&start, args),
        CliCommand::Diff(args) => proofs::diff(&start, args),
        CliCommand::Runs(args) => history::runs(&start, args),
        CliCommand::Last(args) => history::last(&start, args),
        CliCommand::Init(args) => init::init(&start, args),
        CliCommand::Completions(args) => completions::completions(args),
        CliCommand::Ls(args) => ls::ls(&start, args),
        CliCommand::Schema(cmd) => schema::schema(&start, cmd),
    }
}
