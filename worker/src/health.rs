//! A farm worker's own health, as far as its work dir goes.
//! - **Staging files** (packed artifacts on their way to the coordinator,
//!   `artifact-<lease>.tar.zst`) that a worker killed mid-pack or mid-upload leaves behind are
//!   removed when the next one starts, so they never pile up across restarts. (A failed pack
//!   removes its own partial file: `outputs::collect`.) So are the exec roots, re-run
//!   `TMPDIR`s and traces a SIGKILLed worker left ([`clean_exec_roots`]), once the new one
//!   holds the work dir.
//! - **The disk floor** ([`DiskFloor`], `prova worker --min-free-disk`): free bytes and free
//!   inodes of the work dir's file system (`statvfs`, what an unprivileged writer may use).
//!   [`DiskHealth::check`] is asked at start-up and before each assignment is accepted; below
//!   the floor the worker hands the assignment back (`HandBack::NoDisk`: the coordinator
//!   requeues it elsewhere, free) and evicts its blob cache; a task that failed while the work
//!   dir was below the floor (an `ENOSPC` mid-write) is handed back the same way, not failed —
//!   below it at the end, or at any point while it ran ([`DiskHealth::watch`]: its own samples
//!   or any other measure taken meanwhile, such as another task's end) — and so is an
//!   exec root that could not be built, or outputs that could not be packed, for a full disk
//!   ([`is_disk_full`]). Crossing the floor either way is logged once. The worker reports its
//!   health ([`DiskHealth::report`]) when it registers and in every heartbeat: the
//!   coordinator offers no work to a worker below its floor, and `farm status` shows why.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prova_protocol::artifact::nofollow;
use prova_protocol::task::OwnedTask;
use prova_protocol::wire::WorkerHealth;

/// `--min-free-disk`'s default: below 256 MiB free a work dir cannot be trusted with a task's
/// inputs, outputs and packed archive.
pub const DEFAULT_MIN_FREE_DISK: u64 = 256 << 20;

/// Free inodes below which the work dir is short, whatever its bytes (exec roots are many
/// small files and hardlinks).
pub const MIN_FREE_INODES: u64 = 4096;

/// The least a work dir must have free for the worker to take work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskFloor {
    /// Free bytes.
    pub bytes: u64,
    /// Free inodes (ignored on file systems that report none at all).
    pub inodes: u64,
}

impl DiskFloor {
    /// `bytes` free and [`MIN_FREE_INODES`].
    pub fn bytes(bytes: u64) -> Self {
        Self { bytes, inodes: MIN_FREE_INODES }
    }

    /// What `free` lacks against this floor, in words; `None` when it is enough.
    pub fn shortfall(&self, free: Free) -> Option<String> {
        if free.bytes < self.bytes {
            return Some(format!(
                "{} free, floor {}",
                human_bytes(free.bytes),
                human_bytes(self.bytes)
            ));
        }
        if free.has_inodes && free.inodes < self.inodes {
            return Some(format!("{} inodes free, floor {}", free.inodes, self.inodes));
        }
        None
    }
}

/// What a file system has free for an unprivileged writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Free {
    /// Bytes.
    pub bytes: u64,
    /// Inodes.
    pub inodes: u64,
    /// Whether the file system counts inodes at all (some report zero in total).
    pub has_inodes: bool,
}

/// What the file system holding `dir` has free.
#[allow(clippy::useless_conversion)] // statvfs field widths differ between targets
pub fn free_of(dir: &Path) -> std::io::Result<Free> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let fragment = u64::from(st.fragment_size()).max(1);
    let (avail, files, favail) =
        (u64::from(st.blocks_available()), u64::from(st.files()), u64::from(st.files_available()));
    Ok(Free { bytes: avail.saturating_mul(fragment), inodes: favail, has_inodes: files > 0 })
}

/// `n` bytes in the largest binary unit that keeps a whole number in front.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut unit = "B";
    let mut value = n as f64;
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    if unit == "B" { format!("{n} B") } else { format!("{value:.1} {unit}") }
}

/// A worker's view of its work dir against its floor; shared by the actor and the runner.
#[derive(Debug)]
pub struct DiskHealth {
    dir: PathBuf,
    floor: DiskFloor,
    short: AtomicBool,
    /// Every measure that found the work dir short, whoever took it (a check before an
    /// assignment, a heartbeat, a task's end, a watch's sample), and the last one's words: a
    /// [`DiskWatch`] counts the dips seen while its task ran, not only its own samples.
    dips: AtomicU64,
    last_dip: Mutex<Option<String>>,
    /// The work dir's (its crossings of the floor logged); not a tmpfs of exec roots', whose
    /// owner says what a dip means (`crate::shmroots::TmpfsRoots`).
    logged: bool,
}

