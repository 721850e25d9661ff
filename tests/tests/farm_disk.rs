//! Issue 29, a worker's disk: a full disk is the worker's fault, never the task's. A worker
//! whose own writes (fetching inputs, building the exec root, the task's outputs, packing)
//! hit ENOSPC hands the task back and it runs elsewhere; a worker below its floor is offered
//! no work and `farm status` says why; a SIGKILLed worker's exec roots are gone once it
//! starts again.

use std::path::{Path, PathBuf};

use prova_tests::TempWorkspace;
use prova_tests::cluster::{
    Cluster, READY_TIMEOUT, Sandbox, waiting_dirs, waiting_line, worker_of,
};

/// A tmpfs of `size` mounted on `dir` for the test's lifetime (lazily unmounted on drop).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (with the reason printed) where this process may not mount one.
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).expect("the mount point");
        let opts = format!("size={size}");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Self(dir.to_owned())),
            Ok(o) => {
                prova_tests::skip_for_missing(&format!(
                    "cannot mount a tmpfs: {}",
                    String::from_utf8_lossy(&o.stderr)
                ));
                None
            }
            Err(e) => {
                prova_tests::skip_for_missing(&format!("cannot run mount: {e}"));
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `n` bytes no compressor shrinks, different for each `seed`.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const PROJECTS: usize = 6;
/// Each project's input, copied into its output: two tasks' worth fill the small work dir
/// in the middle of fetching, building roots, writing or packing.
const BLOB: usize = 3 << 20;

/// `PROJECTS` projects whose `copy` copies a `BLOB`-byte input into `dist/`.
fn big_workspace() -> TempWorkspace {
    let names: Vec<String> = (0..PROJECTS).map(|i| format!("\"p{i}\"")).collect();
    let mut ws = TempWorkspace::new().file(
        "prova.toml",
        &format!(
            "[workspace]\nprojects = [{}]\n\n[tasks.copy]\n\
             command = \"mkdir -p dist && cat src/blob.bin > dist/copy.bin\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
            names.join(", ")
        ),
    );
    for i in 0..PROJECTS {
        ws = ws.bytes(&format!("p{i}/src/blob.bin"), &noise(BLOB, i as u64 + 1));
    }
    ws
}

#[test]
fn a_workers_own_writes_meeting_a_full_disk_fail_no_task() {
    // w1's work dir is an 8 MiB tmpfs with a 1 MiB floor: it takes work, and its writes fill
    // the disk mid-task. w2 has room.
    let mut farm = Cluster::builder()
        .workers(2)
        .slots(2)
        .sandbox(Sandbox::None)
        .started(0)
        .worker_args(0, ["--min-free-disk", "1M"])
        .roots_in_work_dirs()
        .start();
    let Some(_small) = Tmpfs::mount(&farm.work_dir(0), "8m") else { return };
    farm.start_worker(0);
    farm.start_worker(1);
    let ws = big_workspace();
    let out = farm.run(&ws, ["copy", "--all", "--json"]);
    assert_eq!(out.code(), Some(0), "a full worker disk failed a task\n{out}\n{}", farm.logs());
    for i in 0..PROJECTS {
        let t = format!("p{i}#copy");
        assert_eq!(out.status_of(&t), "succeeded", "{out}");
        assert_eq!(out.cache_of(&t), "saved", "{out}");
        let got = std::fs::read(ws.path(&format!("p{i}/dist/copy.bin"))).expect("the output");
        assert!(got == noise(BLOB, i as u64 + 1), "{t}: wrong bytes");
    }
    let log = farm.worker_log(0);
    assert!(log.contains("short of disk"), "w1 never ran short, the test proves nothing:\n{log}");
    assert!(!log.contains("corrupt artifact"), "a full disk called a corrupt artifact:\n{log}");
}

#[test]
fn a_worker_below_its_floor_is_offered_no_work_and_status_says_why() {
    // w1's 4 MiB work dir is below its 64 MiB floor from the start.
    let mut farm = Cluster::builder()
        .workers(2)
        .slots(2)
        .sandbox(Sandbox::None)
        .started(0)
        .worker_args(0, ["--min-free-disk", "64M"])
        .start();
    let Some(_small) = Tmpfs::mount(&farm.work_dir(0), "4m") else { return };
    farm.start_worker(0);
    farm.start_worker(1);
    let status = farm.wait_for_status("w1 to report its health", READY_TIMEOUT, |s| {
        worker_of(s, "w1").is_some_and(|w| !w["health"]["unfit"].is_null())
    });
    let w1 = worker_of(&status, "w1").expect("w1");
    let unfit = w1["health"]["unfit"].as_str().unwrap_or_default();
    assert!(unfit.starts_with("disk low: ") && unfit.contains("floor 64.0 MiB"), "{status:#}");
    assert!(w1["health"]["disk_free"].as_u64().is_some_and(|f| f <= 4 << 20), "{status:#}");
    let w2 = worker_of(&status, "w2").expect("w2");
    assert!(w2["health"]["unfit"].is_null(), "{status:#}");
    let text = farm.status_text();
    assert!(text.contains("health: disk low: "), "{text}");

    let ws = TempWorkspace::new()
        .file(
            "prova.toml",
            "[workspace]\nprojects = [\"a\", \"b\", \"c\", \"d\"]\n\n[tasks.build]\n\
             command = \"mkdir -p dist && cat src/* > dist/out.txt\"\n\
             inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n",
        )
        .file("a/src/x", "a")
        .file("b/src/x", "b")
        .file("c/src/x", "c")
        .file("d/src/x", "d");
    let out = farm.run(&ws, ["build", "--all", "--json"]);
    out.assert_code(0);
    for p in ["a", "b", "c", "d"] {
        assert_eq!(out.report(&format!("{p}#build"))["worker"], "w2", "{out}");
    }
    let log = farm.worker_log(0);
    assert!(!log.contains("handing the assignment back"), "w1 was offered work:\n{log}");
}

#[test]
fn a_killed_workers_exec_root_is_gone_when_it_starts_again() {
    let mut farm = Cluster::builder().workers(1).start();
    let ws = prova_tests::cluster::blocking_workspace("mkdir -p dist; echo x > dist/out.txt");
    let mut run = farm.run_cmd(&ws, &farm.ci_certs(), ["build", "--all", "--json"]).spawn();
    run.wait_for_lines("the task to block", 1, waiting_line);
    let dirs = waiting_dirs(run.stdout_so_far(), "p#build");
    // `<roots>/<root>/p`: the root is the project's parent; `<roots>` is the work dir's, or
    // this worker's on /dev/shm (`--exec-roots auto`, the default).
    let root = dirs[0].parent().expect("the exec root").to_owned();
    let roots = root.parent().expect("the roots").to_owned();
    let work = farm.work_dir(0).canonicalize().expect("the work dir");
    let on_shm = prova_worker::shmroots::roots_dir(Path::new("/dev/shm"), &work, "roots");
    assert!(roots == work.join("roots") || roots == on_shm, "{root:?}");
    assert!(root.is_dir());
    farm.kill_worker(0);
    assert!(root.is_dir(), "a SIGKILLed worker removes nothing itself");
    farm.restart_worker(0);
    assert!(!root.exists(), "the killed worker's exec root is still there: {root:?}");
    let left: Vec<_> = std::fs::read_dir(&roots)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    // Only the root of the task's new attempt (it runs again there) may exist now.
    assert!(left.len() <= 1, "{left:?}");
    drop(run);
}

/// `p0`, whose `fill` records where it ran and writes `size` bytes no compressor shrinks.
fn filling_workspace(size: usize) -> TempWorkspace {
    TempWorkspace::new()
        .file(
            "prova.toml",
            &format!(
                "[workspace]\nprojects = [\"p0\"]\n\n[tasks.fill]\n\
                 command = \"mkdir -p dist && pwd > dist/where.txt && head -c {size} /dev/urandom > dist/big.bin\"\n\
                 inputs = [\"src/**\"]\noutputs = [\"dist/**\"]\n"
            ),
        )
        .file("p0/src/in.txt", "in")
}

#[test]
fn a_task_that_runs_the_tmpfs_of_its_exec_root_short_runs_again_in_the_work_dir() {
    // The only worker's roots go on an 8 MiB tmpfs (`--exec-roots DIR`, a 1 MiB floor): a
    // task writing 1 MiB runs there; one writing 12 MiB meets ENOSPC there. That is the
    // tmpfs's failure, not the task's: it is handed back and runs again — on the same worker,
    // the farm's only one, whose roots are now in its work dir, and stay there.
    let mut farm = Cluster::builder().workers(1).slots(1).sandbox(Sandbox::None).started(0).start();
    let fast = farm.root().join("fast");
    let Some(_tmpfs) = Tmpfs::mount(&fast, "8m") else { return };
    let fast = fast.canonicalize().expect("the tmpfs");
    let flag = fast.display().to_string();
    farm.set_worker_args(0, ["--exec-roots", flag.as_str(), "--min-free-disk", "1M"]);
    farm.start_worker(0);
    let where_ran = |ws: &TempWorkspace| {
        std::fs::read_to_string(ws.path("p0/dist/where.txt")).expect("where it ran")
    };

    let small = filling_workspace(1 << 20);
    let out = farm.run(&small, ["fill", "--all", "--json"]);
    assert_eq!(out.code(), Some(0), "{out}\n{}", farm.logs());
    assert!(where_ran(&small).starts_with(fast.to_str().expect("utf-8")), "{}", where_ran(&small));

    let big = filling_workspace(12 << 20);
    let out = farm.run(&big, ["fill", "--all", "--json"]);
    assert_eq!(out.code(), Some(0), "a full tmpfs failed the task\n{out}\n{}", farm.logs());
    assert_eq!(out.cache_of("p0#fill"), "saved", "{out}");
    let work = farm.work_dir(0).canonicalize().expect("the work dir");
    assert!(where_ran(&big).starts_with(work.to_str().expect("utf-8")), "{}", where_ran(&big));
    let got = std::fs::metadata(big.path("p0/dist/big.bin")).expect("the output").len();
    assert_eq!(got, 12 << 20);
    let log = farm.worker_log(0);
    assert!(log.contains("ran the tmpfs of exec roots short"), "never ran short:\n{log}");
    assert!(log.contains("handing the assignment back"), "not handed back:\n{log}");

    // Its roots stay in the work dir.
    let out = farm.run(&small, ["fill", "--all", "--force", "--json"]);
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(where_ran(&small).starts_with(work.to_str().expect("utf-8")), "{}", where_ran(&small));
}
