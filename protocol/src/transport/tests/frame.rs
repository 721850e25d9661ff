use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::transport::frame::{
    FrameDecoder, FrameError, HEADER_LEN, MAX_FRAME, READ_CHUNK, decode_payload, encode_frame,
    read_frame_into, read_msg, write_msg,
};
use crate::transport::test_support::{Msg, XorShift, within};

#[tokio::test]
async fn messages_round_trip_through_an_in_memory_duplex() {
    let (mut a, mut b) = tokio::io::duplex(1024);
    let msgs: Vec<Msg> = (0..50).map(Msg::sample).collect();
    let writer = async {
        for msg in &msgs {
            write_msg(&mut a, msg).await.expect("write");
        }
        drop(a);
    };
    let reader = async {
        let mut got = Vec::new();
        while let Some(msg) = read_msg::<_, Msg>(&mut b).await.expect("read") {
            got.push(msg);
        }
        got
    };
    let ((), got) = within("the duplex round trip", async { tokio::join!(writer, reader) }).await;
    assert_eq!(got, msgs);
}

#[test]
fn frames_are_named_field_msgpack_behind_a_big_endian_length() {
    let frame = encode_frame(&Msg { a: 1, b: "x".into(), c: vec![2] }).expect("encode");
    let len = u32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
    assert_eq!(len, frame.len() - HEADER_LEN);
    // A map (0x83: 3 entries) keyed by field names, not a positional array.
    assert_eq!(frame[4], 0x83);
    assert!(frame.windows(2).any(|w| w == [0xa1, b'a']), "field name \"a\" as a fixstr");
    let back: Msg = decode_payload(&frame[4..]).expect("decode");
    assert_eq!(back, Msg { a: 1, b: "x".into(), c: vec![2] });
}

#[tokio::test]
async fn an_oversized_declared_length_is_refused_from_the_header_alone() {
    // The peer declares MAX_FRAME + 1 and keeps the stream open: the reader must not wait for
    // (or buffer) the payload.
    let (mut a, mut b) = tokio::io::duplex(64);
    let declared = (MAX_FRAME + 1) as u32;
    a.write_all(&declared.to_be_bytes()).await.expect("write header");
    a.write_all(b"rest").await.expect("write more");
    let err = within("the oversized header", read_msg::<_, Msg>(&mut b)).await.unwrap_err();
    assert!(
        matches!(err, FrameError::TooLarge { len, max } if len == MAX_FRAME + 1 && max == MAX_FRAME)
    );
    // Nothing past the header was consumed.
    let mut rest = [0u8; 4];
    b.read_exact(&mut rest).await.expect("the bytes after the header are still there");
    assert_eq!(&rest, b"rest");

    let mut decoder = FrameDecoder::new();
    let mut bytes = u32::MAX.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0u8; 1000]);
    assert_eq!(decoder.push(&bytes), HEADER_LEN, "nothing past a refused header is taken");
    assert_eq!(decoder.buffered(), HEADER_LEN);
    assert!(matches!(decoder.next_frame(), Err(FrameError::TooLarge { .. })));
    assert_eq!(decoder.push(&bytes), 0);
    assert!(matches!(decoder.next_frame(), Err(FrameError::TooLarge { .. })), "sticky");
}

#[tokio::test]
async fn a_large_declared_length_with_little_data_allocates_little() {
    let mut bytes = (MAX_FRAME as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&[7u8; 10]);
    let mut payload = Vec::new();
    let err = read_frame_into(&mut bytes.as_slice(), MAX_FRAME, &mut payload).await.unwrap_err();
    assert!(
        matches!(err, FrameError::Truncated { expected, got } if expected == (MAX_FRAME + 4) as u64 && got == 14)
    );
    assert!(payload.capacity() <= READ_CHUNK, "capacity {} for 10 bytes", payload.capacity());
}

#[tokio::test]
async fn truncated_frames_are_errors_and_a_clean_end_is_none() {
    let frame = encode_frame(&Msg::sample(40)).expect("encode");
    for cut in 0..frame.len() {
        let got = read_msg::<_, Msg>(&mut &frame[..cut]).await;
        match cut {
            0 => assert!(matches!(got, Ok(None)), "cut 0: {got:?}"),
            _ => assert!(
                matches!(got, Err(FrameError::Truncated { got, .. }) if got == cut as u64),
                "cut {cut}: {got:?}"
            ),
        }
        let mut decoder = FrameDecoder::new();
        assert_eq!(decoder.push(&frame[..cut]), cut);
        assert!(matches!(decoder.next_frame(), Ok(None)), "cut {cut}");
        assert_eq!(decoder.finish().is_ok(), cut == 0, "cut {cut}");
    }
    let whole = read_msg::<_, Msg>(&mut frame.as_slice()).await.expect("whole frame");
    assert_eq!(whole, Some(Msg::sample(40)));
}

#[tokio::test]
async fn a_message_over_the_limit_is_not_sent() {
    let big = Msg { a: 0, b: String::new(), c: vec![0; MAX_FRAME] };
    let mut out = Vec::new();
    let err = write_msg(&mut out, &big).await.unwrap_err();
    assert!(matches!(err, FrameError::TooLarge { max, .. } if max == MAX_FRAME), "{err}");
    assert!(out.is_empty(), "nothing written");
}

