//! The farm layer (brief §6): entries in the coordinator's own cache directory, written by
//! the same store code as the local layer. Nothing is restored on the coordinator: a hit
//! only checks the artifact is still there and hands back the log; the client downloads the
//! artifact into its local layer afterwards.

use prova_protocol::Digest;
use prova_protocol::globs::PathGlobs;

use super::local::{LocalLayer, MAX_LOG_BYTES};
use super::{CacheLayer, LayerError, LayerFuture, Restored, SaveOutcome, SaveRequest};
use std::path::PathBuf;

use prova_protocol::events::FileDivergence;

use crate::cache::{Entry, Execution};

/// A cache layer over the coordinator's store, writing to one trust namespace.
#[derive(Clone, Debug)]
pub struct FarmLayer {
    inner: LocalLayer,
}

impl FarmLayer {
    /// The layer writing to `namespace` of the coordinator's store.
    pub fn new(inner: LocalLayer) -> Self {
        Self { inner }
    }

    async fn restore_entry(&self, entry: Entry) -> Result<Option<Restored>, LayerError> {
        let cache = self.inner.cache().clone();
        let artifact = entry.artifact.map(|(d, _)| d);
        let log = entry.log;
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
        let log = if compressed.is_empty() {
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

    fn restore(&self, entry: Entry, _outputs: PathGlobs) -> LayerFuture<'_, Option<Restored>> {
        Box::pin(self.restore_entry(entry))
    }

    fn save(&self, req: SaveRequest) -> LayerFuture<'_, SaveOutcome> {
        Box::pin(self.inner.save(req))
    }

    fn touch(&self, keys: Vec<Digest>) -> LayerFuture<'_, ()> {
        Box::pin(self.inner.touch(keys))
    }

    fn entry(&self, key: Digest) -> LayerFuture<'_, Option<Entry>> {
        self.inner.entry(key)
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
