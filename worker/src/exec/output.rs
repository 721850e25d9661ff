//! Reading a child's stdout and stderr: both at once, merged into one stream without ever
//! splitting a line between them, captured into the bounded log, matched against the
//! readiness pattern and forwarded to the caller with backpressure.

use std::mem;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, oneshot};

use super::MAX_PARTIAL_LINE;
use super::capture::{CapturedLog, LogCapture};

/// Bytes asked of a pipe per read (a Linux pipe buffer is 64 KiB).
const READ_CHUNK: usize = 64 * 1024;

/// One stream's not-yet-complete line.
#[derive(Debug, Default)]
pub(crate) struct LineBuf {
    pending: Vec<u8>,
}

impl LineBuf {
    /// Add what was read; returns the complete lines now available (up to and including the
    /// last `\n`), or the whole pending line once it is longer than [`MAX_PARTIAL_LINE`].
    pub(crate) fn push(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        let old_len = self.pending.len();
        self.pending.extend_from_slice(data);
        if let Some(i) = data.iter().rposition(|&b| b == b'\n') {
            let rest = self.pending.split_off(old_len + i + 1);
            return Some(mem::replace(&mut self.pending, rest));
        }
        if self.pending.len() > MAX_PARTIAL_LINE {
            return Some(mem::take(&mut self.pending));
        }
        None
    }

    /// The trailing partial line, at end of stream.
    pub(crate) fn flush(&mut self) -> Option<Vec<u8>> {
        (!self.pending.is_empty()).then(|| mem::take(&mut self.pending))
    }
}

/// Watches output for the readiness pattern and fires once.
#[derive(Debug)]
struct ReadyWatch {
    pattern: regex::Regex,
    fire: oneshot::Sender<()>,
}

impl ReadyWatch {
    /// Whether a line of `chunk` matches. Every chunk ends at a line end (or is a partial line
    /// forwarded whole), so lines never straddle chunks except past [`MAX_PARTIAL_LINE`].
    fn matches(&self, chunk: &[u8]) -> bool {
        let chunk = chunk.strip_suffix(b"\n").unwrap_or(chunk);
        chunk.split(|&b| b == b'\n').any(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            self.pattern.is_match(&String::from_utf8_lossy(line))
        })
    }
}

/// Everything the output pump accumulates. Lives outside the pump future so that what was
/// read survives the pump being abandoned (drain timeout).
#[derive(Debug)]
pub(crate) struct OutputState {
    capture: LogCapture,
    lines: [LineBuf; 2],
    ready: Option<ReadyWatch>,
    tx: Option<mpsc::Sender<Vec<u8>>>,
}

impl OutputState {
    /// `ready` is the pattern and where to signal a match; without a pattern the caller fires
    /// the signal itself.
    pub(crate) fn new(
        log_limit: usize,
        tx: mpsc::Sender<Vec<u8>>,
        ready: Option<(regex::Regex, oneshot::Sender<()>)>,
    ) -> Self {
        Self {
            capture: LogCapture::new(log_limit),
            lines: Default::default(),
            ready: ready.map(|(pattern, fire)| ReadyWatch { pattern, fire }),
            tx: Some(tx),
        }
    }

    /// Capture, match and forward one chunk of whole lines.
    async fn emit(&mut self, chunk: Vec<u8>) {
        let fire = self.record(&chunk);
        if let Some(tx) = &self.tx
            && tx.send(chunk).await.is_err()
        {
            // The receiver is gone: keep capturing, stop forwarding.
            self.tx = None;
        }
        // Fired only after the matching chunk is queued, so a receiver that drains the
        // output queue on readiness shows the matching line before announcing "ready".
        if let Some(w) = fire {
            let _ = w.fire.send(());
        }
    }

    /// Captures `chunk`; returns the ready watch when this chunk matched it.
    fn record(&mut self, chunk: &[u8]) -> Option<ReadyWatch> {
        self.capture.push(chunk);
        if self.ready.as_ref().is_some_and(|w| w.matches(chunk)) { self.ready.take() } else { None }
    }

    /// The log, once the pump is done or abandoned. Partial lines still buffered are
    /// captured and offered to the receiver without waiting, then `notice` (prova's own line
    /// about the execution, e.g. processes it left behind).
    pub(crate) fn finish(mut self, notice: Option<Vec<u8>>) -> CapturedLog {
        for i in 0..2 {
            if let Some(chunk) = self.lines[i].flush() {
                let fire = self.record(&chunk);
                if let Some(tx) = &self.tx {
                    let _ = tx.try_send(chunk);
                }
                if let Some(w) = fire {
                    // The receiver may have lost interest; that is its business.
                    let _ = w.fire.send(());
                }
            }
        }
        if let Some(line) = notice {
            self.capture.push(&line);
            if let Some(tx) = &self.tx {
                let _ = tx.try_send(line);
            }
        }
        self.capture.finish()
    }
}

