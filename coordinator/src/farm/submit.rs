//! A run a client submitted (see [`super::client_session`]): its inputs checked against what
//! the client may see, its keys settled by the farm, its state machine handed to the farm
//! actor (which drives it, `runs.rs`) with the farm's store as its cache layer, and the
//! `run->client` relay of its events, then the artifacts to download, then the summary.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use prova_protocol::task::OwnedTask;
use prova_protocol::transport::Identity;
use prova_protocol::wire::{
    CoordinatorReply, EntryTier, Proof, RemoteKind, RemoteTask, RunOptionsWire, TaskArtifact,
};
use prova_protocol::{Digest, RunId, WorkerId};
use tokio::sync::{mpsc, oneshot};

use super::client_session::{FARM_RUN_CONCURRENCY, namespace_of, visibility_of};
use super::error::EdgeError;
use super::runs::{StartRun, run_events};
use super::server::Shared;
use crate::cache::{PENDING, TRUSTED};
use crate::keys::PlanKeys;
use crate::layers::CacheLayer as _;
use crate::layers::{FarmLayer, LocalLayer};
use crate::run::VerifyOptions;
use crate::run::plan::{PlannedTask, RunPlan, TaskKind};
use crate::run::{CachePolicy, ExecMode, RunCache, RunOptions, RunShellArgs};

/// Validates and starts a submitted run; returns its id and the task that relays its
/// events and, at the end, its artifacts and summary.
pub(super) async fn start(
    identity: &Identity,
    shared: &Arc<Shared>,
    options: RunOptionsWire,
    tasks: Vec<RemoteTask>,
    out: mpsc::Sender<CoordinatorReply>,
) -> Result<(RunId, OwnedTask<()>), EdgeError> {
    let plan = plan_of(&tasks).map_err(EdgeError::Refused)?;
    let namespace = namespace_of(identity);
    check_inputs(identity, shared, &tasks).await?;
    let mut keys = farm_keys(&plan, &tasks);
    let tmp: PathBuf = shared.tmp.clone();
    let layer = layer_of(shared, &namespace, &tmp);
    let policy = CachePolicy {
        read: options.read,
        write: options.write,
        read_left_out: options.read_left_out,
    };
    let mut hits = if policy.reads_any(options.upstreams) {
        crate::keys::progressive::presolve(&plan, &mut keys, |ks| layer.lookup(ks))
            .await
            .map_err(EdgeError::Layer)?
    } else {
        HashMap::new()
    };
    hits.retain(|&i, _| policy.reads(options.upstreams, &plan.tasks[i]));
    let own_logs = layer.clone();
    let (events, events_rx) = run_events(&plan);
    let (done_tx, done_rx) = oneshot::channel();
    let weights = tasks.iter().map(|t| t.weight.max(1)).collect();
    let args = RunShellArgs {
        plan,
        options: run_options(&options),
        weights,
        worker: WorkerId("farm".into()),
        events,
        done: done_tx,
        first_attempt: 1,
        cache: Some(RunCache {
            layer: Arc::new(layer),
            policy,
            keys,
            hits,
            staging: tmp,
            protected: Arc::default(),
        }),
        exec: ExecMode::ExecRoot { local_source: None, local_blobs: None },
        local_proof_sources: None,
    };
    let n = tasks.len();
    let run = shared
        .farm
        .ask(StartRun { args, namespace: namespace.clone() })
        .await
        .map_err(EdgeError::actor)?;
    // The run's events wait in their queue until the relay starts: `Accepted` goes first.
    let _ = out.send(CoordinatorReply::Accepted { run }).await;
    shared.observe.run_started(run, &format!("{} {}", identity.role, identity.name), &namespace, n);
    let relay = Relay { shared: shared.clone(), run, namespace, own_logs, out };
    // The `run->client` hop: the run's events, then its artifacts and summary, into the
    // client's queue (drained by the `farm->client` forwarder).
    let relay = OwnedTask::spawn("run->client", relay.run(events_rx, done_rx));
    Ok((run, relay))
}

