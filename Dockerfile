# syntax=docker/dockerfile:1
# A static (musl) metrics-server binary in a distroless image, run as nobody (65534).
#   docker build -t metrics-server-rs:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/metrics-server-rs:<tag> .
# The build runs on the target platform (emulated under buildx for foreign arches).

FROM rust:1.95-bookworm AS build
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN case "${TARGETARCH:-amd64}" in \
      amd64) triple=x86_64-unknown-linux-musl ;; \
      arm64) triple=aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
 && rustup target add "$triple" \
 && echo "$triple" > /triple
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    triple="$(cat /triple)" \
 && cargo build --release --locked --target "$triple" -p apiserver --bin metrics-server \
 && cp "target/$triple/release/metrics-server" /metrics-server

FROM gcr.io/distroless/static-debian12:latest
COPY --from=build /metrics-server /metrics-server
USER 65534
ENTRYPOINT ["/metrics-server"]
