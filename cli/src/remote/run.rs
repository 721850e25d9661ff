//! `prova run --remote`: key locally (the same code as local mode), upload the inputs the
//! farm lacks, submit the graph, render its events, then bring the outputs back.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context as _;
use prova_coordinator::prepare::Prepared;
use prova_coordinator::run::TaskKind;
use prova_coordinator::run::sandbox_violation;
use prova_coordinator::run::undeclared::{self, WorkspaceView};
use prova_protocol::events::{RunEvent, RunSummary, TaskReport, TaskStatus, Verdict};
use prova_protocol::spec::ProgramCheck;
use prova_protocol::transport::{self, frame};
use prova_protocol::wire::{
    BlobAck, BlobRequest, ClientMsg, CoordinatorReply, RemoteKind, RemoteTask, RunOptionsWire,
    TaskArtifact,
};
use prova_protocol::{Digest, TaskId};
use tokio::sync::mpsc;

use super::Session;

/// Tasks per `Tasks` frame (well under the frame cap for typical input lists).
pub const TASK_CHUNK: usize = 256;
/// Uploads in flight at once.
pub const PARALLEL_UPLOADS: usize = 8;

/// How long an upload waits for the coordinator's answer once its bytes are sent (it hashes
/// and files them first: seconds for the largest blobs).
const UPLOAD_ANSWER_WAIT: Duration = Duration::from_secs(120);

/// What came back from the farm.
pub struct RemoteOutcome {
    /// The summary.
    pub summary: RunSummary,
    /// Artifacts to bring back, by task.
    pub artifacts: Vec<TaskArtifact>,
}

/// The tasks of `prepared` as the farm wants them.
pub fn remote_tasks(root: &Path, prepared: &Prepared) -> Vec<RemoteTask> {
    let plan = &prepared.plan;
    plan.tasks
        .iter()
        .zip(prepared.exec_root_inputs(root))
        .enumerate()
        .map(|(i, (t, root_inputs))| RemoteTask {
            spec: {
                // The farm's workers must reproduce each runtime input the key folds.
                let mut spec = t.spec.clone();
                spec.runtime = prova_coordinator::keys::runtime::checks(
                    root,
                    &prepared.keys.components[i].config,
                );
                (spec.programs, spec.absent_programs) = program_checks(prepared, i);
                spec.stand_ins = root_inputs.stand_ins;
                spec
            },
            kind: match t.kind {
                TaskKind::Group => RemoteKind::Group,
                TaskKind::Command => RemoteKind::Command,
                TaskKind::Persistent => RemoteKind::Persistent,
            },
            cacheable: t.cacheable,
            key: prepared.key(i),
            components: prepared.keys.components[i].clone(),
            deps: t.deps.iter().map(|&d| d as u32).collect(),
            inputs: root_inputs.inputs,
            requested: t.requested,
            weight: prepared.durations.get(t.id.as_str()).copied().unwrap_or(1),
        })
        .collect()
}

/// The programs a farm's worker or bot must find for task `i` of `prepared` as the client
/// did: those its key folds, and the words found nowhere (`TaskSpec::programs`,
/// `TaskSpec::absent_programs`).
pub fn program_checks(prepared: &Prepared, i: usize) -> (Vec<ProgramCheck>, Vec<String>) {
    (
        prova_coordinator::keys::binaries::checks(&prepared.keys.components[i].config),
        prepared.absent_programs.get(&i).cloned().unwrap_or_default(),
    )
}

/// What [`upload_missing`] moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Uploaded {
    /// Distinct blobs the tasks need.
    pub needed: usize,
    /// Blobs uploaded (the farm lacked them).
    pub blobs: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Uploads the blobs of `tasks` the coordinator lacks (file bytes read from `root`): their
