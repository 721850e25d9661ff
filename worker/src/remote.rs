//! Where a farm worker's bytes come from and go to: the coordinator, over blob streams. The
//! runner only sees this trait, so exec roots can be tested without a network.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use prova_protocol::Digest;

use crate::blobcache::BlobCache;

/// A boxed future of a blob transfer; the error is a message for the task's report.
pub type BlobFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// Blob transfers with the coordinator.
pub trait RemoteBlobs: Send + Sync + 'static {
    /// Fetches `digest` into `into` (digest-verified) unless it is already there.
    fn fetch<'a>(&'a self, digest: Digest, into: &'a BlobCache) -> BlobFuture<'a>;
    /// Uploads the file at `path` as blob `digest` of `size` bytes.
    fn upload<'a>(&'a self, path: &'a Path, digest: Digest, size: u64) -> BlobFuture<'a>;
}
