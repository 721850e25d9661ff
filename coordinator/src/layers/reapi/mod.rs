//! The REAPI layer: a Remote Execution API action cache and CAS (BuildGrid, bazel-remote,
//! Buildbarn, NativeLink, BuildBuddy) as a cache layer above the local one. [`proto`]: the
//! generated stubs; [`client`]: the channel (TLS, bearer token, timeouts, bounded
//! concurrency) and the blob transfers; [`map`]: a prova key as a canonical REAPI action and
//! an entry as an `ActionResult`; [`layer`]: the stacked [`ReapiLayer`].

pub mod client;
pub mod exec;
pub mod layer;
pub mod map;
pub mod proto;

use std::path::PathBuf;
use std::time::Duration;

pub use client::ReapiClient;
pub use layer::ReapiLayer;

/// Where and how to reach a REAPI server (`[cache.reapi]`, resolved by
/// [`crate::config::reapi::load`]).
#[derive(Clone)]
pub struct ReapiConfig {
    /// The server.
    pub endpoint: Endpoint,
    /// The REAPI instance name.
    pub instance_name: String,
    /// A bearer token sent on every call (never printed).
    pub token: Option<String>,
    /// Per-call timeout (and the connect timeout).
    pub timeout: Duration,
    /// A PEM CA bundle for `grpcs://`.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate (mutual TLS).
    pub cert_file: Option<PathBuf>,
    /// Its PEM key.
    pub key_file: Option<PathBuf>,
    /// Which runs write results to the server.
    pub upload: Upload,
}

/// `[cache.reapi] upload`: which runs call `UpdateActionResult`. A REAPI cache is shared by
/// everyone who can reach it, so by default only CI writes and a developer's run reads —
/// the farm's trust tiers (`ci` writes, `client` reads) for a cache prova does not run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Upload {
    /// Runs with `CI` set (to anything but empty, `0` or `false`).
    #[default]
    Ci,
    /// Every run.
    Always,
    /// No run: the server is only read.
    Never,
}

impl Upload {
    /// Whether a run writes, given the value of `$CI` (`None` when unset).
    pub fn writes(self, ci: Option<&str>) -> bool {
        match self {
            Self::Always => true,
            Self::Never => false,
            Self::Ci => {
                ci.is_some_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE" | "False"))
            }
        }
    }
}

impl std::fmt::Debug for ReapiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReapiConfig")
            .field("endpoint", &self.endpoint.to_string())
            .field("instance_name", &self.instance_name)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// `grpc://host:port` or `grpcs://host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `grpcs://`.
    pub tls: bool,
    /// `host:port`.
    pub authority: String,
}

/// An endpoint that is not `grpc://HOST:PORT` or `grpcs://HOST:PORT`, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: want grpc://HOST:PORT or grpcs://HOST:PORT")]
pub struct BadEndpoint(pub String);

impl Endpoint {
    /// Parses `grpc://host:port` / `grpcs://host:port`.
    pub fn parse(s: &str) -> Result<Self, BadEndpoint> {
        let (tls, rest) = if let Some(r) = s.strip_prefix("grpcs://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("grpc://") {
            (false, r)
        } else {
            return Err(BadEndpoint(s.to_owned()));
        };
        let rest = rest.trim_end_matches('/');
        let port_ok =
            rest.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !port_ok || rest.contains('/') {
            return Err(BadEndpoint(s.to_owned()));
        }
        Ok(Self { tls, authority: rest.to_owned() })
    }

    /// The URI tonic dials.
    pub fn uri(&self) -> String {
        format!("{}://{}", if self.tls { "https" } else { "http" }, self.authority)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", if self.tls { "grpcs" } else { "grpc" }, self.authority)
    }
}

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
