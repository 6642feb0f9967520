//! Generates the `loghaul.v1` types and gRPC stubs, and the encoded descriptor set that gRPC
//! reflection serves, from the repository's `proto/` with a pure-Rust parser, so building needs no
//! `protoc`.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let protos = [
        root.join("loghaul/v1/ingest.proto"),
        root.join("loghaul/v1/query.proto"),
    ];
    for proto in &protos {
        println!("cargo:rerun-if-changed={}", proto.display());
    }
    let file_descriptors = protox::compile(&protos, [&root])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
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
