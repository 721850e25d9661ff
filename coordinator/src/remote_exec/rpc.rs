//! The executor's calls: the execution capability check, `FindMissingBlobs` and the uploads
//! of what is missing (read from disk only then), `Execute` / `WaitExecution` /
//! `CancelOperation`, and blob reads streamed to a file with a size bound.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use tonic::Code;

use crate::layers::reapi::client::SMALL_BLOB;
use crate::layers::reapi::map::hex;
use crate::layers::reapi::proto::bytestream::{self, byte_stream_client::ByteStreamClient};
use crate::layers::reapi::proto::longrunning::{self, operations_client::OperationsClient};
use crate::layers::reapi::proto::re;
use crate::layers::reapi::proto::re::capabilities_client::CapabilitiesClient;
use crate::layers::reapi::proto::re::content_addressable_storage_client::ContentAddressableStorageClient;
use crate::layers::reapi::proto::re::execution_client::ExecutionClient;
use crate::layers::reapi::{ReapiClient, ReapiError};

/// Digests asked of `FindMissingBlobs` at once.
const FIND_BATCH: usize = 4096;

/// Where a blob's bytes are.
#[derive(Clone, Debug)]
pub enum Source {
    /// In memory (a `Command`, an `Action`, a `Directory`).
    Bytes(Vec<u8>),
    /// In a file, read only when the server lacks it.
    File(PathBuf),
}

/// An operation stream.
pub type Operations = tonic::Streaming<longrunning::Operation>;

/// Whether the server executes: `GetCapabilities` says `exec_enabled`. A server that only
/// caches is [`ReapiError::Call`] with the reason spelled out.
pub async fn check_execution(c: &ReapiClient) -> Result<(), ReapiError> {
    let (_p, caps) = c
        .call(|| {
            let (ch, instance, _) = c.parts();
            let mut cl = CapabilitiesClient::new(ch);
            let req = c.req(re::GetCapabilitiesRequest { instance_name: instance.to_owned() });
            async move { cl.get_capabilities(req).await }
        })
        .await
        .map_err(|s| c.err("GetCapabilities", s))?;
    let caps = caps.into_inner();
    match caps.execution_capabilities {
        Some(e) if e.exec_enabled => {
            let sha = re::digest_function::Value::Sha256 as i32;
            if e.digest_function != 0 && e.digest_function != sha {
                return Err(refused(c, "the server does not execute with SHA-256 digests"));
            }
            Ok(())
        }
        _ => Err(refused(
            c,
            "the server does not offer remote execution (its execution capabilities: \
             exec_enabled is false; it may be a cache only — use it with --cache …,reapi:MODE \
             instead)",
        )),
    }
}

fn refused(c: &ReapiClient, reason: &str) -> ReapiError {
    ReapiError::Call {
        endpoint: c.endpoint().to_owned(),
        what: "GetCapabilities",
        reason: reason.to_owned(),
    }
}

/// The digests of `digests` the server lacks.
pub async fn find_missing(
    c: &ReapiClient,
    digests: Vec<re::Digest>,
) -> Result<Vec<re::Digest>, ReapiError> {
    let mut missing = Vec::new();
    for chunk in digests.chunks(FIND_BATCH) {
        let (_p, r) = c
            .call(|| {
                let (ch, instance, _) = c.parts();
                let mut cl = ContentAddressableStorageClient::new(ch);
                let req = c.req(re::FindMissingBlobsRequest {
                    instance_name: instance.to_owned(),
                    blob_digests: chunk.to_vec(),
                    digest_function: re::digest_function::Value::Sha256 as i32,
                });
                async move { cl.find_missing_blobs(req).await }
            })
            .await
            .map_err(|s| c.err("FindMissingBlobs", s))?;
        missing.extend(r.into_inner().missing_blob_digests);
    }
    Ok(missing)
}

/// Uploads `blobs` that `FindMissingBlobs` reports missing: small ones in batches, large
/// ones by ByteStream. A file whose bytes no longer hash to its digest (changed since it
/// was read) is an error.
pub async fn upload_missing(
    c: &ReapiClient,
    blobs: Vec<(re::Digest, Source)>,
) -> Result<usize, ReapiError> {
    let mut by_hash: std::collections::HashMap<String, (re::Digest, Source)> =
        blobs.into_iter().map(|(d, s)| (d.hash.clone(), (d, s))).collect();
    let digests: Vec<re::Digest> = by_hash.values().map(|(d, _)| d.clone()).collect();
    let missing = find_missing(c, digests).await?;
    let (_, _, max) = c.parts();
    let mut batch: Vec<re::batch_update_blobs_request::Request> = Vec::new();
    let mut batch_size = 0u64;
    let mut sent = 0;
    for d in missing {
        let Some((d, source)) = by_hash.remove(&d.hash) else { continue };
        let bytes = match source {
            Source::Bytes(b) => b,
            Source::File(p) => read_checked(&p, &d).await?,
        };
        sent += 1;
        let len = bytes.len() as u64;
        if len > SMALL_BLOB.min(max) {
            c.write(&d, &bytes).await?;
            continue;
        }
        if batch_size + len > max && !batch.is_empty() {
            c.batch_update(std::mem::take(&mut batch)).await?;
            batch_size = 0;
        }
        batch_size += len;
        batch.push(re::batch_update_blobs_request::Request { digest: Some(d), data: bytes });
    }
    if !batch.is_empty() {
        c.batch_update(batch).await?;
    }
    Ok(sent)
}

