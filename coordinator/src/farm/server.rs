//! The coordinator's QUIC server: accept (unvalidated addresses retried, handshakes capped per
//! source and in all, refused when full: [`admit_handshake`]), authenticate
//! (mTLS, then `Hello` whose role must match the certificate's), admit (per-role pools and
//! per-identity shares, [`super::admission`]), authorise by role, and hand the connection to
//! the role's session. Blob streams of a connection are served beside its control stream;
//! each upload is admitted against its identity's budget.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kameo::prelude::*;
use prova_protocol::task::OwnedTask;
use prova_protocol::transport::{self, Identity, Role, endpoint, frame};
use prova_protocol::wire::{
    BlobAck, BlobRequest, Hello, HelloReply, PROTOCOL_VERSION, Reject, Welcome,
};
use tokio_util::sync::CancellationToken;

use super::actor::FarmActor;
use super::admission::{
    Admission, HandshakeLimits, HandshakeRefusal, HandshakeTicket, Handshakes, Limits,
};
use super::error::{EdgeError, HelloRefusal};
use super::{client_session, worker_session};
use crate::cache::CacheThread;

/// How long a peer has to send its `Hello`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest `Hello` frame accepted.
pub const MAX_HELLO: usize = 4096;
/// The largest blob accepted (an artifact or an input file).
pub const MAX_BLOB: u64 = 8 * 1024 * 1024 * 1024;
/// How long a stopping coordinator waits for its connections' close frames to be sent.
pub const CLOSE_FLUSH: Duration = Duration::from_secs(2);
/// The build version sent in `Hello`/`Welcome`.
pub const BUILD_VERSION: &str = concat!("prova ", env!("CARGO_PKG_VERSION"));

/// What every connection's session shares.
pub struct Shared {
    /// The farm actor.
    pub farm: ActorRef<FarmActor>,
    /// The farm's cache store.
    pub store: CacheThread,
    /// The store's `tmp/` (blob uploads land there first).
    pub tmp: PathBuf,
    /// Entries enter the trusted tier only after two workers agree (`--trust=proven`).
    pub trust_proven: bool,
    /// The most bytes one `client` certificate's uploads may hold in the farm cache.
    pub client_quota: u64,
    /// Counters and the book of runs the HTTP listener shows.
    pub observe: Arc<super::observe::Observer>,
}

/// The default per-client blob quota: 20 GiB.
pub const DEFAULT_CLIENT_QUOTA: u64 = 20 * 1024 * 1024 * 1024;

/// Serves `endpoint` until `shutdown`, with the default [`Limits`].
pub async fn serve(endpoint: quinn::Endpoint, shared: Arc<Shared>, shutdown: CancellationToken) {
    serve_with(endpoint, shared, Admission::new(Limits::default()), shutdown).await;
}

/// [`serve`] with the given admission state.
pub async fn serve_with(
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    admission: Arc<Admission>,
    shutdown: CancellationToken,
) {
    let handshakes = Handshakes::new(HandshakeLimits::default());
    let log = Arc::new(HandshakeLog::default());
    let mut summary = tokio::time::interval(HANDSHAKE_LOG_EVERY);
    let mut conns: Vec<OwnedTask<()>> = Vec::new();
    loop {
        let incoming = tokio::select! {
            () = shutdown.cancelled() => break,
            _ = summary.tick() => {
                log.summarise();
                continue;
            }
            i = endpoint.accept() => match i { Some(i) => i, None => break },
        };
        let Some((incoming, ticket)) = admit_handshake(incoming, &handshakes, &log) else {
            continue;
        };
        conns.retain(|t| !t.is_finished());
        let (shared, admission, gate) = (shared.clone(), admission.clone(), handshakes.clone());
        let log = log.clone();
        conns.push(OwnedTask::spawn("coordinator.connection", async move {
            let remote = incoming.remote_address();
            let accepted = endpoint::accept(incoming).await;
            drop(ticket);
            match accepted {
                Ok((conn, identity)) => {
                    // A peer of the cluster connects from here: its source is known.
                    gate.authenticated(remote.ip());
                    serve_connection(conn, identity, shared, admission).await;
                }
                Err(e) => match endpoint::accept_clock_hint(&e) {
                    Some(hint) => tracing::warn!(%remote, "connection refused: {e} ({hint})"),
                    None => log.failed(remote, &e),
                },
            }
        }));
    }
    endpoint.close(0u32.into(), b"coordinator shutting down");
    // Let the CONNECTION_CLOSE frames go out before the process exits: without them every
    // peer (a client waiting for its run, a worker) only notices at the idle timeout.
    let _ = tokio::time::timeout(CLOSE_FLUSH, endpoint.wait_idle()).await;
}

