#!/usr/bin/env bash
# scripts/test.sh: mcpgate's one test command. Safe to run again and again, from any directory.
#
#   1. npm        npm ci --prefix tests (server-everything, conformance suite, oidc-provider), only when tests/node_modules is missing or its
#                 stamp does not match tests/package.json + package-lock.json
#   2. python     tests/.venv (created if missing), pip install -r tests/requirements.txt
#                 only when the lock changed (stamp)
#   3. build      cargo build --locked          -> $CARGO_TARGET_DIR/debug/mcpgate, then
#                 cargo build --locked --examples -> debug/examples/mcpgate-fake-stdio
#   4. redis      tests/cluster/ensure-redis.sh (apt-get install redis-server if missing);
#                 the shared-store tests (tests/cluster_store.rs) start their own servers
#   5. cargo-test cargo test --locked --no-fail-fast (every failing test binary is reported)
#   6. e2e        tests/.venv/bin/python -m pytest tests/e2e -v  (MCPGATE_BIN exported)
#   7. conformance scripts/conformance.sh      (official MCP conformance suite, 0.1.16: server
#                 scenarios, then client scenarios with mcpgate as the client; 0.2.0-alpha.12:
#                 the 2025-11-25 and 2026-07-28 requirement sets)
#   8. lb          tests/lb/ensure-haproxy.sh (apt-get install haproxy if missing; Redis
#                 comes from step redis), then tests/.venv/bin/python -m pytest tests/lb -v
#                 (two gateways behind the shipped deploy/haproxy/haproxy.cfg, and behind a round-robin variant
#                 without affinity for 2026-07-28 traffic; three gateways sharing Redis
#                 through a rolling restart and a kill -9, test_replica_faults.py)
#   9. lint-deploy scripts/lint-deploy.sh      (hadolint, yamllint, kubernetes-validate,
#                 ShellCheck, haproxy -c, promtool, check-config of the deploy configs)
#  10. bench-lint cargo fmt --check and cargo clippy --all-targets -D warnings of bench/
#                 (its own workspace: --manifest-path bench/Cargo.toml)
#  11. bench-smoke scripts/bench.sh --smoke   (every benchmark scenario with tiny durations;
#                 checks that every result key is produced, asserts nothing about speed)
#  12. fuzz-smoke  scripts/fuzz.sh 10         (every cargo-fuzz target for 10 s from its
#                 committed seeds; installs cargo-fuzz if missing; FUZZ_SMOKE_SECONDS)
#  13. image      scripts/image-check.sh      (buildah builds the Dockerfile against local
#                 stand-ins of its base images, then the image serves one tools/call;
#                 needs root; caches in ${MCPGATE_CI_CACHE:-~/.cache/mcpgate}/image)
#  13. soak       scripts/soak.sh 2           (two minutes of mixed load while backends are
#                 SIGKILLed and stalled: RSS and fds flat, no stray errors, no zombies;
#                 SOAK_MINUTES; the long run is `scripts/soak.sh 60`, not part of this)
#
# Environment:
#   CARGO_TARGET_DIR  honoured (default: target/ in the repository)
#   TEST_SKIP         comma-separated step names to skip, e.g. TEST_SKIP=conformance
#   PYTEST_ARGS       extra pytest arguments, e.g. PYTEST_ARGS="-k http_errors -x"
#   PYTHON            interpreter used to create tests/.venv (default: python3)
#   CONFORMANCE_*     see scripts/conformance.sh
# Exit status: 0 only if every step that ran passed. A summary is printed at the end.
# shellcheck disable=SC2317 # the step and trap functions are called indirectly
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$CARGO_TARGET_DIR" = /* ]] || CARGO_TARGET_DIR="$ROOT/$CARGO_TARGET_DIR"
export MCPGATE_BIN="$CARGO_TARGET_DIR/debug/mcpgate"
PYTHON="${PYTHON:-python3}"
VENV="$ROOT/tests/.venv"
SKIP=",${TEST_SKIP:-},"

LOGDIR="$(mktemp -d "${TMPDIR:-/tmp}/mcpgate-test.XXXXXX")"
trap 'rm -rf "$LOGDIR"' EXIT

sha() { cat "$@" | sha256sum | cut -d' ' -f1; }

# --- steps ------------------------------------------------------------------------------

step_npm() {
  local stamp="tests/node_modules/.mcpgate-stamp" want
  want="$(sha tests/package.json tests/package-lock.json)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "tests/node_modules is up to date with tests/package-lock.json"
    return 0
  fi
  npm ci --prefix tests --ignore-scripts --no-audit --no-fund || return 1
  echo "$want" >"$stamp"
}

step_python() {
  local stamp="$VENV/.mcpgate-stamp" want
  want="$(sha tests/requirements.txt)"
  if [[ -e "$VENV" ]] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "tests/.venv is broken (its interpreter moved?): recreating it"
    rm -rf "$VENV"
  fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV" || return 1
  fi
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "tests/.venv is up to date with tests/requirements.txt"
    return 0
  fi
  "$VENV/bin/python" -m pip install --disable-pip-version-check -r tests/requirements.txt || return 1
  "$VENV/bin/python" -m pip check || return 1
  echo "$want" >"$stamp"
}

# The fake stdio backend is an example (not a product binary): `cargo build` alone does
# not build it, and the e2e tests use it.
step_build() { cargo build --locked && cargo build --locked --examples; }

step_redis() { tests/cluster/ensure-redis.sh; }

step_cargo_test() { cargo test --locked --no-fail-fast; }

