//! The wire decoder against hostile bytes (issue 4: "protocol decoder fed random and
//! truncated frames never panics"): the sans-IO `FrameDecoder` and `decode_payload::<T>` for
//! every message type, fed thousands of random byte strings, every truncation and many
//! single-byte mutations of every golden frame (`tests/golden/`), and length fields claiming
//! gigabytes. Errors are the expected outcome; a panic fails the test, and so does any single
//! allocation larger than a frame may be (this binary's allocator measures them and refuses
//! one past the limit, which aborts loudly instead of exhausting the machine).

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};

use prova_protocol::transport::frame::{FrameDecoder, FrameError, HEADER_LEN, MAX_FRAME};
use support::{Golden, XorShift, decode_as_every_type, goldens, hex};

/// The largest single allocation this test binary may make: one maximal frame.
const ALLOC_LIMIT: usize = MAX_FRAME + HEADER_LEN;

/// The system allocator, recording the largest request and refusing any over the limit.
struct Measured;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

fn admit(size: usize) -> bool {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    size <= ALLOC_LIMIT
}

// SAFETY: delegates to `System`; refusing (null) is allowed by `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for Measured {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match admit(layout.size()) {
            // SAFETY: same contract as ours.
            true => unsafe { System.alloc(layout) },
            false => std::ptr::null_mut(),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match admit(layout.size()) {
            // SAFETY: same contract as ours.
            true => unsafe { System.alloc_zeroed(layout) },
            false => std::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through us.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match admit(new_size) {
            // SAFETY: `ptr` came from `System` through us; same contract as ours.
            true => unsafe { System.realloc(ptr, layout, new_size) },
            false => std::ptr::null_mut(),
        }
    }
}

#[global_allocator]
static ALLOCATOR: Measured = Measured;

/// Runs `f`, turning a panic into a failure that shows the input.
fn no_panic<R>(what: &str, input: &[u8], f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => panic!("{what} panicked on input {}", hex(input)),
    }
}

/// Feeds `stream` to a fresh decoder in chunks of `chunk` bytes and decodes every frame it
/// yields as every message type. Returns the frames seen.
fn feed(stream: &[u8], chunk: usize) -> usize {
    let mut decoder = FrameDecoder::new();
    let mut frames = 0;
    let mut rest = stream;
    'stream: while !rest.is_empty() {
        let piece_len = chunk.min(rest.len());
        let mut piece = &rest[..piece_len];
        while !piece.is_empty() {
            let taken = decoder.push(piece);
            assert!(decoder.buffered() <= MAX_FRAME + HEADER_LEN, "decoder holds too much");
            piece = &piece[taken..];
            loop {
                match decoder.next_frame() {
                    Ok(Some(frame)) => {
                        frames += 1;
                        decode_as_every_type(&frame);
                    }
                    Ok(None) => break,
                    // An oversized header: the stream is unusable, as documented.
                    Err(FrameError::TooLarge { .. }) => break 'stream,
                    Err(e) => panic!("next_frame: unexpected error {e}"),
                }
            }
            if taken == 0 && !piece.is_empty() {
                // A full buffer always holds a frame (drained above), so a decoder that takes
                // nothing has refused the stream.
                assert!(matches!(decoder.next_frame(), Err(FrameError::TooLarge { .. })));
                break 'stream;
            }
        }
        rest = &rest[piece_len..];
    }
    let _ = decoder.finish();
    frames
}

#[test]
fn random_bytes_never_panic_the_decoder() {
    let mut rng = XorShift::new(0x5eed_f00d);
    let mut frames = 0;
    let mut accepted = 0;
    const CASES: usize = 6000;
    for case in 0..CASES {
        let len = match case % 4 {
            0 => rng.below(8),
            1 => rng.below(64),
            2 => rng.below(512),
            _ => rng.below(4096),
        };
        let body = rng.bytes(len);
        // As a raw payload, as every type.
        accepted += no_panic("decode_payload", &body, || decode_as_every_type(&body));
        // As a stream: raw (random headers, mostly oversized or unfinished), and behind a header
        // that matches its length (so the payload reaches the message decoders).
        let chunk = 1 + rng.below(600);
        frames += no_panic("FrameDecoder", &body, || feed(&body, chunk));
        let mut framed = u32::try_from(body.len()).expect("small").to_be_bytes().to_vec();
        framed.extend_from_slice(&body);
        frames += no_panic("FrameDecoder", &framed, || feed(&framed, chunk));
    }
    // Random MessagePack: a byte with the top bits of a fixmap/fixarray, then random entries.
    for _ in 0..CASES {
        let mut body = vec![0x80 | rng.below(16) as u8];
        let n = rng.below(256);
        body.extend(rng.bytes(n));
        accepted += no_panic("decode_payload", &body, || decode_as_every_type(&body));
    }
    assert!(frames >= CASES, "only {frames} frames reached the message decoders");
    eprintln!(
        "{} random inputs: {frames} frames decoded, {accepted} accepted by some type; largest \
         allocation so far {} bytes",
        3 * CASES,
        LARGEST.load(Ordering::Relaxed)
    );
}

