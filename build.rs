//! Compiled from `proto/` with a pure-Rust parser (no `protoc`): the server's descriptor set for
//! gRPC reflection, so tools like grpcurl work against a running server without the `.proto`
//! files, and the Loki push messages the HTTP listener decodes. The `loghaul.v1` code itself
//! lives in the `loghaul-proto` crate.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/loghaul/v1/ingest.proto",
        "proto/loghaul/v1/query.proto",
        "proto/logproto/push.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let loghaul = protox::compile(&protos[..2], ["proto"])?;
    std::fs::write(
        out_dir.join("loghaul_descriptor.bin"),
        loghaul.encode_to_vec(),
    )?;
    let loki = protox::compile(&protos[2..], ["proto"])?;
    prost_build::Config::new().compile_fds(loki)?;
    Ok(())
}
