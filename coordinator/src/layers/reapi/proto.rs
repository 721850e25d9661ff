//! The REAPI client stubs, generated from the vendored protos (coordinator/proto/) and
//! committed in `gen/`, so building prova needs no `protoc` and no build script:
//! `coordinator/tests/reapi_codegen.rs` regenerates them (protox + tonic-build) and fails if
//! they differ. The action cache, the CAS, capabilities and ByteStream. The module nesting
//! mirrors the proto packages (the generated code refers across them by `super::`).
#![allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]

/// `build.bazel.remote.execution.v2`.
pub mod build {
    pub mod bazel {
        pub mod remote {
            pub mod execution {
                pub mod v2 {
                    include!("gen/build.bazel.remote.execution.v2.rs");
                }
            }
        }
    }
}

/// `google.bytestream` and `google.rpc`.
pub mod google {
    pub mod bytestream {
        include!("gen/google.bytestream.rs");
    }
    pub mod rpc {
        include!("gen/google.rpc.rs");
    }
}

pub use build::bazel::remote::execution::v2 as re;
pub use google::bytestream;
