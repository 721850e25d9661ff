//! Is a process still there? Checked with `kill(pid, 0)` and `/proc/<pid>/stat`, because a
//! zombie (killed, not yet reaped — forever, under a PID 1 that does not reap) still answers
//! `kill(pid, 0)` but is not running anything.

use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// Interval between two looks at `/proc` while waiting for processes to go.
const POLL: Duration = Duration::from_millis(20);

/// The state letter and process group of `pid`, from `/proc/<pid>/stat`; `None` when there is
/// no such process.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

fn is_dead_state(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// Whether `pid` is a live (non-zombie) process.
pub fn is_alive(pid: i32) -> bool {
    match kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => false,
        // EPERM: it exists but is not ours; still alive.
        _ => stat(pid).is_some_and(|(state, _)| !is_dead_state(state)),
    }
}

/// The live (non-zombie) processes whose process group is `pgid`.
pub fn alive_in_group(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(s, g)| g == pgid && !is_dead_state(s)))
        .collect()
}

/// The live processes whose working directory is `dir` or below it: what a task started
/// there, even when nothing recorded its pid. Processes whose cwd cannot be read (another
/// user's, or gone) are left out.
pub fn alive_under(dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
                && is_alive(pid)
        })
        .collect()
}

/// Waits until no live process has its working directory under `dir`; on timeout returns
/// them.
pub fn wait_none_under(dir: &Path, timeout: Duration) -> Result<(), Vec<i32>> {
    wait_until_empty(timeout, || alive_under(dir))
}

/// Waits until none of `pids` is alive; on timeout returns the ones still alive.
pub fn wait_all_gone(pids: &[i32], timeout: Duration) -> Result<(), Vec<i32>> {
    wait_until_empty(timeout, || pids.iter().copied().filter(|&p| is_alive(p)).collect())
}

/// Waits until process group `pgid` has no live member; on timeout returns the members.
pub fn wait_group_empty(pgid: i32, timeout: Duration) -> Result<(), Vec<i32>> {
    wait_until_empty(timeout, || alive_in_group(pgid))
}

fn wait_until_empty(timeout: Duration, mut look: impl FnMut() -> Vec<i32>) -> Result<(), Vec<i32>> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = look();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(left);
        }
        std::thread::sleep(POLL);
    }
}

/// The pids in a file tasks append `echo $$ >> file` lines to.
pub fn read_pids(path: &Path) -> Vec<i32> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading pids from {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse().unwrap_or_else(|e| panic!("bad pid line {l:?}: {e}")))
        .collect()
}

/// A pid no process has: a child that has exited and been reaped (what a process killed
/// outright leaves its pid-named files under).
pub fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("reaped");
    pid
}

/// Whether `/proc/locks` shows `pid` blocked waiting for a lock (a `->` line).
pub fn blocked_on_a_lock(pid: i32) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&"->") && f.get(5) == Some(&pid.to_string().as_str())
    })
}
