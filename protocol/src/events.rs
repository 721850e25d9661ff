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
}

mod lossy_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Vec<u8>, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            String::from_utf8_lossy(bytes).serialize(s)
        } else {
            serde_bytes::serialize(bytes, s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        if d.is_human_readable() {
            Ok(String::deserialize(d)?.into_bytes())
        } else {
            serde_bytes::deserialize(d)
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
