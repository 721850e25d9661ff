//! The event stream of a run, as the coordinator emits it and a client renders it (prefixed
//! lines, grouped output, `--json`). In the farm these travel to the client over QUIC; in
//! local mode over an in-process channel. Fields are only ever added.

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::ids::{TaskId, WorkerId};
use crate::spec::{ExecStats, ExitKind};

/// One thing that happened in a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// A task was handed to a worker.
    TaskStarted {
        /// Which task.
        task: TaskId,
        /// 1 for the first attempt.
        attempt: u32,
        /// Where it runs.
        worker: WorkerId,
    },
    /// Output of a task: one or more whole lines (a final partial line is flushed at exit),
    /// stdout and stderr interleaved as the task wrote them.
    Output {
        /// Which task.
        task: TaskId,
        /// The bytes, lossily decoded for JSON.
        #[serde(with = "lossy_text")]
        text: Vec<u8>,
    },
    /// A task reached a final state.
    TaskFinished(TaskReport),
    /// A persistent task's `ready_when` matched (or it started, with no pattern).
    TaskReady {
        /// Which task.
        task: TaskId,
    },
    /// A proof about a task concluded (`--verify`).
    Verdict {
        /// Which task.
        task: TaskId,
        /// What was proven (or disproven).
        verdict: Verdict,
    },
    /// Something the user should know that is not a task's output.
    Notice {
        /// The task it is about, if any.
        task: Option<TaskId>,
        /// `info` or `warn`.
        level: NoticeLevel,
        /// The message.
        message: String,
    },
}

/// Severity of a [`RunEvent::Notice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeLevel {
    /// Informational.
    Info,
    /// Worth acting on.
    Warn,
}

/// The final state of one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Executed (or restored) successfully.
    Succeeded,
    /// Executed and failed (non-zero exit, signal, timeout, spawn failure).
    Failed,
    /// Not run because something it depends on failed, or the run stopped scheduling.
    Skipped,
    /// Running when the run was interrupted; killed.
    Aborted,
}

/// Where a task's result came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cache", rename_all = "snake_case")]
pub enum CacheStatus {
    /// Restored from a cache layer; `saved_ms` is the recorded duration of the execution it
    /// replaced.
    Hit {
        /// `local` or `farm`.
        layer: String,
        /// Milliseconds of execution the hit saved.
        saved_ms: u64,
        /// An upstream it folds by outputs re-ran in this run and produced the bytes this
        /// entry was keyed with (early cutoff): without that, this task would have run.
        #[serde(default)]
        cutoff: bool,
    },
    /// Executed; the entry was saved.
    Saved,
    /// Executed; the entry was not saved, and why.
    NotSaved {
        /// The reason, for the status line.
        reason: String,
    },
    /// Not a cached task (group, persistent, `cache = false`, `--no-cache`) or not executed.
    Uncached,
}

/// Report of one task.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskReport {
    /// Which task.
    pub task: TaskId,
    /// Final state.
    pub status: TaskStatus,
    /// Cache outcome.
    pub cache: CacheStatus,
    /// How the last attempt ended, when one ran.
    pub exit: Option<ExitKind>,
    /// Attempts made (0 when not executed).
    pub attempts: u32,
    /// Resource use of the last attempt.
    pub stats: ExecStats,
    /// The task's cache key, when it has one.
    pub key: Option<Digest>,
    /// The worker of the last attempt.
    pub worker: Option<WorkerId>,
    /// Why it was skipped or failed, in words.
    pub note: Option<String>,
    /// Proof verdicts (`--verify`), in the order they concluded.
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
}

/// Most paths the text of a verdict names (the first ones; then "and N more"): the JSON
/// carries up to [`MAX_CARRIED_PATHS`].
pub const MAX_NAMED_PATHS: usize = 50;

/// Most paths an [`Verdict::UndeclaredInputs`] or [`Verdict::UndeclaredOutputs`] carries;
/// the rest are counted in `more` (a frame and a terminal stay bounded).
pub const MAX_CARRIED_PATHS: usize = 10_000;

