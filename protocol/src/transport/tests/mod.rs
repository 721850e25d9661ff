//! Transport tests: certificates, mTLS handshakes (and refusals), framing, blob streams.

mod blob;
mod certs;
mod frame;
mod handshake;
