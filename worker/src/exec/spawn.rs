//! Starting a child: `clone(CLONE_VM | CLONE_VFORK)` and `execve`, from one long-lived thread.
//!
//! Why not `std::process::Command`: the child must set `PR_SET_PDEATHSIG` (die with prova),
//! its own process group and, for a determinism re-run, a umask. With a `pre_exec` hook std
//! must `fork()` the whole multi-threaded prova — copying its page tables — for every task:
//! a run of 1,000 trivial tasks spent most of its time there (3.1 s vs 1.3 s without the
//! hook). The child here shares the parent's memory until it execs, as `posix_spawn` does,
//! so starting a process costs the same however large prova is.
//!
//! How (glibc's `posix_spawn` does the same): everything the child needs — program path,
//! `argv`, `envp`, directory, pipe ends — is prepared before the clone; the spawning thread
//! blocks every signal around it; the child runs on its own small stack, touches no lock and
//! allocates nothing: it resets signal handlers and the mask, sets up group, umask, death
//! signal and stdio, changes directory, and execs. An error it meets is written to memory
//! the parent reads once the child has exec'd or exited (`CLONE_VFORK` suspends the parent
//! until then).
//!
//! Why a dedicated thread: `PR_SET_PDEATHSIG` fires when the *thread* that created the child
//! exits, not the process. Tokio's blocking-pool threads exit after being idle for a while;
//! a child started from one would be SIGKILLed at a random later moment. The spawner thread
//! lives as long as the process, so the signal means what it should: prova is gone.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Mutex, PoisonError, mpsc};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::oneshot;

use super::{ExecError, ProcessRequest, tree};

/// Where a program without a `/` is looked up when the task's environment has no `PATH`
/// (what `execvp` does).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The child's stack: it makes a few dozen syscalls through libc and nothing else.
const CHILD_STACK: usize = 64 * 1024;

/// A started child: its pid (it leads its own process group) and the read ends of its
/// stdout and stderr. Reaping it is the caller's.
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) pid: Pid,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// What to start, resolved and converted before it reaches the spawner thread.
pub(crate) struct SpawnCommand {
    /// The program to exec (a path: resolved against `PATH` when given without a `/`).
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    umask: Option<libc::mode_t>,
    /// The value of [`tree::MARKER_VAR`] this execution's processes carry.
    pub(crate) marker: String,
}

/// Why a command cannot even be attempted; its `Display` is the `SpawnFailed` reason.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum BuildError {
    /// No program.
    #[error("empty command line")]
    Empty,
    /// The working directory is missing.
    #[error("working directory {0} does not exist or is not a directory")]
    NoCwd(String),
    /// The program is not found on the task's `PATH`.
    #[error("{program}: {}", io::Error::from_raw_os_error(libc::ENOENT))]
    NotFound {
        /// The program as the task named it.
        program: String,
    },
    /// A string that cannot reach `execve`.
    #[error("{0} contains a NUL byte")]
    Nul(&'static str),
}

/// The command for `req`, or why it cannot even be attempted.
pub(crate) fn build(req: &ProcessRequest) -> Result<SpawnCommand, BuildError> {
    let Some(program) = req.argv.first() else {
        return Err(BuildError::Empty);
    };
    // Say which is missing: a bare ENOENT would not tell the directory from the program.
    if !req.cwd.is_dir() {
        return Err(BuildError::NoCwd(req.cwd.display().to_string()));
    }
    let nul = BuildError::Nul;
    let path = if program.contains('/') {
        // Relative to the task's directory, as the child resolves it after chdir.
        program.clone()
    } else {
        let search = req.env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
        find_on_path(program, search.unwrap_or(DEFAULT_PATH), &req.cwd)
            .ok_or_else(|| BuildError::NotFound { program: program.clone() })?
    };
    let argv = req
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| nul("an argument")))
        .collect::<Result<Vec<_>, _>>()?;
    // Sorted by name, one value per name (the last): the order `std::process::Command` gave
    // and the one a determinism re-run reverses (`runner::in_env_order`).
    let mut env: std::collections::BTreeMap<&str, &str> =
        req.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // The tree marker (`tree`), always ours: a task cannot opt out by naming it.
    let marker = tree::new_marker();
    let marker_value = tree::marker_value(&marker);
    env.insert(tree::MARKER_VAR, &marker_value);
    let envp = env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(|_| nul("an environment variable")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SpawnCommand {
        path: CString::new(path).map_err(|_| nul("the program"))?,
        argv,
        envp,
        cwd: CString::new(req.cwd.as_os_str().as_bytes()).map_err(|_| nul("the directory"))?,
        umask: req.umask.map(|m| m as libc::mode_t),
        marker,
    })
}

