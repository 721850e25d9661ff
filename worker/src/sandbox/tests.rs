//! The sandbox against real bubblewrap and strace, through the real executor, on real exec
//! roots. Where the host cannot sandbox, each test says why and skips — unless
//! `PROVA_REQUIRE_SANDBOX` or `PROVA_REQUIRE_TOOLS` is set (CI), where a missing sandbox
//! fails the test instead.
//! Nothing here sleeps to synchronise; every run is bounded by [`WAIT`].

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prova_protocol::Digest;
use prova_protocol::spec::ExitKind;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::blobcache::BlobCache;
use crate::exec::{self, Executor, LocalExecutor, ProcessIo, ProcessRequest};
use crate::execroot::{ExecRoot, ExecRootSpec, RootInput, RootSource};

/// The bound on every sandboxed run.
const WAIT: Duration = Duration::from_secs(60);

fn required() -> bool {
    ["PROVA_REQUIRE_SANDBOX", "PROVA_REQUIRE_TOOLS"].iter().any(|v| std::env::var_os(v).is_some())
}

/// Whether bwrap works here (probed once per test binary).
fn sandbox_here() -> bool {
    static STATUS: OnceLock<SandboxStatus> = OnceLock::new();
    match STATUS.get_or_init(detect) {
        SandboxStatus::Bwrap { .. } => true,
        SandboxStatus::Unavailable { reason } => {
            assert!(!required(), "PROVA_REQUIRE_SANDBOX is set but there is no sandbox: {reason}");
            eprintln!("skipping: no sandbox on this host: {reason}");
            false
        }
    }
}

/// Where strace can trace a sandbox here: its own pid namespace (where the host allows it)
/// and the host's, each test running under both; empty when it cannot. (A user without the
/// right to make namespaces: `strace_gets_its_namespace_as_a_user_without_rights`.)
fn tracers_here() -> Vec<Tracer> {
    static FOUND: OnceLock<Option<Tracer>> = OnceLock::new();
    if !sandbox_here() {
        return Vec::new();
    }
    match *FOUND.get_or_init(|| strace_available(true)) {
        Some(own @ Tracer::OwnPidNs { .. }) => vec![own, Tracer::Host],
        Some(Tracer::Host) => {
            assert!(
                !required(),
                "PROVA_REQUIRE_SANDBOX is set but strace cannot have a pid namespace of its own"
            );
            vec![Tracer::Host]
        }
        None => {
            assert!(!required(), "PROVA_REQUIRE_SANDBOX is set but strace cannot trace here");
            eprintln!("skipping: strace cannot trace on this host");
            Vec::new()
        }
    }
}

/// A workspace with a project `p` and two sibling directories holding secrets, and an exec
/// root for `p` declaring `p/in.txt` (a workspace file) and `p/data.txt` (a blob), with
/// outputs `out/**`.
struct Task {
    tmp: tempfile::TempDir,
    ws: PathBuf,
    _blobs: BlobCache,
    root: ExecRoot,
}

