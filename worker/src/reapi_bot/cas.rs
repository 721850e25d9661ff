//! The bot's CAS client: blobs read (batched when small, ByteStream when large, every one
//! checked against its SHA-256) into a local store of the bot's own, and uploads of what the
//! server lacks (`FindMissingBlobs`, then batches or ByteStream).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use prova_reapi_proto::bytestream::{self, byte_stream_client::ByteStreamClient};
use prova_reapi_proto::re::content_addressable_storage_client::ContentAddressableStorageClient;
use prova_reapi_proto::re::{self, batch_update_blobs_request};
use sha2::{Digest as _, Sha256};
use tonic::Request;
use tonic::transport::Channel;

use super::BotError;

/// Blobs up to this size travel in batches.
const SMALL: i64 = 1 << 20;
/// A batch's total size (under gRPC's 4 MiB message bound).
const BATCH: i64 = 3 << 20;
/// ByteStream write chunk.
const CHUNK: usize = 1 << 20;
/// Per-call timeout.
const CALL: Duration = Duration::from_secs(60);

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 REAPI digest of `bytes`.
pub fn digest(bytes: &[u8]) -> re::Digest {
    re::Digest { hash: hex(&Sha256::digest(bytes)), size_bytes: bytes.len() as i64 }
}

/// A CAS on one server, with a local store under `dir`.
#[derive(Clone, Debug)]
pub struct Cas {
    channel: Channel,
    instance: String,
    dir: PathBuf,
}

fn req<T>(msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.set_timeout(CALL);
    r
}

fn sha() -> i32 {
    re::digest_function::Value::Sha256 as i32
}

impl Cas {
    /// A CAS client over `channel`, storing blobs under `dir`.
    pub fn new(channel: Channel, instance: String, dir: PathBuf) -> Result<Self, BotError> {
        std::fs::create_dir_all(&dir).map_err(|e| BotError::io(&dir, e))?;
        Ok(Self { channel, instance, dir })
    }

    /// Where blob `d` is kept locally.
    pub fn path(&self, d: &re::Digest) -> PathBuf {
        self.dir.join(&d.hash)
    }

    fn check(d: &re::Digest, bytes: &[u8]) -> Result<(), BotError> {
        if digest(bytes) != *d {
            return Err(BotError::Blob(format!("{} does not match its digest", d.hash)));
        }
        Ok(())
    }

    /// Blob `d`'s bytes (at most `max`).
    pub async fn read(&self, d: &re::Digest, max: i64) -> Result<Vec<u8>, BotError> {
        if d.size_bytes > max || d.size_bytes < 0 {
            return Err(BotError::Blob(format!(
                "{} is {} bytes, over {max}",
                d.hash, d.size_bytes
            )));
        }
        if d.size_bytes > SMALL {
            return self.stream(d).await;
        }
        let mut got = self.batch(vec![d.clone()]).await?;
        got.pop()
            .map(|(_, b)| b)
            .ok_or_else(|| BotError::Blob(format!("{} is not in the CAS", d.hash)))
    }

    async fn batch(
        &self,
        digests: Vec<re::Digest>,
    ) -> Result<Vec<(re::Digest, Vec<u8>)>, BotError> {
        let mut c = ContentAddressableStorageClient::new(self.channel.clone());
        let r = c
            .batch_read_blobs(req(re::BatchReadBlobsRequest {
                instance_name: self.instance.clone(),
                digests,
                digest_function: sha(),
            }))
            .await
            .map_err(|s| BotError::call("BatchReadBlobs", &s))?
            .into_inner();
        let mut out = Vec::new();
        for r in r.responses {
            let d = r.digest.ok_or_else(|| BotError::Blob("a response without a digest".into()))?;
            if let Some(s) = r.status.filter(|s| s.code != 0) {
                return Err(BotError::Blob(format!("{}: code {}: {}", d.hash, s.code, s.message)));
            }
            Self::check(&d, &r.data)?;
            out.push((d, r.data));
        }
        Ok(out)
    }

    async fn stream(&self, d: &re::Digest) -> Result<Vec<u8>, BotError> {
        let name = self.resource(format!("blobs/{}/{}", d.hash, d.size_bytes));
        let mut c = ByteStreamClient::new(self.channel.clone());
        let mut s = c
            .read(Request::new(bytestream::ReadRequest {
                resource_name: name,
                read_offset: 0,
                read_limit: 0,
            }))
            .await
            .map_err(|s| BotError::call("ByteStream.Read", &s))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(m) = s.message().await.map_err(|s| BotError::call("ByteStream.Read", &s))? {
            out.extend_from_slice(&m.data);
            if out.len() as i64 > d.size_bytes {
                return Err(BotError::Blob(format!("{} is longer than its digest says", d.hash)));
            }
        }
        Self::check(d, &out)?;
        Ok(out)
    }

    fn resource(&self, tail: String) -> String {
        if self.instance.is_empty() { tail } else { format!("{}/{tail}", self.instance) }
    }

