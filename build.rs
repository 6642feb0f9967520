//! Compiled from `proto/` with a pure-Rust parser (no `protoc`): the Loki push messages the HTTP
//! listener decodes. The `loghaul.v1` code and its descriptor set live in the `loghaul-proto`
//! crate.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/logproto/push.proto";
    println!("cargo:rerun-if-changed={proto}");
    let loki = protox::compile([proto], ["proto"])?;
    prost_build::Config::new().compile_fds(loki)?;
    Ok(())
}