/// The first step of every incoming connection, decided at once (never waiting: the accept
/// loop would stall every peer behind ones that may never finish):
/// - a source address QUIC has not validated gets a stateless retry: it costs no state and
///   no handshake slot, and a sender that spoofs its address never sees the retry token, so
///   a flood of Initials (spoofed or not) takes nothing;
/// - a validated source takes a handshake slot ([`Handshakes`]: a share per source, a reserve
///   for known sources), or is refused (one packet) when it may take none.
fn admit_handshake(
    incoming: quinn::Incoming,
    handshakes: &Arc<Handshakes>,
    log: &HandshakeLog,
) -> Option<(quinn::Incoming, HandshakeTicket)> {
    let remote = incoming.remote_address();
    if !incoming.remote_address_validated() {
        log.retried.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = incoming.retry() {
            // Only an Incoming that already carries a retry token cannot be retried, and such
            // a one is validated: not reached. Refuse rather than accept unvalidated.
            e.into_incoming().refuse();
        }
        return None;
    }
    match handshakes.begin(remote.ip()) {
        Ok(ticket) => Some((incoming, ticket)),
        Err(why) => {
            log.refused(remote, why);
            incoming.refuse();
            None
        }
    }
}

/// How often the accept loop sums up the handshakes it retried, refused or saw fail.
pub const HANDSHAKE_LOG_EVERY: Duration = Duration::from_secs(10);

/// Handshakes retried, refused and failed, counted so that a flood does not become a flood of
/// log lines: the first refusal and the first failure of each [`HANDSHAKE_LOG_EVERY`] are
/// logged as they happen, the rest summed up at its end.
#[derive(Debug, Default)]
struct HandshakeLog {
    retried: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

impl HandshakeLog {
    fn refused(&self, remote: std::net::SocketAddr, why: HandshakeRefusal) {
        if self.refused.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::info!(%remote, "handshake refused: {why} (more are summed up every {HANDSHAKE_LOG_EVERY:?})");
        }
    }

    fn failed(&self, remote: std::net::SocketAddr, e: &transport::TransportError) {
        if self.failed.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::info!(%remote, "connection refused: {e} (more are summed up every {HANDSHAKE_LOG_EVERY:?})");
        }
    }

    fn summarise(&self) {
        let retried = self.retried.swap(0, Ordering::Relaxed);
        let refused = self.refused.swap(0, Ordering::Relaxed);
        let failed = self.failed.swap(0, Ordering::Relaxed);
        if refused + failed > 1 {
            tracing::info!(
                retried,
                refused,
                failed,
                "handshakes refused (over their source's share or the coordinator's) or failed \
                 (bad certificate, timed out) in the last {HANDSHAKE_LOG_EVERY:?}"
            );
        } else if retried > 0 {
            tracing::debug!(retried, "address validations (stateless retries) sent");
        }
    }
}

