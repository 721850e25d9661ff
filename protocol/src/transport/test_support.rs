//! Shared helpers for the transport tests: a throwaway PKI, a loopback server, bounded waits.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tempfile::TempDir;

use super::certs::{self, Bundle, COORDINATOR_NAME, Role};
use super::endpoint;

/// Every wait in these tests: far above a loopback handshake (milliseconds), far below "hung".
pub(super) const WAIT: Duration = Duration::from_secs(10);

/// Awaits `fut` for at most [`WAIT`], panicking with what was awaited.
pub(super) async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// A cluster PKI in a temp dir: the CA, the coordinator (SANs `localhost`, `127.0.0.1`) and a
/// worker `w1`.
pub(super) struct Pki {
    pub dir: TempDir,
}

impl Pki {
    pub(super) fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        certs::init(dir.path(), &["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("init PKI");
        certs::issue(dir.path(), Role::Worker, "w1").expect("issue w1");
        Self { dir }
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(super) fn bundle(&self, name: &str) -> Bundle {
        Bundle::load(&self.path().join(name)).expect("load bundle")
    }

    pub(super) fn coordinator(&self) -> Bundle {
        self.bundle(COORDINATOR_NAME)
    }

    pub(super) fn worker(&self) -> Bundle {
        self.bundle("w1")
    }
}

/// A server endpoint on `127.0.0.1:0` and the address it got.
pub(super) fn loopback_server(bundle: &Bundle) -> (quinn::Endpoint, SocketAddr) {
    let ep = endpoint::server(SocketAddr::from(([127, 0, 0, 1], 0)), bundle).expect("bind server");
    let addr = ep.local_addr().expect("server address");
    (ep, addr)
}

/// A worker connected to a coordinator over loopback: (client side, server side, client
/// endpoint, server endpoint). The endpoints must outlive the connections.
pub(super) async fn connected_pair(
    pki: &Pki,
) -> (quinn::Connection, quinn::Connection, quinn::Endpoint, quinn::Endpoint) {
    let (server_ep, addr) = loopback_server(&pki.coordinator());
    let client_ep = endpoint::client(&pki.worker(), addr).expect("bind client");
    let accepting = async {
        let incoming = server_ep.accept().await.expect("an incoming connection");
        endpoint::accept(incoming).await.expect("accept")
    };
    let (client, (server, _identity)) = within("the loopback handshake", async {
        tokio::join!(endpoint::connect(&client_ep, addr, "127.0.0.1"), accepting)
    })
    .await;
    (client.expect("connect"), server, client_ep, server_ep)
}

/// A message like the real ones: a number, a string, bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Msg {
    pub a: u32,
    pub b: String,
    #[serde(with = "serde_bytes")]
    pub c: Vec<u8>,
}

impl Msg {
    pub(super) fn sample(n: u32) -> Self {
        Self { a: n, b: format!("message {n}"), c: (0..n % 300).map(|i| i as u8).collect() }
    }
}

/// A deterministic xorshift64* generator: reproducible "random" inputs with no dependency.
pub(super) struct XorShift(u64);

impl XorShift {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-ish in `0..n` (n > 0).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub(super) fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}
