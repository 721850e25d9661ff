//! A task's process tree, found by the marker every member inherits: the environment
//! variable [`MARKER_VAR`] = `<run nonce>.<sequence>`.
//!
//! Why a marker: a process group (what the executor signals) is left by `setsid`/`setpgid`,
//! and a parent-death signal reaches only the direct child. The environment is inherited
//! through `fork`, `setsid`, a double fork and `exec`, so scanning `/proc/*/environ` of this
//! user's processes (each block in one read, and a process caught in its `execve` read again:
//! [`exec_pending`]) finds every descendant of a task however it detached — except one that
//! clears or rewrites its environment before `exec` (`env -i`), or one this user cannot read
//! (setuid). Those escape; the sandbox (`bwrap --unshare-pid --die-with-parent`) still
//! contains them under `--sandbox`.
//!
//! - Each execution gets its own marker ([`new_marker`]): at the task's end [`sweep`] kills
//!   what carries it (`process` does this after the group kill, and names the leftovers in
//!   the task's log).
//! - A look for one execution's processes passes over those older than its start ([`Since`])
//!   without reading their environment; soon after the start it does not list `/proc` at
//!   all, but looks at the pids the kernel handed out since ([`Since::new_pids`]): a task's
//!   end then costs as much on a busy machine as on a quiet one.
//! - Every marker of this prova shares the run nonce ([`run_nonce`]): the guardian
//!   (`guardian`) kills every process carrying it when prova dies, SIGKILL included.
//!
//! Why not `PR_SET_CHILD_SUBREAPER`: orphans would re-parent to prova and have to be reaped by
//! it, but the executor's waits rely on nothing reaping children it did not start; and the
//! re-parented orphan would still not say which task it came from. Why not a cgroup: not
//! writable unprivileged on most hosts (containers, CI); the marker works everywhere.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The environment variable that marks a task's processes. Its value is opaque to tasks.
pub const MARKER_VAR: &str = "PROVA_TREE";

/// How many times a sweep looks again after killing something (a member may fork while
/// being killed); far above what a real tree needs.
const SWEEP_ROUNDS: usize = 50;

/// Between two rounds of a sweep that still found something: lets SIGKILLed processes die.
const SWEEP_PAUSE: Duration = Duration::from_millis(5);

