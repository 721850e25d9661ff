//! The farm's messages (brief §8). One enum per direction, one struct per payload, named
//! fields only ever added (rmp-serde maps), and a `Hello` first on every connection.
//!
//! Streams of a connection:
//! - the first bidirectional stream the peer opens is the **control stream**: `Hello`, then
//!   the role's message enums, framed ([`crate::transport::frame`]);
//! - every blob travels on its **own** stream (a worker fetching inputs, uploading an
//!   artifact; a client uploading inputs, downloading artifacts): a [`BlobRequest`] frame,
//!   then the blob header and bytes, digest-verified by the receiver.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::events::{RunEvent, RunSummary};
use crate::ids::{AttemptId, RunId, TaskId, WorkerId};
use crate::key::KeyComponents;
use crate::spec::TaskSpec;
use crate::work::{FromWorker, ToWorker};

/// The wire protocol's version. A peer speaking another major version is refused with a
/// reason; ALPN carries it too (`prova/1`).
pub const PROTOCOL_VERSION: u32 = 1;

/// The first message on a connection's control stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub protocol_version: u32,
    /// The sender's build (`prova 0.1.0`).
    pub build_version: String,
    /// The role the sender claims; it must match its certificate's.
    pub role: String,
    /// Optional features the sender supports.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// The answer to a [`Hello`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    /// Accepted.
    Welcome(Welcome),
    /// Refused, with a reason meant for a human.
    Reject(Reject),
}

/// Accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The coordinator's protocol version.
    pub protocol_version: u32,
    /// The coordinator's build.
    pub build_version: String,
    /// The peer's identity as the coordinator sees it (its certificate's name).
    pub peer: String,
    /// The farm cache's key salt ([`crate::key::KeySalt`]), for client roles: a client keys
    /// its tasks with it so every client's keys agree. `None` to workers.
    #[serde(default)]
    pub key_salt: Option<crate::key::KeySalt>,
}

/// Refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reject {
    /// Why.
    pub reason: String,
}

/// What a worker offers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Concurrent assignments.
    pub slots: u32,
    /// `linux`, `macos`.
    pub os: String,
    /// `x86_64`, `aarch64`.
    pub arch: String,
    /// `pool=linux`, …
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `bwrap 0.8.0` or `none: <why>`.
    pub sandbox: String,
    /// Attempts the worker still runs from before a reconnect (their reports follow).
    #[serde(default)]
    pub running: Vec<AttemptId>,
    /// Its health when it registers (absent from an older worker: healthy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<WorkerHealth>,
}

/// What a worker says of its own health, at registration and with every heartbeat: the
/// coordinator offers no work to a worker that is not fit, and `farm status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerHealth {
    /// Free bytes of its work dir's file system (`None`: not measured).
    #[serde(default)]
    pub disk_free: Option<u64>,
    /// The free bytes it keeps (`--min-free-disk`).
    #[serde(default)]
    pub disk_floor: Option<u64>,
    /// Why it takes no work now (`None`: it does), e.g. `disk low: 800.0 KiB free, floor
    /// 1.0 MiB`.
    #[serde(default)]
    pub unfit: Option<String>,
}

/// Worker → coordinator, on the control stream after the handshake.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum WorkerMsg {
    /// First: what this worker offers.
    Register(WorkerInfo),
    /// A report about an assignment.
    Report(FromWorker),
    /// Liveness, and the leases it holds (renews them).
    Heartbeat {
        /// Attempts still running.
        running: Vec<AttemptId>,
        /// Its health now (absent from an older worker: unchanged).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        health: Option<WorkerHealth>,
    },
    /// The worker is leaving (SIGTERM): give it no more work; what it held is handed back
    /// (requeued elsewhere, not counted as a loss). It closes the connection next.
    Leaving,
}

/// Coordinator → worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum CoordinatorMsg {
    /// Start or cancel work.
    Work(ToWorker),
    /// A report was refused (stale lease): drop the attempt.
    Refused {
        /// Which.
        attempt: AttemptId,
        /// Why.
        reason: String,
    },
    /// Drained (`prova farm drain`) and idle: leave the farm as on SIGTERM, and exit.
    Leave,
}

