//! rustls and quinn configurations for the farm: mutual TLS over the cluster CA only, TLS 1.3
//! only (QUIC requires it), no 0-RTT (replayable requests would be a hazard: brief §8), ALPN
//! carrying the protocol's major version, and bounded streams and idle time.

use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, TransportConfig, VarInt};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;

use super::TransportError;
use super::certs::Bundle;

/// The ALPN protocol: the wire protocol's major version. A peer speaking another major version
/// fails the handshake instead of misreading frames.
pub const ALPN: &[u8] = b"prova/1";

/// Concurrent bidirectional streams a peer may open on one connection: one per in-flight
/// request; past this the peer waits for credit instead of growing our state.
pub const MAX_CONCURRENT_BIDI_STREAMS: u32 = 64;
/// Concurrent unidirectional streams a peer may open (event/log pushes), bounded likewise.
pub const MAX_CONCURRENT_UNI_STREAMS: u32 = 64;
/// A connection with no traffic for this long is closed: how fast a vanished peer is noticed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Keep-alive ping interval: well under [`IDLE_TIMEOUT`], so a few lost pings do not drop a
/// healthy but quiet link (and NAT bindings stay open).
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Handshakes the server holds at once before refusing new ones: bounds the state a flood of
/// connection attempts can make it keep.
pub const MAX_INCOMING: usize = 256;

/// The one crypto provider prova uses (*ring*), passed explicitly to every builder so no
/// process-level default is needed (STACK.md pitfall 1).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A roots store holding only the cluster CA.
fn cluster_roots(bundle: &Bundle) -> Result<Arc<RootCertStore>, TransportError> {
    let mut roots = RootCertStore::empty();
    roots.add(bundle.ca.clone())?;
    Ok(Arc::new(roots))
}

/// The transport limits both sides use.
pub fn transport_config() -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(MAX_CONCURRENT_BIDI_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_CONCURRENT_UNI_STREAMS))
        .max_idle_timeout(Some(idle_timeout()))
        .keep_alive_interval(Some(KEEP_ALIVE_INTERVAL));
    Arc::new(t)
}

fn idle_timeout() -> IdleTimeout {
    // 30 s in milliseconds is far below VarInt's 2^62 bound.
    IdleTimeout::from(VarInt::from_u32(IDLE_TIMEOUT.as_millis() as u32))
}

/// The server's rustls configuration: presents the bundle's chain, requires a client
/// certificate issued by the cluster CA, speaks only [`ALPN`], TLS 1.3, no early data.
pub fn server_crypto(bundle: &Bundle) -> Result<rustls::ServerConfig, TransportError> {
    let provider = provider();
    let verifier =
        WebPkiClientVerifier::builder_with_provider(cluster_roots(bundle)?, provider.clone())
            .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(bundle.cert.clone(), bundle.key.clone_key())?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.max_early_data_size = 0;
    Ok(config)
}

/// The client's rustls configuration: trusts only the cluster CA, presents the bundle's chain,
/// speaks only `alpn` (normally [`ALPN`]), TLS 1.3, no early data.
pub(crate) fn client_crypto_with_alpn(
    bundle: &Bundle,
    alpn: &[u8],
) -> Result<rustls::ClientConfig, TransportError> {
    let provider = provider();
    let verifier =
        WebPkiServerVerifier::builder_with_provider(cluster_roots(bundle)?, provider.clone())
            .build()
            .map_err(TransportError::ServerVerifier)?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(bundle.cert.clone(), bundle.key.clone_key())?;
    config.alpn_protocols = vec![alpn.to_vec()];
    config.enable_early_data = false;
    Ok(config)
}

/// See [`client_crypto_with_alpn`].
pub fn client_crypto(bundle: &Bundle) -> Result<rustls::ClientConfig, TransportError> {
    client_crypto_with_alpn(bundle, ALPN)
}

/// The quinn server configuration for a coordinator (see [`server_crypto`], [`MAX_INCOMING`]).
pub fn server_config(bundle: &Bundle) -> Result<quinn::ServerConfig, TransportError> {
    let crypto = QuicServerConfig::try_from(Arc::new(server_crypto(bundle)?))?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(transport_config()).max_incoming(MAX_INCOMING);
    Ok(config)
}

/// The quinn client configuration for a worker or client (see [`client_crypto`]).
pub fn client_config(bundle: &Bundle) -> Result<quinn::ClientConfig, TransportError> {
    quic_client_config(client_crypto(bundle)?)
}

/// Wraps a rustls client configuration for quinn with prova's transport limits.
pub(crate) fn quic_client_config(
    crypto: rustls::ClientConfig,
) -> Result<quinn::ClientConfig, TransportError> {
    let crypto = QuicClientConfig::try_from(Arc::new(crypto))?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport_config());
    Ok(config)
}
