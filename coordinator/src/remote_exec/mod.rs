//! The REAPI executor (`prova run --remote-exec grpc://…`, `[exec.reapi]`): each assignment of
//! a local run becomes a REAPI `Action` executed by an existing remote-execution farm
//! (BuildGrid, Buildbarn, BuildBuddy). [`ReapiExecutor`] is the run's [`WorkSink`]: it plays
//! the worker's side of the link, so the run's own decisions — keys, hits, saves, proofs —
//! are those of any local run.
//!
//! Per assignment (an exec-root placement with local sources): the input root is read from
//! the workspace, the cache's upstream artifacts and installed trees ([`inputs`]); the
//! `Command`/`Action` and the Merkle tree are built ([`action`], pure; the command inside a
//! [`guard`] that checks the programs the key folds on the bot); only the blobs
//! `FindMissingBlobs` names are uploaded; `Execute`'s operation stream is followed
//! ([`operation`], pure: `WaitExecution` after a dropped stream, a re-upload after
//! `FAILED_PRECONDITION`, each bounded; `CancelOperation` on cancel); the result's outputs
//! are staged, checked against the declared outputs and collected like a local execution's
//! ([`outputs`]), and reported as `Finished` with the executing bot
//! (`ExecutedActionMetadata.worker`) as the worker. The run then saves them into prova's
//! cache and restores them into the workspace.
//!
//! A determinism re-run (`--verify`) is sent with `skip_cache_lookup` and a salt of its own
//! (a fresh execution, never the first one's cached result), with the perturbed environment
//! and umask; the perturbations a bot cannot be asked for are reported not applied.

pub mod action;
pub mod guard;
pub mod inputs;
pub mod operation;
pub mod outputs;
pub mod rpc;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prova_protocol::WorkerId;
use prova_protocol::events::Perturbations;
use prova_protocol::globs::PathGlobs;
use prova_protocol::ids::AttemptId;
use prova_protocol::spec::{ExecStats, ExitKind};
use prova_protocol::task::OwnedTask;
use prova_protocol::work::{Assignment, Finished, FromWorker, Isolation, Placement};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use self::action::{ActionInputs, Built};
use self::operation::{Ended, Follow, Next, Step};
use self::rpc::Source;
use crate::layers::local::MAX_LOG_BYTES;
use crate::layers::reapi::{ReapiClient, ReapiError};
use crate::run::{AssignHints, FromFarm, LinkClosed, LinkFuture, WorkSink};

/// What the executor reports as the worker before a bot is known.
pub const REAPI_WORKER: &str = "reapi";

/// The executor's settings.
#[derive(Clone, Debug)]
pub struct ExecSettings {
    /// Executions in flight at once (`-j`).
    pub slots: usize,
    /// Ask the server not to answer from its action cache (`--force`, a run that does not
    /// read the cache).
    pub skip_cache_lookup: bool,
    /// A directory of the executor's own (unpacked upstream artifacts, staged outputs);
    /// removed when the executor is dropped.
    pub scratch: PathBuf,
}

/// The run's work sink on a REAPI server.
pub struct ReapiExecutor {
    inner: Arc<Inner>,
    tasks: Mutex<HashMap<AttemptId, (CancellationToken, OwnedTask<()>)>>,
}

struct Inner {
    client: ReapiClient,
    sources: inputs::Sources,
    settings: ExecSettings,
    slots: Semaphore,
    reports: mpsc::Sender<FromFarm>,
}

impl Drop for ReapiExecutor {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.inner.settings.scratch);
    }
}

impl ReapiExecutor {
    /// An executor on `client`'s server, reading inputs from `workspace` and upstream
    /// artifacts from the cache's `blobs`; reports go to `reports`. Checks first that the
    /// server executes (one clear error when it does not, or cannot be reached).
    pub async fn start(
        client: ReapiClient,
        workspace: PathBuf,
        blobs: PathBuf,
        settings: ExecSettings,
        reports: mpsc::Sender<FromFarm>,
    ) -> Result<Self, ReapiError> {
        rpc::check_execution(&client).await?;
        std::fs::create_dir_all(&settings.scratch)
            .map_err(|source| ReapiError::Io { path: settings.scratch.clone(), source })?;
        let sources = inputs::Sources::new(workspace, blobs, settings.scratch.join("upstream"));
        let slots = Semaphore::new(settings.slots.max(1));
        Ok(Self {
            inner: Arc::new(Inner { client, sources, settings, slots, reports }),
            tasks: Mutex::new(HashMap::new()),
        })
    }
}