/// This process's run nonce: 32 hex digits from the kernel's random source (time and pid
/// if that fails), fixed for the life of the process.
pub fn run_nonce() -> &'static str {
    static NONCE: OnceLock<String> = OnceLock::new();
    NONCE.get_or_init(|| {
        let mut bytes = [0u8; 16];
        // SAFETY: writes at most `bytes.len()` bytes into the live local buffer.
        let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
        if usize::try_from(got).ok() != Some(bytes.len()) {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let seed = format!("{t}.{}", std::process::id());
            bytes.copy_from_slice(&blake3::hash(seed.as_bytes()).as_bytes()[..16]);
        }
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// A fresh marker value for one execution: `<run nonce>.<n>`.
pub(crate) fn new_marker() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(1);
    format!("{}.{}", run_nonce(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// What an execution's processes carry in [`MARKER_VAR`]: the marker, after the markers of
/// any prova this one runs under (`outer:inner`), so a prova run as a task stays in the
/// outer task's tree.
pub(crate) fn marker_value(marker: &str) -> String {
    match std::env::var(MARKER_VAR) {
        Ok(outer) if !outer.is_empty() => format!("{outer}:{marker}"),
        _ => marker.to_owned(),
    }
}

/// Which processes a scan selects.
#[derive(Clone, Copy, Debug)]
pub enum Select<'a> {
    /// Those of one execution: `PROVA_TREE` is exactly this marker. Every one started after
    /// the [`Since`], taken before the execution's first process was spawned.
    Task(&'a str, Since),
    /// Those of every execution of one prova: `PROVA_TREE` starts with `<nonce>.`.
    Run(&'a str),
}

impl Select<'_> {
    fn matches(&self, value: &[u8]) -> bool {
        match self {
            Select::Task(m, _) => value == m.as_bytes(),
            Select::Run(nonce) => {
                value.strip_prefix(nonce.as_bytes()).is_some_and(|rest| rest.first() == Some(&b'.'))
            }
        }
    }
}

/// When an execution started, for a scan to pass over the processes that are older without
/// reading their environment (a process's is the costliest file `/proc` has to read: the
/// kernel maps the process's memory for it; on a desktop with a few hundred processes, that
/// read was most of a trivial task's cost). A process's age is read from the change time of
/// its `/proc/<pid>` directory, which the kernel sets when it makes that inode: never before
/// the process exists, as the inode belongs to the process (a reused pid gets a new one),
/// and later whenever the inode was dropped and made again. A member started after the
/// execution began, so its directory is never older than the start; a process passed over
/// had its directory before the start, so was running before it.
///
/// The start is the kernel's wall clock too, read as the change time of a new pipe — not
/// `clock_gettime`, which an `LD_PRELOAD` (libfaketime, under a determinism re-run of a
/// prova run as a task) can move. It is compared with [`SINCE_SLACK`] of slack (the
/// kernel's coarse ticks), and a scan that finds the wall clock moved against the boot clock
/// by more than half of that since the start (a step of the clock, or a faked boot clock
/// that does not keep time) passes over nothing.
///
/// When the start also knows the last pid the pid namespace handed out
/// ([`Since::new_pids`]), a scan soon after it does not list `/proc` at all: it looks only at
/// the pids handed out since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Since {
    /// The kernel's wall clock and the boot clock at the start, in nanoseconds; `None` when
    /// either could not be read (scans then pass over nothing).
    clocks: Option<(i128, i128)>,
    /// The last pid handed out in this pid namespace at the start
    /// (`/proc/sys/kernel/ns_last_pid`), when `/proc` is this namespace's and it was read.
    last_pid: Option<u32>,
}

/// More pids a second than a kernel hands out: every process and thread is created (and
/// ends) holding the one, global `tasklist_lock` for writing, besides `pidmap_lock`, so
/// creations are serialised — the fastest machines measure a few hundred thousand `fork`s
/// a second. Within `pid_max / PID_RATE_BOUND` seconds of a start (33 ms at the smallest
/// usual `pid_max`, 32768; 4 s at 4194304) the pid space cannot have turned over, so every
/// pid handed out since lies after the start's last one ([`pid_interval`]).
pub const PID_RATE_BOUND: i128 = 1_000_000;

/// Most pids a scan looks at one by one ([`Since::new_pids`]): past it, listing `/proc`
/// (one entry per process, not per pid handed out) likely costs less.
pub const MAX_NEW_PIDS: usize = 512;

/// The kernel's coarse clock's tick, at most: added to a measured time since the start.
const COARSE_TICK_NS: i128 = 10_000_000;

/// `/proc` shows this process's pid namespace (so `ns_last_pid` and the pids under `/proc`
/// count the same pids): `/proc/self` names this process.
fn proc_is_ours() -> bool {
    static OURS: OnceLock<bool> = OnceLock::new();
    *OURS.get_or_init(|| {
        std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str()?.parse::<u32>().ok())
            .is_some_and(|pid| pid == std::process::id())
    })
}

/// A number in a `/proc/sys/kernel` file.
fn kernel_number(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/sys/kernel/{name}")).ok()?;
    text.trim().parse().ok()
}

/// The last pid this pid namespace handed out, when `/proc` is this namespace's.
fn ns_last_pid() -> Option<u32> {
    if !proc_is_ours() {
        return None;
    }
    kernel_number("ns_last_pid")
}

/// The kernel's `pid_max` (pids wrap below it).
fn pid_max() -> Option<u32> {
    static MAX: OnceLock<Option<u32>> = OnceLock::new();
    *MAX.get_or_init(|| kernel_number("pid_max"))
}

/// The pids handed out after `first` up to `last`, in a pid space that wraps below `max`:
/// `first+1 ..= last`, or past a wrap `first+1 .. max` then `1 ..= last`. `None` when they
/// are more than `cap` (or `max` is not above both).
pub(crate) fn pid_interval(first: u32, last: u32, max: u32, cap: usize) -> Option<Vec<u32>> {
    if first >= max || last >= max {
        return None;
    }
    let count = if last >= first { last - first } else { (max - 1 - first) + last };
    if usize::try_from(count).ok()? > cap {
        return None;
    }
    let pids: Vec<u32> = if last >= first {
        (first + 1..=last).collect()
    } else {
        (first + 1..max).chain(1..=last).collect()
    };
    Some(pids)
}

/// How much older than the execution's start a process's `/proc` directory must be before a
/// scan passes over it: far above the kernel's tick.
pub const SINCE_SLACK: Duration = Duration::from_secs(2);

/// The kernel's wall clock now (in its coarse ticks): the change time of a new pipe.
fn kernel_wall_ns() -> Option<i128> {
    let (read, _write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    let st = nix::sys::stat::fstat(&read).ok()?;
    Some(i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec))
}

/// The boot clock now, in nanoseconds.
fn boot_ns() -> Option<i128> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live, writable timespec; clock_gettime writes only it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &raw mut ts) };
    (rc == 0).then(|| i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

/// The kernel's wall clock and the boot clock, now.
fn clocks() -> Option<(i128, i128)> {
    Some((kernel_wall_ns()?, boot_ns()?))
}

impl Since {
    /// Now: to be taken before the execution's first process is spawned.
    pub fn now() -> Self {
        // The clocks first, then the counter: the time measured from here covers every pid
        // counted after it.
        let clocks = clocks();
        Self { clocks, last_pid: ns_last_pid() }
    }

    /// A start no process is older than: every scan reads every process.
    pub const ANY: Self = Self { clocks: None, last_pid: None };

    /// The pids a process started since may have, for a scan now: those handed out after the
    /// start's last one ([`pid_interval`]) — when the pid space cannot have turned over since
    /// (less than `pid_max / PID_RATE_BOUND` seconds by both the kernel's wall clock and the
    /// boot clock, which agree), and they are at most [`MAX_NEW_PIDS`]. `None`: list `/proc`.
    /// The pids may include threads and processes older than the start (a pid the counter
    /// skipped as taken): the scan reads them like any other.
    fn new_pids(&self) -> Option<Vec<u32>> {
        let max = pid_max()?;
        // The counter first, then the clocks: the time measured covers every pid counted.
        let last = ns_last_pid()?;
        self.new_pids_at(max, last, clocks()?)
    }

    /// [`Self::new_pids`] for a scan that found the counter at `last` (below `max`), then
    /// the clocks at `now` (wall, boot). Pure.
    fn new_pids_at(&self, max: u32, last: u32, now: (i128, i128)) -> Option<Vec<u32>> {
        let first = self.last_pid?;
        let (wall, boot) = self.clocks?;
        let (wall_now, boot_now) = now;
        let (by_wall, by_boot) = (wall_now - wall, boot_now - boot);
        let slack = i128::try_from(SINCE_SLACK.as_nanos()).ok()?;
        if (by_wall - by_boot).abs() > slack / 2 {
            return None;
        }
        let elapsed = by_wall.max(by_boot).max(0) + COARSE_TICK_NS;
        if elapsed.saturating_mul(PID_RATE_BOUND) >= i128::from(max) * 1_000_000_000 {
            return None;
        }
        pid_interval(first, last, max, MAX_NEW_PIDS)
    }

    /// The change time (ns since the epoch) below which a `/proc/<pid>` directory belongs to
    /// a process older than the start, for a scan now; `None` (pass over nothing) when the
    /// wall clock moved against the boot clock by more than half the slack since the start.
    fn older_than(&self) -> Option<i128> {
        let (wall, boot) = self.clocks?;
        let slack = i128::try_from(SINCE_SLACK.as_nanos()).ok()?;
        let (wall_now, boot_now) = clocks()?;
        let moved = (wall_now - wall) - (boot_now - boot);
        (moved.abs() <= slack / 2).then_some(wall - slack)
    }
}

/// Whether `/proc/<pid>` changed before `older_than` (ns since the epoch): a process that
/// was running before the execution started. Unknown (gone, unreadable) is not older.
fn older(proc_fd: &std::fs::File, pid: u32, older_than: i128) -> bool {
    use nix::fcntl::AtFlags;
    use nix::sys::stat::fstatat;
    fstatat(proc_fd, pid.to_string().as_str(), AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|st| {
        i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec) < older_than
    })
}

