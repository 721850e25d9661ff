//! Scheduling: the sans-IO [`core`] that decides what runs next.
pub mod core;
