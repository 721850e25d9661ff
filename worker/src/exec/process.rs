//! Supervising one child from spawn to reaped: output pumping, timeout and cancel, the
//! SIGTERM → grace → SIGKILL sequence on its process group, exit status and rusage.
//!
//! The order matters for safety. The child's exit is first seen (its pidfd readable, then
//! `waitid(WNOWAIT)`), which leaves a zombie: as long as the zombie exists its pid — which is
//! also the process group id — cannot be reused, so signalling the group afterwards can only
//! reach the task's own leftovers. Only then is it reaped with `wait4`, which also yields the
//! rusage.

use std::future::Future;
use std::io;
use std::os::fd::{AsFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::task::OwnedTask;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::output::{self, OutputState};
use super::tree;
use super::{
    DRAIN_TIMEOUT, ExecError, KILL_WAIT_LIMIT, ProcessIo, ProcessRequest, ProcessResult, spawn,
};

/// Run `req` to completion (see [`super::Executor::run`]).
pub(crate) async fn run(
    req: ProcessRequest,
    io: ProcessIo,
    cancel: CancellationToken,
) -> Result<ProcessResult, ExecError> {
    let ProcessIo { output, ready } = io;
    if cancel.is_cancelled() {
        // Already aborted: don't start something only to kill it.
        return Ok(ProcessResult {
            exit: ExitKind::Aborted,
            stats: ExecStats::default(),
            log: Default::default(),
        });
    }
    let cmd = match spawn::build(&req) {
        Ok(cmd) => cmd,
        Err(e) => return Ok(spawn_failed(e.to_string(), StdInstant::now())),
    };
    let start = StdInstant::now();
    let marker = cmd.marker.clone();
    // Before the spawn: every process of the tree is younger.
    let since = tree::Since::now();
    let child = match spawn::spawn(cmd).await? {
        Ok(child) => child,
        Err(e) => {
            let program = req.argv.first().map_or("", String::as_str);
            return Ok(spawn_failed(format!("{program}: {e}"), start));
        }
    };
    let pid = child.pid;
    // From here on, leaving early (error or drop) kills the group.
    let mut guard = GroupGuard { pid, marker: marker.clone(), since, armed: true };
    let pipes =
        attach_pipes(child).map_err(|source| ExecError::Pipes { pid: pid.as_raw(), source })?;

    let ready = match (req.ready.clone(), ready) {
        (Some(pattern), Some(fire)) => Some((pattern, fire)),
        (None, Some(fire)) => {
            let _ = fire.send(());
            None
        }
        (_, None) => None,
    };
    let mut out = OutputState::new(req.log_limit, output, ready);
    let outcome = {
        let pump = pin!(output::pump(&mut out, pipes.0, pipes.1));
        let natural = Arc::new(AtomicBool::new(true));
        let exit_wait = exit_watch(pid, marker.clone(), since, Arc::clone(&natural));
        let mut sup = Supervisor {
            pid,
            marker,
            since,
            pump,
            pump_done: false,
            exit_wait,
            natural,
            exited: None,
            left: None,
        };
        sup.supervise(&req, &cancel, &mut guard).await
    };
    let (exit, status_time, rusage, leaked) = match outcome {
        Ok(o) => o,
        Err(e) => {
            drop(out.finish(None));
            return Err(e);
        }
    };
    let notice = (!leaked.is_empty()).then(|| {
        let pids: Vec<i32> = leaked.iter().map(|m| m.pid).collect();
        tracing::info!(pid = pid.as_raw(), ?pids, "the task left processes running; killed them");
        tree::leak_notice(&leaked)
    });
    let log = out.finish(notice);
    let stats = ExecStats {
        wall_ms: millis(status_time.saturating_duration_since(start)),
        cpu_user_ms: timeval_ms(rusage.ru_utime),
        cpu_sys_ms: timeval_ms(rusage.ru_stime),
        max_rss_kb: u64::try_from(rusage.ru_maxrss).unwrap_or(0),
    };
    Ok(ProcessResult { exit, stats, log })
}

fn spawn_failed(msg: String, start: StdInstant) -> ProcessResult {
    ProcessResult {
        exit: ExitKind::SpawnFailed(msg),
        stats: ExecStats { wall_ms: millis(start.elapsed()), ..ExecStats::default() },
        log: Default::default(),
    }
}

type Pipes = (tokio::net::unix::pipe::Receiver, tokio::net::unix::pipe::Receiver);

/// The child's stdout and stderr as async readers. We reap the child ourselves (wait4, for
/// rusage).
fn attach_pipes(child: spawn::Spawned) -> io::Result<Pipes> {
    Ok((
        tokio::net::unix::pipe::Receiver::from_owned_fd(child.stdout)?,
        tokio::net::unix::pipe::Receiver::from_owned_fd(child.stderr)?,
    ))
}

/// Why supervision stopped waiting for a natural exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Exited,
    TimedOut,
    Cancelled,
}

