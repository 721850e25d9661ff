//! libfaketime's shared segment for a determinism re-run, made and removed by the worker.
//!
//! libfaketime keeps a named semaphore and a shared-memory segment (`/dev/shm/sem.<name>`,
//! `/dev/shm/<name>`) that every process of a task shares through `FAKETIME_SHARED`. Left to
//! itself, the first process that loads it makes a pair named by its own pid and removes them
//! only when that process *exits* — never when it *execs*, as the outer `taskset`, `sh -c`
//! and every shell wrapper do. So each perturbed re-run left a pair in `/dev/shm` for good,
//! hundreds per CI run. (Inside bubblewrap `/dev/shm` is the sandbox's own; the processes
//! outside it, `taskset` first, still loaded the library on the host.)
//!
//! Instead the worker makes the pair ([`ClockSegment::create`]) before the re-run starts,
//! initialised as the `faketime` wrapper does, hands it over in `FAKETIME_SHARED`, and
//! removes both names when the re-run's root is dropped (the task's processes keep what they
//! have mapped). Names carry the worker's pid (`prova-faketime-<pid>-<n>`): a worker killed
//! outright leaves its pairs, and the next one removes those whose owner is gone
//! ([`sweep_abandoned`], on the first segment a process makes and when a worker starts).

use std::ffi::CString;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::FromRawFd as _;
use std::path::Path;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use prova_protocol::pidname;

/// The start of every name a worker makes for libfaketime.
const KIND: &str = "prova-faketime-";

/// The same names' semaphores, as glibc files them in `/dev/shm`.
const SEM_KIND: &str = "sem.prova-faketime-";

/// glibc's directory of named semaphores and shared memory.
const SHM_DIR: &str = "/dev/shm";

/// libfaketime's `struct ft_shared_s` (0.9.x): two `u64` counters, then the start time as
/// four `struct timespec` (realtime, monotonic, monotonic raw, boottime).
const SEGMENT_BYTES: usize = 2 * 8 + 4 * 16;

/// The number in the next name this process makes.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A semaphore and a shared-memory segment named for libfaketime; both names are removed
/// when it is dropped.
#[derive(Debug)]
pub struct ClockSegment {
    name: String,
}

impl ClockSegment {
    /// Makes a fresh pair, after removing those of processes that are gone (once per process).
    /// A name taken (left by an earlier process with this pid) moves on to the next number.
    pub fn create() -> std::io::Result<Self> {
        static SWEPT: Once = Once::new();
        SWEPT.call_once(|| {
            sweep_abandoned(Path::new(SHM_DIR));
        });
        let mut tries = 0;
        loop {
            match Self::create_once() {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 64 => tries += 1,
                made => return made,
            }
        }
    }

