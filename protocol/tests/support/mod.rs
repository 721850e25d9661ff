//! The farm's wire messages as test data: one representative value per message variant (the
//! golden fixtures of `tests/golden/`), and helpers to encode and decode them as the type they
//! belong to. Shared by `golden.rs`, `wire_robustness.rs` and `artifact_fuzz.rs` (its PRNG).

#![allow(dead_code)] // each test binary uses a different part of this module

use std::collections::BTreeMap;
use std::path::PathBuf;

use prova_protocol::digest::Digest;
use prova_protocol::events::{
    CacheStatus, Divergence, FileDivergence, ModeChange, NoticeLevel, Perturbations, RunEvent,
    RunSummary, TaskReport, TaskStatus, Verdict,
};
use prova_protocol::ids::{AttemptId, RunId, TaskId, WorkerId};
use prova_protocol::key::{InputFile, InputKind, KeyComponents};
use prova_protocol::manifest::{EntryKind, ManifestEntry, OutputManifest};
use prova_protocol::spec::{CommandLine, ExecStats, ExitKind, TaskSpec};
use prova_protocol::transport::BlobHeader;
use prova_protocol::transport::frame::{FrameError, HEADER_LEN, decode_payload, encode_frame};
use prova_protocol::wire::{
    BlobAck, BlobRequest, ClientMsg, CoordinatorMsg, CoordinatorReply, EntryTier, FarmStatus,
    Hello, HelloReply, InputRef, PROTOCOL_VERSION, Reject, RemoteKind, RemoteTask, RunOptionsWire,
    TaskArtifact, Welcome, WorkerInfo, WorkerMsg, WorkerStatus,
};
use prova_protocol::work::{
    Assignment, Finished, FromWorker, Isolation, Listing, Outputs, Perturb, Placement, ReadsReport,
    ToWorker, WroteOutside,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where the committed fixtures live.
pub(crate) fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("golden")
}

/// A value of one of the message types that travel as frames.
#[derive(Clone, Debug)]
pub(crate) enum Message {
    Hello(Hello),
    HelloReply(HelloReply),
    WorkerMsg(WorkerMsg),
    CoordinatorMsg(CoordinatorMsg),
    BlobRequest(BlobRequest),
    BlobAck(BlobAck),
    BlobHeader(BlobHeader),
    ClientMsg(ClientMsg),
    CoordinatorReply(CoordinatorReply),
}

/// Calls `$f` with the message's value, whatever its type.
macro_rules! with_value {
    ($m:expr, $v:ident => $body:expr) => {
        match $m {
            Message::Hello($v) => $body,
            Message::HelloReply($v) => $body,
            Message::WorkerMsg($v) => $body,
            Message::CoordinatorMsg($v) => $body,
            Message::BlobRequest($v) => $body,
            Message::BlobAck($v) => $body,
            Message::BlobHeader($v) => $body,
            Message::ClientMsg($v) => $body,
            Message::CoordinatorReply($v) => $body,
        }
    };
}

fn redecode<T: Serialize + DeserializeOwned>(
    _like: &T,
    payload: &[u8],
    wrap: fn(T) -> Message,
) -> Result<Message, FrameError> {
    decode_payload::<T>(payload).map(wrap)
}