impl DiskHealth {
    /// Watches the work dir `dir` against `floor`.
    pub fn new(dir: &Path, floor: DiskFloor) -> Self {
        Self {
            dir: dir.to_owned(),
            floor,
            short: AtomicBool::new(false),
            dips: AtomicU64::new(0),
            last_dip: Mutex::new(None),
            logged: true,
        }
    }

    /// Watches `dir`, not the work dir, against `floor`, its crossings not logged.
    pub fn unlogged(dir: &Path, floor: DiskFloor) -> Self {
        Self { logged: false, ..Self::new(dir, floor) }
    }

    /// Notes a measure that found the work dir short (`why`).
    fn dipped_to(&self, why: &str) {
        if let Ok(mut g) = self.last_dip.lock() {
            *g = Some(why.to_owned());
        }
        self.dips.fetch_add(1, Ordering::AcqRel);
    }

    /// What the work dir lacks now, or `None` when it has enough (or cannot be measured: a
    /// `statvfs` failure is logged and does not stop work). Logs each crossing of the floor.
    pub fn check(&self) -> Option<String> {
        let why = match free_of(&self.dir) {
            Ok(free) => self.floor.shortfall(free),
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), "cannot measure free space: {e}");
                None
            }
        };
        if let Some(why) = &why {
            self.dipped_to(why);
        }
        let was = self.short.swap(why.is_some(), Ordering::Relaxed);
        if !self.logged {
            return why;
        }
        match (&why, was) {
            (Some(why), false) => tracing::warn!(
                dir = %self.dir.display(),
                "work dir short of disk ({why}): taking no work until space returns"
            ),
            (None, true) => tracing::info!(dir = %self.dir.display(), "work dir has room again"),
            _ => {}
        }
        why
    }
}

impl DiskHealth {
    /// The floor it measures against.
    pub fn floor(&self) -> DiskFloor {
        self.floor
    }

    /// What the worker says of itself in its registration and heartbeats: free bytes, the
    /// floor, and why it takes no work (`disk low: …`) when below it.
    pub fn report(&self) -> WorkerHealth {
        let free = free_of(&self.dir).ok();
        WorkerHealth {
            disk_free: free.map(|f| f.bytes),
            disk_floor: Some(self.floor.bytes),
            unfit: self.check().map(|why| format!("disk low: {why}")),
        }
    }

    /// Watches the work dir's free space while a task runs (every [`WATCH_EVERY`]), so a
    /// task whose writes met `ENOSPC` is known to have failed for want of disk even when it
    /// removed what it wrote before it exited — or when another task's end freed the space
    /// first: any measure's dip after the watch began is the task's too. Stops when dropped.
    pub fn watch(self: &Arc<Self>) -> DiskWatch {
        let since = self.dips.load(Ordering::Acquire);
        let low = Arc::new(Mutex::new(None::<Free>));
        let (me, l) = (self.clone(), low.clone());
        let task = OwnedTask::spawn("worker.disk-watch", async move {
            // The first sample a period in: the work dir was measured as the assignment was
            // accepted, and a task shorter than that is judged by the measure at its end.
            let first = tokio::time::Instant::now() + WATCH_EVERY;
            let mut every = tokio::time::interval_at(first, WATCH_EVERY);
            loop {
                every.tick().await;
                let dir = me.dir.clone();
                let Ok(Ok(free)) =
                    OwnedTask::spawn_blocking("worker.statvfs", move || free_of(&dir)).join().await
                else {
                    continue;
                };
                if let Some(why) = me.floor.shortfall(free) {
                    me.dipped_to(&why);
                }
                if let Ok(mut g) = l.lock() {
                    *g = Some(match *g {
                        Some(m) => Free {
                            bytes: m.bytes.min(free.bytes),
                            inodes: m.inodes.min(free.inodes),
                            has_inodes: m.has_inodes && free.has_inodes,
                        },
                        None => free,
                    });
                }
            }
        });
        DiskWatch { health: self.clone(), since, low, _task: task }
    }
}

/// How often a running task's work dir is measured ([`DiskHealth::watch`]).
pub const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The lowest free space seen while a task ran, and the dips any other measure saw meanwhile.
pub struct DiskWatch {
    health: Arc<DiskHealth>,
    /// [`DiskHealth::dips`] when the watch began.
    since: u64,
    low: Arc<Mutex<Option<Free>>>,
    _task: OwnedTask<()>,
}

