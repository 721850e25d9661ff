//! `prova completions <shell>`: the shell completion script clap_complete generates from the
//! argument definitions in `args.rs`, printed on stdout.

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs};
use crate::exit::Code;

/// Prints the completion script for `args.shell`. Generated into memory first: clap_complete
/// panics when its writer fails, and `prova completions bash | head -1` closes the pipe.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<Code> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "prova", &mut script);
    super::common::print(&String::from_utf8_lossy(&script))?;
    Ok(Code::Ok)
}