/// A process found carrying a marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its pid.
    pub pid: i32,
    /// Its command name (`/proc/<pid>/comm`), for messages.
    pub comm: String,
}

/// The live processes of this user that `select` picks (never this process itself).
///
/// One look reads `/proc` and, for each process not older than the execution ([`Since`]: one
/// `stat` of its directory relative to the open `/proc`), opens its `environ` relative to
/// that `/proc` (one path component, not three) and takes the owner from that open file:
/// every task's end looks once, and with many short tasks these reads were most of the
/// executor's kernel time. A process caught in its `execve` is waited for (at most
/// [`EXEC_PATIENCE`]): it may block the thread.
pub fn find(select: Select<'_>) -> Vec<Member> {
    // Soon after the start, only the pids handed out since; otherwise every entry of `/proc`
    // not older than the start.
    if let Some((proc_fd, pids)) = new_pids(select, MAX_NEW_PIDS)
        && let Some(found) = among(select, &proc_fd, pids, true, Some(EXEC_PATIENCE))
    {
        return found;
    }
    let Ok(proc_fd) = std::fs::File::open("/proc") else { return Vec::new() };
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let older_than = match select {
        Select::Task(_, since) => since.older_than(),
        Select::Run(_) => None,
    };
    let pids = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| older_than.is_none_or(|t| !older(&proc_fd, pid, t)))
        .collect();
    among(select, &proc_fd, pids, false, Some(EXEC_PATIENCE)).unwrap_or_default()
}

/// [`find`] for a task when only few pids were handed out since its start (at most `few`,
/// read by number), never waiting: cheap enough to do on a runtime thread. `None`: it would
/// read more, or it caught a process in its `execve` (only a look that may wait can tell
/// whose that process is: [`find`]).
pub fn find_few(select: Select<'_>, few: usize) -> Option<Vec<Member>> {
    let (proc_fd, pids) = new_pids(select, few)?;
    among(select, &proc_fd, pids, true, None)
}

/// The open `/proc` and the pids handed out since a task's start, when they are at most
/// `few` ([`Since::new_pids`]).
fn new_pids(select: Select<'_>, few: usize) -> Option<(std::fs::File, Vec<u32>)> {
    let Select::Task(_, since) = select else { return None };
    let pids = since.new_pids().filter(|p| p.len() <= few)?;
    Some((std::fs::File::open("/proc").ok()?, pids))
}

