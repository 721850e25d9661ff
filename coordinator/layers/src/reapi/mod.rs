//! The REAPI layer: a Remote Execution API action cache and CAS (BuildGrid, bazel-remote,
//! Buildbarn, NativeLink, BuildBuddy) as a cache layer above the local one. [`proto`]: the
//! generated stubs; [`client`]: the channel (TLS, bearer token, timeouts, bounded
//! concurrency) and the blob transfers; [`map`]: a prova key as a canonical REAPI action and
//! an entry as an `ActionResult`; [`layer`]: the stacked [`ReapiLayer`].

pub mod client;
pub mod layer;
pub mod map;
pub mod proto;

use std::path::PathBuf;

/// Plain settings, resolved by [`crate::config::reapi`].
pub use crate::config::reapi::{BadEndpoint, Endpoint, ReapiConfig, Upload};
pub use client::ReapiClient;
pub use layer::ReapiLayer;

/// A REAPI call or transfer failed (the layer degrades to the local one on any of these).
#[derive(Debug, thiserror::Error)]
pub enum ReapiError {
    /// The channel could not be built or the server answered with an error.
    #[error("{endpoint}: {what}: {reason}")]
    Call {
        /// The server.
        endpoint: String,
        /// Which call.
        what: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// A blob's bytes do not hash to its digest (a tampered or corrupt CAS).
    #[error("blob {0} from the REAPI cache does not match its digest")]
    Mismatch(String),
    /// The result is not one prova wrote, or is malformed.
    #[error("the REAPI result of {key} is unusable: {reason}")]
    Malformed {
        /// The prova key (hex).
        key: String,
        /// Why.
        reason: String,
    },
    /// Local I/O while staging a download.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}