struct Supervisor<'a, P> {
    pid: Pid,
    /// The execution's tree marker (`tree`): finds what left the group.
    marker: String,
    /// Taken before the spawn: what carries the marker is younger.
    since: tree::Since,
    /// Reads the pipes to EOF; polled alongside everything else so output never stalls.
    pump: Pin<&'a mut P>,
    pump_done: bool,
    /// Yields when the child has exited (and, while `natural` holds, what of its tree was
    /// left then): [`exit_watch`].
    exit_wait: ExitWatch,
    /// Cleared once supervision stops for a timeout or cancel: the exit that follows is the
    /// kill's, and nobody waits for a look at what it left.
    natural: Arc<AtomicBool>,
    /// When the exit was observed.
    exited: Option<StdInstant>,
    /// What the exit's own thread found left of the tree after a natural exit.
    left: Option<Vec<tree::Member>>,
}

impl<P: Future<Output = ()>> Supervisor<'_, P> {
    /// Returns the exit kind, when the child exited, its rusage, and — after a natural exit
    /// — the processes of its tree that were still running (and were killed).
    async fn supervise(
        &mut self,
        req: &ProcessRequest,
        cancel: &CancellationToken,
        guard: &mut GroupGuard,
    ) -> Result<(ExitKind, StdInstant, libc::rusage, Vec<tree::Member>), ExecError> {
        let stop = self.until_stop(req.timeout, cancel).await?;

        // Terminate: the whole group after a timeout or cancel; after a natural exit, whatever
        // the task left behind in its group (a backgrounded server holding stdout), and every
        // process carrying its tree marker outside the group (`setsid`, a double fork). Those
        // get the grace to finish, ended early once the child is gone and the pipes are closed.
        // (Looked for before the group signal, so what was running is counted, not only what
        // outlived a SIGTERM.)
        let (marker, since) = (self.marker.clone(), self.since);
        let left = match (stop, self.left.take()) {
            // After a natural exit the exit's own thread has looked already (one hand-off to
            // the blocking pool a task, not two).
            (Stop::Exited, Some(left)) => left,
            (Stop::Exited, None) => {
                blocking(move || {
                    tree::find_settled(tree::Select::Task(&marker, since), tree::SETTLE)
                })
                .await?
            }
            _ => blocking(move || tree::find(tree::Select::Task(&marker, since))).await?,
        };
        // The child is a zombie or still running, never reaped yet: its group id is its own.
        signal_group(self.pid, Signal::SIGTERM);
        tree::signal_all(&left, Signal::SIGTERM);
        let grace_end = Instant::now() + req.kill_grace;
        self.wait_for(grace_end, |s| s.exited.is_some() && s.pump_done).await?;
        signal_group(self.pid, Signal::SIGKILL);
        if !left.is_empty() {
            // Nothing carries the marker if the first look found nothing: only a member can
            // start another.
            let marker = self.marker.clone();
            blocking(move || tree::sweep(tree::Select::Task(&marker, since))).await?;
        }
        if !self.wait_for(Instant::now() + KILL_WAIT_LIMIT, |s| s.exited.is_some()).await? {
            return Err(ExecError::Unkillable { pid: self.pid.as_raw(), waited: KILL_WAIT_LIMIT });
        }

        // The group is dead; the child is a zombie. Reap it; after this its pid (and group
        // id) may be reused, so nothing may signal the group any more.
        guard.armed = false;
        let (status, rusage) =
            reap(self.pid).map_err(|source| ExecError::Wait { pid: self.pid.as_raw(), source })?;

        // Only a process that escaped the group, or a receiver that stopped reading, can
        // hold the output open now.
        if !self.wait_for(Instant::now() + DRAIN_TIMEOUT, |s| s.pump_done).await? {
            tracing::warn!(
                pid = self.pid.as_raw(),
                "output still open {DRAIN_TIMEOUT:?} after the process group died; not waiting for the rest"
            );
        }

        let exit = match stop {
            Stop::Exited => decode_status(status),
            Stop::TimedOut => ExitKind::TimedOut,
            Stop::Cancelled => ExitKind::Aborted,
        };
        let exited = self.exited.unwrap_or_else(StdInstant::now);
        let leaked = if stop == Stop::Exited { left } else { Vec::new() };
        Ok((exit, exited, rusage, leaked))
    }

    /// Pump output until the child exits, the timeout elapses or the run is cancelled.
    async fn until_stop(
        &mut self,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Result<Stop, ExecError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut timed_out = pin!(async move {
            match deadline {
                Some(d) => sleep_until(d).await,
                None => std::future::pending().await,
            }
        });
        loop {
            tokio::select! {
                biased;
                r = &mut self.exit_wait => {
                    self.exited(r)?;
                    return Ok(Stop::Exited);
                }
                () = cancel.cancelled() => return Ok(self.unnatural(Stop::Cancelled)),
                () = &mut timed_out => return Ok(self.unnatural(Stop::TimedOut)),
                () = self.pump.as_mut(), if !self.pump_done => self.pump_done = true,
            }
        }
    }

    /// The exit seen by [`exit_watch`]: when, and what it found left.
    fn exited(&mut self, r: io::Result<Exit>) -> Result<(), ExecError> {
        let exit = r.map_err(|source| ExecError::Wait { pid: self.pid.as_raw(), source })?;
        self.exited = Some(exit.at);
        self.left = exit.left;
        Ok(())
    }

    /// `stop`, after telling the exit's thread that nobody waits for its look at the tree.
    fn unnatural(&self, stop: Stop) -> Stop {
        self.natural.store(false, Ordering::Relaxed);
        stop
    }

    /// Keep pumping output and watching for the exit until `done` holds (`true`) or
    /// `deadline` passes (`false`).
    async fn wait_for(
        &mut self,
        deadline: Instant,
        done: fn(&Self) -> bool,
    ) -> Result<bool, ExecError> {
        loop {
            if done(self) {
                return Ok(true);
            }
            tokio::select! {
                biased;
                r = &mut self.exit_wait, if self.exited.is_none() => self.exited(r)?,
                () = self.pump.as_mut(), if !self.pump_done => self.pump_done = true,
                () = sleep_until(deadline) => return Ok(false),
            }
        }
    }
}