/// Refuses a run whose inputs the client could not have: every input blob, and every blob
/// an input tree names, must be visible to it.
async fn check_inputs(
    identity: &Identity,
    shared: &Arc<Shared>,
    tasks: &[RemoteTask],
) -> Result<(), EdgeError> {
    let mut inputs: Vec<Digest> = tasks
        .iter()
        .flat_map(|t| t.inputs.iter().filter(|i| i.symlink.is_none()).map(|i| i.digest))
        .collect();
    let trees: Vec<(String, Digest)> = tasks
        .iter()
        .flat_map(|t| t.inputs.iter().filter(|i| i.tree).map(|i| (i.path.clone(), i.digest)))
        .collect();
    inputs.sort_unstable();
    inputs.dedup();
    let who = identity.clone();
    let unseen = shared
        .store
        .call(move |s| -> Result<Result<Option<Digest>, String>, crate::cache::CacheError> {
            // A tree's files are inputs too: its manifest must be one, and every blob it names
            // visible to the client, or a crafted manifest could mount another identity's blob.
            for (path, d) in trees {
                match tree_blobs(s, &path, &d)? {
                    Ok(blobs) => inputs.extend(blobs),
                    Err(why) => return Ok(Err(why)),
                }
            }
            inputs.sort_unstable();
            inputs.dedup();
            unseen_input(s, &who, &inputs).map(Ok)
        })
        .await??
        .map_err(EdgeError::Refused)?;
    if let Some(d) = unseen {
        return Err(EdgeError::UnseenInput { blob: d.short(), name: identity.name.clone() });
    }
    Ok(())
}

/// The run's keys as the farm settles them: from the client's components, upstreams keyed
/// by the farm itself.
fn farm_keys(plan: &RunPlan, tasks: &[RemoteTask]) -> PlanKeys {
    let mut keys = PlanKeys {
        keys: vec![None; tasks.len()],
        components: tasks.iter().map(|t| t.components.clone()).collect(),
        stamps: vec![Vec::new(); tasks.len()],
        shadows: Vec::new(),
        // Exec roots on the farm hold what each task's `inputs` list (the client's refs).
        unfolded: Vec::new(),
        closures: Default::default(),
    };
    // The farm keys the upstreams itself, from its own entries and executions: what the
    // client predicted from its local cache is not taken on trust.
    keys.settle_all(plan, &|_| None);
    keys
}

/// The cache layer of a run in `namespace`.
fn layer_of(shared: &Shared, namespace: &str, tmp: &std::path::Path) -> FarmLayer {
    let inner = LocalLayer::new(shared.store.clone(), namespace, tmp);
    // Under --trust=proven a trusted run's entries wait for a second worker's agreement.
    if shared.trust_proven && namespace == TRUSTED {
        FarmLayer::proven(inner, TRUSTED)
    } else {
        FarmLayer::new(inner, namespace).demoting(shared.trust_proven)
    }
}

/// The run's options from the client's.
fn run_options(options: &RunOptionsWire) -> RunOptions {
    RunOptions {
        concurrency: FARM_RUN_CONCURRENCY,
        continue_on_failure: options.continue_on_failure,
        verify: VerifyOptions {
            determinism: options.verify.contains(&Proof::Determinism),
            inputs: options.verify.contains(&Proof::Inputs),
            allow: options.verify_allow.iter().cloned().collect(),
            // The client judges what a traced run touched against its workspace.
            workspace: None,
            sample: options.verify_sample,
        },
        upstreams: options.upstreams,
    }
}

/// The `run->client` hop of one run.
struct Relay {
    shared: Arc<Shared>,
    run: prova_protocol::RunId,
    namespace: String,
    /// Whose logs the run may replay.
    own_logs: FarmLayer,
    out: mpsc::Sender<CoordinatorReply>,
}

impl Relay {
    /// The run's events, then its artifacts and summary.
    async fn run(
        self,
        mut events_rx: mpsc::Receiver<prova_protocol::events::RunEvent>,
        done_rx: oneshot::Receiver<prova_protocol::events::RunSummary>,
    ) {
        let Self { shared, run, out, .. } = &self;
        while let Some(ev) = events_rx.recv().await {
            shared.observe.event(*run, &ev);
            if out.send(CoordinatorReply::Event(ev)).await.is_err() {
                break;
            }
        }
        let summary = done_rx.await;
        shared.observe.run_finished(*run, summary.as_ref().ok());
        let Ok(summary) = summary else {
            let _ = out
                .send(CoordinatorReply::Error {
                    message: "the run stopped without a summary".to_owned(),
                })
                .await;
            return;
        };
        self.artifacts(&summary).await;
        let _ = self.out.send(CoordinatorReply::Done(without_evidence(summary))).await;
    }

