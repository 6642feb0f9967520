//! Compiles the protobuf contract with a pure-Rust parser, so building needs no `protoc`.

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
    // Server reflection serves this set, so tools like grpcurl work without the .proto files.
    std::fs::write(
        out_dir.join("loghaul_descriptor.bin"),
        file_descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // Attribute maps are only iterated and serialized: a BTreeMap needs no hashing and
        // serializes in key order, so stored JSON is deterministic.
        .btree_map(".")
        .compile_fds(file_descriptors)?;
    Ok(())
}
