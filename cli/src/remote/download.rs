//! Bringing a remote run's outputs home: each wanted artifact's manifest is checked against
//! the task's declared outputs first (a refused one is fetched, filed and written nowhere);
//! then the artifact (and log) is fetched into the local cache unless it is there already,
//! filed as a local entry under the same key in the namespace matching the farm tier it came
//! from (only a trusted farm entry lets the next local run hit), and restored into the
//! workspace by the local layer, which checks the archive against the manifest before it
//! writes.

use std::collections::{BTreeSet, HashMap};

use prova_coordinator::cache::{CacheThread, NewEntry, PENDING, TRUSTED, UNTRUSTED};
use prova_coordinator::layers::LocalLayer;
use prova_coordinator::layers::local::now_ms;
use prova_coordinator::prepare::Prepared;
use prova_protocol::artifact::confine::{ConfineError, check_manifest_confined};
use prova_protocol::events::{CacheStatus, RunSummary, TaskStatus};
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::OutputManifest;
use prova_protocol::transport::{self, frame};
use prova_protocol::wire::{BlobAck, BlobRequest, EntryTier, TaskArtifact};
use prova_protocol::{Digest, TaskId};

/// The largest blob brought back.
pub const MAX_BLOB: u64 = 8 * 1024 * 1024 * 1024;

/// What the download did.
#[derive(Debug, Default)]
pub struct Downloaded {
    /// Tasks whose outputs are now in the workspace.
    pub restored: usize,
    /// Blobs fetched over the network.
    pub fetched: usize,
    /// Tasks whose outputs were not brought home, and why (a manifest outside the task's
    /// outputs, an archive that does not match it, a disk error).
    pub refused: Vec<(TaskId, String)>,
}

/// The local namespace an entry of farm tier `tier` is filed under: only a trusted farm
/// entry becomes a trusted (locally served) one.
pub fn local_namespace(tier: EntryTier) -> &'static str {
    match tier {
        EntryTier::Trusted => TRUSTED,
        EntryTier::Pending => PENDING,
        EntryTier::Untrusted => UNTRUSTED,
    }
}

/// Why a downloaded artifact's manifest is refused; its `Display` is the refusal's note.
#[derive(Debug)]
pub enum ManifestRefusal {
    /// It does not decode.
    Corrupt(rmp_serde::decode::Error),
    /// It names paths outside the task's declared outputs.
    Unconfined(ConfineError),
}

impl std::fmt::Display for ManifestRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Corrupt(e) => write!(f, "the farm sent a corrupt manifest: {e}"),
            Self::Unconfined(e) => {
                write!(f, "the farm sent outputs outside the task's declared outputs: {e}")
            }
        }
    }
}

impl std::error::Error for ManifestRefusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Corrupt(e) => Some(e),
            Self::Unconfined(e) => Some(e),
        }
    }
}

/// The manifest of `a`, if the task (declared `outputs` of the project at `project_dir`)
/// may write it; otherwise why not.
pub fn checked_manifest(
    a: &TaskArtifact,
    outputs: &PathGlobs,
    project_dir: &str,
) -> Result<OutputManifest, ManifestRefusal> {
    let manifest: OutputManifest =
        rmp_serde::from_slice(&a.manifest).map_err(ManifestRefusal::Corrupt)?;
    check_manifest_confined(&manifest, outputs, project_dir)
        .map_err(ManifestRefusal::Unconfined)?;
    Ok(manifest)
}

/// Marks the tasks whose download was refused as failed in `summary`: their outputs are not
/// in the workspace.
pub fn apply_refusals(summary: &mut RunSummary, refused: &[(TaskId, String)]) {
    for (task, why) in refused {
        if let Some(r) = summary.tasks.iter_mut().find(|r| &r.task == task) {
            r.status = TaskStatus::Failed;
            r.note = Some(format!("its outputs were not brought home: {why}"));
            summary.ok = false;
        }
    }
}

