//! Running `prova` with a deadline and looking at what it did.

use std::fmt;
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;

use crate::{DEFAULT_TIMEOUT, prova_bin};

/// After prova has exited, how long its stdout and stderr may stay open. Only a process that
/// inherited them — a leak — can hold them longer.
const PIPE_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A `prova` invocation, not started yet: `prova -C <dir> <args…>`.
#[derive(Clone, Debug)]
pub struct ProvaCmd {
    dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, Option<String>)>,
    timeout: Duration,
    stdout_closed: bool,
    head: Option<usize>,
    launcher: Vec<String>,
}

impl ProvaCmd {
    /// `prova -C dir args…` with prova's inherited environment minus its log settings.
    pub fn new<I, S>(dir: &Path, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            dir: dir.to_owned(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            stdout_closed: false,
            head: None,
            launcher: Vec::new(),
        }
    }

    /// Run from `rel`, a directory under the workspace (`-C root/rel`).
    pub fn cwd(mut self, rel: &str) -> Self {
        self.dir = self.dir.join(rel);
        self
    }

    /// Sets a variable in prova's environment.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), Some(value.to_owned())));
        self
    }

    /// Removes a variable from prova's environment.
    pub fn env_remove(mut self, name: &str) -> Self {
        self.env.push((name.to_owned(), None));
        self
    }

    /// The deadline of the whole run (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Gives prova a stdout whose reading end is already closed, as `prova … | head` once
    /// `head` has exited: every write fails with `EPIPE`.
    pub fn stdout_closed(mut self) -> Self {
        self.stdout_closed = true;
        self
    }

    /// Reads `lines` lines of prova's stdout, then closes the pipe, as `prova … | head -n
    /// lines` does: prova's later writes fail with `EPIPE`. `Output::stdout` holds those lines.
    pub fn head(mut self, lines: usize) -> Self {
        self.head = Some(lines);
        self
    }

    /// Starts prova through `launcher…` (which must exec it in place, keeping the pid), e.g.
    /// `["ip", "netns", "exec", NS]` to run it on a namespaced host ([`crate::netns`]).
    pub fn launcher<I, S>(mut self, launcher: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.launcher = launcher.into_iter().map(Into::into).collect();
        self
    }

    /// Runs to completion; panics (after killing it) if it outlives the deadline.
    pub fn run(self) -> Output {
        self.spawn().wait()
    }

    /// Starts prova in its own process group, stdin closed, stdout and stderr captured.
    pub fn spawn(self) -> Running {
        let mut cmd = match self.launcher.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(prova_bin());
                c
            }
            None => Command::new(prova_bin()),
        };
        cmd.arg("-C")
            .arg(&self.dir)
            .args(&self.args)
            .env_remove("PROVA_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(if self.stdout_closed { closed_pipe() } else { Stdio::piped() })
            .stderr(Stdio::piped())
            // Its own group: a deadline kill reaches prova without touching the test runner.
            .process_group(0);
        for (name, value) in &self.env {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        let shown = format!("prova -C {} {}", self.dir.display(), self.args.join(" "));
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting `{shown}`: {e}"));
        let pid = i32::try_from(child.id()).expect("pid fits in i32");
        let stdout = child.stdout.take();
        let stderr = child.stderr.take().expect("stderr is piped");

        let (line_tx, lines) = mpsc::channel();
        let head = self.head.unwrap_or(usize::MAX);
        std::thread::spawn(move || {
            // A closed stdout reads as empty: dropping the sender ends the channel.
            let Some(stdout) = stdout else { return };
            let mut r = BufReader::new(stdout);
            let mut buf = Vec::new();
            let mut read = 0;
            // Past `head` lines the reader (and so the pipe's reading end) is dropped.
            while read < head && matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
                read += 1;
                let line = String::from_utf8_lossy(&buf).trim_end_matches('\n').to_owned();
                if line_tx.send(line).is_err() {
                    break;
                }
                buf.clear();
            }
        });
        let (err_tx, stderr_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = BufReader::new(stderr).read_to_end(&mut text);
            let _ = err_tx.send(String::from_utf8_lossy(&text).into_owned());
        });
        let (exit_tx, exit) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = exit_tx.send(child.wait());
        });

        Running {
            shown,
            pid,
            deadline: Instant::now() + self.timeout,
            lines,
            seen: Vec::new(),
            stdout_closed: false,
            stderr: stderr_rx,
            exit,
            finished: false,
        }
    }
}

/// The writing end of a pipe whose reading end is closed.
fn closed_pipe() -> Stdio {
    let (read, write) = nix::unistd::pipe().expect("creating a pipe");
    drop(read);
    Stdio::from(write)
}