/// Most log lines a failed sandboxed run's verdict carries.
pub const LOG_TAIL_LINES: usize = 12;

/// The outcome of a proof about one task (brief §2; the reference design's verdict table).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// Re-ran elsewhere under perturbation; the outputs are identical by content.
    ProvenDeterministic {
        /// Where the re-run ran.
        rerun_worker: Option<WorkerId>,
        /// The re-run had to use the same machine (a one-worker farm, or local mode).
        single_machine: bool,
        /// What the re-run changed (and what it could not), so the proof says what it covers.
        #[serde(default)]
        perturbations: Perturbations,
        /// Output paths left out of the comparison by the task's `verify_ignore` (in either
        /// execution), sorted; the proof covers every other output.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ignored: Vec<String>,
    },
    /// Re-ran; the outputs differ: the cache would replay one arbitrary output forever.
    Nondeterministic(Divergence),
    /// Differed, but the task is listed in `--verify-allow`: reported, not failing.
    AllowedNondeterministic(Divergence),
    /// The re-run itself failed under its perturbations (identical inputs, a changed
    /// environment): the task depends on something the re-run changed. Not "flaky" — flaky is
    /// the same environment giving different exit codes.
    RerunFailed {
        /// How.
        reason: String,
        /// The last lines of the re-run's log (masked like every log).
        #[serde(default)]
        log_tail: Vec<String>,
        /// What the re-run changed: one of these is what the task depends on.
        #[serde(default)]
        perturbations: Perturbations,
    },
    /// With only its declared inputs present, the task touched these workspace paths: read,
    /// stat or probed them (`dir/`: listed the directory, whose entries it does not all
    /// declare).
    UndeclaredInputs {
        /// Workspace-relative paths, sorted, at most [`MAX_CARRIED_PATHS`] (empty when strace
        /// was not available).
        paths: Vec<String>,
        /// Whether a tracer named the paths.
        traced: bool,
        /// Paths found beyond `paths` (reported as "and N more").
        #[serde(default)]
        more: usize,
        /// How the sandboxed run failed, when it did (`exit code 1`, `timed out`).
        #[serde(default)]
        failed: Option<String>,
        /// The last lines of the sandboxed run's log, when it failed.
        #[serde(default)]
        log_tail: Vec<String>,
        /// Patterns to add to the task's `inputs` that cover every path found (relative to
        /// the task's project; `//…` outside it): a directory several files were read from
        /// as `dir/**` (or `dir/**/*.ext` when they share an extension), a single file as
        /// itself.
        #[serde(default)]
        suggest: Vec<String>,
        /// What to do about the paths `inputs` cannot declare (inside an installed tree the
        /// task does not see: which project to depend on), one sentence each.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        advice: Vec<String>,
        /// On a farm, what the traced run touched, for the client to judge against its
        /// workspace (the coordinator has none); the client replaces this verdict with its
        /// judgement, so it never reaches a renderer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evidence: Option<Box<crate::work::ReadsReport>>,
    },
    /// The task wrote (or tried to write) workspace paths outside its declared outputs:
    /// created, opened for writing, renamed, removed. A cache hit would not reproduce them,
    /// and a later run reads them back (incremental build state beside `dist/`).
    UndeclaredOutputs {
        /// Workspace-relative paths, sorted, at most [`MAX_CARRIED_PATHS`].
        paths: Vec<String>,
        /// Paths beyond `paths` (reported as "and N more").
        #[serde(default)]
        more: usize,
    },
    /// With only its declared inputs visible the task fails (or times out), and no
    /// workspace path it needed could be named: never proven complete.
    SandboxFailed {
        /// How it failed (`exit code 1`, `timed out`).
        reason: String,
        /// Whether a tracer ran (without one, no path could have been named).
        traced: bool,
        /// The last lines of the sandboxed run's log.
        #[serde(default)]
        log_tail: Vec<String>,
    },
    /// With only its declared inputs present, it read nothing else in the workspace.
    ProvenComplete,
    /// No outputs: nothing a cache hit would replay but its log.
    NoOutputs,
    /// Not proven, and why (a hit did not run; groups and persistent tasks are not cached).
    NotVerified {
        /// Why.
        reason: String,
    },
    /// The task opts out of proofs (`verify = false`, `side_effects = true`): never re-run
    /// or traced by `--verify`, and why.
    Exempt {
        /// Why, naming the setting.
        reason: String,
    },
    /// Left out of a sampled proof run (`--verify-sample`): the choice is a function of the
    /// key and the seed, so the same key is in or out of every run with that seed.
    NotSampled {
        /// The fraction asked for, in parts per million.
        fraction_ppm: u32,
        /// `--verify-seed`.
        seed: u64,
    },
}