impl Message {
    /// The Rust type, for messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::HelloReply(_) => "HelloReply",
            Message::WorkerMsg(_) => "WorkerMsg",
            Message::CoordinatorMsg(_) => "CoordinatorMsg",
            Message::BlobRequest(_) => "BlobRequest",
            Message::BlobAck(_) => "BlobAck",
            Message::BlobHeader(_) => "BlobHeader",
            Message::ClientMsg(_) => "ClientMsg",
            Message::CoordinatorReply(_) => "CoordinatorReply",
        }
    }

    /// The whole frame: 4-byte big-endian length, then named-field MessagePack.
    pub(crate) fn frame(&self) -> Vec<u8> {
        with_value!(self, v => encode_frame(v)).expect("every sample encodes")
    }

    /// The frame's payload.
    pub(crate) fn payload(&self) -> Vec<u8> {
        self.frame()[HEADER_LEN..].to_vec()
    }

    /// `Debug` of the value inside.
    pub(crate) fn debug(&self) -> String {
        with_value!(self, v => format!("{v:#?}"))
    }

    /// Decodes `payload` as this message's type.
    pub(crate) fn decode_same_type(&self, payload: &[u8]) -> Result<Message, FrameError> {
        match self {
            Message::Hello(v) => redecode(v, payload, Message::Hello),
            Message::HelloReply(v) => redecode(v, payload, Message::HelloReply),
            Message::WorkerMsg(v) => redecode(v, payload, Message::WorkerMsg),
            Message::CoordinatorMsg(v) => redecode(v, payload, Message::CoordinatorMsg),
            Message::BlobRequest(v) => redecode(v, payload, Message::BlobRequest),
            Message::BlobAck(v) => redecode(v, payload, Message::BlobAck),
            Message::BlobHeader(v) => redecode(v, payload, Message::BlobHeader),
            Message::ClientMsg(v) => redecode(v, payload, Message::ClientMsg),
            Message::CoordinatorReply(v) => redecode(v, payload, Message::CoordinatorReply),
        }
    }

    /// The variant this value is, as `Type::Variant[::Inner]`. The matches are exhaustive on
    /// purpose: a new variant does not compile here until it is named, and
    /// [`EVERY_VARIANT`] (which the golden test checks the samples against) says it needs a
    /// fixture.
    pub(crate) fn variant(&self) -> String {
        match self {
            Message::Hello(_) => "Hello".into(),
            Message::HelloReply(r) => match r {
                HelloReply::Welcome(_) => "HelloReply::Welcome".into(),
                HelloReply::Reject(_) => "HelloReply::Reject".into(),
            },
            Message::WorkerMsg(m) => match m {
                WorkerMsg::Register(_) => "WorkerMsg::Register".into(),
                WorkerMsg::Report(r) => match r {
                    FromWorker::Started { .. } => "WorkerMsg::Report::Started".into(),
                    FromWorker::Output { .. } => "WorkerMsg::Report::Output".into(),
                    FromWorker::Ready { .. } => "WorkerMsg::Report::Ready".into(),
                    FromWorker::Finished(_) => "WorkerMsg::Report::Finished".into(),
                },
                WorkerMsg::Heartbeat { .. } => "WorkerMsg::Heartbeat".into(),
                WorkerMsg::Leaving => "WorkerMsg::Leaving".into(),
            },
            Message::CoordinatorMsg(m) => match m {
                CoordinatorMsg::Work(w) => match w {
                    ToWorker::Assign(a) => match a.placement {
                        Placement::InPlace { .. } => "CoordinatorMsg::Work::Assign::InPlace".into(),
                        Placement::ExecRoot { .. } => {
                            "CoordinatorMsg::Work::Assign::ExecRoot".into()
                        }
                    },
                    ToWorker::Cancel { .. } => "CoordinatorMsg::Work::Cancel".into(),
                },
                CoordinatorMsg::Refused { .. } => "CoordinatorMsg::Refused".into(),
                CoordinatorMsg::Leave => "CoordinatorMsg::Leave".into(),
            },
            Message::BlobRequest(r) => match r {
                BlobRequest::Get { .. } => "BlobRequest::Get".into(),
                BlobRequest::Put { .. } => "BlobRequest::Put".into(),
            },
            Message::BlobAck(a) => match a {
                BlobAck::Stored => "BlobAck::Stored".into(),
                BlobAck::Refused { .. } => "BlobAck::Refused".into(),
            },
            Message::BlobHeader(_) => "BlobHeader".into(),
            Message::ClientMsg(m) => match m {
                ClientMsg::FindMissing { .. } => "ClientMsg::FindMissing".into(),
                ClientMsg::Begin { .. } => "ClientMsg::Begin".into(),
                ClientMsg::Tasks(_) => "ClientMsg::Tasks".into(),
                ClientMsg::Go => "ClientMsg::Go".into(),
                ClientMsg::Interrupt => "ClientMsg::Interrupt".into(),
                ClientMsg::Status => "ClientMsg::Status".into(),
                ClientMsg::Hermeticity => "ClientMsg::Hermeticity".into(),
                ClientMsg::Drain { .. } => "ClientMsg::Drain".into(),
                ClientMsg::Release { .. } => "ClientMsg::Release".into(),
            },
            Message::CoordinatorReply(r) => match r {
                CoordinatorReply::Missing { .. } => "CoordinatorReply::Missing".into(),
                CoordinatorReply::Accepted { .. } => "CoordinatorReply::Accepted".into(),
                CoordinatorReply::Event(e) => match e {
                    RunEvent::TaskStarted { .. } => "CoordinatorReply::Event::TaskStarted".into(),
                    RunEvent::Output { .. } => "CoordinatorReply::Event::Output".into(),
                    RunEvent::TaskFinished(_) => "CoordinatorReply::Event::TaskFinished".into(),
                    RunEvent::TaskReady { .. } => "CoordinatorReply::Event::TaskReady".into(),
                    RunEvent::Verdict { .. } => "CoordinatorReply::Event::Verdict".into(),
                    RunEvent::Notice { .. } => "CoordinatorReply::Event::Notice".into(),
                },
                CoordinatorReply::Artifact(_) => "CoordinatorReply::Artifact".into(),
                CoordinatorReply::Done(_) => "CoordinatorReply::Done".into(),
                CoordinatorReply::Status(_) => "CoordinatorReply::Status".into(),
                CoordinatorReply::Hermeticity(_) => "CoordinatorReply::Hermeticity".into(),
                CoordinatorReply::Error { .. } => "CoordinatorReply::Error".into(),
                CoordinatorReply::Draining { .. } => "CoordinatorReply::Draining".into(),
                CoordinatorReply::Released { .. } => "CoordinatorReply::Released".into(),
            },
        }
    }
}

