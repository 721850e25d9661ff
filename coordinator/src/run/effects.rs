//! The IO behind the run machine's longer commands, carried out off the actor by
//! [`super::actor`]: a save (checked against the task's newest entry, then filed, then put
//! back into the workspace when the task ran in an exec root), the read of an assumed task's
//! outputs on disk, a diverging re-run recorded and compared file by file, and the ledger
//! writes the end of a run waits for ([`Background`]).

use std::path::PathBuf;
use std::sync::Arc;

use prova_protocol::artifact::{ArtifactError, collect_outputs};
use prova_protocol::events::Verdict;
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::OutputManifest;
use prova_protocol::task::OwnedTask;

use super::cached::{SaveDone, SaveJob};
use super::core as decide;
use super::verify::DiffJob;
use crate::layers::{CacheLayer, LayerError, SaveOutcome, SaveRequest};

/// How long the end of a run waits for its ledger writes.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Restoring a saved entry into the workspace after an exec-root execution failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestoreError {
    /// The layer failed.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// The entry just saved was not found.
    #[error("the entry vanished after saving")]
    Vanished,
}

/// Saving an execution failed (the task is reported `NotSaved`, `saving failed: …`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SaveError {
    /// The layer refused or failed the save.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// The entry was saved, but its outputs could not be put back into the workspace.
    #[error("restoring the outputs into the workspace failed: {0}")]
    IntoWorkspace(#[source] RestoreError),
}

/// Carries out [`super::machine::Command::Save`].
pub(super) async fn save(layer: Arc<dyn CacheLayer>, job: SaveJob) -> SaveDone {
    let SaveJob { node, req, globs, patterns, project, restore_into_workspace } = job;
    let key = req.key;
    // Asked before the save (after it, the newest entry is this one).
    let newest = layer.newest_entry(req.task.clone()).await.ok().flatten();
    let (emptied, shrunk, blocked_cutoff) =
        against_newest(&project, &patterns, &req, newest.as_ref());
    let mut result = match decide::emptied_refusal(&emptied) {
        Some(reason) => Ok(SaveOutcome::Withheld(reason)),
        None => layer.save(req).await.map_err(SaveError::Layer),
    };
    if restore_into_workspace && matches!(result, Ok(SaveOutcome::Saved)) {
        let restored = match layer.entry(key).await {
            Ok(Some(entry)) => {
                layer.restore(entry, globs, project).await.map(|_| ()).map_err(RestoreError::Layer)
            }
            Ok(None) => Err(RestoreError::Vanished),
            Err(e) => Err(RestoreError::Layer(e)),
        };
        if let Err(e) = restored {
            result = Err(SaveError::IntoWorkspace(e));
        }
    }
    SaveDone { node, result, shrunk, blocked_cutoff }
}

/// What `task`'s newest entry says of the execution `req` is about to file: the declared
/// outputs it emptied (not saved), the fewer-files warning, and the upstreams that kept their
/// bytes but moved its key ([`crate::keys::progressive::blocked_cutoff`]).
fn against_newest(
    project_dir: &str,
    patterns: &[String],
    req: &SaveRequest,
    newest: Option<&crate::cache::Entry>,
) -> (Vec<(String, usize)>, Option<String>, Vec<String>) {
    use prova_protocol::key::KeyComponents;
    let Some(newest) = newest else { return (Vec::new(), None, Vec::new()) };
    // An entry whose manifest does not decode says nothing (its restore refuses it).
    let manifest = rmp_serde::from_slice::<OutputManifest>(&newest.manifest).ok();
    let emptied = manifest.as_ref().map_or_else(Vec::new, |m| {
        decide::emptied_outputs(project_dir, patterns, &req.manifest, m)
    });
    let now = crate::layers::local::output_count(&req.manifest);
    let shrunk = manifest
        .as_ref()
        .and_then(|m| decide::shrunk_warning(patterns, now, crate::layers::local::output_count(m)));
    let blocked = rmp_serde::from_slice::<KeyComponents>(&newest.components)
        .map(|old| crate::keys::progressive::blocked_cutoff(&req.components, &old))
        .unwrap_or_default();
    (emptied, shrunk, blocked)
}

/// Carries out [`super::machine::Command::ReadOutputs`] (on a blocking thread).
pub(super) async fn read_outputs(
    root: PathBuf,
    globs: PathGlobs,
) -> Result<OutputManifest, ArtifactError> {
    let read = OwnedTask::spawn_blocking("run.assume.read", move || collect_outputs(&root, &globs));
    match read.join().await {
        Ok(r) => r,
        Err(e) => Err(ArtifactError::Io {
            path: PathBuf::from("."),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

/// Carries out [`super::machine::Command::Diff`]: records the re-run first (a local
/// re-run's artifact becomes a blob), then compares the two artifacts file by file.
pub(super) async fn diff(layer: Arc<dyn CacheLayer>, job: DiffJob) -> Verdict {
    let DiffJob { mut execution, staged, first, rerun, mut divergence, allowed, .. } = job;
    execution.time_ms = crate::layers::local::now_ms();
    let _ = layer.record(execution, staged).await;
    let mut changed = divergence.changed.clone();
    changed.extend(divergence.added.iter().cloned());
    changed.extend(divergence.removed.iter().cloned());
    if let Ok(files) = layer.diff(first, rerun, changed).await {
        divergence.files = files;
    }
    super::verdicts::divergence_verdict(divergence, allowed)
}

/// Ledger writes and comparisons in flight (not aborted by a node's save or restore).
#[derive(Default)]
pub(super) struct Background(Vec<OwnedTask<()>>);

impl Background {
    pub(super) fn spawn(
        &mut self,
        name: &'static str,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.0.retain(|t| !t.is_finished());
        self.0.push(OwnedTask::spawn(name, fut));
    }

    /// Waits (bounded) for ledger writes and comparisons still running: the run's summary
    /// must not outlive its evidence, and the actor's stop would abort them.
    pub(super) async fn drain(&mut self) {
        let tasks = std::mem::take(&mut self.0);
        let all = async {
            for t in tasks {
                let _ = t.join().await;
            }
        };
        if tokio::time::timeout(DRAIN_TIMEOUT, all).await.is_err() {
            tracing::warn!("ledger writes did not finish within {DRAIN_TIMEOUT:?}");
        }
    }
}
