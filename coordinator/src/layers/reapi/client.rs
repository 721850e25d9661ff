//! The REAPI channel: one lazily connected tonic channel (TLS for `grpcs://`, with an
//! optional CA and client certificate), a bearer token and a timeout on every call, and at
//! most [`MAX_IN_FLIGHT`] calls at once. Blobs go through `FindMissingBlobs` then
//! `BatchUpdateBlobs` (small) or ByteStream `Write` (large); reads through `BatchReadBlobs`
//! or ByteStream `Read`; every blob read is checked against its SHA-256 digest.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Semaphore;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::{Code, Request};

use super::map::sha256;
use super::proto::bytestream::{self, byte_stream_client::ByteStreamClient};
use super::proto::re::capabilities_client::CapabilitiesClient;
use super::proto::re::content_addressable_storage_client::ContentAddressableStorageClient;
use super::proto::re::{self, action_cache_client::ActionCacheClient};
use super::{ReapiConfig, ReapiError};

/// Calls in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;
/// Blobs up to this size travel in batches; larger ones by ByteStream.
pub const SMALL_BLOB: u64 = 1 << 20;
/// A batch's total size when the server states none (gRPC's default message bound, less
/// room for the envelope).
const DEFAULT_BATCH: u64 = 4 * 1024 * 1024 - 64 * 1024;
/// ByteStream write chunk.
const CHUNK: usize = 1 << 20;

/// A client of one REAPI server.
#[derive(Clone)]
pub struct ReapiClient {
    endpoint: String,
    instance: String,
    channel: Channel,
    token: Option<MetadataValue<Ascii>>,
    timeout: std::time::Duration,
    limit: Arc<Semaphore>,
    max_batch: Arc<AtomicU64>,
}