step_e2e() {
  # shellcheck disable=SC2086 # PYTEST_ARGS is split on purpose
  "$VENV/bin/python" -m pytest tests/e2e -v ${PYTEST_ARGS:-}
}

step_lb() {
  tests/lb/ensure-haproxy.sh || return 1
  "$VENV/bin/python" -m pytest tests/lb -v
}

step_lint_deploy() { scripts/lint-deploy.sh; }

step_bench_lint() {
  cargo fmt --check --manifest-path bench/Cargo.toml &&
    cargo clippy --locked --manifest-path bench/Cargo.toml --all-targets -- -D warnings
}

step_bench_smoke() { scripts/bench.sh --smoke; }

step_fuzz_smoke() { FUZZ_SANITIZER=none scripts/fuzz.sh "${FUZZ_SMOKE_SECONDS:-10}"; }
step_image() { scripts/image-check.sh; }
step_soak() { scripts/soak.sh "${SOAK_MINUTES:-2}"; }

step_conformance() {
  # Results of the last run stay in the target dir (outside the clone in CI), not in /tmp.
  export CONFORMANCE_OUT="${CONFORMANCE_OUT:-$CARGO_TARGET_DIR/conformance-results}"
  rm -rf "$CONFORMANCE_OUT"
  scripts/conformance.sh
}

# --- runner -----------------------------------------------------------------------------

NAMES=()
FAILURES=()
STATES=()  # ok | FAIL | skipped | not run
DETAILS=()
declare -A STATE
TOTAL_PASSED=0
TOTAL_FAILED=0
FAILED=0

# counts STEP LOG: prints "PASSED FAILED" read from a runner's closing lines, or nothing.
counts() {
  local log="$1"
  case "$2" in
    cargo-test)
      sed -n 's/.*test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" |
        awk '{p += $1; f += $2; n++} END {if (n) print p, f}'
      ;;
    e2e | lb)
      grep -E '^=+ .*( passed| failed| error| skipped| no tests ran).* in [0-9.]+s' "$log" | tail -1 |
        awk '{p = 0; f = 0; for (i = 2; i <= NF; i++) { w = $i; sub(/,$/, "", w);
               if (w == "passed") p = $(i-1); if (w == "failed" || w == "errors" || w == "error") f += $(i-1) }
             print p, f}'
      ;;
    conformance)
      sed -n 's/^conformance: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$log" | tail -1
      ;;
  esac
}

# run NAME FUNCTION [NEEDS...]: runs a step unless skipped or a step it needs failed.
run() {
  local name="$1" fn="$2" need rc start log nums detail=""
  shift 2
  NAMES+=("$name")
  if [[ "$SKIP" == *",$name,"* ]]; then
    STATE[$name]=skipped
    STATES+=(skipped)
    DETAILS+=("TEST_SKIP")
    return
  fi
  for need in "$@"; do
    if [[ "${STATE[$need]:-}" == FAIL || "${STATE[$need]:-}" == "not run" ]]; then
      STATE[$name]="not run"
      STATES+=("not run")
      DETAILS+=("because $need failed")
      FAILED=1
      TOTAL_FAILED=$((TOTAL_FAILED + 1))
      return
    fi
  done
  printf '\n==> %s\n' "$name"
  log="$LOGDIR/$name.log"
  start=$SECONDS
  "$fn" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  nums="$(counts "$log" "$name")"
  if [[ -n "$nums" ]]; then
    detail="${nums% *} passed, ${nums#* } failed, "
    TOTAL_PASSED=$((TOTAL_PASSED + ${nums% *}))
    TOTAL_FAILED=$((TOTAL_FAILED + ${nums#* }))
  fi
  if ((rc == 0)); then
    STATE[$name]=ok
    STATES+=(ok)
  else
    STATE[$name]=FAIL
    STATES+=(FAIL)
    FAILED=1
    # A failed step always counts at least one failure in the total.
    if [[ -z "$nums" || "${nums#* }" == 0 ]]; then TOTAL_FAILED=$((TOTAL_FAILED + 1)); fi
    detail+="exit $rc, "
  fi
  DETAILS+=("${detail}$((SECONDS - start))s")
  # The lines that name what failed, repeated under the summary: CI shows only the
  # end of a long log.
  if ((rc != 0)); then
    FAILURES+=("$name:")
    while IFS= read -r line; do FAILURES+=("    $line"); done < <(
      grep -E '^test .* FAILED$|^FAILED|^(tests/e2e|tests/lb)/.*(FAILED|ERROR)|^error: test failed|failed:|differs' "$log" |
        sort -u | head -20)
  fi
}

echo "mcpgate tests in $ROOT (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
run npm step_npm
run python step_python
run build step_build
run redis step_redis
run cargo-test step_cargo_test
run e2e step_e2e npm python build
run conformance step_conformance npm python build
run lb step_lb python build redis
run lint-deploy step_lint_deploy python
run bench-lint step_bench_lint
run bench-smoke step_bench_smoke build
run fuzz-smoke step_fuzz_smoke
run image step_image
run soak step_soak python build

printf '\n===== mcpgate test summary =====\n'
for i in "${!NAMES[@]}"; do
  printf '  %-12s %-8s %s\n' "${NAMES[$i]}" "${STATES[$i]}" "${DETAILS[$i]}"
done
if ((${#FAILURES[@]})); then
  echo 'what failed:'
  printf '  %s\n' "${FAILURES[@]}"
fi
if ((FAILED)); then echo "RESULT: FAILED"; else echo "RESULT: ok"; fi
printf 'total: %d passed, %d failed\n' "$TOTAL_PASSED" "$TOTAL_FAILED"
exit "$FAILED"