impl WorkSink for ReapiExecutor {
    fn assign(&self, a: Assignment, hints: AssignHints) -> LinkFuture<'_> {
        let token = CancellationToken::new();
        let attempt = a.attempt;
        let inner = self.inner.clone();
        let t = token.clone();
        let task = OwnedTask::spawn("reapi.execute", async move {
            let worker = std::sync::Mutex::new(WorkerId(REAPI_WORKER.to_owned()));
            let f = inner.run(a, hints, t, &worker).await;
            let worker = worker
                .lock()
                .map(|w| w.clone())
                .unwrap_or_else(|_| WorkerId(REAPI_WORKER.to_owned()));
            let _ = inner
                .reports
                .send(FromFarm { msg: FromWorker::Finished(Box::new(f)), worker })
                .await;
        });
        if let Ok(mut m) = self.tasks.lock() {
            m.retain(|_, (_, t)| !t.is_finished());
            m.insert(attempt, (token, task));
        }
        Box::pin(async { Ok::<(), LinkClosed>(()) })
    }

    fn cancel(&self, attempt: AttemptId) -> LinkFuture<'_> {
        if let Ok(m) = self.tasks.lock()
            && let Some((token, _)) = m.get(&attempt)
        {
            token.cancel();
        }
        Box::pin(async { Ok::<(), LinkClosed>(()) })
    }
}

/// How one execution ended, before it becomes a report.
enum Outcome {
    Result(Box<crate::layers::reapi::proto::re::ActionResult>),
    Aborted,
    Failed(String),
}

/// What a bot must check around `spec`'s command ([`guard`]): each program its key folds
/// with its SHA-256 here, the words found nowhere here, and each runtime input with what it
/// gave here. A relative word is not checked (a worker does not check it either: it names a
/// path beside the client's tree).
fn program_guard(
    sources: &inputs::Sources,
    spec: &prova_protocol::spec::TaskSpec,
) -> Result<guard::ProgramGuard, String> {
    let mut programs = Vec::new();
    for c in &spec.programs {
        if !c.word.starts_with('/') && c.word.contains('/') {
            continue;
        }
        let sha256 = sources
            .program_sha256(&c.path, c.digest)
            .map_err(|e| format!("program `{}`: {e}", c.word))?;
        programs.push(guard::GuardedProgram {
            word: c.word.clone(),
            client_path: c.path.clone(),
            sha256,
        });
    }
    let mut runtime = Vec::new();
    for r in &spec.runtime {
        let v = crate::keys::runtime::evaluate(sources.workspace(), &r.command);
        let why = if v.digest != r.digest {
            Some("it gives another result here than when the key was computed")
        } else if v.truncated() {
            Some("its output is too long to compare on a bot")
        } else {
            None
        };
        let code = v.code.ok_or("it gave no exit status here (killed or not started)");
        let sha = match (why, code) {
            (None, Ok(code)) => {
                crate::layers::reapi::map::sha256(&guard::runtime_stream(&v.stdout, code)).hash
            }
            (Some(why), _) | (None, Err(why)) => {
                return Err(format!("runtime input `{}`: {why}", r.command));
            }
        };
        runtime.push(guard::GuardedRuntime { command: r.command.clone(), sha256: sha });
    }
    let depth = spec.project_dir.split('/').filter(|c| !c.is_empty()).count();
    let root = if depth == 0 { ".".to_owned() } else { vec![".."; depth].join("/") };
    let absent = spec.absent_programs.clone();
    Ok(guard::ProgramGuard { programs, absent, runtime, root, env_keep: None })
}

impl Inner {
    async fn report(&self, attempt: AttemptId, msg: FromWorker) {
        let _ = attempt;
        let _ =
            self.reports.send(FromFarm { msg, worker: WorkerId(REAPI_WORKER.to_owned()) }).await;
    }