/// Read both pipes to end of file, emitting through `state`. Cancel-safe at every await in
/// the sense that matters: whatever was read is already in `state`'s capture or line buffers.
pub(crate) async fn pump<O, E>(state: &mut OutputState, mut stdout: O, mut stderr: E)
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let mut buf_out = vec![0u8; READ_CHUNK];
    let mut buf_err = vec![0u8; READ_CHUNK];
    let mut open = [true, true];
    while open[0] || open[1] {
        let (i, read) = tokio::select! {
            r = stdout.read(&mut buf_out), if open[0] => (0, r),
            r = stderr.read(&mut buf_err), if open[1] => (1, r),
        };
        let data = match read {
            Ok(0) => None,
            Ok(n) => Some(if i == 0 { &buf_out[..n] } else { &buf_err[..n] }),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(error = %e, stream = i, "reading child output failed; treating as end of stream");
                None
            }
        };
        let chunk = match data {
            Some(d) => state.lines[i].push(d),
            None => {
                open[i] = false;
                state.lines[i].flush()
            }
        };
        if let Some(chunk) = chunk {
            state.emit(chunk).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_buf_splits_at_the_last_newline() {
        let mut b = LineBuf::default();
        assert_eq!(b.push(b"ab"), None);
        assert_eq!(b.push(b"c\nd\ne"), Some(b"abc\nd\n".to_vec()));
        assert_eq!(b.push(b"f\n"), Some(b"ef\n".to_vec()));
        assert_eq!(b.flush(), None);
        assert_eq!(b.push(b"tail"), None);
        assert_eq!(b.flush(), Some(b"tail".to_vec()));
    }

    #[test]
    fn line_buf_forwards_an_overlong_partial_line() {
        let mut b = LineBuf::default();
        let half = vec![b'x'; MAX_PARTIAL_LINE / 2 + 1];
        assert_eq!(b.push(&half), None);
        let out = b.push(&half).expect("flushed past the limit");
        assert_eq!(out.len(), half.len() * 2);
        assert_eq!(b.flush(), None);
    }

    #[test]
    fn ready_watch_matches_whole_lines() {
        let (fire, _rx) = oneshot::channel();
        let w = ReadyWatch { pattern: regex::Regex::new("^ready on \\d+$").unwrap(), fire };
        assert!(w.matches(b"booting\nready on 3000\r\n"));
        assert!(w.matches(b"ready on 1"));
        assert!(!w.matches(b"not ready on 3000\n"));
        assert!(!w.matches(b"ready on \n3000\n"));
    }

    #[tokio::test]
    async fn pump_merges_streams_line_atomically() {
        let (tx, mut rx) = mpsc::channel(16);
        let (fire, ready_rx) = oneshot::channel();
        let mut state =
            OutputState::new(1024, tx, Some((regex::Regex::new("^go$").unwrap(), fire)));
        let stdout: &[u8] = b"o1\no2-part";
        let stderr: &[u8] = b"e1\ngo\n";
        pump(&mut state, stdout, stderr).await;
        let log = state.finish(None);
        let mut chunks = Vec::new();
        while let Ok(c) = rx.try_recv() {
            chunks.push(String::from_utf8(c).unwrap());
        }
        let o1 = chunks.iter().position(|c| c == "o1\n").unwrap();
        let o2 = chunks.iter().position(|c| c == "o2-part").unwrap();
        assert!(o1 < o2, "{chunks:?}");
        assert!(chunks.iter().any(|c| c == "e1\ngo\n"), "{chunks:?}");
        assert_eq!(chunks.len(), 3);
        assert_eq!(log.bytes, chunks.concat().into_bytes());
        assert_eq!(ready_rx.await, Ok(()));
    }

    #[tokio::test]
    async fn pump_keeps_capturing_after_the_receiver_is_dropped() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let mut state = OutputState::new(1024, tx, None);
        let stdout: &[u8] = b"a\nb\nc";
        pump(&mut state, stdout, &b""[..]).await;
        assert_eq!(state.finish(None).bytes, b"a\nb\nc");
    }

    #[test]
    fn finish_captures_and_offers_buffered_partial_lines() {
        let (tx, mut rx) = mpsc::channel(4);
        let mut state = OutputState::new(1024, tx, None);
        assert_eq!(state.lines[1].push(b"half a line"), None);
        let log = state.finish(None);
        assert_eq!(log.bytes, b"half a line");
        assert_eq!(rx.try_recv().unwrap(), b"half a line");
    }
}
