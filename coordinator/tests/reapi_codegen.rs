//! The REAPI client stubs are generated code committed in `reapi-proto/src/gen/` (the `prova-reapi-proto` crate), so a
//! build needs neither a build script nor a `protoc` binary. This test regenerates them from
//! the vendored protos (`proto/`) with protox — a protobuf compiler written in Rust — and
//! tonic-build, and fails if the committed files differ from what the protos give.
//!
//! After a deliberate change to a `.proto` file (or a tonic-build/prost-build upgrade),
//! regenerate the stubs and commit them:
//!
//! ```text
//! PROVA_BLESS=1 cargo test -p prova-coordinator --test reapi_codegen
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The vendored protos, relative to `proto/` (`reapi.proto` imports `status.proto` and
/// `longrunning.proto`; the well-known `google/protobuf/*` come with protox).
const PROTOS: [&str; 5] =
    ["reapi.proto", "bytestream.proto", "status.proto", "longrunning.proto", "bots.proto"];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn gen_dir() -> PathBuf {
    crate_dir().join("reapi-proto/src/gen")
}

fn blessing() -> bool {
    std::env::var_os("PROVA_BLESS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// The `*.rs` files of a directory, by name.
fn rust_files(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            files.insert(name, text);
        }
    }
    files
}

/// What tonic-build writes for the vendored protos (client stubs only: prova has no gRPC
/// server), compiled by protox rather than `protoc`.
fn generate(out: &Path) -> BTreeMap<String, String> {
    let proto = crate_dir().join("proto");
    let fds = protox::compile(PROTOS, [&proto]).expect("protox compiles coordinator/proto");
    tonic_build::configure()
        .build_server(false)
        .out_dir(out)
        .compile_fds(fds)
        .expect("tonic-build generates the stubs");
    rust_files(out)
}

#[test]
fn the_committed_reapi_stubs_are_what_the_protos_generate() {
    let out = tempfile::tempdir().expect("a temporary directory");
    let fresh = generate(out.path());
    assert_eq!(
        fresh.keys().collect::<Vec<_>>(),
        [
            "build.bazel.remote.execution.v2.rs",
            "google.bytestream.rs",
            "google.devtools.remoteworkers.v1test2.rs",
            "google.longrunning.rs",
            "google.rpc.rs"
        ],
        "one file per proto package (reapi-proto/src/lib.rs includes each)"
    );
    let dir = gen_dir();
    if blessing() {
        fs::create_dir_all(&dir).expect("create the gen directory");
        for (name, _) in rust_files(&dir) {
            if !fresh.contains_key(&name) {
                fs::remove_file(dir.join(&name)).expect("remove a stale stub");
            }
        }
        for (name, text) in &fresh {
            fs::write(dir.join(name), text).expect("write a stub");
        }
        eprintln!("PROVA_BLESS: wrote {} files to {}", fresh.len(), dir.display());
    }
    let committed = rust_files(&dir);
    for (name, text) in &fresh {
        let Some(old) = committed.get(name) else {
            panic!(
                "{name} is missing from {}: run PROVA_BLESS=1 (see this file's doc)",
                dir.display()
            )
        };
        if old != text {
            let diff = similar::TextDiff::from_lines(old, text);
            panic!(
                "{name} differs from what coordinator/proto generates; after a deliberate change \
                 run PROVA_BLESS=1 (see this file's doc)\n{}",
                diff.unified_diff().context_radius(2).header("committed", "generated")
            );
        }
    }
    let stale: Vec<_> = committed.keys().filter(|n| !fresh.contains_key(*n)).collect();
    assert!(stale.is_empty(), "stubs no proto generates: {stale:?}");
}