/// First frame of a blob stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlobRequest {
    /// Send me this blob.
    Get {
        /// Which.
        digest: Digest,
    },
    /// Here is a blob (the blob header and bytes follow); answer with a [`BlobAck`].
    Put {
        /// What the sender claims it is (the receiver verifies).
        digest: Digest,
        /// Bytes that follow.
        size: u64,
    },
}

/// The answer to a put (or a get of a blob the coordinator does not have).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlobAck {
    /// Stored.
    Stored,
    /// Not stored / not found, and why.
    Refused {
        /// Why.
        reason: String,
    },
}

/// One input file of a remote task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRef {
    /// Workspace-relative path.
    pub path: String,
    /// Content digest (a blob; for a symlink, of its target string).
    pub digest: Digest,
    /// Owner-execute bit.
    pub exec: bool,
    /// For a symlink: its target.
    #[serde(default)]
    pub symlink: Option<String>,
    /// An installed tree ([`crate::tree`]) mounted at `path`: `digest` is its manifest's.
    #[serde(default)]
    pub tree: bool,
}

/// The kind of a remote task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteKind {
    /// Done when its deps are.
    Group,
    /// Runs to completion.
    Command,
    /// Long-running; not supported remotely (refused at submit).
    Persistent,
}

/// One task of a submitted run, keyed by the client.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoteTask {
    /// What to run.
    pub spec: TaskSpec,
    /// Group or command.
    pub kind: RemoteKind,
    /// Whether it may be cached.
    pub cacheable: bool,
    /// Its key, as the client computed it; `None` while an upstream it folds by outputs was
    /// unresolved on the client (the farm keys it from its own entries and executions).
    pub key: Option<Digest>,
    /// The key's components (stored with the entry; `why` reads them).
    pub components: KeyComponents,
    /// Indices of the tasks it waits for.
    pub deps: Vec<u32>,
    /// Its input files (task inputs and workspace inputs).
    pub inputs: Vec<InputRef>,
    /// Whether the user asked for it.
    pub requested: bool,
    /// Recorded duration (ms) for critical-path priority.
    #[serde(default)]
    pub weight: u64,
}

/// Which outputs the client wants back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Download {
    /// Every task's outputs.
    #[default]
    All,
    /// Only the requested tasks'.
    Requested,
    /// None (a CI job that only needs the verdict).
    None,
}

/// A proof a run asks for (`--verify`). On the wire, the lowercase name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proof {
    /// Re-run elsewhere, perturbed, and compare outputs by content.
    Determinism,
    /// Run with only the declared inputs present and name what else was read.
    Inputs,
    /// A proof this build does not know (a newer peer's): ignored, as an unknown name always
    /// was. Never sent.
    #[serde(other, skip_serializing)]
    Unknown,
}

/// How a submitted run behaves.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunOptionsWire {
    /// Keep going after a failure.
    pub continue_on_failure: bool,
    /// Read the farm cache.
    pub read: bool,
    /// Write the farm cache.
    pub write: bool,
    /// Verification requested, empty for none. Encoded as the strings `determinism` and
    /// `inputs`.
    #[serde(default)]
    pub verify: Vec<Proof>,
    /// Tasks allowed to be nondeterministic.
    #[serde(default)]
    pub verify_allow: Vec<TaskId>,
    /// `--verify-sample`: prove only the keys in this sample. Omitted when every task is
    /// proven, so older frames are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_sample: Option<VerifySample>,
    /// What the run does with the tasks it did not ask for (`--only`). Omitted when they
    /// run, so older frames are unchanged.
    #[serde(default, skip_serializing_if = "UpstreamMode::runs")]
    pub upstreams: UpstreamMode,
    /// Restore the tasks the run leaves out (`upstreams`) even when `read` is off
    /// (`--force` with `--only`). Omitted when off, so older frames are unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_left_out: bool,
}

/// What a run does with the tasks upstream of the ones asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamMode {
    /// They run (or hit) like any task: the default.
    #[default]
    Run,
    /// `--only`: they never run. A cached one is restored; one that is not is assumed from
    /// the outputs on disk, and refused when it declares outputs and none are there.
    Only,
    /// `--exclude-dependencies`: they are neither run nor restored; their outputs are taken
    /// as they are on disk (local mode only).
    Exclude,
}

