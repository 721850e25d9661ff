//! The layered cache (brief §6): the [`local`] layer (the workspace's `.prova/cache` or a
//! shared `--cache-dir`); the farm layer (the coordinator's) sits above it in farm mode.

pub mod local;

use std::path::PathBuf;

pub use local::{LocalLayer, Restored, SaveOutcome, SaveRequest};

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
    /// Stored data could not be decoded.
    #[error("corrupt cache data: {0}")]
    Corrupt(String),
}
