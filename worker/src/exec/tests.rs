//! The local executor against real processes. Nothing here sleeps to synchronise: readiness
//! comes through the ready channel, pids through files the scripts write, and every wait is
//! bounded by [`WAIT`] and says what it waited for.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use prova_protocol::spec::ExitKind;
use prova_protocol::task::OwnedTask;
use regex::Regex;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::*;

/// The bound on every wait in these tests. Far above anything a healthy run takes, far below
/// the `sleep 300` the scripts use to stand for "never ends by itself".
const WAIT: Duration = Duration::from_secs(60);

fn host_baseline() -> Vec<(String, String)> {
    env::baseline_env(|k| std::env::var(k).ok())
}

/// `sh -c script sh args...` in `cwd` with the host baseline and a short grace.
fn sh(script: &str, args: &[&str], cwd: &Path) -> ProcessRequest {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let mut req = ProcessRequest::new(shell_argv(script, &args), cwd);
    req.env = host_baseline();
    req.kill_grace = Duration::from_millis(500);
    req
}

async fn bounded<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// Run to completion, collecting the forwarded chunks.
async fn run_collect(req: ProcessRequest) -> (ProcessResult, Vec<Vec<u8>>) {
    let (tx, mut rx) = mpsc::channel(16);
    let collect = async move {
        let mut chunks = Vec::new();
        while let Some(c) = rx.recv().await {
            chunks.push(c);
        }
        chunks
    };
    let io = ProcessIo { output: tx, ready: None };
    let run = LocalExecutor.run(req, io, CancellationToken::new());
    let (result, chunks) =
        bounded("the process to finish", async { tokio::join!(run, collect) }).await;
    (result.expect("executor error"), chunks)
}

async fn run_quiet(req: ProcessRequest) -> ProcessResult {
    run_collect(req).await.0
}

/// A run in the background that signals readiness, with its cancel token.
struct Background {
    ready: oneshot::Receiver<()>,
    cancel: CancellationToken,
    task: OwnedTask<Result<ProcessResult, ExecError>>,
}

fn start(req: ProcessRequest) -> Background {
    let (tx, rx) = mpsc::channel(16);
    drop(rx); // output is still captured into the log
    let (ready_tx, ready) = oneshot::channel();
    let cancel = CancellationToken::new();
    let io = ProcessIo { output: tx, ready: Some(ready_tx) };
    let task = OwnedTask::spawn("test.process", LocalExecutor.run(req, io, cancel.clone()));
    Background { ready, cancel, task }
}

impl Background {
    async fn wait_ready(&mut self) {
        bounded("readiness", &mut self.ready).await.expect("ready sender dropped: process ended");
    }

    async fn finish(self) -> ProcessResult {
        bounded("the process to finish", self.task)
            .await
            .expect("run panicked")
            .expect("executor error")
    }
}

fn text(log: &CapturedLog) -> String {
    String::from_utf8_lossy(&log.bytes).into_owned()
}

/// The pids a script wrote to `file`, one a line.
fn read_pids(file: &Path) -> Vec<Pid> {
    let s = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("pid file {} not written: {e}", file.display()));
    s.lines().map(|l| Pid::from_raw(l.trim().parse().expect("pid"))).collect()
}

/// Gone means no such process, or a zombie waiting for its (new) parent to reap it.
fn is_gone(pid: Pid) -> bool {
    if kill(pid, None) == Err(Errno::ESRCH) {
        return true;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 3, after the parenthesised command name, is the state.
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        || stat.is_empty()
}

/// Poll (bounded) until `pid` is gone: reparented orphans are reaped by init in its own time.
async fn assert_gone(pid: Pid) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is_gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} still alive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- environment ----------------------------------------------------------------------

