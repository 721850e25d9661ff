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

use crate::args::{Cli, Command};
use crate::exit::Code;

/// Runs the parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<Code> {
    let start = match &cli.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    match cli.command {
        Command::Run(args) => run::run(&start, args),
        Command::Watch(args) => watch::watch(&start, args),
        Command::Graph(args) => graph::graph(&start, args),
        Command::Why(args) => inspect::why(&start, args),
        Command::Show(args) => inspect::show(&start, args),
        Command::Cache(cmd) => cache::cache(&start, cmd),
        Command::Certs(cmd) => certs::certs(cmd),
        Command::Coordinator(args) => daemons::coordinator(args),
        Command::Worker(args) => daemons::worker(args),
        Command::Farm(cmd) => farm::farm(cmd),
        Command::Hermeticity(args) => proofs::hermeticity(&start, args),
        Command::Diff(args) => proofs::diff(&start, args),
        Command::Runs(args) => history::runs(&start, args),
        Command::Last(args) => history::last(&start, args),
        Command::Init(args) => init::init(&start, args),
        Command::Completions(args) => completions::completions(args),
        Command::Ls(args) => ls::ls(&start, args),
        Command::Schema(cmd) => schema::schema(&start, cmd),
    }
}