fn task() -> Task {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    for (rel, text) in [
        ("p/in.txt", "declared-in\n"),
        ("other/secret", "TOP SECRET\n"),
        ("sibling/secret.txt", "SIBLING SECRET\n"),
    ] {
        let p = ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let blobs = BlobCache::open(&tmp.path().join("blobs"), 1 << 30).unwrap();
    let data = b"declared-blob\n";
    let d = Digest::of(data);
    blobs.insert_bytes(data, &d).unwrap();
    let spec = ExecRootSpec {
        inputs: vec![
            RootInput {
                path: "p/in.txt".into(),
                source: RootSource::File(ws.join("p/in.txt")),
                exec: false,
                symlink: None,
            },
            RootInput {
                path: "p/data.txt".into(),
                source: RootSource::Blob(d),
                exec: false,
                symlink: None,
            },
        ],
        artifacts: Vec::new(),
        project_dir: "p".into(),
        outputs: vec!["out/**".into()],
        ..ExecRootSpec::default()
    };
    let root = ExecRoot::create(&tmp.path().join("roots"), "p#build", &spec, &blobs).unwrap();
    Task { tmp, ws, _blobs: blobs, root }
}

impl Task {
    fn cfg(&self) -> SandboxConfig {
        self.root.sandbox()
    }
}

/// Runs `argv` through the local executor with the host's baseline environment.
async fn run(argv: Vec<String>, cwd: &Path) -> (ExitKind, String) {
    run_within(argv, cwd, WAIT).await
}

/// [`run`], killed once it has run for `timeout`.
async fn run_within(argv: Vec<String>, cwd: &Path, timeout: Duration) -> (ExitKind, String) {
    let mut req = ProcessRequest::new(argv, cwd);
    req.env = exec::env::baseline_env(|k| std::env::var(k).ok());
    req.timeout = Some(timeout);
    req.kill_grace = Duration::from_millis(500);
    let (tx, rx) = mpsc::channel(16);
    drop(rx); // the log is captured all the same
    let io = ProcessIo { output: tx, ready: None };
    let fut = LocalExecutor.run(req, io, CancellationToken::new());
    let result = tokio::time::timeout(WAIT * 2, fut)
        .await
        .expect("the sandboxed process to finish")
        .expect("executor error");
    (result.exit, String::from_utf8_lossy(&result.log.bytes).into_owned())
}

/// `sh -c script` in the sandbox.
async fn sandboxed(cfg: &SandboxConfig, script: &str) -> (ExitKind, String) {
    run(bwrap_argv(cfg, &exec::shell_argv(script, &[])), &cfg.root).await
}

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

#[tokio::test]
async fn a_task_cannot_read_a_workspace_file_it_did_not_declare() {
    if !sandbox_here() {
        return;
    }
    let t = task();
    assert!(t.ws.join("other/secret").is_file(), "the secret is in the workspace");
    let host_path = t.ws.join("other/secret");
    let script = format!(
        "cat in.txt data.txt; cat ../other/secret; echo rc=$?; cat '{}'; echo rc=$?",
        host_path.display()
    );
    let (exit, log) = sandboxed(&t.cfg(), &script).await;
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    assert!(log.contains("declared-in") && log.contains("declared-blob"), "{log}");
    assert!(!log.contains("TOP SECRET"), "{log}");
    assert_eq!(log.matches("No such file or directory").count(), 2, "{log}");
    assert_eq!(log.matches("rc=1").count(), 2, "{log}");
}

#[tokio::test]
async fn a_task_can_write_its_outputs_and_nothing_else() {
    if !sandbox_here() {
        return;
    }
    let t = task();
    let script = "echo made > out/result.txt && echo wrote-output; \
                  rm -rf out && mkdir out && echo again > out/result.txt && echo remade-output; \
                  echo x > stray.txt && echo beside-outputs; \
                  echo x > ../stray.txt || echo denied-workspace; \
                  echo x > /stray.txt || echo denied-slash; \
                  echo x > /usr/stray.txt || echo denied-usr; \
                  echo x > in.txt || echo denied-input; \
                  rm -f in.txt || echo kept-input";
    let (exit, log) = sandboxed(&t.cfg(), script).await;
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    for word in [
        "wrote-output",
        "remade-output",
        "beside-outputs",
        "denied-workspace",
        "denied-slash",
        "denied-usr",
        "denied-input",
        "kept-input",
    ] {
        assert!(log.contains(word), "{word} missing from: {log}");
    }
    assert_eq!(log.matches("Read-only file system").count(), 4, "{log}");
    let cwd = t.root.cwd();
    assert_eq!(std::fs::read_to_string(cwd.join("out/result.txt")).unwrap(), "again\n");
    // A new file beside the outputs lands in the exec root (the trace names it an undeclared
    // output; it is never collected), never in the workspace.
    assert!(cwd.join("stray.txt").exists() && !t.ws.join("p/stray.txt").exists());
    assert!(!t.root.path().join("stray.txt").exists());
    assert_eq!(std::fs::read_to_string(cwd.join("in.txt")).unwrap(), "declared-in\n");
    assert_eq!(std::fs::read_to_string(t.ws.join("p/in.txt")).unwrap(), "declared-in\n");
}

#[tokio::test]
async fn the_hosts_tmp_is_neither_readable_nor_writable() {
    if !sandbox_here() {
        return;
    }
    let t = task();
    let written = PathBuf::from("/tmp").join(unique("prova-sbx-write"));
    let host_file = PathBuf::from("/tmp").join(unique("prova-sbx-host"));
    std::fs::write(&host_file, "host tmp\n").unwrap();
    let script = format!(
        "echo leaked > {w} && cat {w}; cat {h} || echo host-tmp-hidden",
        w = written.display(),
        h = host_file.display()
    );
    let (exit, log) = sandboxed(&t.cfg(), &script).await;
    let _ = std::fs::remove_file(&host_file);
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    assert!(log.contains("leaked"), "writes to /tmp work inside: {log}");
    assert!(log.contains("host-tmp-hidden") && !log.contains("host tmp"), "{log}");
    assert!(!written.exists(), "a write to the sandbox's /tmp must not reach the host");
}

/// `bash`, for `/dev/tcp`; `None` (and the TCP half of the test is skipped) without it.
fn bash() -> Option<&'static str> {
    ["/usr/bin/bash", "/bin/bash"].into_iter().find(|p| Path::new(p).exists())
}

