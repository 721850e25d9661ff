//! The bounded in-memory log of one execution: the first half of the budget is the head of
//! the output, the second half a ring of its tail, and whatever fell out of the middle is
//! counted. The head says what the task was doing; the tail usually holds the error.

use std::collections::VecDeque;

/// The combined output of one execution, possibly with its middle cut out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedLog {
    /// What was kept: the head, then the tail.
    pub bytes: Vec<u8>,
    /// How many bytes were dropped between the head and the tail.
    pub omitted: u64,
    /// Where the cut is: `bytes[..head_len]` is the head, the rest the tail. Equal to
    /// `bytes.len()` when nothing was omitted.
    pub head_len: usize,
}

impl CapturedLog {
    /// The log with a visible notice at the cut, for showing to a person:
    /// `\n[prova: N bytes of output omitted]\n`. Without a cut, the bytes as they are.
    pub fn to_bytes_with_notice(&self) -> Vec<u8> {
        if self.omitted == 0 {
            return self.bytes.clone();
        }
        let cut = self.head_len.min(self.bytes.len());
        let notice = format!("\n[prova: {} bytes of output omitted]\n", self.omitted);
        let mut out = Vec::with_capacity(self.bytes.len() + notice.len());
        out.extend_from_slice(&self.bytes[..cut]);
        out.extend_from_slice(notice.as_bytes());
        out.extend_from_slice(&self.bytes[cut..]);
        out
    }
}

/// Accumulates output into a [`CapturedLog`] within a byte budget.
#[derive(Debug)]
pub(crate) struct LogCapture {
    head: Vec<u8>,
    head_limit: usize,
    tail: VecDeque<u8>,
    tail_limit: usize,
    omitted: u64,
}

impl LogCapture {
    /// A capture keeping at most `limit` bytes (the head gets the smaller half).
    pub(crate) fn new(limit: usize) -> Self {
        let head_limit = limit / 2;
        let tail_limit = limit - head_limit;
        // Grow on demand: most tasks print far less than the budget.
        Self { head: Vec::new(), head_limit, tail: VecDeque::new(), tail_limit, omitted: 0 }
    }

    /// Append output.
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        let room = self.head_limit - self.head.len();
        if room > 0 {
            let n = room.min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        if data.len() >= self.tail_limit {
            // The new data alone fills the ring: everything older is dropped.
            let keep_from = data.len() - self.tail_limit;
            self.omitted += (self.tail.len() + keep_from) as u64;
            self.tail.clear();
            self.tail.extend(&data[keep_from..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_limit);
        self.tail.drain(..overflow);
        self.omitted += overflow as u64;
        self.tail.extend(data);
    }

    /// The log as kept.
    pub(crate) fn finish(self) -> CapturedLog {
        let head_len = self.head.len();
        let mut bytes = self.head;
        bytes.extend(self.tail);
        CapturedLog { bytes, omitted: self.omitted, head_len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(limit: usize, pushes: &[&[u8]]) -> CapturedLog {
        let mut c = LogCapture::new(limit);
        for p in pushes {
            c.push(p);
        }
        c.finish()
    }

    #[test]
    fn under_the_limit_keeps_everything() {
        let log = capture(10, &[b"abc", b"def"]);
        assert_eq!(log.bytes, b"abcdef");
        assert_eq!(log.omitted, 0);
        assert_eq!(log.to_bytes_with_notice(), b"abcdef");
    }

    #[test]
    fn exactly_the_limit_keeps_everything() {
        let log = capture(6, &[b"abcdef"]);
        assert_eq!((log.bytes.as_slice(), log.omitted), (&b"abcdef"[..], 0));
    }

    #[test]
    fn over_the_limit_keeps_head_and_tail_and_counts_the_middle() {
        let log = capture(6, &[b"abc", b"defgh", b"ij"]);
        assert_eq!(log.bytes, b"abchij");
        assert_eq!(log.omitted, 4);
        assert_eq!(log.head_len, 3);
        assert_eq!(log.to_bytes_with_notice(), b"abc\n[prova: 4 bytes of output omitted]\nhij");
    }

    #[test]
    fn small_pushes_roll_the_ring() {
        let pushes: Vec<&[u8]> = b"0123456789".chunks(1).collect();
        let log = capture(4, &pushes);
        assert_eq!(log.bytes, b"0189");
        assert_eq!(log.omitted, 6);
    }

    #[test]
    fn one_huge_push_is_cut_in_one_go() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let log = capture(100, &[&data]);
        assert_eq!(&log.bytes[..50], &data[..50]);
        assert_eq!(&log.bytes[50..], &data[data.len() - 50..]);
        assert_eq!(log.omitted, 10_000 - 100);
    }

    #[test]
    fn total_is_conserved_across_mixed_pushes() {
        let mut c = LogCapture::new(33);
        let mut total = 0u64;
        for n in [1usize, 7, 40, 3, 0, 16, 100, 2] {
            c.push(&vec![b'x'; n]);
            total += n as u64;
        }
        let log = c.finish();
        assert_eq!(log.bytes.len(), 33);
        assert_eq!(log.bytes.len() as u64 + log.omitted, total);
    }

    #[test]
    fn zero_limit_keeps_nothing_but_counts() {
        let log = capture(0, &[b"abc"]);
        assert!(log.bytes.is_empty());
        assert_eq!(log.omitted, 3);
    }
}