#[tokio::test]
async fn child_sees_only_the_given_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = ProcessRequest::new(vec!["env".into()], dir.path());
    req.env = env::compose_env(
        &env::baseline_env(|k| (k == "PATH").then(|| std::env::var("PATH").unwrap_or_default())),
        &[("PROVA_DECLARED".into(), "yes".into())],
        &[],
    );
    let parent: BTreeSet<String> = std::env::vars().map(|(k, _)| k).collect();
    assert!(parent.iter().any(|k| k != "PATH"), "the test needs some other variable set");

    let result = run_quiet(req).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    let out = text(&result.log);
    let names: BTreeSet<&str> =
        out.lines().filter_map(|l| l.split_once('=')).map(|(k, _)| k).collect();
    // …the fixed baseline (the same everywhere), and the tree marker, which prova always sets.
    let fixed = env::FIXED_VARS.iter().map(|(k, _)| *k);
    let expected: BTreeSet<&str> =
        ["PATH", "PROVA_DECLARED", super::tree::MARKER_VAR].into_iter().chain(fixed).collect();
    assert_eq!(names, expected, "child env:\n{out}");
    assert!(out.contains("PROVA_DECLARED=yes\n"));
    for (k, v) in env::FIXED_VARS {
        assert!(out.lines().any(|l| l == format!("{k}={v}")), "{k} is not {v}:\n{out}");
    }
    // e.g. CARGO_PKG_NAME, set for us by cargo, must not leak; nor the parent's own TZ, TERM.
    for (leaked, value) in std::env::vars().filter(|(k, _)| k != "PATH") {
        assert!(
            !out.lines().any(|l| l == format!("{leaked}={value}"))
                || env::FIXED_VARS.contains(&(leaked.as_str(), value.as_str())),
            "{leaked} leaked into the child"
        );
    }
}

#[tokio::test]
async fn umask_is_applied_in_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = sh("umask", &[], dir.path());
    req.umask = Some(0o027);
    let result = run_quiet(req).await;
    assert_eq!(text(&result.log).trim(), "0027");
}

#[tokio::test]
async fn forwarded_args_are_appended_to_a_command_without_positionals() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = ["a b", "--fix", "it's", "$(touch pwned)", "*", ""];
    let req = sh("printf '%s|'", &hostile, dir.path());
    assert_eq!(text(&run_quiet(req).await.log), "a b|--fix|it's|$(touch pwned)|*||");
    assert!(!dir.path().join("pwned").exists(), "an argument was run as shell code");
}

#[test]
fn positional_parameters_are_recognised() {
    for cmd in ["x \"$@\"", "x $*", "x $1", "x ${1}", "x ${@:-}", "echo $#"] {
        assert_eq!(shell_argv(cmd, &["a".to_owned()]).len(), 5, "{cmd}");
    }
    assert_eq!(shell_argv("echo ${#}", &["a".to_owned()]).len(), 5);
    for cmd in ["x $HOME", "x $$", "x ${HOME}", "x ${#HOME}", "x $0", "eslint ."] {
        assert_eq!(shell_argv(cmd, &["a".to_owned()]).len(), 4, "{cmd}");
    }
}

#[tokio::test]
async fn forwarded_args_reach_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let req = sh("printf '%s|' \"$@\"", &["a b", "--fix"], dir.path());
    assert_eq!(text(&run_quiet(req).await.log), "a b|--fix|");
}

// ---- exit ---------------------------------------------------------------------------

#[tokio::test]
async fn exit_codes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run_quiet(sh("true", &[], dir.path())).await.exit, ExitKind::Code(0));
    assert_eq!(run_quiet(sh("exit 3", &[], dir.path())).await.exit, ExitKind::Code(3));
}

#[tokio::test]
async fn death_by_signal_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let result = run_quiet(sh("kill -USR1 $$", &[], dir.path())).await;
    assert_eq!(result.exit, ExitKind::Signal(libc::SIGUSR1));
}

