# syntax=docker/dockerfile:1
# mcpgate container image.
#
#   docker build -t mcpgate .
#   docker run --rm -p 8080:8080 -p 9464:9464 mcpgate                   # built-in demo backend
#   docker run --rm -p 8080:8080 -v "$PWD/my.toml:/etc/mcpgate/mcpgate.toml:ro" mcpgate
#
# Ports: 8080 MCP endpoint (/mcp) plus /healthz and /readyz; 9464 Prometheus /metrics.
# Config: /etc/mcpgate/mcpgate.toml (MCPGATE_CONFIG); MCPGATE_LISTEN overrides its
# server.listen. Stop with SIGTERM (`docker stop`); the gateway drains in-flight requests
# and stops its stdio children. PID 1 is tini, which forwards signals to mcpgate and
# reaps every orphaned process (stdio backends are child processes: none may linger
# as a zombie). Runs as uid/gid 10001, needs no capabilities and no writable root.
#
# stdio backends need their runtime (node, python, ...) in the image: build a derived
# image, see deploy/docker/Dockerfile.stdio-runtimes.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# ---------------------------------------------------------------------------- build
FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The official slim image has gcc and libc6-dev but not make, which tikv-jemalloc-sys
# (the allocator) runs to build jemalloc.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src

# Dependency caching with a stub crate rather than cargo-chef: the product's targets are
# src/lib.rs and src/main.rs, so stubbing those two files gives exactly the dependency
# build that the real one will reuse, without installing an extra tool or pulling a
# third-party image. This layer is rebuilt only when Cargo.toml or Cargo.lock change.
# Cargo loads every workspace member and needs the file of every target it builds: the
# test-only fake backend is an [[example]] (tests/ is not in the context, and
# `--bin mcpgate` builds no example), and bench/ is a workspace of its own. A new [[bin]]
# or workspace member in Cargo.toml would have to be stubbed here.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --bin mcpgate \
    && rm -rf src

COPY src ./src
COPY config ./config
COPY deploy/config/mcpgate.toml ./deploy/config/mcpgate.toml
# touch: the copied sources keep their (older) modification times, and cargo would take
# the stub build's outputs as up to date and ship the stub binary. The checks after the
# build fail for a stub (it prints no version) and for a binary that rejects the shipped
# configs.
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin mcpgate \
    && ./target/release/mcpgate --version | grep '^mcpgate ' \
    && ./target/release/mcpgate check-config --config config/mcpgate.toml \
    && ./target/release/mcpgate check-config --config deploy/config/mcpgate.toml

# ---------------------------------------------------------------------------- runtime
# Debian slim rather than distroless: same glibc as the build stage, a package manager
# for derived images that add node/python runtimes for stdio backends, tini to reap
# children, and curl for the HEALTHCHECK (the gateway has no HTTP client mode).
FROM debian:${DEBIAN_RELEASE}-slim AS runtime

# Not pinned to exact package versions on purpose: Debian's security updates replace
# them, and pinned versions disappear from the mirrors (the release is pinned instead).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 mcpgate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/mcpgate --create-home \
        --shell /usr/sbin/nologin mcpgate

COPY --from=build /src/target/release/mcpgate /usr/local/bin/mcpgate
COPY deploy/config/mcpgate.toml /etc/mcpgate/mcpgate.toml

# MCPGATE_METRICS_LISTEN: the metrics listener defaults to 127.0.0.1:9464, which a
# Prometheus outside the container cannot reach.
ENV MCPGATE_CONFIG=/etc/mcpgate/mcpgate.toml \
    MCPGATE_LISTEN=0.0.0.0:8080 \
    MCPGATE_METRICS_LISTEN=0.0.0.0:9464 \
    MCPGATE_LOG_FORMAT=json \
    RUST_LOG=info

USER 10001:10001
WORKDIR /home/mcpgate
EXPOSE 8080 9464

# Liveness only (process up and serving HTTP). Readiness (/readyz: backends initialized)
# is for load balancers and Kubernetes, which probe it themselves. If you move the MCP
# port with MCPGATE_LISTEN, override this check (`docker run --health-cmd ...`).
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["curl", "--fail", "--silent", "--show-error", "--max-time", "2", "--output", "/dev/null", "http://127.0.0.1:8080/healthz"]

STOPSIGNAL SIGTERM
# tini without -g: only mcpgate gets the signal, and it stops its stdio children itself
# (close stdin, then SIGTERM/SIGKILL of each child's own process group) in order.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/mcpgate"]
CMD ["serve"]
