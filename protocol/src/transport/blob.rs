//! Blob streams: a small header frame `{digest, size}`, then exactly `size` raw bytes. Blob
//! bytes never go through MessagePack or the frame limit — they stream in chunks — and the
//! receiver hashes them as they arrive and refuses a blob whose bytes do not match the header
//! (distrust every byte on the way back in).

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::frame::{FrameError, read_msg_max, write_msg};
use crate::digest::Digest;

/// Chunk size for blob bytes: large enough to amortise syscalls and hashing, small enough that
/// a blob transfer holds little memory.
pub const BLOB_CHUNK: usize = 64 * 1024;
/// The largest blob header frame accepted: it holds a digest and a size, so anything bigger is
/// not a blob header.
pub const MAX_BLOB_HEADER: usize = 1024;

/// What precedes a blob's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobHeader {
    /// BLAKE3-256 of the bytes that follow.
    pub digest: Digest,
    /// How many bytes follow.
    pub size: u64,
}

/// Sends a blob: the header, then exactly `size` bytes from `reader` in [`BLOB_CHUNK`]s. Fails
/// with `Truncated` when `reader` ends early (the receiver will then fail too); bytes past
/// `size` are not read. The digest is the caller's claim — the receiver checks it.
pub async fn send_blob<W>(
    w: &mut W,
    digest: Digest,
    size: u64,
    reader: impl AsyncRead,
) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    write_msg(w, &BlobHeader { digest, size }).await?;
    let reader = reader.take(size);
    tokio::pin!(reader);
    let mut buf = vec![0u8; chunk_len(size)];
    let mut sent = 0u64;
    while sent < size {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Err(FrameError::Truncated { expected: size, got: sent });
        }
        w.write_all(&buf[..n]).await?;
        sent += n as u64;
    }
    w.flush().await?;
    Ok(())
}

/// Receives a blob into `dest`: reads the header, refuses it before reading any bytes when it
/// is not `expected` (`UnexpectedBlob`) or larger than `max_size` (`BlobTooLarge`), then
/// streams exactly `size` bytes into `dest` while hashing, and fails with `DigestMismatch`
/// when they do not hash to the header's digest. `dest` has received the bytes by then: write
/// to a temporary file and rename it into place only on `Ok`. Returns the digest and size.
pub async fn recv_blob<R, W>(
    r: &mut R,
    dest: &mut W,
    expected: Option<Digest>,
    max_size: u64,
) -> Result<(Digest, u64), FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let header: BlobHeader = read_msg_max(r, MAX_BLOB_HEADER)
        .await?
        .ok_or(FrameError::Closed { what: "blob header" })?;
    if let Some(expected) = expected
        && expected != header.digest
    {
        return Err(FrameError::UnexpectedBlob { expected, got: header.digest });
    }
    if header.size > max_size {
        return Err(FrameError::BlobTooLarge { size: header.size, max: max_size });
    }
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; chunk_len(header.size)];
    let mut got = 0u64;
    while got < header.size {
        let want = buf.len().min(usize::try_from(header.size - got).unwrap_or(usize::MAX));
        let n = r.read(&mut buf[..want]).await?;
        if n == 0 {
            return Err(FrameError::Truncated { expected: header.size, got });
        }
        hasher.update(&buf[..n]);
        dest.write_all(&buf[..n]).await?;
        got += n as u64;
    }
    dest.flush().await?;
    let actual = Digest(*hasher.finalize().as_bytes());
    if actual != header.digest {
        return Err(FrameError::DigestMismatch { expected: header.digest, actual });
    }
    Ok((actual, header.size))
}

fn chunk_len(size: u64) -> usize {
    usize::try_from(size).map_or(BLOB_CHUNK, |s| s.min(BLOB_CHUNK))
}
