//! What a worker is asked to execute: a [`TaskSpec`], fully resolved by the coordinator (no
//! config lookups left for the worker), and what it reports back: an [`ExecReport`].

use serde::{Deserialize, Serialize};

use crate::ids::TaskId;

/// How a task's command is given in config: a string run by `sh -c`, or an argv list run
/// directly.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CommandLine {
    /// `sh -c <string>`; forwarded args become `"$@"` of the shell.
    Shell(String),
    /// Program and arguments, no shell; forwarded args are appended.
    Argv(Vec<String>),
}

impl CommandLine {
    /// The command as the user wrote it, for display.
    pub fn display(&self) -> String {
        match self {
            Self::Shell(s) => s.clone(),
            Self::Argv(v) => v.join(" "),
        }
    }
}

/// A task resolved for execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// `project#task`.
    pub id: TaskId,
    /// The project directory, workspace-relative (`""` for the workspace root). The command
    /// runs there.
    pub project_dir: String,
    /// What to run.
    pub command: CommandLine,
    /// Arguments forwarded from the command line (`prova run lint -- --fix`); only the
    /// requested tasks get them.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables to set on top of the executor's baseline, in order: the task's
    /// declared `env` that are set, then `pass_env` that are set, then the task's literal
    /// `env` assignments.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Names the task declares (`env`, `pass_env`) that the client left unset: unset for the
    /// task too, whatever the executor's baseline holds (a worker's own `TZ` never stands in
    /// for the client's unset one). Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unset_env: Vec<String>,
    /// Wall-clock limit in milliseconds; `None` is no limit.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Extra attempts after a failure.
    #[serde(default)]
    pub retries: u32,
    /// Output patterns as written in config (project-relative or `//`).
    #[serde(default)]
    pub outputs: Vec<String>,
    /// A long-running task (dev server): never cached, torn down when the graph is done.
    #[serde(default)]
    pub persistent: bool,
    /// For a persistent task, a regex its output must match before dependents may start.
    #[serde(default)]
    pub ready_when: Option<String>,
    /// Whether the sandbox keeps the network.
    #[serde(default)]
    pub network: bool,
    /// Farm placement: labels a worker must carry to run the task (omitted when empty, so
    /// frames of tasks without labels are unchanged).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// How proofs treat the task (`verify`, `verify_ignore`, `side_effects`); never keyed.
    /// Omitted when default, so frames of tasks without a policy are unchanged.
    #[serde(default, skip_serializing_if = "ProofPolicy::is_default")]
    pub proof: ProofPolicy,
    /// Runtime inputs a farm worker must reproduce before it runs the task: each command with
    /// the digest of its stdout on the client (`runtime = ["node --version"]`). Empty in
    /// local mode (the client ran them itself). Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime: Vec<RuntimeCheck>,
    /// The program the client's key folded for the command (`binary:<word>`): a farm worker
    /// resolves it the same way and refuses the task when its digest differs. Omitted when
    /// empty, so older frames are unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<ProgramCheck>,
    /// Words the command looks up on its `PATH` that the client found nowhere there (the
    /// key holds no program for them: `tool || fallback` ran the fallback): a farm worker
    /// that finds one refuses the task, and one that finds one after the run (the task or a
    /// neighbour installed it) withholds its outputs. Omitted when empty, so older frames
    /// are unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent_programs: Vec<String>,
    /// Entries its key folds by name only (`entries:` in the key's config, of its project
    /// directory and, through their keys, of its upstreams'): an exec root shows each as an empty directory or a file no read of which
    /// goes unseen (empty where the run is traced, a socket node where it is not), so a
    /// listing there sees what the key says, and a traced run that touches one is named as
    /// having read an undeclared path. Omitted when empty, so older frames are unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stand_ins: Vec<StandIn>,
}

/// An entry an exec root shows by name only ([`TaskSpec::stand_ins`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandIn {
    /// Workspace-relative path, directly in the task's project directory or an upstream's.
    pub path: String,
    /// A directory (else a file).
    #[serde(default)]
    pub dir: bool,
}

