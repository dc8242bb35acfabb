#!/usr/bin/env bash
# Runs mcpgate's benchmark: every scenario direct and through mcpgate in
# alternation, written to bench/results/latest.json and bench/results/latest.md.
#
#   scripts/bench.sh                  full run, release build (a few minutes on 2 cores)
#   scripts/bench.sh --smoke          tiny durations, debug build (reuses the test build);
#                                     checks only that every key is produced, not speed
#   scripts/bench.sh --only http_echo,stdio_echo   a subset (no key check)
#   scripts/bench.sh --instructions   only the instruction counts (release build, callgrind,
#                                     a few minutes): instructions per call, merged into
#                                     latest.{json,md}; profiles in bench/results/callgrind/.
#                                     Passes --n1 N --n2 N --repeat K --workers W --only KEYS through.
#
# Builds the binaries itself. CARGO_TARGET_DIR is honoured. A smoke run writes
# smoke.json/smoke.md so it never overwrites the published latest.* results.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$TARGET" = /* ]] || TARGET="$ROOT/$TARGET"
# bench/ is its own workspace: without this its build would go to bench/target.
export CARGO_TARGET_DIR="$TARGET"

PROFILE=release
EXTRA=()
INSTRUCTIONS=0
ARGS=()
for arg in "$@"; do
  if [[ "$arg" == --smoke ]]; then
    PROFILE=debug
    EXTRA=(--name smoke)
  fi
  if [[ "$arg" == --instructions ]]; then
    INSTRUCTIONS=1
  else
    ARGS+=("$arg")
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

# Instruction counts: the gateway under callgrind for two call counts,
# instructions per call = the difference / the difference of calls (bench/README.md).
# Usage: instructions_step PROFILE [mcpgate-bench instructions options...]
instructions_step() {
  local profile="$1"
  shift
  "$TARGET/$profile/mcpgate-bench" instructions --gateway "$TARGET/$profile/mcpgate" \
    --out "$ROOT/bench/results" "$@"
}

if [[ "$INSTRUCTIONS" == 1 ]]; then
  if [[ "$PROFILE" == debug ]]; then
    echo "bench.sh: --instructions counts the release build; drop --smoke" >&2
    exit 2
  fi
  instructions_step release "${ARGS[@]}"
  exit
fi

status=0
"$TARGET/$PROFILE/mcpgate-bench" suite --gateway "$TARGET/$PROFILE/mcpgate" \
  --out "$ROOT/bench/results" "${EXTRA[@]}" "${ARGS[@]}" || status=$?

if [[ "$PROFILE" == debug ]]; then
  # The smoke run checks the instruction path too, with tiny counts (~20 s).
  if command -v valgrind >/dev/null; then
    instructions_step debug --smoke --name smoke || status=$?
  else
    echo "bench.sh: valgrind not installed: instruction-count smoke skipped" >&2
  fi
fi
exit "$status"