#[tokio::test]
async fn missing_program_is_a_spawn_failure() {
    let dir = tempfile::tempdir().unwrap();
    for program in ["/nonexistent/prova-no-such-program", "prova-no-such-program-on-path"] {
        let mut req = ProcessRequest::new(vec![program.into()], dir.path());
        req.env = host_baseline();
        match run_quiet(req).await.exit {
            ExitKind::SpawnFailed(msg) => assert!(msg.contains(program), "{msg}"),
            other => panic!("expected a spawn failure, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn sigpipe_has_its_default_action_in_the_child() {
    // prova (Rust) ignores SIGPIPE; a task must not inherit that, or `yes` never stops.
    let dir = tempfile::tempdir().unwrap();
    let (result, chunks) = run_collect(sh("yes | head -n 1", &[], dir.path())).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    assert_eq!(chunks.concat(), b"y\n");
}

#[tokio::test]
async fn a_script_without_a_shebang_runs_under_sh_and_path_is_the_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("greet");
    std::fs::write(&script, "echo \"hello $1\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut req = ProcessRequest::new(vec!["greet".into(), "there".into()], dir.path());
    req.env = host_baseline();
    // Found on the task's PATH (not prova's), which lists a directory relative to the task's.
    req.env.retain(|(k, _)| k != "PATH");
    req.env.push(("PATH".into(), "bin:/usr/bin:/bin".into()));
    let (result, chunks) = run_collect(req).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    assert_eq!(chunks.concat(), b"hello there\n");
}

#[tokio::test]
async fn the_child_environment_is_in_name_order_one_value_per_name() {
    // A determinism re-run reverses this order; the first run must have a fixed one.
    let dir = tempfile::tempdir().unwrap();
    let mut req = sh("tr '\\0' '\\n' < /proc/$$/environ | grep -v ^PROVA_TREE=", &[], dir.path());
    req.env = vec![
        ("ZED".into(), "1".into()),
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("ALPHA".into(), "old".into()),
        ("ALPHA".into(), "2".into()),
    ];
    let (result, chunks) = run_collect(req).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    assert_eq!(String::from_utf8_lossy(&chunks.concat()), "ALPHA=2\nPATH=/usr/bin:/bin\nZED=1\n");
}

#[tokio::test]
async fn missing_cwd_and_empty_argv_are_spawn_failures() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("no-such-dir");
    match run_quiet(sh("true", &[], &gone)).await.exit {
        ExitKind::SpawnFailed(msg) => assert!(msg.contains("no-such-dir"), "{msg}"),
        other => panic!("expected a spawn failure, got {other:?}"),
    }
    let req = ProcessRequest::new(Vec::new(), dir.path());
    assert!(matches!(run_quiet(req).await.exit, ExitKind::SpawnFailed(_)));
}

// ---- timeout, cancel, leftovers -----------------------------------------------------

#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = sh("sleep 300 & echo $! > \"$1\"; sleep 300", &["pidfile"], dir.path());
    req.timeout = Some(Duration::from_secs(1));
    let result = run_quiet(req).await;
    assert_eq!(result.exit, ExitKind::TimedOut);
    assert!(result.stats.wall_ms < 100_000, "killed well before the sleeps end");
    for pid in read_pids(&dir.path().join("pidfile")) {
        assert_gone(pid).await;
    }
}

#[tokio::test]
async fn a_tree_ignoring_sigterm_is_sigkilled_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let script = "trap '' TERM; echo $$ > \"$1\"; sleep 300 & echo $! >> \"$1\"; wait";
    let mut req = sh(script, &["pidfile"], dir.path());
    req.timeout = Some(Duration::from_secs(1));
    req.kill_grace = Duration::from_millis(300);
    let result = run_quiet(req).await;
    assert_eq!(result.exit, ExitKind::TimedOut);
    // Nothing can end it before timeout + grace: SIGTERM is ignored by the whole tree.
    assert!(result.stats.wall_ms >= 1300, "wall {} ms", result.stats.wall_ms);
    assert!(result.stats.wall_ms < 100_000, "killed well before the sleep ends");
    let pids = read_pids(&dir.path().join("pidfile"));
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert_gone(pid).await;
    }
}