impl DiskWatch {
    /// What the work dir lacked against the floor, if it went below it since the watch began:
    /// at its lowest in the watch's own samples, else as the last other measure saw it.
    pub fn dipped(&self) -> Option<String> {
        if let Some(why) = self.lowest().and_then(|low| self.health.floor.shortfall(low)) {
            return Some(why);
        }
        if self.health.dips.load(Ordering::Acquire) == self.since {
            return None;
        }
        self.health.last_dip.lock().ok().and_then(|g| g.clone())
    }

    /// The lowest free space seen so far (`None` before the first measure).
    pub fn lowest(&self) -> Option<Free> {
        self.low.lock().ok().and_then(|g| *g)
    }
}

/// Whether `e` (or an error it wraps) is a full disk or quota: `ENOSPC`, `EDQUOT`, or their
/// words in an error that was turned into text on the way.
pub fn is_disk_full(e: &(dyn std::error::Error + 'static)) -> bool {
    disk_full(e).is_some()
}

/// The words of the full disk or quota `e` met (`No space left on device`, `Disk quota
/// exceeded`), if it met one (see [`is_disk_full`]).
pub fn disk_full(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    const NOSPC: &str = "No space left on device";
    const QUOTA: &str = "Disk quota exceeded";
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            match io.raw_os_error() {
                Some(libc::ENOSPC) => return Some(NOSPC),
                Some(libc::EDQUOT) => return Some(QUOTA),
                _ => {}
            }
        }
        let text = err.to_string();
        if text.contains(NOSPC) {
            return Some(NOSPC);
        }
        if text.contains(QUOTA) {
            return Some(QUOTA);
        }
        cur = err.source();
    }
    None
}

/// The name of the staging file of `lease`'s artifact in the work dir.
pub fn staging_name(lease: impl std::fmt::Display) -> String {
    format!("{STAGING_PREFIX}{lease}{STAGING_SUFFIX}")
}

const STAGING_PREFIX: &str = "artifact-";
const STAGING_SUFFIX: &str = ".tar.zst";

/// Removes every staging file directly in `work_dir` (nothing else); how many were removed.
/// A file that cannot be removed is logged and left: start-up goes on.
pub fn clean_staging(work_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(work_dir) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let staged = name.starts_with(STAGING_PREFIX) && name.ends_with(STAGING_SUFFIX);
        if !staged || !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        match std::fs::remove_file(e.path()) {
            Ok(()) => removed += 1,
            Err(err) => tracing::warn!("cannot remove the stale staging file {name}: {err}"),
        }
    }
    if removed > 0 {
        tracing::info!(removed, "removed stale staging files from the work dir");
    }
    removed
}

/// The directories of a work dir whose entries live only as long as one assignment: exec
/// roots of first executions and of re-runs, re-runs' `TMPDIR`s, read traces — and those a
/// sandbox makes again whenever they are missing: the identity stand-ins (a re-run's name
/// each) and the prepared `/etc` copies (`crate::sandbox::etc`). A worker that was SIGKILLed
/// mid-task leaves its entries behind; nothing else of prova points into them.
pub const PER_TASK_DIRS: &[&str] =
    &["roots", "rerun-roots", "rerun-tmp", "traces", "identity", "etc"];

/// Removes what a killed worker left in [`PER_TASK_DIRS`] of `work_dir`, in its roots on
/// `/dev/shm` and on the tmpfs `--exec-roots` names (`tmpfs`; `crate::shmroots::roots_dir`),
/// and the libfaketime segments of gone workers (`crate::clockshm::sweep_abandoned`); how
/// many entries were removed.
///
/// Call it only while holding the work dir (the blob cache's lock, `BlobCache::open`): no
/// other worker process then runs a task there. Nothing is followed: each directory is
/// opened without following a symlink (a symlink in its place is removed, not its target),
/// and every tree is removed fd-relative ([`nofollow::DirFd`]). Entries that cannot be
/// removed are logged and left: start-up goes on.
pub fn clean_exec_roots(work_dir: &Path, tmpfs: Option<&Path>) -> usize {
    let mut removed = 0;
    match nofollow::DirFd::open_root(work_dir) {
        Ok(top) => {
            for name in PER_TASK_DIRS {
                removed += empty_dir(&top, OsStr::new(name), &work_dir.join(name));
            }
        }
        Err(e) => tracing::warn!(dir = %work_dir.display(), "cannot open the work dir: {e}"),
    }
    removed += clean_shm_roots(Path::new("/dev/shm"), work_dir);
    if let Some(fs) = tmpfs.filter(|fs| *fs != Path::new("/dev/shm")) {
        removed += clean_shm_roots(fs, work_dir);
    }
    removed += crate::clockshm::sweep_abandoned(Path::new("/dev/shm"));
    if removed > 0 {
        tracing::info!(removed, "removed exec roots a killed worker left behind");
    }
    removed
}

