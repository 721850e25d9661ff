//! Exec roots on a tmpfs (`/dev/shm`): where a root goes when the work dir's file system
//! would cost more than the task, or cannot give a perturbation.
//!
//! - A determinism re-run's root ([`RERUN_ROOTS`]) goes there to list its directories in
//!   creation order (`crate::perturb::plan_root`), its inputs made in a shuffled order.
//! - A first execution's root ([`ROOTS`]) goes there when the tmpfs has room to spare
//!   (`crate::rootprep`, `WorkerContext::tmpfs_roots`, [`TmpfsRoots`]): a proof's roots hold
//!   thousands of small files (upstream artifacts unpacked, sources copied, stand-ins), made
//!   and removed within seconds, and ext4 spends longer finding inodes for them among the
//!   ones just freed (`recently_deleted`) than `tsc` spends building — a third of a
//!   `--verify=all` run's time on lerna-lite; on a farm of trivial tasks the work dirs'
//!   ext4 spent a tenth of all the farm's time making and removing roots.
//!
//! `/dev/shm` is shared by every user of the machine: each user has a directory of its own
//! there ([`owner_dir`]), private (`0700`, never a link: [`owner_root_in`]) since the roots
//! hold copies of the workspace's inputs, and under it each worker a directory named by its
//! work dir's hash ([`worker_dir`]), so a worker starting again finds what a killed one left
//! (`crate::health::clean_exec_roots`).
//!
//! A farm worker's first executions' roots go on a tmpfs too ([`TmpfsRoots`], `prova worker
//! --exec-roots`): `/dev/shm` by default, while it has room. A task that ran the tmpfs short
//! is handed back, not failed (its writes met `ENOSPC` there, not a fault of its own), and
//! from then on the worker's roots stay in its work dir, which its disk floor watches: a
//! retry placed on the same worker runs there.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::health::{DiskFloor, DiskHealth};

/// First executions' roots: the work dir's `roots/`, or its twin on a tmpfs.
pub const ROOTS: &str = "roots";

/// Determinism re-runs' roots: the work dir's `rerun-roots/`, or its twin on a tmpfs.
pub const RERUN_ROOTS: &str = "rerun-roots";

/// Both kinds, for the clean-up.
pub const KINDS: [&str; 2] = [ROOTS, RERUN_ROOTS];

/// A first execution's root goes on a tmpfs only when it keeps this much free beside its
/// inputs (besides [`FIRST_ROOT_FACTOR`] times their size): its outputs, which nobody can
/// size beforehand, must fit too, and a full tmpfs is memory the machine no longer has.
pub const FIRST_ROOT_HEADROOM: u64 = 512 << 20;

/// How many times its inputs' size a first execution's root wants free on a tmpfs.
pub const FIRST_ROOT_FACTOR: u64 = 8;

/// `/dev/shm` when it is a tmpfs (which lists directories in creation order), executable,
/// writable, with more than `need` bytes free, and this user's directory there is private
/// ([`owner_root_in`]).
pub fn tmpfs_with_room(need: u64) -> Option<PathBuf> {
    let shm = tmpfs_at(Path::new("/dev/shm"), need)?;
    owner_root_in(&shm).map(|_| shm)
}

/// [`tmpfs_with_room`] for the mount at `shm`.
#[allow(clippy::unnecessary_cast)] // the statfs field widths differ between targets
fn tmpfs_at(shm: &Path, need: u64) -> Option<PathBuf> {
    let c = CString::new(shm.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: valid path, zeroed out-structs written by the kernel.
    let (fs, vfs) = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        let mut vfs: libc::statvfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut fs) != 0 || libc::statvfs(c.as_ptr(), &mut vfs) != 0 {
            return None;
        }
        (fs, vfs)
    };
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let free = (vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64);
    let usable = fs.f_type as i64 == TMPFS_MAGIC
        && vfs.f_flag & (libc::ST_NOEXEC | libc::ST_RDONLY) == 0
        && free > need;
    usable.then(|| shm.to_owned())
}

/// A worker's tmpfs for its first executions' roots: used while it has room for a root
/// ([`Self::parent`]), given up for good once a task ran it short ([`Self::give_up`]).
#[derive(Debug)]
pub struct TmpfsRoots {
    /// The tmpfs (`/dev/shm`, or the directory `--exec-roots` names).
    fs: PathBuf,
    /// Free bytes a root wants beside [`FIRST_ROOT_FACTOR`] times its inputs.
    headroom: u64,
    /// The tmpfs against the worker's disk floor (a task ran it short when it dipped below).
    health: Arc<DiskHealth>,
    /// A task ran it short: roots go to the work dir from now on.
    given_up: AtomicBool,
}