#[tokio::test]
async fn cancel_aborts_and_kills_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo $$ > \"$1\"; sleep 300 & echo $! >> \"$1\"; echo ready; wait";
    let mut req = sh(script, &["pidfile"], dir.path());
    req.ready = Some(Regex::new("^ready$").unwrap());
    let mut bg = start(req);
    bg.wait_ready().await;
    let pids = read_pids(&dir.path().join("pidfile"));
    bg.cancel.cancel();
    let result = bg.finish().await;
    assert_eq!(result.exit, ExitKind::Aborted);
    assert!(text(&result.log).contains("ready"));
    for pid in pids {
        assert_gone(pid).await;
    }
}

#[tokio::test]
async fn an_already_cancelled_run_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, _rx) = mpsc::channel(1);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let req = sh("echo started > marker", &[], dir.path());
    let io = ProcessIo { output: tx, ready: None };
    let result = bounded("the run", LocalExecutor.run(req, io, cancel)).await.unwrap();
    assert_eq!(result.exit, ExitKind::Aborted);
    assert!(!dir.path().join("marker").exists());
}

#[tokio::test]
async fn dropping_the_run_kills_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo $$ > \"$1\"; sleep 300 & echo $! >> \"$1\"; echo ready; wait";
    let mut req = sh(script, &["pidfile"], dir.path());
    req.ready = Some(Regex::new("^ready$").unwrap());
    let mut bg = start(req);
    bg.wait_ready().await;
    let pids = read_pids(&dir.path().join("pidfile"));
    bg.task.abort();
    let joined = bounded("the aborted run", bg.task).await;
    assert!(joined.is_err_and(|e| e.is_cancelled()));
    for pid in pids {
        assert_gone(pid).await;
    }
}

#[tokio::test]
async fn a_background_grandchild_holding_stdout_does_not_hang_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = sh("sleep 300 & echo $! > \"$1\"; echo main done", &["pidfile"], dir.path());
    // The leftover dies of SIGTERM at once; the run must not sit out this grace.
    req.kill_grace = Duration::from_secs(30);
    let started = Instant::now();
    let result = run_quiet(req).await;
    assert!(started.elapsed() < Duration::from_secs(30), "sat out the grace");
    assert_eq!(result.exit, ExitKind::Code(0));
    let pid = read_pids(&dir.path().join("pidfile"))[0];
    // The leftover is named in the log, after the task's own output.
    assert_eq!(
        text(&result.log),
        format!(
            "main done\nprova: warning: the task left 1 process running after it exited (sleep {pid}); killed it\n"
        )
    );
    assert_gone(pid).await;
}

#[tokio::test]
async fn leftovers_ignoring_sigterm_or_detached_from_stdout_are_killed() {
    let dir = tempfile::tempdir().unwrap();
    let script = "(trap '' TERM; exec sleep 300) & echo $! > \"$1\"; \
                  sleep 300 >/dev/null 2>&1 & echo $! >> \"$1\"; echo main done";
    let mut req = sh(script, &["pidfile"], dir.path());
    req.kill_grace = Duration::from_millis(200);
    let result = run_quiet(req).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    let pids = read_pids(&dir.path().join("pidfile"));
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert_gone(pid).await;
    }
}

const PDEATHSIG_VAR: &str = "PROVA_EXEC_TEST_PDEATHSIG_DIR";

/// Run by [`a_child_dies_with_a_crashed_parent`] in a separate process (this test binary,
/// re-executed): starts a child, says so on stdout, and waits to be SIGKILLed.
#[tokio::test]
#[ignore = "helper process for a_child_dies_with_a_crashed_parent"]
async fn pdeathsig_helper() {
    let Some(dir) = std::env::var_os(PDEATHSIG_VAR) else { return };
    let mut req = sh("echo $$ > pidfile; echo ready; exec sleep 300", &[], Path::new(&dir));
    req.ready = Some(Regex::new("^ready$").unwrap());
    let mut bg = start(req);
    bg.wait_ready().await;
    println!("helper-ready");
    let _ = bg.finish().await;
}

