//! The farm layer (brief §6): entries in the coordinator's own cache directory, written by
//! the same store code as the local layer. Nothing is restored on the coordinator: a hit
//! only checks the artifact is still there and hands back the log; the client downloads the
//! artifact into its local layer afterwards.
//!
//! A log is data of the tier that produced it: a hit replays its log only when the entry is
//! of a namespace the reading run writes itself (a `client` run hitting a `ci` entry gets a
//! one-line notice instead, and the log blob is never read).
//!
//! Under `--trust proven` ([`FarmLayer::proven`]) a ci save goes to `pending` and is promoted
//! to the trusted tier only when the ledger proves it ([`crate::cache::Store::proves`]: two
//! distinct workers produced its fingerprint, no successful execution of its key produced
//! another); an execution that disagrees later sends a promoted entry back to `pending`.

use prova_protocol::Digest;
use prova_protocol::artifact::confine::check_manifest_confined;
use prova_protocol::globs::PathGlobs;

use super::local::{LocalLayer, MAX_LOG_BYTES};
use super::{CacheLayer, LayerError, LayerFuture, Restored, SaveOutcome, SaveRequest};
use std::path::PathBuf;

use prova_protocol::events::FileDivergence;

use std::collections::HashMap;

use crate::cache::{Entry, Execution, PENDING, Store, TRUSTED};

/// Entries visible to a run writing `namespace`: an untrusted run also reads trusted entries;
/// a trusted run never reads untrusted ones.
pub fn lookup(
    s: &Store,
    namespace: &str,
    keys: &[Digest],
) -> Result<HashMap<Digest, Entry>, crate::cache::CacheError> {
    let mut found = s.get_entries(TRUSTED, keys)?;
    if namespace != TRUSTED {
        for (k, e) in s.get_entries(namespace, keys)? {
            found.entry(k).or_insert(e);
        }
    }
    Ok(found)
}

/// A cache layer over the coordinator's store, writing to one trust namespace.
#[derive(Clone, Debug)]
pub struct FarmLayer {
    inner: LocalLayer,
    /// `--trust=proven`: a trusted entry waits in [`PENDING`] until the ledger proves its
    /// fingerprint ([`crate::cache::Store::proves`]: two distinct workers agree, and no
    /// successful execution of the key disagrees — so never after a nondeterministic verdict).
    promote: Option<String>,
    /// The namespaces whose logs a hit replays: those the run itself writes.
    own: Vec<String>,
    /// `--trust proven` is on for the farm ([`demoting`](Self::demoting)).
    demote: bool,
}

impl FarmLayer {
    /// The layer writing to `inner`'s namespace (`namespace`) of the coordinator's store.
    pub fn new(inner: LocalLayer, namespace: &str) -> Self {
        Self { inner, promote: None, own: vec![namespace.to_owned()], demote: false }
    }

    /// The layer for a trusted run under `--trust=proven`: entries go to [`PENDING`] and are
    /// promoted to `trusted` once two workers agree on the fingerprint.
    pub fn proven(inner: LocalLayer, trusted: &str) -> Self {
        Self {
            inner,
            promote: Some(trusted.to_owned()),
            own: vec![trusted.to_owned(), PENDING.to_owned()],
            demote: true,
        }
    }

    /// Under `--trust proven`: lookups first send unproven trusted entries back to
    /// [`PENDING`] ([`crate::cache::Store::demote_unproven`]), for every run's reads.
    pub fn demoting(mut self, on: bool) -> Self {
        self.demote = on;
        self
    }

    /// Whether a hit on an entry of namespace `ns` replays its log to this layer's run.
    pub fn replays_log_of(&self, ns: &str) -> bool {
        self.own.iter().any(|o| o == ns)
    }

    async fn save_entry(&self, req: SaveRequest) -> Result<SaveOutcome, LayerError> {
        let Some(trusted) = &self.promote else { return self.inner.save(req).await };
        let (key, fp) = (req.key, req.manifest.fingerprint());
        let proven = self.inner.cache().call(move |s| s.proves(&key, &fp)).await??;
        let ns = if proven { trusted.clone() } else { PENDING.to_owned() };
        self.inner.save_to(ns, req).await
    }