    /// The artifacts of every task that has an entry now, for the client to download.
    async fn artifacts(&self, summary: &prova_protocol::events::RunSummary) {
        let wanted: Vec<Digest> = summary
            .tasks
            .iter()
            .filter(|r| r.status == prova_protocol::events::TaskStatus::Succeeded)
            .filter_map(|r| r.key)
            .collect();
        // Under --trust=proven this run's own saves wait in `pending`: they are served to it
        // (its outputs) and to nobody else until a second worker agrees.
        let own: Vec<Digest> = if self.shared.trust_proven && self.namespace == TRUSTED {
            summary
                .tasks
                .iter()
                .filter(|r| matches!(r.cache, prova_protocol::events::CacheStatus::Saved))
                .filter_map(|r| r.key)
                .collect()
        } else {
            Vec::new()
        };
        let proven = self.shared.trust_proven;
        let namespace = self.namespace.clone();
        let found = self
            .shared
            .store
            .call(move |s| {
                if proven {
                    s.demote_unproven(TRUSTED, PENDING, &wanted)?; // proofs only (ledger.rs)
                }
                let mut found = crate::layers::farm::lookup(s, &namespace, &wanted)?;
                for (k, e) in s.get_entries(PENDING, &own)? {
                    found.entry(k).or_insert(e);
                }
                Ok::<_, crate::cache::CacheError>(found)
            })
            .await;
        let Ok(Ok(entries)) = found else { return };
        // By the key each task resolved to in the run (settled as its upstreams finished).
        for r in &summary.tasks {
            if let Some(e) = r.key.and_then(|k| entries.get(&k)) {
                let msg = CoordinatorReply::Artifact(TaskArtifact {
                    task: r.task.clone(),
                    key: e.key,
                    artifact: e.artifact,
                    manifest: e.manifest.clone(),
                    // A log is data of its tier: only the run's own tier's is sent.
                    log: e.log.filter(|_| self.own_logs.replays_log_of(&e.namespace)),
                    duration_ms: e.duration_ms,
                    tier: tier_of(&e.namespace),
                });
                let _ = self.out.send(msg).await;
            }
        }
    }
}

/// `summary` with the evidence of its inputs verdicts emptied: the client judged each one
/// from the task's report already (`TaskFinished`), so the summary, one frame holding every
/// task, carries only the marker that says which verdict to replace.
fn without_evidence(
    mut summary: prova_protocol::events::RunSummary,
) -> prova_protocol::events::RunSummary {
    for v in summary.tasks.iter_mut().flat_map(|t| t.verdicts.iter_mut()) {
        if let prova_protocol::events::Verdict::UndeclaredInputs { evidence: Some(e), .. } = v {
            **e = Default::default();
        }
    }
    summary
}

/// The file blobs of installed tree `d` at `path` (its manifest read from the store and
/// checked as a worker will), or why it cannot be used.
fn tree_blobs(
    s: &crate::cache::Store,
    path: &str,
    d: &Digest,
) -> Result<Result<Vec<Digest>, String>, crate::cache::CacheError> {
    let limit = prova_protocol::tree::MAX_MANIFEST_BYTES as u64;
    let Some(bytes) = s.read_blob_verified(d, limit)? else {
        return Ok(Err(format!(
            "installed tree `{path}`: its manifest {} was not uploaded",
            d.short()
        )));
    };
    Ok(prova_protocol::tree::TreeManifest::decode(&bytes, path)
        .map(|m| m.blobs())
        .map_err(|e| format!("installed tree `{path}`: {e}")))
}

/// The first input of `tasks` that `identity` may not use: a run may only name blobs its
/// certificate may see (else its task could copy another identity's blob into an output).
fn unseen_input(
    s: &crate::cache::Store,
    identity: &Identity,
    digests: &[Digest],
) -> Result<Option<Digest>, crate::cache::CacheError> {
    let Some(v) = visibility_of(identity) else { return Ok(None) };
    for d in digests {
        if !s.blob_visible(&v, d)? {
            return Ok(Some(*d));
        }
    }
    Ok(None)
}