#[tokio::test]
async fn no_network_unless_declared() {
    if !sandbox_here() {
        return;
    }
    let t = task();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "cat /proc/net/dev; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected || echo refused"
    );
    let run_net = |network: bool| {
        let mut cfg = t.cfg();
        cfg.network = network;
        let script = script.clone();
        async move {
            match bash() {
                Some(b) => {
                    let inner = vec![b.to_owned(), "-c".to_owned(), script];
                    run(bwrap_argv(&cfg, &inner), &cfg.root).await
                }
                None => {
                    eprintln!("no bash: checking interfaces only");
                    sandboxed(&cfg, "cat /proc/net/dev").await
                }
            }
        }
    };
    let interfaces = |log: &str| -> Vec<String> {
        log.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(name, _)| name.trim().to_owned())
            .filter(|n| !n.is_empty() && !n.contains(' ') && !n.contains('|'))
            .collect()
    };

    let (exit, log) = run_net(false).await;
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    assert_eq!(interfaces(&log), ["lo"], "{log}");
    if bash().is_some() {
        assert!(log.contains("refused") && !log.contains("connected"), "{log}");
        assert!(listener.accept().is_err(), "nothing reached the host's listener");
    }

    let (exit, log) = run_net(true).await;
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    assert!(interfaces(&log).contains(&"lo".to_owned()), "{log}");
    if bash().is_some() {
        assert!(log.contains("connected"), "{log}");
        // The connection sits in the listener's backlog even though the client is gone.
        assert!(listener.accept().is_ok(), "the host's listener was reached");
    }
}

#[tokio::test]
async fn hostname_and_ids_are_the_sandboxs_own() {
    if !sandbox_here() {
        return;
    }
    let t = task();
    let mut cfg = t.cfg();
    cfg.hostname = Some("prova-sbx".to_owned());
    cfg.uid = Some(1234);
    cfg.gid = Some(4321);
    let (exit, log) = sandboxed(&cfg, "echo host=$(uname -n) uid=$(id -u) gid=$(id -g)").await;
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    assert!(log.contains("host=prova-sbx uid=1234 gid=4321"), "{log}");
}

/// What a task can learn of `/etc`: each listed path's kind, link target and bytes (a
/// digest), the names there, whoami, the uid's name and the hostname's resolution.
const ETC_SURVEY: &str = r#"
for p in ld.so.cache ld.so.conf ld.so.conf.d alternatives ssl ca-certificates pki passwd \
         group nsswitch.conf localtime hostname machine-id hosts resolv.conf; do
  f=/etc/$p
  if [ -L "$f" ]; then echo "$p link $(readlink "$f")"
  elif [ -d "$f" ]; then echo "$p dir $(ls -A "$f" | wc -l) $(ls -ld "$f" | cut -c1-10)"
  elif [ -f "$f" ]; then echo "$p file $(cksum < "$f") $(ls -l "$f" | cut -c1-10)"
  else echo "$p none"; fi
