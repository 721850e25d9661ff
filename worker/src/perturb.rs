//! The worker's half of a determinism re-run's perturbations (`protocol::work::Perturb`):
//! what only the machine that runs the task can do or check — shift the wall clock
//! (libfaketime), pin the task to one CPU (`nproc`), give it its own `TMPDIR`, pick a locale
//! this machine really has, and lay the exec root out on a file system that lists
//! directories in creation order, in a shuffled order. Every perturbation is reported
//! ([`Perturbations`]): applied with the value the task saw, or not applied with the reason,
//! so a verdict says exactly what it covered. None may break a correct task: the clock keeps
//! running (only shifted), the TMPDIR exists and is writable, the locale exists.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use prova_protocol::events::Perturbations;
use prova_protocol::work::{Assignment, Perturb};

use crate::shmroots;

/// The clock offset a re-run gets when the coordinator asks for none in particular.
pub const DEFAULT_CLOCK_OFFSET: &str = "+7d";

/// Where libfaketime is installed on common distributions.
fn libfaketime() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = vec![
        PathBuf::from("/usr/lib/faketime"),
        PathBuf::from("/usr/lib64/faketime"),
        PathBuf::from("/usr/local/lib/faketime"),
    ];
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        dirs.extend(rd.flatten().map(|e| e.path().join("faketime")));
    }
    dirs.into_iter().map(|d| d.join("libfaketime.so.1")).find(|p| p.is_file())
}

/// Whether a re-run of `a` shifts the clock with libfaketime, so needs a segment
/// ([`crate::clockshm::ClockSegment`]): asked for, not declared by the task, installed here.
pub fn shifts_clock(a: &Assignment) -> bool {
    let asked = a.perturb.as_ref().is_some_and(|p| p.clock.is_some());
    asked && !a.spec.env.iter().any(|(n, _)| n == "FAKETIME") && libfaketime().is_some()
}

/// `taskset` (util-linux), which sets the affinity of what it runs.
fn taskset() -> Option<PathBuf> {
    ["/usr/bin/taskset", "/bin/taskset", "/usr/local/bin/taskset"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Whether this machine has locale `name` (glibc's `newlocale`, thread-safe).
fn locale_exists(name: &str) -> bool {
    let Ok(c) = CString::new(name) else { return false };
    // SAFETY: a valid C string; a non-null result is freed at once.
    unsafe {
        let l = libc::newlocale(libc::LC_ALL_MASK, c.as_ptr(), std::ptr::null_mut());
        if l.is_null() {
            return false;
        }
        libc::freelocale(l);
    }
    true
}

/// `de_DE.UTF-8` and `de_DE.utf8` name one locale.
fn same_locale(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['-', '_'], "");
    norm(a) == norm(b)
}

/// The locale a re-run uses: the coordinator's choice if this machine has it and it is not
/// the first execution's, else the first such of a few common ones (`POSIX` always exists).
pub fn pick_locale(asked: &str, primary: &str) -> String {
    let primary = if primary.is_empty() { "C" } else { primary };
    [asked, "de_DE.UTF-8", "en_US.UTF-8", "C.UTF-8", "POSIX", "C"]
        .into_iter()
        .find(|l| !same_locale(l, primary) && locale_exists(l))
        .unwrap_or("POSIX")
        .to_owned()
}

/// Shuffles `items` in place (a fixed permutation per `seed`), so the exec root's files are
/// created in an order unrelated to the workspace's.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    for i in (1..items.len()).rev() {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        items.swap(i, (r % (i as u64 + 1)) as usize);
    }
}

/// Where a re-run's exec root goes and in what order its files are made: the
/// perturbations decided before the root exists.
pub struct RootPlan {
    /// The root's parent directory.
    pub parent: PathBuf,
    /// Shuffle the inputs before creating them.
    pub shuffle: bool,
}

/// Plans a re-run's root: another parent than first executions use; with
/// `shuffle_inputs`, on a creation-order file system when one has room for `bytes`.
pub fn plan_root(p: &Perturb, work_dir: &Path, bytes: u64, out: &mut Perturbations) -> RootPlan {
    let default = work_dir.join(shmroots::RERUN_ROOTS);
    if let Some(parent) = &p.root_parent {
        out.applied("exec-root-path", parent.display().to_string());
        return RootPlan { parent: parent.clone(), shuffle: p.shuffle_inputs };
    }
    if !p.shuffle_inputs {
        out.applied("exec-root-path", default.display().to_string());
        return RootPlan { parent: default, shuffle: false };
    }
    match shmroots::tmpfs_with_room(bytes.saturating_mul(2).saturating_add(64 << 20)) {
        Some(fs) => {
            let parent = shmroots::roots_dir(&fs, work_dir, shmroots::RERUN_ROOTS);
            out.applied("exec-root-path", parent.display().to_string());
            out.applied("dir-order", "inputs created in a shuffled order on a tmpfs");
            RootPlan { parent, shuffle: true }
        }
        None => {
            out.applied("exec-root-path", default.display().to_string());
            out.skipped(
                "dir-order",
                "no executable tmpfs with room: the exec roots' file system may list by name hash",
            );
            RootPlan { parent: default, shuffle: true }
        }
    }
}

