//! QUIC endpoints: a coordinator's server endpoint, a worker's or client's client endpoint,
//! connecting and accepting with bounded waits, and the peer's [`Identity`].
//!
//! Connections are not capped here: the accept loop (the coordinator) holds one
//! `tokio::sync::OwnedSemaphorePermit` per live connection, sized by its configuration, and
//! calls `Incoming::refuse()` when none is left. Handshakes in flight are capped by
//! [`tls::MAX_INCOMING`], streams per connection by [`tls::MAX_CONCURRENT_BIDI_STREAMS`].
//!
//! Authentication (STACK.md pitfall 3): under TLS 1.3 the client finishes its handshake before
//! the server has checked the client's certificate, so [`connect`] can succeed for a client the
//! server then refuses; the refusal shows on the first exchange. The server side is decided in
//! [`accept`]: a refused client never yields a connection there.
//!
//! Liveness: a client endpoint (a worker's, a `prova run --remote`'s) pings every
//! [`CLIENT_KEEP_ALIVE`] and gives a silent peer up after [`CLIENT_IDLE_TIMEOUT`]. QUIC
//! uses the lower of the two peers' idle timeouts, so a crashed coordinator is noticed by its
//! clients and workers within seconds (not the server's 30 s), and a worker or client that
//! vanished is noticed by the coordinator as fast.

use std::any::Any;
use std::future::IntoFuture;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::TransportError;
use super::certs::{Bundle, Identity, Role, identity_of};
use super::tls;

/// How long a QUIC + TLS handshake may take (it takes milliseconds on a LAN): past this the
/// peer is unreachable or stalling, and the caller should retry or report.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client endpoint's connection may go without a packet from its peer before it
/// counts as gone: several keep-alives lost in a row, well above a LAN's round trip.
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// How often a client endpoint pings a quiet connection (four chances per idle timeout).
pub const CLIENT_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// The transport a client endpoint uses: the shared stream limits, with the short liveness
/// bounds above.
pub fn client_transport() -> std::sync::Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    // 4 s in milliseconds is far below VarInt's 2^62 bound.
    let idle =
        quinn::IdleTimeout::from(quinn::VarInt::from_u32(CLIENT_IDLE_TIMEOUT.as_millis() as u32));
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(tls::MAX_CONCURRENT_BIDI_STREAMS))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(tls::MAX_CONCURRENT_UNI_STREAMS))
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(CLIENT_KEEP_ALIVE));
    std::sync::Arc::new(t)
}

/// Binds a server endpoint on `bind` (port 0 for any) presenting `bundle`, requiring client
/// certificates from the cluster CA. Must run inside a tokio runtime.
pub fn server(bind: SocketAddr, bundle: &Bundle) -> Result<quinn::Endpoint, TransportError> {
    quinn::Endpoint::server(tls::server_config(bundle)?, bind)
        .map_err(|source| TransportError::Bind { addr: bind, source })
}

/// Binds a client endpoint for dialling `remote`: an ephemeral port on the unspecified address
/// of `remote`'s family, with `bundle` as the default client configuration and the liveness
/// bounds of [`client_transport`]. Must run inside a tokio runtime.
pub fn client(bundle: &Bundle, remote: SocketAddr) -> Result<quinn::Endpoint, TransportError> {
    let bind = match remote {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let mut endpoint = quinn::Endpoint::client(bind)
        .map_err(|source| TransportError::Bind { addr: bind, source })?;
    let mut config = tls::client_config(bundle)?;
    config.transport_config(client_transport());
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

/// Dials the coordinator at `addr`, verifying its certificate against the cluster CA for
/// `server_name` (a DNS name or IP address in its SANs) and that it carries the coordinator
/// role. Bounded by [`HANDSHAKE_TIMEOUT`]. Our own certificate may still be refused by the
/// server after this returns (see the module docs).
pub async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    server_name: &str,
) -> Result<quinn::Connection, TransportError> {
    connect_within(endpoint, addr, server_name, HANDSHAKE_TIMEOUT).await
}

/// [`connect`], bounded by `limit` instead: a client that would rather say "cannot reach"
/// (or fall back to local mode) within seconds than wait out [`HANDSHAKE_TIMEOUT`].
pub async fn connect_within(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    server_name: &str,
    limit: Duration,
) -> Result<quinn::Connection, TransportError> {
    let connecting = endpoint.connect(addr, server_name)?;
    let what = format!("the QUIC handshake with {addr}");
    let conn = tokio::time::timeout(limit, connecting)
        .await
        .map_err(|_| TransportError::Timeout { what })??;
    let identity = peer_identity(&conn)?;
    if identity.role != Role::Coordinator {
        conn.close(0u32.into(), b"not a coordinator");
        return Err(TransportError::WrongRole {
            expected: Role::Coordinator,
            actual: identity.role,
        });
    }
    Ok(conn)
}

/// When `e` is a handshake that failed because the coordinator's certificate does not carry
/// `server_name` (dialled by an address or name it was not issued for), what to do about it.
pub fn name_mismatch_hint(e: &TransportError, server_name: &str) -> Option<String> {
    let text = e.to_string();
    (text.contains("NotValidForName") || text.contains("not valid for name")).then(|| {
        format!(
            "the coordinator's certificate does not name `{server_name}`: issue it with \
             `prova certs init DIR --san {server_name}`"
        )
    })
}

/// Completes an incoming connection and reads the client's identity. Fails when the client's
/// certificate is missing or not from the cluster CA, when it speaks another ALPN, or when the
/// handshake outlasts [`HANDSHAKE_TIMEOUT`]. Authorisation by role is the caller's.
pub async fn accept(
    incoming: quinn::Incoming,
) -> Result<(quinn::Connection, Identity), TransportError> {
    let remote = incoming.remote_address();
    let conn = bounded(format!("the QUIC handshake from {remote}"), incoming).await??;
    match peer_identity(&conn) {
        Ok(identity) => Ok((conn, identity)),
        Err(e) => {
            conn.close(0u32.into(), b"bad certificate");
            Err(e)
        }
    }
}

/// The identity in the peer's (verified) leaf certificate.
pub fn peer_identity(conn: &quinn::Connection) -> Result<Identity, TransportError> {
    let any: Box<dyn Any> = conn.peer_identity().ok_or(TransportError::NoPeerCertificate)?;
    let chain = any
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| TransportError::BadCertificate("peer identity is not X.509".into()))?;
    let leaf = chain.first().ok_or(TransportError::NoPeerCertificate)?;
    identity_of(leaf)
}

async fn bounded<T>(what: String, fut: impl IntoFuture<Output = T>) -> Result<T, TransportError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, fut).await.map_err(|_| TransportError::Timeout { what })
}
