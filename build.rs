//! The server's descriptor set for gRPC reflection, compiled from `proto/` with a pure-Rust parser
//! (no `protoc`), so tools like grpcurl work against a running server without the `.proto` files.
//! The generated code itself lives in the `loghaul-proto` crate.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/loghaul/v1/ingest.proto",
        "proto/loghaul/v1/query.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let file_descriptors = protox::compile(protos, ["proto"])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("loghaul_descriptor.bin"),
        file_descriptors.encode_to_vec(),
    )?;
    Ok(())
}
