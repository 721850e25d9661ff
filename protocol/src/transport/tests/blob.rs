use tokio::io::AsyncReadExt;

use crate::digest::Digest;
use crate::task::OwnedTask;
use crate::transport::blob::{BlobHeader, recv_blob, send_blob};
use crate::transport::frame::{FrameError, write_msg};
use crate::transport::test_support::{Pki, XorShift, connected_pair, within};

const MIB: usize = 1024 * 1024;

fn data(len: usize) -> Vec<u8> {
    XorShift::new(len as u64).bytes(len)
}

#[tokio::test]
async fn five_mib_round_trip_over_a_quinn_stream_with_the_digest_checked() {
    let pki = Pki::new();
    let (client, server, _cep, _sep) = connected_pair(&pki).await;
    let blob = data(5 * MIB + 123);
    let digest = Digest::of(&blob);
    let size = blob.len() as u64;

    let receiver = OwnedTask::spawn("test.receiver", async move {
        let mut recv = server.accept_uni().await.expect("accept uni");
        let mut out = Vec::new();
        let got = recv_blob(&mut recv, &mut out, Some(digest), 8 * MIB as u64).await;
        (got, out)
    });
    let mut send = client.open_uni().await.expect("open uni");
    within("sending 5 MiB", send_blob(&mut send, digest, size, blob.as_slice()))
        .await
        .expect("send");
    send.finish().expect("finish");
    let (got, out) = within("receiving 5 MiB", receiver).await.expect("join");
    assert_eq!(got.expect("received"), (digest, size));
    assert!(out == blob, "bytes differ");
}

#[tokio::test]
async fn bytes_that_do_not_match_the_header_digest_are_refused() {
    let blob = data(300_000);
    // A wrong digest in the header.
    let (mut a, mut b) = tokio::io::duplex(64 * 1024);
    let wrong = Digest::of(b"something else");
    let (sent, got) = within("the tampered blob", async {
        tokio::join!(send_blob(&mut a, wrong, blob.len() as u64, blob.as_slice()), async {
            let mut out = Vec::new();
            recv_blob(&mut b, &mut out, None, u64::MAX).await
        })
    })
    .await;
    sent.expect("the sender does not check");
    match got {
        Err(FrameError::DigestMismatch { expected, actual }) => {
            assert_eq!(expected, wrong);
            assert_eq!(actual, Digest::of(&blob));
        }
        other => panic!("want DigestMismatch, got {other:?}"),
    }

    // One flipped byte under the right digest.
    let mut tampered = blob.clone();
    tampered[150_000] ^= 1;
    let (mut a, mut b) = tokio::io::duplex(64 * 1024);
    let (_, got) = within("the flipped byte", async {
        tokio::join!(
            send_blob(&mut a, Digest::of(&blob), blob.len() as u64, tampered.as_slice()),
            async { recv_blob(&mut b, &mut Vec::new(), Some(Digest::of(&blob)), u64::MAX).await }
        )
    })
    .await;
    assert!(matches!(got, Err(FrameError::DigestMismatch { .. })), "{got:?}");
}

#[tokio::test]
async fn a_blob_over_the_limit_is_refused_before_its_bytes_are_read() {
    let mut stream = Vec::new();
    write_msg(&mut stream, &BlobHeader { digest: Digest::of(b"x"), size: 1_000_001 })
        .await
        .expect("header");
    stream.extend_from_slice(b"payload");
    let mut reader = stream.as_slice();
    let mut out = Vec::new();
    let err = recv_blob(&mut reader, &mut out, None, 1_000_000).await.unwrap_err();
    assert!(matches!(err, FrameError::BlobTooLarge { size: 1_000_001, max: 1_000_000 }), "{err}");
    assert!(out.is_empty());
    assert_eq!(reader, b"payload", "no blob byte was read");
}

#[tokio::test]
async fn a_blob_other_than_the_one_asked_for_is_refused_before_its_bytes_are_read() {
    let mut stream = Vec::new();
    send_blob(&mut stream, Digest::of(b"abc"), 3, &b"abc"[..]).await.expect("send");
    let mut reader = stream.as_slice();
    let err =
        recv_blob(&mut reader, &mut Vec::new(), Some(Digest::of(b"xyz")), 10).await.unwrap_err();
    assert!(matches!(err, FrameError::UnexpectedBlob { .. }), "{err}");
    assert_eq!(reader, b"abc");
}

#[tokio::test]
async fn short_blobs_are_truncation_errors_on_both_sides_and_empty_blobs_work() {
    // The sender's source has fewer bytes than announced.
    let mut stream = Vec::new();
    let err = send_blob(&mut stream, Digest::of(b"abcdef"), 6, &b"abc"[..]).await.unwrap_err();
    assert!(matches!(err, FrameError::Truncated { expected: 6, got: 3 }), "{err}");
    // The receiver sees the stream end early.
    let err = recv_blob(&mut stream.as_slice(), &mut Vec::new(), None, 10).await.unwrap_err();
    assert!(matches!(err, FrameError::Truncated { expected: 6, got: 3 }), "{err}");
    // No header at all.
    let err = recv_blob(&mut &b""[..], &mut Vec::new(), None, 10).await.unwrap_err();
    assert!(matches!(err, FrameError::Closed { .. }), "{err}");

    // Bytes past `size` stay in the stream for whatever follows.
    let mut stream = Vec::new();
    send_blob(&mut stream, Digest::of(b""), 0, &b"ignored"[..]).await.expect("empty");
    stream.extend_from_slice(b"next");
    let mut reader = stream.as_slice();
    let got = recv_blob(&mut reader, &mut Vec::new(), None, 0).await.expect("empty blob");
    assert_eq!(got, (Digest::of(b""), 0));
    let mut rest = String::new();
    reader.read_to_string(&mut rest).await.expect("rest");
    assert_eq!(rest, "next");
}
