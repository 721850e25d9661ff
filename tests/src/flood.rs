//! A QUIC handshake flood against a coordinator (issue 29), bounded in packets and time, sent
//! from another namespaced host: the attacker of the handshake-bound suites.
//!
//! The packets are real QUIC v1 client Initials (a TLS ClientHello for ALPN `prova/1`, padded
//! to 1200 bytes), each of a fresh connection, made by a `quinn-proto` client endpoint driven
//! by hand (sans-IO) — so the attacker decides which of the server's answers it reads:
//! - [`Attack::Initials`] reads nothing: what a sender spoofing its source address can do, or
//!   a tool that only sends. Before address validation each one took a handshake slot of the
//!   coordinator for the whole handshake timeout.
//! - [`Attack::Stall`] reads the server's stateless retry only and sends the Initial again with
//!   the token (so its address is validated), then never answers the server's handshake: the
//!   strongest attacker without a certificate of the cluster — it holds a handshake slot until
//!   the server gives the handshake up.
//!
//! The flood runs on a thread of its own that first enters the attacker host's network
//! namespace (`setns`, which moves only the calling thread), then sends at a fixed rate from
//! one UDP socket per source address until its packet or time budget is spent.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig,
};

/// What the attacker does with the server's answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// Fresh Initials, no answer read.
    Initials,
    /// Answer the retry, then stall the handshake.
    Stall,
}

/// A bounded flood.
#[derive(Clone, Debug)]
pub struct Flood {
    /// What to do.
    pub attack: Attack,
    /// The coordinator's address.
    pub target: SocketAddr,
    /// New connections per second, all sources together.
    pub rate: u32,
    /// How long at most.
    pub duration: Duration,
    /// New connections at most.
    pub max_connections: u64,
    /// The network namespace to send from (`None`: the test's own).
    pub netns: Option<String>,
    /// Source addresses (each gets a socket; connections go round-robin).
    pub sources: Vec<IpAddr>,
}

/// What a flood did.
#[derive(Clone, Debug, Default)]
pub struct FloodReport {
    /// Connections started (their first Initial sent).
    pub started: u64,
    /// Retries received (and, under [`Attack::Stall`], answered).
    pub retries: u64,
    /// Datagrams received in all.
    pub received: u64,
    /// How long it ran.
    pub elapsed: Duration,
}

/// A flood running on its thread.
pub struct Running {
    thread: JoinHandle<Result<FloodReport, String>>,
    stop: Arc<AtomicBool>,
}

impl Running {
    /// Whether the flood spent its budget (or failed).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops the flood early and waits for it.
    pub fn stop(self) -> FloodReport {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }

    /// Waits for the flood to spend its budget.
    pub fn join(self) -> FloodReport {
        match self.thread.join() {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => panic!("the flood failed: {e}"),
            Err(_) => panic!("the flood thread panicked"),
        }
    }
}

impl Flood {
    /// Starts the flood on a thread of its own.
    pub fn start(self) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new()
            .name("quic-flood".into())
            .spawn(move || self.run(&halt))
            .expect("spawning the flood thread");
        Running { thread, stop }
    }

    fn run(self, stop: &AtomicBool) -> Result<FloodReport, String> {
        if let Some(ns) = &self.netns {
            enter_netns(ns)?;
        }
        let config = client_config()?;
        let mut senders: Vec<Sender> =
            self.sources.iter().map(|ip| Sender::bind(*ip)).collect::<Result<_, _>>()?;
        if senders.is_empty() {
            return Err("a flood needs a source address".into());
        }
        let start = Instant::now();
        let period = Duration::from_secs(1) / self.rate.max(1);
        let mut report = FloodReport::default();
        let mut buf = Vec::with_capacity(1500);
        while report.started < self.max_connections
            && start.elapsed() < self.duration
            && !stop.load(Ordering::Relaxed)
        {
            let due = start + period * u32::try_from(report.started).unwrap_or(u32::MAX);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                // Read what came back while waiting for the next send.
                for s in &mut senders {
                    s.drain(self.attack, &mut report, &mut buf);
                }
                std::thread::sleep(wait.min(Duration::from_millis(2)));
                continue;
            }
            let i = usize::try_from(report.started).unwrap_or(0) % senders.len();
            senders[i].open(&config, self.target, self.attack, &mut buf)?;
            report.started += 1;
        }
        for s in &mut senders {
            s.drain(self.attack, &mut report, &mut buf);
        }
        report.elapsed = start.elapsed();
        Ok(report)
    }
}

/// One source address: its socket and the client endpoint whose connections it carries.
struct Sender {
    socket: UdpSocket,
    endpoint: Endpoint,
    /// Connections waiting for their retry ([`Attack::Stall`] only).
    waiting: HashMap<ConnectionHandle, Connection>,
}

