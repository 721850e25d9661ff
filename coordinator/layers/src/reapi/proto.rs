//! The REAPI client stubs: generated code committed in the `prova-reapi-proto` crate
//! (`coordinator/reapi-proto/`), shared with the worker's REAPI bot.

pub use prova_reapi_proto::{build, bytestream, google, longrunning, re};