/// The first executable `program` in the `:`-separated `search` (empty entries and relative
/// ones are taken from `cwd`, the task's directory).
fn find_on_path(program: &str, search: &str, cwd: &Path) -> Option<String> {
    search.split(':').find_map(|dir| {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(dir) };
        let candidate = cwd.join(dir).join(program);
        let c = CString::new(candidate.as_os_str().as_bytes()).ok()?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        let executable = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
        (executable && candidate.is_file()).then(|| candidate.to_string_lossy().into_owned())
    })
}

struct Job {
    cmd: SpawnCommand,
    reply: oneshot::Sender<io::Result<Spawned>>,
}

/// The spawner thread's queue, started on first use (and again if it ever died).
static SPAWNER: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);

/// Spawn `cmd` on the spawner thread. The outer error is the executor's own failure; the
/// inner one is the command's (program not found, …).
pub(crate) async fn spawn(cmd: SpawnCommand) -> Result<io::Result<Spawned>, ExecError> {
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
    // Before the first task: from here on a killed prova takes its tasks' trees along.
    super::guardian::ensure_started();
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new().name("prova-spawner".to_owned()).spawn(move || {
        let mut stack = vec![0u8; CHILD_STACK];
        let parent = nix::unistd::getpid();
        while let Ok(Job { cmd, reply }) = rx.recv() {
            if let Err(Ok(child)) = reply.send(start(&cmd, parent, &mut stack)) {
                // The caller went away while we were spawning: don't leave the child behind.
                discard(child.pid);
            }
        }
    })?;
    Ok(tx)
}

/// Kill a child nobody is waiting for, and reap it off the spawner thread.
fn discard(pid: Pid) {
    let _ = nix::sys::signal::killpg(pid, Signal::SIGKILL);
    let reaper = std::thread::Builder::new().name("prova-reaper".to_owned());
    if let Err(e) = reaper.spawn(move || {
        let _ = nix::sys::wait::waitpid(pid, None);
    }) {
        tracing::warn!(error = %e, "could not start a reaper thread; a zombie may remain");
    }
}

/// A pipe whose ends are both close-on-exec and above stdio (a prova started with a closed
/// stdin must not hand the child a pipe end as fd 0 that dup2 then closes).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: `fd` is open; F_DUPFD_CLOEXEC returns a new descriptor we then own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

fn dev_null() -> io::Result<OwnedFd> {
    let fd = std::fs::File::open("/dev/null")?;
    above_stdio(OwnedFd::from(fd))
}

/// What the child reads (all prepared by the parent) and the one thing it writes.
#[repr(C)]
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// `/bin/sh path args…`: what `execvp` runs for a file the kernel cannot exec (ENOEXEC).
    sh_argv: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    umask: libc::mode_t,
    set_umask: bool,
    parent: libc::pid_t,
    /// errno of the step that failed, 0 if the exec happened.
    error: libc::c_int,
}

/// A NULL-terminated array of pointers to `strings` (valid while they are).
fn ptrs<'a>(strings: impl IntoIterator<Item = &'a CStr>) -> Vec<*const libc::c_char> {
    strings.into_iter().map(CStr::as_ptr).chain(std::iter::once(std::ptr::null())).collect()
}

