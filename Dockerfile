# syntax=docker/dockerfile:1
# The metrics-server binary, linked against glibc as every figure in BENCHMARKS.md was
# measured, in a distroless image with glibc (cc-debian12), run as nobody (65534).
#   docker build -t metrics-server-rs:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/metrics-server-rs:<tag> .
# The build runs on the target platform (emulated under buildx for foreign arches).
#
# Not musl: the same code linked statically against musl spent 1.5-1.9x the CPU per node
# scraping, 1.7-2.1x per 150,000-pod list and ~2x per HPA-shaped request, which at 10,000/s
# saturated the two cores (BENCHMARKS.md, "The image's C library"): musl's malloc is what
# the hot paths pay for. Both stages are Debian 12 (bookworm), so the glibc the binary is
# built against is the one it runs with.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The debug line tables (for profiles) stay in the build's target directory; the image gets
# the same code without them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p apiserver --bin metrics-server \
 && objcopy --strip-debug target/release/metrics-server /metrics-server

FROM gcr.io/distroless/cc-debian12:latest
COPY --from=build /metrics-server /metrics-server
USER 65534
ENTRYPOINT ["/metrics-server"]
