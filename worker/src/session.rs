//! A farm worker's link to the coordinator: dial (QUIC, mTLS), `Hello` as a worker, `Register`,
//! then relay: assignments and cancels in, reports and heartbeats out. A lost connection is
//! not fatal: the session redials with backoff, re-registers with the attempts still running,
//! and the coordinator refuses reports for leases it has since given away. The `Finished`
//! reports of the last minutes are resent after every reconnect ([`Recent`]): a coordinator
//! that restarted before it saved one adopts it instead of running the task again. Blob
//! transfers ([`QuicBlobs`]) ride their own streams on the current connection.

use std::collections::VecDeque;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kameo::prelude::*;
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::liveness::{self, Liveness};
use prova_protocol::transport::{self, Bundle, endpoint, frame};
use prova_protocol::wire::{
    BlobAck, BlobRequest, CoordinatorMsg, Hello, HelloReply, PROTOCOL_VERSION, WorkerInfo,
    WorkerMsg,
};
use prova_protocol::work::{FromWorker, ToWorker};
use prova_protocol::{AttemptId, Digest};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::actor::{Health, Running, WorkerActor};
use crate::blobcache::BlobCache;
use crate::remote::{BlobError, BlobFuture, RemoteBlobs};

/// How often a worker says it is alive (well inside the coordinator's lease TTL).
pub const HEARTBEAT: Duration = Duration::from_secs(3);
/// First redial delay; doubles up to [`BACKOFF_MAX`] (each delay jittered, see [`Backoff`]).
pub const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// Longest redial delay: a restarted coordinator sees its workers back within a few seconds.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How long one dial (QUIC + TLS handshake) may take before the worker tries again: a LAN
/// handshake takes milliseconds, and a coordinator that is restarting answers the next dial.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a leaving worker waits for the coordinator to take its `Leaving` (and close the
/// connection) before it goes anyway.
pub const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a worker waits before it dials again when a certificate's dates did not hold at
/// a clock (its own or the coordinator's): retrying sooner cannot help, but a clock set right
/// (NTP catching up after boot) heals it without a restart.
pub const CLOCK_RETRY: Duration = Duration::from_secs(30);
/// How long a blob transfer waits for a connection while the session redials.
pub const BLOB_CONNECTION_WAIT: Duration = Duration::from_secs(30);
/// The largest blob a worker accepts (an input or an upstream artifact).
pub const MAX_BLOB: u64 = 8 * 1024 * 1024 * 1024;
/// The build version sent in `Hello`.
pub const BUILD_VERSION: &str = concat!("prova ", env!("CARGO_PKG_VERSION"));
/// How long a sent `Finished` report is kept for a resend after a reconnect: the time a
/// restarted coordinator may take to be back, and its client to re-submit.
pub const RECENT_FOR: Duration = Duration::from_secs(300);
/// At most this many kept reports…
pub const RECENT_REPORTS: usize = 256;
/// …holding at most this many bytes of logs.
pub const RECENT_BYTES: usize = 64 << 20;

/// The `Finished` reports sent lately, oldest first, bounded by [`RECENT_FOR`],
/// [`RECENT_REPORTS`] and [`RECENT_BYTES`].
#[derive(Default)]
pub struct Recent {
    reports: VecDeque<(tokio::time::Instant, FromWorker)>,
    bytes: usize,
}

impl Recent {
    /// Keeps `msg` if it is a `Finished` report.
    pub fn keep(&mut self, msg: &FromWorker) {
        let FromWorker::Finished(f) = msg else { return };
        self.bytes += f.log.len();
        self.reports.push_back((tokio::time::Instant::now(), msg.clone()));
        self.trim();
    }

    fn trim(&mut self) {
        let now = tokio::time::Instant::now();
        while let Some((at, msg)) = self.reports.front() {
            let over = self.reports.len() > RECENT_REPORTS
                || self.bytes > RECENT_BYTES
                || now.duration_since(*at) > RECENT_FOR;
            if !over {
                break;
            }
            if let FromWorker::Finished(f) = msg {
                self.bytes = self.bytes.saturating_sub(f.log.len());
            }
            self.reports.pop_front();
        }
    }