/// Every variant [`Message::variant`] can name: each must have a golden fixture.
pub(crate) const EVERY_VARIANT: &[&str] = &[
    "Hello",
    "HelloReply::Welcome",
    "HelloReply::Reject",
    "WorkerMsg::Register",
    "WorkerMsg::Report::Started",
    "WorkerMsg::Report::Output",
    "WorkerMsg::Report::Ready",
    "WorkerMsg::Report::Finished",
    "WorkerMsg::Heartbeat",
    "WorkerMsg::Leaving",
    "CoordinatorMsg::Work::Assign::InPlace",
    "CoordinatorMsg::Work::Assign::ExecRoot",
    "CoordinatorMsg::Work::Cancel",
    "CoordinatorMsg::Refused",
    "CoordinatorMsg::Leave",
    "BlobRequest::Get",
    "BlobRequest::Put",
    "BlobAck::Stored",
    "BlobAck::Refused",
    "BlobHeader",
    "ClientMsg::FindMissing",
    "ClientMsg::Begin",
    "ClientMsg::Tasks",
    "ClientMsg::Go",
    "ClientMsg::Interrupt",
    "ClientMsg::Status",
    "ClientMsg::Hermeticity",
    "ClientMsg::Drain",
    "ClientMsg::Release",
    "CoordinatorReply::Missing",
    "CoordinatorReply::Accepted",
    "CoordinatorReply::Event::TaskStarted",
    "CoordinatorReply::Event::Output",
    "CoordinatorReply::Event::TaskFinished",
    "CoordinatorReply::Event::TaskReady",
    "CoordinatorReply::Event::Verdict",
    "CoordinatorReply::Event::Notice",
    "CoordinatorReply::Artifact",
    "CoordinatorReply::Done",
    "CoordinatorReply::Status",
    "CoordinatorReply::Hermeticity",
    "CoordinatorReply::Error",
    "CoordinatorReply::Draining",
    "CoordinatorReply::Released",
];

/// Decodes `payload` as every message type (for robustness tests: results are ignored, only
/// panics and allocations matter). Returns how many types accepted it.
pub(crate) fn decode_as_every_type(payload: &[u8]) -> usize {
    [
        decode_payload::<Hello>(payload).is_ok(),
        decode_payload::<HelloReply>(payload).is_ok(),
        decode_payload::<WorkerMsg>(payload).is_ok(),
        decode_payload::<CoordinatorMsg>(payload).is_ok(),
        decode_payload::<BlobRequest>(payload).is_ok(),
        decode_payload::<BlobAck>(payload).is_ok(),
        decode_payload::<BlobHeader>(payload).is_ok(),
        decode_payload::<ClientMsg>(payload).is_ok(),
        decode_payload::<CoordinatorReply>(payload).is_ok(),
    ]
    .into_iter()
    .filter(|ok| *ok)
    .count()
}

/// One fixture: its file stem under `tests/golden/` and the value it must decode to.
#[derive(Clone, Debug)]
pub(crate) struct Golden {
    /// `<name>.bin`.
    pub name: &'static str,
    /// The value, built here.
    pub msg: Message,
}

fn d(s: &str) -> Digest {
    Digest::of(s.as_bytes())
}

fn task(p: &str, t: &str) -> TaskId {
    TaskId::new(p, t)
}

fn spec_shell() -> TaskSpec {
    TaskSpec {
        id: task("@acme/web", "build"),
        project_dir: "apps/web".into(),
        command: CommandLine::Shell("npm run build -- \"$@\"".into()),
        args: vec!["--mode".into(), "production".into()],
        env: vec![("NODE_ENV".into(), "production".into()), ("CI".into(), "1".into())],
        unset_env: Vec::new(),
        timeout_ms: Some(600_000),
        retries: 2,
        outputs: vec!["dist/**".into(), "//build/web.txt".into()],
        persistent: false,
        ready_when: None,
        network: true,
        labels: Default::default(),
        proof: prova_protocol::spec::ProofPolicy {
            exempt: None,
            ignore: vec!["dist/build-info.json".into()],
            sandbox: true,
            direct_upstreams: true,
        },
        runtime: vec![prova_protocol::spec::RuntimeCheck {
            command: "node --version".into(),
            digest: d("v22.1.0\n"),
            shown: Some("v22.1.0".into()),
        }],
        programs: vec![prova_protocol::spec::ProgramCheck {
            word: "tsc".into(),
            path: "/usr/local/lib/node_modules/typescript/bin/tsc".into(),
            digest: d("tsc 5.6.3"),
        }],
        absent_programs: vec!["prettier".into()],
        stand_ins: vec![
            prova_protocol::spec::StandIn { path: "apps/web/README.md".into(), dir: false },
            prova_protocol::spec::StandIn { path: "apps/web/docs".into(), dir: true },
        ],
    }
}

fn spec_argv() -> TaskSpec {
    TaskSpec {
        id: task("lib", "test"),
        project_dir: String::new(),
        command: CommandLine::Argv(vec!["cargo".into(), "test".into(), "--locked".into()]),
        args: Vec::new(),
        env: Vec::new(),
        unset_env: Vec::new(),
        timeout_ms: None,
        retries: 0,
        outputs: Vec::new(),
        persistent: false,
        ready_when: None,
        network: false,
        labels: Default::default(),
        proof: Default::default(),
        runtime: Vec::new(),
        programs: Vec::new(),
        absent_programs: Vec::new(),
        stand_ins: Vec::new(),
    }
}

