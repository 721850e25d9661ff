//! Artifact throughput over loopback QUIC: a 256 MiB blob through prova's blob stream
//! (`transport::blob::{send_blob, recv_blob}`: header frame, 64 KiB chunks, BLAKE3 on
//! receipt, written to a file) against a plain quinn stream carrying the same bytes on the
//! same mTLS connection (written in the same chunks, read and discarded, or written to a
//! file). Interleaved rounds; medians and the ratio. Run:
//!
//! ```sh
//! cargo bench -p prova-protocol --bench blob_throughput            # 256 MiB, 5 rounds
//! BLOB_MIB=64 ROUNDS=3 cargo bench -p prova-protocol --bench blob_throughput
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use prova_protocol::Digest;
use prova_protocol::transport::blob::{BLOB_CHUNK, recv_blob, send_blob};
use prova_protocol::transport::certs::{self, Bundle, COORDINATOR_NAME, Role};
use prova_protocol::transport::endpoint;
use tokio::io::AsyncWriteExt;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn data(mib: usize) -> Vec<u8> {
    // Incompressible, reproducible bytes (xorshift64*).
    let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(mib << 20);
    while out.len() < mib << 20 {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        out.extend_from_slice(&s.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// quinn stream, receiver discards.
    PlainDiscard,
    /// quinn stream, receiver writes a file.
    PlainFile,
    /// prova blob stream (hash-checked), receiver writes a file.
    Blob,
}

fn main() {
    let mib = env_usize("BLOB_MIB", 256);
    let rounds = env_usize("ROUNDS", 5);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    certs::init(dir.path(), &["127.0.0.1".to_owned()]).expect("PKI");
    certs::issue(dir.path(), Role::Worker, "w1").expect("worker bundle");
    let server = Bundle::load(&dir.path().join(COORDINATOR_NAME)).expect("coordinator bundle");
    let client = Bundle::load(&dir.path().join("w1")).expect("worker bundle");
    let bytes = data(mib);
    let digest = Digest::of(&bytes);
    let sink_path = dir.path().join("received");

    let mut times: Vec<(Way, Vec<Duration>)> =
        vec![(Way::PlainDiscard, vec![]), (Way::PlainFile, vec![]), (Way::Blob, vec![])];
    rt.block_on(async {
        let server_ep =
            endpoint::server(SocketAddr::from(([127, 0, 0, 1], 0)), &server).expect("bind");
        let addr = server_ep.local_addr().expect("address");
        let client_ep = endpoint::client(&client, addr).expect("client");
        let accept = async {
            let incoming = server_ep.accept().await.expect("incoming");
            endpoint::accept(incoming).await.expect("accept").0
        };
        let (c, s) = tokio::join!(endpoint::connect(&client_ep, addr, "127.0.0.1"), accept);
        let c = c.expect("connect");
        for round in 0..=rounds {
            for (way, samples) in &mut times {
                let way = *way;
                let (mut send, mut recv) = (c.open_uni().await.expect("stream"), None);
                let start = Instant::now();
                let writer = async {
                    match way {
                        Way::Blob => send_blob(&mut send, digest, bytes.len() as u64, &bytes[..])
                            .await
                            .expect("send blob"),
                        Way::PlainDiscard | Way::PlainFile => {
                            for chunk in bytes.chunks(BLOB_CHUNK) {
                                send.write_all(chunk).await.expect("write");
                            }
                        }
                    }
                    send.finish().expect("finish");
                };
                let reader = async {
                    let r = recv.insert(s.accept_uni().await.expect("accept stream"));
                    match way {
                        Way::PlainDiscard => {
                            let mut n = 0usize;
                            while let Some(chunk) =
                                r.read_chunk(BLOB_CHUNK, true).await.expect("read")
                            {
                                n += chunk.bytes.len();
                            }
                            assert_eq!(n, bytes.len());
                        }
                        Way::PlainFile => {
                            let mut f = tokio::fs::File::create(&sink_path).await.expect("file");
                            let mut buf = vec![0u8; BLOB_CHUNK];
                            let mut n = 0usize;
                            while let Some(k) = r.read(&mut buf).await.expect("read") {
                                f.write_all(&buf[..k]).await.expect("write file");
                                n += k;
                            }
                            f.flush().await.expect("flush");
                            assert_eq!(n, bytes.len());
                        }
                        Way::Blob => {
                            let mut f = tokio::fs::File::create(&sink_path).await.expect("file");
                            let (d, n) = recv_blob(r, &mut f, Some(digest), u64::MAX)
                                .await
                                .expect("receive blob");
                            assert_eq!((d, n), (digest, bytes.len() as u64));
                        }
                    }
                };
                tokio::join!(writer, reader);
                let took = start.elapsed();
                if round > 0 {
                    samples.push(took); // round 0 warms up congestion control and the page cache
                }
            }
        }
    });

    report(mib, rounds, &mut times);
}

/// Prints each way's median and the ratios of the blob stream to the plain ones.
fn report(mib: usize, rounds: usize, times: &mut [(Way, Vec<Duration>)]) {
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut medians = Vec::new();
    for (way, samples) in times.iter_mut() {
        let m = median(samples);
        let name = match way {
            Way::PlainDiscard => "plain quinn stream, discarded",
            Way::PlainFile => "plain quinn stream, to a file",
            Way::Blob => "prova blob stream (BLAKE3-checked), to a file",
        };
        let mibs = mib as f64 / m.as_secs_f64();
        println!("{name:48} median {:>7.1} ms  {mibs:>7.1} MiB/s", m.as_secs_f64() * 1e3);
        medians.push(mibs);
    }
    println!(
        "blob / plain-to-file throughput: {:.2}x   blob / plain-discard: {:.2}x   ({mib} MiB, {rounds} rounds)",
        medians[2] / medians[1],
        medians[2] / medians[0]
    );
}