/// What a re-run holds while it runs, made with its root and removed with it.
#[derive(Default)]
pub struct RerunHeld {
    /// Its own `TMPDIR`.
    pub tmpdir: Option<ScratchDir>,
    /// libfaketime's semaphore and segment, shared by the task's processes.
    pub clock: Option<crate::clockshm::ClockSegment>,
    /// Why the segment could not be made (the clock is then not shifted).
    pub clock_failed: Option<String>,
}

/// A re-run's own `TMPDIR`, removed with the exec root.
pub struct ScratchDir(pub PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes the re-run's `TMPDIR` under `work_dir`.
pub fn scratch(work_dir: &Path, a: &Assignment) -> std::io::Result<ScratchDir> {
    let dir = work_dir.join("rerun-tmp").join(format!("{}-{}", std::process::id(), a.attempt.0));
    std::fs::create_dir_all(&dir)?;
    Ok(ScratchDir(dir))
}

fn set(env: &mut Vec<(String, String)>, k: &str, v: &str) {
    match env.iter_mut().find(|(name, _)| name == k) {
        Some(slot) => v.clone_into(&mut slot.1),
        None => env.push((k.to_owned(), v.to_owned())),
    }
}

fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
    env.iter().find(|(name, _)| name == k).map(|(_, v)| v.as_str())
}

/// What the task's environment and argv get (`a.perturb`), after the sandbox wrapped it: the env
/// perturbations (reported), the locale fixed to one this machine has, the clock, `TMPDIR`
/// (`held.tmpdir`: the scratch directory, already mounted writable in a sandbox), and the CPU
/// affinity (an outer `taskset`). `primary` is the baseline environment the first execution
/// started from; `sandboxed` says whether hostname and uid could be changed.
pub fn apply(
    a: &Assignment,
    primary: &[(String, String)],
    sandboxed: bool,
    held: &RerunHeld,
    env: &mut Vec<(String, String)>,
    argv: Vec<String>,
    out: &mut Perturbations,
) -> Vec<String> {
    let Some(p) = &a.perturb else { return argv };
    let declared = |k: &str| a.spec.env.iter().any(|(n, _)| n == k);
    if let Some(m) = p.umask {
        out.applied("umask", format!("{m:03o}"));
    }
    apply_env(p, &declared, primary, env, out);
    apply_identity(p, sandboxed, out);
    if let Some(offset) = &p.clock {
        apply_clock(offset, &declared, held, env, out);
    }
    if p.tmpdir {
        match &held.tmpdir {
            _ if declared("TMPDIR") => out.skipped("tmpdir", "the task declares TMPDIR"),
            Some(dir) => {
                let d = dir.0.display().to_string();
                set(env, "TMPDIR", &d);
                out.applied("tmpdir", d);
            }
            None => out.skipped("tmpdir", "no scratch directory could be made"),
        }
    }
    if p.one_cpu { on_one_cpu(argv, out) } else { argv }
}

/// The environment's perturbations (the task's `declared` names untouched): the locale, one
/// this machine has other than the first execution's (`primary`), the other variables
/// (already in `env`, reported here), and the reversed order.
fn apply_env(
    p: &Perturb,
    declared: &dyn Fn(&str) -> bool,
    primary: &[(String, String)],
    env: &mut Vec<(String, String)>,
    out: &mut Perturbations,
) {
    if let Some((_, asked)) = p.env.iter().find(|(k, _)| k == "LANG")
        && !declared("LANG")
    {
        let first = get(primary, "LC_ALL").or_else(|| get(primary, "LANG")).unwrap_or("");
        let lang = pick_locale(asked, first);
        set(env, "LANG", &lang);
        if !declared("LC_ALL") {
            set(env, "LC_ALL", &lang);
        }
        out.applied("locale", lang);
    }
    for (k, v) in &p.env {
        if declared(k) || k == "LANG" || k == "LC_ALL" {
            continue;
        }
        // `$HOSTNAME`; the hostname itself (`hostname`, uname) is the sandbox's below.
        let what = if k == "HOSTNAME" {
            "hostname-var".to_owned()
        } else {
            k.to_ascii_lowercase().replace('_', "-")
        };
        out.applied(&what, v.clone());
    }
    if p.reverse_env {
        out.applied("env-order", "reversed");
    }
}