/// Removes every entry of the real directory `name` in `parent` (at `shown`); a symlink or
/// other non-directory there is removed itself. How many entries went.
fn empty_dir(parent: &nofollow::DirFd, name: &OsStr, shown: &Path) -> usize {
    let dir = match parent.open_dir(name) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) if nofollow::is_not_a_dir(&e) => {
            tracing::warn!(path = %shown.display(), "not a directory: removing it (not what it points at)");
            return usize::from(parent.unlink(name).is_ok());
        }
        Err(e) => {
            tracing::warn!(path = %shown.display(), "cannot open: {e}");
            return 0;
        }
    };
    let entries = match dir.entries() {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(path = %shown.display(), "cannot list: {e}");
            return 0;
        }
    };
    let mut removed = 0;
    for (child, _) in entries {
        match remove_tree_writable(&dir, &child) {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(
                path = %shown.join(&child).display(),
                "cannot remove a stale exec root: {e}"
            ),
        }
    }
    removed
}

/// [`nofollow::DirFd::remove_tree`], after making every directory in the tree writable (a
/// task may leave read-only directories among its outputs; a worker that is not root could
/// not empty them). Never follows a symlink.
fn remove_tree_writable(parent: &nofollow::DirFd, name: &OsStr) -> std::io::Result<()> {
    if parent.remove_tree(name).is_ok() {
        return Ok(());
    }
    let mut stack = match parent.open_dir(name) {
        Ok(d) => vec![d],
        Err(_) => return parent.remove_tree(name),
    };
    while let Some(d) = stack.pop() {
        let _ = d.set_own_mode_and_mtime(0o700, 0);
        for (child, kind) in d.entries().unwrap_or_default() {
            if matches!(kind, Some(nofollow::Kind::Dir) | None)
                && let Ok(sub) = d.open_dir(&child)
            {
                stack.push(sub);
            }
        }
    }
    parent.remove_tree(name)
}