/// Runs `f` on the blocking pool (a `/proc` scan).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ExecError> {
    OwnedTask::spawn_blocking("exec.proc-scan", f).join().await.map_err(ExecError::Join)
}

/// The child's exit as its watch saw it.
struct Exit {
    /// When the exit was seen.
    at: StdInstant,
    /// What of the tree was still there once it settled ([`tree::find_settled`]), looked at
    /// on the same thread right after a natural exit; `None` when supervision had already
    /// stopped for a timeout or cancel.
    left: Option<Vec<tree::Member>>,
}

/// The child's exit, watched: [`exit_watch`].
type ExitWatch = Pin<Box<dyn Future<Output = io::Result<Exit>> + Send>>;

/// At most this many pids handed out since a task's start are read on a runtime thread
/// after its exit ([`tree::find_few`]); more go to the blocking pool.
const FEW_PIDS: usize = 64;

/// Watches for `pid`'s exit without reaping it (its zombie keeps its pid and group id from
/// reuse): through a pidfd the runtime polls where the kernel has them — no thread waits, and
/// the exit wakes the runtime with its output pipes' ends —, else [`wait_exit`] on a blocking
/// thread. While `natural` holds, it then looks for what the tree left (`marker`, `since`),
/// reading `/proc` only: the signals are the supervisor's, which alone knows whether the
/// child is reaped.
fn exit_watch(pid: Pid, marker: String, since: tree::Since, natural: Arc<AtomicBool>) -> ExitWatch {
    let watched = pidfd_open(pid).and_then(|fd| {
        // SAFETY: the `OwnedFd` is moved into the `AsyncFd`, which alone holds it open (and
        // its raw descriptor the same) until it is dropped.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(io::Error::from)
    });
    let fd = match watched {
        Ok(fd) => fd,
        Err(e) => {
            tracing::debug!(pid = pid.as_raw(), error = %e, "no pidfd: the exit waited for on a thread");
            return exit_on_thread(pid, marker, since, natural);
        }
    };
    Box::pin(async move {
        loop {
            let mut ready = fd.readable().await?;
            if exited(fd.get_ref(), pid)? {
                break;
            }
            ready.clear_ready();
        }
        let at = StdInstant::now();
        if !natural.load(Ordering::Relaxed) {
            return Ok(Exit { at, left: None });
        }
        // An exit that left nothing, seen among few new pids: no settling, no thread.
        if let Some(none) =
            tree::find_few(tree::Select::Task(&marker, since), FEW_PIDS).filter(Vec::is_empty)
        {
            return Ok(Exit { at, left: Some(none) });
        }
        let left = OwnedTask::spawn_blocking("exec.proc-scan", move || {
            tree::find_settled(tree::Select::Task(&marker, since), tree::SETTLE)
        })
        .join()
        .await
        .map_err(io::Error::other)?;
        Ok(Exit { at, left: Some(left) })
    })
}