/// input files, and for each installed tree they mount its manifest (from `.prova/trees`)
/// and its files — content-addressed, so a tree another client already shipped moves nothing.
pub async fn upload_missing(
    s: &mut Session,
    root: &Path,
    tasks: &[RemoteTask],
    trees: &[prova_coordinator::trees::ScannedTree],
) -> anyhow::Result<Uploaded> {
    let mut by_digest: HashMap<Digest, PathBuf> = HashMap::new();
    let mut mounted: HashSet<Digest> = HashSet::new();
    for t in tasks {
        for i in t.inputs.iter().filter(|i| i.symlink.is_none()) {
            if i.tree {
                mounted.insert(i.digest);
            } else {
                by_digest.entry(i.digest).or_insert_with(|| root.join(&i.path));
            }
        }
    }
    for tree in trees.iter().filter(|t| mounted.contains(&t.digest)) {
        by_digest.entry(tree.digest).or_insert_with(|| tree.manifest_file.clone());
        for e in &tree.manifest()?.entries {
            if let prova_protocol::tree::TreeKind::File { digest, .. } = e.kind {
                by_digest.entry(digest).or_insert_with(|| root.join(&tree.path).join(&e.path));
            }
        }
    }
    let digests: Vec<Digest> = by_digest.keys().copied().collect();
    let mut missing = Vec::new();
    for chunk in digests.chunks(4096) {
        frame::write_msg(&mut s.send, &ClientMsg::FindMissing { digests: chunk.to_vec() }).await?;
        match frame::read_msg::<_, CoordinatorReply>(&mut s.recv).await? {
            Some(CoordinatorReply::Missing { digests }) => missing.extend(digests),
            Some(CoordinatorReply::Error { message }) => {
                anyhow::bail!("the coordinator: {message}")
            }
            other => anyhow::bail!("unexpected reply to FindMissing: {other:?}"),
        }
    }
    let mut done = Uploaded { needed: by_digest.len(), blobs: missing.len(), bytes: 0 };
    let mut queue = missing.into_iter();
    let mut running = tokio::task::JoinSet::new();
    loop {
        while running.len() < PARALLEL_UPLOADS {
            let Some(d) = queue.next() else { break };
            let Some(path) = by_digest.get(&d) else { continue };
            let (conn, path) = (s.conn.clone(), path.clone());
            running.spawn(async move { upload(conn, d, path).await });
        }
        match running.join_next().await {
            Some(r) => done.bytes += r??,
            None => break,
        }
    }
    Ok(done)
}

async fn upload(conn: quinn::Connection, digest: Digest, path: PathBuf) -> anyhow::Result<u64> {
    let file = tokio::fs::File::open(&path)
        .await
        .with_context(|| format!("cannot read {}", path.display()))?;
    let size = file.metadata().await?.len();
    let (mut send, mut recv) = conn.open_bi().await?;
    let sent = async {
        frame::write_msg(&mut send, &BlobRequest::Put { digest, size }).await?;
        transport::send_blob(&mut send, digest, size, file).await
    }
    .await;
    // A coordinator that refuses the upload (a quota, a digest mismatch) answers, then stops
    // the stream: the answer is read even when the sending side already failed for it. A send
    // that failed here (the file went short) resets the stream, so the coordinator stops
    // waiting for the rest; and the wait for its answer is bounded either way.
    match &sent {
        Ok(()) => drop(send.finish()),
        Err(_) => drop(send.reset(quinn::VarInt::from_u32(0))),
    }
    let answer =
        match tokio::time::timeout(UPLOAD_ANSWER_WAIT, frame::read_msg::<_, BlobAck>(&mut recv))
            .await
        {
            Ok(read) => read.map_err(anyhow::Error::from),
            Err(_) => Err(anyhow::anyhow!(
                "no answer from the coordinator within {} s",
                UPLOAD_ANSWER_WAIT.as_secs()
            )),
        };
    match (answer, sent) {
        (Ok(Some(BlobAck::Refused { reason })), _) => {
            anyhow::bail!(
                "uploading {} was refused: {reason} (did it change since the run started?)",
                path.display()
            )
        }
        (_, Err(e)) => Err(e).with_context(|| format!("uploading {}", path.display())),
        (Ok(Some(BlobAck::Stored)), Ok(())) => Ok(size),
        (Ok(None), Ok(())) => {
            anyhow::bail!("uploading {}: the coordinator closed the stream", path.display())
        }
        (Err(e), Ok(())) => Err(e).with_context(|| format!("uploading {}", path.display())),
    }
}