fn spec_persistent() -> TaskSpec {
    TaskSpec {
        id: task("api", "dev"),
        project_dir: "services/api".into(),
        command: CommandLine::Shell("./serve --port 8080".into()),
        args: Vec::new(),
        env: vec![("PORT".into(), "8080".into())],
        unset_env: Vec::new(),
        timeout_ms: None,
        retries: 0,
        outputs: Vec::new(),
        persistent: true,
        ready_when: Some("listening on \\d+".into()),
        network: true,
        labels: Default::default(),
        proof: prova_protocol::spec::ProofPolicy {
            exempt: Some("`side_effects = true`".into()),
            ignore: Vec::new(),
            sandbox: false,
            direct_upstreams: false,
        },
        runtime: Vec::new(),
        programs: Vec::new(),
        absent_programs: Vec::new(),
        stand_ins: Vec::new(),
    }
}

fn input_refs() -> Vec<InputRef> {
    vec![
        InputRef {
            path: "apps/web/src/main.ts".into(),
            digest: d("main.ts"),
            exec: false,
            symlink: None,
            tree: false,
        },
        InputRef {
            path: "apps/web/bin/run".into(),
            digest: d("run"),
            exec: true,
            symlink: None,
            tree: false,
        },
        InputRef {
            path: "apps/web/node_modules/.bin/tsc".into(),
            digest: d("../typescript/bin/tsc"),
            exec: false,
            symlink: Some("../typescript/bin/tsc".into()),
            tree: false,
        },
        InputRef {
            path: "node_modules".into(),
            digest: d("tree manifest"),
            exec: false,
            symlink: None,
            tree: true,
        },
    ]
}

fn components() -> KeyComponents {
    KeyComponents {
        version: 1,
        task: "@acme/web#build".into(),
        command: "sh:npm run build -- \"$@\"".into(),
        config: vec![
            ("network".into(), "true".into()),
            ("outputs".into(), "dist/**".into()),
            ("timeout".into(), "600s".into()),
        ],
        env: vec![("CI".into(), Some(d("1"))), ("SECRET_TOKEN".into(), None)],
        inputs: vec![
            InputFile {
                path: "apps/web/src/main.ts".into(),
                kind: InputKind::File,
                exec: false,
                digest: d("main.ts"),
            },
            InputFile {
                path: "apps/web/node_modules/.bin/tsc".into(),
                kind: InputKind::Symlink,
                exec: false,
                digest: d("../typescript/bin/tsc"),
            },
        ],
        workspace: vec![InputFile {
            path: "package-lock.json".into(),
            kind: InputKind::File,
            exec: false,
            digest: d("lock"),
        }],
        upstream: vec![("lib#build".into(), d("lib key"))],
        upstream_outputs: vec![("gen#build".into(), d("gen outputs"))],
        args: vec!["--mode".into(), "production".into()],
        platform: Some("linux/x86_64".into()),
    }
}

fn manifest() -> OutputManifest {
    OutputManifest::new(vec![
        ManifestEntry {
            path: "apps/web/dist".into(),
            kind: EntryKind::Dir,
            mode: 0o755,
            size: 0,
            digest: None,
            mtime_ns: 1_700_000_000_000_000_000,
            link_target: None,
        },
        ManifestEntry {
            path: "apps/web/dist/app.js".into(),
            kind: EntryKind::File,
            mode: 0o644,
            size: 12,
            digest: Some(d("console.log(1)")),
            mtime_ns: 1_700_000_000_123_456_789,
            link_target: None,
        },
        ManifestEntry {
            path: "apps/web/dist/latest.js".into(),
            kind: EntryKind::Symlink,
            mode: 0o777,
            size: 6,
            digest: Some(d("app.js")),
            mtime_ns: -1,
            link_target: Some("app.js".into()),
        },
        ManifestEntry {
            path: "apps/web/dist/run.sh".into(),
            kind: EntryKind::File,
            mode: 0o755,
            size: 3,
            digest: Some(d("#!\n")),
            mtime_ns: 1_700_000_001_000_000_000,
            link_target: None,
        },
    ])
}

fn stats() -> ExecStats {
    ExecStats { wall_ms: 1234, cpu_user_ms: 900, cpu_sys_ms: 110, max_rss_kb: 204_800 }
}

fn report(
    t: TaskId,
    status: TaskStatus,
    cache: CacheStatus,
    exit: Option<ExitKind>,
    note: Option<&str>,
) -> TaskReport {
    let ran = exit.is_some();
    TaskReport {
        key: Some(d(t.as_str())),
        task: t,
        status,
        cache,
        exit,
        attempts: u32::from(ran),
        stats: if ran { stats() } else { ExecStats::default() },
        worker: ran.then(|| WorkerId("w1".into())),
        note: note.map(str::to_owned),
        verdicts: Vec::new(),
    }
}

/// The name of a proof verdict's variant. Exhaustive on purpose: a new verdict does not
/// compile here until it is named, and [`EVERY_VERDICT`] says it needs a place in
/// [`verdicts`] (which the `Done` fixture carries).
pub(crate) fn verdict_variant(v: &Verdict) -> &'static str {
    match v {
        Verdict::ProvenDeterministic { .. } => "ProvenDeterministic",
        Verdict::Nondeterministic(_) => "Nondeterministic",
        Verdict::AllowedNondeterministic(_) => "AllowedNondeterministic",
        Verdict::RerunFailed { .. } => "RerunFailed",
        Verdict::UndeclaredInputs { .. } => "UndeclaredInputs",
        Verdict::UndeclaredOutputs { .. } => "UndeclaredOutputs",
        Verdict::SandboxFailed { .. } => "SandboxFailed",
        Verdict::ProvenComplete => "ProvenComplete",
        Verdict::NoOutputs => "NoOutputs",
        Verdict::NotVerified { .. } => "NotVerified",
        Verdict::Exempt { .. } => "Exempt",
        Verdict::NotSampled { .. } => "NotSampled",
    }
}