/// [`exit_watch`] without a pidfd: [`wait_exit`] on a blocking thread.
fn exit_on_thread(
    pid: Pid,
    marker: String,
    since: tree::Since,
    natural: Arc<AtomicBool>,
) -> ExitWatch {
    let task = OwnedTask::spawn_blocking("exec.wait-exit", move || {
        wait_exit(pid, &marker, since, &natural)
    });
    Box::pin(async move { task.join().await.map_err(io::Error::other)? })
}

/// A pidfd of `pid` (Linux 5.3 and later), non-blocking.
fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it touches
    // no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), libc::PIDFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("pidfd_open: no descriptor"))?;
    // SAFETY: `fd` was just returned by the kernel: open, and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the child `pid` (whose pidfd is `pidfd`) has exited, not reaped (`WNOWAIT`),
/// without blocking. By the pidfd, or by the pid on a kernel whose `waitid` does not take
/// pidfds (5.3 has `pidfd_open`, not `P_PIDFD`): the child is not reaped before its exit is
/// seen, so its pid is still its own.
fn exited(pidfd: &OwnedFd, pid: Pid) -> io::Result<bool> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    let mut by_fd = true;
    loop {
        let id = if by_fd { Id::PIDFd(pidfd.as_fd()) } else { Id::Pid(pid) };
        match waitid(id, flags) {
            Ok(WaitStatus::StillAlive) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => continue,
            Err(Errno::EINVAL) if by_fd => by_fd = false,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Blocks until `pid` has exited, without reaping it. While `natural` holds, then looks for
/// what its tree left (`marker`, `since`), as [`exit_watch`] does.
fn wait_exit(pid: Pid, marker: &str, since: tree::Since, natural: &AtomicBool) -> io::Result<Exit> {
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Ok(_) => break,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let at = StdInstant::now();
    let left = natural
        .load(Ordering::Relaxed)
        .then(|| tree::find_settled(tree::Select::Task(marker, since), tree::SETTLE));
    Ok(Exit { at, left })
}

/// Reap `pid` (an exited child), returning its raw wait status and resource use.
fn reap(pid: Pid) -> io::Result<(libc::c_int, libc::rusage)> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is a plain C struct of integers, for which all-zero bytes are valid.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live, writable locals of the right types for the
        // duration of the call.
        let r = unsafe { libc::wait4(pid.as_raw(), &mut status, 0, &mut rusage) };
        if r == pid.as_raw() {
            return Ok((status, rusage));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn decode_status(status: libc::c_int) -> ExitKind {
    if libc::WIFEXITED(status) {
        ExitKind::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ExitKind::Signal(libc::WTERMSIG(status))
    } else {
        // wait4 without WUNTRACED/WCONTINUED reports only exits and deaths.
        tracing::warn!(status, "unexpected wait status");
        ExitKind::Code(-1)
    }
}

/// Signal the whole group; a group that is already empty is fine.
fn signal_group(pgid: Pid, sig: Signal) {
    match killpg(pgid, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::debug!(pgid = pgid.as_raw(), ?sig, error = %e, "killpg failed"),
    }
}

/// Kills the group if supervision ends without reaping the child (an internal error, or the
/// run's future dropped mid-way), and reaps the child in the background.
struct GroupGuard {
    pid: Pid,
    /// The execution's tree marker: what left the group is swept too.
    marker: String,
    /// Taken before the spawn ([`Supervisor::since`]).
    since: tree::Since,
    /// Cleared just before the child is reaped: from then on its pid may be reused.
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        signal_group(self.pid, Signal::SIGKILL);
        let pid = self.pid;
        let (marker, since) = (std::mem::take(&mut self.marker), self.since);
        let reap_it = move || {
            tree::sweep(tree::Select::Task(&marker, since));
            if let Err(e) = reap(pid) {
                tracing::debug!(pid = pid.as_raw(), error = %e, "background reap failed");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(OwnedTask::spawn_blocking_on(&rt, "exec.reap", reap_it).detach()),
            Err(_) => {
                let spawned =
                    std::thread::Builder::new().name("prova-reaper".to_owned()).spawn(reap_it);
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "could not start a reaper thread; a zombie may remain");
                }
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn timeval_ms(tv: libc::timeval) -> u64 {
    let ms = i128::from(tv.tv_sec) * 1000 + i128::from(tv.tv_usec) / 1000;
    u64::try_from(ms).unwrap_or(0)
}

#[cfg(test)]
mod watch_tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// `sh -c script` carrying `marker` (and the `extra` variables), and the start it is
    /// younger than.
    fn child(
        script: &str,
        marker: &str,
        extra: &[(&str, &str)],
    ) -> (std::process::Child, tree::Since) {
        let since = tree::Since::now();
        let c = Command::new("sh")
            .args(["-c", script])
            .envs(extra.iter().copied())
            .env(tree::MARKER_VAR, marker)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sh");
        (c, since)
    }

    /// The natural exit of `pid` as one of the two watches sees it.
    async fn watched(pid: Pid, marker: &str, since: tree::Since, on_thread: bool) -> Exit {
        let natural = Arc::new(AtomicBool::new(true));
        let watch = if on_thread {
            exit_on_thread(pid, marker.to_owned(), since, natural)
        } else {
            exit_watch(pid, marker.to_owned(), since, natural)
        };
        tokio::time::timeout(Duration::from_secs(60), watch)
            .await
            .expect("the exit is seen")
            .expect("no error")
    }

    #[tokio::test]
    async fn both_watches_see_the_exit_and_what_the_tree_left_or_not() {
        for on_thread in [false, true] {
            for leaves in [true, false] {
                let marker = format!("watch-{}-{on_thread}-{leaves}", std::process::id());
                // The child left behind has become `sleep` before the exit (one caught in its
                // exec: `a_child_caught_in_its_exec_at_the_exit_is_found_by_both_watches`).
                let script = if leaves {
                    "sleep 300 & until [ \"$(cat /proc/$!/comm 2>/dev/null)\" = sleep ]; do :; done; exit 3"
                } else {
                    "exit 3"
                };
                let (mut c, since) = child(script, &marker, &[]);
                let pid = Pid::from_raw(i32::try_from(c.id()).expect("pid"));
                let exit = watched(pid, &marker, since, on_thread).await;
                let left = exit.left.expect("a natural exit's tree is looked at");
                // Not reaped by the watch: the status is still there to collect.
                let status = c.wait().expect("reap");
                assert_eq!(status.code(), Some(3));
                tree::signal_all(&left, Signal::SIGKILL);
                assert_eq!(left.len(), usize::from(leaves), "thread {on_thread}: {left:?}");
            }
        }
    }

    /// A child caught in its `execve` at the exit was missed when its environment was read in
    /// pieces: the exec drops the memory the open took hold of, and the next piece ends the
    /// file short of the marker. A large environment before the marker (variables are passed
    /// in order of name) gives a piecemeal read many calls to be cut in.
    #[tokio::test]
    async fn a_child_caught_in_its_exec_at_the_exit_is_found_by_both_watches() {
        const ROUNDS: usize = 40;
        let pad = "x".repeat(100_000);
        let mut missed = Vec::new();
        for round in 0..ROUNDS {
            for on_thread in [false, true] {
                let marker = format!("watch-exec-{}-{round}-{on_thread}", std::process::id());
                let extra = [("A_PROVA_PAD", pad.as_str())];
                let (mut c, since) = child("sleep 300 & exit 3", &marker, &extra);
                let pid = Pid::from_raw(i32::try_from(c.id()).expect("pid"));
                let exit = watched(pid, &marker, since, on_thread).await;
                c.wait().expect("reap");
                let left = exit.left.expect("a natural exit's tree is looked at");
                if left.len() != 1 {
                    missed.push((round, on_thread, left.clone()));
                }
                tree::signal_all(&left, Signal::SIGKILL);
                tree::sweep(tree::Select::Task(&marker, since));
            }
        }
        assert!(missed.is_empty(), "the left child was not found: {missed:?}");
    }

    #[tokio::test]
    async fn an_exit_after_a_timeout_or_cancel_is_not_looked_at() {
        let marker = format!("watch-unnatural-{}", std::process::id());
        let (mut c, since) = child("sleep 300 & exit 0", &marker, &[]);
        let pid = Pid::from_raw(i32::try_from(c.id()).expect("pid"));
        let exit = exit_watch(pid, marker.clone(), since, Arc::new(AtomicBool::new(false)))
            .await
            .expect("the exit is seen");
        assert!(exit.left.is_none());
        c.wait().expect("reap");
        tree::sweep(tree::Select::Task(&marker, since));
    }
}