#[tokio::test]
async fn a_child_dies_with_a_crashed_parent() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut helper = tokio::process::Command::new(exe)
        .args(["--exact", "exec::tests::pdeathsig_helper", "--ignored", "--nocapture"])
        .env(PDEATHSIG_VAR, dir.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(helper.stdout.take().unwrap()).lines();
    bounded("the helper to start its child", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line == "helper-ready" {
                return;
            }
        }
        panic!("helper exited before its child was ready");
    })
    .await;
    let child = read_pids(&dir.path().join("pidfile"))[0];
    assert!(!is_gone(child));
    // SIGKILL: no destructor, no guard, no cancel runs in the helper.
    helper.start_kill().unwrap();
    bounded("the helper to die", helper.wait()).await.unwrap();
    assert_gone(child).await;
}

// ---- output -------------------------------------------------------------------------

#[tokio::test]
async fn stdout_and_stderr_are_merged_in_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo out1; echo err1 >&2; echo out2; echo err2 >&2; printf x; printf 'y\\nz'";
    let (result, chunks) = run_collect(sh(script, &[], dir.path())).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    assert_eq!(result.log.bytes, chunks.concat(), "the log is what was forwarded");
    for c in &chunks {
        assert!(
            c.ends_with(b"\n") || c == b"z",
            "chunk splits a line: {:?}",
            String::from_utf8_lossy(c)
        );
    }
    // Lines as forwarded: a trailing partial line is its own chunk (in the log it may be
    // directly followed by the other stream's next line).
    let chunks: Vec<String> =
        chunks.iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect();
    let lines: Vec<&str> = chunks.iter().flat_map(|c| c.split_inclusive('\n')).collect();
    let at = |l: &str| {
        lines.iter().position(|x| *x == l).unwrap_or_else(|| panic!("{l:?} missing in {lines:?}"))
    };
    assert!(at("out1\n") < at("out2\n") && at("out2\n") < at("xy\n") && at("xy\n") < at("z"));
    assert!(at("err1\n") < at("err2\n"));
    assert_eq!(lines.len(), 6);
}

#[tokio::test]
async fn a_final_line_without_newline_is_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let (result, chunks) = run_collect(sh("printf 'no newline'", &[], dir.path())).await;
    assert_eq!(text(&result.log), "no newline");
    assert_eq!(chunks, [b"no newline".to_vec()]);
}

#[tokio::test]
async fn huge_output_keeps_head_and_tail_and_counts_the_middle() {
    const TOTAL: usize = 10_000_000;
    let dir = tempfile::tempdir().unwrap();
    let mut req = sh("yes 0123456789 | head -c \"$1\"", &[&TOTAL.to_string()], dir.path());
    req.log_limit = 64 * 1024;
    let (result, chunks) = run_collect(req).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    // Everything was forwarded, in whole lines (the stream ends in a partial line).
    assert_eq!(chunks.iter().map(Vec::len).sum::<usize>(), TOTAL);
    let (last, rest) = chunks.split_last().unwrap();
    assert!(rest.iter().all(|c| c.ends_with(b"\n")));
    assert_eq!(last.as_slice(), b"0123456789");
    // Only the head and tail were kept.
    let log = &result.log;
    assert_eq!(log.bytes.len(), 64 * 1024);
    assert_eq!(log.omitted, (TOTAL - 64 * 1024) as u64);
    assert_eq!(log.head_len, 32 * 1024);
    assert!(log.bytes.starts_with(b"0123456789\n0123456789\n"));
    assert!(log.bytes.ends_with(b"0123456789\n0123456789"));
    let shown = String::from_utf8(log.to_bytes_with_notice()).unwrap();
    assert!(shown.contains(&format!("\n[prova: {} bytes of output omitted]\n", TOTAL - 64 * 1024)));
}