/// The processes among `pids` (through the open `/proc`) that `select` picks, in pid order,
/// never this process; `by_pid`: they were not listed by `/proc` (a thread's id may be
/// among them: its process stands for it). A process caught in its `execve` is read again
/// for up to `patience`; without patience, catching one gives `None`.
fn among(
    select: Select<'_>,
    proc_fd: &std::fs::File,
    pids: Vec<u32>,
    by_pid: bool,
    patience: Option<Duration>,
) -> Option<Vec<Member>> {
    let me = std::process::id();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let key = format!("{MARKER_VAR}=");
    let mut buf = Vec::new();
    let mut found = Vec::new();
    for pid in pids.into_iter().filter(|&pid| pid != me) {
        if !read_environ(proc_fd, pid, uid, &mut buf, patience)? {
            continue;
        }
        let marked = buf
            .split(|&b| b == 0)
            .filter_map(|var| var.strip_prefix(key.as_bytes()))
            .flat_map(|value| value.split(|&b| b == b':'))
            .any(|marker| select.matches(marker));
        if !marked {
            continue;
        }
        let pid = if by_pid { thread_group(proc_fd, pid) } else { Some(pid) };
        if let Some(pid) = pid.filter(|&pid| pid != me)
            && let Ok(raw) = i32::try_from(pid)
        {
            let comm = read_at(proc_fd, pid, "comm", None).unwrap_or_default();
            let comm = OsStr::from_bytes(comm.trim_ascii_end()).to_string_lossy().into_owned();
            found.push(Member { pid: raw, comm });
        }
    }
    found.sort_by_key(|m| m.pid);
    found.dedup_by_key(|m| m.pid);
    Some(found)
}

/// The process (thread group) `/proc/<pid>` belongs to: `pid` itself, or the process of the
/// thread `pid` names (a thread is not listed in `/proc`, but is there by its id).
fn thread_group(proc_fd: &std::fs::File, pid: u32) -> Option<u32> {
    let status = read_at(proc_fd, pid, "status", None)?;
    let line = status.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"Tgid:"))?;
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

/// The most read of a small `/proc/<pid>` file (`stat`, `status`, `comm`).
const MAX_PROC_FILE: u64 = 64 << 10;

/// `/proc/<pid>/<name>` opened through the open `/proc`; `None` when it is gone, or when
/// `uid` is given and does not own it (checked on the open file, before anything is read).
fn open_at(
    proc_fd: &std::fs::File,
    pid: u32,
    name: &str,
    uid: Option<u32>,
) -> Option<std::fs::File> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    let path = format!("{pid}/{name}");
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let file = std::fs::File::from(openat(proc_fd, path.as_str(), flags, Mode::empty()).ok()?);
    if let Some(uid) = uid
        && file.metadata().ok()?.uid() != uid
    {
        return None;
    }
    Some(file)
}

/// A small `/proc/<pid>/<name>` read through the open `/proc` (see [`open_at`]).
fn read_at(proc_fd: &std::fs::File, pid: u32, name: &str, uid: Option<u32>) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut out = Vec::new();
    open_at(proc_fd, pid, name, uid)?.take(MAX_PROC_FILE).read_to_end(&mut out).ok()?;
    Some(out)
}

/// How long a look that may wait reads again a process caught in its `execve` (see
/// [`read_environ`]) before it gives up on it: the window lasts a millisecond or so, longer
/// only while the exec waits on the disk.
const EXEC_PATIENCE: Duration = Duration::from_millis(500);

/// The first size of the buffer an environment is read into (it grows while a read fills it).
const ENVIRON_FIRST: usize = 16 << 10;

/// The most of an environment read. No block reaches it: `/proc/<pid>/environ` shows what
/// `execve` laid down (a later `setenv` does not grow it), and `execve` takes at most 6 MiB
/// of arguments and environment together (three quarters of the kernel's 8 MiB
/// `_STK_LIM`, less under a smaller stack limit).
const ENVIRON_MOST: usize = 16 << 20;

/// What one read of a process's environment found.
enum Environ {
    /// The whole block, in the buffer.
    Block,
    /// Gone, not `uid`'s, a zombie, a kernel thread, or an empty environment: no marker.
    Unmarked,
    /// Between the two memories of an `execve`: read again.
    InExec,
}

