//! The layered cache (brief §6): the [`local`] layer (the workspace's `.prova/cache` or a
//! shared `--cache-dir`); the farm layer (the coordinator's) sits above it in farm mode; a
//! [`reapi`] cache above the local one. The layer of the coordinator's crates above
//! `prova-analysis`; it knows nothing of runs or the farm's server. `prova-coordinator`
//! re-exports it as `layers`.

// The layers below under the names the coordinator gives them, so `crate::cache`,
// `crate::keys`, … read as they did when this module lived in the coordinator.
use prova_analysis::{inputs, keys};
use prova_model::config;
use prova_store as cache;

pub mod diff;
pub mod farm;
pub mod local;
pub mod reapi;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use prova_protocol::Digest;
use prova_protocol::globs::PathGlobs;

pub use farm::FarmLayer;
pub use local::{LocalLayer, Restored, SaveOutcome, SaveRequest};

use prova_protocol::events::FileDivergence;

use crate::cache::{Entry, Execution};

/// A boxed future of a layer operation.
pub type LayerFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LayerError>> + Send + 'a>>;

/// What a run needs of a cache layer: restore a hit, file an execution, mark use. The local
/// layer restores into the workspace; the farm layer (on the coordinator) has nothing to
/// restore — the client downloads the artifact — and files entries in the farm's store.
pub trait CacheLayer: Send + Sync + 'static {
    /// `local`, `farm`: what a hit reports.
    fn name(&self) -> &'static str;
    /// Makes `entry`'s outputs current; `Ok(None)` is a miss (blob gone or corrupt). The
    /// manifest is first checked against the task's declared `outputs` (of the project at
    /// `project_dir`, which also confines the unpack): an entry writing elsewhere is
    /// [`LayerError::Refused`].
    fn restore(
        &self,
        entry: Entry,
        outputs: PathGlobs,
        project_dir: String,
    ) -> LayerFuture<'_, Option<Restored>>;
    /// Which of `hits` (an entry, the task's declared outputs, its project directory) are
    /// already current in the workspace, decided for a whole batch at once: each entry comes
    /// back with `Some` (its outputs are on disk as [`restore`](Self::restore) would leave
    /// them; nothing was written; the log is read) or `None` (it needs `restore`, which then
    /// decides — errors, refusals and misses included). Spares a run of hits a round trip
    /// per hit; the default pre-resolves nothing.
    fn resolve_current(
        &self,
        hits: Vec<HitQuery>,
    ) -> LayerFuture<'_, Vec<(Entry, Option<Restored>)>> {
        Box::pin(async move { Ok(hits.into_iter().map(|h| (h.entry, None)).collect()) })
    }
    /// Files an execution (or withholds it, with the reason).
    fn save(&self, req: SaveRequest) -> LayerFuture<'_, SaveOutcome>;
    /// Marks entries used now (LRU order): each key with the `last_used_ms` its entry had
    /// when the run found it (a layer may skip the entries marked recently enough).
    fn touch(&self, used: Vec<(Digest, i64)>) -> LayerFuture<'_, ()>;
    /// The entry filed under `key`, if any.
    fn entry(&self, key: Digest) -> LayerFuture<'_, Option<Entry>>;
    /// The entries a run of this layer may hit for `keys`, in one batch (the farm: its
    /// trust tiers' rules). What a key settled during the run is looked up with.
    fn lookup(
        &self,
        keys: Vec<Digest>,
    ) -> LayerFuture<'_, std::collections::HashMap<Digest, Entry>>;
    /// `task`'s newest entry of any key, which a fresh execution's outputs are checked
    /// against before it is saved: fewer files (a warning), or a declared output emptied
    /// (not saved); and which of its key's components moved (`None`: no entry, or the layer
    /// does not say).
    fn newest_entry(&self, _task: String) -> LayerFuture<'_, Option<Entry>> {
        Box::pin(async { Ok(None) })
    }
    /// Records an execution in the fingerprint ledger; a staged artifact (a local re-run's)
    /// is filed as a blob first so the ledger row can keep it.
    fn record(&self, e: Execution, staged: Option<PathBuf>) -> LayerFuture<'_, ()>;
    /// What differs in `changed` files between two artifacts (first run, re-run).
    fn diff(
        &self,
        first: Digest,
        rerun: Digest,
        changed: Vec<String>,
    ) -> LayerFuture<'_, Vec<FileDivergence>>;
}

/// One hit asked about by [`CacheLayer::resolve_current`].
#[derive(Clone, Debug)]
pub struct HitQuery {
    /// The entry found for the task's key.
    pub entry: Entry,
    /// The task's declared outputs.
    pub outputs: PathGlobs,
    /// The task's project directory.
    pub project_dir: String,
}

/// A layer operation failed (distinct from a miss, which is `Ok(None)`).
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The store failed.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// Restoring failed on the workspace side.
    #[error(transparent)]
    Artifact(#[from] prova_protocol::artifact::ArtifactError),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The entry's manifest writes outside the task's declared outputs (a forged entry);
    /// nothing was removed or written.
    #[error("refused: {0}")]
    Refused(String),
    /// Stored data could not be decoded.
    #[error("corrupt cache data: {0}")]
    Corrupt(String),
}