impl UpstreamMode {
    /// Whether upstream tasks run (the default).
    pub fn runs(&self) -> bool {
        *self == Self::Run
    }
}

/// A deterministic sample of keys to prove (`--verify-sample=FRACTION --verify-seed=S`): a
/// key is in it when the digest of the key and the seed, read as a number, falls below the
/// fraction — the same key is in or out of every run with that seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifySample {
    /// The fraction, in parts per million (0..=1 000 000).
    pub ppm: u32,
    /// The seed; another seed draws another sample.
    pub seed: u64,
}

impl VerifySample {
    /// Parts per million of a whole.
    pub const WHOLE: u32 = 1_000_000;

    /// Whether `key` is in the sample.
    pub fn contains(&self, key: &crate::Digest) -> bool {
        let mut f = crate::digest::Fold::new("prova-verify-sample");
        f.digest(key).u64(self.seed);
        let d = f.finish();
        let mut n = [0u8; 8];
        n.copy_from_slice(&d.0[..8]);
        u64::from_le_bytes(n) % u64::from(Self::WHOLE) < u64::from(self.ppm)
    }
}

/// Client → coordinator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ClientMsg {
    /// Which of these blobs does the coordinator lack?
    FindMissing {
        /// Candidates.
        digests: Vec<Digest>,
    },
    /// Start a run; its tasks follow in [`ClientMsg::Tasks`] chunks, then [`ClientMsg::Go`].
    Begin {
        /// Knobs.
        options: RunOptionsWire,
        /// How many tasks will follow.
        tasks: u32,
    },
    /// A chunk of the run's tasks, in order.
    Tasks(Vec<RemoteTask>),
    /// All tasks sent: schedule.
    Go,
    /// Stop the run (Ctrl-C on the client).
    Interrupt,
    /// The farm's state.
    Status,
    /// Keys whose executions disagree.
    Hermeticity,
    /// Take a worker out (admin): no new work, running tasks finish, then it leaves.
    Drain {
        /// Which.
        worker: WorkerId,
    },
    /// Let a quarantined worker take work again (admin).
    Release {
        /// Which.
        worker: WorkerId,
    },
}

/// What a task produced, for the client to download.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TaskArtifact {
    /// Which task.
    pub task: TaskId,
    /// Its key.
    pub key: Digest,
    /// The artifact blob and size (`None`: no outputs).
    pub artifact: Option<(Digest, u64)>,
    /// The output manifest (rmp-encoded `OutputManifest`).
    #[serde(with = "serde_bytes")]
    pub manifest: Vec<u8>,
    /// The log blob.
    pub log: Option<Digest>,
    /// How long it ran.
    pub duration_ms: u64,
    /// The trust tier of the farm's store it came from. The client files it under the
    /// matching local namespace: only a `Trusted` entry may ever serve a local run. Absent
    /// (an older coordinator): `Untrusted`, the safe side.
    #[serde(default)]
    pub tier: EntryTier,
}

/// A farm entry's trust tier, as a client sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryTier {
    /// Written by a trusted (`ci`) run, and agreed on under `--trust proven`.
    Trusted,
    /// A trusted run's entry waiting for a second worker's agreement (`--trust proven`).
    Pending,
    /// Written by an untrusted (`client`) run.
    #[default]
    Untrusted,
}

/// Coordinator → client.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum CoordinatorReply {
    /// The subset of [`ClientMsg::FindMissing`] the coordinator lacks.
    Missing {
        /// Blobs to upload.
        digests: Vec<Digest>,
    },
    /// The run was accepted.
    Accepted {
        /// Its id.
        run: RunId,
    },
    /// Something happened in the run.
    Event(RunEvent),
    /// A task's outputs are available (after a hit or a save).
    Artifact(TaskArtifact),
    /// The run is over.
    Done(RunSummary),
    /// The farm's state.
    Status(FarmStatus),
    /// The hermeticity report (JSON text, see the coordinator's ledger).
    Hermeticity(String),
    /// The request was refused.
    Error {
        /// Why.
        message: String,
    },
    /// A drain was taken: the worker gets no new work and leaves once these finish.
    Draining {
        /// Tasks it still runs.
        running: u32,
    },
    /// A release was taken: the worker may be given work again.
    Released {
        /// Why it had been quarantined (`None`: it was not).
        was: Option<String>,
    },
}

