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
//! [`CLIENT_KEEP_ALIVE`] and gives a silent peer up after [`CLIENT_IDLE_TIMEOUT`] (30 s, the
//! pause tolerance: a coordinator stalled for less — SIGSTOP, a GC-like pause, a slow disk —
//! keeps its clients and workers). A coordinator that is *gone* is noticed sooner (see
//! [`super::liveness`]): restarted on its address, it answers with a stateless reset the
//! clients accept, because every incarnation derives its reset key from its certificate key
//! ([`server`]); dead on a host that is up, its closed port answers a probe with ICMP
//! port-unreachable. Only a host that vanished altogether costs the full idle timeout.
//!
//! Handshakes from the network are bounded by the server (`coordinator/src/farm/server.rs`):
//! an unvalidated source address gets a stateless retry, and a validated one's handshake must
//! finish within [`ACCEPT_TIMEOUT`].

use std::any::Any;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use super::TransportError;
use super::certs::{Bundle, Identity, Role, identity_of};
use super::tls;

/// How long a QUIC + TLS handshake may take (it takes milliseconds on a LAN): past this the
/// peer is unreachable or stalling, and the caller should retry or report.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the server lets an incoming handshake take before it drops it: before the
/// peer's certificate is checked it is nobody, and a handshake takes milliseconds on a LAN
/// (a few round trips, one more for the address-validating retry), so a peer that stalls
/// must not hold a handshake slot for long.
pub const ACCEPT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a client endpoint's connection may go without a packet from its peer before it
/// counts as gone: the *pause tolerance*. A coordinator stalled for less than this (SIGSTOP,
/// a GC-like pause, a slow disk) keeps its clients' runs and its workers' connections; a
/// coordinator that is really gone is mostly noticed sooner ([`super::liveness`]).
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a client endpoint pings a quiet connection: a silence of two pings is what
/// [`super::liveness`] starts probing at.
pub const CLIENT_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// The transport a client endpoint uses: the shared stream limits, with the short liveness
/// bounds above.
pub fn client_transport() -> std::sync::Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    // 30 s in milliseconds is far below VarInt's 2^62 bound.
    let idle =
        quinn::IdleTimeout::from(quinn::VarInt::from_u32(CLIENT_IDLE_TIMEOUT.as_millis() as u32));
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(tls::MAX_CONCURRENT_BIDI_STREAMS))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(tls::MAX_CONCURRENT_UNI_STREAMS))
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(CLIENT_KEEP_ALIVE));
    std::sync::Arc::new(t)
}

/// Binds a server endpoint on `bind` (port 0 for any) presenting `bundle`, requiring client
/// certificates from the cluster CA. Its stateless-reset key ([`reset_key`]) and the key its
/// connection ids are made with are derived from the bundle's private key, so a coordinator
/// restarted on the same address recognises its predecessor's connection ids as its own kind
/// and answers their next packet with a reset the peer accepts. Must run inside a tokio
/// runtime.
pub fn server(bind: SocketAddr, bundle: &Bundle) -> Result<quinn::Endpoint, TransportError> {
    let io = |source| TransportError::Bind { addr: bind, source };
    let socket = std::net::UdpSocket::bind(bind).map_err(io)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| io(std::io::Error::other("no async runtime for the QUIC endpoint")))?;
    let mut config = quinn::EndpointConfig::default();
    config.reset_key(reset_key(bundle));
    // A restarted coordinator's endpoint drops packets whose connection id another key made
    // before it would reset them: the key must be the same in every incarnation.
    let cid_key = blake3::derive_key("prova 2024 QUIC connection id key", bundle.key.secret_der());
    let cid_key = u64::from_le_bytes(cid_key[..8].try_into().unwrap_or([0; 8]));
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    quinn::Endpoint::new(config, Some(tls::server_config(bundle)?), socket, runtime).map_err(io)
}

/// The stateless-reset key of a coordinator: a keyed BLAKE3 MAC whose key is derived from its
/// certificate's private key. Secret like the key; the same for every incarnation.
pub fn reset_key(bundle: &Bundle) -> std::sync::Arc<dyn quinn::crypto::HmacKey> {
    let key = blake3::derive_key("prova 2024 QUIC stateless reset key", bundle.key.secret_der());
    std::sync::Arc::new(ResetKey(key))
}

struct ResetKey([u8; 32]);

impl quinn::crypto::HmacKey for ResetKey {
    fn sign(&self, data: &[u8], out: &mut [u8]) {
        let mac = blake3::keyed_hash(&self.0, data);
        let n = out.len().min(32);
        out[..n].copy_from_slice(&mac.as_bytes()[..n]);
    }

