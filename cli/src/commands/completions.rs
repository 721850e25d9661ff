//! `prova completions <shell>`: the shell completion script clap_complete generates from the
//! argument definitions in `args.rs`, printed on stdout.

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs};
use crate::exit::Code;

/// Prints the completion script for `args.shell`.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<Code> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "prova", &mut std::io::stdout());
    Ok(Code::Ok)
}
