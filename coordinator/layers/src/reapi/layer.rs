//! [`ReapiLayer`]: a REAPI cache stacked above the local layer (local mode).
//!
//! A lookup asks the local layer first; each key it misses is asked of the REAPI action
//! cache, and a result prova wrote ([`super::map`]) is downloaded, checked (SHA-256 of every
//! blob, the artifact's prova digest, the manifest's fingerprint) and filed into the LOCAL
//! store as a save would; the local layer then restores it, with all its containment rules.
//! A digest mismatch is a miss and one warning, never wrong bytes.
//!
//! A save files locally first; only an entry the local layer actually filed (never a
//! withheld one) is uploaded, and only when the run writes the REAPI layer (`reapi:w`).
//! An unreachable or failing server is one warning line: the layer then stays out of the
//! run's way (local only) until it ends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prova_protocol::Digest;
use prova_protocol::events::FileDivergence;
use prova_protocol::globs::PathGlobs;
use prova_protocol::manifest::OutputManifest;

use super::map::{self, ARTIFACT_PATH, ENTRY_PATH, REMOTE_ENTRY_VERSION, RemoteEntry};
use super::proto::re;
use super::{ReapiClient, ReapiError};
use crate::cache::{Entry, Execution, NewEntry};
use crate::local::{LocalLayer, MAX_LOG_BYTES, encode_log, now_ms};
use crate::{CacheLayer, HitQuery, LayerError, LayerFuture, Restored, SaveOutcome, SaveRequest};

/// Largest entry record read.
const MAX_ENTRY_BYTES: u64 = 64 << 20;
/// Largest artifact read.
const MAX_ARTIFACT_BYTES: u64 = 4 << 30;

/// The REAPI layer over a local layer.
#[derive(Clone, Debug)]
pub struct ReapiLayer {
    inner: LocalLayer,
    client: ReapiClient,
    read: bool,
    write: bool,
    down: Arc<AtomicBool>,
}

impl ReapiLayer {
    /// The layer reading (`read`) and writing (`write`) `client`'s server above `inner`.
    pub fn new(inner: LocalLayer, client: ReapiClient, read: bool, write: bool) -> Self {
        Self { inner, client, read, write, down: Arc::new(AtomicBool::new(false)) }
    }

    /// Checks the server answers (`GetCapabilities`); a failure is the one warning and the
    /// layer is off for the run.
    pub async fn check(&self) -> bool {
        match self.client.capabilities().await {
            Ok(()) => true,
            Err(e) => {
                self.degrade(&e);
                false
            }
        }
    }