/// The `wanted` tasks that exited 0 on the farm with declared outputs the client cannot
/// have: no artifact came for them (the farm did not store their outputs: the summary's
/// not-saved reason says why), or their artifact lacks a declared literal output. Each with
/// why; [`apply_refusals`] then fails them, since their outputs are not in the workspace.
/// Uncached tasks are left alone (the farm keeps nothing of them by design).
pub fn outputs_missing(
    summary: &RunSummary,
    prepared: &Prepared,
    artifacts: &[TaskArtifact],
    wanted: &BTreeSet<TaskId>,
) -> Vec<(TaskId, String)> {
    let mut out = Vec::new();
    // By task id: a search of the plan and the artifacts per task was quadratic.
    let specs: std::collections::HashMap<&TaskId, _> =
        prepared.plan.tasks.iter().map(|t| (&t.id, &t.spec)).collect();
    let mut by_task: std::collections::HashMap<&TaskId, &TaskArtifact> =
        std::collections::HashMap::with_capacity(artifacts.len());
    for a in artifacts {
        by_task.entry(&a.task).or_insert(a); // the first, as the search found it
    }
    for r in &summary.tasks {
        if r.status != TaskStatus::Succeeded
            || !wanted.contains(&r.task)
            || matches!(r.cache, CacheStatus::Uncached)
            // A hit without a farm artifact was restored by the local cache.
            || (matches!(r.cache, CacheStatus::Hit { .. }) && !by_task.contains_key(&r.task))
        {
            continue;
        }
        let Some(&spec) = specs.get(&r.task) else {
            continue;
        };
        if spec.outputs.is_empty() {
            continue;
        }
        let Some(&a) = by_task.get(&r.task) else {
            let why = match &r.cache {
                CacheStatus::NotSaved { reason } => format!(": {reason}"),
                _ => String::new(),
            };
            out.push((r.task.clone(), format!("it exited 0 but the farm kept no outputs{why}")));
            continue;
        };
        // A manifest that does not decode is refused by the download itself.
        let (Ok(globs), Ok(manifest)) = (
            PathGlobs::new(&spec.project_dir, &spec.outputs),
            rmp_serde::from_slice::<OutputManifest>(&a.manifest),
        ) else {
            continue;
        };
        let absent = globs
            .literals()
            .iter()
            .find(|l| !manifest.entries.iter().any(|e| &e.path == *l))
            .cloned();
        if let Some(l) = absent {
            out.push((
                r.task.clone(),
                format!("it exited 0 but its declared output `{l}` is not in its artifact"),
            ));
        }
    }
    out
}

/// Fetches, files and restores the artifacts of `wanted` tasks.
pub async fn download(
    conn: &quinn::Connection,
    cache: &CacheThread,
    layer: &LocalLayer,
    prepared: &Prepared,
    artifacts: &[TaskArtifact],
    wanted: &BTreeSet<TaskId>,
) -> anyhow::Result<Downloaded> {
    let mut out = Downloaded::default();
    let index: HashMap<&TaskId, usize> =
        prepared.plan.tasks.iter().enumerate().map(|(i, t)| (&t.id, i)).collect();
    // Keys that folded an upstream's outputs are settled here from the artifacts' manifests,
    // as the farm settled them: an artifact whose key is not the one this client computes
    // is refused; one it cannot compute (an upstream had no artifact) is filed as named.
    let fingerprints: HashMap<usize, Digest> = artifacts
        .iter()
        .filter_map(|a| {
            let m: OutputManifest = rmp_serde::from_slice(&a.manifest).ok()?;
            Some((*index.get(&a.task)?, m.fingerprint()))
        })
        .collect();
    let mut keys = prepared.keys.clone();
    keys.settle_all(&prepared.plan, &|d| fingerprints.get(&d).copied());
    for a in artifacts.iter().filter(|a| wanted.contains(&a.task)) {
        let Some(&i) = index.get(&a.task) else { continue };
        if let Some(k) = keys.key(i)
            && k != a.key
        {
            let why = format!(
                "the farm filed it under key {}, this client computes {}",
                a.key.short(),
                k.short()
            );
            tracing::warn!(task = %a.task, "refusing a download: {why}");
            out.refused.push((a.task.clone(), why));
            continue;
        }
        let spec = &prepared.plan.tasks[i].spec;
        let globs = PathGlobs::new(&spec.project_dir, &spec.outputs)?;
        // Checked before anything is fetched, filed or written.
        let manifest = match checked_manifest(a, &globs, &spec.project_dir) {
            Ok(m) => m,
            Err(why) => {
                tracing::warn!(task = %a.task, "refusing a download: {why}");
                out.refused.push((a.task.clone(), why.to_string()));
                continue;
            }
        };
        for d in a.artifact.map(|(d, _)| d).into_iter().chain(a.log) {
            if fetch(conn, cache, d).await? {
                out.fetched += 1;
            }
        }
        let components = rmp_serde::to_vec_named(&keys.components[i])?;
        let ns = local_namespace(a.tier);
        let entry = NewEntry {
            namespace: ns.to_owned(),
            key: a.key,
            task: a.task.to_string(),
            artifact: a.artifact,
            log: a.log,
            manifest: a.manifest.clone(),
            components,
            fingerprint: Some(manifest.fingerprint()),
            duration_ms: a.duration_ms,
            created_ms: now_ms(),
        };
        let key = a.key;
        let filed = cache
            .call(
                move |s| -> Result<
                    Option<prova_coordinator::cache::Entry>,
                    prova_coordinator::cache::CacheError,
                > {
                    s.put_entry(&entry)?;
                    s.get_entry(ns, &key)
                },
            )
            .await??;
        let Some(entry) = filed else { continue };
        match layer.restore(entry, globs, spec.project_dir.clone()).await {
            Ok(Some(_)) => out.restored += 1,
            Ok(None) => out.refused.push((
                a.task.clone(),
                "its artifact is missing or corrupt (quarantined)".to_owned(),
            )),
            Err(e) => out.refused.push((a.task.clone(), e.to_string())),
        }
    }
    Ok(out)
}