/// A `prova` that is running. Dropping it unfinished SIGKILLs its process group.
pub struct Running {
    shown: String,
    pid: i32,
    deadline: Instant,
    lines: Receiver<String>,
    seen: Vec<String>,
    stdout_closed: bool,
    stderr: Receiver<String>,
    exit: Receiver<std::io::Result<ExitStatus>>,
    finished: bool,
}

impl Running {
    /// prova's pid (also its process group id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `sig` to prova itself (not its group), as `kill -SIG pid` would.
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid), sig).unwrap_or_else(|e| panic!("kill -{sig} prova: {e}"));
    }

    /// The stdout lines read so far.
    pub fn stdout_so_far(&self) -> &[String] {
        &self.seen
    }

    /// Reads prova's stdout until `count` lines (in total, including ones already read) match
    /// `pred`; panics, naming `what`, at the deadline or if stdout closes first.
    pub fn wait_for_lines(&mut self, what: &str, count: usize, pred: impl Fn(&str) -> bool) {
        loop {
            if self.seen.iter().filter(|l| pred(l)).count() >= count {
                return;
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    let out = self.reap_after_kill();
                    panic!("`{}`: timed out waiting for {what}; killed\n{out}", self.shown);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.stdout_closed = true;
                    let out = self.reap_after_kill();
                    panic!("`{}`: stdout closed before {what}\n{out}", self.shown);
                }
            }
        }
    }

    /// Waits for prova to exit (killing it at the deadline, which fails the test) and for its
    /// stdout and stderr to close.
    pub fn wait(mut self) -> Output {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match self.exit.recv_timeout(left) {
            Ok(status) => {
                let status = status.unwrap_or_else(|e| panic!("waiting for `{}`: {e}", self.shown));
                self.collect(status)
            }
            Err(_) => {
                let out = self.reap_after_kill();
                panic!("`{}` did not finish within its deadline; killed\n{out}", self.shown);
            }
        }
    }

    /// SIGKILLs the group, then collects what there is.
    fn reap_after_kill(&mut self) -> Output {
        self.kill_group();
        let status = self
            .exit
            .recv_timeout(PIPE_CLOSE_TIMEOUT)
            .unwrap_or_else(|_| panic!("`{}` did not die after SIGKILL", self.shown))
            .unwrap_or_else(|e| panic!("waiting for `{}`: {e}", self.shown));
        self.collect(status)
    }

    fn kill_group(&self) {
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
    }

    /// After the exit: the rest of the output.
    fn collect(&mut self, status: ExitStatus) -> Output {
        self.finished = true;
        let pipes_by = Instant::now() + PIPE_CLOSE_TIMEOUT;
        while !self.stdout_closed {
            let left = pipes_by.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => self.stdout_closed = true,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "`{}` exited ({status}) but its stdout stayed open: a leaked process holds it",
                    self.shown
                ),
            }
        }
        let left = pipes_by.saturating_duration_since(Instant::now());
        let stderr = self.stderr.recv_timeout(left).unwrap_or_else(|_| {
            panic!(
                "`{}` exited ({status}) but its stderr stayed open: a leaked process holds it",
                self.shown
            )
        });
        let mut stdout = self.seen.join("\n");
        if !stdout.is_empty() {
            stdout.push('\n');
        }
        Output { shown: self.shown.clone(), status, stdout, stderr }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            self.kill_group();
        }
    }
}

/// How a finished `prova` run went.
#[derive(Debug)]
pub struct Output {
    shown: String,
    /// The exit status.
    pub status: ExitStatus,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "`{}` → {}", self.shown, self.status)?;
        writeln!(f, "--- stdout\n{}", self.stdout)?;
        write!(f, "--- stderr\n{}", self.stderr)
    }
}