done
echo "names: $(ls -A /etc | tr '\n' ' ')"
echo "who: $(id -un) $(id -gn)"
echo "alt: $(ls /etc/alternatives | head -3 | tr '\n' ' ')"
echo "certs: $(ls /etc/ssl/certs 2>/dev/null | wc -l)"
touch /etc/x 2>/dev/null && echo "etc writable" || echo "etc read-only"
touch /etc/ssl/x 2>/dev/null && echo "ssl writable" || echo "ssl read-only"
"#;

#[tokio::test]
async fn a_prepared_etc_shows_a_task_what_the_binds_showed() {
    if !sandbox_here() {
        return;
    }
    let t = task();
    let views = t.tmp.path().join("etc-views");
    let mut perturbed = t.cfg();
    perturbed.hostname = Some("prova-sbx".to_owned());
    perturbed.uid = Some(1234);
    perturbed.gid = Some(4321);
    let identity = t.tmp.path().join("identity");
    // A re-run keeps its binds; its stand-in files (passwd and group naming its user,
    // hosts, hostname, machine-id) shown to a sandbox without its uid and hostname are
    // folded into a copy.
    assert_eq!(etc::etc_view(&views, &perturbed).expect("view"), None);
    let mut stand_ins = t.cfg();
    stand_ins.overlays = identity_overlays(&identity, &perturbed, "runner").expect("identity");
    let mut plain = t.cfg();
    plain.overlays = identity_overlays(&identity, &plain, "runner").expect("identity");
    for bound in [plain, stand_ins] {
        let mut viewed = bound.clone();
        viewed.etc = etc::etc_view(&views, &bound).expect("view");
        let v = viewed.etc.clone().expect("a view applies here");
        let argv = bwrap_argv(&viewed, &["true".to_owned()]);
        let etc_binds =
            argv.windows(3).filter(|w| w[0].contains("bind") && w[2].starts_with("/etc")).count();
        assert_eq!(etc_binds, 1 + v.binds.len(), "one bind for the files: {argv:?}");
        let (e1, by_bind) = sandboxed(&bound, ETC_SURVEY).await;
        let (e2, by_view) = sandboxed(&viewed, ETC_SURVEY).await;
        assert_eq!((e1, e2), (ExitKind::Code(0), ExitKind::Code(0)), "{by_bind}\n{by_view}");
        assert_eq!(by_view, by_bind);
        assert!(
            by_view.contains("etc read-only") && by_view.contains("ssl read-only"),
            "{by_view}"
        );
        assert!(!by_view.contains("passwd none"), "{by_view}");
        // The copy itself is nowhere to be seen inside.
        let (_, log) =
            sandboxed(&viewed, &format!("ls '{}' 2>&1; echo rc=$?", v.dir.display())).await;
        assert!(log.contains("rc=2") || log.contains("rc=1"), "{log}");
    }
}

#[tokio::test]
async fn a_task_embedding_its_cwd_sees_the_exec_roots_real_path() {
    if !sandbox_here() {
        return;
    }
    let t = task();
    let script = "echo \"pwd=$PWD\"; echo \"real=$(pwd -P)\"";
    let (exit, log) = sandboxed(&t.cfg(), script).await;
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    let cwd = t.root.cwd().display().to_string();
    assert!(log.contains(&format!("pwd={cwd}\n")), "{log}");
    assert!(log.contains(&format!("real={cwd}\n")), "{log}");
    // A root under another parent (a determinism re-run) shows another path.
    let blobs = BlobCache::open(&t.tmp.path().join("blobs2"), 1 << 20).unwrap();
    let spec = ExecRootSpec { project_dir: "p".into(), ..ExecRootSpec::default() };
    let rerun = ExecRoot::create(&t.tmp.path().join("rerun"), "p#build", &spec, &blobs).unwrap();
    let cfg = SandboxConfig::new(rerun.path(), rerun.cwd());
    let (_, log2) = sandboxed(&cfg, script).await;
    assert!(log2.contains(&format!("pwd={}\n", rerun.cwd().display())), "{log2}");
    assert_ne!(log, log2);
}