async fn serve_connection(
    conn: quinn::Connection,
    identity: Identity,
    shared: Arc<Shared>,
    admission: Arc<Admission>,
) {
    let remote = conn.remote_address();
    let Ok(Ok((mut send, mut recv))) = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi()).await
    else {
        tracing::info!(%remote, %identity, "no control stream");
        return;
    };
    let hello: Hello = match tokio::time::timeout(
        HELLO_TIMEOUT,
        frame::read_msg_max(&mut recv, MAX_HELLO),
    )
    .await
    {
        Ok(Ok(Some(h))) => h,
        _ => {
            tracing::info!(%remote, %identity, "no hello");
            return;
        }
    };
    // Admitted once the role is known to be genuine: the ticket is held for the
    // connection's life.
    let admitted = check_hello(&hello, &identity)
        .and_then(|()| admission.connect(&identity).map_err(HelloRefusal::from));
    let _ticket = match admitted {
        Ok(ticket) => ticket,
        Err(refusal) => {
            let reason = refusal.to_string();
            tracing::info!(%remote, %identity, "rejected: {reason}");
            let _ = frame::write_msg(&mut send, &HelloReply::Reject(Reject { reason })).await;
            let _ = send.finish();
            // Give the peer a moment to read the reason before the connection goes.
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.closed()).await;
            return;
        }
    };
    // Clients key their tasks with the farm cache's salt, so every client's keys agree.
    let key_salt = match identity.role {
        Role::Ci | Role::Client | Role::Admin => {
            shared.store.call(|s| s.key_salt()).await.ok().and_then(Result::ok).flatten()
        }
        Role::Worker | Role::Coordinator => None,
    };
    let welcome = Welcome {
        protocol_version: PROTOCOL_VERSION,
        build_version: BUILD_VERSION.to_owned(),
        peer: identity.name.clone(),
        key_salt,
    };
    if frame::write_msg(&mut send, &HelloReply::Welcome(welcome)).await.is_err() {
        return;
    }
    let _blobs = OwnedTask::spawn(
        "coordinator.blobs",
        serve_blobs(conn.clone(), identity.clone(), shared.clone(), admission),
    );
    let refused = match identity.role {
        Role::Worker => {
            worker_session::run(send, recv, identity, hello.build_version, shared).await.err()
        }
        Role::Ci | Role::Client | Role::Admin => {
            client_session::run(send, recv, identity, shared).await;
            None
        }
        Role::Coordinator => None,
    };
    match refused {
        // The reason travels in the close frame: the peer's next read reports it.
        Some(reason) => conn.close(1u32.into(), reason.to_string().as_bytes()),
        None => conn.close(0u32.into(), b"session over"),
    }
}

/// The `Hello` must speak our protocol version and claim the certificate's own role, and that
/// role must be one that talks to a coordinator.
fn check_hello(hello: &Hello, identity: &Identity) -> Result<(), HelloRefusal> {
    if hello.protocol_version != PROTOCOL_VERSION {
        return Err(HelloRefusal::ProtocolVersion { got: hello.protocol_version });
    }
    if hello.role != identity.role.as_str() {
        return Err(HelloRefusal::RoleMismatch {
            name: identity.name.clone(),
            certified: identity.role.to_string(),
            claimed: hello.role.clone(),
        });
    }
    if identity.role == Role::Coordinator {
        return Err(HelloRefusal::CoordinatorPeer);
    }
    Ok(())
}

/// Blob streams: every bidirectional stream after the control stream carries one blob.
async fn serve_blobs(
    conn: quinn::Connection,
    identity: Identity,
    shared: Arc<Shared>,
    admission: Arc<Admission>,
) {
    let mut streams: Vec<OwnedTask<()>> = Vec::new();
    while let Ok((send, recv)) = conn.accept_bi().await {
        streams.retain(|t| !t.is_finished());
        let (identity, shared, admission) = (identity.clone(), shared.clone(), admission.clone());
        streams.push(OwnedTask::spawn("coordinator.blob", async move {
            if let Err(e) = serve_blob(send, recv, &identity, &shared, &admission).await {
                tracing::debug!(%identity, "blob stream: {e}");
            }
        }));
    }
}

