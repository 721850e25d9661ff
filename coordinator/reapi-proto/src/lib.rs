//! The REAPI client stubs, generated from the vendored protos (`coordinator/proto/`) and
//! committed in `gen/`, so building prova needs no `protoc` and no build script:
//! `coordinator/tests/reapi_codegen.rs` regenerates them (protox + tonic-build) and fails if
//! they differ. The action cache, the CAS, capabilities, execution and ByteStream
//! (`build.bazel.remote.execution.v2`, `google.bytestream`), operations
//! (`google.longrunning`) and the Remote Workers API's bots service
//! (`google.devtools.remoteworkers.v1test2`). A crate of its own so that the coordinator (the
//! REAPI cache layer and executor) and the worker (the REAPI bot) share it without depending
//! on each other. The module nesting mirrors the proto packages (the generated code refers
//! across them by `super::`).
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

/// `google.bytestream`, `google.rpc`, `google.longrunning` and
/// `google.devtools.remoteworkers.v1test2`.
pub mod google {
    pub mod bytestream {
        include!("gen/google.bytestream.rs");
    }
    pub mod rpc {
        include!("gen/google.rpc.rs");
    }
    pub mod longrunning {
        include!("gen/google.longrunning.rs");
    }
    pub mod devtools {
        pub mod remoteworkers {
            pub mod v1test2 {
                include!("gen/google.devtools.remoteworkers.v1test2.rs");
            }
        }
    }
}

pub use build::bazel::remote::execution::v2 as re;
pub use google::bytestream;
pub use google::devtools::remoteworkers::v1test2 as bots;
pub use google::longrunning;
