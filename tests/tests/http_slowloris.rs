//! The coordinator's HTTP listener under slow clients (issue 29): 80 connections from
//! 127.0.0.1 that trickle their request heads a byte at a time (reconnecting when closed, as a
//! slowloris does) must not keep `/healthz` — probed from 127.0.0.1 too, as a kubelet behind
//! the attacker's address would — from answering, nor a scrape of `/metrics` from another
//! address; a head trickled for longer than its deadline is cut off (408), nothing is kept
//! alive and no body waited for; a short bearer token is refused at start.
//!
//! Bounded: the attack lasts while the probes run (a few seconds) and is stopped by the test;
//! probe latencies are printed (`--nocapture`), never asserted.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prova_tests::ProvaCmd;
use prova_tests::cluster::{Cluster, Sandbox};

/// Slow connections the attacker keeps open.
const SLOW: usize = 80;
/// Probes sent while they are.
const PROBES: usize = 12;
/// A probe's own bound (a kubelet's `timeoutSeconds` is 1 s; this leaves room for a loaded
/// machine — a probe that got no answer at all fails long before).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

fn farm() -> (Cluster, String) {
    let farm = Cluster::builder()
        .workers(1)
        .sandbox(Sandbox::None)
        .coordinator_args(["--http", "127.0.0.1:0"])
        .start();
    let http = farm.http_addr().expect("the coordinator prints its HTTP address").to_owned();
    (farm, http)
}

/// `GET path` from `from` (a loopback address) with a bounded wait: the status, or what went
/// wrong.
fn probe(http: &str, from: Ipv4Addr, path: &str) -> Result<u16, String> {
    let target: SocketAddr = http.parse().map_err(|e| format!("{http}: {e}"))?;
    let mut s = connect_from(from, target)?;
    s.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {http}\r\n\r\n").as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status: {text:?}"))
}

/// A TCP connection to `target` from source address `from` (any 127/8 address works on
/// loopback); std's `TcpStream` cannot bind before it connects, tokio's `TcpSocket` can.
fn connect_from(from: Ipv4Addr, target: SocketAddr) -> Result<TcpStream, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let rt = rt.map_err(|e| e.to_string())?;
    let stream = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind(SocketAddr::from((from, 0)))?;
        tokio::time::timeout(PROBE_TIMEOUT, sock.connect(target))
            .await
            .map_err(|_| std::io::Error::other("connect timed out"))?
    });
    let stream = stream.map_err(|e| format!("connect from {from}: {e}"))?;
    let std = stream.into_std().map_err(|e| e.to_string())?;
    std.set_nonblocking(false).map_err(|e| e.to_string())?;
    Ok(std)
}

/// The attacker: `SLOW` connections from 127.0.0.1, each sending the start of a head and then
/// a header byte every 200 ms, reopened when the server closes one; until `stop`.
struct Slowloris {
    stop: Arc<AtomicBool>,
    reopened: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Slowloris {
    fn start(http: &str) -> Self {
        let target: SocketAddr = http.parse().expect("an address");
        let stop = Arc::new(AtomicBool::new(false));
        let reopened = Arc::new(AtomicU64::new(0));
        let (halt, count) = (stop.clone(), reopened.clone());
        let open = move || -> Option<TcpStream> {
            let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok()?;
            s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
            s.write_all(b"GET / HTTP/1.1\r\nX-Slow: ").ok()?;
            Some(s)
        };
        let thread = std::thread::spawn(move || {
            let mut conns: Vec<Option<TcpStream>> = (0..SLOW).map(|_| open()).collect();
            // Bounded on its own too: a test that forgot to stop it ends it within a minute.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !halt.load(Ordering::Relaxed) && Instant::now() < deadline {
                for c in &mut conns {
                    let alive = c.as_mut().is_some_and(|s| s.write_all(b"a").is_ok());
                    if !alive {
                        *c = open();
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Self { stop, reopened, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.reopened.load(Ordering::Relaxed)
    }
}

#[test]
fn healthz_answers_through_a_slowloris_from_its_own_address() {
    let (farm, http) = farm();
    let attack = Slowloris::start(&http);
    let mut times = Vec::new();
    let mut failures = Vec::new();
    for i in 0..PROBES {
        let t = Instant::now();
        // Every probe from 127.0.0.1, like the attacker; a scrape from another address.
        match probe(&http, Ipv4Addr::LOCALHOST, "/healthz") {
            Ok(200) => times.push(t.elapsed()),
            other => failures.push(format!("probe {i}: {other:?}")),
        }
        match probe(&http, Ipv4Addr::new(127, 0, 0, 2), "/metrics") {
            Ok(200) => {}
            other => failures.push(format!("scrape {i} from 127.0.0.2: {other:?}")),
        }
        std::thread::sleep(Duration::from_millis(250)); // a probe period, not a wait
    }
    let reopened = attack.stop();
    assert!(failures.is_empty(), "{failures:#?}\n{}", farm.coordinator_log());
    let mut ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
    ms.sort_unstable();
    eprintln!(
        "/healthz under {SLOW} slow connections: {} probes, median {} ms, max {} ms; the \
         attacker reopened {reopened} connections",
        ms.len(),
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
}

#[test]
fn a_head_trickled_past_its_deadline_is_cut_off_and_nothing_is_kept_alive() {
    let (farm, http) = farm();
    // A byte a second: no single read waits long, but the whole head never comes.
    let mut s = TcpStream::connect(&http).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(1000))).expect("timeout");
    s.write_all(b"GET /healthz HTTP/1.1\r\n").expect("send");
    let started = Instant::now();
    let mut closed = false;
    let mut answer = Vec::new();
    // Bounded: far past any head deadline.
    while started.elapsed() < Duration::from_secs(30) {
        let _ = s.write_all(b"X");
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(closed, "a trickled head was held for 30 s\n{}", farm.coordinator_log());
    // A request that asks to be kept alive is still answered and closed.
    let mut s = TcpStream::connect(&http).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(b"GET /healthz HTTP/1.1\r\nConnection: keep-alive\r\n\r\n").expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("the server closes after its answer");
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"), "{raw:?}");
    // A body is never waited for: a POST announcing one is refused at once.
    let mut s = TcpStream::connect(&http).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(b"POST /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n\r\nab").expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("answered without the body");
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 405"), "{raw:?}");
}

#[test]
fn a_short_token_file_stops_the_coordinator_from_starting() {
    let farm = Cluster::builder().workers(1).sandbox(Sandbox::None).start();
    let cache = tempfile::tempdir().expect("a temp dir");
    let token = cache.path().join("token");
    for weak in ["x", "x\n", "  tok-3f9a1c  \n", "0123456789abcde"] {
        std::fs::write(&token, weak).expect("writing the token");
        let out = ProvaCmd::new(
            farm.root(),
            [
                "coordinator".to_owned(),
                "--listen".to_owned(),
                "127.0.0.1:0".to_owned(),
                "--certs".to_owned(),
                farm.certs_dir().join("coordinator").to_string_lossy().into_owned(),
                "--cache-dir".to_owned(),
                cache.path().join("cache").to_string_lossy().into_owned(),
                "--http".to_owned(),
                "0.0.0.0:0".to_owned(),
                "--http-token-file".to_owned(),
                token.to_string_lossy().into_owned(),
            ],
        )
        .run();
        out.assert_code(2);
        out.assert_stderr_contains("at least 16");
    }
}
