//! The farm's errors at the network edge, typed. What a peer is told (a `Reject` reason, a
//! `BlobAck::Refused` reason, a `CoordinatorReply::Error` message, a close frame) is the
//! error's `Display`, so the words on the wire are decided here and nowhere else.

use std::fmt::Display;

use prova_protocol::transport::FrameError;

use super::admission::Refusal;
use crate::cache::CacheError;

/// Why a `Hello` is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HelloRefusal {
    /// Another protocol version.
    #[error(
        "protocol version {got} is not supported (this coordinator speaks {ours}; {build})",
        ours = prova_protocol::wire::PROTOCOL_VERSION,
        build = super::server::BUILD_VERSION
    )]
    ProtocolVersion {
        /// The peer's.
        got: u32,
    },
    /// The claimed role is not the certificate's.
    #[error("the certificate of {name:?} is for role `{certified}`, but it claimed `{claimed}`")]
    RoleMismatch {
        /// The certificate's name.
        name: String,
        /// Its role.
        certified: String,
        /// The role the `Hello` claimed.
        claimed: String,
    },
    /// Coordinators do not connect to each other.
    #[error("a coordinator certificate cannot connect as a peer")]
    CoordinatorPeer,
    /// Over a connection bound.
    #[error(transparent)]
    Admission(#[from] Refusal),
}

/// What went wrong serving a peer: a blob stream, a session, a run's submission.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// Framing or the stream under it.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The cache (its thread or its store).
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A local file (an upload being staged, a blob being sent).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The farm's cache layer (a run's lookups).
    #[error(transparent)]
    Layer(#[from] crate::layers::LayerError),
    /// A staged upload's path could not be kept for the store to take.
    #[error(transparent)]
    Keep(#[from] tempfile::PathPersistError),
    /// The stream ended before its first frame.
    #[error("empty")]
    Empty,
    /// An upload over the per-blob bound.
    #[error("blob of {size} bytes is over the {max}-byte limit")]
    TooLarge {
        /// Its announced size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// An upload past a client certificate's blob quota.
    #[error(
        "an upload of {size} bytes would put certificate `{name}` past its blob quota of {quota} \
         bytes ({stored} bytes stored; `client_blob_quota` in the coordinator's config)"
    )]
    OverQuota {
        /// The certificate's name.
        name: String,
        /// The upload's size.
        size: u64,
        /// The quota.
        quota: u64,
        /// What it has stored.
        stored: u64,
    },
    /// A worker certificate that did not begin by registering.
    #[error(
        "{id:?} holds a worker certificate: it may only register as a worker, not use the client API"
    )]
    NotRegistered {
        /// The worker's name.
        id: prova_protocol::WorkerId,
    },
    /// A submitted run names an input blob its certificate may not read (or that is absent).
    #[error("input blob {blob} is not in the farm cache for certificate `{name}`: upload it first")]
    UnseenInput {
        /// The blob's short digest.
        blob: String,
        /// The certificate's name.
        name: String,
    },
    /// A submitted run's plan was refused (`submit::plan_of`'s reason).
    #[error("{0}")]
    Refused(String),
    /// An actor (the farm, a run) stopped; its message as kameo words it.
    #[error("{0}")]
    ActorGone(String),
}

impl EdgeError {
    /// An actor send that failed (`kameo::error::SendError`, generic over the message).
    pub fn actor(e: impl Display) -> Self {
        Self::ActorGone(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words a peer reads are the ones it always read (they were `format!`ed in place).
    #[test]
    fn refusals_read_as_they_did_on_the_wire() {
        let v = HelloRefusal::ProtocolVersion { got: 9 }.to_string();
        assert_eq!(
            v,
            format!(
                "protocol version 9 is not supported (this coordinator speaks {}; {})",
                prova_protocol::wire::PROTOCOL_VERSION,
                super::super::server::BUILD_VERSION
            )
        );
        let r = HelloRefusal::RoleMismatch {
            name: "w1".into(),
            certified: "worker".into(),
            claimed: "ci".into(),
        };
        assert_eq!(
            r.to_string(),
            "the certificate of \"w1\" is for role `worker`, but it claimed `ci`"
        );
        let q = EdgeError::OverQuota { name: "dev".into(), size: 10, quota: 5, stored: 3 };
        assert_eq!(
            q.to_string(),
            "an upload of 10 bytes would put certificate `dev` past its blob quota of 5 bytes \
             (3 bytes stored; `client_blob_quota` in the coordinator's config)"
        );
        let w = EdgeError::NotRegistered { id: prova_protocol::WorkerId("w1".into()) };
        assert_eq!(
            w.to_string(),
            "WorkerId(\"w1\") holds a worker certificate: it may only register as a worker, not \
             use the client API"
        );
        assert_eq!(
            EdgeError::TooLarge { size: 9, max: 8 }.to_string(),
            "blob of 9 bytes is over the 8-byte limit"
        );
        let u = EdgeError::UnseenInput { blob: "abcd".into(), name: "dev".into() };
        assert_eq!(
            u.to_string(),
            "input blob abcd is not in the farm cache for certificate `dev`: upload it first"
        );
    }
}
