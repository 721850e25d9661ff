//! The `prova run` children of a watch: one per cycle, one per long-lived persistent task.
//!
//! A child is this same executable (`std::env::current_exe`), stdin closed, stdout and stderr
//! shared with the watch. It stays in the watch's process group, so a terminal's Ctrl-C and a
//! kill of the group reach it as they reach the watch; the watch stops one on its own with
//! SIGINT — a `prova run` interrupt: its tasks get SIGTERM, a grace, then SIGKILL, and its
//! guardian sweeps what they left — and, should it outlive [`STOP_GRACE`], SIGKILL (the
//! guardian still sweeps). Nothing here spawns raw: the waiting happens in an
//! [`OwnedTask`], so a dropped child is killed.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use prova_protocol::task::OwnedTask;
use tokio::sync::{mpsc, oneshot};

/// How long a stopped child may take to end its tasks before it is SIGKILLed: longer than a
/// task's own kill grace (5 s), with room for a loaded machine.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// Who a child is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Role {
    /// A cycle's run of the selection.
    Cycle,
    /// A long-lived persistent task (by id).
    Server(prova_protocol::TaskId),
}

/// A child that ended by itself.
#[derive(Debug)]
pub(super) struct Exited {
    /// Which.
    pub role: Role,
    /// How (an error: it could not be waited for).
    pub status: std::io::Result<ExitStatus>,
    /// Its start number ([`Child::start`]), to tell a restarted child from the one before.
    pub serial: u64,
}

/// A running child.
pub(super) struct Child {
    /// Its start number.
    pub serial: u64,
    stop: Option<oneshot::Sender<()>>,
    task: OwnedTask<Option<std::io::Result<ExitStatus>>>,
}

impl Child {
    /// Starts `exe args…`; its natural end is reported on `exits` (a stopped child's is
    /// returned by [`Child::stop`] instead).
    pub(super) fn start(
        exe: &std::path::Path,
        args: &[String],
        role: Role,
        serial: u64,
        exits: mpsc::Sender<Exited>,
    ) -> std::io::Result<Self> {
        let mut child = tokio::process::Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let task = OwnedTask::spawn("watch.child", async move {
            tokio::select! {
                status = child.wait() => {
                    let _ = exits.send(Exited { role, status, serial }).await;
                    None
                }
                _ = stop_rx => {
                    if let Some(pid) = pid {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGINT,
                        );
                    }
                    match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                        Ok(status) => Some(status),
                        Err(_) => {
                            tracing::warn!("watch: a child run outlived its stop grace; killing it");
                            let _ = child.start_kill();
                            Some(child.wait().await)
                        }
                    }
                }
            }
        });
        Ok(Self { serial, stop: Some(stop_tx), task })
    }

    /// Interrupts the child and waits for it to end (SIGKILL after [`STOP_GRACE`]). `None`
    /// when it had ended by itself already (its end went to `exits`).
    pub(super) async fn stop(mut self) -> Option<std::io::Result<ExitStatus>> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.join().await.ok().flatten()
    }
}
