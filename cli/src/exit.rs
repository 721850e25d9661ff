//! Exit codes, documented in the README: 0 everything succeeded; 1 a task (or a proof)
//! failed or the run was interrupted; 2 usage, config or infrastructure error; 3 the
//! workspace is busy (another prova holds its lock and `--no-wait` was given), so a script
//! can tell "try again later" from a real failure.

use std::process::ExitCode;

/// The process exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Everything succeeded.
    Ok = 0,
    /// A task or a proof failed, or the run was interrupted.
    Failed = 1,
    /// Bad arguments, bad config, or the infrastructure failed.
    Usage = 2,
    /// Another prova holds the workspace lock and `--no-wait` was given: nothing ran.
    Busy = 3,
}

impl From<Code> for ExitCode {
    fn from(c: Code) -> Self {
        ExitCode::from(c as u8)
    }
}