impl TmpfsRoots {
    /// The tmpfs at `fs`, a root wanting `headroom` bytes free beside its inputs' share,
    /// measured against `floor`; `None` when `fs` is no writable, executable tmpfs or this
    /// user's directory there cannot be private ([`owner_root_in`]).
    pub fn at(fs: &Path, headroom: u64, floor: DiskFloor) -> Option<Arc<Self>> {
        // Canonical, as this user's directory there is: a root's path and the directory its
        // removal prunes up to must agree.
        let fs = tmpfs_at(&fs.canonicalize().ok()?, 0)?;
        owner_root_in(&fs)?;
        let health = Arc::new(DiskHealth::unlogged(&fs, floor));
        Some(Arc::new(Self { fs, headroom, health, given_up: AtomicBool::new(false) }))
    }

    /// `/dev/shm`, a root wanting [`FIRST_ROOT_HEADROOM`] free beside its inputs' share
    /// (see [`Self::at`]).
    pub fn dev_shm(floor: DiskFloor) -> Option<Arc<Self>> {
        Self::at(Path::new("/dev/shm"), FIRST_ROOT_HEADROOM, floor)
    }

    /// The tmpfs's directory.
    pub fn fs(&self) -> &Path {
        &self.fs
    }

    /// Where a first execution's root goes, for inputs of `bytes`: on the tmpfs when it has
    /// room to spare ([`FIRST_ROOT_FACTOR`] times them, and the headroom) and no task ran it
    /// short yet, else `work_dir/roots`.
    pub fn parent(&self, work_dir: &Path, bytes: u64) -> PathBuf {
        let need = bytes.saturating_mul(FIRST_ROOT_FACTOR).saturating_add(self.headroom);
        if !self.given_up.load(Ordering::Acquire) && tmpfs_at(&self.fs, need).is_some() {
            roots_dir(&self.fs, work_dir, ROOTS)
        } else {
            work_dir.join(ROOTS)
        }
    }

    /// Whether `path` lies on this tmpfs.
    pub fn holds(&self, path: &Path) -> bool {
        path.starts_with(&self.fs)
    }

    /// This user's directory on the tmpfs: a root there prunes the empty directories up to
    /// it when it goes.
    pub fn owner_root(&self) -> Option<PathBuf> {
        owner_root_in(&self.fs)
    }

    /// The tmpfs measured against the worker's disk floor.
    pub fn health(&self) -> &Arc<DiskHealth> {
        &self.health
    }

    /// A task ran the tmpfs short (`why`): every later root goes to the work dir, so the
    /// task's retry, placed here or elsewhere, does not meet the same wall. Logged once.
    pub fn give_up(&self, why: &str) {
        if !self.given_up.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                fs = %self.fs.display(),
                "a task ran the tmpfs of exec roots short ({why}): roots go to the work dir from now on"
            );
        }
    }

    /// Whether a task ran it short.
    pub fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }
}

/// The directory under `fs` (a tmpfs) holding the `kind` roots ([`ROOTS`], [`RERUN_ROOTS`])
/// of the worker whose work dir is `work_dir`: this user's directory, then the work dir's
/// [`worker_dir`].
pub fn roots_dir(fs: &Path, work_dir: &Path, kind: &str) -> PathBuf {
    fs.join(owner_dir()).join(worker_dir(work_dir)).join(kind)
}

/// The name of the worker whose work dir is `work_dir` under this user's directory: 16 hex
/// digits of the path's BLAKE3. One component, not the work dir's path spelled out: a
/// sandbox's bubblewrap resolves every component of every path it mounts, one `readlink`
/// and one `stat` each, and under strace each is a stop (the roots of a workspace five
/// levels deep cost a traced execution about 10 ms more).
pub fn worker_dir(work_dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    blake3::hash(work_dir.as_os_str().as_bytes()).to_hex()[..16].to_owned()
}

/// This user's directory on `/dev/shm` ([`owner_root_in`]). A root under it prunes the empty
/// directories between it and here when it goes (`execroot::ExecRootSpec::prune_to`).
pub fn owner_root() -> Option<PathBuf> {
    owner_root_in(Path::new("/dev/shm"))
}

/// This user's directory on the shared tmpfs `fs` ([`owner_dir`]), canonical: made `0700` if
/// missing, and `None` unless it is then a real directory (not a link) this user owns. A
/// looser mode (another umask made it) is tightened: the roots below hold copies of the
/// workspace's inputs, which no other user of the machine may read.
pub fn owner_root_in(fs: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let dir = fs.join(owner_dir());
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid {
        tracing::warn!(dir = %dir.display(), "not a directory of this user's: no roots there");
        return None;
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).ok()?;
    }
    dir.canonicalize().ok()
}