/// Fetches blob `d` into the local store unless it is there; `true` if it was fetched.
async fn fetch(conn: &quinn::Connection, cache: &CacheThread, d: Digest) -> anyhow::Result<bool> {
    if cache.call(move |s| s.has_blob(&d)).await? {
        return Ok(false);
    }
    let (path, file) = cache.call(|s| s.stage_file()).await??;
    let result = async {
        let (mut send, mut recv) = conn.open_bi().await?;
        frame::write_msg(&mut send, &BlobRequest::Get { digest: d }).await?;
        let _ = send.finish();
        match frame::read_msg::<_, BlobAck>(&mut recv).await? {
            Some(BlobAck::Stored) => {}
            Some(BlobAck::Refused { reason }) => anyhow::bail!("fetching {}: {reason}", d.short()),
            None => anyhow::bail!("fetching {}: the coordinator closed the stream", d.short()),
        }
        let mut file = tokio::fs::File::from_std(file);
        transport::recv_blob(&mut recv, &mut file, Some(d), MAX_BLOB).await?;
        file.sync_all().await?;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    cache.call(move |s| s.put_blob_file(&path, Some(&d))).await??;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use prova_protocol::manifest::{EntryKind, ManifestEntry};

    use super::*;

    fn artifact(paths: &[&str], tier: EntryTier) -> TaskArtifact {
        let entries = paths
            .iter()
            .map(|p| ManifestEntry {
                path: (*p).to_owned(),
                kind: EntryKind::File,
                mode: 0o755,
                size: 1,
                digest: Some(Digest::of(b"x")),
                mtime_ns: 0,
                link_target: None,
            })
            .collect();
        TaskArtifact {
            task: TaskId::new("a", "build"),
            key: Digest::of(b"key"),
            artifact: Some((Digest::of(b"blob"), 1)),
            manifest: rmp_serde::to_vec_named(&OutputManifest::new(entries)).unwrap(),
            log: None,
            duration_ms: 1,
            tier,
        }
    }

    #[test]
    fn a_download_outside_the_declared_outputs_is_refused_before_anything_is_written() {
        let globs = PathGlobs::new("libs/a", &["dist/**".to_owned()]).unwrap();
        let ok = artifact(&["libs/a/dist/x"], EntryTier::Trusted);
        assert!(checked_manifest(&ok, &globs, "libs/a").is_ok());
        for bad in [".git/hooks/pre-commit", "libs/other/src/index.ts", "libs/a/src/x"] {
            let a = artifact(&["libs/a/dist/x", bad], EntryTier::Trusted);
            let why = checked_manifest(&a, &globs, "libs/a").unwrap_err().to_string();
            assert!(why.contains(bad), "{why}");
        }
        let mut corrupt = ok.clone();
        corrupt.manifest = vec![0xc1];
        assert!(checked_manifest(&corrupt, &globs, "libs/a").is_err());
    }

    #[test]
    fn only_trusted_farm_entries_are_filed_as_locally_trusted() {
        assert_eq!(local_namespace(EntryTier::Trusted), TRUSTED);
        assert_ne!(local_namespace(EntryTier::Pending), TRUSTED);
        assert_ne!(local_namespace(EntryTier::Untrusted), TRUSTED);
        assert_eq!(local_namespace(EntryTier::default()), UNTRUSTED, "an older coordinator");
    }

    #[test]
    fn a_refused_download_fails_its_task_in_the_summary() {
        use prova_protocol::events::{CacheStatus, TaskReport};
        let task = TaskId::new("a", "build");
        let mut summary = RunSummary {
            ok: true,
            interrupted: false,
            wall_ms: 1,
            tasks: vec![TaskReport {
                task: task.clone(),
                status: TaskStatus::Succeeded,
                cache: CacheStatus::Saved,
                exit: None,
                attempts: 1,
                stats: Default::default(),
                key: None,
                worker: None,
                note: None,
                verdicts: Vec::new(),
            }],
        };
        apply_refusals(&mut summary, &[(task, "`.git/x` is not an output".to_owned())]);
        assert!(!summary.ok);
        assert_eq!(summary.tasks[0].status, TaskStatus::Failed);
        assert!(summary.tasks[0].note.as_deref().unwrap_or_default().contains(".git/x"));
    }
}