    fn create_once() -> std::io::Result<Self> {
        let name = format!("{}{}", pidname::prefix(KIND), NEXT.fetch_add(1, Ordering::Relaxed));
        let c = CString::new(format!("/{name}")).map_err(std::io::Error::other)?;
        let mode = libc::S_IRUSR | libc::S_IWUSR;
        // SAFETY: a valid C string; the variadic mode and value are the types sem_open reads.
        let sem = unsafe {
            libc::sem_open(c.as_ptr(), libc::O_CREAT | libc::O_EXCL, mode as libc::c_uint, 1u32)
        };
        if sem == libc::SEM_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `sem` came from a successful sem_open; closed once.
        unsafe { libc::sem_close(sem) };
        // From here on, dropping removes what was made.
        let made = Self { name };
        // SAFETY: a valid C string.
        let fd = unsafe {
            libc::shm_open(c.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, mode)
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor shm_open just returned, owned by nobody else.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(&initial_segment())?;
        Ok(made)
    }

    /// `FAKETIME_SHARED`'s value: the semaphore's and the segment's names.
    pub fn shared_env(&self) -> String {
        format!("/{0} /{0}", self.name)
    }
}

impl Drop for ClockSegment {
    fn drop(&mut self) {
        if let Ok(c) = CString::new(format!("/{}", self.name)) {
            // SAFETY: a valid C string; a name already gone is not an error worth reporting.
            unsafe {
                libc::sem_unlink(c.as_ptr());
                libc::shm_unlink(c.as_ptr());
            }
        }
    }
}

/// The segment as the `faketime` wrapper initialises it: no ticks, no file index, and each
/// start time "not yet taken" (`tv_nsec` −1), so the first process to read the clock sets it.
fn initial_segment() -> [u8; SEGMENT_BYTES] {
    let mut b = [0u8; SEGMENT_BYTES];
    for clock in 0..3 {
        let nsec = 16 + clock * 16 + 8;
        b[nsec..nsec + 8].copy_from_slice(&(-1i64).to_ne_bytes());
    }
    b
}

/// Removes, from `dir` (`/dev/shm`), the pairs named `prova-faketime-<pid>-…` (and their
/// `sem.` twins) that this user owns and whose process is gone. Best effort; how many went.
pub fn sweep_abandoned(dir: &Path) -> usize {
    let removed = pidname::sweep(dir, &[KIND, SEM_KIND], pidname::Entries::Files);
    if removed > 0 {
        tracing::info!(removed, "removed libfaketime segments a killed worker left in /dev/shm");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(name: &str) -> bool {
        Path::new(SHM_DIR).join(name).exists()
    }

    #[test]
    fn a_segment_is_made_for_libfaketime_and_removed_when_dropped() {
        let seg = ClockSegment::create().expect("a segment");
        let shared = seg.shared_env();
        let (sem, shm) = shared.split_once(' ').expect("two names");
        let (sem, shm) = (sem.trim_start_matches('/'), shm.trim_start_matches('/'));
        assert!(exists(&format!("sem.{sem}")), "{shared}");
        assert!(exists(shm), "{shared}");
        let bytes = std::fs::read(Path::new(SHM_DIR).join(shm)).expect("the segment");
        assert_eq!(bytes.len(), SEGMENT_BYTES);
        assert_eq!(&bytes[..16], &[0; 16], "no ticks, no file index");
        assert_eq!(&bytes[24..32], &(-1i64).to_ne_bytes(), "the realtime start not taken");
        let other = ClockSegment::create().expect("another");
        assert_ne!(other.shared_env(), shared, "each re-run its own");
        drop(seg);
        assert!(!exists(&format!("sem.{sem}")) && !exists(shm), "removed with the segment");
    }

    #[test]
    fn a_name_left_by_an_earlier_process_with_this_pid_is_passed_over() {
        // What an earlier process with this pid left: semaphores under the next numbers.
        let next = NEXT.load(Ordering::Relaxed);
        let taken: Vec<String> =
            (next..next + 8).map(|n| format!("{}{n}", pidname::prefix(KIND))).collect();
        for name in &taken {
            let c = CString::new(format!("/{name}")).expect("a C string");
            // SAFETY: a valid C string; the variadic mode and value are what sem_open reads.
            let sem = unsafe {
                libc::sem_open(c.as_ptr(), libc::O_CREAT, libc::S_IRUSR | libc::S_IWUSR, 1u32)
            };
            assert_ne!(sem, libc::SEM_FAILED, "made {name}");
            // SAFETY: from a successful sem_open.
            unsafe { libc::sem_close(sem) };
        }
        let seg = ClockSegment::create().expect("a segment past the taken names");
        assert!(!taken.contains(&seg.name), "{} reused", seg.name);
        for name in taken {
            drop(ClockSegment { name });
        }
    }

    #[test]
    fn only_gone_owners_pairs_of_this_user_are_swept() {
        let dir = tempfile::tempdir().expect("a directory");
        let d = dir.path();
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let dead = child.id();
        child.wait().expect("reaped");
        let me = std::process::id();
        let names = [
            format!("{KIND}{dead}-0"),
            format!("sem.{KIND}{dead}-0"),
            format!("{KIND}{me}-0"),
            format!("sem.{KIND}1-0"),
            format!("faketime_shm_{dead}"),
            format!("sem.faketime_sem_{dead}"),
        ];
        for n in &names {
            std::fs::write(d.join(n), "x").expect("written");
        }
        std::fs::create_dir(d.join(format!("{KIND}{dead}-dir"))).expect("a directory");
        std::os::unix::fs::symlink(d.join(&names[2]), d.join(format!("{KIND}{dead}-link")))
            .expect("a link");
        assert_eq!(sweep_abandoned(d), 2);
        let mut left: Vec<String> = std::fs::read_dir(d)
            .expect("listed")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            names[2].clone(),
            names[3].clone(),
            names[4].clone(),
            names[5].clone(),
            format!("{KIND}{dead}-dir"),
            format!("{KIND}{dead}-link"),
        ];
        want.sort();
        assert_eq!(left, want, "another process's, libfaketime's own, a directory and a link stay");
        assert!(d.join(&names[2]).exists(), "the link was not followed");
    }
}