    /// Whether the server failed during this run (the layer is then local only).
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    fn degrade(&self, e: &ReapiError) {
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the REAPI cache is unavailable, continuing with the local cache only: {e}"
            );
        }
    }

    /// The local layer.
    pub fn local(&self) -> &LocalLayer {
        &self.inner
    }

    /// The entries for `keys`: the local layer's, plus those the REAPI server holds, filed
    /// into the local store on the way.
    pub async fn probe(&self, keys: Vec<Digest>) -> Result<HashMap<Digest, Entry>, LayerError> {
        let mut found = self.inner.probe(keys.clone()).await?;
        if !self.read || self.is_down() {
            return Ok(found);
        }
        let missing: Vec<Digest> = keys.into_iter().filter(|k| !found.contains_key(k)).collect();
        let results = futures_util::future::join_all(missing.iter().map(|k| self.fetch(*k))).await;
        let mut filed = Vec::new();
        for (k, r) in missing.into_iter().zip(results) {
            match r {
                Ok(true) => filed.push(k),
                Ok(false) => {}
                Err(e @ (ReapiError::Mismatch(_) | ReapiError::Malformed { .. })) => {
                    tracing::warn!("a REAPI cache entry was refused (a miss): {e}");
                }
                Err(e) => self.degrade(&e),
            }
        }
        if !filed.is_empty() {
            found.extend(self.inner.probe(filed).await?);
        }
        Ok(found)
    }

    /// Downloads the result for `key` into the local store; `false` when there is none.
    async fn fetch(&self, key: Digest) -> Result<bool, ReapiError> {
        if self.is_down() {
            return Ok(false);
        }
        let malformed =
            |reason: &str| ReapiError::Malformed { key: key.to_hex(), reason: reason.to_owned() };
        let Some(result) = self.client.get_action_result(map::key_action(&key).digest).await?
        else {
            return Ok(false);
        };
        let Some(remote) = self.remote_entry(key, &result).await? else { return Ok(false) };
        let artifact = match remote.artifact {
            None => None,
            Some((digest, size)) => {
                let f = map::output(&result, ARTIFACT_PATH)
                    .ok_or_else(|| malformed("no prova/artifact output"))?;
                let d =
                    f.digest.clone().ok_or_else(|| malformed("prova/artifact has no digest"))?;
                if u64::try_from(d.size_bytes).ok() != Some(size) {
                    return Err(malformed("prova/artifact's size differs from the entry's"));
                }
                // Streamed into the store's tmp/ (never held whole), bounded by the size the
                // entry declares, hashed on the way; filed below by a rename.
                let tmp = self.inner.tmp_dir().await.map_err(|e| ReapiError::Io {
                    path: PathBuf::from("(local cache tmp)"),
                    source: std::io::Error::other(e.to_string()),
                })?;
                let Some(file) = self.client.read_to_file(&d, MAX_ARTIFACT_BYTES, &tmp).await?
                else {
                    return Ok(false);
                };
                if file.blake3 != digest {
                    return Err(ReapiError::Mismatch(format!("the artifact of {}", remote.task)));
                }
                Some(file)
            }
        };
        let log = match &result.stdout_digest {
            Some(d) if d.size_bytes > 0 => match self.client.read(d, MAX_LOG_BYTES).await? {
                Some(raw) => Some(raw),
                None => return Ok(false),
            },
            _ => None,
        };
        let log = match log {
            Some(raw) => Some(encode_log(&raw).map_err(|e| malformed(&e.to_string()))?),
            None => None,
        };
        self.file(key, remote, artifact, log).await
    }

    /// The `prova/entry` record of `key`'s result, checked: of this key and format, its
    /// manifest's fingerprint the one it names. `None`: the server lost its blob.
    async fn remote_entry(
        &self,
        key: Digest,
        result: &re::ActionResult,
    ) -> Result<Option<RemoteEntry>, ReapiError> {
        let malformed =
            |reason: &str| ReapiError::Malformed { key: key.to_hex(), reason: reason.to_owned() };
        let entry_file =
            map::output(result, ENTRY_PATH).ok_or_else(|| malformed("no prova/entry output"))?;
        let d = entry_file.digest.clone().ok_or_else(|| malformed("prova/entry has no digest"))?;
        let Some(bytes) = self.client.read(&d, MAX_ENTRY_BYTES).await? else { return Ok(None) };
        let remote: RemoteEntry =
            rmp_serde::from_slice(&bytes).map_err(|e| malformed(&format!("prova/entry: {e}")))?;
        if remote.version != REMOTE_ENTRY_VERSION || remote.key != key {
            return Err(malformed("prova/entry is of another key or format"));
        }
        let manifest: OutputManifest = rmp_serde::from_slice(&remote.manifest)
            .map_err(|e| malformed(&format!("manifest: {e}")))?;
        if remote.fingerprint != Some(manifest.fingerprint()) {
            return Err(ReapiError::Mismatch(format!(
                "the manifest fingerprint of {}",
                remote.task
            )));
        }
        Ok(Some(remote))
    }

    /// Files a downloaded result into the local store as a save would.
    async fn file(
        &self,
        key: Digest,
        remote: RemoteEntry,
        artifact: Option<super::client::Downloaded>,
        log: Option<Vec<u8>>,
    ) -> Result<bool, ReapiError> {
        let ns = self.inner.namespace().to_owned();
        let filed = self
            .inner
            .cache()
            .call(move |s| -> Result<(), crate::cache::CacheError> {
                let artifact = match artifact {
                    // Renamed into the store (checked as it streamed: its digest is trusted).
                    Some(file) => Some(s.put_blob_file(file.path(), Some(&file.blake3))?),
                    None => None,
                };
                let log = match log {
                    Some(bytes) => Some(s.put_blob_bytes(&bytes)?),
                    None => None,
                };
                s.put_entry(&NewEntry {
                    namespace: ns,
                    key,
                    task: remote.task.clone(),
                    artifact,
                    log,
                    manifest: remote.manifest,
                    components: remote.components,
                    fingerprint: remote.fingerprint,
                    duration_ms: remote.duration_ms,
                    created_ms: now_ms(),
                })
            })
            .await;
        match filed {
            Ok(Ok(())) => Ok(true),
            Ok(Err(e)) => Err(ReapiError::Io {
                path: PathBuf::from("(local cache)"),
                source: std::io::Error::other(e.to_string()),
            }),
            Err(e) => Err(ReapiError::Io {
                path: PathBuf::from("(local cache)"),
                source: std::io::Error::other(e.to_string()),
            }),
        }
    }

    async fn save_entry(&self, req: SaveRequest) -> Result<SaveOutcome, LayerError> {
        if !self.write || self.is_down() {
            return self.inner.save(req).await;
        }
        let manifest = rmp_serde::to_vec_named(&req.manifest)
            .map_err(|e| LayerError::Corrupt(e.to_string()))?;
        let components = rmp_serde::to_vec_named(&req.components)
            .map_err(|e| LayerError::Corrupt(e.to_string()))?;
        let (task, key, duration_ms) = (req.task.clone(), req.key, req.duration_ms);
        let fingerprint = Some(req.manifest.fingerprint());
        let log = req.log.clone();
        let artifact = req.artifact.as_ref().map(|(d, _)| *d);
        let outcome = self.inner.save(req).await?;
        if outcome != SaveOutcome::Saved {
            return Ok(outcome); // a withheld entry is never uploaded
        }
        let stored = match artifact {
            None => None,
            Some(d) => {
                let bytes =
                    self.inner.cache().call(move |s| s.read_blob_verified(&d, u64::MAX)).await??;
                let Some(bytes) = bytes else { return Ok(outcome) };
                Some((d, bytes))
            }
        };
        let remote = RemoteEntry {
            version: REMOTE_ENTRY_VERSION,
            task,
            key,
            manifest,
            components,
            fingerprint,
            duration_ms,
            artifact: stored.as_ref().map(|(d, b)| (*d, b.len() as u64)),
        };
        let entry =
            rmp_serde::to_vec_named(&remote).map_err(|e| LayerError::Corrupt(e.to_string()))?;
        if let Err(e) = self.upload(&key, entry, stored.map(|(_, b)| b), log).await {
            self.degrade(&e);
        }
        Ok(outcome)
    }

    async fn upload(
        &self,
        key: &Digest,
        entry: Vec<u8>,
        artifact: Option<Vec<u8>>,
        log: Vec<u8>,
    ) -> Result<(), ReapiError> {
        let ka = map::key_action(key);
        let mut result = re::ActionResult {
            output_files: vec![re::OutputFile {
                path: ENTRY_PATH.to_owned(),
                digest: Some(map::sha256(&entry)),
                is_executable: false,
                contents: Vec::new(),
            }],
            exit_code: 0,
            stdout_raw: Vec::new(),
            stdout_digest: (!log.is_empty()).then(|| map::sha256(&log)),
            output_symlinks: Vec::new(),
            ..Default::default()
        };
        if let Some(a) = &artifact {
            result.output_files.push(re::OutputFile {
                path: ARTIFACT_PATH.to_owned(),
                digest: Some(map::sha256(a)),
                is_executable: false,
                contents: Vec::new(),
            });
        }
        let mut blobs = vec![ka.command, ka.action, entry];
        blobs.extend(artifact);
        if !log.is_empty() {
            blobs.push(log);
        }
        self.client.upload(blobs).await?;
        self.client.update_action_result(ka.digest, result).await
    }
}

