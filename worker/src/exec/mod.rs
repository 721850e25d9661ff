//! The process executor: runs one fully built command line in its own process group, with a
//! cleared environment, and reports how it ended ([`ExitKind`]), what it cost ([`ExecStats`])
//! and what it printed ([`CapturedLog`]).
//!
//! # Layout
//! - this file: the request/result types, the [`Executor`] seam and [`LocalExecutor`].
//! - [`env`]: the baseline environment every task starts from and how a task's own
//!   variables are laid over it.
//! - `spawn`: building the `SpawnCommand` (pre-exec: process group, umask, parent-death signal)
//!   and starting it from one long-lived thread.
//! - `process`: supervising a started child: timeout, cancel, SIGTERM → grace → SIGKILL on
//!   the whole group, `wait4` for the exit status and rusage, the bounded output drain.
//! - `output`: reading stdout and stderr, merging them line-atomically, forwarding chunks,
//!   watching for `ready_when`.
//! - `capture`: the bounded in-memory log (head + ring of the tail).
//!
//! # What a caller can rely on
//! - When [`Executor::run`]'s future resolves, the child and every process left in its
//!   process group or carrying its tree marker are dead and reaped (the child) or killed
//!   (the rest), whatever the outcome.
//! - Dropping that future before it resolves SIGKILLs the group and reaps the child in the
//!   background: nothing is leaked.
//! - The output channel is used with backpressure; a dropped receiver is not an error (the
//!   log is still captured), and a receiver that stops reading delays the end of a run by at
//!   most [`DRAIN_TIMEOUT`] once the process group is gone.
//!
//! Requires that the process does not ignore `SIGCHLD` (with `SIG_IGN` the kernel reaps
//! children itself and there is no exit status or rusage to collect) and that nothing else
//! reaps children it did not start (`waitpid(-1, …)`).
//!
//! - [`runtime`]: a farm worker's check that a task's runtime inputs (`node --version`)
//!   give here what they gave on the client.
//! - [`programs`]: a farm worker's check that the program a task's command starts (the
//!   default runtime input, `binary:<word>`) is the client's build.
//! - [`tree`]: the marker (`PROVA_TREE`) every process of an execution inherits, and the
//!   `/proc` scan that finds and kills what left the process group (`setsid`, a double
//!   fork) at the execution's end; after a natural exit the leftovers are named in the log.
//! - [`guardian`]: the process that kills every marked process of this prova once prova is
//!   gone (SIGKILL included), started before the first task when the binary [`guardian::enable`]s it.
//!
//! A process that clears its environment before `exec` and leaves the group escapes both;
//! the sandbox (bubblewrap's `--unshare-pid --die-with-parent`) is what contains those.

pub mod env;

mod capture;
pub mod guardian;
mod output;
mod process;
pub mod programs;
pub mod runtime;
mod spawn;
pub mod tree;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use prova_protocol::spec::{CommandLine, ExecStats, ExitKind};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use capture::CapturedLog;

/// How long a SIGTERMed process group gets before SIGKILL when the caller has no opinion:
/// long enough for a test runner or dev server to flush and exit, short enough that Ctrl-C
/// still feels prompt.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// Bytes of combined output kept in memory per execution when the caller has no opinion:
/// room for a full compiler error dump, small enough that many slots stay cheap.
pub const DEFAULT_LOG_LIMIT: usize = 4 * 1024 * 1024;

/// Once the whole process group is dead, how long the output may still take to drain. Only a
/// process that escaped the group (and still holds the pipes) or a receiver that stopped
/// reading can make the drain last this long; what was read by then is kept in the log.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A partial line (no `\n` yet) is forwarded once it grows past this, so a process that
/// never prints a newline cannot make a line buffer grow without bound.
pub const MAX_PARTIAL_LINE: usize = 64 * 1024;

/// How long the child may take to die after SIGKILL before we give up on it. Only a process
/// stuck in uninterruptible sleep (a dead NFS mount, a wedged device) gets near this.
pub const KILL_WAIT_LIMIT: Duration = Duration::from_secs(30);

/// One process to run.
#[derive(Clone, Debug)]
pub struct ProcessRequest {
    /// Program and arguments, already fully built (e.g. [`shell_argv`], or a sandbox
    /// wrapper around it). The program is looked up in the `PATH` of [`Self::env`].
    pub argv: Vec<String>,
    /// Working directory of the child.
    pub cwd: PathBuf,
    /// The complete environment; nothing of this process's environment is inherited. A name
    /// given twice takes its last value. (The child sees the variables sorted by name: the
    /// order here only decides which value wins.)
    pub env: Vec<(String, String)>,
    /// The child's umask, set before `exec`; `None` inherits this process's.
    pub umask: Option<u32>,
    /// Wall-clock limit from spawn; when it elapses the group is terminated and the result is
    /// [`ExitKind::TimedOut`].
    pub timeout: Option<Duration>,
    /// SIGTERM → wait this long → SIGKILL, for timeout, cancel and leftovers.
    pub kill_grace: Duration,
    /// Bytes of combined output kept in [`ProcessResult::log`].
    pub log_limit: usize,
    /// For a persistent task: fire [`ProcessIo::ready`] on the first output line matching
    /// this. Lines longer than [`MAX_PARTIAL_LINE`] are matched in pieces.
    pub ready: Option<regex::Regex>,
}

impl ProcessRequest {
    /// A request with an empty environment and the default limits, no timeout and no
    /// readiness pattern.
    pub fn new(argv: Vec<String>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            argv,
            cwd: cwd.into(),
            env: Vec::new(),
            umask: None,
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            log_limit: DEFAULT_LOG_LIMIT,
            ready: None,
        }
    }
}