/// How `--verify` treats one task. Never part of a key: exempting a task or ignoring an
/// output changes what is proven, not what the task produces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofPolicy {
    /// Why the task is never re-run or traced by `--verify` (`verify = false`,
    /// `side_effects = true`); `None`: it is proven like any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt: Option<String>,
    /// Output globs (as written, project-relative or `//`) the determinism comparison leaves
    /// out (`verify_ignore`): a legitimately varying file such as a build-info timestamp.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
    /// `sandbox = true`: every execution runs as the inputs proof runs it — in an exec root
    /// holding only its declared inputs, sandboxed, traced — and fails on an undeclared read
    /// or a write outside its outputs, with or without `--verify`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandbox: bool,
    /// `upstream_outputs = "direct"` (needs `sandbox`): its exec roots hold the outputs of
    /// its direct dependencies only (a group's seen through), not of every transitive
    /// upstream, and its key folds just those — so a transitive upstream whose bytes moved
    /// leaves it a hit when the direct ones held. Decided on the coordinator (exec roots and
    /// keys); a worker only receives the smaller exec root.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct_upstreams: bool,
}

impl ProofPolicy {
    /// No exemption, nothing ignored, not sandboxed.
    pub fn is_default(&self) -> bool {
        self.exempt.is_none() && self.ignore.is_empty() && !self.sandbox && !self.direct_upstreams
    }
}

/// A program the client folded into a task's key (the default runtime input): the word the
/// command starts, and where and what it resolved to on the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramCheck {
    /// The command's first word (`tsc`, `/usr/bin/node`).
    pub word: String,
    /// The client's resolved path, for the message.
    pub path: String,
    /// BLAKE3 of the program's bytes on the client.
    pub digest: crate::Digest,
}

/// A runtime input the client folded into the key: a farm worker runs `command` the same
/// way and refuses the task when its stdout's digest differs (another toolchain there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeCheck {
    /// The command as written (run by `sh -c`).
    pub command: String,
    /// The digest of its stdout on the client.
    pub digest: crate::Digest,
    /// Its stdout on the client when short and not secret-looking (for the error message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<String>,
}

impl TaskSpec {
    /// `command` run in `project_dir` with every other field at its default: no arguments,
    /// env, timeout, retries, outputs or labels; not persistent; no network.
    pub fn new(id: TaskId, project_dir: impl Into<String>, command: CommandLine) -> Self {
        Self {
            id,
            project_dir: project_dir.into(),
            command,
            args: vec![],
            env: vec![],
            unset_env: vec![],
            timeout_ms: None,
            retries: 0,
            outputs: vec![],
            persistent: false,
            ready_when: None,
            network: false,
            labels: Default::default(),
            proof: ProofPolicy::default(),
            runtime: Vec::new(),
            programs: Vec::new(),
            absent_programs: Vec::new(),
            stand_ins: Vec::new(),
        }
    }
}

// The environment a task starts from (a prova worker's `exec::env`, and a REAPI action's,
// which a bot lays over its own defaults).

/// The names taken from the host into every task's environment.
///
/// - `PATH`: where programs are found; without it even `sh -c 'node …'` fails. (A farm
///   task's program is checked against the client's build: `TaskSpec.programs`.)
/// - `HOME`: tools keep their caches and config there (npm, cargo, git); many refuse to
///   start without it.
/// - `USER`, `LOGNAME`: who is running; some tools (ssh, git, some test runners) look them up
///   and fail when they are missing.
/// - `TMPDIR`: where temporary files go; a sandbox or CI machine often moves it.
///
/// Deliberately absent: `CI` (tools change behaviour under it, e.g. test watchers, so a task
/// that cares must declare it) and anything project- or tool-specific.
pub const HOST_VARS: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "TMPDIR"];

