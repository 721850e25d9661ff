//! Starting a child: the `Command` with its pre-exec set-up, spawned from one long-lived
//! thread.
//!
//! Why a dedicated thread: `PR_SET_PDEATHSIG` fires when the *thread* that forked the child
//! exits, not the process. Tokio's blocking-pool threads exit after being idle for a while,
//! and a worker thread can be retired by `block_in_place`; a child forked from one of them
//! would be SIGKILLed at a random later moment. The spawner thread lives as long as the
//! process, so the signal means what it should: prova is gone.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError, mpsc};

use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::{ExecError, ProcessRequest};

/// The command for `req`, or why it cannot even be attempted.
pub(crate) fn build(req: &ProcessRequest) -> Result<Command, String> {
    let Some((program, args)) = req.argv.split_first() else {
        return Err("empty command line".to_owned());
    };
    // std reports a missing working directory as a bare ENOENT, indistinguishable from a
    // missing program; say which it is.
    if !req.cwd.is_dir() {
        return Err(format!(
            "working directory {} does not exist or is not a directory",
            req.cwd.display()
        ));
    }
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(&req.cwd)
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // setpgid(0, 0) in the child: it leads its own group, so the whole tree it starts can
        // be signalled at once, and a terminal's Ctrl-C reaches prova, not the task directly.
        .process_group(0);
    let parent = nix::unistd::getpid();
    let umask = req.umask.map(|m| Mode::from_bits_truncate(m as libc::mode_t));
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // operations are allowed. It makes three plain syscalls (umask, prctl, getppid) through
    // nix's thin wrappers, and builds its error from a raw errno: no allocation, no locks, no
    // access to state shared with other threads. `parent` and `umask` are Copy values moved
    // in before the fork.
    unsafe {
        cmd.pre_exec(move || child_setup(parent, umask));
    }
    Ok(cmd)
}

/// Runs in the child between fork and exec (see the SAFETY note in [`build`]).
fn child_setup(parent: Pid, umask: Option<Mode>) -> io::Result<()> {
    if let Some(mask) = umask {
        nix::sys::stat::umask(mask);
    }
    // Die with prova: a crashed or SIGKILLed worker must not leave tasks running.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
    // The parent may have died between fork and prctl, in which case the death signal will
    // never come: fail the spawn instead of running orphaned.
    if nix::unistd::getppid() != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

struct Job {
    cmd: Command,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The spawner thread's queue, started on first use (and again if it ever died).
static SPAWNER: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);

/// Spawn `cmd` on the spawner thread. The outer error is the executor's own failure; the
/// inner one is the command's (program not found, …).
pub(crate) async fn spawn(cmd: Command) -> Result<io::Result<Child>, ExecError> {
    let (reply, rx) = oneshot::channel();
    submit(Job { cmd, reply })?;
    rx.await.map_err(|_| ExecError::SpawnerGone)
}

fn submit(mut job: Job) -> Result<(), ExecError> {
    let mut slot = SPAWNER.lock().unwrap_or_else(PoisonError::into_inner);
    // Two rounds: if the thread died, start a fresh one and try once more.
    for _ in 0..2 {
        let tx = match &*slot {
            Some(tx) => tx.clone(),
            None => {
                let tx = start_spawner().map_err(ExecError::SpawnerStart)?;
                *slot = Some(tx.clone());
                tx
            }
        };
        match tx.send(job) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(back)) => {
                job = back;
                *slot = None;
            }
        }
    }
    Err(ExecError::SpawnerGone)
}

fn start_spawner() -> io::Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new().name("prova-spawner".to_owned()).spawn(move || {
        while let Ok(Job { mut cmd, reply }) = rx.recv() {
            if let Err(Ok(child)) = reply.send(cmd.spawn()) {
                // The caller went away while we were spawning: don't leave the child behind.
                discard(child);
            }
        }
    })?;
    Ok(tx)
}

/// Kill a child nobody is waiting for, and reap it off the spawner thread.
fn discard(mut child: Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let reaper = std::thread::Builder::new().name("prova-reaper".to_owned());
    if let Err(e) = reaper.spawn(move || {
        let _ = child.wait();
    }) {
        tracing::warn!(error = %e, "could not start a reaper thread; a zombie may remain");
    }
}
