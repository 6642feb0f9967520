//! Compiled from `proto/` with a pure-Rust parser (no `protoc`): the Loki push messages the HTTP
//! listener decodes, and their descriptors, which the field numbers of the push walker are
//! checked against. The `loghaul.v1` code and its descriptor set live in the `loghaul-proto`
//! crate.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/logproto/push.proto";
    println!("cargo:rerun-if-changed={proto}");
    let loki = protox::compile([proto], ["proto"])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("logproto_descriptor.bin"),
        loki.encode_to_vec(),
    )?;
    prost_build::Config::new().compile_fds(loki)?;
    Ok(())
}