    /// The reports to resend now, oldest first.
    pub fn to_resend(&mut self) -> Vec<FromWorker> {
        self.trim();
        self.reports.iter().map(|(_, m)| m.clone()).collect()
    }
}

/// Where and how to reach the coordinator.
#[derive(Clone)]
pub struct SessionConfig {
    /// The coordinator's address.
    pub addr: SocketAddr,
    /// The name its certificate must carry (a DNS name or IP from its SANs).
    pub server_name: String,
    /// This worker's credentials.
    pub bundle: Arc<Bundle>,
    /// What this worker offers.
    pub info: WorkerInfo,
}

/// Blob transfers over whatever connection is current.
#[derive(Clone)]
pub struct QuicBlobs {
    conn: watch::Receiver<Option<quinn::Connection>>,
}

/// Times a blob transfer is tried again on the next connection after the one it used died
/// under it (a coordinator restarting): the attempt survives the restart instead of failing.
pub const LINK_RETRIES: u32 = 3;

impl QuicBlobs {
    /// The current connection, once there is a live one (at most [`BLOB_CONNECTION_WAIT`]).
    async fn connection(&self) -> Result<quinn::Connection, BlobError> {
        let mut rx = self.conn.clone();
        let wait = rx.wait_for(|c| c.as_ref().is_some_and(|c| c.close_reason().is_none()));
        match tokio::time::timeout(BLOB_CONNECTION_WAIT, wait).await {
            Ok(Ok(c)) => c.clone().ok_or(BlobError::NoConnection),
            _ => Err(BlobError::Unreachable),
        }
    }

    /// Whether a transfer on `conn` that failed with `e` goes again on the next connection:
    /// the connection itself died (not a refusal or a local error), within the retries.
    fn again(conn: &quinn::Connection, e: &BlobError, tried: u32) -> bool {
        let again = conn.close_reason().is_some() && tried < LINK_RETRIES;
        if again {
            tracing::info!(
                "a blob transfer lost its connection ({e}); trying again on the next one"
            );
        }
        again
    }

    async fn fetch_on(
        conn: &quinn::Connection,
        digest: Digest,
        into: &BlobCache,
    ) -> Result<(), BlobError> {
        let (mut send, mut recv) = conn.open_bi().await?;
        frame::write_msg(&mut send, &BlobRequest::Get { digest }).await?;
        let _ = send.finish();
        match frame::read_msg::<_, BlobAck>(&mut recv).await? {
            Some(BlobAck::Stored) => {}
            Some(BlobAck::Refused { reason }) => return Err(BlobError::Refused(reason)),
            None => return Err(BlobError::Closed),
        }
        let (path, file) = into.stage_file()?;
        let mut file = tokio::fs::File::from_std(file);
        let got = transport::recv_blob(&mut recv, &mut file, Some(digest), MAX_BLOB).await;
        drop(file);
        if let Err(e) = got {
            let _ = std::fs::remove_file(&path);
            return Err(e.into());
        }
        let into = into.clone();
        OwnedTask::spawn_blocking("worker.blob-insert", move || into.insert_file(&path, &digest))
            .join()
            .await??;
        Ok(())
    }

    async fn upload_on(
        conn: &quinn::Connection,
        path: &Path,
        digest: Digest,
        size: u64,
    ) -> Result<(), BlobError> {
        let (mut send, mut recv) = conn.open_bi().await?;
        frame::write_msg(&mut send, &BlobRequest::Put { digest, size }).await?;
        let file = tokio::fs::File::open(path).await?;
        transport::send_blob(&mut send, digest, size, file).await?;
        let _ = send.finish();
        match frame::read_msg::<_, BlobAck>(&mut recv).await? {
            Some(BlobAck::Stored) => Ok(()),
            Some(BlobAck::Refused { reason }) => Err(BlobError::Refused(reason)),
            None => Err(BlobError::Closed),
        }
    }
}