impl CacheLayer for ReapiLayer {
    fn name(&self) -> &'static str {
        // A REAPI hit is filed locally and restored by the local layer.
        "local"
    }

    fn restore(
        &self,
        entry: Entry,
        outputs: PathGlobs,
        project_dir: String,
    ) -> LayerFuture<'_, Option<Restored>> {
        CacheLayer::restore(&self.inner, entry, outputs, project_dir)
    }

    fn resolve_current(
        &self,
        hits: Vec<HitQuery>,
    ) -> LayerFuture<'_, Vec<(Entry, Option<Restored>)>> {
        CacheLayer::resolve_current(&self.inner, hits)
    }

    fn save(&self, req: SaveRequest) -> LayerFuture<'_, SaveOutcome> {
        Box::pin(self.save_entry(req))
    }

    fn touch(&self, used: Vec<(Digest, i64)>) -> LayerFuture<'_, ()> {
        CacheLayer::touch(&self.inner, used)
    }

    fn entry(&self, key: Digest) -> LayerFuture<'_, Option<Entry>> {
        self.inner.entry(key)
    }

    fn lookup(&self, keys: Vec<Digest>) -> LayerFuture<'_, HashMap<Digest, Entry>> {
        Box::pin(self.probe(keys))
    }

    fn newest_entry(&self, task: String) -> LayerFuture<'_, Option<Entry>> {
        self.inner.newest_entry(task)
    }

    fn record(&self, e: Execution, staged: Option<PathBuf>) -> LayerFuture<'_, ()> {
        self.inner.record(e, staged)
    }

    fn diff(
        &self,
        first: Digest,
        rerun: Digest,
        changed: Vec<String>,
    ) -> LayerFuture<'_, Vec<FileDivergence>> {
        self.inner.diff(first, rerun, changed)
    }
}
