#!/usr/bin/env bash
# Runs mcpgate's benchmark: every scenario direct and through mcpgate in
# alternation, written to bench/results/latest.json and bench/results/latest.md.
#
#   scripts/bench.sh                  full run, release build (a few minutes on 2 cores)
#   scripts/bench.sh --smoke          tiny durations, debug build (reuses the test build);
#                                     checks only that every key is produced, not speed
#   scripts/bench.sh --only http_echo,stdio_echo   a subset (no key check)
#
# Builds the binaries itself. CARGO_TARGET_DIR is honoured. A smoke run writes
# smoke.json/smoke.md so it never overwrites the published latest.* results.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$TARGET" = /* ]] || TARGET="$ROOT/$TARGET"

PROFILE=release
EXTRA=()
for arg in "$@"; do
  if [[ "$arg" == --smoke ]]; then
    PROFILE=debug
    EXTRA=(--name smoke)
  fi
done

# bench/ is its own workspace (bench/Cargo.lock); both builds share CARGO_TARGET_DIR.
if [[ "$PROFILE" == release ]]; then
  cargo build --release --locked --bins
  cargo build --release --locked --manifest-path bench/Cargo.toml
else
  cargo build --locked --bins
  cargo build --locked --manifest-path bench/Cargo.toml
fi

# 2,000 SSE streams need 2,000 sockets on each side.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

exec "$TARGET/$PROFILE/mcpgate-bench" suite --gateway "$TARGET/$PROFILE/mcpgate" \
  --out "$ROOT/bench/results" "${EXTRA[@]}" "$@"