/// How long an interrupted run waits for the coordinator's summary before leaving anyway.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// Submits `tasks` and relays the run's events to `events` until it is done. A Ctrl-C sends
/// `Interrupt` (the farm cancels the run's tasks) and waits for the summary — at most
/// [`INTERRUPT_GRACE`], or until a second Ctrl-C: a coordinator that does not answer cannot
/// hold the client (closing the connection interrupts the run on its side too). Events pass
/// through `merge` (a re-submitted run's repeats are dropped: `super::reattach`).
pub async fn submit_merged(
    s: &mut Session,
    tasks: Vec<RemoteTask>,
    options: RunOptionsWire,
    events: &mpsc::Sender<RunEvent>,
    judge: &mut Judge,
    merge: &mut super::reattach::Merge,
) -> anyhow::Result<RemoteOutcome> {
    // Listening from before the run exists: a Ctrl-C while it is submitted is not lost.
    let mut interrupt = Box::pin(crate::local::signal_listener());
    frame::write_msg(&mut s.send, &ClientMsg::Begin { options, tasks: tasks.len() as u32 }).await?;
    for chunk in tasks.chunks(TASK_CHUNK) {
        frame::write_msg(&mut s.send, &ClientMsg::Tasks(chunk.to_vec())).await?;
    }
    frame::write_msg(&mut s.send, &ClientMsg::Go).await?;
    let mut artifacts = Vec::new();
    let mut interrupted = false;
    let mut give_up: Pin<Box<dyn Future<Output = String> + Send>> =
        Box::pin(std::future::pending());
    loop {
        let reply = tokio::select! {
            () = &mut interrupt, if !interrupted => {
                interrupted = true;
                merge.interrupted = true;
                // Listening before the `Interrupt` goes out: a second Ctrl-C right after it
                // must not be missed.
                let again = crate::local::signal_listener();
                give_up = Box::pin(async move {
                    tokio::select! {
                        () = tokio::time::sleep(INTERRUPT_GRACE) => format!(
                            "the coordinator did not end the run within {} s",
                            INTERRUPT_GRACE.as_secs()
                        ),
                        () = again => "interrupted again".to_owned(),
                    }
                });
                // A coordinator that stopped reading must not hold this write either.
                tokio::time::timeout(
                    INTERRUPT_GRACE,
                    frame::write_msg(&mut s.send, &ClientMsg::Interrupt),
                )
                .await
                .map_err(|_| anyhow::anyhow!("interrupted: the coordinator does not read; leaving"))??;
                continue;
            }
            why = &mut give_up => {
                anyhow::bail!(
                    "interrupted: {why}; leaving without its summary (closing the connection \
                     cancels the run's tasks)"
                )
            }
            r = frame::read_msg::<_, CoordinatorReply>(&mut s.recv) => r?,
        };
        match reply {
            Some(CoordinatorReply::Accepted { run }) => tracing::info!(%run, "run accepted"),
            Some(CoordinatorReply::Event(ev)) => {
                let ev = match ev {
                    RunEvent::Verdict { task, verdict } => match judge.event(&task, verdict) {
                        Some(verdict) => RunEvent::Verdict { task, verdict },
                        None => continue,
                    },
                    RunEvent::TaskFinished(mut report) => {
                        judge.finished(&mut report);
                        RunEvent::TaskFinished(report)
                    }
                    other => other,
                };
                if let Some(ev) = merge.filter(ev) {
                    let _ = events.send(ev).await;
                }
            }
            Some(CoordinatorReply::Artifact(a)) => artifacts.push(a),
            Some(CoordinatorReply::Done(summary)) => {
                return Ok(RemoteOutcome { summary, artifacts });
            }
            Some(CoordinatorReply::Error { message }) => {
                anyhow::bail!("the coordinator: {message}")
            }
            Some(other) => tracing::debug!("ignored reply {other:?}"),
            None => anyhow::bail!("the coordinator closed the connection before the run finished"),
        }
    }
}

/// The tasks whose outputs to bring back.
pub fn wanted(tasks: &[RemoteTask], mode: crate::args::DownloadMode) -> BTreeSet<TaskId> {
    use crate::args::DownloadMode;
    tasks
        .iter()
        .filter(|t| match mode {
            DownloadMode::All => true,
            DownloadMode::Requested => t.requested,
            DownloadMode::None => false,
        })
        .map(|t| t.spec.id.clone())
        .collect()
}

/// Judges a farm run's inputs proofs against this workspace: the coordinator has none, so
/// its inputs verdicts carry what each traced run touched (`evidence`), and the client
/// decides exactly as a local run decides ([`WorkspaceView::judge`],
/// [`undeclared::inputs_verdict`]) — same paths, patterns and advice. Every copy of a
/// verdict is judged before anything renders it: the task's report (`TaskFinished`), its
/// `Verdict` events, and the summary (whose copies the coordinator sends without their
/// evidence: they are replaced by the report's judgement).
///
/// A `sandbox = true` task the coordinator failed on what it looked up comes with those
/// verdicts whether or not the run asked for `--verify=inputs`: its note is worded again
/// from the judged verdicts, as a local run words it ([`sandbox_violation`]), and the
/// verdicts are kept only when the run asked for the proof.
pub struct Judge {
    view: WorkspaceView,
    /// Each task's project directory, by id.
    dirs: HashMap<TaskId, String>,
    /// What each task's evidence verdict became (`None`: nothing; its writes were the
    /// finding), judged once from its report.
    judged: HashMap<TaskId, Option<Verdict>>,
    /// The `sandbox = true` tasks.
    sandboxed: HashSet<TaskId>,
    /// The run asked for the inputs proof.
    verify_inputs: bool,
    /// The note each failed sandboxed task got from its judged verdicts.
    notes: HashMap<TaskId, String>,
}

