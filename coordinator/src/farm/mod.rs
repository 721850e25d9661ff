//! Farm mode, coordinator side: the sans-IO placement and lease [`core`] (its time read
//! through [`clock`], which does not count the coordinator's own stalls), and the
//! [`actor`] that wraps it (worker links) and drives the runs clients submit (`runs`: each
//! run's state machine held by the farm actor); [`forward`], the one bounded forwarder
//! every queued hop goes through; the QUIC [`server`]
//! (mTLS, `Hello`, role authorisation, blob streams), its [`admission`] bounds (per-role
//! pools, per-identity connection and upload shares) and the per-peer sessions
//! ([`worker_session`], [`client_session`]). `flow_tests` runs the real farm actor
//! and its runs against an instant worker: large runs, concurrent runs and a stalled client must
//! not stall the farm. [`observe`]: counters and the book of runs the HTTP listener shows.
//! [`persist`]: the core's journal written to the store (leases a restarted coordinator
//! adopts, quarantined workers).

pub mod actor;
pub mod admission;
pub mod client_session;
pub mod clock;
pub mod core;
pub mod error;
pub mod forward;
pub mod observe;
pub mod persist;
mod runs;
pub mod server;
mod submit;
pub mod worker_session;

#[cfg(test)]
mod flow_tests;