#[test]
fn every_truncation_of_every_golden_frame_is_an_error() {
    for g in goldens() {
        let frame = g.msg.frame();
        let payload = &frame[HEADER_LEN..];
        for cut in 0..frame.len() {
            let part = &frame[..cut];
            no_panic("FrameDecoder", part, || {
                let mut decoder = FrameDecoder::new();
                assert_eq!(decoder.push(part), cut);
                assert!(matches!(decoder.next_frame(), Ok(None)), "{}: cut {cut}", g.name);
                match cut {
                    0 => assert!(decoder.finish().is_ok()),
                    _ => assert!(
                        matches!(decoder.finish(), Err(FrameError::Truncated { got, .. }) if got == cut as u64),
                        "{}: cut {cut}",
                        g.name
                    ),
                }
            });
        }
        // A strict prefix of one MessagePack value is never a whole message.
        for cut in 0..payload.len() {
            let part = &payload[..cut];
            no_panic("decode_payload", part, || {
                assert!(g.msg.decode_same_type(part).is_err(), "{}: payload cut {cut}", g.name);
                decode_as_every_type(part);
            });
        }
        // The whole frame, split anywhere, is the same message.
        for split in 0..=frame.len() {
            let mut decoder = FrameDecoder::new();
            assert_eq!(decoder.push(&frame[..split]), split);
            let mut got = Vec::new();
            while let Some(f) = decoder.next_frame().expect("frame") {
                got.push(f);
            }
            assert_eq!(decoder.push(&frame[split..]), frame.len() - split);
            while let Some(f) = decoder.next_frame().expect("frame") {
                got.push(f);
            }
            decoder.finish().expect("ends at a boundary");
            assert_eq!(got.len(), 1, "{}: split {split}", g.name);
            let back = g.msg.decode_same_type(&got[0]).expect("decodes");
            assert_eq!(back.frame(), frame, "{}: split {split}", g.name);
        }
    }
}

/// Replacement bytes tried at every position besides every single-bit flip of the original:
/// MessagePack markers that change what follows (nil, the never-used byte, false, 32-bit
/// string/binary/array/map headers, a u64, the extreme fixints), so lengths and types lie.
/// (`length_fields_claiming_gigabytes_…` below puts whole 4-GiB length fields everywhere.)
const MARKERS: [u8; 10] = [0x00, 0x7f, 0xc0, 0xc1, 0xc2, 0xc6, 0xcf, 0xdb, 0xdd, 0xdf];

fn mutations(original: u8) -> impl Iterator<Item = u8> {
    (0..8).map(move |bit| original ^ (1 << bit)).chain(MARKERS).filter(move |b| *b != original)
}

fn check_mutations(g: &Golden) -> (usize, usize) {
    let frame = g.msg.frame();
    let (mut tried, mut accepted) = (0, 0);
    for pos in 0..frame.len() {
        for b in mutations(frame[pos]) {
            let mut m = frame.clone();
            m[pos] = b;
            tried += 1;
            if pos < HEADER_LEN {
                // A lying length: the decoder waits, refuses, or cuts the payload elsewhere.
                no_panic("FrameDecoder", &m, || feed(&m, 7));
            } else {
                // The header is intact, so the frame is this payload: decode it as its type.
                let ok = no_panic("decode_payload", &m, || {
                    g.msg.decode_same_type(&m[HEADER_LEN..]).is_ok()
                });
                accepted += usize::from(ok);
            }
        }
    }
    (tried, accepted)
}

#[test]
fn every_single_byte_mutation_of_every_golden_frame_is_survived() {
    let (mut tried, mut accepted) = (0, 0);
    for g in goldens() {
        let (t, a) = check_mutations(&g);
        tried += t;
        accepted += a;
    }
    assert!(tried > 10_000, "only {tried} mutations");
    eprintln!(
        "{tried} mutated frames survived ({accepted} still decoded, e.g. a changed integer); \
         largest allocation so far {} bytes",
        LARGEST.load(Ordering::Relaxed)
    );
}

#[test]
fn length_fields_claiming_gigabytes_allocate_nothing_of_the_sort() {
    // At every position of every golden payload, a 32-bit string/binary/array/map header
    // declaring 4 GiB − 1 elements, with the real (short) rest of the frame behind it.
    let bombs: [u8; 4] = [0xdb, 0xc6, 0xdd, 0xdf];
    let mut tried = 0;
    for g in goldens() {
        let payload = g.msg.payload();
        for pos in 0..payload.len() {
            for marker in bombs {
                let mut m = payload.clone();
                let end = (pos + 5).min(m.len());
                let bomb = [marker, 0xff, 0xff, 0xff, 0xff];
                m.splice(pos..end, bomb);
                tried += 1;
                no_panic("decode_payload", &m, || decode_as_every_type(&m));
            }
        }
        // And as a frame header: every declared length past the limit is refused from the
        // header alone.
        for declared in [MAX_FRAME as u32 + 1, u32::MAX] {
            let mut m = declared.to_be_bytes().to_vec();
            m.extend_from_slice(&payload);
            let mut decoder = FrameDecoder::new();
            assert_eq!(decoder.push(&m), HEADER_LEN);
            assert!(matches!(decoder.next_frame(), Err(FrameError::TooLarge { .. })));
        }
    }
    // Bare bombs, and bombs one level inside each enum's wrapper.
    for marker in bombs {
        let bare = [marker, 0xff, 0xff, 0xff, 0xff];
        decode_as_every_type(&bare);
        for variant in ["Tasks", "FindMissing", "Register", "Report", "Done", "Status", "Work"] {
            let mut m = vec![0x81, 0xa0 | variant.len() as u8];
            m.extend_from_slice(variant.as_bytes());
            m.extend_from_slice(&bare);
            decode_as_every_type(&m);
            tried += 1;
        }
    }
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(largest <= ALLOC_LIMIT, "an allocation of {largest} bytes");
    eprintln!("{tried} length bombs refused; largest allocation so far {largest} bytes");
}
