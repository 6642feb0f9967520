# loghaul container image: a static-ish Rust binary on distroless (glibc, CA certificates,
# no shell), running as the "nonroot" user 65532.
#
#   docker build -t loghaul:0.1.0 .
#   docker run --rm -p 4317:4317 -p 9464:9464 -v loghaul-data:/data -e LOGHAUL_API_KEYS="$KEY=default" \
#     -e LOGHAUL_DATABASE_URL=sqlite:///data/loghaul.db loghaul:0.1.0
#
# Without API keys the service serves only clients on its own loopback, and to a container every
# client outside it is remote: give it keys (clients send one as x-api-key), or pass
# --allow-unauthenticated to serve everyone who can reach the port.
#
# The log console listens on the container's loopback by default, which a published port cannot
# reach. To open it from the host only, bind it to all of the container's interfaces and publish
# it on the host's loopback:
#
#   docker run --rm -p 4317:4317 -p 127.0.0.1:8080:8080 -v loghaul-data:/data -e LOGHAUL_API_KEYS="$KEY=default" \
#     -e LOGHAUL_DATABASE_URL=sqlite:///data/loghaul.db loghaul:0.1.0 serve --console-listen 0.0.0.0:8080

FROM rust:1-bookworm AS builder
WORKDIR /build

# Dependency layer: rebuilt only when the manifests, the build script, the protobuf
# contract, the contract and client crates or the migrations change. A placeholder crate
# compiles every dependency.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY crates ./crates
COPY migrations ./migrations
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked \
    && rm -rf src

# The real sources. Touch them so cargo never mistakes the placeholder build for them.
COPY src ./src
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked \
    && install -D -m 0755 target/release/loghaul /out/loghaul

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/loghaul /usr/local/bin/loghaul
USER 65532:65532
# gRPC ingest; HTTP /metrics, /healthz, /readyz; the log console (see above).
EXPOSE 4317 9464 8080
ENTRYPOINT ["/usr/local/bin/loghaul"]
CMD ["serve"]
