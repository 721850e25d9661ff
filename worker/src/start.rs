//! A farm worker's start-up: from resolved [`WorkerSettings`] to a running worker — the work
//! directory and blob cache, the [`WorkerActor`], and its [`session`] with the coordinator.
//! The binary (`prova worker`) only parses flags and its config file into the settings
//! (`cli/src/commands/daemons.rs`); the in-process test farm starts workers the same way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kameo::prelude::*;
use prova_protocol::transport::{Bundle, Role};
use prova_protocol::wire::WorkerInfo;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::actor::{WorkerActor, WorkerActorArgs};
use crate::blobcache::{BlobCache, BlobCacheError};
use crate::exec::LocalExecutor;
use crate::health::{DiskFloor, DiskHealth};
use crate::runner::{RunnerConfig, WorkerContext};
use crate::sandbox;
use crate::session::{self, SessionError};
use crate::shmroots::TmpfsRoots;
use crate::treecopies::TreeCopies;

/// Reports queued from the worker actor to its session.
const REPORT_QUEUE: usize = 256;

/// Why a worker could not start, or stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `--sandbox=bwrap` on a host where bubblewrap cannot run.
    #[error(
        "bubblewrap cannot run here ({reason}); install it (apt-get install bubblewrap) or start the worker with --sandbox=none"
    )]
    NoBubblewrap {
        /// Why it cannot.
        reason: String,
    },
    /// An unknown `--sandbox` mode.
    #[error("--sandbox {0}: use `bwrap` or `none`")]
    SandboxMode(String),
    /// The bundle is not a worker's.
    #[error("{dir} holds a {role} certificate; a worker needs a worker bundle")]
    NotAWorkerBundle {
        /// The bundle's directory.
        dir: String,
        /// Its role.
        role: Role,
    },
    /// The work directory cannot be made or resolved.
    #[error("cannot {what} {dir}: {cause}")]
    WorkDir {
        /// "create" or "resolve".
        what: &'static str,
        /// The directory.
        dir: String,
        /// Why.
        cause: std::io::Error,
    },
    /// The blob cache does not open.
    #[error("cannot open the blob cache in {dir}: {cause}")]
    BlobCache {
        /// The work directory.
        dir: String,
        /// Why.
        cause: BlobCacheError,
    },
    /// `--exec-roots DIR` names no writable, executable tmpfs.
    #[error(
        "--exec-roots {dir}: not a writable, executable tmpfs (use `auto` for /dev/shm while it has room, or `work-dir`)"
    )]
    ExecRoots {
        /// The directory.
        dir: String,
    },
    /// The `joining` line could not be written.
    #[error(transparent)]
    Announce(std::io::Error),
    /// The coordinator refused this worker.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// `--sandbox MODE` (`bwrap` or `none`): whether tasks run under bubblewrap, and how
/// `farm status` describes it. `bwrap` on a host where it cannot run is an error, not a
/// silent downgrade.
pub fn sandbox_mode(mode: &str) -> Result<(bool, String), StartError> {
    match mode {
        "bwrap" => match sandbox::detect() {
            sandbox::SandboxStatus::Bwrap { version } => Ok((true, format!("bwrap {version}"))),
            sandbox::SandboxStatus::Unavailable { reason } => {
                Err(StartError::NoBubblewrap { reason })
            }
        },
        "none" => Ok((false, "none".to_owned())),
        other => Err(StartError::SandboxMode(other.to_owned())),
    }
}

/// Refuses a bundle (loaded from `dir`) that is not a worker's.
pub fn check_bundle(bundle: &Bundle, dir: &std::path::Path) -> Result<(), StartError> {
    if bundle.identity.role != Role::Worker {
        return Err(StartError::NotAWorkerBundle {
            dir: dir.display().to_string(),
            role: bundle.identity.role,
        });
    }
    Ok(())
}

/// A worker's resolved settings.
pub struct WorkerSettings {
    /// The coordinator's address.
    pub join: SocketAddr,
    /// The name its certificate carries.
    pub server_name: String,
    /// Its certificate bundle (role `worker`).
    pub bundle: Bundle,
    /// Tasks at once.
    pub slots: u32,
    /// Exec roots, traces and the blob cache.
    pub work_dir: PathBuf,
    /// Placement labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The blob cache bound in bytes.
    pub blob_cache_size: u64,
    /// Run tasks under bubblewrap.
    pub sandbox: bool,
    /// How `farm status` describes its sandbox.
    pub sandbox_desc: String,
    /// Free bytes the work dir must keep (`--min-free-disk`): below, the worker takes no work.
    pub min_free_disk: u64,
    /// Where first executions' exec roots go (`--exec-roots`).
    pub exec_roots: ExecRoots,
}