impl Verdict {
    /// Whether this verdict turns the run red.
    pub fn fails(&self) -> bool {
        matches!(
            self,
            Self::Nondeterministic(_)
                | Self::RerunFailed { .. }
                | Self::UndeclaredInputs { .. }
                | Self::UndeclaredOutputs { .. }
                | Self::SandboxFailed { .. }
        )
    }

    /// The verdict's name (`proven-deterministic`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::ProvenDeterministic { .. } => "proven-deterministic",
            Self::Nondeterministic(_) => "nondeterministic",
            Self::AllowedNondeterministic(_) => "allowed-nondeterministic",
            Self::RerunFailed { .. } => "rerun-failed",
            Self::UndeclaredInputs { .. } => "undeclared-inputs",
            Self::UndeclaredOutputs { .. } => "undeclared-outputs",
            Self::SandboxFailed { .. } => "sandbox-failed",
            Self::ProvenComplete => "proven-complete",
            Self::NoOutputs => "no-outputs",
            Self::NotVerified { .. } => "not-verified",
            Self::Exempt { .. } => "exempt",
            Self::NotSampled { .. } => "not-sampled",
        }
    }
}

/// How two executions' outputs differ.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// In the re-run only.
    pub added: Vec<String>,
    /// In the first run only.
    pub removed: Vec<String>,
    /// In both, with different content, kind or exec bit.
    pub changed: Vec<String>,
    /// A short report per changed file (bounded).
    #[serde(default)]
    pub files: Vec<FileDivergence>,
    /// Where the re-run ran.
    #[serde(default)]
    pub rerun_worker: Option<WorkerId>,
    /// The re-run used the same machine.
    #[serde(default)]
    pub single_machine: bool,
    /// Files in both whose permission bits differ (first run → re-run), e.g. 0644 → 0600.
    #[serde(default)]
    pub modes: Vec<ModeChange>,
    /// What the re-run changed (and what it could not).
    #[serde(default)]
    pub perturbations: Perturbations,
    /// Output paths left out of the comparison by the task's `verify_ignore`, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
}

/// A file whose mode differs between two executions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeChange {
    /// Workspace-relative path.
    pub path: String,
    /// Permission bits of the first run and of the re-run (`0o644`, `0o600`).
    pub modes: (u32, u32),
}

/// One perturbation of a determinism re-run: what changed (`clock`, `cpus`, `locale`,
/// `tmpdir`, …) and how (`+7d`, `1 of 2`, `de_DE.UTF-8`), or why it could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perturbation {
    /// A short stable name.
    pub what: String,
    /// The value the re-run saw, or (in `not_applied`) why it was not perturbed.
    pub detail: String,
}

/// The perturbations a re-run applied and those it could not on its worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perturbations {
    /// Applied.
    #[serde(default)]
    pub applied: Vec<Perturbation>,
    /// Not applied, with the reason.
    #[serde(default)]
    pub not_applied: Vec<Perturbation>,
}

impl Perturbations {
    /// Records an applied perturbation.
    pub fn applied(&mut self, what: &str, detail: impl Into<String>) {
        self.applied.push(Perturbation { what: what.to_owned(), detail: detail.into() });
    }

