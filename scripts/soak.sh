#!/usr/bin/env bash
# scripts/soak.sh [MINUTES]: soak and chaos run of a real gateway (default 1 minute):
# mixed load (calls, lists, SSE streams, session churn, resource subscriptions, a
# notification flood) while a stdio backend is SIGKILLed every 4 s and an HTTP backend
# (a separate `mcpgate demo-server --http`) is stalled with SIGSTOP/SIGCONT. Passes when
# RSS and open fds stay flat after warm-up (fitted drift within 2 %), no error except
# on calls to the faulted backends, no session sees another's messages, and no zombie
# is left. Prints a JSON report (tests/soak/soak.py). scripts/test.sh runs two minutes.
#
# Environment: CARGO_TARGET_DIR (honoured), PYTHON (default tests/.venv/bin/python).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$CARGO_TARGET_DIR" = /* ]] || CARGO_TARGET_DIR="$ROOT/$CARGO_TARGET_DIR"
cargo build --locked --bins --examples
export MCPGATE_BIN="$CARGO_TARGET_DIR/debug/mcpgate"
export FAKE_STDIO="$CARGO_TARGET_DIR/debug/examples/mcpgate-fake-stdio"
exec "${PYTHON:-tests/.venv/bin/python}" tests/soak/soak.py "${1:-1}"