/// Connections a sender keeps waiting for their retry before it forgets the oldest half.
const MAX_WAITING: usize = 4096;

impl Sender {
    fn bind(ip: IpAddr) -> Result<Self, String> {
        let socket =
            UdpSocket::bind(SocketAddr::new(ip, 0)).map_err(|e| format!("binding {ip}: {e}"))?;
        socket.set_nonblocking(true).map_err(|e| format!("nonblocking: {e}"))?;
        Ok(Self { socket, endpoint: fresh_endpoint(), waiting: HashMap::new() })
    }

    /// A new connection: its first Initial goes out.
    fn open(
        &mut self,
        config: &ClientConfig,
        target: SocketAddr,
        attack: Attack,
        buf: &mut Vec<u8>,
    ) -> Result<(), String> {
        let now = Instant::now();
        let (handle, mut conn) = self
            .endpoint
            .connect(now, config.clone(), target, "prova-coordinator")
            .map_err(|e| format!("connect: {e}"))?;
        self.transmit(&mut conn, buf);
        match attack {
            Attack::Stall => {
                if self.waiting.len() >= MAX_WAITING {
                    self.waiting.clear();
                }
                self.waiting.insert(handle, conn);
            }
            Attack::Initials => {
                // Forgotten at once; a fresh endpoint now and then keeps its books small.
                if self.endpoint.open_connections() > MAX_WAITING {
                    self.endpoint = fresh_endpoint();
                }
            }
        }
        Ok(())
    }

    /// Sends what `conn` has to send now (its Initial).
    fn transmit(&self, conn: &mut Connection, buf: &mut Vec<u8>) {
        buf.clear();
        if let Some(t) = conn.poll_transmit(Instant::now(), 1, buf) {
            // A full socket buffer drops the packet, as a network would.
            let _ = self.socket.send_to(&buf[..t.size], t.destination);
        }
    }

    /// Reads every datagram that arrived; under [`Attack::Stall`] a retry is answered (the
    /// Initial again, with the token) and everything else is ignored.
    fn drain(&mut self, attack: Attack, report: &mut FloodReport, buf: &mut Vec<u8>) {
        let mut data = [0u8; 2048];
        while let Ok((n, from)) = self.socket.recv_from(&mut data) {
            report.received += 1;
            if !is_retry(&data[..n]) {
                continue;
            }
            report.retries += 1;
            if attack != Attack::Stall {
                continue;
            }
            let mut resp = Vec::new();
            let event = self.endpoint.handle(
                Instant::now(),
                from,
                None,
                None,
                BytesMut::from(&data[..n]),
                &mut resp,
            );
            if let Some(DatagramEvent::ConnectionEvent(h, ev)) = event
                && let Some(mut conn) = self.waiting.remove(&h)
            {
                conn.handle_event(ev);
                self.transmit(&mut conn, buf);
                // Never heard from again: the server's half of the handshake waits.
            }
        }
    }
}

/// A QUIC v1 Retry: a long header (bit 7) of type 3 (bits 5–4).
fn is_retry(packet: &[u8]) -> bool {
    packet.first().is_some_and(|b| b & 0x80 != 0 && (b >> 4) & 0x3 == 0x3)
}

fn fresh_endpoint() -> Endpoint {
    Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None)
}

/// A client configuration that offers `prova/1` and no certificate (the attacker has none of
/// the cluster's); it never gets as far as checking the server's.
fn client_config() -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"prova/1".to_vec()];
    let quic = QuicClientConfig::try_from(Arc::new(tls)).map_err(|e| e.to_string())?;
    Ok(ClientConfig::new(Arc::new(quic)))
}

/// Moves the calling thread into the network namespace `ns` (`ip netns add` made it).
fn enter_netns(ns: &str) -> Result<(), String> {
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("setns {path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_sends_real_initials_within_its_budget() {
        // A plain socket stands for the server: every datagram is a full-size long-header
        // Initial, and the budget in connections holds.
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        server.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let flood = Flood {
            attack: Attack::Initials,
            target: server.local_addr().expect("addr"),
            rate: 1000,
            duration: Duration::from_secs(10),
            max_connections: 20,
            netns: None,
            sources: vec!["127.0.0.1".parse().expect("ip")],
        };
        let report = flood.start().join();
        assert_eq!(report.started, 20);
        let mut buf = [0u8; 2048];
        for _ in 0..20 {
            let (n, _) = server.recv_from(&mut buf).expect("an Initial");
            assert!(n >= 1200, "Initials are padded to 1200 bytes: {n}");
            assert_eq!(buf[0] & 0xb0, 0x80, "long header, type Initial: {:#x}", buf[0]);
        }
        assert!(is_retry(&[0xf0]) && !is_retry(&[0xc0]) && !is_retry(&[0x40]));
    }
}