/// The hostname and uid: the sandbox's to change (`sandboxed`), else not changed.
fn apply_identity(p: &Perturb, sandboxed: bool, out: &mut Perturbations) {
    match (sandboxed, &p.hostname, p.uid) {
        (true, h, u) => {
            if let Some(h) = h {
                out.applied("hostname", h.clone());
            }
            if let Some(u) = u {
                out.applied("uid", u.to_string());
            }
        }
        (false, h, u) => {
            if h.is_some() || u.is_some() {
                out.skipped("hostname", "no sandbox on this worker");
                out.skipped("uid", "no sandbox on this worker");
            }
        }
    }
}

/// The wall clock moved by `offset` through libfaketime (unless the task declares
/// `FAKETIME`, or the library is not here), its processes sharing the worker's segment
/// (`held.clock`, [`crate::clockshm`]) — without one, the library would make its own and
/// leave it in `/dev/shm`, so the clock is then not shifted.
fn apply_clock(
    offset: &str,
    declared: &dyn Fn(&str) -> bool,
    held: &RerunHeld,
    env: &mut Vec<(String, String)>,
    out: &mut Perturbations,
) {
    match (libfaketime(), &held.clock) {
        _ if declared("FAKETIME") => out.skipped("clock", "the task declares FAKETIME"),
        (None, _) => out.skipped("clock", "libfaketime is not installed on this worker"),
        (Some(_), None) => {
            let why = held.clock_failed.as_deref().unwrap_or("not made");
            out.skipped("clock", format!("libfaketime's shared segment: {why}"));
        }
        (Some(lib), Some(segment)) => {
            let lib = lib.display().to_string();
            let preload = match get(env, "LD_PRELOAD") {
                Some(x) if !x.is_empty() => format!("{lib}:{x}"),
                _ => lib,
            };
            set(env, "LD_PRELOAD", &preload);
            set(env, "FAKETIME", offset);
            // Only the wall clock: timeouts and sleeps keep working.
            set(env, "FAKETIME_DONT_FAKE_MONOTONIC", "1");
            set(env, "FAKETIME_SHARED", &segment.shared_env());
            out.applied("clock", format!("{offset} (libfaketime)"));
        }
    }
}