impl std::fmt::Debug for ReapiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReapiClient").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl ReapiClient {
    /// A client for `cfg` (nothing is dialled until the first call).
    pub fn new(cfg: &ReapiConfig) -> Result<Self, ReapiError> {
        let endpoint = cfg.endpoint.to_string();
        let fail = |reason: String| ReapiError::Call {
            endpoint: endpoint.clone(),
            what: "connect",
            reason,
        };
        let mut ep = Channel::from_shared(cfg.endpoint.uri())
            .map_err(|e| fail(e.to_string()))?
            .connect_timeout(cfg.timeout)
            .timeout(cfg.timeout);
        if cfg.endpoint.tls {
            let mut tls = ClientTlsConfig::new().with_native_roots();
            let read = |p: &std::path::Path| {
                std::fs::read(p).map_err(|e| fail(format!("{}: {e}", p.display())))
            };
            if let Some(ca) = &cfg.ca_file {
                tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            if let (Some(c), Some(k)) = (&cfg.cert_file, &cfg.key_file) {
                tls = tls.identity(Identity::from_pem(read(c)?, read(k)?));
            }
            if let Some((host, _)) = cfg.endpoint.authority.rsplit_once(':') {
                tls = tls.domain_name(host.trim_start_matches('[').trim_end_matches(']'));
            }
            ep = ep.tls_config(tls).map_err(|e| fail(e.to_string()))?;
        }
        let token = match &cfg.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| fail("the bearer token is not a valid header value".to_owned()))?,
            ),
            None => None,
        };
        Ok(Self {
            endpoint: endpoint.clone(),
            instance: cfg.instance_name.clone(),
            channel: ep.connect_lazy(),
            token,
            timeout: cfg.timeout,
            limit: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            max_batch: Arc::new(AtomicU64::new(DEFAULT_BATCH)),
        })
    }

    /// The endpoint, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn req<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        r.set_timeout(self.timeout);
        if let Some(t) = &self.token {
            r.metadata_mut().insert("authorization", t.clone());
        }
        r
    }

    fn err(&self, what: &'static str, s: tonic::Status) -> ReapiError {
        ReapiError::Call {
            endpoint: self.endpoint.clone(),
            what,
            reason: format!("{:?}: {}", s.code(), s.message()),
        }
    }

    async fn permit(&self) -> tokio::sync::SemaphorePermit<'_> {
        // Never closed: the semaphore lives as long as the client.
        match self.limit.acquire().await {
            Ok(p) => p,
            Err(_) => unreachable!("the REAPI client's semaphore is never closed"),
        }
    }

    /// `GetCapabilities`: also adopts the server's batch size bound, and checks it offers
    /// SHA-256 (the digest prova's actions use).
    pub async fn capabilities(&self) -> Result<(), ReapiError> {
        let _p = self.permit().await;
        let caps = CapabilitiesClient::new(self.channel.clone())
            .get_capabilities(
                self.req(re::GetCapabilitiesRequest { instance_name: self.instance.clone() }),
            )
            .await
            .map_err(|s| self.err("GetCapabilities", s))?
            .into_inner();
        if let Some(c) = caps.cache_capabilities {
            let sha = re::digest_function::Value::Sha256 as i32;
            if !c.digest_functions.is_empty() && !c.digest_functions.contains(&sha) {
                return Err(ReapiError::Call {
                    endpoint: self.endpoint.clone(),
                    what: "GetCapabilities",
                    reason: "the server does not offer SHA-256 digests".to_owned(),
                });
            }
            if let Ok(max) = u64::try_from(c.max_batch_total_size_bytes)
                && max > 0
            {
                self.max_batch.store(
                    max.min(DEFAULT_BATCH).saturating_sub(16 * 1024).max(1),
                    Ordering::Relaxed,
                );
            }
        }
        Ok(())
    }

    /// `GetActionResult`; `None` on `NOT_FOUND`.
    pub async fn get_action_result(
        &self,
        action: re::Digest,
    ) -> Result<Option<re::ActionResult>, ReapiError> {
        let _p = self.permit().await;
        let r = ActionCacheClient::new(self.channel.clone())
            .get_action_result(self.req(re::GetActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action),
                inline_stdout: false,
                inline_stderr: false,
                inline_output_files: Vec::new(),
                digest_function: re::digest_function::Value::Sha256 as i32,
            }))
            .await;
        match r {
            Ok(r) => Ok(Some(r.into_inner())),
            Err(s) if s.code() == Code::NotFound => Ok(None),
            Err(s) => Err(self.err("GetActionResult", s)),
        }
    }

    /// `UpdateActionResult`.
    pub async fn update_action_result(
        &self,
        action: re::Digest,
        result: re::ActionResult,
    ) -> Result<(), ReapiError> {
        let _p = self.permit().await;
        ActionCacheClient::new(self.channel.clone())
            .update_action_result(self.req(re::UpdateActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action),
                action_result: Some(result),
                digest_function: re::digest_function::Value::Sha256 as i32,
            }))
            .await
            .map_err(|s| self.err("UpdateActionResult", s))?;
        Ok(())
    }

    /// Uploads the blobs the server is missing (`FindMissingBlobs` first).
    pub async fn upload(&self, blobs: Vec<Vec<u8>>) -> Result<(), ReapiError> {
        let digests: Vec<re::Digest> = blobs.iter().map(|b| sha256(b)).collect();
        let missing = {
            let _p = self.permit().await;
            ContentAddressableStorageClient::new(self.channel.clone())
                .find_missing_blobs(self.req(re::FindMissingBlobsRequest {
                    instance_name: self.instance.clone(),
                    blob_digests: digests.clone(),
                    digest_function: re::digest_function::Value::Sha256 as i32,
                }))
                .await
                .map_err(|s| self.err("FindMissingBlobs", s))?
                .into_inner()
                .missing_blob_digests
        };
        let max = self.max_batch.load(Ordering::Relaxed);
        let mut batch: Vec<re::batch_update_blobs_request::Request> = Vec::new();
        let mut batch_size = 0u64;
        let mut seen = std::collections::HashSet::new();
        for (d, bytes) in digests.into_iter().zip(blobs) {
            if !missing.contains(&d) || !seen.insert(d.hash.clone()) {
                continue;
            }
            let len = bytes.len() as u64;
            if len > SMALL_BLOB.min(max) {
                self.write(&d, &bytes).await?;
                continue;
            }
            if batch_size + len > max && !batch.is_empty() {
                self.batch_update(std::mem::take(&mut batch)).await?;
                batch_size = 0;
            }
            batch_size += len;
            batch.push(re::batch_update_blobs_request::Request { digest: Some(d), data: bytes });
        }
        if !batch.is_empty() {
            self.batch_update(batch).await?;
        }
        Ok(())
    }

    async fn batch_update(
        &self,
        requests: Vec<re::batch_update_blobs_request::Request>,
    ) -> Result<(), ReapiError> {
        let _p = self.permit().await;
        let resp = ContentAddressableStorageClient::new(self.channel.clone())
            .batch_update_blobs(self.req(re::BatchUpdateBlobsRequest {
                instance_name: self.instance.clone(),
                requests,
                digest_function: re::digest_function::Value::Sha256 as i32,
            }))
            .await
            .map_err(|s| self.err("BatchUpdateBlobs", s))?
            .into_inner();
        for r in resp.responses {
            if let Some(s) = r.status.filter(|s| s.code != 0) {
                return Err(ReapiError::Call {
                    endpoint: self.endpoint.clone(),
                    what: "BatchUpdateBlobs",
                    reason: format!("code {}: {}", s.code, s.message),
                });
            }
        }
        Ok(())
    }

    fn resource(&self, tail: String) -> String {
        if self.instance.is_empty() { tail } else { format!("{}/{tail}", self.instance) }
    }

    async fn write(&self, d: &re::Digest, bytes: &[u8]) -> Result<(), ReapiError> {
        let _p = self.permit().await;
        let name =
            self.resource(format!("uploads/{}/blobs/{}/{}", upload_id(d), d.hash, d.size_bytes));
        let mut msgs = Vec::new();
        let mut offset = 0usize;
        loop {
            let end = (offset + CHUNK).min(bytes.len());
            msgs.push(bytestream::WriteRequest {
                resource_name: if offset == 0 { name.clone() } else { String::new() },
                write_offset: offset as i64,
                finish_write: end == bytes.len(),
                data: bytes[offset..end].to_vec(),
            });
            offset = end;
            if offset >= bytes.len() {
                break;
            }
        }
        ByteStreamClient::new(self.channel.clone())
            .write(self.req(futures_util::stream::iter(msgs)))
            .await
            .map_err(|s| self.err("ByteStream.Write", s))?;
        Ok(())
    }

    /// Reads blob `d` (at most `max` bytes) and checks its SHA-256; `Ok(None)` when the
    /// server does not have it.
    pub async fn read(&self, d: &re::Digest, max: u64) -> Result<Option<Vec<u8>>, ReapiError> {
        let size = u64::try_from(d.size_bytes).map_err(|_| ReapiError::Mismatch(d.hash.clone()))?;
        if size > max {
            return Err(ReapiError::Mismatch(format!(
                "{} ({size} bytes, over the {max}-byte bound)",
                d.hash
            )));
        }
        let bytes = if size <= SMALL_BLOB.min(self.max_batch.load(Ordering::Relaxed)) {
            self.batch_read(d).await?
        } else {
            self.stream_read(d, size).await?
        };
        let Some(bytes) = bytes else { return Ok(None) };
        if sha256(&bytes) != *d {
            return Err(ReapiError::Mismatch(d.hash.clone()));
        }
        Ok(Some(bytes))
    }

    async fn batch_read(&self, d: &re::Digest) -> Result<Option<Vec<u8>>, ReapiError> {
        let _p = self.permit().await;
        let resp = ContentAddressableStorageClient::new(self.channel.clone())
            .batch_read_blobs(self.req(re::BatchReadBlobsRequest {
                instance_name: self.instance.clone(),
                digests: vec![d.clone()],
                digest_function: re::digest_function::Value::Sha256 as i32,
            }))
            .await
            .map_err(|s| self.err("BatchReadBlobs", s))?
            .into_inner();
        let Some(r) = resp.responses.into_iter().find(|r| r.digest.as_ref() == Some(d)) else {
            return Ok(None);
        };
        match r.status {
            Some(s) if s.code == Code::NotFound as i32 => Ok(None),
            Some(s) if s.code != 0 => Err(ReapiError::Call {
                endpoint: self.endpoint.clone(),
                what: "BatchReadBlobs",
                reason: format!("code {}: {}", s.code, s.message),
            }),
            _ => Ok(Some(r.data)),
        }
    }

    async fn stream_read(&self, d: &re::Digest, size: u64) -> Result<Option<Vec<u8>>, ReapiError> {
        let _p = self.permit().await;
        let name = self.resource(format!("blobs/{}/{}", d.hash, d.size_bytes));
        let r = ByteStreamClient::new(self.channel.clone())
            .read(self.req(bytestream::ReadRequest {
                resource_name: name,
                read_offset: 0,
                read_limit: 0,
            }))
            .await;
        let mut stream = match r {
            Ok(s) => s.into_inner(),
            Err(s) if s.code() == Code::NotFound => return Ok(None),
            Err(s) => return Err(self.err("ByteStream.Read", s)),
        };
        let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0).min(64 << 20));
        loop {
            match stream.message().await {
                Ok(Some(m)) => {
                    out.extend_from_slice(&m.data);
                    if out.len() as u64 > size {
                        return Err(ReapiError::Mismatch(d.hash.clone()));
                    }
                }
                Ok(None) => break,
                Err(s) if s.code() == Code::NotFound => return Ok(None),
                Err(s) => return Err(self.err("ByteStream.Read", s)),
            }
        }
        Ok(Some(out))
    }
}

/// A version-4-shaped UUID for an upload's resource name, distinct per process and blob.
fn upload_id(d: &re::Digest) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos());
    let seed = format!("{}-{}-{nanos}", std::process::id(), d.hash);
    let h = blake3::hash(seed.as_bytes());
    let b = h.as_bytes();
    let x = super::map::hex(&b[..16]);
    format!("{}-{}-4{}-a{}-{}", &x[0..8], &x[8..12], &x[13..16], &x[17..20], &x[20..32])
}
