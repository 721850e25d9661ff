//! The worker link: what a coordinator asks of a worker and what the worker reports. The
//! same messages flow over an in-process channel (local mode) and over QUIC (farm), so the
//! in-process worker is simply another worker link.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::ids::AttemptId;
use crate::manifest::OutputManifest;
use crate::spec::{ExecStats, ExitKind, TaskSpec};
use crate::wire::InputRef;

/// Where and how an assignment executes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// In the workspace itself (local mode's default): cwd = `<root>/<project_dir>`. Only
    /// meaningful in-process: the coordinator never sends it to a farm worker (which does not
    /// itself refuse it).
    InPlace {
        /// The workspace root on this machine.
        workspace_root: PathBuf,
        /// Workspace files among the task's outputs that its clean must never delete: git
        /// tracks them, or a task declares them as inputs. A clean that meets one deletes
        /// nothing and fails the attempt (issue 27). Never on the wire.
        #[serde(skip)]
        protected: Vec<ProtectedPath>,
    },
    /// In a fresh exec root holding only the declared inputs and the upstream artifacts
    /// (farm workers; local proof runs), sandboxed where the worker can.
    ExecRoot {
        /// The task's input files (materialised read-only).
        inputs: Vec<InputRef>,
        /// Upstream artifacts (blob digest, size), unpacked at their paths.
        upstream: Vec<(Digest, u64)>,
        /// Where the bytes come from when this is a local exec root: the workspace root
        /// (inputs are copied from it, upstream artifacts read from the local cache).
        #[serde(default)]
        local_source: Option<PathBuf>,
        /// For a local exec root: the cache's `blobs/` directory, where upstream artifacts are.
        #[serde(default)]
        local_blobs: Option<PathBuf>,
    },
}

/// A workspace file no clean or restore of a task may delete or overwrite, whatever its
/// outputs say, and why (`git tracks it`, `it is an input of task p#lint`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedPath {
    /// Workspace-relative.
    pub path: String,
    /// Why, as a clause.
    pub why: String,
}

/// Perturbations of a determinism re-run (brief §7): what no declared input may depend on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perturb {
    /// Umask for the task.
    pub umask: Option<u32>,
    /// Environment values overriding the baseline when the task does not declare them
    /// (`TZ`, `LANG`, `LC_ALL`, `USER`, `LOGNAME`, `HOSTNAME`).
    pub env: Vec<(String, String)>,
    /// Reverse the environment order.
    pub reverse_env: bool,
    /// Hostname the task sees (needs the sandbox's UTS namespace).
    #[serde(default)]
    pub hostname: Option<String>,
    /// The uid the task runs as inside the sandbox.
    #[serde(default)]
    pub uid: Option<u32>,
    /// A different parent directory for the exec root, so the task sees another path.
    #[serde(default)]
    pub root_parent: Option<PathBuf>,
    /// Shift the realtime clock by this libfaketime offset (`+7d`) where libfaketime is
    /// installed on the worker.
    #[serde(default)]
    pub clock: Option<String>,
    /// Restrict the task to one CPU (what `nproc` and thread pools read) when the worker has
    /// more than one.
    #[serde(default)]
    pub one_cpu: bool,
    /// Give the task its own `TMPDIR`, a directory the first execution did not see.
    #[serde(default)]
    pub tmpdir: bool,
    /// Create the exec root's files in another order, so directory listings that are not
    /// sorted come out in another order (on a file system that lists in creation order).
    #[serde(default)]
    pub shuffle_inputs: bool,
}

/// One unit of work for a worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Assignment {
    /// The lease: every report about this work carries it.
    pub attempt: AttemptId,
    /// What to run.
    pub spec: TaskSpec,
    /// Where.
    pub placement: Placement,
    /// Remove the declared outputs before each attempt (cached tasks: nothing stale may be
    /// mistaken for an output).
    #[serde(default)]
    pub clean_outputs: bool,
    /// Collect, fingerprint and (when `pack_to` is set) pack the outputs after a success.
    #[serde(default)]
    pub collect_outputs: bool,
    /// Where to write the packed artifact (local mode: the cache's staging directory).
    #[serde(default)]
    pub pack_to: Option<PathBuf>,
    /// Perturbations (determinism re-runs only).
    #[serde(default)]
    pub perturb: Option<Perturb>,
    /// Trace file lookups (strace) and report the paths under the exec root the task
    /// tried to read but that were not there (input-completeness proof).
    #[serde(default)]
    pub trace_reads: bool,
    /// With `trace_reads`: a local survey (the whole workspace visible, naming every read
    /// in one round) runs only after a traced run that failed, not after every run whose
    /// trace met a place where its exec root and the workspace differ. Set for a
    /// `sandbox = true` execution outside `--verify=inputs`: it is confined to its exec root
    /// in every execution, so what it read there is all its key must answer for, and the
    /// survey only names more of what a failure was missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub survey_on_failure: bool,
}

