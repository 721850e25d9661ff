//! Where a farm worker's bytes come from and go to: the coordinator, over blob streams. The
//! runner only sees this trait, so exec roots can be tested without a network.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use prova_protocol::Digest;

use prova_protocol::transport::FrameError;

use crate::blobcache::{BlobCache, BlobCacheError};

/// A boxed future of a blob transfer; its error's `Display` goes into the task's report.
pub type BlobFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BlobError>> + Send + 'a>>;

/// Why a blob transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// No connection is current (the watch holds none).
    #[error("no connection")]
    NoConnection,
    /// No connection came up in time.
    #[error("the coordinator is not reachable")]
    Unreachable,
    /// The connection failed opening the stream.
    #[error(transparent)]
    Connection(#[from] quinn::ConnectionError),
    /// Framing or the stream under it.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The coordinator refused, for this reason.
    #[error("{0}")]
    Refused(String),
    /// The coordinator ended the stream before its answer.
    #[error("the coordinator closed the blob stream")]
    Closed,
    /// A local file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The blob cache.
    #[error(transparent)]
    Cache(#[from] BlobCacheError),
    /// The blocking insert did not complete.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// Blob transfers with the coordinator.
pub trait RemoteBlobs: Send + Sync + 'static {
    /// Fetches `digest` into `into` (digest-verified) unless it is already there.
    fn fetch<'a>(&'a self, digest: Digest, into: &'a BlobCache) -> BlobFuture<'a>;
    /// Uploads the file at `path` as blob `digest` of `size` bytes.
    fn upload<'a>(&'a self, path: &'a Path, digest: Digest, size: u64) -> BlobFuture<'a>;
}