/// `prova farm status`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FarmStatus {
    /// Connected workers.
    pub workers: Vec<WorkerStatus>,
    /// Assignments waiting for a slot.
    pub queued: u32,
    /// Runs in progress.
    pub runs: u32,
    /// The coordinator itself: version, uptime, its cache (absent from an older one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorFacts>,
}

/// The coordinator in [`FarmStatus`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorFacts {
    /// Its build version.
    pub version: String,
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Entries in its cache, every tier.
    pub cache_entries: u64,
    /// Bytes of blobs in its store.
    pub cache_bytes: u64,
    /// Finished tasks that were cache hits, since it started.
    pub hits: u64,
    /// Finished cacheable tasks that were misses, since it started.
    pub misses: u64,
    /// What it holds for runs right now (absent from an older one): all zero but the book and
    /// the workers' blob sets once every run has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldState>,
}

/// The coordinator's per-run state in [`CoordinatorFacts`]: what must return to zero (or to
/// its bound) when no run is going. Counts, never contents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldState {
    /// Runs the farm routes reports to.
    #[serde(default)]
    pub attached_runs: u64,
    /// Run actors alive in the coordinator process.
    #[serde(default)]
    pub run_actors: u64,
    /// Items waiting for a slot.
    #[serde(default)]
    pub queued: u64,
    /// Live leases.
    #[serde(default)]
    pub leases: u64,
    /// Runs' items waiting on another run's execution of the same key (and their leaders).
    #[serde(default)]
    pub followers: u64,
    /// Keys being executed or queued for dedup.
    #[serde(default)]
    pub keys: u64,
    /// Items carrying loss evidence.
    #[serde(default)]
    pub presence: u64,
    /// Blobs the farm remembers workers hold (for locality; bounded per worker).
    #[serde(default)]
    pub worker_blobs: u64,
    /// Runs in the observer's book (bounded by its `RECENT_RUNS` plus the live ones).
    #[serde(default)]
    pub book_runs: u64,
    /// Of which live.
    #[serde(default)]
    pub book_live: u64,
    /// The process's resident set (`VmRSS`), bytes, where the OS tells it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

impl CoordinatorFacts {
    /// Hits over lookups, when there were any.
    pub fn hit_rate(&self) -> Option<f64> {
        let all = self.hits + self.misses;
        (all > 0).then(|| self.hits as f64 / all as f64)
    }
}

/// One worker in [`FarmStatus`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its id.
    pub id: WorkerId,
    /// Slots in total.
    pub slots: u32,
    /// Slots in use.
    pub busy: u32,
    /// `os/arch`.
    pub platform: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Sandbox in use.
    pub sandbox: String,
    /// Tasks running there.
    pub running: Vec<TaskId>,
    /// Its build version (empty from an older coordinator).
    #[serde(default)]
    pub version: String,
    /// Its health as it last said (absent: it said nothing, an older worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<WorkerHealth>,
    /// Why it gets no work: its reports were refused too often (`prova farm release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<String>,
    /// Not heard from since a lease of it expired (a stall or a partition): placement passes
    /// it over while another worker could take the work, until a heartbeat or report of it
    /// arrives. A connection that lives through a partition may take seconds to carry one
    /// again (its retransmissions back off), so "back" means this is false, not `busy == 0`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub silent: bool,
}

#[cfg(test)]
mod proof_tests {
    use super::Proof;

    #[test]
    fn proofs_travel_as_the_names_they_always_had() {
        let names = vec!["determinism".to_owned(), "inputs".to_owned()];
        let typed = vec![Proof::Determinism, Proof::Inputs];
        assert_eq!(rmp_serde::to_vec(&typed).unwrap(), rmp_serde::to_vec(&names).unwrap());
    }

    #[test]
    fn an_unknown_proof_name_is_kept_apart_not_refused() {
        let names = vec!["ordering".to_owned(), "inputs".to_owned()];
        let bytes = rmp_serde::to_vec(&names).unwrap();
        let got: Vec<Proof> = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(got, [Proof::Unknown, Proof::Inputs]);
    }
}
