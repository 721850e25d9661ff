//! The sandbox: running a task with only its exec root visible (brief §7), and naming the
//! undeclared paths it tried to read (Proof 2, input completeness).
//!
//! # Layout
//! - this file: [`detect`] and [`strace_available`] — whether this host can sandbox and trace
//!   at all (and where strace runs: [`Tracer`]), found by actually running the tools, with
//!   bounded waits.
//! - [`bwrap`]: [`SandboxConfig`] and the bubblewrap command line around a task's argv.
//! - [`etc`]: the sandbox's `/etc` as one prepared copy of the system files there (one bind
//!   instead of one per file).
//! - [`trace`]: the `strace` command line around that, and [`undeclared_reads`], which reads
//!   the trace back into workspace-relative paths (and the paths written).
//! - [`survey`]: the traced run with the whole workspace visible read-only that a local
//!   inputs proof makes after a sandboxed run whose trace met a place where its exec root
//!   and the workspace differ, so every undeclared read is named in one round.
//!
//! The pieces compose as argv wrappers, so the executor ([`crate::exec`]) runs a sandboxed,
//! traced task like any other process: `unshare --pid … -- strace … -- bwrap … -- sh -c
//! '<cmd>'`. strace runs outside the sandbox (as the same user as the worker, in a pid
//! namespace of its own that the task's is nested in) and follows the task into the
//! namespaces; neither strace nor its trace file is ever visible to the task.
//!
//! # Platform honesty
//! | host | result |
//! |---|---|
//! | Linux, bwrap works, strace works | full: undeclared reads named by path |
//! | Linux, bwrap works, no strace | degraded: the sandbox denies structurally (the task fails on a missing file), but the paths cannot be named |
//! | bwrap missing or refused (AppArmor blocking user namespaces, a container without them) | [`SandboxStatus::Unavailable`] with bwrap's own words: a proof that needs the sandbox must fail, never pass silently |

pub mod bwrap;
pub mod etc;
pub mod survey;
pub mod trace;

#[cfg(test)]
mod tests;

use std::io::{self, Read};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;

pub use bwrap::{SandboxConfig, ViewOp, bwrap_argv, identity_overlays};
pub use trace::{
    TraceError, Tracer, strace_argv, survey_reads, trace_reads, trace_reads_with, undeclared_reads,
};

/// How long a probe (`bwrap --version`, a trial sandbox, a trial trace) may take. Starting a
/// sandbox takes milliseconds; this only trips on a host that hangs in namespace set-up.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of a probe's stdout and stderr kept for the version and the reason.
const PROBE_OUTPUT_LIMIT: u64 = 16 * 1024;

/// Whether tasks can be sandboxed here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SandboxStatus {
    /// bubblewrap is installed and a trial sandbox ran.
    Bwrap {
        /// What `bwrap --version` said (`0.8.0`).
        version: String,
    },
    /// No sandbox: why, in bwrap's own words where it gave some.
    Unavailable {
        /// The reason, for the user.
        reason: String,
    },
}

impl SandboxStatus {
    /// Whether tasks can be sandboxed.
    pub fn is_available(&self) -> bool {
        matches!(self, Self::Bwrap { .. })
    }
}

/// bwrap's arguments for a trial sandbox with the namespaces and mounts a task gets, around
/// `/bin/true`: the system paths read-only ([`bwrap::SYSTEM_RO_PATHS`]), a private `/proc`,
/// `/dev` and `/tmp`, the new root made read-only. Never the host's whole `/`: a recursive
/// bind of `/` remounts every mount on the host, and one that goes away meanwhile (another
/// program's `ip netns del`, a container stopping) fails the trial, so a worker started at
/// that moment would refuse to sandbox anything.
fn trial_sandbox() -> Vec<&'static str> {
    let mut a = vec!["--unshare-all", "--die-with-parent", "--new-session"];
    a.extend(["--ro-bind", "/usr", "/usr"]);
    for p in bwrap::SYSTEM_RO_PATHS {
        a.extend(["--ro-bind-try", p, p]);
    }
    a.extend(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--remount-ro", "/"]);
    a.extend(["--", "/bin/true"]);
    a
}

/// Finds out whether bubblewrap (`bwrap` on `PATH`) can sandbox tasks here, by running it:
/// `bwrap --version`, then a trial sandbox with the namespaces and mounts a task gets
/// ([`trial_sandbox`]). A missing binary, a refused user namespace ("setting up uid
/// map: Permission denied", "No permissions to creating new namespace"), a refused mount
/// or a hang all come back as [`SandboxStatus::Unavailable`].
pub fn detect() -> SandboxStatus {
    detect_with(&["bwrap"], PROBE_TIMEOUT)
}

