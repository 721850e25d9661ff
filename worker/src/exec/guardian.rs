//! The guardian: a small process that outlives prova just long enough to kill what prova's
//! tasks left running when prova itself dies — SIGKILL, a crash, the OOM killer.
//!
//! A task's direct child dies with prova (`PR_SET_PDEATHSIG`), but its descendants do not,
//! and the executor's own end-of-task kill (`process`, `tree::sweep`) never runs when prova
//! is SIGKILLed. So, once per process, before the first task starts, the spawner starts
//! `/proc/self/exe __prova-guardian <nonce>` (the same binary, see [`serve_if_asked`]) with
//! the read end of a pipe as its stdin and its stdout/stderr on `/dev/null`. prova keeps the
//! write end (close-on-exec: no task inherits it) and never writes to it. When prova dies, for
//! whatever reason, the kernel closes it; the guardian reads end-of-file, kills every process
//! carrying this prova's run nonce in its tree marker (`tree::Select::Run`), looking again
//! until none is left, and exits. The guardian leads its own process group, so a terminal's
//! Ctrl-C or a `kill -9 -PGID` of prova's group does not take it along.
//!
//! Only a binary that calls [`serve_if_asked`] first thing in `main` can be a guardian:
//! [`enable`] is how it says so. Without it (library tests, the in-process farm) no guardian
//! is started and only the end-of-task sweep applies.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::tree;

/// The hidden first argument that makes the binary a guardian.
pub const GUARDIAN_ARG: &str = "__prova-guardian";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// The running guardian: its stdin (the pipe whose close it waits for) is held here for the
/// life of the process.
static GUARDIAN: Mutex<Option<Child>> = Mutex::new(None);

/// Says this binary serves [`GUARDIAN_ARG`] (calls [`serve_if_asked`] in `main`), so the
/// executor may start a guardian before the first task.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Starts the guardian if [`enable`]d and not yet started. A failure is logged, not fatal:
/// tasks still run, and the end-of-task sweep still applies.
pub(crate) fn ensure_started() {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let mut slot = GUARDIAN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_some() {
        return;
    }
    let started = Command::new("/proc/self/exe")
        .arg(GUARDIAN_ARG)
        .arg(tree::run_nonce())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove(tree::MARKER_VAR)
        .process_group(0)
        .spawn();
    match started {
        Ok(child) => *slot = Some(child),
        Err(e) => tracing::warn!(
            error = %e,
            "could not start the guardian: processes tasks detach will outlive a killed prova"
        ),
    }
}

/// In `main`, before anything else: when the arguments are `GUARDIAN_ARG <nonce>`, be the
/// guardian (wait for stdin to close, sweep, return `Some(0)`); otherwise `None`.
pub fn serve_if_asked() -> Option<u8> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != GUARDIAN_ARG {
        return None;
    }
    let nonce = args.next()?.into_string().ok()?;
    if nonce.len() < 16 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(2);
    }
    // Block until prova is gone: nothing is ever written, so any return is its death (EOF)
    // or a broken stdin; sweep either way.
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(0) | Err(_) => break,
            Ok(_) => continue,
        }
    }
    tree::sweep(tree::Select::Run(&nonce));
    Some(0)
}