/// Every variant [`verdict_variant`] names.
pub(crate) const EVERY_VERDICT: &[&str] = &[
    "ProvenDeterministic",
    "Nondeterministic",
    "AllowedNondeterministic",
    "RerunFailed",
    "UndeclaredInputs",
    "UndeclaredOutputs",
    "SandboxFailed",
    "ProvenComplete",
    "NoOutputs",
    "NotVerified",
    "Exempt",
    "NotSampled",
];

fn divergence(single_machine: bool) -> Divergence {
    Divergence {
        added: vec!["dist/extra.map".into()],
        removed: vec!["dist/old.js".into()],
        changed: vec!["dist/app.js".into(), "dist/logo.png".into()],
        files: vec![
            FileDivergence {
                path: "dist/app.js".into(),
                diff: Some("@@ -1 +1 @@\n-built at 10:00\n+built at 10:01\n".into()),
                sizes: (15, 15),
                digests: (Some(d("built at 10:00")), Some(d("built at 10:01"))),
            },
            FileDivergence {
                path: "dist/logo.png".into(),
                diff: None,
                sizes: (2048, 0),
                digests: (Some(d("png")), None),
            },
        ],
        rerun_worker: Some(WorkerId("w2".into())),
        single_machine,
        modes: vec![ModeChange { path: "dist/app.js".into(), modes: (0o644, 0o444) }],
        perturbations: perturbations(),
        ignored: vec!["dist/build-info.json".into()],
    }
}

fn perturbations() -> Perturbations {
    let mut p = Perturbations::default();
    p.applied("clock", "+7d (libfaketime)");
    p.applied("cpus", "1 of 8");
    p.skipped("dir-order", "no executable tmpfs with room");
    p
}

/// One verdict of every kind.
pub(crate) fn verdicts() -> Vec<Verdict> {
    vec![
        Verdict::ProvenDeterministic {
            rerun_worker: Some(WorkerId("w2".into())),
            single_machine: false,
            perturbations: perturbations(),
            ignored: vec!["dist/build-info.json".into()],
        },
        Verdict::Nondeterministic(divergence(false)),
        Verdict::AllowedNondeterministic(divergence(true)),
        Verdict::RerunFailed {
            reason: "exit code 1 on the re-run".into(),
            log_tail: vec!["error: SOURCE_DATE_EPOCH is set".into()],
            perturbations: perturbations(),
        },
        Verdict::UndeclaredInputs {
            paths: vec!["apps/web/.env".into(), "apps/web/src/".into()],
            traced: true,
            more: 3,
            failed: Some("exit code 1".into()),
            log_tail: vec!["cat: .env: No such file or directory".into()],
            suggest: vec!["//libs/shared/**".into(), "src/**".into()],
            advice: Vec::new(),
            evidence: None,
        },
        Verdict::UndeclaredOutputs { paths: vec!["apps/web/tsconfig.tsbuildinfo".into()], more: 0 },
        Verdict::SandboxFailed {
            reason: "timed out".into(),
            traced: true,
            log_tail: vec!["waiting for /opt/marker".into()],
        },
        Verdict::ProvenComplete,
        Verdict::NoOutputs,
        Verdict::NotVerified { reason: "a cache hit: nothing ran".into() },
        Verdict::Exempt { reason: "`side_effects = true`: it must not run twice".into() },
        Verdict::NotSampled { fraction_ppm: 100_000, seed: 7 },
    ]
}

/// Reports covering every `TaskStatus`, `CacheStatus`, `ExitKind` and `Verdict` variant.
fn reports() -> Vec<TaskReport> {
    vec![
        TaskReport {
            verdicts: verdicts(),
            ..report(
                task("@acme/web", "build"),
                TaskStatus::Succeeded,
                CacheStatus::Hit { layer: "farm".into(), saved_ms: 4200, cutoff: true },
                Some(ExitKind::Code(0)),
                None,
            )
        },
        report(task("lib", "build"), TaskStatus::Succeeded, CacheStatus::Saved, None, None),
        report(
            task("lib", "test"),
            TaskStatus::Failed,
            CacheStatus::NotSaved { reason: "the task failed".into() },
            Some(ExitKind::Code(101)),
            Some("exit code 101"),
        ),
        report(
            task("lib", "bench"),
            TaskStatus::Failed,
            CacheStatus::Uncached,
            Some(ExitKind::Signal(9)),
            Some("killed by signal 9"),
        ),
        report(
            task("lib", "fuzz"),
            TaskStatus::Failed,
            CacheStatus::Uncached,
            Some(ExitKind::TimedOut),
            Some("timed out"),
        ),
        report(
            task("api", "dev"),
            TaskStatus::Aborted,
            CacheStatus::Uncached,
            Some(ExitKind::Aborted),
            None,
        ),
        report(
            task("docs", "build"),
            TaskStatus::Failed,
            CacheStatus::Uncached,
            Some(ExitKind::SpawnFailed("mdbook: not found".into())),
            Some("could not start: mdbook: not found"),
        ),
        report(
            task("docs", "deploy"),
            TaskStatus::Skipped,
            CacheStatus::Uncached,
            None,
            Some("docs#build failed"),
        ),
    ]
}