    /// Records one that could not be applied, and why.
    pub fn skipped(&mut self, what: &str, why: impl Into<String>) {
        self.not_applied.push(Perturbation { what: what.to_owned(), detail: why.into() });
    }

    /// `clock +7d, cpus 1 of 2, …` (empty when nothing was applied).
    pub fn describe_applied(&self) -> String {
        let v: Vec<String> =
            self.applied.iter().map(|p| format!("{} {}", p.what, p.detail)).collect();
        v.join(", ")
    }
}

/// One changed file: a unified diff for text, sizes and digests for binary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDivergence {
    /// Workspace-relative path.
    pub path: String,
    /// The first lines of a unified diff (first run → re-run), for text files.
    pub diff: Option<String>,
    /// Sizes (first run, re-run).
    pub sizes: (u64, u64),
    /// Content digests (first run, re-run).
    pub digests: (Option<Digest>, Option<Digest>),
}

mod lossy_text {
    use serde::{Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &Vec<u8>, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            String::from_utf8_lossy(bytes).serialize(s)
        } else {
            serde_bytes::serialize(bytes, s)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        // Either form, whatever the format claims (see `Digest`'s deserializer).
        d.deserialize_any(TextOrBytes)
    }

    struct TextOrBytes;

    impl<'de> serde::de::Visitor<'de> for TextOrBytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("text or bytes")
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
            Ok(v.as_bytes().to_vec())
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

/// The end of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSummary {
    /// Every task succeeded (and, in verify runs, every proof held).
    pub ok: bool,
    /// The run was interrupted (Ctrl-C, SIGTERM, the client went away).
    pub interrupted: bool,
    /// Wall time of the run in milliseconds.
    pub wall_ms: u64,
    /// One report per task, in graph order.
    pub tasks: Vec<TaskReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: internally tagged events are buffered by serde in a value that claims to be
    /// human-readable, so digests and output bytes written as MessagePack bytes must still
    /// decode (a farm client once failed on every `Output` event).
    #[test]
    fn events_round_trip_through_messagepack() {
        let task = TaskId::new("web", "build");
        let events = vec![
            RunEvent::Output { task: task.clone(), text: b"hello\n".to_vec() },
            RunEvent::TaskFinished(TaskReport {
                task: task.clone(),
                status: TaskStatus::Succeeded,
                cache: CacheStatus::Hit { layer: "farm".into(), saved_ms: 3, cutoff: true },
                exit: Some(ExitKind::Code(0)),
                attempts: 1,
                stats: ExecStats::default(),
                key: Some(Digest::of(b"k")),
                worker: Some(WorkerId("w1".into())),
                note: None,
                verdicts: vec![
                    Verdict::ProvenComplete,
                    Verdict::Nondeterministic(Divergence {
                        changed: vec!["dist/a".into()],
                        files: vec![FileDivergence {
                            path: "dist/a".into(),
                            diff: Some("-1\n+2\n".into()),
                            sizes: (1, 1),
                            digests: (Some(Digest::of(b"1")), Some(Digest::of(b"2"))),
                        }],
                        ..Divergence::default()
                    }),
                ],
            }),
            RunEvent::Verdict {
                task: task.clone(),
                verdict: Verdict::RerunFailed {
                    reason: "exit code 1".into(),
                    log_tail: vec!["boom".into()],
                    perturbations: Perturbations::default(),
                },
            },
            RunEvent::TaskReady { task: task.clone() },
            RunEvent::Notice { task: None, level: NoticeLevel::Warn, message: "m".into() },
        ];
        for ev in events {
            let bytes = rmp_serde::to_vec_named(&ev).unwrap();
            let back: RunEvent = rmp_serde::from_slice(&bytes).unwrap();
            assert_eq!(format!("{back:?}"), format!("{ev:?}"));
            let json = serde_json::to_string(&ev).unwrap();
            let back: RunEvent = serde_json::from_str(&json).unwrap();
            assert_eq!(format!("{back:?}"), format!("{ev:?}"));
        }
    }
}