    async fn run(
        &self,
        a: Assignment,
        hints: AssignHints,
        cancel: CancellationToken,
        worker: &std::sync::Mutex<WorkerId>,
    ) -> Finished {
        let attempt = a.attempt;
        let failed = |why: String| Finished::never_ran(attempt, ExitKind::SpawnFailed(why));
        let _permit = tokio::select! {
            p = self.slots.acquire() => match p { Ok(p) => p, Err(_) => return failed("the executor is closed".into()) },
            () = cancel.cancelled() => return Finished::never_ran(attempt, ExitKind::Aborted),
        };
        let Placement::ExecRoot { inputs, upstream, .. } = &a.placement else {
            return failed("the REAPI executor needs an exec-root placement".into());
        };
        if a.spec.persistent {
            return failed("a persistent task cannot run on a REAPI farm".into());
        }
        let globs = match PathGlobs::new(&a.spec.project_dir, &a.spec.outputs) {
            Ok(g) => g,
            Err(e) => return failed(format!("outputs: {e}")),
        };
        let started = Instant::now();
        let (sources, inputs, upstream) = (self.sources.clone(), inputs.clone(), upstream.clone());
        let spec = a.spec.clone();
        let root = OwnedTask::spawn_blocking("reapi.input-root", move || {
            let root = sources.root(&inputs, &upstream).map_err(|e| e.to_string())?;
            let merkle = action::merkle(&root.entries).map_err(|e| e.to_string())?;
            let guard = program_guard(&sources, &spec)?;
            Ok::<_, String>((root, merkle, guard))
        })
        .join()
        .await;
        let (root, merkle, guard) = match root {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return failed(format!("building the input root: {e}")),
            Err(e) => return failed(format!("building the input root: {e}")),
        };
        let rerun = a.perturb.is_some();
        let built = action::build(
            &a.spec,
            &ActionInputs {
                roots: globs.roots(),
                input_root: merkle.root.clone(),
                platform: hints.platform.as_deref(),
                perturb: a.perturb.as_ref(),
                salt: if rerun {
                    format!("prova-rerun-{attempt}").into_bytes()
                } else {
                    Vec::new()
                },
                guard: &guard,
            },
        );
        let built = match built {
            Ok(b) => b,
            Err(e) => return failed(e.to_string()),
        };
        let mut blobs = root.blobs;
        blobs.extend(merkle.directories.into_iter().map(|(d, b)| (d, Source::Bytes(b))));
        blobs.push((
            crate::layers::reapi::map::sha256(&built.command),
            Source::Bytes(built.command.clone()),
        ));
        blobs.push((built.digest.clone(), Source::Bytes(built.action.clone())));
        let skip = rerun || self.settings.skip_cache_lookup;
        let tries = 1 + a.spec.retries;
        let mut last = None;
        for try_no in 1..=tries {
            self.report(attempt, FromWorker::Started { attempt, try_no }).await;
            let outcome = self.execute(&built, &blobs, skip || try_no > 1, &cancel).await;
            let done = self.finish(&a, &globs, outcome, try_no, started, worker).await;
            let again = !done.exit.success()
                && !matches!(done.exit, ExitKind::Aborted | ExitKind::SpawnFailed(_));
            last = Some(done);
            if !again {
                break;
            }
        }
        let mut f = last.unwrap_or_else(|| failed("no try ran".into()));
        if rerun {
            f.perturbed = Some(perturbations(a.perturb.as_ref()));
        }
        f
    }

    /// Uploads what is missing, executes, and follows the operation to its end.
    async fn execute(
        &self,
        built: &Built,
        blobs: &[(crate::layers::reapi::proto::re::Digest, Source)],
        skip: bool,
        cancel: &CancellationToken,
    ) -> Outcome {
        let c = &self.client;
        let mut follow = Follow::default();
        let mut next = Next::Reupload;
        loop {
            let stream = match std::mem::replace(&mut next, Next::Execute) {
                Next::Reupload => {
                    if let Err(e) = rpc::upload_missing(c, blobs.to_vec()).await {
                        // An unreachable server is retried like a dropped stream.
                        match follow.after(Ended::Error(tonic::Code::Unavailable, e.to_string())) {
                            Next::GiveUp(why) => return Outcome::Failed(why),
                            _ => {
                                next = Next::Reupload;
                                tokio::time::sleep(operation::backoff(follow.failures())).await;
                                continue;
                            }
                        }
                    }
                    rpc::execute(c, built.digest.clone(), skip).await
                }
                Next::Execute => rpc::execute(c, built.digest.clone(), skip).await,
                Next::Wait(name) => rpc::wait(c, name).await,
                Next::GiveUp(why) => return Outcome::Failed(why),
            };
            let ended = match stream {
                Err(s) => Ended::Error(s.code(), s.message().to_owned()),
                Ok(mut stream) => loop {
                    let msg = tokio::select! {
                        m = stream.message() => m,
                        () = cancel.cancelled() => {
                            if let Some(name) = follow.name.clone() {
                                rpc::cancel(c, name).await;
                            }
                            return Outcome::Aborted;
                        }
                    };
                    match msg {
                        Ok(Some(op)) => {
                            follow.message(&op);
                            match operation::read(&op) {
                                Step::Progress(stage) => {
                                    tracing::debug!(operation = %op.name, ?stage, "REAPI progress")
                                }
                                Step::Done(r) => match r.result {
                                    Some(result) => return Outcome::Result(Box::new(result)),
                                    None => return Outcome::Failed("no result".into()),
                                },
                                Step::MissingBlobs(m) => break Ended::MissingBlobs(m),
                                Step::Failed(why) => return Outcome::Failed(why),
                            }
                        }
                        Ok(None) => break Ended::Closed,
                        Err(s) => break Ended::Error(s.code(), s.message().to_owned()),
                    }
                },
            };
            next = follow.after(ended);
            if matches!(next, Next::Wait(_) | Next::Execute) {
                tokio::select! {
                    () = tokio::time::sleep(operation::backoff(follow.failures())) => {}
                    () = cancel.cancelled() => return Outcome::Aborted,
                }
            }
        }
    }