/// Reads the environment block of `pid` (if it is `uid`'s) into `buf`; `Some(true)` when
/// it is there, `Some(false)` when the process carries none (see [`Environ::Unmarked`]).
/// A process caught in its `execve` is read again for up to `patience`; with none, `None`.
fn read_environ(
    proc_fd: &std::fs::File,
    pid: u32,
    uid: u32,
    buf: &mut Vec<u8>,
    patience: Option<Duration>,
) -> Option<bool> {
    const YIELDS: u32 = 100;
    let start = std::time::Instant::now();
    let mut tries = 0u32;
    loop {
        match environ_once(proc_fd, pid, uid, buf) {
            Environ::Block => return Some(true),
            Environ::Unmarked => return Some(false),
            Environ::InExec => {}
        }
        let patience = patience?;
        if start.elapsed() >= patience {
            tracing::warn!(
                pid,
                "a process stayed in its execve for {patience:?}: its environment is not read"
            );
            return Some(false);
        }
        tries += 1;
        if tries < YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// One look at `pid`'s environment, into `buf`.
///
/// The block is taken by one `read` call: the kernel copies it all from the memory it took
/// hold of at the open. A process that execs between two calls drops that memory, and the
/// later call ends the file early: read piecemeal, the block could be cut short of the
/// marker. It reads empty for a zombie, a kernel thread, a process whose environment is
/// empty — and for one in the middle of `execve` ([`exec_pending`]).
fn environ_once(proc_fd: &std::fs::File, pid: u32, uid: u32, buf: &mut Vec<u8>) -> Environ {
    use std::os::unix::fs::FileExt as _;
    let Some(file) = open_at(proc_fd, pid, "environ", Some(uid)) else { return Environ::Unmarked };
    let mut size = buf.len().max(ENVIRON_FIRST);
    let read = loop {
        buf.resize(size, 0);
        let Ok(n) = file.read_at(buf, 0) else { return Environ::Unmarked };
        if n < size || size >= ENVIRON_MOST {
            break n;
        }
        size = (size * 4).min(ENVIRON_MOST);
    };
    buf.truncate(read);
    if read > 0 {
        return Environ::Block;
    }
    let Some(stat) = read_at(proc_fd, pid, "stat", None) else { return Environ::Unmarked };
    if exec_pending(&stat) { Environ::InExec } else { Environ::Unmarked }
}

/// Whether a process whose environment read empty may yet show one, by its `stat`: it is
/// not a zombie nor a kernel thread (a child of kthreadd, pid 2) nor exiting (no memory),
/// and either
/// - its `execve` has not finished: `start_code` and `end_code` (fields 26, 27) are still 0.
///   The kernel sets them once the new stack is written; before that, the new memory shows
///   no environment, then an empty one (`env_start` = `env_end`) while its strings are
///   walked; or
/// - its environment is not empty (`env_start`, field 50, is not `env_end`, field 51): the
///   memory the read took hold of was the one an exec dropped.
///
/// A finished process whose environment is empty reads empty for good.
fn exec_pending(stat: &[u8]) -> bool {
    // `pid (comm) S ppid …`: field 3 (the state) follows the last `)`.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else { return false };
    let rest = stat.get(close + 2..).unwrap_or_default().trim_ascii_end();
    let fields: Vec<&[u8]> = rest.split(|&b| b == b' ').collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let (Some(state), Some(ppid)) = (field(3), field(4)) else { return false };
    if matches!(state, b"Z" | b"X" | b"x") || ppid == b"2" || ppid == b"0" {
        return false;
    }
    let unset = |n| field(n).is_none_or(|v| v == b"0");
    // No memory at all (`vsize`, field 23): on its way out, its memory released before it
    // becomes a zombie. An exec is never without one: it swaps the old for the new.
    if unset(23) {
        return false;
    }
    if unset(26) && unset(27) {
        return true;
    }
    // A kernel older than 3.5 shows neither: the look cannot tell, and reads again.
    field(50).is_none_or(|start| Some(start) != field(51))
}

/// How long [`find_settled`] lets members that are on their way out go.
pub const SETTLE: Duration = Duration::from_millis(100);

/// [`find`], looked at again until nothing is found or `settle` has passed: the members that
/// are still there then. Processes ending on their own just as the task exits (a sandbox's
/// init, a subshell finishing) are not reported as left running; one that keeps running is.
pub fn find_settled(select: Select<'_>, settle: Duration) -> Vec<Member> {
    let until = std::time::Instant::now() + settle;
    let mut found = find(select);
    while !found.is_empty() && std::time::Instant::now() < until {
        std::thread::sleep(SWEEP_PAUSE);
        found = find(select);
    }
    found
}

/// Sends `sig` to each of `members` (one that is already gone is fine).
pub fn signal_all(members: &[Member], sig: Signal) {
    for m in members {
        let _ = kill(Pid::from_raw(m.pid), sig);
    }
}

/// SIGKILLs every process `select` picks, looking again until none is left (bounded).
/// Returns the processes the first look found.
pub fn sweep(select: Select<'_>) -> Vec<Member> {
    let first = find(select);
    let mut found = first.clone();
    for _ in 0..SWEEP_ROUNDS {
        if found.is_empty() {
            break;
        }
        signal_all(&found, Signal::SIGKILL);
        std::thread::sleep(SWEEP_PAUSE);
        found = find(select);
    }
    if !found.is_empty() {
        let pids: Vec<i32> = found.iter().map(|m| m.pid).collect();
        tracing::warn!(?pids, "processes of a task tree survived {SWEEP_ROUNDS} rounds of SIGKILL");
    }
    first
}

/// The line a task's log gets when it left processes running after it exited.
pub(crate) fn leak_notice(left: &[Member]) -> Vec<u8> {
    const NAMED: usize = 5;
    let mut names: Vec<String> =
        left.iter().take(NAMED).map(|m| format!("{} {}", m.comm, m.pid)).collect();
    if left.len() > NAMED {
        names.push(format!("{} more", left.len() - NAMED));
    }
    let n = left.len();
    let s = if n == 1 { "" } else { "es" };
    format!(
        "prova: warning: the task left {n} process{s} running after it exited ({}); killed {}\n",
        names.join(", "),
        if n == 1 { "it" } else { "them" }
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_selection_needs_the_dot_after_the_nonce() {
        assert!(Select::Run("ab").matches(b"ab.1"));
        assert!(!Select::Run("ab").matches(b"abc.1"));
        assert!(!Select::Run("ab").matches(b"ab"));
        assert!(Select::Task("ab.1", Since::ANY).matches(b"ab.1"));
        assert!(!Select::Task("ab.1", Since::ANY).matches(b"ab.12"));
    }

    #[test]
    fn markers_are_distinct_and_share_the_nonce() {
        let (a, b) = (new_marker(), new_marker());
        assert_ne!(a, b);
        assert!(Select::Run(run_nonce()).matches(a.as_bytes()));
        assert_eq!(run_nonce().len(), 32);
    }

    /// A process carrying an execution's marker is found by it (through the open `/proc`),
    /// named, and killed by the sweep; one carrying another marker is left alone.
    #[test]
    fn a_marked_process_is_found_and_swept_and_another_marker_is_not() {
        let since = Since::now();
        let (marker, other) = (new_marker(), new_marker());
        let start = |m: &str| {
            std::process::Command::new("sleep")
                .arg("30")
                .env(MARKER_VAR, marker_value(m))
                .spawn()
                .expect("sleep")
        };
        let (mut mine, mut theirs) = (start(&marker), start(&other));
        let found = find(Select::Task(&marker, since));
        let pids: Vec<i32> = found.iter().map(|m| m.pid).collect();
        assert_eq!(pids, [i32::try_from(mine.id()).expect("a pid")]);
        assert_eq!(found[0].comm, "sleep");
        assert_eq!(sweep(Select::Task(&marker, since)).len(), 1);
        assert!(!mine.wait().expect("reaped").success(), "killed, not finished");
        assert!(theirs.try_wait().expect("a status").is_none(), "another task's was killed");
        let _ = theirs.kill();
        let _ = theirs.wait();
    }

    /// A scan passes over a process that was running before the execution started, reads
    /// every one when the start is unknown, and every one when the wall clock moved against
    /// the boot clock since the start (a clock step could make a member look older).
    #[test]
    fn a_process_older_than_the_start_is_passed_over_unless_the_clock_moved() {
        let marker = new_marker();
        let mut old = std::process::Command::new("sleep")
            .arg("30")
            .env(MARKER_VAR, marker_value(&marker))
            .spawn()
            .expect("sleep");
        let pid = i32::try_from(old.id()).expect("a pid");
        let (wall, boot) = clocks().expect("the clocks");
        let ten = 10 * 1_000_000_000;
        // An execution that started ten seconds from now: `sleep` is older.
        let later = Since { clocks: Some((wall + ten, boot + ten)), last_pid: None };
        let pids = |since| -> Vec<i32> {
            find(Select::Task(&marker, since)).iter().map(|m| m.pid).collect()
        };
        let none: Vec<i32> = Vec::new();
        assert_eq!(pids(later), none, "older than the start: passed over");
        assert_eq!(pids(Since::ANY), [pid]);
        // The same start, but the wall clock has stepped by ten seconds against the boot
        // clock since (or the boot clock read then was faked).
        let stepped = Since { clocks: Some((wall + ten, boot)), last_pid: None };
        assert_eq!(pids(stepped), [pid], "a stepped clock passes over nothing");
        // Within the slack of the start, it is read.
        let just_after = Since { clocks: Some((wall + ten / 10, boot + ten / 10)), last_pid: None };
        assert_eq!(pids(just_after), [pid]);
        let _ = old.kill();
        let _ = old.wait();
    }

    #[test]
    fn the_pids_since_a_start_run_to_the_last_one_wrapping_below_pid_max() {
        assert_eq!(pid_interval(100, 104, 1000, 10), Some(vec![101, 102, 103, 104]));
        assert_eq!(pid_interval(100, 100, 1000, 10), Some(vec![]), "none handed out");
        // Past the top of the pid space, on from the bottom.
        assert_eq!(pid_interval(997, 2, 1000, 10), Some(vec![998, 999, 1, 2]));
        // More than the cap: list `/proc` instead.
        assert_eq!(pid_interval(100, 200, 1000, 10), None);
        assert_eq!(pid_interval(990, 50, 1000, 10), None);
        // Counters the kernel cannot show.
        assert_eq!(pid_interval(1000, 2, 1000, 10), None);
        assert_eq!(pid_interval(5, 1000, 1000, 10_000), None);
    }

    /// The pids handed out since the start hold a member started after it and not one
    /// started before, and a scan among them finds the one; the scan looks among them only
    /// while the pid space cannot have turned over since the start.
    #[test]
    fn a_scan_soon_after_the_start_looks_only_at_the_pids_handed_out_since() {
        let marker = new_marker();
        let sleep = || {
            std::process::Command::new("sleep")
                .arg("30")
                .env(MARKER_VAR, marker_value(&marker))
                .spawn()
                .expect("sleep")
        };
        let mut before = sleep();
        let since = Since::now();
        let mut after = sleep();
        let pid = |c: &std::process::Child| i32::try_from(c.id()).expect("a pid");
        let counted = since.last_pid.zip(ns_last_pid()).zip(pid_max());
        if let Some(((first, last), max)) = counted {
            let handed = pid_interval(first, last, max, usize::MAX).expect("the pids since");
            assert!(handed.contains(&after.id()) && !handed.contains(&before.id()));
            let proc_fd = std::fs::File::open("/proc").expect("/proc");
            let found =
                among(Select::Task(&marker, since), &proc_fd, handed, true, Some(EXEC_PATIENCE))
                    .expect("a patient look decides");
            let pids: Vec<i32> = found.iter().map(|m| m.pid).collect();
            assert_eq!(pids, [pid(&after)]);
        } else {
            eprintln!("skipping: /proc shows no ns_last_pid of this pid namespace here");
        }
        // Whichever way the scan goes now, it finds the member; with no start, both.
        let pids = |since| -> Vec<i32> {
            find(Select::Task(&marker, since)).iter().map(|m| m.pid).collect()
        };
        assert!(pids(since).contains(&pid(&after)));
        // In pid order, which a wrap of the pid counter between the two would swap.
        let mut both = [pid(&before), pid(&after)];
        both.sort_unstable();
        assert_eq!(pids(Since::ANY), both);
        for c in [&mut before, &mut after] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn the_pids_since_are_looked_at_only_while_the_pid_space_cannot_have_turned_over() {
        let (wall, boot) = (1_000 * 1_000_000_000, 50 * 1_000_000_000);
        let start = Since { clocks: Some((wall, boot)), last_pid: Some(100) };
        let ms = 1_000_000;
        let after = |d: i128| (wall + d, boot + d);
        assert_eq!(start.new_pids_at(32768, 103, after(5 * ms)), Some(vec![101, 102, 103]));
        // 32768 pids take at least 33 ms to hand out: 30 ms (and a tick) is too long.
        assert_eq!(start.new_pids_at(32768, 103, after(30 * ms)), None);
        assert_eq!(start.new_pids_at(4_194_304, 103, after(2_000 * ms)), Some(vec![101, 102, 103]));
        // The clocks disagree (one was stepped or faked): list `/proc`.
        assert_eq!(start.new_pids_at(32768, 103, (wall + 5 * ms, boot + 2_000 * ms)), None);
        // No counter at the start, or no clocks.
        assert_eq!(Since { last_pid: None, ..start }.new_pids_at(32768, 103, after(ms)), None);
        assert_eq!(Since::ANY.new_pids_at(32768, 103, after(ms)), None);
    }

    /// A `stat` line whose fields 26, 27 (code), 50, 51 (environment) are given, with some
    /// memory (`vsize`, field 23).
    fn stat_line(state: &str, ppid: u32, code: (u64, u64), env: (u64, u64)) -> Vec<u8> {
        let mut fields: Vec<String> = (3..=52).map(|_| "0".to_owned()).collect();
        let mut set = |n: usize, v: String| fields[n - 3] = v;
        set(3, state.to_owned());
        set(4, ppid.to_string());
        set(23, "143360".to_owned());
        set(26, code.0.to_string());
        set(27, code.1.to_string());
        set(50, env.0.to_string());
        set(51, env.1.to_string());
        format!("4242 (a (b) c) {}\n", fields.join(" ")).into_bytes()
    }

    #[test]
    fn an_empty_environment_is_read_again_only_while_an_exec_has_not_finished() {
        let code = (0x5555_0000, 0x5555_8000);
        // The new memory has no environment yet, then an empty one while its strings are
        // walked: the code is not set until the stack is written.
        assert!(exec_pending(&stat_line("R", 1, (0, 0), (0, 0))));
        assert!(exec_pending(&stat_line("R", 1, (0, 0), (0x7ff0, 0x7ff0))));
        assert!(exec_pending(&stat_line("D", 1, (0, 0), (0x7ff0, 0x7ff0))));
        // Finished, with an environment: the read took hold of the memory the exec dropped.
        assert!(exec_pending(&stat_line("S", 1, code, (0x7ff0, 0x8000))));
        // Finished with an empty environment; a zombie; a kernel thread; no state at all.
        assert!(!exec_pending(&stat_line("S", 1, code, (0x7ff0, 0x7ff0))));
        assert!(!exec_pending(&stat_line("R", 1, code, (0x7ff0, 0x7ff0))));
        assert!(!exec_pending(&stat_line("Z", 1, (0, 0), (0, 0))));
        assert!(!exec_pending(&stat_line("I", 2, (0, 0), (0, 0))));
        // Exiting: its memory released, not yet a zombie (a look would wait on it in vain).
        let exiting = String::from_utf8(stat_line("D", 1, (0, 0), (0, 0))).expect("text");
        assert!(!exec_pending(exiting.replacen(" 143360 ", " 0 ", 1).as_bytes()));
        assert!(!exec_pending(b"4242 (sleep)"));
        assert!(!exec_pending(b"garbage"));
    }

    /// The sweep (a task's kill, and the guardian's at prova's end, look the same way) finds
    /// a child caught in its `execve` as its parent exits: read piecemeal, its environment
    /// could be cut short of the marker by the exec.
    #[test]
    fn a_sweep_finds_a_child_caught_in_its_exec() {
        const ROUNDS: usize = 40;
        let pad = "x".repeat(100_000);
        let mut missed = Vec::new();
        for round in 0..ROUNDS {
            let marker = new_marker();
            let since = Since::now();
            let mut sh = std::process::Command::new("sh")
                .args(["-c", "sleep 300 & exit 3"])
                .env("A_PROVA_PAD", &pad)
                .env(MARKER_VAR, marker_value(&marker))
                .spawn()
                .expect("sh");
            sh.wait().expect("reap sh");
            let swept = sweep(Select::Task(&marker, since));
            if swept.len() != 1 {
                missed.push((round, swept));
            }
            assert!(
                find(Select::Task(&marker, since)).is_empty(),
                "the sweep killed what it found"
            );
        }
        assert!(missed.is_empty(), "the sweep missed the child: {missed:?}");
    }

    /// `pid`'s `stat` once its exec has finished (its code is set), read through `/proc`.
    fn after_exec(proc_fd: &std::fs::File, pid: u32) -> Vec<u8> {
        loop {
            let stat = read_at(proc_fd, pid, "stat", None).expect("the process is there");
            if !exec_pending(&stat) || stat.windows(3).any(|w| w == b") S") {
                return stat;
            }
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_process_with_an_empty_environment_is_not_waited_for_and_a_marked_one_is_read_whole() {
        let proc_fd = std::fs::File::open("/proc").expect("/proc");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let mut bare =
            std::process::Command::new("sleep").arg("300").env_clear().spawn().expect("sleep");
        let marker = new_marker();
        // Past the first buffer, in variables of less than the kernel's 128 KiB a string.
        let big = "y".repeat(60_000);
        let mut marked = std::process::Command::new("sleep")
            .arg("300")
            .envs((0..3).map(|i| (format!("A_PAD{i}"), &big)))
            .env(MARKER_VAR, marker_value(&marker))
            .spawn()
            .expect("sleep");
        let mut buf = Vec::new();
        let bare_pid = bare.id();
        after_exec(&proc_fd, bare_pid);
        // Without patience a process caught in exec gives `None`: this one is not in exec.
        assert_eq!(read_environ(&proc_fd, bare_pid, uid, &mut buf, None), Some(false));
        let marked_pid = marked.id();
        after_exec(&proc_fd, marked_pid);
        assert_eq!(read_environ(&proc_fd, marked_pid, uid, &mut buf, None), Some(true));
        let key = format!("{MARKER_VAR}={}", marker_value(&marker));
        assert!(
            buf.split(|&b| b == 0).any(|var| var == key.as_bytes()),
            "the block is read past its first 16 KiB"
        );
        for c in [&mut bare, &mut marked] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn a_threads_id_stands_for_its_process() {
        let proc_fd = std::fs::File::open("/proc").expect("/proc");
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            tx.send(u32::try_from(tid).expect("a tid")).expect("sent");
            let _ = stop_rx.recv();
        });
        let tid = rx.recv().expect("the thread's id");
        assert_ne!(tid, std::process::id());
        assert_eq!(thread_group(&proc_fd, tid), Some(std::process::id()));
        assert_eq!(thread_group(&proc_fd, std::process::id()), Some(std::process::id()));
        drop(stop_tx);
        t.join().expect("joined");
    }

    #[test]
    fn the_notice_counts_and_names() {
        let one = [Member { pid: 7, comm: "sleep".into() }];
        let text = String::from_utf8(leak_notice(&one)).unwrap();
        assert!(text.contains("left 1 process running after it exited (sleep 7); killed it"));
    }
}