#[tokio::test]
async fn strace_names_exactly_the_undeclared_read() {
    for tracer in tracers_here() {
        let t = task();
        let trace = t.tmp.path().join("trace.txt");
        let script = "cat in.txt > out/copy.txt; cat ../sibling/secret.txt; true";
        let inner = bwrap_argv(&t.cfg(), &exec::shell_argv(script, &[]));
        let (exit, log) = run(strace_argv(&trace, &inner, tracer), t.root.path()).await;
        assert_eq!(exit, ExitKind::Code(0), "{tracer:?}: {log}");
        assert!(log.contains("No such file or directory"), "{log}");
        assert!(t.root.cwd().join("out/copy.txt").is_file(), "{log}");
        let reads = undeclared_reads(&trace, t.root.path()).unwrap();
        assert_eq!(reads, ["sibling/secret.txt"], "{tracer:?}, trace: {}", trace.display());
    }
}

#[tokio::test]
async fn strace_finds_nothing_for_a_complete_task() {
    for tracer in tracers_here() {
        let t = task();
        let trace = t.tmp.path().join("trace.txt");
        let script = "cat in.txt data.txt > out/copy.txt && ls out > out/listing.txt";
        let inner = bwrap_argv(&t.cfg(), &exec::shell_argv(script, &[]));
        let (exit, log) = run(strace_argv(&trace, &inner, tracer), t.root.path()).await;
        assert_eq!(exit, ExitKind::Code(0), "{tracer:?}: {log}");
        assert_eq!(
            std::fs::read_to_string(t.root.cwd().join("out/copy.txt")).unwrap(),
            "declared-in\ndeclared-blob\n"
        );
        assert_eq!(undeclared_reads(&trace, t.root.path()).unwrap(), Vec::<String>::new());
        assert!(std::fs::metadata(&trace).unwrap().len() > 0, "something was traced");
    }
}

#[tokio::test]
async fn strace_sees_every_way_a_path_is_touched() {
    for tracer in tracers_here() {
        let t = task();
        let trace = t.tmp.path().join("trace.txt");
        // A glob, `find`, `ls` of a directory outside the root, tests of missing paths, a
        // readlink, an exec and a chdir that fail, an open through a directory fd (`find`).
        let script = "cat *.txt > out/glob.txt; find . -name nothing; ls / >/dev/null; \
                      test -f missing.txt; test -d nodir; readlink gone; ./nope.sh; cd sub; true";
        let inner = bwrap_argv(&t.cfg(), &exec::shell_argv(script, &[]));
        let (exit, log) = run(strace_argv(&trace, &inner, tracer), t.root.path()).await;
        assert_eq!(exit, ExitKind::Code(0), "{tracer:?}: {log}");
        let reads = trace_reads(&trace, t.root.path()).unwrap();
        assert!(reads.traced);
        for p in ["p/missing.txt", "p/nodir", "p/gone", "p/nope.sh", "p/sub"] {
            assert!(reads.missing.iter().any(|m| m == p), "{p} not in {:?}", reads.missing);
        }
        let dirs: Vec<&str> = reads.listed.iter().map(|l| l.dir.as_str()).collect();
        assert!(dirs.contains(&"p"), "{dirs:?}");
        assert!(dirs.contains(&"p/out"), "find walks into out/: {dirs:?}");
        let p = reads.listed.iter().find(|l| l.dir == "p").unwrap();
        assert!(p.complete);
        assert_eq!(p.entries, ["data.txt", "in.txt", "out"], "what the root holds");
        assert!(dirs.iter().all(|d| !d.starts_with('/')), "outside the root: {dirs:?}");
    }
}