/// The tier a client is told an entry of store namespace `ns` has.
fn tier_of(ns: &str) -> EntryTier {
    match ns {
        TRUSTED => EntryTier::Trusted,
        PENDING => EntryTier::Pending,
        _ => EntryTier::Untrusted,
    }
}

/// A plan from submitted tasks; refuses what the farm cannot run (bad indices, cycles,
/// persistent tasks, unclean paths).
fn plan_of(tasks: &[RemoteTask]) -> Result<RunPlan, String> {
    let n = tasks.len();
    let mut planned = Vec::with_capacity(n);
    for (i, t) in tasks.iter().enumerate() {
        if t.kind == RemoteKind::Persistent {
            return Err(format!(
                "{} is persistent: persistent tasks run locally, not on the farm",
                t.spec.id
            ));
        }
        // The farm files entries under the client's key and shows its components in `why`:
        // the two must agree, in the key format this farm speaks.
        if t.components.version != prova_protocol::key::KEY_VERSION {
            return Err(format!(
                "{} is keyed in key format v{}; this farm keys in v{}: use the farm's prova version",
                t.spec.id,
                t.components.version,
                prova_protocol::key::KEY_VERSION
            ));
        }
        if t.key.is_some_and(|k| t.components.key() != k) {
            return Err(format!("{}: its key is not the fold of its components", t.spec.id));
        }
        // The trees it mounts are the trees its key folds, digest for digest.
        let mut mounted: Vec<(String, String)> = t
            .inputs
            .iter()
            .filter(|i| i.tree)
            .map(|i| crate::trees::key_pair(&i.path, &i.digest))
            .collect();
        let mut keyed: Vec<(String, String)> = t
            .components
            .config
            .iter()
            .filter(|(k, _)| k.starts_with(crate::trees::KEY_PREFIX))
            .cloned()
            .collect();
        mounted.sort();
        keyed.sort();
        if mounted != keyed {
            return Err(format!(
                "{}: the installed trees it mounts are not the ones its key folds",
                t.spec.id
            ));
        }
        if let Some(&d) = t.deps.iter().find(|&&d| d as usize >= n || d as usize == i) {
            return Err(format!("{} depends on task index {d}, which does not exist", t.spec.id));
        }
        if !t.spec.project_dir.is_empty()
            && !prova_protocol::globs::is_clean_relative(&t.spec.project_dir)
        {
            return Err(format!(
                "{}: project dir {:?} is not a clean relative path",
                t.spec.id, t.spec.project_dir
            ));
        }
        if let Some(bad) =
            t.inputs.iter().find(|i| !prova_protocol::globs::is_clean_relative(&i.path))
        {
            return Err(format!(
                "{}: input path {:?} is not a clean relative path",
                t.spec.id, bad.path
            ));
        }
        planned.push(PlannedTask {
            id: t.spec.id.clone(),
            project: usize::MAX,
            kind: if t.kind == RemoteKind::Group { TaskKind::Group } else { TaskKind::Command },
            spec: t.spec.clone(),
            cacheable: t.cacheable && t.kind == RemoteKind::Command,
            deps: t.deps.iter().map(|&d| d as usize).collect(),
            requested: t.requested,
            inputs: t.inputs.clone(),
        });
    }
    // Acyclic, or the scheduler would wait forever.
    let mut unmet: Vec<usize> = planned.iter().map(|t| t.deps.len()).collect();
    let mut dependents = vec![Vec::new(); n];
    for (i, t) in planned.iter().enumerate() {
        for &d in &t.deps {
            dependents[d].push(i);
        }
    }
    let mut stack: Vec<usize> = (0..n).filter(|&i| unmet[i] == 0).collect();
    let mut seen = 0;
    while let Some(x) = stack.pop() {
        seen += 1;
        for &d in &dependents[x] {
            unmet[d] -= 1;
            if unmet[d] == 0 {
                stack.push(d);
            }
        }
    }
    if seen != n {
        return Err("the submitted graph has a cycle".to_owned());
    }
    Ok(RunPlan { root: PathBuf::new(), tasks: planned })
}