/// `prova-roots-<uid>`: this user's directory on a shared tmpfs.
pub fn owner_dir() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    format!("prova-roots-{uid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_root_has_its_own_directory_under_this_users() {
        let work = Path::new("/w/ws/.prova/worker");
        let first = roots_dir(Path::new("/dev/shm"), work, ROOTS);
        let rerun = roots_dir(Path::new("/dev/shm"), work, RERUN_ROOTS);
        let mine = Path::new("/dev/shm").join(owner_dir()).join(worker_dir(work));
        assert_eq!(first, mine.join("roots"));
        assert_eq!(rerun, mine.join("rerun-roots"));
        assert_eq!(worker_dir(work).len(), 16);
        assert_ne!(worker_dir(work), worker_dir(Path::new("/w/other/.prova/worker")));
    }

    #[test]
    fn only_a_writable_executable_tmpfs_with_room_qualifies() {
        let Some(shm) = tmpfs_at(Path::new("/dev/shm"), 0) else {
            eprintln!("skipping: /dev/shm is no writable, executable tmpfs here");
            return;
        };
        assert_eq!(shm, Path::new("/dev/shm"));
        assert_eq!(tmpfs_at(Path::new("/dev/shm"), u64::MAX), None, "no room for that");
        assert_eq!(tmpfs_at(Path::new("/proc"), 0), None, "not a tmpfs");
        assert_eq!(tmpfs_at(Path::new("/dev/shm/prova-no-such-dir"), 0), None);
    }

    /// A tmpfs named through a link or with `.`/`..` components is taken by its canonical
    /// path, which this user's directory there has too: roots made under it are pruned up
    /// to that directory when they go.
    #[test]
    fn a_tmpfs_is_taken_by_its_canonical_path_however_it_is_named() {
        let Some(shm) = tmpfs_at(Path::new("/dev/shm"), 0) else {
            eprintln!("skipping: /dev/shm is no writable, executable tmpfs here");
            return;
        };
        let links = tempfile::tempdir().expect("a directory for a link");
        let link = links.path().join("fast");
        std::os::unix::fs::symlink(&shm, &link).expect("a link to /dev/shm");
        let work = Path::new("/w/ws/.prova/worker");
        for named in [link, PathBuf::from("/dev/./shm/../shm")] {
            let t = TmpfsRoots::at(&named, 0, DiskFloor::bytes(0)).expect("a tmpfs");
            assert_eq!(t.fs(), shm, "{}", named.display());
            let owner = t.owner_root().expect("this user's directory");
            let parent = t.parent(work, 0);
            assert!(parent.starts_with(&owner) && t.holds(&parent), "{}", parent.display());
        }
    }

    #[test]
    fn this_users_directory_is_private_and_never_a_link() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).expect("there").permissions().mode() & 0o777;
        let fs = tempfile::tempdir().expect("a stand-in for /dev/shm");
        let mine = owner_root_in(fs.path()).expect("made");
        assert_eq!(mode(&mine), 0o700);
        // Made by another umask: tightened.
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(owner_root_in(fs.path()), Some(mine.clone()));
        assert_eq!(mode(&mine), 0o700);
        // A link planted under the name (another user's, on a shared tmpfs): refused.
        let planted = tempfile::tempdir().expect("another");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::os::unix::fs::symlink(elsewhere.path(), planted.path().join(owner_dir()))
            .expect("a link");
        assert_eq!(owner_root_in(planted.path()), None);
        assert_eq!(mode(elsewhere.path()), 0o755, "its target untouched");
        // A real directory under the name that another user made first: refused too.
        if nix::unistd::geteuid().is_root() {
            let taken = tempfile::tempdir().expect("a third");
            let theirs = taken.path().join(owner_dir());
            std::fs::create_dir(&theirs).expect("their directory");
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
            assert_eq!(owner_root_in(taken.path()), None, "another user's directory");
        }
    }

    #[test]
    fn a_first_root_wants_room_for_its_outputs_too_and_none_once_given_up() {
        let work = Path::new("/w/ws/.prova/worker");
        let Some(t) = TmpfsRoots::at(Path::new("/dev/shm"), 1 << 20, DiskFloor::bytes(0)) else {
            eprintln!("skipping: /dev/shm is no writable, executable tmpfs here");
            return;
        };
        // More than any tmpfs has: the work dir.
        assert_eq!(t.parent(work, u64::MAX / 2), work.join(ROOTS));
        let on_tmpfs = t.parent(work, 0);
        assert_eq!(on_tmpfs, roots_dir(Path::new("/dev/shm"), work, ROOTS));
        assert!(t.holds(&on_tmpfs) && !t.holds(&work.join(ROOTS)));
        assert!(!t.given_up());
        t.give_up("1.0 MiB free, floor 2.0 MiB");
        assert!(t.given_up());
        assert_eq!(t.parent(work, 0), work.join(ROOTS), "roots stay in the work dir now");
        // Not a tmpfs: none.
        let dir = tempfile::tempdir().expect("a directory");
        if tmpfs_at(dir.path(), 0).is_none() {
            assert!(TmpfsRoots::at(dir.path(), 0, DiskFloor::bytes(0)).is_none());
        }
    }
}