fn finished() -> Finished {
    Finished {
        attempt: AttemptId(42),
        exit: ExitKind::Code(0),
        tries: 2,
        stats: stats(),
        log: b"compiling\n\xff not utf-8 \xfe\ndone\n".to_vec(),
        log_omitted: 4096,
        outputs: Some(Outputs {
            fingerprint: manifest().fingerprint(),
            manifest: manifest(),
            artifact: Some((d("artifact"), 987_654)),
        }),
        missing_literals: vec!["apps/web/build/web.txt".into()],
        output_error: Some("apps/web/dist/socket: not a regular file".into()),
        reads: Some(ReadsReport {
            traced: true,
            missing: vec!["apps/web/.env".into()],
            listed: vec![Listing {
                dir: "apps/web/src".into(),
                entries: vec!["main.ts".into()],
                complete: true,
            }],
            touched: vec!["apps/web/tsconfig.base.json".into()],
            wrote: vec!["apps/web/tsconfig.tsbuildinfo".into()],
        }),
        isolation: Isolation::Bwrap,
        perturbed: Some(perturbations()),
        handback: None,
        exit_detail: Some("PATH was /usr/local/bin:/usr/bin:/bin".into()),
        wrote_outside: Some(WroteOutside {
            paths: vec!["apps/web/.eslintcache".into(), "apps/web/old.txt (removed)".into()],
            more: 3,
        }),
        withheld: Some("program `tool` appeared on this worker while the task ran".into()),
    }
}

fn assignment(placement: Placement, attempt: u64) -> Assignment {
    Assignment {
        attempt: AttemptId(attempt),
        spec: spec_shell(),
        placement,
        clean_outputs: true,
        collect_outputs: true,
        pack_to: Some("/var/cache/prova/worker/staging/a7.tar.zst".into()),
        perturb: Some(Perturb {
            umask: Some(0o077),
            env: vec![("TZ".into(), "Pacific/Chatham".into()), ("LANG".into(), "tr_TR".into())],
            reverse_env: true,
            hostname: Some("perturbed".into()),
            uid: Some(4242),
            root_parent: Some("/var/cache/prova/worker/roots-alt".into()),
            clock: Some("+7d".into()),
            one_cpu: true,
            tmpdir: true,
            shuffle_inputs: true,
        }),
        trace_reads: true,
        survey_on_failure: true,
    }
}

fn remote_tasks() -> Vec<RemoteTask> {
    let full = RemoteTask {
        spec: spec_shell(),
        kind: RemoteKind::Command,
        cacheable: true,
        key: Some(components().key()),
        components: components(),
        deps: vec![1],
        inputs: input_refs(),
        requested: true,
        weight: 31_000,
    };
    let mut lib = components();
    lib.task = "lib#test".into();
    lib.platform = None;
    let group = RemoteTask {
        spec: spec_argv(),
        kind: RemoteKind::Group,
        cacheable: false,
        key: Some(lib.key()),
        components: lib,
        deps: Vec::new(),
        inputs: Vec::new(),
        requested: false,
        weight: 0,
    };
    let mut dev = components();
    dev.task = "api#dev".into();
    let persistent = RemoteTask {
        spec: spec_persistent(),
        kind: RemoteKind::Persistent,
        cacheable: false,
        // Pending: an upstream it folds by outputs was unresolved on the client.
        key: None,
        components: dev,
        deps: vec![0, 1],
        inputs: Vec::new(),
        requested: true,
        weight: 5,
    };
    vec![full, group, persistent]
}

/// A worker short of disk.
fn health() -> prova_protocol::wire::WorkerHealth {
    prova_protocol::wire::WorkerHealth {
        disk_free: Some(819_200),
        disk_floor: Some(1_048_576),
        unfit: Some("disk low: 800.0 KiB free, floor 1.0 MiB".into()),
    }
}