/// strace's pid namespace is for strace alone: the task's is nested in it, so no process
/// the task can see or signal is strace (it could write into or truncate its own trace
/// through `/proc/<strace>/fd`), and the pids the task's forks return are still followed
/// (a child's relative exec resolved against its parent's directory).
#[tokio::test]
async fn strace_stays_out_of_the_tasks_reach() {
    for tracer in tracers_here() {
        let t = task();
        let trace = t.tmp.path().join("trace.txt");
        let script = "cat /proc/[0-9]*/comm > out/comm.txt; cd out && (./child.sh; true)";
        let inner = bwrap_argv(&t.cfg(), &exec::shell_argv(script, &[]));
        let (exit, log) = run(strace_argv(&trace, &inner, tracer), t.root.path()).await;
        assert_eq!(exit, ExitKind::Code(0), "{tracer:?}: {log}");
        let comm = std::fs::read_to_string(t.root.cwd().join("out/comm.txt")).unwrap();
        assert!(!comm.is_empty() && !comm.contains("strace"), "{tracer:?}: {comm}");
        let reads = trace_reads(&trace, t.root.path()).unwrap();
        assert!(reads.missing.iter().any(|m| m == "p/out/child.sh"), "{:?}", reads.missing);
    }
}

/// As a user without the right to make namespaces (`nobody`, when the tests run as root),
/// strace's pid namespace comes in a user namespace of its own, and traces as well; without
/// one, `unshare` is refused — why [`strace_available`] tries both.
#[tokio::test]
async fn strace_gets_its_namespace_as_a_user_without_rights() {
    if tracers_here().is_empty() || !nix::unistd::geteuid().is_root() {
        eprintln!("skipping: needs strace and root, to become another user");
        return;
    }
    let t = task();
    let status = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(t.tmp.path())
        .status()
        .unwrap();
    assert!(status.success());
    let trace = t.tmp.path().join("trace.txt");
    let script = "cat in.txt > out/copy.txt; cat ../sibling/secret.txt; \
                  cat /proc/[0-9]*/comm > out/comm.txt; id -u > out/uid.txt";
    let inner = bwrap_argv(&t.cfg(), &exec::shell_argv(script, &[]));
    let as_nobody = |tracer| {
        let mut argv: Vec<String> = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            .map(str::to_owned)
            .to_vec();
        argv.push("--".to_owned());
        argv.extend(strace_argv(&trace, &inner, tracer));
        argv
    };
    let (exit, _) = run(as_nobody(Tracer::OwnPidNs { user_ns: false }), t.root.path()).await;
    assert_ne!(exit, ExitKind::Code(0), "unshare --pid without the right");
    let (exit, log) = run(as_nobody(Tracer::OwnPidNs { user_ns: true }), t.root.path()).await;
    assert_eq!(exit, ExitKind::Code(0), "{log}");
    let read = |f: &str| std::fs::read_to_string(t.root.cwd().join(f)).unwrap();
    assert_eq!(read("out/uid.txt"), "65534\n");
    assert!(!read("out/comm.txt").contains("strace"), "{}", read("out/comm.txt"));
    let reads = undeclared_reads(&trace, t.root.path()).unwrap();
    assert_eq!(reads, ["sibling/secret.txt"], "trace: {}", trace.display());
}

/// A traced task that overruns its timeout is killed with every process under it: strace,
/// its pid namespace's init and the sandbox go with it.
#[tokio::test]
async fn a_traced_task_past_its_timeout_leaves_no_process() {
    for tracer in tracers_here() {
        let t = task();
        let trace = t.tmp.path().join("trace.txt");
        let marker = format!("{}", 900_000 + u32::from(tracer == Tracer::Host));
        let script = format!("sleep {marker} & sleep {marker}");
        let inner = bwrap_argv(&t.cfg(), &exec::shell_argv(&script, &[]));
        let argv = strace_argv(&trace, &inner, tracer);
        let (exit, _) = run_within(argv, t.root.path(), Duration::from_secs(1)).await;
        assert_eq!(exit, ExitKind::TimedOut, "{tracer:?}");
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.starts_with("sleep") && c.contains(&marker))
            .collect();
        assert!(left.is_empty(), "{tracer:?} left {left:?}");
    }
}

