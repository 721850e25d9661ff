//! The `prova` binary: parse, then dispatch. Everything else lives in the library modules.

use std::process::ExitCode;

fn main() -> ExitCode {
    prova_cli::main()
}
