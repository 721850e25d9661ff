//! `prova run --remote-exec grpc://…` (or `[exec.reapi]`): the run's tasks execute on a REAPI
//! farm. The coordinator's run actor is the same as a local run's; its work sink is the
//! REAPI executor (`prova_coordinator::remote_exec`) instead of the in-process
//! worker, and tasks are placed in exec roots built from this workspace and its cache, so
//! every result is saved in the local cache and restored into the workspace from there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kameo::prelude::*;
use prova_coordinator::layers::reapi::{ReapiClient, ReapiConfig};
use prova_coordinator::remote_exec::{ExecSettings, REAPI_WORKER, ReapiExecutor};
use prova_coordinator::run::{
    Begin, ExecMode, FromFarm, Interrupt, RunActor, RunActorArgs, RunCache, RunOptions, RunPlan,
};
use prova_protocol::WorkerId;
use prova_protocol::events::{RunEvent, RunSummary};
use prova_protocol::task::OwnedTask;
use tokio::sync::{mpsc, oneshot};

/// The start of a remote execution's scratch directory in `.prova/tmp` (then `<pid>-exec`).
const SCRATCH: &str = "reapi-";

/// Bound on executor reports in flight.
const REPORT_QUEUE: usize = 256;

/// The farm a run executes on: `--remote-exec URL` (over `[exec.reapi]`'s endpoint), else
/// `[exec.reapi]`; `None` to run here (`--remote-exec local`, or neither given).
pub fn config(root: &Path, flag: Option<&str>) -> anyhow::Result<Option<ReapiConfig>> {
    if flag == Some("local") {
        return Ok(None);
    }
    Ok(prova_coordinator::config::reapi::load_exec(root, flag)?)
}

/// Why a run cannot execute remotely, checked before anything runs.
pub fn refusal(writes_cache: bool, remote_farm: bool, verify_inputs: bool) -> Option<&'static str> {
    if remote_farm {
        return Some("--remote-exec and --remote: a run executes on one farm");
    }
    if verify_inputs {
        // A proof that cannot be carried out must not end as a run with no verdict.
        return Some(
            "--verify=inputs (and =all) traces each task's reads in a sandbox, which a REAPI \
             action cannot ask a bot for: prove inputs here (--remote-exec local) or on prova's farm \
             (--remote); --verify (determinism) works with --remote-exec",
        );
    }
    (!writes_cache).then_some(
        "--remote-exec needs a cache it can write: remote results reach the workspace through \
         the local cache (drop --no-cache / a read-only --cache)",
    )
}

/// Why `id`, a `sandbox = true` task that must execute, cannot run on a REAPI farm.
pub fn sandboxed_refusal(id: &impl std::fmt::Display) -> String {
    format!(
        "`{id}` sets `sandbox = true`: its reads are traced and checked, which a REAPI action \
         cannot ask a bot for; run it here (--remote-exec local) or on prova's farm (--remote)"
    )
}

/// Runs `plan` on the REAPI farm `cfg`. Inputs come from `root` and upstream outputs from the
/// cache's `blobs`; Ctrl-C and SIGTERM interrupt the run (running actions are cancelled
/// with `CancelOperation`).
#[expect(clippy::too_many_arguments, reason = "the run's parts, each from its own step")]
pub async fn run(
    plan: RunPlan,
    options: RunOptions,
    events: mpsc::Sender<RunEvent>,
    cache: RunCache,
    weights: Vec<u64>,
    cfg: &ReapiConfig,
    root: PathBuf,
    blobs: PathBuf,
) -> anyhow::Result<RunSummary> {
    let fail = |e: &dyn std::fmt::Display| {
        // The client's errors name the endpoint already: once is enough.
        let text = e.to_string();
        let text = text.strip_prefix(&format!("{}: ", cfg.endpoint)).unwrap_or(&text);
        anyhow::anyhow!("--remote-exec {}: {text}", cfg.endpoint)
    };
    let client = ReapiClient::new(cfg).map_err(|e| fail(&e))?;
    let (reports_tx, mut reports) = mpsc::channel::<FromFarm>(REPORT_QUEUE);
    let verify = options.verify.any();
    // The scratch directory carries this process's pid: one a run killed outright left is
    // removed here, its prova being gone.
    let tmp = root.join(".prova").join("tmp");
    prova_protocol::pidname::sweep(&tmp, &[SCRATCH], prova_protocol::pidname::Entries::Dirs);
    let settings = ExecSettings {
        slots: options.concurrency.max(1) * if verify { 2 } else { 1 },
        skip_cache_lookup: !cache.policy.read,
        scratch: tmp.join(format!("{}exec", prova_protocol::pidname::prefix(SCRATCH))),
    };
    let exec = ReapiExecutor::start(client, root.clone(), blobs.clone(), settings, reports_tx)
        .await
        .map_err(|e| fail(&e))?;
    let (done_tx, done_rx) = oneshot::channel();
    let run = RunActor::spawn(RunActorArgs {
        plan,
        options,
        weights,
        work: Arc::new(exec),
        worker: WorkerId(REAPI_WORKER.to_owned()),
        events,
        done: done_tx,
        first_attempt: 1,
        cache: Some(cache),
        exec: ExecMode::ExecRoot { local_source: Some(root), local_blobs: Some(blobs) },
        local_proof_sources: None,
    });
    let run_ref = run.clone();
    let _reports = OwnedTask::spawn("reapi.reports", async move {
        while let Some(msg) = reports.recv().await {
            if run_ref.tell(msg).await.is_err() {
                break;
            }
        }
    });
    let run_ref = run.clone();
    let _signals = OwnedTask::spawn("reapi.signals", async move {
        crate::local::wait_for_signal().await;
        let _ = run_ref.tell(Interrupt).await;
    });
    run.tell(Begin).await.map_err(|e| anyhow::anyhow!("run actor: {e}"))?;
    done_rx.await.map_err(|_| anyhow::anyhow!("the run actor stopped without a summary"))
}
