//! The REAPI channel: one lazily connected tonic channel (TLS for `grpcs://`, with an
//! optional CA and client certificate), a bearer token and a timeout on every call, and at
//! most [`MAX_IN_FLIGHT`] calls at once — fewer after the server answers `RESOURCE_EXHAUSTED`
//! (a busy server's concurrency limit: the call is retried after a short backoff and the
//! client keeps one call fewer in flight from then on). Blobs go through `FindMissingBlobs` then
//! `BatchUpdateBlobs` (small) or ByteStream `Write` (large); reads through `BatchReadBlobs`
//! or ByteStream `Read`; every blob read is checked against its SHA-256 digest. A large blob
//! (an artifact) is streamed to a file ([`ReapiClient::read_to_file`]), never held whole: the
//! digest's declared size bounds what is read (a server streaming more is cut off there), and
//! the bytes are hashed on the way.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use sha2::Digest as _;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{Semaphore, SemaphorePermit};
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
/// What a download buffers before it writes to its file (the most it holds in memory).
const WRITE_BUFFER: usize = 4 << 20;
/// Retries of a call the server refused as busy (`RESOURCE_EXHAUSTED`), each after
/// [`busy_backoff`]: about 2.5 s in all before the error reaches the layer.
const BUSY_RETRIES: u32 = 8;