/// Coordinator → worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToWorker {
    /// Start this work.
    Assign(Box<Assignment>),
    /// Stop this attempt (interrupt, or a persistent task's teardown); it still reports
    /// `Finished`.
    Cancel {
        /// Which.
        attempt: AttemptId,
    },
}

/// What a finished attempt produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outputs {
    /// Every output entry.
    pub manifest: OutputManifest,
    /// Its content fingerprint.
    pub fingerprint: Digest,
    /// The packed artifact's digest and size, when packed.
    pub artifact: Option<(Digest, u64)>,
}

/// The end of an assignment (after its retries).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finished {
    /// Which.
    pub attempt: AttemptId,
    /// How the last try ended.
    pub exit: ExitKind,
    /// Tries made (1 + retries used).
    pub tries: u32,
    /// Resource use of the last try.
    pub stats: ExecStats,
    /// Combined stdout+stderr of the last try, bounded.
    #[serde(with = "serde_bytes")]
    pub log: Vec<u8>,
    /// Bytes of log dropped from the middle to stay within the bound.
    pub log_omitted: u64,
    /// Outputs, when asked for and the task succeeded.
    pub outputs: Option<Outputs>,
    /// Outputs declared as literal paths that do not exist after a success.
    #[serde(default)]
    pub missing_literals: Vec<String>,
    /// Why outputs could not be collected or packed, when that failed.
    #[serde(default)]
    pub output_error: Option<String>,
    /// With `trace_reads`: what the trace found.
    #[serde(default)]
    pub reads: Option<ReadsReport>,
    /// How the task was isolated. On the wire, the word it always was (see [`Isolation`]).
    #[serde(default)]
    pub isolation: Isolation,
    /// For a perturbed re-run: what the worker changed, and what it could not.
    #[serde(default)]
    pub perturbed: Option<crate::events::Perturbations>,
    /// The worker gives the assignment back for a reason of its own (no slot, no disk,
    /// shutting down, its outputs could not be packed or uploaded): nothing in this report
    /// is a result. The farm runs the task elsewhere without charging its retry budget.
    /// Omitted when `None`, so reports of ordinary work are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handback: Option<HandBack>,
    /// What the worker knows about how the last try ended beyond its [`ExitKind`]: for exit
    /// 127 (command not found), the `PATH` the command was looked up in. Omitted when
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_detail: Option<String>,
    /// In an exec root: what the task created, changed or removed in the directories the
    /// sandbox let it write (those holding its outputs) outside its declared outputs. Such
    /// a write would be dropped with the root, so the task fails rather than pass without
    /// it. Omitted when `None` (nothing, or not an exec root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrote_outside: Option<WroteOutside>,
    /// Why the outputs of a run that succeeded must not be cached, found by the worker after
    /// it (a program the command looks up appeared on, or changed on, the worker's `PATH`
    /// while the task ran: the key no longer says what ran). Omitted when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

/// How a task was isolated ([`Finished::isolation`]). On the wire (and in every log that
/// prints it), the word the field carried when it was a string: `""`, `bwrap`, `none`,
/// `in-place`, `reapi`; the encoding is unchanged, so no protocol version moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Isolation {
    /// It never ran (the report says why): `""`.
    #[default]
    #[serde(rename = "")]
    NotRun,
    /// In an exec root under bubblewrap: `bwrap`.
    #[serde(rename = "bwrap")]
    Bwrap,
    /// In an exec root, without a sandbox (the worker has none): `none`.
    #[serde(rename = "none")]
    Unsandboxed,
    /// In the workspace itself (local mode's default placement): `in-place`.
    #[serde(rename = "in-place")]
    InPlace,
    /// By a REAPI server (`coordinator::layers::reapi::exec`): `reapi`.
    #[serde(rename = "reapi")]
    Reapi,
    /// A word this build does not know (a newer peer's): kept apart, not refused, as the
    /// string was. Sent back, should it ever be, as `unknown`.
    #[serde(other, rename(serialize = "unknown"))]
    Unknown,
}

