//! Bringing a remote run's outputs home: each wanted artifact (and log) is fetched into the
//! local cache unless it is there already, filed as a local entry under the same key (so the
//! next local run hits), then restored into the workspace by the local layer.

use std::collections::{BTreeSet, HashMap};

use anyhow::Context as _;
use prova_coordinator::cache::{CacheThread, NewEntry, TRUSTED};
use prova_coordinator::layers::LocalLayer;
use prova_coordinator::layers::local::now_ms;
use prova_coordinator::prepare::Prepared;
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::OutputManifest;
use prova_protocol::transport::{self, frame};
use prova_protocol::wire::{BlobAck, BlobRequest, TaskArtifact};
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
    for a in artifacts.iter().filter(|a| wanted.contains(&a.task)) {
        let Some(&i) = index.get(&a.task) else { continue };
        for d in a.artifact.map(|(d, _)| d).into_iter().chain(a.log) {
            if fetch(conn, cache, d).await? {
                out.fetched += 1;
            }
        }
        let manifest: OutputManifest = rmp_serde::from_slice(&a.manifest)
            .with_context(|| format!("the manifest of {} is corrupt", a.task))?;
        let components = rmp_serde::to_vec_named(&prepared.keys.components[i])?;
        let entry = NewEntry {
            namespace: TRUSTED.to_owned(),
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
                    s.get_entry(TRUSTED, &key)
                },
            )
            .await??;
        let Some(entry) = filed else { continue };
        let spec = &prepared.plan.tasks[i].spec;
        let globs = PathGlobs::new(&spec.project_dir, &spec.outputs)?;
        if layer.restore(entry, globs).await?.is_some() {
            out.restored += 1;
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