    /// Brings every blob of `digests` into the local store (those not there yet).
    pub async fn fetch_all(&self, digests: &[re::Digest]) -> Result<(), BotError> {
        let mut seen = HashSet::new();
        let wanted: Vec<&re::Digest> = digests
            .iter()
            .filter(|d| seen.insert(d.hash.clone()) && !self.path(d).exists())
            .collect();
        let mut batch = Vec::new();
        let mut size = 0;
        for d in wanted {
            if d.size_bytes > SMALL {
                let bytes = self.stream(d).await?;
                self.store(d, &bytes)?;
                continue;
            }
            if size + d.size_bytes > BATCH && !batch.is_empty() {
                for (d, b) in self.batch(std::mem::take(&mut batch)).await? {
                    self.store(&d, &b)?;
                }
                size = 0;
            }
            size += d.size_bytes;
            batch.push(d.clone());
        }
        if !batch.is_empty() {
            for (d, b) in self.batch(batch).await? {
                self.store(&d, &b)?;
            }
        }
        Ok(())
    }

    fn store(&self, d: &re::Digest, bytes: &[u8]) -> Result<(), BotError> {
        let to = self.path(d);
        let tmp = self.dir.join(format!(".tmp-{}-{}", std::process::id(), d.hash));
        std::fs::write(&tmp, bytes).map_err(|e| BotError::io(&tmp, e))?;
        std::fs::rename(&tmp, &to).map_err(|e| BotError::io(&to, e))
    }

    /// Uploads what the server lacks of `blobs` (bytes in memory, or a file's).
    pub async fn upload(&self, blobs: Vec<(re::Digest, Blob)>) -> Result<(), BotError> {
        if blobs.is_empty() {
            return Ok(());
        }
        let mut c = ContentAddressableStorageClient::new(self.channel.clone());
        let missing: HashSet<String> = c
            .find_missing_blobs(req(re::FindMissingBlobsRequest {
                instance_name: self.instance.clone(),
                blob_digests: blobs.iter().map(|(d, _)| d.clone()).collect(),
                digest_function: sha(),
            }))
            .await
            .map_err(|s| BotError::call("FindMissingBlobs", &s))?
            .into_inner()
            .missing_blob_digests
            .into_iter()
            .map(|d| d.hash)
            .collect();
        let mut batch = Vec::new();
        let mut size = 0;
        let mut sent = HashSet::new();
        for (d, blob) in blobs {
            if !missing.contains(&d.hash) || !sent.insert(d.hash.clone()) {
                continue;
            }
            let data = match blob {
                Blob::Bytes(b) => b,
                Blob::File(p) => std::fs::read(&p).map_err(|e| BotError::io(&p, e))?,
            };
            if d.size_bytes > SMALL {
                self.write(&d, &data).await?;
                continue;
            }
            if size + d.size_bytes > BATCH && !batch.is_empty() {
                self.batch_update(std::mem::take(&mut batch)).await?;
                size = 0;
            }
            size += d.size_bytes;
            batch.push(batch_update_blobs_request::Request { digest: Some(d), data });
        }
        if !batch.is_empty() {
            self.batch_update(batch).await?;
        }
        Ok(())
    }

    async fn batch_update(
        &self,
        requests: Vec<batch_update_blobs_request::Request>,
    ) -> Result<(), BotError> {
        let mut c = ContentAddressableStorageClient::new(self.channel.clone());
        let r = c
            .batch_update_blobs(req(re::BatchUpdateBlobsRequest {
                instance_name: self.instance.clone(),
                requests,
                digest_function: sha(),
            }))
            .await
            .map_err(|s| BotError::call("BatchUpdateBlobs", &s))?
            .into_inner();
        match r.responses.into_iter().find_map(|r| r.status.filter(|s| s.code != 0)) {
            Some(s) => {
                Err(BotError::Blob(format!("BatchUpdateBlobs: code {}: {}", s.code, s.message)))
            }
            None => Ok(()),
        }
    }

    async fn write(&self, d: &re::Digest, data: &[u8]) -> Result<(), BotError> {
        let name =
            self.resource(format!("uploads/{}/blobs/{}/{}", upload_id(d), d.hash, d.size_bytes));
        let mut msgs = Vec::new();
        let mut offset = 0;
        loop {
            let end = (offset + CHUNK).min(data.len());
            msgs.push(bytestream::WriteRequest {
                resource_name: if offset == 0 { name.clone() } else { String::new() },
                write_offset: offset as i64,
                finish_write: end == data.len(),
                data: data[offset..end].to_vec(),
            });
            offset = end;
            if offset >= data.len() {
                break;
            }
        }
        let mut c = ByteStreamClient::new(self.channel.clone());
        c.write(Request::new(futures::stream::iter(msgs)))
            .await
            .map_err(|s| BotError::call("ByteStream.Write", &s))?;
        Ok(())
    }
}

/// A blob to upload.
#[derive(Clone, Debug)]
pub enum Blob {
    /// In memory.
    Bytes(Vec<u8>),
    /// A file's bytes.
    File(PathBuf),
}

/// A UUID-shaped upload id, distinct per process, blob and moment.
fn upload_id(d: &re::Digest) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos());
    let h = blake3::hash(format!("{}-{}-{nanos}", std::process::id(), d.hash).as_bytes());
    let x = hex(&h.as_bytes()[..16]);
    format!("{}-{}-4{}-a{}-{}", &x[0..8], &x[8..12], &x[13..16], &x[17..20], &x[20..32])
}