    async fn record_and_promote(
        &self,
        e: Execution,
        staged: Option<PathBuf>,
    ) -> Result<(), LayerError> {
        let (key, fp, ok) = (e.key, e.fingerprint, e.ok);
        self.inner.record(e, staged).await?;
        if let (Some(trusted), Some(_), true) = (self.promote.clone(), fp, ok) {
            self.inner
                .cache()
                .call(move |s| -> Result<(), crate::cache::CacheError> {
                    // The waiting entry's own fingerprint is what must be proven: a re-run of
                    // a task with `verify_ignore` agrees with it without the same bytes.
                    let waiting = s.get_entry(PENDING, &key)?.and_then(|e| e.fingerprint);
                    if let Some(entry_fp) = waiting
                        && s.proves(&key, &entry_fp)?
                    {
                        s.promote(&key, PENDING, &trusted)?;
                    }
                    // An execution that disagrees with a promoted entry un-proves it.
                    s.demote_unproven(&trusted, PENDING, &[key])?;
                    Ok(())
                })
                .await??;
        }
        Ok(())
    }

    /// A hit: nothing is unpacked here, but the manifest must still be one the client may
    /// write (a forged row in the farm's index is refused as a local one is).
    async fn restore_entry(
        &self,
        entry: Entry,
        outputs: PathGlobs,
        project_dir: String,
    ) -> Result<Option<Restored>, LayerError> {
        let manifest: prova_protocol::manifest::OutputManifest =
            rmp_serde::from_slice(&entry.manifest)
                .map_err(|e| LayerError::Corrupt(format!("manifest of {}: {e}", entry.task)))?;
        if let Err(e) = check_manifest_confined(&manifest, &outputs, &project_dir) {
            tracing::warn!(task = %entry.task, "refusing a farm cache entry: {e}");
            return Err(LayerError::Refused(format!("the entry of {}: {e}", entry.task)));
        }
        let cache = self.inner.cache().clone();
        let artifact = entry.artifact.map(|(d, _)| d);
        let foreign = !self.replays_log_of(&entry.namespace);
        let log = if foreign { None } else { entry.log };
        let ok = cache
            .call(move |s| -> Result<Option<Vec<u8>>, crate::cache::CacheError> {
                if let Some(d) = artifact
                    && !s.verify_blob(&d)?
                {
                    return Ok(None);
                }
                match log {
                    Some(d) => Ok(s.read_blob_verified(&d, MAX_LOG_BYTES)?),
                    None => Ok(Some(Vec::new())),
                }
            })
            .await??;
        let Some(compressed) = ok else { return Ok(None) };
        let log = if foreign {
            format!(
                "(log not replayed: entry produced by {})\n",
                crate::cache::producer_of(&entry.namespace)
            )
            .into_bytes()
        } else if compressed.is_empty() {
            Vec::new()
        } else {
            match super::local::decompress_bounded(&compressed, MAX_LOG_BYTES) {
                Ok(l) => l,
                Err(_) => return Ok(None),
            }
        };
        Ok(Some(Restored { placed: 0, current: 0, log }))
    }
}

impl CacheLayer for FarmLayer {
    fn name(&self) -> &'static str {
        "farm"
    }

    fn restore(
        &self,
        entry: Entry,
        outputs: PathGlobs,
        project_dir: String,
    ) -> LayerFuture<'_, Option<Restored>> {
        Box::pin(self.restore_entry(entry, outputs, project_dir))
    }

    fn save(&self, req: SaveRequest) -> LayerFuture<'_, SaveOutcome> {
        Box::pin(self.save_entry(req))
    }

    fn touch(&self, used: Vec<(Digest, i64)>) -> LayerFuture<'_, ()> {
        Box::pin(self.inner.touch(used))
    }

    fn entry(&self, key: Digest) -> LayerFuture<'_, Option<Entry>> {
        self.inner.entry(key)
    }

    fn newest_entry(&self, task: String) -> LayerFuture<'_, Option<Entry>> {
        self.inner.newest_entry(task)
    }

    fn lookup(&self, keys: Vec<Digest>) -> LayerFuture<'_, HashMap<Digest, Entry>> {
        let (ns, demote) = (self.inner.namespace().to_owned(), self.demote);
        Box::pin(async move {
            Ok(self
                .inner
                .cache()
                .call(move |s| {
                    if demote {
                        s.demote_unproven(TRUSTED, PENDING, &keys)?; // proofs only (ledger.rs)
                    }
                    lookup(s, &ns, &keys)
                })
                .await??)
        })
    }

    fn record(&self, e: Execution, staged: Option<PathBuf>) -> LayerFuture<'_, ()> {
        Box::pin(self.record_and_promote(e, staged))
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