    fn signature_len(&self) -> usize {
        32
    }

    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), quinn::crypto::CryptoError> {
        let Ok(given) = <[u8; 32]>::try_from(signature) else {
            return Err(quinn::crypto::CryptoError);
        };
        // `blake3::Hash` compares in constant time.
        if blake3::keyed_hash(&self.0, data) == blake3::Hash::from(given) {
            Ok(())
        } else {
            Err(quinn::crypto::CryptoError)
        }
    }
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

/// The TLS alert a peer sends when a certificate is outside its validity period at the
/// verifier's clock (`certificate_expired`, 45, also for "not valid yet"), as a QUIC
/// transport error code (RFC 9001 §4.8: 0x100 + alert).
const CERTIFICATE_EXPIRED_ALERT: u64 = 0x100 + 45;

/// When `e` is a handshake that failed because a certificate was outside its validity period
/// at some machine's clock, what to say about it: a clock that is off is the likely cause
/// (certificates are valid from an hour before they were issued), and retrying cannot help
/// until it is set right.
pub fn clock_hint(e: &TransportError) -> Option<String> {
    match e {
        TransportError::Connection(c) => connection_clock_hint(c),
        _ => None,
    }
}

/// [`clock_hint`] for a connection's close reason (where a refusal shows under TLS 1.3).
pub fn connection_clock_hint(e: &quinn::ConnectionError) -> Option<String> {
    let now = utc_now();
    match e {
        // Our own check of the coordinator's certificate failed.
        quinn::ConnectionError::TransportError(t) => {
            let text = t.to_string();
            if text.contains("not valid yet") || text.contains("NotValidYet") {
                Some(format!(
                    "the coordinator's certificate is not valid yet at this machine's clock \
                     ({now}): check the clock (NTP) — it is likely behind"
                ))
            } else if text.contains("certificate expired") || text.contains("Expired") {
                Some(format!(
                    "the coordinator's certificate has expired at this machine's clock ({now}): \
                     if the clock is ahead, set it right (NTP); else issue new certificates \
                     (`prova certs issue`)"
                ))
            } else {
                None
            }
        }
        // The coordinator's check of ours failed at its clock.
        quinn::ConnectionError::ConnectionClosed(c)
            if u64::from(c.error_code) == CERTIFICATE_EXPIRED_ALERT =>
        {
            Some(format!(
                "the coordinator found this machine's certificate expired or not valid yet at \
                 its own clock: check the coordinator's clock and this machine's ({now}) — \
                 NTP — and the certificate's dates"
            ))
        }
        _ => None,
    }
}

/// What the coordinator's log says when an incoming handshake failed on a certificate's
/// dates: the peer's certificate at this clock, or this certificate at the peer's.
pub fn accept_clock_hint(e: &TransportError) -> Option<String> {
    let TransportError::Connection(c) = e else { return None };
    match c {
        quinn::ConnectionError::TransportError(t) if outside_dates(&t.to_string()) => {
            Some(format!(
                "the peer's certificate is outside its validity at this coordinator's clock \
                 ({}): check this machine's clock (NTP), and the certificate's dates",
                utc_now()
            ))
        }
        quinn::ConnectionError::ConnectionClosed(c)
            if u64::from(c.error_code) == CERTIFICATE_EXPIRED_ALERT =>
        {
            Some(
                "the peer found the coordinator's certificate expired or not valid yet at its \
                 clock: check that machine's clock (NTP)"
                    .to_owned(),
            )
        }
        _ => None,
    }
}

/// Whether a TLS failure's text is a certificate outside its validity period.
fn outside_dates(text: &str) -> bool {
    ["not valid yet", "NotValidYet", "certificate expired", "Expired"]
        .iter()
        .any(|w| text.contains(w))
}

/// This machine's clock, to the minute, for a message.
fn utc_now() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!("{} {:02}:{:02} UTC", now.date(), now.hour(), now.minute())
}

/// Completes an incoming connection and reads the client's identity. Fails when the client's
/// certificate is missing or not from the cluster CA, when it speaks another ALPN, or when the
/// handshake outlasts [`ACCEPT_TIMEOUT`]. Authorisation by role is the caller's.
pub async fn accept(
    incoming: quinn::Incoming,
) -> Result<(quinn::Connection, Identity), TransportError> {
    let remote = incoming.remote_address();
    let what = format!("the QUIC handshake from {remote}");
    let conn = tokio::time::timeout(ACCEPT_TIMEOUT, incoming)
        .await
        .map_err(|_| TransportError::Timeout { what })??;
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