/// The names every task gets with the same value everywhere, whatever the host has: they
/// change what a tool prints (dates, sort order, messages, colours), so a worker's own `TZ`
/// or locale must never reach a task that did not declare it — two workers in different
/// zones would produce different bytes under one key.
///
/// - `TZ=UTC`: an unset `TZ` is not neutral, it reads the machine's `/etc/localtime`.
/// - `LANG=C.UTF-8`: UTF-8 file names and messages, the C collation and formats. `LC_ALL`,
///   `LC_CTYPE` and the other `LC_*` are never set (they would override it per machine).
/// - `TERM=dumb`: a task's output is a pipe into a log, not a terminal.
/// - `SHELL=/bin/sh`: the shell a tool spawns when it asks for "the user's shell".
///
/// `COLORTERM` and `NO_COLOR` are never passed: colour is presentation, and the log is not a
/// terminal. A determinism re-run still perturbs `TZ` and the locale when undeclared.
pub const FIXED_VARS: &[(&str, &str)] =
    &[("TZ", "UTC"), ("LANG", "C.UTF-8"), ("TERM", "dumb"), ("SHELL", "/bin/sh")];

/// How one execution of a process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitKind {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal (not by us).
    Signal(i32),
    /// Killed by us because it overran its timeout.
    TimedOut,
    /// Killed by us because the run was interrupted (Ctrl-C, SIGTERM, cancelled).
    Aborted,
    /// Could not be started at all.
    SpawnFailed(String),
}

impl ExitKind {
    /// Whether this is a clean exit 0.
    pub fn success(&self) -> bool {
        matches!(self, Self::Code(0))
    }

    /// A short description for summaries: the shell's conventional codes (127 not found,
    /// 126 not executable, 128 + N a child killed by signal N) and signals by name.
    pub fn describe(&self) -> String {
        match self {
            Self::Code(127) => "exit code 127: command not found".to_owned(),
            Self::Code(126) => {
                "exit code 126: not executable (permission denied, or not a program)".to_owned()
            }
            Self::Code(c @ 129..=192) if signal_name(c - 128).is_some() => {
                let n = c - 128;
                let name = signal_name(n).unwrap_or("?");
                format!("exit code {c}: a process it ran was killed by {name}{}", signal_hint(n))
            }
            Self::Code(c) => format!("exit code {c}"),
            Self::Signal(s) => match signal_name(*s) {
                Some(name) => format!("killed by {name} (signal {s}){}", signal_hint(*s)),
                None => format!("killed by signal {s}"),
            },
            Self::TimedOut => "timed out".to_owned(),
            Self::Aborted => "aborted".to_owned(),
            Self::SpawnFailed(e) => format!("could not start: {e}"),
        }
    }
}

/// The name of Linux signal `n` (`SIGKILL`), for the common ones.
pub fn signal_name(n: i32) -> Option<&'static str> {
    Some(match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => return None,
    })
}

/// What a death by signal `n` usually means, as a suffix.
fn signal_hint(n: i32) -> &'static str {
    match n {
        9 => " — out of memory?",
        11 | 7 => " — a crash (bad memory access)",
        6 => " — it aborted (a failed assertion?)",
        24 => " — over its CPU time limit",
        25 => " — over its file size limit",
        _ => "",
    }
}

/// Resource use of one execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecStats {
    /// Wall time in milliseconds.
    pub wall_ms: u64,
    /// User CPU time of the process and its waited-for descendants, in milliseconds.
    pub cpu_user_ms: u64,
    /// System CPU time, in milliseconds.
    pub cpu_sys_ms: u64,
    /// Peak resident set size of the largest process, in KiB.
    pub max_rss_kb: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_explained_by_their_conventions() {
        let d = |e: ExitKind| e.describe();
        assert_eq!(d(ExitKind::Code(1)), "exit code 1");
        assert_eq!(d(ExitKind::Code(127)), "exit code 127: command not found");
        assert!(d(ExitKind::Code(126)).starts_with("exit code 126: not executable"));
        assert_eq!(d(ExitKind::Signal(9)), "killed by SIGKILL (signal 9) — out of memory?");
        assert_eq!(d(ExitKind::Signal(15)), "killed by SIGTERM (signal 15)");
        assert_eq!(d(ExitKind::Signal(64)), "killed by signal 64", "an unnamed signal");
        assert_eq!(
            d(ExitKind::Code(137)),
            "exit code 137: a process it ran was killed by SIGKILL — out of memory?"
        );
        // 128 + an unnamed signal, and codes above the signal range, are plain codes.
        assert_eq!(d(ExitKind::Code(128 + 64)), "exit code 192");
        assert_eq!(d(ExitKind::Code(200)), "exit code 200");
    }
}
