//! Compiles the vendored REAPI protos (coordinator/proto/) into the REAPI layer's client
//! stubs with tonic-build (needs `protoc`: Debian's `protobuf-compiler`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_build::configure().build_server(false).compile_protos(
        &["proto/reapi.proto", "proto/bytestream.proto", "proto/status.proto"],
        &["proto"],
    )?;
    Ok(())
}
