//! The `prova` binary: parse, then dispatch. Everything else lives in the library modules.
//!
//! First of all, the binary may be asked to be a guardian (`prova_worker::exec::guardian`):
//! the process that kills what a task tree left running once prova is gone.

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: a run allocates and frees small strings and vectors by
/// the hundred thousand (paths, keys, globs), across threads; glibc's arenas spent a fifth
/// of a warm 1,000-package run's CPU in `malloc`/`free` (bench/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if let Some(code) = prova_worker::exec::guardian::serve_if_asked() {
        return ExitCode::from(code);
    }
    prova_worker::exec::guardian::enable();
    prova_cli::main()
}
