//! A client's view of its coordinator's liveness: a *paused* coordinator (SIGSTOP, a GC-like
//! stall, a slow disk) is waited for, a *dead* one is given up on as soon as that is known.
//!
//! Over the network the two look alike — silence — so a client endpoint waits out a silence
//! of up to [`super::endpoint::CLIENT_IDLE_TIMEOUT`] (the pause tolerance, 30 s) before QUIC
//! gives the connection up. Two signals end the wait early:
//! - a coordinator restarted on the same address answers the old connection's packets with a
//!   stateless reset that the client accepts (its reset key is derived from the coordinator's
//!   certificate key, so every incarnation signs alike: [`super::endpoint::server`]) — QUIC
//!   ends the connection at once (`ConnectionError::Reset`);
//! - a coordinator whose process is gone from a host that is still up leaves its UDP port
//!   closed: once the connection has been silent for [`PROBE_AFTER`], [`watch`] sends a
//!   one-byte datagram to the port from a connected socket each [`WATCH_EVERY`], and an ICMP
//!   port-unreachable (`ECONNREFUSED`) means the process is gone. A paused process keeps its
//!   socket open: the kernel queues the probe (which QUIC drops as junk) and answers nothing.
//!
//! Without either (the host itself is gone, or a firewall eats ICMP) the connection ends at
//! the idle timeout. The silence itself is said once it passes [`NOTICE_AFTER`], and again
//! when the coordinator answers again.
//!
//! [`Silence`] decides (sans-IO, fed the connection's received-datagram count); [`watch`]
//! is the thin shell around it.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::task::OwnedTask;

/// Silence after which the peer's port is probed (two keep-alives unanswered).
pub const PROBE_AFTER: Duration = Duration::from_secs(2);
/// Silence after which the user is told the coordinator is not answering.
pub const NOTICE_AFTER: Duration = Duration::from_secs(5);
/// How often the watcher looks at the connection.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);
/// How long a probe waits for the port-unreachable answer.
const PROBE_WAIT: Duration = Duration::from_millis(300);

/// What the watcher reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Nothing heard for this long (said once per silence, at [`NOTICE_AFTER`]).
    Quiet(Duration),
    /// Heard again after a silence that was said, which lasted this long.
    Back(Duration),
    /// The peer's port is closed: its process is gone. The watcher closed the connection.
    Gone,
}

/// The decisions over one connection's silence.
#[derive(Clone, Debug, Default)]
pub struct Silence {
    rx: u64,
    heard: Duration,
    noticed: bool,
}

/// What [`Silence::observe`] asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Probe the peer's port now.
    pub probe: bool,
    /// Say this.
    pub say: Option<Liveness>,
}

impl Silence {
    /// Starts at `now` with `rx` datagrams received so far.
    pub fn new(now: Duration, rx: u64) -> Self {
        Self { rx, heard: now, noticed: false }
    }

    /// The connection had received `rx` datagrams by `now`.
    pub fn observe(&mut self, now: Duration, rx: u64) -> Step {
        if rx != self.rx {
            self.rx = rx;
            let quiet = now.saturating_sub(self.heard);
            self.heard = now;
            let back = std::mem::take(&mut self.noticed).then_some(Liveness::Back(quiet));
            return Step { probe: false, say: back };
        }
        let quiet = now.saturating_sub(self.heard);
        let say = (quiet >= NOTICE_AFTER && !self.noticed).then(|| {
            self.noticed = true;
            Liveness::Quiet(quiet)
        });
        Step { probe: quiet >= PROBE_AFTER, say }
    }
}

/// A running watcher; dropping it stops it.
#[derive(Debug)]
pub struct Watch {
    gone: Arc<AtomicBool>,
    _task: OwnedTask<()>,
}

impl Watch {
    /// Whether the watcher found the peer's process gone (and closed the connection).
    pub fn gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

/// Watches `conn` until it closes: reports through `say`; closes it (and reports
/// [`Liveness::Gone`]) when the peer's port is found closed. Must run inside a tokio runtime.
pub fn watch(conn: quinn::Connection, say: impl Fn(Liveness) + Send + 'static) -> Watch {
    let gone = Arc::new(AtomicBool::new(false));
    let flag = gone.clone();
    let task = OwnedTask::spawn("transport.liveness", async move {
        let start = tokio::time::Instant::now();
        let mut silence = Silence::new(Duration::ZERO, conn.stats().udp_rx.datagrams);
        let mut every = tokio::time::interval(WATCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = conn.closed() => return,
                _ = every.tick() => {}
            }
            let step = silence.observe(start.elapsed(), conn.stats().udp_rx.datagrams);
            if let Some(s) = step.say {
                say(s);
            }
            if step.probe && port_closed(conn.remote_address()).await {
                flag.store(true, Ordering::Relaxed);
                conn.close(0u32.into(), b"coordinator gone");
                say(Liveness::Gone);
                return;
            }
        }
    });
    Watch { gone, _task: task }
}

