//! The farm transport (brief §8): QUIC (quinn) with mutual TLS from a cluster CA, the role
//! of every peer bound to its certificate, and length-prefixed MessagePack frames on streams.
//!
//! # Layout
//! - [`certs`]: the cluster CA, per-peer bundles (`prova certs`), and reading a peer's
//!   [`Identity`] (role + name) back out of its certificate.
//! - [`tls`]: rustls/quinn configurations: client certificates required, the cluster CA as the
//!   only root, ALPN [`tls::ALPN`], TLS 1.3 only, no 0-RTT, bounded streams and idle time.
//! - [`endpoint`]: binding server/client endpoints, connecting and accepting with timeouts, and
//!   [`endpoint::peer_identity`].
//! - [`liveness`]: a client's watch on its coordinator: a pause is waited for, a process
//!   that is gone (its port closed) is given up on at once.
//! - [`frame`]: the sans-IO [`frame::FrameDecoder`] and async `write_msg`/`read_msg`.
//! - [`blob`]: digest-verified blob streams (`send_blob`/`recv_blob`).
//!
//! Every configuration takes the *ring* provider explicitly (STACK.md pitfall 1), so no
//! process-level `CryptoProvider` needs installing. Under TLS 1.3 a client whose certificate
//! the server rejects still sees `connect()` succeed (pitfall 3): authentication failures show
//! on the first exchange, which is why the protocol's first message is `Hello`.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

pub mod blob;
pub mod certs;
pub mod endpoint;
pub mod frame;
pub mod liveness;
pub mod tls;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use blob::{BlobHeader, recv_blob, send_blob};
pub use certs::{Bundle, Identity, Role};
pub use frame::{FrameDecoder, FrameError, MAX_FRAME, read_msg, write_msg};

/// What can go wrong setting up certificates, TLS or QUIC connections.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file a bundle needs is not there.
    #[error("missing {path} (create bundles with `prova certs`)")]
    MissingFile {
        /// The missing file.
        path: PathBuf,
    },
    /// Refusing to overwrite existing key material.
    #[error("{path} already exists; refusing to overwrite it")]
    AlreadyExists {
        /// The existing file or directory.
        path: PathBuf,
    },
    /// A PEM file holds nothing usable.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        message: String,
    },
    /// Certificate generation failed.
    #[error("certificate generation ({what}): {source}")]
    Rcgen {
        /// What was being generated.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: rcgen::Error,
    },
    /// A certificate that is not a valid prova certificate (unparseable, no role, …).
    #[error("bad certificate: {0}")]
    BadCertificate(String),
    /// A bundle name or subject alternative name that cannot be used.
    #[error("bad name {name:?}: {why}")]
    BadName {
        /// The name given.
        name: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// rustls refused a configuration (e.g. a key that does not match its certificate).
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built (e.g. no usable CA certificate).
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// The server-certificate verifier could not be built.
    #[error("server certificate verifier: {0}")]
    ServerVerifier(rustls::client::VerifierBuilderError),
    /// The crypto provider lacks QUIC's initial cipher suite.
    #[error("QUIC TLS configuration: {0}")]
    QuicCrypto(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
    /// A UDP socket could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A connection could not be started (bad server name, endpoint stopping, …).
    #[error("connecting: {0}")]
    Connect(#[from] quinn::ConnectError),
    /// A connection failed or was closed (handshake refused, peer gone, timed out, …).
    #[error("connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// The peer's identity is not the one required (e.g. a server that is not a coordinator).
    #[error("peer is {actual}, expected {expected}")]
    WrongRole {
        /// The role required.
        expected: Role,
        /// The role the peer's certificate carries.
        actual: Role,
    },
    /// A connection carries no peer certificate.
    #[error("the peer presented no certificate")]
    NoPeerCertificate,
    /// A bounded wait ran out.
    #[error("timed out waiting for {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
    },
}

impl TransportError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    pub(crate) fn rcgen(what: &'static str) -> impl FnOnce(rcgen::Error) -> Self {
        move |source| Self::Rcgen { what, source }
    }
}