    /// The report of one try.
    async fn finish(
        &self,
        a: &Assignment,
        globs: &PathGlobs,
        outcome: Outcome,
        try_no: u32,
        started: Instant,
        worker: &std::sync::Mutex<WorkerId>,
    ) -> Finished {
        let attempt = a.attempt;
        let result = match outcome {
            Outcome::Aborted => return Finished::never_ran(attempt, ExitKind::Aborted),
            Outcome::Failed(why) => {
                return Finished::never_ran(
                    attempt,
                    ExitKind::SpawnFailed(format!("remote execution failed: {why}")),
                );
            }
            Outcome::Result(r) => r,
        };
        if let Some(m) = &result.execution_metadata
            && !m.worker.is_empty()
            && let Ok(mut w) = worker.lock()
        {
            *w = WorkerId(m.worker.clone());
        }
        let log = self.log(&result).await;
        if !log.is_empty() {
            self.report(attempt, FromWorker::Output { attempt, text: log.clone() }).await;
        }
        let exit = ExitKind::Code(result.exit_code);
        let mut f = Finished::never_ran(attempt, exit.clone());
        f.tries = try_no;
        f.stats = ExecStats { wall_ms: started.elapsed().as_millis() as u64, ..Default::default() };
        if result.exit_code == guard::GUARD_EXIT {
            // What the guard found, in the task's note beside the exit code.
            f.exit_detail = guard::reason(&log);
        }
        f.log = log;
        f.isolation = Isolation::Reapi;
        if exit.success() && a.collect_outputs {
            let staging = self.settings.scratch.join(format!("out-{attempt}"));
            let _ = std::fs::remove_dir_all(&staging);
            if let Err(e) = std::fs::create_dir_all(&staging) {
                f.output_error = Some(format!("{}: {e}", staging.display()));
                return f;
            }
            let staged =
                outputs::stage(&self.client, &result, globs, &a.spec.project_dir, &staging).await;
            let collected = match staged {
                Err(e) => Err(e.to_string()),
                Ok(()) => {
                    let (st, g, dir, pack) = (
                        staging.clone(),
                        globs.clone(),
                        a.spec.project_dir.clone(),
                        a.pack_to.clone(),
                    );
                    match OwnedTask::spawn_blocking("reapi.collect", move || {
                        outputs::collect(&st, &g, &dir, pack.as_deref())
                    })
                    .join()
                    .await
                    {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            };
            let _ = std::fs::remove_dir_all(&staging);
            match collected {
                Ok((o, missing)) => {
                    f.outputs = Some(o);
                    f.missing_literals = missing;
                }
                Err(e) => f.output_error = Some(e),
            }
        }
        f
    }

    /// stdout then stderr, bounded.
    async fn log(&self, r: &crate::layers::reapi::proto::re::ActionResult) -> Vec<u8> {
        let mut out = Vec::new();
        for (raw, digest) in [(&r.stdout_raw, &r.stdout_digest), (&r.stderr_raw, &r.stderr_digest)]
        {
            if !raw.is_empty() {
                out.extend_from_slice(raw);
            } else if let Some(d) = digest.as_ref().filter(|d| d.size_bytes > 0) {
                match rpc::read_bytes(&self.client, d, MAX_LOG_BYTES).await {
                    Ok(b) => out.extend_from_slice(&b),
                    Err(e) => out.extend_from_slice(
                        format!("prova: the log could not be read: {e}\n").as_bytes(),
                    ),
                }
            }
        }
        out.truncate(MAX_LOG_BYTES as usize);
        out
    }
}

/// What a REAPI re-run changed: its environment and umask go in the action; the rest
/// depends on the bot, which the API cannot ask for.
fn perturbations(p: Option<&prova_protocol::work::Perturb>) -> Perturbations {
    let mut out = Perturbations::default();
    let Some(p) = p else { return out };
    if let Some(m) = p.umask {
        out.applied("umask", format!("{m:03o}"));
    }
    for (k, v) in &p.env {
        out.applied("env", format!("{k}={v}"));
    }
    out.applied("execution", "a fresh action (salted, skip_cache_lookup) on the REAPI farm");
    let not = "a REAPI action cannot ask the bot for it";
    if p.clock.is_some() {
        out.skipped("clock", not);
    }
    if p.one_cpu {
        out.skipped("cpus", not);
    }
    if p.hostname.is_some() {
        out.skipped("hostname", not);
    }
    if p.tmpdir {
        out.skipped("tmpdir", not);
    }
    out
}