impl Output {
    /// The exit code; `None` when prova died of a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics, showing everything prova printed, unless it exited with `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(code),
            "expected exit code {code} (signal: {:?})\n{self}",
            self.status.signal()
        );
        self
    }

    /// Panics unless stdout contains `needle`.
    #[track_caller]
    pub fn assert_stdout_contains(&self, needle: &str) -> &Self {
        assert!(self.stdout.contains(needle), "stdout lacks {needle:?}\n{self}");
        self
    }

    /// Panics unless stderr contains `needle`.
    #[track_caller]
    pub fn assert_stderr_contains(&self, needle: &str) -> &Self {
        assert!(self.stderr.contains(needle), "stderr lacks {needle:?}\n{self}");
        self
    }

    /// The text summary's counts line (` Tasks:   N succeeded, …`), trimmed.
    #[track_caller]
    pub fn tasks_line(&self) -> &str {
        self.stdout
            .lines()
            .find(|l| l.trim_start().starts_with("Tasks:"))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no `Tasks:` summary line\n{self}"))
    }

    /// Every stdout line parsed as JSON (`--json`).
    #[track_caller]
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("stdout line {l:?} is not JSON: {e}\n{self}"))
            })
            .collect()
    }

    /// Every stdout line parsed as JSON and checked against `schemas/events.json` (the
    /// `--json` event contract): every suite that reads events checks the contract too.
    #[track_caller]
    pub fn checked_json_lines(&self) -> Vec<Value> {
        let lines = self.json_lines();
        for l in &lines {
            if let Err(e) = crate::schema::check_event(l) {
                panic!("a --json line breaks schemas/events.json: {e}\nline: {l}\n{self}");
            }
        }
        lines
    }

    /// The `--json` events before the summary.
    #[track_caller]
    pub fn events(&self) -> Vec<Value> {
        let mut lines = self.checked_json_lines();
        lines.pop();
        lines
    }

    /// The `--json` summary: the last line must be `{"event":"summary","summary":{…}}`.
    #[track_caller]
    pub fn summary(&self) -> Value {
        let last = self.checked_json_lines().pop().unwrap_or_else(|| panic!("no output\n{self}"));
        assert_eq!(last["event"], "summary", "the last line is not the summary\n{self}");
        last["summary"].clone()
    }

    /// The summary's report of `task` (`project#name`).
    #[track_caller]
    pub fn report(&self, task: &str) -> Value {
        let summary = self.summary();
        let tasks = summary["tasks"].as_array().unwrap_or_else(|| panic!("no tasks\n{self}"));
        tasks
            .iter()
            .find(|t| t["task"] == task)
            .cloned()
            .unwrap_or_else(|| panic!("no report for {task}\n{self}"))
    }

    /// The summary's `status` of `task`: `succeeded`, `failed`, `skipped` or `aborted`.
    #[track_caller]
    pub fn status_of(&self, task: &str) -> String {
        let report = self.report(task);
        report["status"].as_str().unwrap_or_else(|| panic!("{task} has no status\n{self}")).into()
    }

    /// The `cache` outcome of `task` in the summary: `hit`, `saved`, `not_saved` or
    /// `uncached`.
    #[track_caller]
    pub fn cache_of(&self, task: &str) -> String {
        let report = self.report(task);
        report["cache"]["cache"]
            .as_str()
            .unwrap_or_else(|| panic!("{task} has no cache outcome\n{self}"))
            .into()
    }

    /// Why `task`'s entry was not saved (the `not_saved` reason); panics if it was not
    /// `not_saved`.
    #[track_caller]
    pub fn not_saved_reason(&self, task: &str) -> String {
        let report = self.report(task);
        assert_eq!(report["cache"]["cache"], "not_saved", "{task}\n{self}");
        report["cache"]["reason"]
            .as_str()
            .unwrap_or_else(|| panic!("{task}: not_saved without a reason\n{self}"))
            .into()
    }

    /// The summary line's key-pass counters (`--json`): `files`, `hashed`, `memo_hits`, ….
    #[track_caller]
    pub fn key_stats(&self) -> Value {
        let last = self.json_lines().pop().unwrap_or_else(|| panic!("no output\n{self}"));
        assert_eq!(last["event"], "summary", "the last line is not the summary\n{self}");
        last["keys"].clone()
    }

    /// Everything `task` printed (`--json` `output` events, in order), logs replayed from
    /// the cache included.
    #[track_caller]
    pub fn output_of(&self, task: &str) -> String {
        self.events()
            .iter()
            .filter(|e| e["event"] == "output" && e["task"] == task)
            .map(|e| e["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The `--json` notices (`warn` or `info`) about `task`, as `level: message`.
    #[track_caller]
    pub fn notices_of(&self, task: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == "notice" && e["task"] == task)
            .map(|e| format!("{}: {}", e["level"].as_str().unwrap_or("?"), e["message"]))
            .collect()
    }

    /// The stdout lines of `task` in prefixed mode (`task | line`), prefixes removed.
    pub fn task_lines(&self, task: &str) -> Vec<String> {
        self.stdout
            .lines()
            .filter_map(|l| {
                let (prefix, rest) = l.split_once(" | ")?;
                (prefix.trim_end() == task).then(|| rest.to_owned())
            })
            .collect()
    }
}