#[tokio::test]
async fn a_dropped_receiver_does_not_stop_capture() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let req = sh("yes abc | head -c 1000000", &[], dir.path());
    let io = ProcessIo { output: tx, ready: None };
    let result =
        bounded("the run", LocalExecutor.run(req, io, CancellationToken::new())).await.unwrap();
    assert_eq!(result.exit, ExitKind::Code(0));
    assert_eq!(result.log.bytes.len(), 1_000_000);
}

#[tokio::test]
async fn a_receiver_that_never_reads_cannot_hang_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, _rx_held_but_never_read) = mpsc::channel(1);
    let mut req = sh("yes abc | head -c 10000000", &[], dir.path());
    // The pipes fill up and the child blocks: only the timeout can end this.
    req.timeout = Some(Duration::from_millis(300));
    req.kill_grace = Duration::from_millis(100);
    let io = ProcessIo { output: tx, ready: None };
    let result =
        bounded("the run", LocalExecutor.run(req, io, CancellationToken::new())).await.unwrap();
    assert_eq!(result.exit, ExitKind::TimedOut);
    assert!(result.log.bytes.starts_with(b"abc\n"));
}

// ---- readiness ----------------------------------------------------------------------

#[tokio::test]
async fn ready_fires_on_a_matching_line_then_cancel_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo booting; echo 'listening on 3000' >&2; exec sleep 300";
    let mut req = sh(script, &[], dir.path());
    req.ready = Some(Regex::new(r"^listening on \d+$").unwrap());
    let mut bg = start(req);
    bg.wait_ready().await;
    bg.cancel.cancel();
    let result = bg.finish().await;
    assert_eq!(result.exit, ExitKind::Aborted);
    assert!(text(&result.log).contains("listening on 3000\n"));
}

#[tokio::test]
async fn ready_fires_at_spawn_without_a_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let mut bg = start(sh("exec sleep 300", &[], dir.path()));
    bg.wait_ready().await;
    bg.cancel.cancel();
    assert_eq!(bg.finish().await.exit, ExitKind::Aborted);
}

#[tokio::test]
async fn ready_is_dropped_unfired_when_nothing_matches() {
    let dir = tempfile::tempdir().unwrap();
    let mut req = sh("echo almost ready", &[], dir.path());
    req.ready = Some(Regex::new("^ready$").unwrap());
    let bg = start(req);
    let fired = bounded("the ready channel to settle", bg.ready).await;
    assert!(fired.is_err(), "fired without a match");
    let result = bounded("the run", bg.task).await.unwrap().unwrap();
    assert_eq!(result.exit, ExitKind::Code(0));
}

// ---- stats --------------------------------------------------------------------------

#[tokio::test]
async fn rusage_reports_cpu_and_peak_rss() {
    let dir = tempfile::tempdir().unwrap();
    let burn = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";
    let result = run_quiet(sh(burn, &[], dir.path())).await;
    assert_eq!(result.exit, ExitKind::Code(0));
    assert!(result.stats.cpu_user_ms > 0, "{:?}", result.stats);
    assert!(result.stats.max_rss_kb > 0, "{:?}", result.stats);
}

#[test]
fn argv_helpers() {
    let args = vec!["--fix".to_owned()];
    assert_eq!(shell_argv("eslint .", &args), ["sh", "-c", "eslint . --fix", "sh"]);
    assert_eq!(shell_argv("eslint \"$@\"", &args), ["sh", "-c", "eslint \"$@\"", "sh", "--fix"]);
    assert_eq!(shell_argv("eslint .", &[]), ["sh", "-c", "eslint .", "sh"]);
    let argv = vec!["cargo".to_owned(), "test".to_owned()];
    assert_eq!(argv_with_args(&argv, &args), ["cargo", "test", "--fix"]);
    let cmd = CommandLine::Argv(argv);
    assert_eq!(command_argv(&cmd, &args), ["cargo", "test", "--fix"]);
}