#[test]
fn detect_finds_bwrap_here() {
    if sandbox_here() {
        let SandboxStatus::Bwrap { version } = detect() else { panic!("detect changed its mind") };
        assert!(version.chars().next().is_some_and(|c| c.is_ascii_digit()), "{version}");
    }
}

/// A worker that starts while other programs add and remove mounts elsewhere on the host
/// (here `ip netns add`/`del`, as the farm's own tests and container runtimes do) still finds
/// its sandbox: the trial mounts what a task gets, not the host's whole `/`, whose recursive
/// remount failed whenever a mount went away under it. Needs root and `ip`; bounded by
/// count.
#[test]
fn the_probe_is_not_upset_by_mounts_coming_and_going_elsewhere() {
    if !sandbox_here() {
        return;
    }
    let ip_here = std::process::Command::new("ip")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !nix::unistd::geteuid().is_root() || !ip_here {
        eprintln!("skipping: needs root and `ip` to churn network namespaces");
        return;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let ip = |args: &[&str]| {
                std::process::Command::new("ip")
                    .args(args)
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            let mut made = 0;
            for i in 0..2_000 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let name = format!("pvprobe{}x{i}", std::process::id());
                if ip(&["netns", "add", &name]) {
                    made += 1;
                    ip(&["netns", "del", &name]);
                }
            }
            made
        })
    };
    let failures: Vec<String> = (0..120)
        .filter_map(|_| match detect() {
            SandboxStatus::Bwrap { .. } => None,
            SandboxStatus::Unavailable { reason } => Some(reason),
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let made = churn.join().expect("the churn thread panicked");
    assert!(made > 0, "no network namespace could be made: the test proves nothing");
    assert!(failures.is_empty(), "{} of 120 probes failed: {:?}", failures.len(), failures.first());
}

#[test]
fn a_missing_bwrap_is_unavailable() {
    let status = detect_with(&["/nonexistent/prova-test/bwrap"], Duration::from_secs(10));
    let SandboxStatus::Unavailable { reason } = status else { panic!("{status:?}") };
    assert!(reason.contains("not installed"), "{reason}");
}

/// A stand-in for bwrap: answers `--version`, then does `then` for the trial sandbox. Run
/// through `sh`, so the script is never executed directly (no ETXTBSY race with other
/// tests' forks).
fn fake_bwrap(dir: &Path, then: &str) -> PathBuf {
    let path = dir.join(unique("fake-bwrap"));
    let script =
        format!("if [ \"$1\" = --version ]; then echo 'bubblewrap 9.9.9'; exit 0; fi\n{then}\n");
    std::fs::write(&path, script).unwrap();
    path
}

#[test]
fn a_refused_namespace_is_unavailable_with_bwraps_words() {
    let tmp = tempfile::tempdir().unwrap();
    for msg in [
        "bwrap: setting up uid map: Permission denied",
        "bwrap: No permissions to creating new namespace",
    ] {
        let fake = fake_bwrap(tmp.path(), &format!("echo '{msg}' >&2; exit 1"));
        let status = detect_with(&["sh", fake.to_str().unwrap()], Duration::from_secs(10));
        let SandboxStatus::Unavailable { reason } = status else { panic!("{status:?}") };
        assert!(reason.contains(msg), "{reason}");
    }
    let fake = fake_bwrap(tmp.path(), "exit 0");
    let status = detect_with(&["sh", fake.to_str().unwrap()], Duration::from_secs(10));
    assert_eq!(status, SandboxStatus::Bwrap { version: "9.9.9".to_owned() });
}

#[test]
fn a_hanging_probe_is_unavailable_within_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = fake_bwrap(tmp.path(), "exec sleep 300");
    let started = std::time::Instant::now();
    let status = detect_with(&["sh", fake.to_str().unwrap()], Duration::from_millis(500));
    let SandboxStatus::Unavailable { reason } = status else { panic!("{status:?}") };
    assert!(reason.contains("no answer within"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(30), "the probe was not bounded");
}