impl Isolation {
    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotRun => "",
            Self::Bwrap => "bwrap",
            Self::Unsandboxed => "none",
            Self::InPlace => "in-place",
            Self::Reapi => "reapi",
            Self::Unknown => "unknown",
        }
    }

    /// Whether the task ran under bubblewrap (what a sandbox let it write is then known).
    pub fn sandboxed(self) -> bool {
        self == Self::Bwrap
    }
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Paths a task wrote in its exec root outside its declared outputs ([`Finished::wrote_outside`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WroteOutside {
    /// Workspace-relative paths, sorted; a new directory stands for what it holds; a path
    /// that is gone is followed by ` (removed)`. At most [`MAX_WROTE_OUTSIDE`].
    pub paths: Vec<String>,
    /// How many more there were.
    pub more: u64,
}

/// The most paths a [`WroteOutside`] carries (the rest are counted).
pub const MAX_WROTE_OUTSIDE: usize = 100;

/// Why a worker hands an assignment back: an infrastructure failure of that worker, never
/// the task's own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandBack {
    /// Every slot is taken (the coordinator's view of the worker was behind).
    NoSlot,
    /// The work dir is short of free space or inodes (what the worker measured).
    NoDisk(String),
    /// The worker is shutting down.
    ShuttingDown,
    /// The task ran, but its outputs could not be packed, stored or uploaded here.
    Outputs(String),
}

impl HandBack {
    /// A short description for logs and notes.
    pub fn describe(&self) -> String {
        match self {
            Self::NoSlot => "no free slot".to_owned(),
            Self::NoDisk(why) => format!("short of disk: {why}"),
            Self::ShuttingDown => "shutting down".to_owned(),
            Self::Outputs(why) => format!("its outputs could not be stored: {why}"),
        }
    }
}

impl Finished {
    /// A report for `attempt` that never ran: `exit` says why.
    pub fn never_ran(attempt: AttemptId, exit: ExitKind) -> Self {
        Self {
            attempt,
            exit,
            tries: 0,
            stats: ExecStats::default(),
            log: Vec::new(),
            log_omitted: 0,
            outputs: None,
            missing_literals: Vec::new(),
            output_error: None,
            reads: None,
            isolation: Isolation::NotRun,
            perturbed: None,
            handback: None,
            exit_detail: None,
            wrote_outside: None,
            withheld: None,
        }
    }

    /// A report for `attempt` that hands it back (see [`HandBack`]).
    pub fn handed_back(attempt: AttemptId, why: HandBack) -> Self {
        let mut f = Self::never_ran(attempt, ExitKind::SpawnFailed(why.describe()));
        f.handback = Some(why);
        f
    }
}

/// How `Finished::output_error` begins when a traced run's trace could not be read: the
/// inputs proof is then not made (rather than failed).
pub const TRACE_READ_FAILED: &str = "reading the trace failed";

/// What a traced run touched in its exec root that the root could not show it: lookups
/// that found nothing (`missing`) and directories it listed (`listed`). Candidates for
/// undeclared inputs: the side holding the workspace decides which are (see
/// `coordinator::run::undeclared`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadsReport {
    /// Whether strace ran (without it, only the failure itself is known).
    pub traced: bool,
    /// Workspace-relative paths that a lookup (open, stat, access, readlink, exec, chdir)
    /// failed on with `ENOENT` or `EACCES`, sorted.
    pub missing: Vec<String>,
    /// Directories whose entries the task read (`getdents`), with the entries they held in
    /// the exec root after the run, sorted by directory.
    #[serde(default)]
    pub listed: Vec<Listing>,
    /// Workspace-relative paths a survey run (the whole workspace visible, read-only) looked
    /// up successfully, sorted: with `missing`, every path the task reads, in one round.
    #[serde(default)]
    pub touched: Vec<String>,
    /// Workspace-relative paths the task wrote or tried to write (created, opened for
    /// writing, renamed, removed, linked, re-permissioned), sorted; the coordinator names
    /// those outside the declared outputs.
    #[serde(default)]
    pub wrote: Vec<String>,
}