/// [`detect`] with the program (and leading arguments) standing for `bwrap`, and the bound
/// on each probe.
pub fn detect_with(bwrap: &[&str], timeout: Duration) -> SandboxStatus {
    let unavailable = |reason: String| SandboxStatus::Unavailable { reason };
    let name = bwrap.first().copied().unwrap_or("bwrap");
    let version_argv: Vec<&str> = bwrap.iter().copied().chain(["--version"]).collect();
    let version = match run_bounded(&version_argv, timeout) {
        Ok(out) if out.status.success() => {
            out.stdout.split_whitespace().last().unwrap_or("unknown").to_owned()
        }
        Ok(out) => return unavailable(format!("`{name} --version` failed: {}", out.describe())),
        Err(ProbeError::Spawn(e)) if e.kind() == io::ErrorKind::NotFound => {
            return unavailable(format!("{name} is not installed (not found on PATH)"));
        }
        Err(e) => return unavailable(format!("`{name} --version`: {e}")),
    };
    let trial: Vec<&str> = bwrap.iter().copied().chain(trial_sandbox()).collect();
    match run_bounded(&trial, timeout) {
        Ok(out) if out.status.success() => SandboxStatus::Bwrap { version },
        Ok(out) => unavailable(format!("{name} cannot create a sandbox here: {}", out.describe())),
        Err(e) => unavailable(format!("{name} trial sandbox: {e}")),
    }
}

/// Whether `strace` (on `PATH`) can trace here with the options [`strace_argv`] uses, and
/// where it runs: found by running it, bounded. With `sandbox` (bubblewrap works here), the
/// trial sandbox ([`trial_sandbox`]) is traced from a pid namespace of strace's own
/// ([`Tracer::OwnPidNs`]): made with the worker's rights, or else in a user namespace of its
/// own. Where both are refused (no `unshare`, or one older than util-linux 2.38 for a user
/// without the right), or without a sandbox, strace traces `/bin/true` from the host's
/// ([`Tracer::Host`]). `None` when strace is missing, or when ptrace or seccomp are refused
/// (some containers).
pub fn strace_available(sandbox: bool) -> Option<Tracer> {
    let trial_sandbox: Vec<String> =
        std::iter::once("bwrap").chain(trial_sandbox()).map(str::to_owned).collect();
    let trials = [
        (Tracer::OwnPidNs { user_ns: false }, trial_sandbox.clone()),
        (Tracer::OwnPidNs { user_ns: true }, trial_sandbox),
        (Tracer::Host, vec!["/bin/true".to_owned()]),
    ];
    trials.into_iter().filter(|(t, _)| sandbox || *t == Tracer::Host).find_map(|(tracer, inner)| {
        let argv = strace_argv(Path::new("/dev/null"), &inner, tracer);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        match run_bounded(&argv, PROBE_TIMEOUT) {
            Ok(out) if out.status.success() => Some(tracer),
            Ok(out) => {
                tracing::debug!(?tracer, reason = %out.describe(), "strace cannot trace so here");
                None
            }
            Err(e) => {
                tracing::debug!(?tracer, error = %e, "strace cannot trace so here");
                None
            }
        }
    })
}

/// A probe that did not run to an exit status.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("could not start: {0}")]
    Spawn(#[source] io::Error),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error("waiting for it failed: {0}")]
    Wait(#[source] io::Error),
}

struct ProbeOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl ProbeOutput {
    /// stderr (trimmed), or the exit status when it printed nothing.
    fn describe(&self) -> String {
        let stderr = self.stderr.trim();
        if stderr.is_empty() { self.status.to_string() } else { stderr.to_owned() }
    }
}

/// Runs `argv` with no stdin, waiting at most `timeout` for it to exit; past that it is
/// killed. The wait is `waitid(WNOWAIT)` on a helper thread, so the child stays unreaped —
/// its pid cannot be reused — until we have decided whether to kill it.
fn run_bounded(argv: &[&str], timeout: Duration) -> Result<ProbeOutput, ProbeError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(ProbeError::Spawn(io::Error::new(io::ErrorKind::InvalidInput, "empty argv")));
    };
    let deadline = Instant::now() + timeout;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(ProbeError::Spawn)?;
    let stdout = child.stdout.take().map(read_bounded);
    let stderr = child.stderr.take().map(read_bounded);
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::Builder::new().name("prova-probe-wait".to_owned()).spawn(move || {
        let exited = loop {
            match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => break r.map(drop),
            }
        };
        let _ = tx.send(exited);
    });
    if let Err(e) = waiter {
        let _ = child.kill();
        let _ = child.wait();
        return Err(ProbeError::Wait(e));
    }
    let outcome = rx.recv_timeout(timeout);
    if outcome.is_err() {
        // Still unreaped, so the pid is still this child's.
        let _ = child.kill();
    }
    let status = child.wait().map_err(ProbeError::Wait)?;
    if outcome.is_err() {
        return Err(ProbeError::TimedOut(timeout));
    }
    let collect = |rx: Option<mpsc::Receiver<String>>| {
        rx.and_then(|rx| rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok())
            .unwrap_or_default()
    };
    Ok(ProbeOutput { status, stdout: collect(stdout), stderr: collect(stderr) })
}

/// Reads up to [`PROBE_OUTPUT_LIMIT`] bytes of a pipe on a helper thread (then drains the
/// rest so the writer never blocks), delivering the text when the pipe closes.
fn read_bounded(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let spawned =
        std::thread::Builder::new().name("prova-probe-read".to_owned()).spawn(move || {
            let mut pipe = pipe;
            let mut buf = Vec::new();
            let _ = pipe.by_ref().take(PROBE_OUTPUT_LIMIT).read_to_end(&mut buf);
            let _ = io::copy(&mut pipe, &mut io::sink());
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "could not start a probe reader");
    }
    rx
}
