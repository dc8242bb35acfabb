#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...]: runs every cargo-fuzz target in fuzz/ (or the
# named ones) for SECONDS each (default 60), starting from the committed seeds in
# fuzz/seeds/TARGET; new inputs go to $FUZZ_WORK/corpus/TARGET, crashes to
# $FUZZ_WORK/artifacts/TARGET. Exit 1 on the first target that crashes.
#
# libFuzzer needs nightly-only rustc flags (-Zsanitizer, and cargo fuzz passes -Z
# options); with the stable toolchain only, RUSTC_BOOTSTRAP=1 lets stable rustc take
# them. The fuzz crate is its own workspace (fuzz/Cargo.toml).
#
# Environment:
#   CARGO_TARGET_DIR  honoured: the fuzz build goes to $CARGO_TARGET_DIR/fuzz
#   FUZZ_WORK         working corpus and artifacts (default $CARGO_TARGET_DIR/fuzz-work)
#   FUZZ_SANITIZER    none (default: the crate denies unsafe code, so panics, asserts,
#                     timeouts and OOM are what is found) or address (ASan)
#   FUZZ_JOBS         libFuzzer -fork=N workers per target (default 1: one core)
#   FUZZ_ARGS         extra libFuzzer arguments
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECONDS_EACH="${1:-60}"
shift || true
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$CARGO_TARGET_DIR" = /* ]] || CARGO_TARGET_DIR="$ROOT/$CARGO_TARGET_DIR"
FUZZ_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"
FUZZ_WORK="${FUZZ_WORK:-$CARGO_TARGET_DIR/fuzz-work}"
SANITIZER="${FUZZ_SANITIZER:-none}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

if (($# > 0)); then
  TARGETS=("$@")
else
  mapfile -t TARGETS < <(cargo fuzz list --fuzz-dir fuzz)
fi

cargo fuzz build --fuzz-dir fuzz --target-dir "$FUZZ_TARGET_DIR" -s "$SANITIZER" -O

failed=0
for t in "${TARGETS[@]}"; do
  corpus="$FUZZ_WORK/corpus/$t"
  artifacts="$FUZZ_WORK/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  echo "==> fuzz $t for ${SECONDS_EACH}s"
  # shellcheck disable=SC2086 # FUZZ_ARGS is split on purpose
  if ! cargo fuzz run --fuzz-dir fuzz --target-dir "$FUZZ_TARGET_DIR" -s "$SANITIZER" -O "$t" \
    "$corpus" "fuzz/seeds/$t" -- \
    -max_total_time="$SECONDS_EACH" -artifact_prefix="$artifacts/" -print_final_stats=1 \
    -max_len=65536 -timeout=10 -rss_limit_mb=2048 ${FUZZ_JOBS:+-fork=$FUZZ_JOBS} ${FUZZ_ARGS:-}; then
    echo "fuzz: $t FAILED (inputs in $artifacts)"
    failed=1
    break
  fi
done
if ((failed)); then exit 1; fi
echo "fuzz: ${#TARGETS[@]} targets ran ${SECONDS_EACH}s each, no crash"