async fn read_checked(p: &Path, d: &re::Digest) -> Result<Vec<u8>, ReapiError> {
    let bytes =
        tokio::fs::read(p).await.map_err(|source| ReapiError::Io { path: p.to_owned(), source })?;
    if hex(&Sha256::digest(&bytes)) != d.hash {
        return Err(ReapiError::Io {
            path: p.to_owned(),
            source: std::io::Error::other("changed while the run was uploading it"),
        });
    }
    Ok(bytes)
}

/// `Execute` (no deadline: the stream lasts as long as the action).
pub async fn execute(
    c: &ReapiClient,
    action: re::Digest,
    skip_cache_lookup: bool,
) -> Result<Operations, tonic::Status> {
    let (ch, instance, _) = c.parts();
    let req = c.untimed(re::ExecuteRequest {
        instance_name: instance.to_owned(),
        skip_cache_lookup,
        action_digest: Some(action),
        digest_function: re::digest_function::Value::Sha256 as i32,
    });
    Ok(ExecutionClient::new(ch).execute(req).await?.into_inner())
}

/// `WaitExecution` on operation `name`.
pub async fn wait(c: &ReapiClient, name: String) -> Result<Operations, tonic::Status> {
    let (ch, _, _) = c.parts();
    let req = c.untimed(re::WaitExecutionRequest { name });
    Ok(ExecutionClient::new(ch).wait_execution(req).await?.into_inner())
}

/// `CancelOperation` (best effort: the answer is only logged).
pub async fn cancel(c: &ReapiClient, name: String) {
    let (ch, _, _) = c.parts();
    let req = c.req(longrunning::CancelOperationRequest { name: name.clone() });
    if let Err(s) = OperationsClient::new(ch).cancel_operation(req).await {
        tracing::debug!(operation = %name, "CancelOperation: {:?}: {}", s.code(), s.message());
    }
}

/// Reads blob `d` (at most `max` bytes) into memory, checked.
pub async fn read_bytes(c: &ReapiClient, d: &re::Digest, max: u64) -> Result<Vec<u8>, ReapiError> {
    match c.read(d, max).await? {
        Some(b) => Ok(b),
        None => Err(ReapiError::Call {
            endpoint: c.endpoint().to_owned(),
            what: "read",
            reason: format!("blob {} is not in the CAS", d.hash),
        }),
    }
}

/// Streams blob `d` into a new file at `to` (mode `0o755` when `exec`, else `0o644`),
/// hashing as it goes; more than `d.size_bytes` or `max` bytes, or other bytes than the
/// digest says, is an error (and the file is removed).
pub async fn read_to_file(
    c: &ReapiClient,
    d: &re::Digest,
    to: &Path,
    exec: bool,
    max: u64,
) -> Result<u64, ReapiError> {
    let size = u64::try_from(d.size_bytes).map_err(|_| ReapiError::Mismatch(d.hash.clone()))?;
    if size > max {
        return Err(ReapiError::Mismatch(format!(
            "{} ({size} bytes, over the {max}-byte bound)",
            d.hash
        )));
    }
    let io = |source| ReapiError::Io { path: to.to_owned(), source };
    let mut file = open_new(to, exec).map_err(io)?;
    let result = async {
        if size <= SMALL_BLOB {
            let bytes = read_bytes(c, d, max).await?;
            file.write_all(&bytes).map_err(io)?;
            return Ok(size);
        }
        let name = c.resource(format!("blobs/{}/{}", d.hash, d.size_bytes));
        let r = c
            .call(|| {
                let (ch, _, _) = c.parts();
                let mut cl = ByteStreamClient::new(ch);
                let req = c.untimed(bytestream::ReadRequest {
                    resource_name: name.clone(),
                    read_offset: 0,
                    read_limit: 0,
                });
                async move { cl.read(req).await }
            })
            .await;
        let (_p, stream) = r.map_err(|s| c.err("ByteStream.Read", s))?;
        let mut stream = stream.into_inner();
        let mut hasher = Sha256::new();
        let mut got = 0u64;
        loop {
            match stream.message().await {
                Ok(Some(m)) => {
                    got += m.data.len() as u64;
                    if got > size {
                        return Err(ReapiError::Mismatch(d.hash.clone()));
                    }
                    hasher.update(&m.data);
                    file.write_all(&m.data).map_err(io)?;
                }
                Ok(None) => break,
                Err(s) if s.code() == Code::NotFound => {
                    return Err(ReapiError::Call {
                        endpoint: c.endpoint().to_owned(),
                        what: "ByteStream.Read",
                        reason: format!("blob {} is not in the CAS", d.hash),
                    });
                }
                Err(s) => return Err(c.err("ByteStream.Read", s)),
            }
        }
        if got != size || hex(&hasher.finalize()) != d.hash {
            return Err(ReapiError::Mismatch(d.hash.clone()));
        }
        Ok(got)
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(to);
    }
    result
}

fn open_new(to: &Path, exec: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if exec { 0o755 } else { 0o644 })
        .open(to)
}

/// The type URL of a packed message of `name` (`build.bazel.remote.execution.v2.Digest`).
pub fn type_url(name: &str) -> String {
    format!("type.googleapis.com/{name}")
}