/// `argv` under an outer `taskset` pinning it to one of the CPUs this worker may use.
fn on_one_cpu(argv: Vec<String>, out: &mut Perturbations) -> Vec<String> {
    let cpus = allowed_cpus();
    match (cpus.len(), taskset()) {
        (0 | 1, _) => {
            out.skipped("cpus", "this worker has one CPU");
            argv
        }
        (n, Some(ts)) => {
            let cpu = cpus[n - 1];
            let mut wrapped = vec![ts.display().to_string(), "-c".to_owned(), cpu.to_string()];
            wrapped.extend(argv);
            out.applied("cpus", format!("1 of {n}"));
            wrapped
        }
        (_, None) => {
            out.skipped("cpus", "taskset (util-linux) is not installed");
            argv
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_permutation_that_moves_things() {
        let mut v: Vec<u32> = (0..20).collect();
        shuffle(&mut v, 7);
        assert_ne!(v, (0..20).collect::<Vec<_>>());
        let mut s = v.clone();
        s.sort_unstable();
        assert_eq!(s, (0..20).collect::<Vec<_>>());
    }

    fn rerun(spec_env: &[(&str, &str)], p: Perturb) -> Assignment {
        use prova_protocol::ids::TaskId;
        use prova_protocol::spec::{CommandLine, TaskSpec};
        let mut spec = TaskSpec::new(TaskId::new("p", "t"), "p", CommandLine::Shell("true".into()));
        spec.env = spec_env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Assignment {
            attempt: prova_protocol::AttemptId(1),
            spec,
            placement: prova_protocol::work::Placement::InPlace {
                workspace_root: PathBuf::from("/ws"),
                protected: Vec::new(),
            },
            clean_outputs: false,
            collect_outputs: false,
            pack_to: None,
            perturb: Some(p),
            trace_reads: false,
            survey_on_failure: false,
        }
    }

    #[test]
    fn apply_reports_each_perturbation_in_order_and_leaves_declared_names_alone() {
        let p = Perturb {
            umask: Some(0o077),
            env: vec![
                ("LANG".into(), "xx_NOPE.UTF-8".into()),
                ("USER".into(), "nobody2".into()),
                ("HOSTNAME".into(), "h2".into()),
            ],
            reverse_env: true,
            hostname: Some("h2".into()),
            uid: Some(1234),
            tmpdir: true,
            ..Perturb::default()
        };
        // Declared: LANG and TMPDIR are the task's; the rest is perturbed.
        let a = rerun(&[("LANG", "C.UTF-8"), ("TMPDIR", "/mine")], p.clone());
        let mut env = vec![("LANG".to_owned(), "C.UTF-8".to_owned())];
        let mut out = Perturbations::default();
        let argv = vec!["sh".to_owned()];
        let tmp = tempfile::tempdir().expect("a scratch directory");
        let scratch = tmp.path().join("scratch");
        std::fs::create_dir(&scratch).expect("made");
        let held = RerunHeld { tmpdir: Some(ScratchDir(scratch.clone())), ..RerunHeld::default() };
        let got = apply(&a, &[], false, &held, &mut env, argv.clone(), &mut out);
        assert_eq!(got, argv);
        assert_eq!(get(&env, "LANG"), Some("C.UTF-8"));
        assert_eq!(get(&env, "TMPDIR"), None);
        let what = |v: &[prova_protocol::events::Perturbation]| {
            v.iter().map(|x| x.what.clone()).collect::<Vec<_>>()
        };
        assert_eq!(what(&out.applied), ["umask", "user", "hostname-var", "env-order"]);
        assert_eq!(what(&out.not_applied), ["hostname", "uid", "tmpdir"]);
        // Sandboxed and undeclared: the locale is one this machine has, hostname and uid
        // are the sandbox's, TMPDIR the scratch directory.
        let a = rerun(&[], p);
        let (mut env, mut out) = (Vec::new(), Perturbations::default());
        apply(&a, &[], true, &held, &mut env, Vec::new(), &mut out);
        let lang = get(&env, "LANG").expect("a locale").to_owned();
        assert!(locale_exists(&lang), "{lang}");
        assert_eq!(get(&env, "LC_ALL"), Some(lang.as_str()));
        assert_eq!(get(&env, "TMPDIR"), Some(scratch.to_str().expect("utf-8")));
        assert_eq!(
            what(&out.applied),
            ["umask", "locale", "user", "hostname-var", "env-order", "hostname", "uid", "tmpdir"]
        );
        assert!(out.not_applied.is_empty(), "{:?}", out.not_applied);
    }

    #[test]
    fn the_clock_is_shifted_only_with_the_workers_segment() {
        if libfaketime().is_none() {
            eprintln!("skipped: libfaketime is not installed");
            return;
        }
        let p = Perturb { clock: Some("+7d".into()), ..Perturb::default() };
        let a = rerun(&[], p.clone());
        assert!(shifts_clock(&a));
        assert!(!shifts_clock(&rerun(&[("FAKETIME", "+1d")], p.clone())), "declared");
        // With a segment: every process of the task shares it.
        let held = RerunHeld {
            clock: Some(crate::clockshm::ClockSegment::create().expect("a segment")),
            ..RerunHeld::default()
        };
        let (mut env, mut out) = (Vec::new(), Perturbations::default());
        apply(&a, &[], false, &held, &mut env, Vec::new(), &mut out);
        let shared = held.clock.as_ref().map(crate::clockshm::ClockSegment::shared_env);
        assert_eq!(get(&env, "FAKETIME_SHARED"), shared.as_deref());
        assert_eq!(get(&env, "FAKETIME"), Some("+7d"));
        assert!(out.applied.iter().any(|x| x.what == "clock"), "{out:?}");
        // Without one, the library would make its own and leave it: not shifted, and why.
        let held = RerunHeld { clock_failed: Some("no room".into()), ..RerunHeld::default() };
        let (mut env, mut out) = (Vec::new(), Perturbations::default());
        apply(&a, &[], false, &held, &mut env, Vec::new(), &mut out);
        assert_eq!(get(&env, "LD_PRELOAD"), None);
        assert_eq!(get(&env, "FAKETIME"), None);
        let skipped = out.not_applied.iter().find(|x| x.what == "clock").expect("said why");
        assert!(skipped.detail.contains("no room"), "{skipped:?}");
    }

    #[test]
    fn the_locale_picked_exists_and_is_not_the_first_runs() {
        for first in ["C.UTF-8", "C", "", "POSIX", "de_DE.UTF-8"] {
            let l = pick_locale("xx_NOPE.UTF-8", first);
            assert!(locale_exists(&l), "{l}");
            assert!(!same_locale(&l, if first.is_empty() { "C" } else { first }), "{first} → {l}");
        }
    }
}