impl Judge {
    /// A judge of the tasks of `prepared` against `view`; `verify_inputs`: the run asked
    /// for the inputs proof.
    pub fn new(view: WorkspaceView, prepared: &Prepared, verify_inputs: bool) -> Self {
        let tasks = &prepared.plan.tasks;
        let dirs = tasks.iter().map(|t| (t.id.clone(), t.spec.project_dir.clone())).collect();
        let sandboxed = tasks.iter().filter(|t| t.spec.proof.sandbox).map(|t| t.id.clone());
        Self {
            view,
            dirs,
            judged: HashMap::new(),
            sandboxed: sandboxed.collect(),
            verify_inputs,
            notes: HashMap::new(),
        }
    }

    /// A task's report (`TaskFinished`), its verdicts judged ([`Self::report`]); a failed
    /// sandboxed task's note worded from them.
    pub fn finished(&mut self, r: &mut TaskReport) {
        let task = r.task.clone();
        let violation = self.sandboxed.contains(&task)
            && r.status == TaskStatus::Failed
            && r.verdicts.iter().any(has_evidence);
        self.report(&task, &mut r.verdicts);
        if violation && let Some(note) = sandbox_violation(&r.verdicts) {
            self.notes.insert(task.clone(), note);
        }
        self.sandbox_note(r);
    }

    /// The judged note of a sandboxed task, and its inputs verdicts dropped unless asked for.
    fn sandbox_note(&self, r: &mut TaskReport) {
        if !self.sandboxed.contains(&r.task) {
            return;
        }
        if let Some(note) = self.notes.get(&r.task) {
            r.note = Some(note.clone());
        }
        if !self.verify_inputs {
            r.verdicts.retain(|v| !inputs_proof(v));
        }
    }

    /// `verdicts` (task `task`'s, in its report) with its evidence judged.
    pub fn report(&mut self, task: &TaskId, verdicts: &mut Vec<Verdict>) {
        let wrote_outside = verdicts.iter().any(|v| matches!(v, Verdict::UndeclaredOutputs { .. }));
        let mut out = Vec::with_capacity(verdicts.len());
        for v in verdicts.drain(..) {
            if !has_evidence(&v) {
                out.push(v);
                continue;
            }
            let judged = match self.judged.get(task) {
                Some(j) => j.clone(),
                None => {
                    let j = self.decide(task, v, wrote_outside);
                    self.judged.insert(task.clone(), j.clone());
                    j
                }
            };
            out.extend(judged);
        }
        *verdicts = out;
    }

    /// One verdict event of `task`, judged; `None`: it says nothing (drop the event).
    pub fn event(&mut self, task: &TaskId, v: Verdict) -> Option<Verdict> {
        if !self.verify_inputs && self.sandboxed.contains(task) && inputs_proof(&v) {
            return None;
        }
        if !has_evidence(&v) {
            return Some(v);
        }
        if let Some(j) = self.judged.get(task) {
            return j.clone();
        }
        let j = self.decide(task, v, false);
        self.judged.insert(task.clone(), j.clone());
        j
    }

    /// Every report of `s` judged ([`Self::report`]), then whether the run is green
    /// recomputed.
    pub fn summary(&mut self, s: &mut RunSummary) {
        for t in &mut s.tasks {
            let task = t.task.clone();
            self.report(&task, &mut t.verdicts);
            self.sandbox_note(t);
        }
        let tasks_ok =
            s.tasks.iter().all(|t| t.status == prova_protocol::events::TaskStatus::Succeeded);
        let proofs_ok = s.tasks.iter().all(|t| !t.verdicts.iter().any(|v| v.fails()));
        s.ok = tasks_ok && proofs_ok && !s.interrupted;
    }

    fn decide(&self, task: &TaskId, v: Verdict, wrote_outside: bool) -> Option<Verdict> {
        let Verdict::UndeclaredInputs { failed, log_tail, evidence: Some(reads), .. } = v else {
            return Some(v);
        };
        let dir = self.dirs.get(task).map_or("", String::as_str);
        let judged = self.view.judge(task.as_str(), dir, &reads);
        undeclared::inputs_verdict(judged, wrote_outside, failed, log_tail)
    }
}

/// A verdict of the inputs proof (what a traced execution of a sandboxed task yields).
fn inputs_proof(v: &Verdict) -> bool {
    matches!(
        v,
        Verdict::UndeclaredInputs { .. }
            | Verdict::UndeclaredOutputs { .. }
            | Verdict::SandboxFailed { .. }
            | Verdict::ProvenComplete
    )
}

fn has_evidence(v: &Verdict) -> bool {
    matches!(v, Verdict::UndeclaredInputs { evidence: Some(_), .. })
}
