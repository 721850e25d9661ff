//! Config files of the long-running roles (`prova coordinator --config`, `prova worker
//! --config`): the same settings as their flags, flags winning. The examples in `deploy/`
//! are parsed by tests against these types.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

/// `deploy/coordinator.toml`.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorFile {
    /// UDP address to listen on.
    pub listen: Option<String>,
    /// The coordinator's certificate bundle.
    pub certs: Option<PathBuf>,
    /// The farm cache directory.
    pub cache_dir: Option<PathBuf>,
    /// `ci` or `proven`.
    pub trust: Option<String>,
    /// The most bytes one `client` certificate's uploads may hold in the farm cache, e.g.
    /// "20G" (the default).
    pub client_blob_quota: Option<String>,
    /// The read-only HTTP listener (dashboard, `/metrics`, probes), e.g. "127.0.0.1:7780".
    pub http: Option<String>,
    /// The bearer token file the HTTP listener asks for (required off loopback).
    pub http_token_file: Option<PathBuf>,
}

/// `deploy/worker.toml`.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WorkerFile {
    /// The coordinator, HOST:PORT.
    pub join: Option<String>,
    /// This worker's certificate bundle.
    pub certs: Option<PathBuf>,
    /// Concurrent tasks.
    pub slots: Option<u32>,
    /// Exec roots, blob cache, staged artifacts.
    pub work_dir: Option<PathBuf>,
    /// Labels placement can require.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `bwrap` or `none`.
    pub sandbox: Option<String>,
    /// Blob cache bound, e.g. "20G".
    pub blob_cache_size: Option<String>,
    /// The name the coordinator's certificate must carry.
    pub server_name: Option<String>,
    /// Where exec roots go: "auto", "work-dir" or a tmpfs's absolute path.
    pub exec_roots: Option<String>,
}

/// Reads and parses a config file of type `T` (unknown keys are errors with their line).
pub fn load<T: for<'de> Deserialize<'de> + Default>(path: Option<&Path>) -> anyhow::Result<T> {
    let Some(path) = path else { return Ok(T::default()) };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_refused() {
        let err = toml::from_str::<WorkerFile>("slot = 3\n").unwrap_err().to_string();
        assert!(err.contains("unknown field `slot`"), "{err}");
    }

    #[test]
    fn worker_file_parses() {
        let w: WorkerFile =
            toml::from_str("join = \"c:7700\"\nslots = 4\n[labels]\npool = \"linux\"\n").unwrap();
        assert_eq!(w.slots, Some(4));
        assert_eq!(w.labels.get("pool").map(String::as_str), Some("linux"));
    }
}