/// Empties this worker's roots of both kinds on the tmpfs `shm` (see
/// [`crate::shmroots::roots_dir`]); only when this user's directory there is a real
/// directory owned by this user (`/dev/shm` is shared: another user may have made a name
/// there), each component opened without following a symlink.
fn clean_shm_roots(shm: &Path, work_dir: &Path) -> usize {
    let Ok(top) = nofollow::DirFd::open_root(shm) else { return 0 };
    let owner = crate::shmroots::owner_dir();
    let Ok(mine) = top.open_dir(OsStr::new(&owner)) else { return 0 };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let owned = nix::sys::stat::fstat(&mine).is_ok_and(|st| st.st_uid == uid);
    if !owned {
        return 0;
    }
    let Ok(dir) = mine.open_dir(OsStr::new(&crate::shmroots::worker_dir(work_dir))) else {
        return 0;
    };
    crate::shmroots::KINDS
        .iter()
        .map(|kind| {
            let shown = crate::shmroots::roots_dir(shm, work_dir, kind);
            empty_dir(&dir, OsStr::new(kind), &shown)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_counts_bytes_then_inodes_and_says_what_is_short() {
        let floor = DiskFloor { bytes: 256 << 20, inodes: 100 };
        let free = |bytes, inodes, has_inodes| Free { bytes, inodes, has_inodes };
        assert_eq!(floor.shortfall(free(1 << 30, 1000, true)), None);
        assert_eq!(
            floor.shortfall(free(12 << 20, 1000, true)).as_deref(),
            Some("12.0 MiB free, floor 256.0 MiB")
        );
        assert_eq!(
            floor.shortfall(free(1 << 30, 5, true)).as_deref(),
            Some("5 inodes free, floor 100")
        );
        assert_eq!(floor.shortfall(free(1 << 30, 0, false)), None, "no inode count at all");
        assert_eq!(
            floor.shortfall(free(100, 0, true)).as_deref(),
            Some("100 B free, floor 256.0 MiB")
        );
    }

    #[test]
    fn a_real_directory_is_measured_against_its_floor() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let free = free_of(dir.path()).expect("statvfs");
        assert!(free.bytes > 0, "{free:?}");
        let roomy = DiskHealth::new(dir.path(), DiskFloor { bytes: 0, inodes: 0 });
        assert_eq!(roomy.check(), None);
        let short = DiskHealth::new(dir.path(), DiskFloor::bytes(u64::MAX));
        assert!(short.check().is_some_and(|why| why.contains("free, floor")));
        assert!(free_of(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn only_staging_files_are_removed() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let d = dir.path();
        std::fs::write(d.join(staging_name(17)), b"partial").expect("a staging file");
        std::fs::write(d.join(staging_name("9")), b"").expect("an empty one");
        std::fs::write(d.join("artifact-notes.txt"), b"keep").expect("another file");
        std::fs::create_dir(d.join(staging_name(3))).expect("a directory so named");
        std::fs::create_dir(d.join("blobs")).expect("the blob cache");
        std::fs::write(d.join("blobs").join(staging_name(5)), b"nested").expect("nested");
        assert_eq!(clean_staging(d), 2);
        assert!(!d.join(staging_name(17)).exists());
        assert!(d.join("artifact-notes.txt").exists());
        assert!(d.join(staging_name(3)).is_dir(), "directories are not staging files");
        assert!(d.join("blobs").join(staging_name(5)).exists(), "only the work dir itself");
        assert_eq!(clean_staging(d), 0, "nothing left to remove");
        assert_eq!(clean_staging(&d.join("missing")), 0);
    }

    #[test]
    fn a_killed_workers_exec_roots_are_removed_and_nothing_outside_is_followed() {
        use std::os::unix::fs::{PermissionsExt as _, symlink};
        let dir = tempfile::tempdir().expect("a temp dir");
        let outside = tempfile::tempdir().expect("another");
        std::fs::write(outside.path().join("keep.txt"), b"keep").expect("a file outside");
        let w = dir.path();
        // A first execution's root with a read-only output dir and a link out of it.
        let root = w.join("roots/p_build-4242-1");
        std::fs::create_dir_all(root.join("p/dist/ro")).expect("a root");
        std::fs::write(root.join("p/dist/ro/out.txt"), b"x").expect("an output");
        symlink(outside.path(), root.join("p/dist/escape")).expect("a link out");
        std::fs::set_permissions(root.join("p/dist/ro"), std::fs::Permissions::from_mode(0o555))
            .expect("read-only");
        std::fs::create_dir_all(w.join("rerun-roots/p_build-4242-2/p")).expect("a re-run root");
        std::fs::create_dir_all(w.join("rerun-tmp/4242-7")).expect("a re-run TMPDIR");
        std::fs::create_dir_all(w.join("traces")).expect("traces");
        std::fs::write(w.join("traces/4242-7.trace"), b"trace").expect("a trace");
        std::fs::create_dir_all(w.join("identity")).expect("identity");
        std::fs::write(w.join("identity/hosts-0123"), b"127.0.0.1 x\n").expect("a stand-in");
        std::fs::create_dir_all(w.join("etc/etc-0123/ssl")).expect("an /etc copy");
        // What is not per task stays.
        std::fs::create_dir_all(w.join("blobs")).expect("the blob cache");
        std::fs::write(w.join("blobs/b"), b"blob").expect("a blob");
        std::fs::create_dir_all(w.join("trees/t")).expect("the tree store");
        assert_eq!(clean_exec_roots(w, None), 6);
        for d in PER_TASK_DIRS {
            let left: Vec<_> = std::fs::read_dir(w.join(d)).expect("kept").collect();
            assert!(left.is_empty(), "{d}: {left:?}");
        }
        assert!(w.join("blobs/b").exists() && w.join("trees/t").is_dir());
        assert_eq!(std::fs::read(outside.path().join("keep.txt")).expect("kept"), b"keep");
        assert_eq!(clean_exec_roots(w, None), 0, "nothing left");
        assert_eq!(clean_exec_roots(&w.join("missing"), None), 0);
    }

    #[test]
    fn a_per_task_dir_that_is_a_symlink_is_removed_not_followed() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("a temp dir");
        let outside = tempfile::tempdir().expect("another");
        std::fs::create_dir(outside.path().join("precious")).expect("a dir outside");
        symlink(outside.path(), dir.path().join("roots")).expect("roots -> outside");
        assert_eq!(clean_exec_roots(dir.path(), None), 1, "the link itself");
        assert!(std::fs::symlink_metadata(dir.path().join("roots")).is_err(), "the link went");
        assert!(outside.path().join("precious").is_dir(), "its target was not emptied");
    }

    #[test]
    fn roots_on_a_shared_tmpfs_are_removed_only_from_this_users_own_directory() {
        use std::os::unix::fs::symlink;
        let shm = tempfile::tempdir().expect("a stand-in for /dev/shm");
        let work = tempfile::tempdir().expect("a work dir");
        let roots = crate::shmroots::roots_dir(shm.path(), work.path(), "rerun-roots");
        std::fs::create_dir_all(roots.join("p_build-4242-3/p")).expect("a shuffled root");
        let first = crate::shmroots::roots_dir(shm.path(), work.path(), "roots");
        std::fs::create_dir_all(first.join("p_build-4242-2/p")).expect("a first root");
        std::fs::create_dir_all(first.join("q_build-4242-4")).expect("another");
        assert_eq!(clean_shm_roots(shm.path(), work.path()), 3);
        for kind in [&roots, &first] {
            assert!(kind.is_dir() && std::fs::read_dir(kind).expect("kept").next().is_none());
        }
        // Another user's name there, planted as a link to elsewhere: never followed.
        let shm2 = tempfile::tempdir().expect("another shm");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        let planted = crate::shmroots::roots_dir(elsewhere.path(), work.path(), "roots");
        std::fs::create_dir_all(planted.join("victim")).expect("a victim");
        symlink(
            elsewhere.path().join(crate::shmroots::owner_dir()),
            shm2.path().join(crate::shmroots::owner_dir()),
        )
        .expect("a planted link");
        assert_eq!(clean_shm_roots(shm2.path(), work.path()), 0);
        assert!(planted.join("victim").is_dir());
    }

    #[test]
    fn a_full_disk_is_known_through_wrapping_and_text() {
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("materialising the root")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_disk_full(&Wrap(full)));
        assert!(is_disk_full(&std::io::Error::from_raw_os_error(libc::EDQUOT)));
        let texted =
            std::io::Error::other("writing `p/dist/a`: No space left on device (os error 28)");
        assert!(is_disk_full(&texted));
        assert!(!is_disk_full(&std::io::Error::from_raw_os_error(libc::EACCES)));
    }

    #[tokio::test]
    async fn a_dip_another_measure_saw_while_the_task_ran_is_the_tasks_too() {
        // Two tasks fill the disk together; the first to end measures it short, hands back and
        // frees its root before the second ends, whose own samples (every `WATCH_EVERY`) fell
        // before and after the dip. On this current-thread runtime the watch's sampler never
        // runs (the test never yields): only the other measure saw the dip.
        let dir = tempfile::tempdir().expect("a temp dir");
        let health = Arc::new(DiskHealth::new(dir.path(), DiskFloor::bytes(u64::MAX)));
        assert!(health.check().is_some(), "short before the task started");
        let w = health.watch();
        assert_eq!(w.dipped(), None, "a dip before the task started is not the task's");
        assert!(health.report().unfit.is_some(), "a heartbeat measures it short");
        let why = w.dipped().expect("the dip the heartbeat saw while the task ran");
        assert!(why.contains("free, floor"), "{why}");
        assert_eq!(w.lowest(), None, "the watch itself never measured");
        // A second task's watch starts after these dips: none of them is its.
        assert_eq!(health.watch().dipped(), None);
    }

    #[tokio::test]
    async fn a_watch_keeps_the_lowest_free_space_seen() {
        let dir = tempfile::tempdir().expect("a temp dir");
        // Waits (bounded) for the watch's first measure.
        async fn measured(w: &DiskWatch) -> Free {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                if let Some(f) = w.lowest() {
                    return f;
                }
                assert!(std::time::Instant::now() < deadline, "no measure within 10 s");
                tokio::time::sleep(WATCH_EVERY).await;
            }
        }
        let roomy = Arc::new(DiskHealth::new(dir.path(), DiskFloor { bytes: 0, inodes: 0 }));
        let w = roomy.watch();
        assert!(measured(&w).await.bytes > 0);
        assert_eq!(w.dipped(), None);
        let short = Arc::new(DiskHealth::new(dir.path(), DiskFloor::bytes(u64::MAX)));
        let w = short.watch();
        measured(&w).await;
        assert!(w.dipped().is_some_and(|why| why.contains("free, floor")));
        assert!(short.report().unfit.is_some_and(|u| u.starts_with("disk low: ")));
        assert_eq!(roomy.report().unfit, None);
    }
}
