//! Length-prefixed frames: a 4-byte big-endian length, then that many payload bytes. Messages
//! are MessagePack with named fields (`rmp_serde::to_vec_named`), so a newer peer's added
//! fields are ignored by an older one and an older peer's missing fields take their
//! `#[serde(default)]` — fields are only ever added (brief §8).
//!
//! Two ways in: the sans-IO [`FrameDecoder`] (bytes in, frames out, no I/O) and the async
//! [`read_msg`]/[`write_msg`] over any tokio reader/writer (quinn's streams, a duplex in
//! tests). Both refuse a declared length over the limit as soon as the 4 header bytes are in,
//! before reading or buffering any payload.

use std::io;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::digest::Digest;

/// The largest frame payload: messages carry specs and manifests, never blob bytes (those go
/// as raw [`crate::transport::blob`] streams), so 16 MiB is generous while still bounding what
/// one peer can make us hold per stream.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// The frame header: a big-endian `u32` payload length.
pub const HEADER_LEN: usize = 4;
/// How much payload the async reader asks for at a time; buffers grow by doubling from here
/// only as bytes arrive, so a peer declaring a large frame and sending little costs little.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// What can go wrong reading or writing frames and blobs.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A frame longer than the limit (declared by a peer, or a message we were asked to send).
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The declared or encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The stream ended inside a frame or blob.
    #[error("stream ended after {got} of {expected} bytes")]
    Truncated {
        /// Bytes the frame or blob needed (header included for frames).
        expected: u64,
        /// Bytes that arrived.
        got: u64,
    },
    /// The stream ended before a frame that had to come (e.g. a blob header).
    #[error("stream closed before a {what}")]
    Closed {
        /// What was expected.
        what: &'static str,
    },
    /// A payload that is not a valid encoding of the expected message.
    #[error("undecodable message: {0}")]
    Decode(String),
    /// A message that could not be encoded.
    #[error("unencodable message: {0}")]
    Encode(String),
    /// A blob announced larger than the receiver accepts.
    #[error("blob of {size} bytes exceeds the {max}-byte limit")]
    BlobTooLarge {
        /// The announced size.
        size: u64,
        /// The receiver's limit.
        max: u64,
    },
    /// A blob other than the one asked for.
    #[error("expected blob {expected}, peer sent {got}")]
    UnexpectedBlob {
        /// The digest asked for.
        expected: Digest,
        /// The digest in the blob header.
        got: Digest,
    },
    /// A blob whose bytes do not hash to its header's digest.
    #[error("blob bytes hash to {actual}, header said {expected}")]
    DigestMismatch {
        /// The header's digest.
        expected: Digest,
        /// The digest of the bytes received.
        actual: Digest,
    },
    /// The underlying stream failed (reset, connection lost, …).
    #[error("stream: {0}")]
    Io(#[from] io::Error),
}

/// Encodes `msg` as one frame (header + named-field MessagePack).
pub fn encode_frame<T: Serialize + ?Sized>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let mut buf = vec![0u8; HEADER_LEN];
    rmp_serde::encode::write_named(&mut buf, msg).map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = buf.len() - HEADER_LEN;
    let declared = u32::try_from(len)
        .ok()
        .filter(|_| len <= MAX_FRAME)
        .ok_or(FrameError::TooLarge { len, max: MAX_FRAME })?;
    buf[..HEADER_LEN].copy_from_slice(&declared.to_be_bytes());
    Ok(buf)
}

/// Decodes one frame's payload.
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    rmp_serde::from_slice(payload).map_err(|e| FrameError::Decode(e.to_string()))
}