/// Every fixture, in a stable order. File names are `<type>.<variant>[.<inner>]`.
pub(crate) fn goldens() -> Vec<Golden> {
    use Message as M;
    let hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        build_version: "prova 0.1.0".into(),
        role: "worker".into(),
        capabilities: vec!["blobs/v1".into(), "trace-reads".into()],
    };
    let worker_info = WorkerInfo {
        slots: 8,
        os: "linux".into(),
        arch: "x86_64".into(),
        labels: BTreeMap::from([
            ("pool".into(), "linux".into()),
            ("zone".into(), "eu-west-1a".into()),
        ]),
        sandbox: "bwrap 0.8.0".into(),
        running: vec![AttemptId(7), AttemptId(9)],
        health: Some(health()),
    };
    let exec_root = Placement::ExecRoot {
        inputs: input_refs(),
        upstream: vec![(d("lib artifact"), 1_048_576), (d("gen artifact"), 0)],
        local_source: Some("/home/dev/acme".into()),
        local_blobs: Some("/home/dev/.cache/prova/blobs".into()),
    };
    let in_place =
        Placement::InPlace { workspace_root: "/home/dev/acme".into(), protected: Vec::new() };
    let options = RunOptionsWire {
        continue_on_failure: true,
        read: true,
        write: false,
        verify: vec![prova_protocol::wire::Proof::Determinism, prova_protocol::wire::Proof::Inputs],
        verify_allow: vec![task("lib", "bench")],
        verify_sample: Some(prova_protocol::wire::VerifySample { ppm: 100_000, seed: 7 }),
        upstreams: prova_protocol::wire::UpstreamMode::Only,
        read_left_out: true,
    };
    let artifact = TaskArtifact {
        task: task("@acme/web", "build"),
        key: components().key(),
        artifact: Some((d("artifact"), 987_654)),
        manifest: rmp_serde::to_vec_named(&manifest()).expect("manifest encodes"),
        log: Some(d("log")),
        duration_ms: 31_000,
        tier: EntryTier::Pending,
    };
    let status = FarmStatus {
        workers: vec![
            WorkerStatus {
                id: WorkerId("w1".into()),
                slots: 8,
                busy: 2,
                platform: "linux/x86_64".into(),
                labels: BTreeMap::from([("pool".into(), "linux".into())]),
                sandbox: "bwrap 0.8.0".into(),
                running: vec![task("@acme/web", "build"), task("lib", "test")],
                version: "0.1.0".into(),
                health: Some(health()),
                quarantined: None,
                silent: false,
            },
            WorkerStatus {
                id: WorkerId("mac-1".into()),
                slots: 4,
                busy: 0,
                platform: "macos/aarch64".into(),
                labels: BTreeMap::new(),
                sandbox: "none".into(),
                running: Vec::new(),
                version: "0.1.0".into(),
                health: None,
                quarantined: Some("3 reports refused within 600 s; last: a forged manifest".into()),
                silent: false,
            },
        ],
        queued: 3,
        runs: 2,
        coordinator: Some(prova_protocol::wire::CoordinatorFacts {
            version: "0.1.0".into(),
            uptime_secs: 3_725,
            cache_entries: 412,
            cache_bytes: 91_000_000,
            hits: 380,
            misses: 95,
            held: None,
        }),
    };
    let reply = |r| M::CoordinatorReply(r);
    let event = |e| M::CoordinatorReply(CoordinatorReply::Event(e));
    let report_msg = |r| M::WorkerMsg(WorkerMsg::Report(r));
    vec![
        Golden { name: "hello", msg: M::Hello(hello) },
        Golden {
            name: "hello_reply.welcome",
            msg: M::HelloReply(HelloReply::Welcome(Welcome {
                protocol_version: PROTOCOL_VERSION,
                build_version: "prova 0.1.0".into(),
                peer: "w1".into(),
                key_salt: None,
            })),
        },
        Golden {
            name: "hello_reply.reject",
            msg: M::HelloReply(HelloReply::Reject(Reject {
                reason: "protocol version 2 is not supported (this coordinator speaks 1)".into(),
            })),
        },
        Golden { name: "worker_msg.register", msg: M::WorkerMsg(WorkerMsg::Register(worker_info)) },
        Golden {
            name: "worker_msg.report.started",
            msg: report_msg(FromWorker::Started { attempt: AttemptId(42), try_no: 2 }),
        },
        Golden {
            name: "worker_msg.report.output",
            msg: report_msg(FromWorker::Output {
                attempt: AttemptId(42),
                text: b"warning: unused variable\n\xe2\x9c\x93 ok\n".to_vec(),
            }),
        },
        Golden {
            name: "worker_msg.report.ready",
            msg: report_msg(FromWorker::Ready { attempt: AttemptId(43) }),
        },
        Golden {
            name: "worker_msg.report.finished",
            msg: report_msg(FromWorker::Finished(Box::new(finished()))),
        },
        Golden {
            name: "worker_msg.heartbeat",
            msg: M::WorkerMsg(WorkerMsg::Heartbeat {
                running: vec![AttemptId(42), AttemptId(43)],
                health: Some(health()),
            }),
        },
        Golden { name: "worker_msg.leaving", msg: M::WorkerMsg(WorkerMsg::Leaving) },
        Golden {
            name: "coordinator_msg.work.assign.exec_root",
            msg: M::CoordinatorMsg(CoordinatorMsg::Work(ToWorker::Assign(Box::new(assignment(
                exec_root, 42,
            ))))),
        },
        Golden {
            name: "coordinator_msg.work.assign.in_place",
            msg: M::CoordinatorMsg(CoordinatorMsg::Work(ToWorker::Assign(Box::new(Assignment {
                perturb: None,
                pack_to: None,
                trace_reads: false,
                survey_on_failure: false,
                clean_outputs: false,
                collect_outputs: false,
                ..assignment(in_place, 44)
            })))),
        },
        Golden {
            name: "coordinator_msg.work.cancel",
            msg: M::CoordinatorMsg(CoordinatorMsg::Work(ToWorker::Cancel {
                attempt: AttemptId(43),
            })),
        },
        Golden {
            name: "coordinator_msg.refused",
            msg: M::CoordinatorMsg(CoordinatorMsg::Refused {
                attempt: AttemptId(41),
                reason: "stale lease: attempt-41 was requeued".into(),
            }),
        },
        Golden {
            name: "blob_request.get",
            msg: M::BlobRequest(BlobRequest::Get { digest: d("blob") }),
        },
        Golden {
            name: "blob_request.put",
            msg: M::BlobRequest(BlobRequest::Put { digest: d("artifact"), size: 987_654 }),
        },
        Golden { name: "blob_ack.stored", msg: M::BlobAck(BlobAck::Stored) },
        Golden {
            name: "blob_ack.refused",
            msg: M::BlobAck(BlobAck::Refused { reason: "digest mismatch".into() }),
        },
        Golden {
            name: "blob_header",
            msg: M::BlobHeader(BlobHeader { digest: d("artifact"), size: 987_654 }),
        },
        Golden {
            name: "client_msg.find_missing",
            msg: M::ClientMsg(ClientMsg::FindMissing { digests: vec![d("a"), d("b"), d("c")] }),
        },
        Golden {
            name: "client_msg.begin",
            msg: M::ClientMsg(ClientMsg::Begin { options, tasks: 3 }),
        },
        Golden { name: "client_msg.tasks", msg: M::ClientMsg(ClientMsg::Tasks(remote_tasks())) },
        Golden { name: "client_msg.go", msg: M::ClientMsg(ClientMsg::Go) },
        Golden { name: "client_msg.interrupt", msg: M::ClientMsg(ClientMsg::Interrupt) },
        Golden { name: "client_msg.status", msg: M::ClientMsg(ClientMsg::Status) },
        Golden { name: "client_msg.hermeticity", msg: M::ClientMsg(ClientMsg::Hermeticity) },
        Golden {
            name: "client_msg.drain",
            msg: M::ClientMsg(ClientMsg::Drain { worker: WorkerId("w2".into()) }),
        },
        Golden {
            name: "coordinator_reply.draining",
            msg: reply(CoordinatorReply::Draining { running: 3 }),
        },
        Golden {
            name: "client_msg.release",
            msg: M::ClientMsg(ClientMsg::Release { worker: WorkerId("w3".into()) }),
        },
        Golden {
            name: "coordinator_reply.released",
            msg: reply(CoordinatorReply::Released {
                was: Some("3 reports refused within 600 s".into()),
            }),
        },
        Golden { name: "coordinator_msg.leave", msg: M::CoordinatorMsg(CoordinatorMsg::Leave) },
        Golden {
            name: "coordinator_reply.missing",
            msg: reply(CoordinatorReply::Missing { digests: vec![d("b")] }),
        },
        Golden {
            name: "coordinator_reply.accepted",
            msg: reply(CoordinatorReply::Accepted { run: RunId(17) }),
        },
        Golden {
            name: "coordinator_reply.event.task_started",
            msg: event(RunEvent::TaskStarted {
                task: task("@acme/web", "build"),
                attempt: 1,
                worker: WorkerId("w1".into()),
            }),
        },
        Golden {
            name: "coordinator_reply.event.output",
            msg: event(RunEvent::Output {
                task: task("@acme/web", "build"),
                text: b"built in 3.1s\n\xff\n".to_vec(),
            }),
        },
        Golden {
            name: "coordinator_reply.event.task_finished",
            msg: event(RunEvent::TaskFinished(reports().swap_remove(0))),
        },
        Golden {
            name: "coordinator_reply.event.task_ready",
            msg: event(RunEvent::TaskReady { task: task("api", "dev") }),
        },
        Golden {
            name: "coordinator_reply.event.verdict",
            msg: event(RunEvent::Verdict {
                task: task("lib", "bench"),
                verdict: Verdict::AllowedNondeterministic(divergence(false)),
            }),
        },
        Golden {
            name: "coordinator_reply.event.notice",
            msg: event(RunEvent::Notice {
                task: Some(task("lib", "test")),
                level: NoticeLevel::Warn,
                message: "no worker with label gpu=true; waiting".into(),
            }),
        },
        Golden {
            name: "coordinator_reply.event.notice_info",
            msg: event(RunEvent::Notice {
                task: None,
                level: NoticeLevel::Info,
                message: "3 of 5 tasks restored from the farm cache".into(),
            }),
        },
        Golden {
            name: "coordinator_reply.artifact",
            msg: reply(CoordinatorReply::Artifact(artifact)),
        },
        Golden {
            name: "coordinator_reply.done",
            msg: reply(CoordinatorReply::Done(RunSummary {
                ok: false,
                interrupted: true,
                wall_ms: 61_234,
                tasks: reports(),
            })),
        },
        Golden { name: "coordinator_reply.status", msg: reply(CoordinatorReply::Status(status)) },
        Golden {
            name: "coordinator_reply.hermeticity",
            msg: reply(CoordinatorReply::Hermeticity(
                "{\"keys\":[{\"task\":\"lib#bench\",\"fingerprints\":2}]}".into(),
            )),
        },
        Golden {
            name: "coordinator_reply.error",
            msg: reply(CoordinatorReply::Error {
                message: "a ci certificate is required to write the trusted tier".into(),
            }),
        },
    ]
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
#[derive(Debug)]
pub(crate) struct XorShift(u64);

impl XorShift {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Hex of `bytes` (for failure messages).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
