# syntax=docker/dockerfile:1
# karpenter-rs container image: a static (musl) binary on distroless, running as non-root.
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/karpenter-rs:0.1.0 --push .
# Each platform builds natively (QEMU under buildx for the foreign one). TLS is rustls + ring,
# so the only C code is ring's, which musl-gcc compiles; no OpenSSL, no glibc at run time.

FROM rust:1.94-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
 && rustup target add "$target" \
 && cargo build --release --locked --bin karpenter-rs --target "$target" \
 && install -D -m 0755 "target/$target/release/karpenter-rs" /out/karpenter-rs

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/karpenter-rs /karpenter-rs
# distroless's nonroot user; the chart also sets runAsUser 65532 and a read-only root file system.
USER 65532:65532
EXPOSE 8443 8080 8081
ENTRYPOINT ["/karpenter-rs", "run"]