/// Where a farm worker makes its first executions' exec roots (`prova worker --exec-roots`).
/// A re-run's root goes on `/dev/shm` whenever it has room, whatever this says: it needs a
/// tmpfs for its perturbed file order (`crate::perturb`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ExecRoots {
    /// On `/dev/shm` while it has room for the task's inputs eight times over and 512 MiB
    /// more, and no task ran it short; in the work dir otherwise.
    #[default]
    Auto,
    /// Always in the work dir.
    WorkDir,
    /// On the tmpfs at this directory while it has room for the task's inputs eight times
    /// over and the disk floor more, and no task ran it short; in the work dir otherwise.
    Tmpfs(PathBuf),
}

impl ExecRoots {
    /// The tmpfs this asks for, measured against `floor`; `Err` when an explicit directory
    /// is no tmpfs the worker can use (`Auto` without a usable `/dev/shm` is the work dir).
    fn tmpfs(&self, floor: DiskFloor) -> Result<Option<Arc<TmpfsRoots>>, StartError> {
        match self {
            Self::Auto => Ok(TmpfsRoots::dev_shm(floor)),
            Self::WorkDir => Ok(None),
            Self::Tmpfs(dir) => TmpfsRoots::at(dir, floor.bytes, floor)
                .map(Some)
                .ok_or_else(|| StartError::ExecRoots { dir: dir.display().to_string() }),
        }
    }
}

/// Runs a worker until `shutdown` (or until the coordinator refuses it): its actor and its
/// session with the coordinator. `announce` gets the `prova worker NAME joining …` line.
pub async fn run_worker(
    s: WorkerSettings,
    shutdown: CancellationToken,
    announce: impl FnOnce(&str) -> std::io::Result<()>,
) -> Result<(), StartError> {
    let name = s.bundle.identity.name.clone();
    let work_dir = &s.work_dir;
    let dir = || work_dir.display().to_string();
    std::fs::create_dir_all(work_dir).map_err(|cause| StartError::WorkDir {
        what: "create",
        dir: dir(),
        cause,
    })?;
    // Absolute from here on: sandboxes and tracers run in other directories.
    let work_dir = std::fs::canonicalize(work_dir).map_err(|cause| StartError::WorkDir {
        what: "resolve",
        dir: dir(),
        cause,
    })?;
    crate::health::clean_staging(&work_dir);
    let blobs = BlobCache::open(&work_dir.join("blobs"), s.blob_cache_size)
        .map_err(|cause| StartError::BlobCache { dir: work_dir.display().to_string(), cause })?;
    // The blob cache's lock is held: no other worker runs tasks in this work dir, so what its
    // per-task directories hold was left by a worker that died mid-task.
    let floor = DiskFloor::bytes(s.min_free_disk);
    let tmpfs_roots = s.exec_roots.tmpfs(floor)?;
    crate::health::clean_exec_roots(&work_dir, tmpfs_roots.as_ref().map(|t| t.fs()));
    if let Some(t) = &tmpfs_roots {
        tracing::info!(fs = %t.fs().display(), "exec roots on a tmpfs while it has room");
    }
    let disk = Arc::new(DiskHealth::new(&work_dir, floor));
    if let Some(why) = disk.check() {
        // It joins all the same (and says so, above): work resumes once space returns.
        let (n, bytes) = blobs.evict_unpinned();
        tracing::warn!(blobs = n, bytes, "starting short of disk ({why}); evicted the blob cache");
    }
    let (remote, conn_tx) = session::blobs();
    let (link, reports) = mpsc::channel(REPORT_QUEUE);
    // Copies a predecessor left may have changed unwatched: removed here.
    let tree_copies = (!s.sandbox).then(|| Arc::new(TreeCopies::new(&work_dir)));
    let context = WorkerContext {
        executor: Arc::new(LocalExecutor),
        config: RunnerConfig::from_host(),
        work_dir,
        blobs: Some(blobs),
        remote: Some(Arc::new(remote)),
        sandbox: s.sandbox,
        strace: sandbox::strace_available(s.sandbox),
        disk: Some(disk),
        sandbox_hidden: Vec::new(),
        tmpfs_roots,
        tree_copies,
    };
    let worker = WorkerActor::spawn(WorkerActorArgs { context, slots: s.slots as usize, link });
    let info = WorkerInfo {
        slots: s.slots,
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        labels: s.labels,
        sandbox: s.sandbox_desc.clone(),
        running: Vec::new(),
        health: None,
    };
    announce(&format!(
        "prova worker {name} joining {} ({} slots, sandbox {})\n",
        s.join, s.slots, s.sandbox_desc
    ))
    .map_err(StartError::Announce)?;
    let cfg = session::SessionConfig {
        addr: s.join,
        server_name: s.server_name,
        bundle: Arc::new(s.bundle),
        info,
    };
    let r = session::run(cfg, worker.clone(), reports, conn_tx, shutdown).await;
    worker.kill();
    Ok(r?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_sandbox_mode_is_refused_by_name() {
        let e = sandbox_mode("docker").unwrap_err();
        assert_eq!(e.to_string(), "--sandbox docker: use `bwrap` or `none`");
        assert_eq!(sandbox_mode("none").unwrap(), (false, "none".to_owned()));
    }
}