/// A client of one REAPI server.
#[derive(Clone)]
pub struct ReapiClient {
    endpoint: String,
    instance: String,
    channel: Channel,
    token: Option<MetadataValue<Ascii>>,
    timeout: Duration,
    limit: Arc<Semaphore>,
    /// The calls allowed in flight now (`limit`'s capacity): shrinks by one, never below one,
    /// each time the server says it is at its limit.
    width: Arc<AtomicUsize>,
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
            width: Arc::new(AtomicUsize::new(MAX_IN_FLIGHT)),
            max_batch: Arc::new(AtomicU64::new(DEFAULT_BATCH)),
        })
    }

    /// The endpoint, for messages.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The channel, the instance name and the largest batch, for the executor's calls
    /// (`exec/`).
    pub fn parts(&self) -> (Channel, &str, u64) {
        (self.channel.clone(), &self.instance, self.max_batch.load(Ordering::Relaxed))
    }

    /// A request with the bearer token but no deadline: an `Execute` stream lasts as long as
    /// the action runs.
    pub fn untimed<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        if let Some(t) = &self.token {
            r.metadata_mut().insert("authorization", t.clone());
        }
        r
    }

    pub fn req<T>(&self, msg: T) -> Request<T> {
        let mut r = Request::new(msg);
        r.set_timeout(self.timeout);
        if let Some(t) = &self.token {
            r.metadata_mut().insert("authorization", t.clone());
        }
        r
    }

    pub fn err(&self, what: &'static str, s: tonic::Status) -> ReapiError {
        ReapiError::Call {
            endpoint: self.endpoint.clone(),
            what,
            reason: format!("{:?}: {}", s.code(), s.message()),
        }
    }

    async fn permit(&self) -> SemaphorePermit<'_> {
        // Never closed: the semaphore lives as long as the client.
        match self.limit.acquire().await {
            Ok(p) => p,
            Err(_) => unreachable!("the REAPI client's semaphore is never closed"),
        }
    }

    /// One call under a permit (held as long as the caller keeps it, e.g. while a stream is
    /// read). A server at its concurrency limit answers `RESOURCE_EXHAUSTED`: the permit is
    /// given up for good (one call fewer in flight, never below one) and the call retried
    /// after a backoff, up to `BUSY_RETRIES` times.
    pub async fn call<T, F, Fut>(&self, mut f: F) -> Result<(SemaphorePermit<'_>, T), tonic::Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let mut attempt = 0;
        loop {
            let p = self.permit().await;
            match f().await {
                Ok(t) => return Ok((p, t)),
                Err(s) if s.code() == Code::ResourceExhausted && attempt < BUSY_RETRIES => {
                    if self
                        .width
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                            (w > 1).then(|| w - 1)
                        })
                        .is_ok()
                    {
                        p.forget();
                    } else {
                        drop(p);
                    }
                    tokio::time::sleep(busy_backoff(attempt)).await;
                    attempt += 1;
                }
                Err(s) => return Err(s),
            }
        }
    }

    /// The calls this client lets through at once now.
    pub fn in_flight_bound(&self) -> usize {
        self.width.load(Ordering::Relaxed)
    }

    /// `GetCapabilities`: also adopts the server's batch size bound, and checks it offers
    /// SHA-256 (the digest prova's actions use).
    pub async fn capabilities(&self) -> Result<(), ReapiError> {
        let (_p, caps) = self
            .call(|| {
                let mut c = CapabilitiesClient::new(self.channel.clone());
                let req =
                    self.req(re::GetCapabilitiesRequest { instance_name: self.instance.clone() });
                async move { c.get_capabilities(req).await }
            })
            .await
            .map_err(|s| self.err("GetCapabilities", s))?;
        let caps = caps.into_inner();
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
        let r = self
            .call(|| {
                let mut c = ActionCacheClient::new(self.channel.clone());
                let req = self.req(re::GetActionResultRequest {
                    instance_name: self.instance.clone(),
                    action_digest: Some(action.clone()),
                    inline_stdout: false,
                    inline_stderr: false,
                    inline_output_files: Vec::new(),
                    digest_function: re::digest_function::Value::Sha256 as i32,
                });
                async move { c.get_action_result(req).await }
            })
            .await;
        match r {
            Ok((_p, r)) => Ok(Some(r.into_inner())),
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
        self.call(|| {
            let mut c = ActionCacheClient::new(self.channel.clone());
            let req = self.req(re::UpdateActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action.clone()),
                action_result: Some(result.clone()),
                digest_function: re::digest_function::Value::Sha256 as i32,
            });
            async move { c.update_action_result(req).await }
        })
        .await
        .map_err(|s| self.err("UpdateActionResult", s))
        .map(|_answered| ())
    }

    /// Uploads the blobs the server is missing (`FindMissingBlobs` first).
    pub async fn upload(&self, blobs: Vec<Vec<u8>>) -> Result<(), ReapiError> {
        let digests: Vec<re::Digest> = blobs.iter().map(|b| sha256(b)).collect();
        let missing = self
            .call(|| {
                let mut c = ContentAddressableStorageClient::new(self.channel.clone());
                let req = self.req(re::FindMissingBlobsRequest {
                    instance_name: self.instance.clone(),
                    blob_digests: digests.clone(),
                    digest_function: re::digest_function::Value::Sha256 as i32,
                });
                async move { c.find_missing_blobs(req).await }
            })
            .await
            .map_err(|s| self.err("FindMissingBlobs", s))?
            .1
            .into_inner()
            .missing_blob_digests;
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

    pub async fn batch_update(
        &self,
        requests: Vec<re::batch_update_blobs_request::Request>,
    ) -> Result<(), ReapiError> {
        let resp = self
            .call(|| {
                let mut c = ContentAddressableStorageClient::new(self.channel.clone());
                let req = self.req(re::BatchUpdateBlobsRequest {
                    instance_name: self.instance.clone(),
                    requests: requests.clone(),
                    digest_function: re::digest_function::Value::Sha256 as i32,
                });
                async move { c.batch_update_blobs(req).await }
            })
            .await
            .map_err(|s| self.err("BatchUpdateBlobs", s))?
            .1
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

    pub fn resource(&self, tail: String) -> String {
        if self.instance.is_empty() { tail } else { format!("{}/{tail}", self.instance) }
    }

    pub async fn write(&self, d: &re::Digest, bytes: &[u8]) -> Result<(), ReapiError> {
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
        self.call(|| {
            let mut c = ByteStreamClient::new(self.channel.clone());
            let req = self.req(futures_util::stream::iter(msgs.clone()));
            async move { c.write(req).await }
        })
        .await
        .map_err(|s| self.err("ByteStream.Write", s))
        .map(|_answered| ())
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
        let resp = self
            .call(|| {
                let mut c = ContentAddressableStorageClient::new(self.channel.clone());
                let req = self.req(re::BatchReadBlobsRequest {
                    instance_name: self.instance.clone(),
                    digests: vec![d.clone()],
                    digest_function: re::digest_function::Value::Sha256 as i32,
                });
                async move { c.batch_read_blobs(req).await }
            })
            .await
            .map_err(|s| self.err("BatchReadBlobs", s))?
            .1
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
        let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0).min(64 << 20));
        let read = self.stream_into(d, size, &mut Sink::Memory(&mut out)).await?;
        Ok(read.map(|_| out))
    }

    /// Streams blob `d` (`size` bytes as its digest declares) into `sink`, chunk by chunk;
    /// a server that sends more than `size` is cut off at once (a `Mismatch`). The bytes
    /// read, or `Ok(None)`: the server does not have it.
    async fn stream_into(
        &self,
        d: &re::Digest,
        size: u64,
        sink: &mut Sink<'_>,
    ) -> Result<Option<u64>, ReapiError> {
        let name = self.resource(format!("blobs/{}/{}", d.hash, d.size_bytes));
        let r = self
            .call(|| {
                let mut c = ByteStreamClient::new(self.channel.clone());
                let req = self.req(bytestream::ReadRequest {
                    resource_name: name.clone(),
                    read_offset: 0,
                    read_limit: 0,
                });
                async move { c.read(req).await }
            })
            .await;
        // The permit is held while the stream is read.
        let (_p, mut stream) = match r {
            Ok((p, s)) => (p, s.into_inner()),
            Err(s) if s.code() == Code::NotFound => return Ok(None),
            Err(s) => return Err(self.err("ByteStream.Read", s)),
        };
        let mut got = 0u64;
        loop {
            match stream.message().await {
                Ok(Some(m)) => {
                    got = got.saturating_add(m.data.len() as u64);
                    if got > size {
                        return Err(ReapiError::Mismatch(format!(
                            "{} (the server sent more than its {size} bytes)",
                            d.hash
                        )));
                    }
                    sink.put(&m.data).await?;
                }
                Ok(None) => break,
                Err(s) if s.code() == Code::NotFound => return Ok(None),
                Err(s) => return Err(self.err("ByteStream.Read", s)),
            }
        }
        Ok(Some(got))
    }

    /// Reads blob `d` (at most `max` bytes, and never more than its digest declares) into a
    /// new file in `dir`, hashing it (SHA-256, checked against `d`, and BLAKE3, for the
    /// caller) as it streams — never holding it whole. `Ok(None)` when the server does not
    /// have it. The file is removed when the result is dropped, or on any failure.
    pub async fn read_to_file(
        &self,
        d: &re::Digest,
        max: u64,
        dir: &Path,
    ) -> Result<Option<Downloaded>, ReapiError> {
        let size = u64::try_from(d.size_bytes).map_err(|_| ReapiError::Mismatch(d.hash.clone()))?;
        if size > max {
            return Err(ReapiError::Mismatch(format!(
                "{} ({size} bytes, over the {max}-byte bound)",
                d.hash
            )));
        }
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| ReapiError::Io { path, source }
        };
        let named = tempfile::Builder::new()
            .prefix(".reapi-download-")
            .tempfile_in(dir)
            .map_err(io(dir))?;
        let (file, path) = named.into_parts();
        // From here the file is the guard's to remove.
        let mut dl = Downloaded {
            path: path.keep().map_err(|e| io(dir)(e.error))?,
            size: 0,
            blake3: prova_protocol::Digest([0; 32]),
        };
        // Written in large pieces: each write of a tokio file is a trip to a blocking thread.
        let mut out =
            tokio::io::BufWriter::with_capacity(WRITE_BUFFER, tokio::fs::File::from_std(file));
        let mut sha = sha2::Sha256::new();
        let mut b3 = blake3::Hasher::new();
        let mut sink = Sink::File { out: &mut out, path: &dl.path, sha: &mut sha, b3: &mut b3 };
        let read = if size <= SMALL_BLOB.min(self.max_batch.load(Ordering::Relaxed)) {
            match self.batch_read(d).await? {
                Some(bytes) if bytes.len() as u64 <= size => {
                    sink.put(&bytes).await?;
                    Some(bytes.len() as u64)
                }
                Some(_) => return Err(ReapiError::Mismatch(d.hash.clone())),
                None => None,
            }
        } else {
            self.stream_into(d, size, &mut sink).await?
        };
        let Some(read) = read else { return Ok(None) };
        dl.size = read;
        out.flush().await.map_err(io(&dl.path))?;
        drop(out);
        let hash: String = sha.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if dl.size != size || hash != d.hash {
            return Err(ReapiError::Mismatch(d.hash.clone()));
        }
        dl.blake3 = prova_protocol::Digest(*b3.finalize().as_bytes());
        Ok(Some(dl))
    }
}