impl RemoteBlobs for QuicBlobs {
    fn fetch<'a>(&'a self, digest: Digest, into: &'a BlobCache) -> BlobFuture<'a> {
        Box::pin(async move {
            let mut tried = 0;
            loop {
                if into.has(&digest) {
                    return Ok(());
                }
                let conn = self.connection().await?;
                match Self::fetch_on(&conn, digest, into).await {
                    Err(e) if Self::again(&conn, &e, tried) => tried += 1,
                    r => return r,
                }
            }
        })
    }

    fn upload<'a>(&'a self, path: &'a Path, digest: Digest, size: u64) -> BlobFuture<'a> {
        Box::pin(async move {
            let mut tried = 0;
            loop {
                let conn = self.connection().await?;
                match Self::upload_on(&conn, path, digest, size).await {
                    Err(e) if Self::again(&conn, &e, tried) => tried += 1,
                    r => return r,
                }
            }
        })
    }
}

/// The session's blob handle, before the session runs (the worker context needs it).
pub fn blobs() -> (QuicBlobs, watch::Sender<Option<quinn::Connection>>) {
    let (tx, rx) = watch::channel(None);
    (QuicBlobs { conn: rx }, tx)
}

/// Redial delays: the base doubles from `min` to `max` after each failed dial and goes back
/// to `min` after a connection; each delay is drawn from `[base/2, base]` with the injected
/// `source` (so a farm's workers do not redial a restarted coordinator in lockstep, and a test
/// can fix the draw).
pub struct Backoff {
    min: Duration,
    max: Duration,
    base: Duration,
    source: Box<dyn FnMut() -> u64 + Send>,
}

impl Backoff {
    /// Delays from `min` to `max`, jittered by `source` (any `u64`s).
    pub fn new(min: Duration, max: Duration, source: impl FnMut() -> u64 + Send + 'static) -> Self {
        Self { min, max: max.max(min), base: min, source: Box::new(source) }
    }

    /// [`BACKOFF_MIN`] to [`BACKOFF_MAX`], jittered by a generator seeded from the process and
    /// the clock.
    pub fn standard() -> Self {
        let mut state = seed();
        Self::new(BACKOFF_MIN, BACKOFF_MAX, move || {
            // xorshift64: plenty for spreading redials.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        })
    }

    /// The next delay; the base doubles (up to the maximum) for the one after.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.base;
        self.base = (self.base * 2).min(self.max);
        let half = base / 2;
        let span = u64::try_from((base - half).as_micros()).unwrap_or(u64::MAX).max(1);
        half + Duration::from_micros((self.source)() % (span + 1))
    }

    /// A connection was made: the next failure starts again from the minimum.
    pub fn reset(&mut self) {
        self.base = self.min;
    }
}

/// A non-zero seed from the pid and the clock.
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos() & u128::from(u64::MAX)).unwrap_or(0));
    (nanos ^ (u64::from(std::process::id()) << 32)) | 1
}

/// Why a session gave up for good.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The coordinator refused this worker (version or role): redialling will not help.
    #[error("the coordinator refused this worker: {0}")]
    Rejected(String),
}