/// Starts `cmd`; runs on the spawner thread.
fn start(cmd: &SpawnCommand, parent: Pid, stack: &mut [u8]) -> io::Result<Spawned> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let null = dev_null()?;
    let argv = ptrs(cmd.argv.iter().map(CString::as_c_str));
    let envp = ptrs(cmd.envp.iter().map(CString::as_c_str));
    let sh_argv = ptrs(
        [c"/bin/sh", cmd.path.as_c_str()]
            .into_iter()
            .chain(cmd.argv.iter().skip(1).map(CString::as_c_str)),
    );
    let mut args = ChildArgs {
        path: cmd.path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        sh_argv: sh_argv.as_ptr(),
        cwd: cmd.cwd.as_ptr(),
        stdin: null.as_raw_fd(),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        umask: cmd.umask.unwrap_or(0),
        set_umask: cmd.umask.is_some(),
        parent: parent.as_raw(),
        error: 0,
    };
    // The stack grows down from its end, 16-byte aligned.
    let top = stack.as_mut_ptr_range().end;
    let top = top.wrapping_sub(top as usize % 16);

    // SAFETY: all signals are blocked on this thread across the clone so that no handler of
    // prova's runs in the child, which shares prova's memory; the old mask is restored
    // right after. `sigfillset` initialises `all` before use.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: `child` only reads `args` (and the strings and arrays it points to, alive in
    // this frame until the clone returns) and writes `args.error`; it runs on `stack`, which
    // nothing else uses meanwhile. CLONE_VFORK suspends this thread until the child has
    // exec'd or exited, so nothing here changes under it and it is done with `args` before
    // we read `error`.
    let pid = unsafe {
        libc::clone(
            child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut args).cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    if pid < 0 {
        return Err(clone_error);
    }
    let pid = Pid::from_raw(pid);
    // SAFETY: the child is done with `args` (see above); a volatile read because the write
    // came from another thread of execution the compiler does not see.
    let error = unsafe { std::ptr::read_volatile(&raw const args.error) };
    if error != 0 {
        // It exited without exec'ing: reap it here.
        let _ = nix::sys::wait::waitpid(pid, None);
        return Err(io::Error::from_raw_os_error(error));
    }
    drop((out_w, err_w, null));
    Ok(Spawned { pid, stdout: out_r, stderr: err_r })
}

/// The child, between clone and exec: only raw libc calls on prepared data (see `start`).
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` of `start`, alive until this function execs or exits.
    let a = unsafe { &mut *arg.cast::<ChildArgs>() };
    /// Records errno for the parent and ends the child.
    unsafe fn fail(a: &mut ChildArgs) -> ! {
        // SAFETY: errno is this thread's; _exit ends the child without running anything.
        unsafe {
            a.error = *libc::__errno_location();
            if a.error == 0 {
                a.error = libc::EIO;
            }
            libc::_exit(127)
        }
    }
    // SAFETY: raw syscalls on valid arguments; see the module docs.
    unsafe {
        // Handlers are prova's code: back to the default for every signal that has one, and
        // SIGPIPE too (Rust ignores it; a task's `yes | head -1` must end).
        for sig in 1..=libc::SIGRTMAX() {
            let mut sa: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut sa) != 0 {
                continue; // not a signal this libc lets us touch
            }
            if sig == libc::SIGPIPE
                || (sa.sa_sigaction != libc::SIG_DFL && sa.sa_sigaction != libc::SIG_IGN)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        // It leads its own group: the whole tree it starts can be signalled at once, and a
        // terminal's Ctrl-C reaches prova, not the task directly.
        if libc::setpgid(0, 0) != 0 {
            fail(a);
        }
        if a.set_umask {
            libc::umask(a.umask);
        }
        // Die with prova: a crashed or SIGKILLed worker must not leave tasks running. If
        // prova died before this, the signal will never come: fail instead.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            fail(a);
        }
        if libc::getppid() != a.parent {
            *libc::__errno_location() = libc::ESRCH;
            fail(a);
        }
        for (from, to) in [(a.stdin, 0), (a.stdout, 1), (a.stderr, 2)] {
            if libc::dup2(from, to) < 0 {
                fail(a);
            }
        }
        if libc::chdir(a.cwd) != 0 {
            fail(a);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(a.path, a.argv, a.envp);
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(c"/bin/sh".as_ptr(), a.sh_argv, a.envp);
        }
        fail(a)
    }
}
