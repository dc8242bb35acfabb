#!/usr/bin/env bash
# Compares mcpgate with peer gateways that install from package registries, all
# fronting the same stdio echo backend. Not part of CI.
#
#   scripts/bench-peers.sh     -> bench/results/peers.json and bench/results/peers.md
#
# Peers are installed at pinned versions into a scratch folder outside the
# repository (BENCH_PEERS_DIR, default ~/.cache/mcpgate-bench-peers). Each runs in
# its stateful Streamable HTTP mode; the direct backend, mcpgate and the peers are
# measured in alternation in one run (stdio_echo, C = 1 and 16).
set -euo pipefail

SUPERGATEWAY_VERSION=4.0.0   # npm
MCP_PROXY_VERSION=0.13.0     # PyPI

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$TARGET" = /* ]] || TARGET="$ROOT/$TARGET"
SCRATCH="${BENCH_PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpgate-bench-peers}"
mkdir -p "$SCRATCH"

if [[ "$(cat "$SCRATCH/node_modules/supergateway/package.json" 2>/dev/null | grep -o "\"version\": \"$SUPERGATEWAY_VERSION\"")" == "" ]]; then
  echo "installing supergateway@$SUPERGATEWAY_VERSION into $SCRATCH"
  npm install --prefix "$SCRATCH" --no-audit --no-fund --silent "supergateway@$SUPERGATEWAY_VERSION"
fi
if ! "$SCRATCH/venv/bin/mcp-proxy" --version 2>/dev/null | grep -q "$MCP_PROXY_VERSION"; then
  echo "installing mcp-proxy==$MCP_PROXY_VERSION into $SCRATCH/venv"
  python3 -m venv "$SCRATCH/venv"
  "$SCRATCH/venv/bin/pip" install --quiet "mcp-proxy==$MCP_PROXY_VERSION"
fi

cargo build --release --locked --bins
cargo build --release --locked --manifest-path bench/Cargo.toml
ulimit -n 65536 2>/dev/null || true

exec "$TARGET/release/mcpgate-bench" suite --gateway "$TARGET/release/mcpgate" \
  --out "$ROOT/bench/results" --name peers --only stdio_echo \
  --peer "supergateway=$SCRATCH/node_modules/.bin/supergateway --stdio '{backend}' --outputTransport streamableHttp --stateful --port {port} --logLevel none" \
  --peer-version "supergateway=$SUPERGATEWAY_VERSION (npm)" \
  --peer "mcp-proxy=$SCRATCH/venv/bin/mcp-proxy --host 127.0.0.1 --port {port} --log-level WARNING -- {backend}" \
  --peer-version "mcp-proxy=$MCP_PROXY_VERSION (PyPI)" \
  "$@"