/// Writes `msg` as one frame and flushes.
pub async fn write_msg<W, T>(w: &mut W, msg: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin + ?Sized,
    T: Serialize + ?Sized,
{
    let frame = encode_frame(msg)?;
    w.write_all(&frame).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one message: `None` on a clean end of stream at a frame boundary, `Truncated` on an
/// end inside a frame, `TooLarge` as soon as a header declares more than [`MAX_FRAME`].
pub async fn read_msg<R, T>(r: &mut R) -> Result<Option<T>, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
    T: DeserializeOwned,
{
    read_msg_max(r, MAX_FRAME).await
}

/// [`read_msg`] with a tighter limit (e.g. for a header known to be small).
pub async fn read_msg_max<R, T>(r: &mut R, max: usize) -> Result<Option<T>, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
    T: DeserializeOwned,
{
    match read_frame(r, max).await? {
        Some(payload) => decode_payload(&payload).map(Some),
        None => Ok(None),
    }
}

/// Reads one frame's payload (see [`read_msg`]).
pub async fn read_frame<R>(r: &mut R, max: usize) -> Result<Option<Vec<u8>>, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut payload = Vec::new();
    match read_frame_into(r, max, &mut payload).await? {
        true => Ok(Some(payload)),
        false => Ok(None),
    }
}

/// Reads one frame's payload into `payload` (cleared first); `false` on a clean end of stream.
/// The buffer grows only as bytes arrive and never past the declared length.
pub(crate) async fn read_frame_into<R>(
    r: &mut R,
    max: usize,
    payload: &mut Vec<u8>,
) -> Result<bool, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    payload.clear();
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        let n = r.read(&mut header[got..]).await?;
        if n == 0 {
            return match got {
                0 => Ok(false),
                _ => Err(FrameError::Truncated { expected: HEADER_LEN as u64, got: got as u64 }),
            };
        }
        got += n;
    }
    let len = declared_len(header, max)?;
    let mut rest = (&mut *r).take(len as u64);
    while payload.len() < len {
        if payload.capacity() == payload.len() {
            let target = (payload.capacity() * 2).max(READ_CHUNK).min(len);
            payload.reserve_exact(target - payload.len());
        }
        if rest.read_buf(payload).await? == 0 {
            return Err(FrameError::Truncated {
                expected: (HEADER_LEN + len) as u64,
                got: (HEADER_LEN + payload.len()) as u64,
            });
        }
    }
    Ok(true)
}

fn declared_len(header: [u8; HEADER_LEN], max: usize) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header) as usize;
    match len > max {
        true => Err(FrameError::TooLarge { len, max }),
        false => Ok(len),
    }
}

/// A sans-IO frame decoder: [`push`](Self::push) bytes as they arrive, take complete frames
/// with [`next_frame`](Self::next_frame). It holds at most one maximal frame (`max + 4`
/// bytes): `push` accepts only what fits and says how much it took, and a full buffer always
/// holds a complete frame, so draining frames always makes room.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Start of the first frame not yet returned.
    start: usize,
    /// Start of the first frame header not yet checked against `max`.
    scan: usize,
    max: usize,
    /// A header declared more than `max`: accept nothing more.
    refused: bool,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder for frames up to [`MAX_FRAME`].
    pub fn new() -> Self {
        Self::with_max(MAX_FRAME)
    }

    /// A decoder for frames up to `max` bytes.
    pub fn with_max(max: usize) -> Self {
        Self { buf: Vec::new(), start: 0, scan: 0, max, refused: false }
    }

    /// Bytes held that have not been returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Takes as many of `bytes` as fit and returns how many it took; call
    /// [`next_frame`](Self::next_frame) until `None`, then push the rest. Takes nothing after
    /// a header declared a frame over the limit (and drops what followed that header).
    #[must_use = "bytes not taken must be pushed again after draining frames"]
    pub fn push(&mut self, bytes: &[u8]) -> usize {
        if self.refused {
            return 0;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scan -= self.start;
            self.start = 0;
        }
        let room = (self.max + HEADER_LEN).saturating_sub(self.buf.len());
        let take = room.min(bytes.len());
        let before = self.buf.len();
        self.buf.extend_from_slice(&bytes[..take]);
        // Check every header that is now complete, so an oversized one is refused before any
        // of its payload is held.
        while self.scan + HEADER_LEN <= self.buf.len() {
            let header = self.header_at(self.scan);
            match declared_len(header, self.max) {
                Ok(len) => self.scan += HEADER_LEN + len,
                Err(_) => {
                    self.refused = true;
                    self.buf.truncate(self.scan + HEADER_LEN);
                    return self.buf.len().saturating_sub(before);
                }
            }
        }
        take
    }

    /// The next complete frame's payload, `None` when more bytes are needed, or `TooLarge` once
    /// an oversized header reaches the front (it stays there: the stream is unusable).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        if self.buffered() < HEADER_LEN {
            return Ok(None);
        }
        let len = declared_len(self.header_at(self.start), self.max)?;
        let end = self.start + HEADER_LEN + len;
        if self.buf.len() < end {
            return Ok(None);
        }
        let frame = self.buf[self.start + HEADER_LEN..end].to_vec();
        self.start = end;
        Ok(Some(frame))
    }

    /// At end of stream: `Ok` when it ended at a frame boundary, else `Truncated`.
    pub fn finish(&self) -> Result<(), FrameError> {
        let got = self.buffered();
        if got == 0 {
            return Ok(());
        }
        let expected = match got >= HEADER_LEN {
            true => HEADER_LEN + u32::from_be_bytes(self.header_at(self.start)) as usize,
            false => HEADER_LEN,
        };
        Err(FrameError::Truncated { expected: expected as u64, got: got as u64 })
    }

    fn header_at(&self, at: usize) -> [u8; HEADER_LEN] {
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&self.buf[at..at + HEADER_LEN]);
        header
    }
}