/// Where a streamed read goes: memory (small, bounded blobs: entry records, logs) or a file,
/// hashed on the way.
enum Sink<'a> {
    Memory(&'a mut Vec<u8>),
    File {
        out: &'a mut tokio::io::BufWriter<tokio::fs::File>,
        path: &'a Path,
        sha: &'a mut sha2::Sha256,
        b3: &'a mut blake3::Hasher,
    },
}

impl Sink<'_> {
    async fn put(&mut self, chunk: &[u8]) -> Result<(), ReapiError> {
        match self {
            Self::Memory(v) => v.extend_from_slice(chunk),
            Self::File { out, path, sha, b3 } => {
                sha.update(chunk);
                b3.update(chunk);
                out.write_all(chunk)
                    .await
                    .map_err(|source| ReapiError::Io { path: path.to_path_buf(), source })?;
            }
        }
        Ok(())
    }
}

/// A blob downloaded into a file by [`ReapiClient::read_to_file`]; the file is removed when
/// this is dropped (filing it into the store renames it away first).
#[derive(Debug)]
pub struct Downloaded {
    path: PathBuf,
    /// Its size.
    pub size: u64,
    /// Its BLAKE3 digest (prova's).
    pub blake3: prova_protocol::Digest,
}

impl Downloaded {
    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Downloaded {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The wait before retry `attempt` of a call refused as busy: 20 ms doubling to at most
/// 640 ms, less up to a quarter at random so clients refused together do not retry together.
fn busy_backoff(attempt: u32) -> Duration {
    let base = 20u64 << attempt.min(5);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    Duration::from_millis(base - u64::from(nanos) % (base / 4 + 1))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> ReapiClient {
        let cfg = ReapiConfig {
            // Never dialled: the calls below do not touch the channel.
            endpoint: super::super::Endpoint::parse("grpc://127.0.0.1:1").expect("endpoint"),
            instance_name: String::new(),
            token: None,
            timeout: Duration::from_secs(1),
            ca_file: None,
            cert_file: None,
            key_file: None,
            upload: Default::default(),
        };
        ReapiClient::new(&cfg).expect("client")
    }

    #[tokio::test]
    async fn a_busy_server_is_retried_and_the_client_narrows() {
        let c = client();
        let mut tries = 0;
        let (_p, v) = c
            .call(|| {
                tries += 1;
                let busy = tries <= 3;
                async move {
                    if busy { Err(tonic::Status::resource_exhausted("limit")) } else { Ok(7) }
                }
            })
            .await
            .expect("answered on the fourth try");
        assert_eq!((v, tries), (7, 4));
        assert_eq!(c.in_flight_bound(), MAX_IN_FLIGHT - 3);
        assert_eq!(c.limit.available_permits(), MAX_IN_FLIGHT - 4, "one held by _p");
    }

    #[tokio::test]
    async fn other_errors_and_a_server_busy_for_good_are_not_retried_forever() {
        let c = client();
        let mut tries = 0;
        let r = c
            .call(|| {
                tries += 1;
                async { Err::<(), _>(tonic::Status::unavailable("down")) }
            })
            .await;
        assert_eq!((r.map(|_| ()).map_err(|s| s.code()), tries), (Err(Code::Unavailable), 1));
        let mut tries = 0;
        let r = c
            .call(|| {
                tries += 1;
                async { Err::<(), _>(tonic::Status::resource_exhausted("limit")) }
            })
            .await;
        assert_eq!(r.map(|_| ()).map_err(|s| s.code()), Err(Code::ResourceExhausted));
        assert_eq!(tries, BUSY_RETRIES + 1);
        assert_eq!(c.in_flight_bound(), MAX_IN_FLIGHT - BUSY_RETRIES as usize);
        assert_eq!(c.limit.available_permits(), c.in_flight_bound(), "no permit leaked");
    }

    #[tokio::test]
    async fn the_client_never_narrows_below_one_call() {
        let c = client();
        for _ in 0..3 {
            let _ =
                c.call(|| async { Err::<(), _>(tonic::Status::resource_exhausted("limit")) }).await;
        }
        assert_eq!(c.in_flight_bound(), 1);
        assert_eq!(c.limit.available_permits(), 1);
    }

    #[test]
    fn backoff_grows_and_is_bounded() {
        for a in 0..20 {
            let d = busy_backoff(a).as_millis() as u64;
            let base = 20u64 << a.min(5);
            assert!(d <= base && d >= base - base / 4, "attempt {a}: {d} ms");
        }
    }
}