/// Runs the worker's session until `shutdown` (or until the coordinator dismisses a drained
/// worker: `CoordinatorMsg::Leave` cancels `shutdown`): reports from `reports` go up, work comes down
/// to `worker`. Returns an error only when the coordinator rejects the worker outright.
pub async fn run(
    cfg: SessionConfig,
    worker: ActorRef<WorkerActor>,
    mut reports: mpsc::Receiver<FromWorker>,
    conn_tx: watch::Sender<Option<quinn::Connection>>,
    shutdown: CancellationToken,
) -> Result<(), SessionError> {
    let mut backoff = Backoff::standard();
    // A report that could not be sent when a connection died is sent on the next one.
    let mut unsent: Option<FromWorker> = None;
    let mut recent = Recent::default();
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let delay = match connect(&cfg, &worker).await {
            Ok((conn, send, recv)) => {
                tracing::info!(coordinator = %cfg.addr, "connected");
                backoff.reset();
                let addr = cfg.addr;
                let _watch = liveness::watch(conn.clone(), move |l| say_liveness(addr, l));
                let _ = conn_tx.send(Some(conn.clone()));
                let mut link =
                    Link { reports: &mut reports, unsent: &mut unsent, recent: &mut recent };
                serve(&conn, send, recv, &worker, &mut link, &shutdown).await;
                let _ = conn_tx.send(None);
                if shutdown.is_cancelled() {
                    // Leaving: `serve` said so; the coordinator ends the session once it has
                    // taken that, and its close is what the farm's status reflects.
                    let _ = tokio::time::timeout(LEAVE_TIMEOUT, conn.closed()).await;
                    conn.close(0u32.into(), b"worker leaving");
                    return Ok(());
                }
                conn.close(0u32.into(), b"worker session over");
                let delay = backoff.next_delay();
                tracing::warn!(coordinator = %cfg.addr, "connection lost; redialling in {delay:?}");
                delay
            }
            Err(ConnectError::Rejected(reason)) => return Err(SessionError::Rejected(reason)),
            Err(ConnectError::Clock(why)) => {
                tracing::error!(coordinator = %cfg.addr, "cannot connect: {why}; retrying in {CLOCK_RETRY:?}");
                CLOCK_RETRY
            }
            Err(ConnectError::Retry(e)) => {
                let delay = backoff.next_delay();
                tracing::warn!(coordinator = %cfg.addr, "cannot reach the coordinator: {e}; retrying in {delay:?}");
                delay
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
    }
}

enum ConnectError {
    Rejected(String),
    Retry(String),
    /// A certificate's dates did not hold at a clock: say so, retry slowly.
    Clock(String),
}

/// The session's words on the coordinator's liveness (see [`liveness`]).
fn say_liveness(coordinator: SocketAddr, l: Liveness) {
    let tolerance = endpoint::CLIENT_IDLE_TIMEOUT.as_secs();
    match l {
        Liveness::Quiet(d) => tracing::warn!(
            %coordinator,
            "the coordinator has not answered for {} s; waiting up to {tolerance} s for it \
             (a paused coordinator keeps its workers and their tasks)",
            d.as_secs()
        ),
        Liveness::Back(d) => {
            tracing::info!(%coordinator, "the coordinator answers again after {} s", d.as_secs());
        }
        Liveness::Gone => tracing::warn!(
            %coordinator,
            "nothing listens on the coordinator's port any more: it is gone; redialling"
        ),
    }
}

async fn connect(
    cfg: &SessionConfig,
    worker: &ActorRef<WorkerActor>,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream), ConnectError> {
    let retry = |e: String| ConnectError::Retry(e);
    let ep = endpoint::client(&cfg.bundle, cfg.addr).map_err(|e| retry(e.to_string()))?;
    let conn = endpoint::connect_within(&ep, cfg.addr, &cfg.server_name, DIAL_TIMEOUT)
        .await
        .map_err(|e| {
            if let Some(hint) = endpoint::name_mismatch_hint(&e, &cfg.server_name) {
                // Retrying cannot help: the certificate names other hosts.
                return ConnectError::Rejected(format!("{e} ({hint}, or pass --server-name)"));
            }
            match endpoint::clock_hint(&e) {
                Some(hint) => ConnectError::Clock(format!("{hint} ({e})")),
                None => retry(e.to_string()),
            }
        })?;
    // Under TLS 1.3 a refused certificate surfaces after the handshake, on the first stream
    // operation (STACK pitfall 3): a TLS alert in the close frame is a refusal, not a blip.
    let failed = |e: String| {
        let why = conn.close_reason();
        if let Some(hint) = why.as_ref().and_then(endpoint::connection_clock_hint) {
            return ConnectError::Clock(format!("{hint} ({e})"));
        }
        match why {
            Some(quinn::ConnectionError::ConnectionClosed(c)) if is_tls_alert(c.error_code) => {
                ConnectError::Rejected(format!("handshake failed: {c}"))
            }
            _ => retry(e),
        }
    };
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| failed(e.to_string()))?;
    let hello = Hello {
        protocol_version: PROTOCOL_VERSION,
        build_version: BUILD_VERSION.to_owned(),
        role: "worker".to_owned(),
        capabilities: Vec::new(),
    };
    frame::write_msg(&mut send, &hello).await.map_err(|e| failed(e.to_string()))?;
    match frame::read_msg::<_, HelloReply>(&mut recv).await {
        Ok(Some(HelloReply::Welcome(_))) => {}
        Ok(Some(HelloReply::Reject(r))) => return Err(ConnectError::Rejected(r.reason)),
        Ok(None) => {
            return Err(retry(
                "the coordinator closed the connection during the handshake".to_owned(),
            ));
        }
        // A refused certificate shows here, on the first exchange (STACK pitfall 3).
        Err(e) => {
            let clock = conn.close_reason().and_then(|why| endpoint::connection_clock_hint(&why));
            return Err(match clock {
                Some(hint) => ConnectError::Clock(format!("{hint} ({e})")),
                None => ConnectError::Rejected(format!("handshake failed: {e}")),
            });
        }
    }
    let mut info = cfg.info.clone();
    info.running = worker.ask(Running).await.unwrap_or_default();
    info.health = worker.ask(Health).await.ok().flatten();
    frame::write_msg(&mut send, &WorkerMsg::Register(info))
        .await
        .map_err(|e| retry(e.to_string()))?;
    Ok((conn, send, recv))
}