/// Whether `addr`'s UDP port answers a datagram with ICMP port-unreachable (nothing listens
/// there). `false` when anything else happens (no answer, an error of our own).
pub async fn port_closed(addr: SocketAddr) -> bool {
    let bind = match addr {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let Ok(sock) = tokio::net::UdpSocket::bind(bind).await else { return false };
    if sock.connect(addr).await.is_err() {
        return false;
    }
    // One zero byte: not a QUIC packet (its fixed bit is clear), so a live endpoint drops it.
    if let Err(e) = sock.send(&[0u8]).await {
        return e.kind() == std::io::ErrorKind::ConnectionRefused;
    }
    let mut buf = [0u8; 64];
    match tokio::time::timeout(PROBE_WAIT, sock.recv(&mut buf)).await {
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn traffic_keeps_it_quiet_and_silence_probes_then_says_so_once() {
        let mut s = Silence::new(ms(0), 10);
        assert_eq!(s.observe(ms(500), 11), Step::default());
        assert_eq!(s.observe(ms(1000), 11), Step::default());
        assert_eq!(s.observe(ms(2500), 11), Step { probe: true, say: None });
        assert_eq!(s.observe(ms(5400), 11), Step { probe: true, say: None });
        assert_eq!(
            s.observe(ms(5500), 11),
            Step { probe: true, say: Some(Liveness::Quiet(ms(5000))) }
        );
        assert_eq!(s.observe(ms(9000), 11), Step { probe: true, say: None });
        // Heard again: said once, and the silence starts over.
        assert_eq!(
            s.observe(ms(12500), 12),
            Step { probe: false, say: Some(Liveness::Back(ms(12000))) }
        );
        assert_eq!(s.observe(ms(13000), 12), Step::default());
        assert_eq!(
            s.observe(ms(17500), 12),
            Step { probe: true, say: Some(Liveness::Quiet(ms(5000))) }
        );
    }

    #[test]
    fn a_short_silence_is_never_said() {
        let mut s = Silence::new(ms(0), 0);
        assert_eq!(s.observe(ms(3000), 0), Step { probe: true, say: None });
        assert_eq!(s.observe(ms(3500), 1), Step::default());
    }

    /// Set to a PKI directory, [`old_coordinator`] serves as a coordinator with its bundle.
    const OLD_COORDINATOR: &str = "PROVA_TEST_OLD_COORDINATOR";

    /// Not a test on its own: the old coordinator of the next one, run in a process of its own
    /// (this test binary again) so that it can be SIGKILLed — a crash sends no close frame.
    #[test]
    fn old_coordinator() {
        use crate::transport::certs::{Bundle, COORDINATOR_NAME};
        use crate::transport::test_support::loopback_server;
        let Some(dir) = std::env::var_os(OLD_COORDINATOR) else { return };
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        rt.block_on(async {
            let bundle = Bundle::load(&std::path::Path::new(&dir).join(COORDINATOR_NAME));
            let (server, addr) = loopback_server(&bundle.expect("the coordinator bundle"));
            println!("old coordinator on {addr}");
            let incoming = server.accept().await.expect("an incoming connection");
            let (held, _) = super::super::endpoint::accept(incoming).await.expect("accept");
            // One round trip, so that both sides know the handshake is done.
            let (mut send, mut recv) = held.accept_bi().await.expect("a stream");
            let mut byte = [0u8; 1];
            recv.read_exact(&mut byte).await.expect("a byte");
            send.write_all(&byte).await.expect("the byte back");
            std::future::pending::<()>().await;
        });
    }

    #[tokio::test]
    async fn a_coordinator_restarted_on_its_port_resets_its_predecessors_connections() {
        use std::io::BufRead as _;

        use crate::transport::endpoint;
        use crate::transport::test_support::{Pki, within};
        let pki = Pki::new();
        let mut old = std::process::Command::new(std::env::current_exe().expect("this binary"))
            .args(["--exact", "transport::liveness::tests::old_coordinator", "--nocapture"])
            .env(OLD_COORDINATOR, pki.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the old coordinator");
        let mut lines = std::io::BufReader::new(old.stdout.take().expect("piped")).lines();
        let addr: SocketAddr = lines
            .find_map(|l| l.ok()?.strip_prefix("old coordinator on ")?.parse().ok())
            .expect("the old coordinator's address");
        let client = endpoint::client(&pki.worker(), addr).expect("a client endpoint");
        let conn = within("the handshake", endpoint::connect(&client, addr, "127.0.0.1"))
            .await
            .expect("connect");
        within("a round trip", async {
            let (mut send, mut recv) = conn.open_bi().await.expect("a stream");
            send.write_all(b"x").await.expect("a byte");
            let mut byte = [0u8; 1];
            recv.read_exact(&mut byte).await.expect("the byte back");
        })
        .await;
        // The coordinator crashes: no close frame.
        old.kill().expect("SIGKILL");
        old.wait().expect("reaped");
        // A new incarnation on the same address, with the same certificate.
        let _new = endpoint::server(addr, &pki.coordinator()).expect("the port again");
        let why = within("the stateless reset", conn.closed()).await;
        assert!(matches!(why, quinn::ConnectionError::Reset), "{why:?}");
    }

    #[tokio::test]
    async fn a_closed_port_is_told_from_an_open_one() {
        // A bound socket that never reads: what a paused process looks like.
        let open = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = open.local_addr().expect("addr");
        assert!(!port_closed(addr).await, "a port with a socket (paused or not) is not closed");
        drop(open);
        assert!(port_closed(addr).await, "nothing listens on {addr} any more");
    }
}
