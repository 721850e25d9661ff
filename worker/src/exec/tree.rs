//! A task's process tree, found by the marker every member inherits: the environment
//! variable [`MARKER_VAR`] = `<run nonce>.<sequence>`.
//!
//! Why a marker: a process group (what the executor signals) is left by `setsid`/`setpgid`,
//! and a parent-death signal reaches only the direct child. The environment is inherited
//! through `fork`, `setsid`, a double fork and `exec`, so scanning `/proc/*/environ` of this
//! user's processes finds every descendant of a task however it detached — except one that
//! clears or rewrites its environment before `exec` (`env -i`), or one this user cannot read
//! (setuid). Those escape; the sandbox (`bwrap --unshare-pid --die-with-parent`) still
//! contains them under `--sandbox`.
//!
//! - Each execution gets its own marker ([`new_marker`]): at the task's end [`sweep`] kills
//!   what carries it (`process` does this after the group kill, and names the leftovers in
//!   the task's log).
//! - A look for one execution's processes passes over those older than its start ([`Since`])
//!   without reading their environment.
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Since {
    /// The kernel's wall clock and the boot clock at the start, in nanoseconds; `None` when
    /// either could not be read (scans then pass over nothing).
    clocks: Option<(i128, i128)>,
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
        Self { clocks: clocks() }
    }

    /// A start no process is older than: every scan reads every process.
    pub const ANY: Self = Self { clocks: None };

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
/// executor's kernel time.
pub fn find(select: Select<'_>) -> Vec<Member> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let Ok(proc_fd) = std::fs::File::open("/proc") else { return Vec::new() };
    let me = std::process::id();
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let key = format!("{MARKER_VAR}=");
    let older_than = match select {
        Select::Task(_, since) => since.older_than(),
        Select::Run(_) => None,
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            (pid != me).then_some(pid)
        })
        .filter(|&pid| older_than.is_none_or(|t| !older(&proc_fd, pid, t)))
        .filter(|&pid| {
            read_environ(&proc_fd, pid, uid).is_some_and(|env| {
                env.split(|&b| b == 0)
                    .filter_map(|var| var.strip_prefix(key.as_bytes()))
                    .flat_map(|value| value.split(|&b| b == b':'))
                    .any(|marker| select.matches(marker))
            })
        })
        .filter_map(|pid| {
            let comm = read_at(&proc_fd, pid, "comm", None).unwrap_or_default();
            let comm = OsStr::from_bytes(comm.trim_ascii_end()).to_string_lossy().into_owned();
            Some(Member { pid: i32::try_from(pid).ok()?, comm })
        })
        .collect()
}

/// `/proc/<pid>/<name>` read through the open `/proc`; `None` when it is gone, or when `uid`
/// is given and does not own it (checked on the open file, before anything is read).
fn read_at(proc_fd: &std::fs::File, pid: u32, name: &str, uid: Option<u32>) -> Option<Vec<u8>> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use std::io::Read as _;
    let path = format!("{pid}/{name}");
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let mut file = std::fs::File::from(openat(proc_fd, path.as_str(), flags, Mode::empty()).ok()?);
    if let Some(uid) = uid
        && file.metadata().ok()?.uid() != uid
    {
        return None;
    }
    let mut out = Vec::new();
    file.read_to_end(&mut out).ok()?;
    Some(out)
}

/// A process's environment block, if it is `uid`'s. It reads empty for a zombie — and,
/// briefly, for a process in the middle of `execve` (its memory is being replaced): that
/// one is read again until it is not, so a member caught exec'ing is not missed. `None`:
/// gone, or not ours.
fn read_environ(proc_fd: &std::fs::File, pid: u32, uid: u32) -> Option<Vec<u8>> {
    const EXEC_RETRIES: usize = 100;
    for _ in 0..EXEC_RETRIES {
        let env = read_at(proc_fd, pid, "environ", Some(uid))?;
        if !env.is_empty() {
            return Some(env);
        }
        let stat = read_at(proc_fd, pid, "stat", None)?;
        // `pid (comm) S …`: the state follows the last `)`.
        let rest = stat.get(stat.iter().rposition(|&b| b == b')')? + 2..)?;
        let mut fields = rest.split(|&b| b == b' ');
        let state = fields.next()?.first()?;
        let ppid = fields.next()?;
        // A zombie has none left; a kernel thread (a child of kthreadd, pid 2) never had one.
        if matches!(state, b'Z' | b'X' | b'x') || ppid == b"2" || ppid == b"0" {
            return None;
        }
        std::thread::yield_now();
    }
    None
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
        let later = Since { clocks: Some((wall + ten, boot + ten)) };
        let pids = |since| -> Vec<i32> {
            find(Select::Task(&marker, since)).iter().map(|m| m.pid).collect()
        };
        let none: Vec<i32> = Vec::new();
        assert_eq!(pids(later), none, "older than the start: passed over");
        assert_eq!(pids(Since::ANY), [pid]);
        // The same start, but the wall clock has stepped by ten seconds against the boot
        // clock since (or the boot clock read then was faked).
        let stepped = Since { clocks: Some((wall + ten, boot)) };
        assert_eq!(pids(stepped), [pid], "a stepped clock passes over nothing");
        // Within the slack of the start, it is read.
        let just_after = Since { clocks: Some((wall + ten / 10, boot + ten / 10)) };
        assert_eq!(pids(just_after), [pid]);
        let _ = old.kill();
        let _ = old.wait();
    }

    #[test]
    fn the_notice_counts_and_names() {
        let one = [Member { pid: 7, comm: "sleep".into() }];
        let text = String::from_utf8(leak_notice(&one)).unwrap();
        assert!(text.contains("left 1 process running after it exited (sleep 7); killed it"));
    }
}