/// How one execution went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessResult {
    /// How it ended. A program that could not be started is [`ExitKind::SpawnFailed`].
    pub exit: ExitKind,
    /// Wall time from spawn to exit, CPU time and peak RSS of the direct child (CPU includes
    /// the descendants it waited for).
    pub stats: ExecStats,
    /// Combined stdout and stderr, bounded by [`ProcessRequest::log_limit`].
    pub log: CapturedLog,
}

/// Where an execution's output and readiness go while it runs.
#[derive(Debug)]
pub struct ProcessIo {
    /// Combined stdout and stderr in arrival order, in chunks of whole lines: a chunk never
    /// mixes the two streams, and a partial line is sent only at the end of its stream (where
    /// the other stream's next line may follow it directly) or once it exceeds
    /// [`MAX_PARTIAL_LINE`]. Sent with backpressure; a dropped receiver is fine.
    pub output: mpsc::Sender<Vec<u8>>,
    /// Fired once: when the readiness pattern first matches, or right after spawn when the
    /// request has no pattern. Dropped unfired if the process ends first.
    pub ready: Option<oneshot::Sender<()>>,
}

/// Internal failures of the executor itself. A command that cannot be started is not one of
/// these: it is `Ok` with [`ExitKind::SpawnFailed`].
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The thread that starts processes could not be created.
    #[error("could not start the process spawner thread")]
    SpawnerStart(#[source] io::Error),
    /// The thread that starts processes is gone (it panicked).
    #[error("the process spawner thread is gone")]
    SpawnerGone,
    /// The child's pipes could not be registered with the async runtime.
    #[error("could not attach the pipes of process {pid} to the runtime")]
    Pipes {
        /// The child.
        pid: i32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// `waitid`/`wait4` on the child failed (something else reaped it?).
    #[error("waiting for process {pid} failed")]
    Wait {
        /// The child.
        pid: i32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The child was SIGKILLed but did not die (uninterruptible sleep). It is reaped in the
    /// background if it ever dies.
    #[error("process {pid} did not die within {waited:?} of SIGKILL")]
    Unkillable {
        /// The child.
        pid: i32,
        /// How long we waited.
        waited: Duration,
    },
    /// A blocking helper task panicked or was cancelled.
    #[error("a blocking wait task failed")]
    Join(#[source] tokio::task::JoinError),
}

/// The future an [`Executor`] returns.
pub type ExecFuture =
    Pin<Box<dyn Future<Output = Result<ProcessResult, ExecError>> + Send + 'static>>;

/// Runs processes. The seam where tests substitute a scripted executor and the sandbox wraps
/// the local one.
pub trait Executor: Send + Sync + 'static {
    /// Run `req` to completion, streaming output to `io`. Cancelling `cancel` terminates the
    /// process group (SIGTERM → grace → SIGKILL) and yields [`ExitKind::Aborted`].
    fn run(&self, req: ProcessRequest, io: ProcessIo, cancel: CancellationToken) -> ExecFuture;
}

/// The real executor: a local child process per request.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalExecutor;

impl Executor for LocalExecutor {
    fn run(&self, req: ProcessRequest, io: ProcessIo, cancel: CancellationToken) -> ExecFuture {
        Box::pin(process::run(req, io, cancel))
    }
}

/// `sh -c <cmd> sh <args...>`: the shell form of a command with forwarded arguments.
///
/// A command that refers to its positional parameters (`$@`, `$*`, `$1`…`$9`, `${…}` forms)
/// gets them as the shell's `"$@"` (the second `sh` is `$0`). Any other command gets them
/// appended, shell-quoted, to its text — as `npm run` and `turbo` do — so
/// `prova run lint -- --fix` runs `eslint . --fix` for `command = "eslint ."`.
pub fn shell_argv(cmd: &str, args: &[String]) -> Vec<String> {
    let mut argv = Vec::with_capacity(4 + args.len());
    if args.is_empty() || uses_positional(cmd) {
        argv.extend(["sh", "-c", cmd, "sh"].map(str::to_owned));
        argv.extend(args.iter().cloned());
    } else {
        let mut line = cmd.to_owned();
        for a in args {
            line.push(' ');
            line.push_str(&shell_quote(a));
        }
        argv.extend(["sh".to_owned(), "-c".to_owned(), line, "sh".to_owned()]);
    }
    argv
}

/// Whether a shell command text reads its positional parameters.
fn uses_positional(cmd: &str) -> bool {
    let b = cmd.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        c == b'$'
            && match b.get(i + 1) {
                Some(b'@' | b'*' | b'1'..=b'9' | b'#') => true,
                // `${#}` is the count, but `${#name}` is a length, not a positional.
                Some(b'{') => match b.get(i + 2) {
                    Some(b'@' | b'*' | b'1'..=b'9') => true,
                    Some(b'#') => b.get(i + 3) == Some(&b'}'),
                    _ => false,
                },
                _ => false,
            }
    })
}

/// `word` quoted for `sh`: as is when it holds only characters no shell treats specially,
/// otherwise in single quotes (a `'` inside written `'\''`).
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_=/.,:@%+".contains(&c));
    if plain {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// An argv command with forwarded arguments appended.
pub fn argv_with_args(argv: &[String], args: &[String]) -> Vec<String> {
    argv.iter().chain(args).cloned().collect()
}

/// The argv for a configured command line and its forwarded arguments.
pub fn command_argv(cmd: &CommandLine, args: &[String]) -> Vec<String> {
    match cmd {
        CommandLine::Shell(s) => shell_argv(s, args),
        CommandLine::Argv(v) => argv_with_args(v, args),
    }
}