#[test]
fn the_decoder_splits_any_chunking_into_the_same_frames() {
    let msgs: Vec<Msg> = (0..30).map(Msg::sample).collect();
    let stream: Vec<u8> =
        msgs.iter().flat_map(|m| encode_frame(m).expect("encode")).collect::<Vec<u8>>();
    let mut rng = XorShift::new(7);
    for _ in 0..200 {
        let mut decoder = FrameDecoder::new();
        let mut got = Vec::new();
        let mut rest = stream.as_slice();
        while !rest.is_empty() {
            let chunk = 1 + rng.below(rest.len().min(600));
            let mut piece = &rest[..chunk];
            while !piece.is_empty() {
                let taken = decoder.push(piece);
                piece = &piece[taken..];
                while let Some(frame) = decoder.next_frame().expect("frame") {
                    got.push(decode_payload::<Msg>(&frame).expect("decode"));
                }
            }
            rest = &rest[chunk..];
        }
        decoder.finish().expect("ends at a boundary");
        assert_eq!(got, msgs);
    }
}

#[test]
fn a_full_decoder_always_holds_a_frame_so_pushing_never_stalls() {
    // A small limit makes the bound observable: the buffer never exceeds max + 4.
    let max = 100;
    let frames: Vec<Vec<u8>> = [100usize, 0, 37, 100, 1]
        .iter()
        .map(|&n| {
            let mut f = (n as u32).to_be_bytes().to_vec();
            f.extend(std::iter::repeat_n(n as u8, n));
            f
        })
        .collect();
    let stream = frames.concat();
    let mut decoder = FrameDecoder::with_max(max);
    let mut rest = stream.as_slice();
    let mut got = Vec::new();
    while !rest.is_empty() {
        let taken = decoder.push(rest);
        assert!(decoder.buffered() <= max + HEADER_LEN);
        rest = &rest[taken..];
        let before = got.len();
        while let Some(frame) = decoder.next_frame().expect("frame") {
            got.push(frame);
        }
        assert!(taken > 0 || got.len() > before, "stalled");
    }
    let lens: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(lens, vec![100, 0, 37, 100, 1]);
}

/// Feeds `bytes` to a decoder and to the async reader, decoding into `Msg`: any outcome but a
/// panic is fine.
async fn feed(bytes: &[u8], max: usize, rng: &mut XorShift) -> usize {
    let mut decoded = 0;
    let mut decoder = FrameDecoder::with_max(max);
    let mut rest = bytes;
    'outer: while !rest.is_empty() {
        let chunk = 1 + rng.below(rest.len());
        let taken = decoder.push(&rest[..chunk]);
        rest = &rest[taken..];
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => decoded += usize::from(decode_payload::<Msg>(&frame).is_ok()),
                Ok(None) => break,
                Err(_) => break 'outer,
            }
        }
        if taken == 0 {
            break;
        }
    }
    let _ = decoder.finish();
    let mut reader = bytes;
    while let Ok(Some(_)) = read_msg::<_, Msg>(&mut reader).await {}
    decoded
}

#[tokio::test]
async fn the_decoder_never_panics_on_random_or_truncated_input() {
    let mut rng = XorShift::new(0x5eed_1234_abcd_0001);
    for i in 0..12_000 {
        let len = rng.below(96);
        let mut bytes = rng.bytes(len);
        // Half the cases carry a plausible header, so payload decoding is exercised too.
        if i % 2 == 0 && len >= HEADER_LEN {
            let payload_len = (len - HEADER_LEN + rng.below(3)).saturating_sub(1) as u32;
            bytes[..HEADER_LEN].copy_from_slice(&payload_len.to_be_bytes());
        }
        feed(&bytes, if i % 3 == 0 { 64 } else { MAX_FRAME }, &mut rng).await;
    }
    // Every truncation of valid frames, alone and followed by random bytes.
    let valid: Vec<Vec<u8>> = [0, 1, 9, 200, 299]
        .into_iter()
        .map(|n| encode_frame(&Msg::sample(n)).expect("encode"))
        .collect();
    for frame in &valid {
        for cut in 0..=frame.len() {
            feed(&frame[..cut], MAX_FRAME, &mut rng).await;
            let mut tail = frame[..cut].to_vec();
            tail.extend(rng.bytes(8));
            feed(&tail, MAX_FRAME, &mut rng).await;
        }
    }
    // Sanity: the generator is not so random that nothing ever decodes in the valid cases.
    let mut whole = Vec::new();
    valid.iter().for_each(|f| whole.extend_from_slice(f));
    assert_eq!(feed(&whole, MAX_FRAME, &mut rng).await, valid.len());
}

/// Version 1 of a message.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct HelloV1 {
    version: u32,
    name: String,
}

/// Version 2 adds a field with a default: fields are only ever added.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct HelloV2 {
    version: u32,
    name: String,
    #[serde(default)]
    capabilities: Vec<String>,
}

#[tokio::test]
async fn old_and_new_versions_of_a_message_read_each_other() {
    let (mut a, mut b) = tokio::io::duplex(1024);
    let exchange = async {
        write_msg(&mut a, &HelloV1 { version: 1, name: "old".into() }).await.expect("v1");
        write_msg(
            &mut a,
            &HelloV2 { version: 2, name: "new".into(), capabilities: vec!["x".into()] },
        )
        .await
        .expect("v2");
        let old_as_new: HelloV2 = read_msg(&mut b).await.expect("read").expect("v1 frame");
        let new_as_old: HelloV1 = read_msg(&mut b).await.expect("read").expect("v2 frame");
        (old_as_new, new_as_old)
    };
    let (old_as_new, new_as_old) = within("the version exchange", exchange).await;
    assert_eq!(old_as_new, HelloV2 { version: 1, name: "old".into(), capabilities: vec![] });
    assert_eq!(new_as_old, HelloV1 { version: 2, name: "new".into() });
}

#[test]
fn a_payload_of_the_wrong_shape_is_a_decode_error() {
    let frame = encode_frame(&HelloV1 { version: 1, name: "x".into() }).expect("encode");
    let err = decode_payload::<Msg>(&frame[4..]).unwrap_err();
    assert!(matches!(err, FrameError::Decode(_)), "{err}");
}
