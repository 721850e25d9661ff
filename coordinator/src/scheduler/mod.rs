//! Scheduling: the sans-IO [`core`] that decides what runs next; [`defaults`]: run-level
//! retries and timeouts.
pub mod core;
pub mod defaults;