/// A directory a traced task listed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// Workspace-relative directory (`""`: the exec root itself).
    pub dir: String,
    /// The names it held in the exec root, sorted (bounded; see `complete`).
    pub entries: Vec<String>,
    /// Whether `entries` is every name (false: the directory was too large or unreadable).
    #[serde(default)]
    pub complete: bool,
}

/// Worker → coordinator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum FromWorker {
    /// A try of the attempt started (1-based).
    Started {
        /// Which.
        attempt: AttemptId,
        /// Try number.
        try_no: u32,
    },
    /// Output lines.
    Output {
        /// Which.
        attempt: AttemptId,
        /// Whole lines.
        #[serde(with = "serde_bytes")]
        text: Vec<u8>,
    },
    /// A persistent task is ready.
    Ready {
        /// Which.
        attempt: AttemptId,
    },
    /// The attempt is over.
    Finished(Box<Finished>),
}

#[cfg(test)]
mod isolation_tests {
    use super::{ExitKind, Finished, Isolation};
    use crate::ids::AttemptId;

    const EVERY: [(Isolation, &str); 5] = [
        (Isolation::NotRun, ""),
        (Isolation::Bwrap, "bwrap"),
        (Isolation::Unsandboxed, "none"),
        (Isolation::InPlace, "in-place"),
        (Isolation::Reapi, "reapi"),
    ];

    #[test]
    fn isolation_travels_as_the_word_it_always_was() {
        for (typed, word) in EVERY {
            assert_eq!(rmp_serde::to_vec(&typed).unwrap(), rmp_serde::to_vec(word).unwrap());
            assert_eq!(serde_json::to_string(&typed).unwrap(), format!("{word:?}"));
            let back: Isolation = rmp_serde::from_slice(&rmp_serde::to_vec(word).unwrap()).unwrap();
            assert_eq!(back, typed, "{word:?}");
            assert_eq!(typed.as_str(), word);
        }
    }

    #[test]
    fn an_unknown_isolation_word_is_kept_apart_not_refused() {
        let bytes = rmp_serde::to_vec("podman").unwrap();
        let got: Isolation = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(got, Isolation::Unknown);
        // And re-encoding it is no error (a frame carrying it still goes out).
        let again = rmp_serde::to_vec(&got).unwrap();
        assert_eq!(rmp_serde::from_slice::<Isolation>(&again).unwrap(), Isolation::Unknown);
    }

    /// The struct the field belonged to when it was a `String`, as an older peer encodes it.
    #[derive(serde::Serialize)]
    struct OldIsolation<'a> {
        attempt: AttemptId,
        exit: ExitKind,
        tries: u32,
        stats: crate::spec::ExecStats,
        #[serde(with = "serde_bytes")]
        log: Vec<u8>,
        log_omitted: u64,
        outputs: Option<super::Outputs>,
        isolation: &'a str,
    }

    #[test]
    fn a_report_with_the_string_field_decodes_and_one_without_it_never_ran() {
        for (typed, word) in EVERY.into_iter().chain([(Isolation::Unknown, "sandboxie")]) {
            let old = OldIsolation {
                attempt: AttemptId(7),
                exit: ExitKind::Code(0),
                tries: 1,
                stats: Default::default(),
                log: Vec::new(),
                log_omitted: 0,
                outputs: None,
                isolation: word,
            };
            let bytes = rmp_serde::to_vec_named(&old).unwrap();
            let f: Finished = rmp_serde::from_slice(&bytes).unwrap();
            assert_eq!(f.isolation, typed, "{word:?}");
        }
        let mut f = Finished::never_ran(AttemptId(1), ExitKind::Code(0));
        assert_eq!(f.isolation, Isolation::NotRun);
        f.isolation = Isolation::Bwrap;
        let bytes = rmp_serde::to_vec_named(&f).unwrap();
        let back: Finished = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back.isolation, Isolation::Bwrap);
    }
}