/// What goes up a connection: reports from the worker actor, the one a dead connection did
/// not take, and the ones sent lately.
struct Link<'a> {
    reports: &'a mut mpsc::Receiver<FromWorker>,
    unsent: &'a mut Option<FromWorker>,
    recent: &'a mut Recent,
}

async fn serve(
    conn: &quinn::Connection,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    worker: &ActorRef<WorkerActor>,
    link: &mut Link<'_>,
    shutdown: &CancellationToken,
) {
    // Reader: work from the coordinator to the worker actor.
    let w = worker.clone();
    let reader_done = CancellationToken::new();
    let done = reader_done.clone();
    let stop = shutdown.clone();
    let _reader = OwnedTask::spawn("worker.session.reader", async move {
        let _done = done.drop_guard();
        loop {
            match frame::read_msg::<_, CoordinatorMsg>(&mut recv).await {
                Ok(Some(CoordinatorMsg::Work(msg))) => {
                    let (kind, attempt) = match &msg {
                        ToWorker::Assign(a) => ("Assign", a.attempt),
                        ToWorker::Cancel { attempt } => ("Cancel", *attempt),
                    };
                    tracing::debug!(hop = "farm->worker", kind, attempt = attempt.0, "received");
                    if w.tell(msg).await.is_err() {
                        break;
                    }
                }
                Ok(Some(CoordinatorMsg::Refused { attempt, reason })) => {
                    // (A resent report of a lease the coordinator is done with lands here too:
                    // rare, and an operator wants to see either.)
                    tracing::info!(%attempt, "report refused: {reason}; cancelling it here");
                    let _ = w.tell(ToWorker::Cancel { attempt }).await;
                }
                Ok(Some(CoordinatorMsg::Leave)) => {
                    // Drained and idle: leave as on SIGTERM (say so, close, exit).
                    tracing::info!("drained by the coordinator; leaving the farm");
                    stop.cancel();
                }
                Ok(None) | Err(_) => break,
            }
        }
    });
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    // What was sent lately may not have been taken (a coordinator that died and restarted):
    // once more. A coordinator that has it refuses it.
    for msg in link.recent.to_resend() {
        if frame::write_msg(&mut send, &WorkerMsg::Report(msg)).await.is_err() {
            return;
        }
    }
    if let Some(msg) = link.unsent.take() {
        if frame::write_msg(&mut send, &WorkerMsg::Report(msg.clone())).await.is_err() {
            *link.unsent = Some(msg);
            return;
        }
        link.recent.keep(&msg);
    }
    loop {
        tokio::select! {
            () = shutdown.cancelled() => {
                // SIGTERM: the farm gives this worker no more work and requeues what it
                // held (free); then the stream ends and the coordinator closes the session.
                let leaving = async {
                    frame::write_msg(&mut send, &WorkerMsg::Leaving).await.ok()?;
                    send.finish().ok()
                };
                if tokio::time::timeout(LEAVE_TIMEOUT, leaving).await.ok().flatten().is_some() {
                    tracing::info!("told the coordinator this worker is leaving");
                }
                break;
            }
            () = reader_done.cancelled() => break,
            _ = conn.closed() => break,
            report = link.reports.recv() => {
                let Some(msg) = report else { break };
                trace_report(&msg);
                if frame::write_msg(&mut send, &WorkerMsg::Report(msg.clone())).await.is_err() {
                    *link.unsent = Some(msg);
                    break;
                }
                link.recent.keep(&msg);
            }
            _ = heartbeat.tick() => {
                let running: Vec<AttemptId> = worker.ask(Running).await.unwrap_or_default();
                let health = worker.ask(Health).await.ok().flatten();
                let beat = WorkerMsg::Heartbeat { running, health };
                if frame::write_msg(&mut send, &beat).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// The `worker->farm` hop's debug line for one report.
fn trace_report(msg: &FromWorker) {
    let (kind, attempt) = match msg {
        FromWorker::Started { attempt, .. } => ("Started", *attempt),
        FromWorker::Output { attempt, .. } => ("Output", *attempt),
        FromWorker::Ready { attempt } => ("Ready", *attempt),
        FromWorker::Finished(f) => ("Finished", f.attempt),
    };
    tracing::debug!(hop = "worker->farm", kind, attempt = attempt.0, "send");
}

/// QUIC carries TLS alerts as transport error codes 0x100–0x1ff (RFC 9001 §4.8).
fn is_tls_alert(code: quinn::TransportErrorCode) -> bool {
    (0x100..0x200).contains(&u64::from(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays(b: &mut Backoff, n: usize) -> Vec<Duration> {
        (0..n).map(|_| b.next_delay()).collect()
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_the_source_only_shortens_a_delay() {
        let ms = Duration::from_millis;
        // A source at its top draws the full base; at zero, half of it.
        let mut top = Backoff::new(ms(250), Duration::from_secs(2), || u64::MAX - 1);
        let got = delays(&mut top, 6);
        assert!(got.iter().all(|d| *d <= Duration::from_secs(2)), "{got:?}");
        let mut zero = Backoff::new(ms(250), Duration::from_secs(2), || 0);
        assert_eq!(delays(&mut zero, 6), [ms(125), ms(250), ms(500), ms(1000), ms(1000), ms(1000)]);
    }

    #[test]
    fn backoff_draws_stay_within_half_to_whole_base_for_any_source() {
        let ms = Duration::from_millis;
        let mut n = 0u64;
        let mut b = Backoff::new(ms(250), Duration::from_secs(2), move || {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            n
        });
        let bases = [250, 500, 1000, 2000, 2000, 2000, 2000];
        for base in bases {
            let d = b.next_delay();
            assert!(d >= ms(base) / 2 && d <= ms(base), "{d:?} outside [{base}/2, {base}] ms");
        }
    }

    #[test]
    fn backoff_starts_over_after_a_connection() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(250), Duration::from_secs(2), || 0);
        let _ = delays(&mut b, 5);
        b.reset();
        assert_eq!(b.next_delay(), ms(125));
        // And a maximum below the minimum is the minimum.
        let mut flat = Backoff::new(ms(250), ms(10), || 0);
        assert_eq!(delays(&mut flat, 3), [ms(125), ms(125), ms(125)]);
    }
}