async fn serve_blob(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    identity: &Identity,
    shared: &Shared,
    admission: &Arc<Admission>,
) -> Result<(), EdgeError> {
    let req: BlobRequest =
        frame::read_msg_max(&mut recv, MAX_HELLO).await?.ok_or(EdgeError::Empty)?;
    match req {
        BlobRequest::Get { digest } => {
            // A ci/client certificate gets only what it may see; anything else reads as
            // absent (the answer does not tell whether another identity stored it).
            let seen = client_session::visibility_of(identity);
            let file = shared
                .store
                .call(move |s| match &seen {
                    Some(v) if !s.blob_visible(v, &digest)? => Ok(None),
                    _ => s.open_blob(&digest),
                })
                .await?;
            match file? {
                Some(f) => {
                    let size = f.metadata()?.len();
                    frame::write_msg(&mut send, &BlobAck::Stored).await?;
                    let file = tokio::fs::File::from_std(f);
                    transport::send_blob(&mut send, digest, size, file).await?;
                    shared.observe.counters.bytes_out.fetch_add(size, Ordering::Relaxed);
                }
                None => {
                    let ack = BlobAck::Refused {
                        reason: format!("blob {} is not in the farm cache", digest.short()),
                    };
                    frame::write_msg(&mut send, &ack).await?;
                }
            }
        }
        BlobRequest::Put { digest, size } => {
            if identity.role == Role::Admin {
                let ack =
                    BlobAck::Refused { reason: "an admin certificate cannot upload".to_owned() };
                return Ok(frame::write_msg(&mut send, &ack).await?);
            }
            let ack = match admission.upload(identity, size) {
                Err(refused) => BlobAck::Refused { reason: refused.to_string() },
                Ok(_ticket) => {
                    match within_quota(identity, digest, size, shared, admission).await {
                        Err(e) => BlobAck::Refused { reason: e.to_string() },
                        Ok(()) => {
                            match receive_into_store(&mut recv, digest, size, identity, shared)
                                .await
                            {
                                Ok(()) => BlobAck::Stored,
                                Err(e) => BlobAck::Refused { reason: e.to_string() },
                            }
                        }
                    }
                }
            };
            frame::write_msg(&mut send, &ack).await?;
        }
    }
    let _ = send.finish();
    Ok(())
}

/// A `client` certificate's stored bytes (its recorded uploads, plus its uploads in flight,
/// this one included) stay within [`Shared::client_quota`]. A blob it already stored costs
/// nothing again.
async fn within_quota(
    identity: &Identity,
    digest: prova_protocol::Digest,
    size: u64,
    shared: &Shared,
    admission: &Admission,
) -> Result<(), EdgeError> {
    if identity.role != Role::Client {
        return Ok(());
    }
    let name = identity.name.clone();
    let (again, stored) = shared
        .store
        .call(move |s| {
            Ok::<_, crate::cache::CacheError>((
                s.uploaded(&name, &digest)?,
                s.uploaded_bytes(&name)?,
            ))
        })
        .await??;
    let in_flight = admission.upload_bytes_in_flight(identity);
    let quota = shared.client_quota;
    if !again && stored.saturating_add(in_flight) > quota {
        return Err(EdgeError::OverQuota { name: identity.name.clone(), size, quota, stored });
    }
    Ok(())
}

async fn receive_into_store(
    recv: &mut quinn::RecvStream,
    digest: prova_protocol::Digest,
    size: u64,
    identity: &Identity,
    shared: &Shared,
) -> Result<(), EdgeError> {
    if size > MAX_BLOB {
        return Err(EdgeError::TooLarge { size, max: MAX_BLOB });
    }
    let staged =
        tempfile::Builder::new().prefix("upload-").tempfile_in(&shared.tmp)?.into_temp_path();
    let mut file = tokio::fs::File::create(&staged).await?;
    // The bytes are bounded by the size the upload was admitted for, not only by MAX_BLOB:
    // a header claiming more than the request would bypass the identity's budget.
    transport::recv_blob(recv, &mut file, Some(digest), size).await?;
    shared.observe.counters.bytes_in.fetch_add(size, Ordering::Relaxed);
    file.sync_all().await?;
    drop(file);
    // Keep the path: put_blob_file renames it away (or removes it when the blob exists).
    let path = staged.keep()?;
    // Recorded for ci and client certificates: what they may fetch back, what a quota counts.
    let who = matches!(identity.role, Role::Ci | Role::Client).then(|| identity.name.clone());
    shared
        .store
        .call(move |s| -> Result<(), crate::cache::CacheError> {
            s.put_blob_file(&path, Some(&digest))?;
            if let Some(name) = who {
                s.record_upload(&name, &digest, size, crate::layers::local::now_ms())?;
            }
            Ok(())
        })
        .await??;
    Ok(())
}
