#!/usr/bin/env bash
# scripts/image-check.sh: builds the real Dockerfile without a Docker engine, then serves
# one MCP call from the built image. Run by scripts/test.sh (step
# `image`), so by CI.
#
#   1. tools      buildah and debootstrap (Debian packages), apt-get installed if missing
#   2. stand-ins  the registries of the Dockerfile's base images cannot be reached, so
#                 local images are made under the SAME names its FROM lines use:
#                   debian:R-slim       debootstrap --variant=minbase R from the Debian
#                                       mirror apt uses, imported with `buildah from scratch`
#                   rust:V-slim-R       that image + ca-certificates gcc libc6-dev wget
#                                       (what the official slim image adds) + this
#                                       machine's Rust toolchain V (rustup layout under
#                                       /usr/local/rustup, proxies in /usr/local/cargo/bin,
#                                       the official image's ENV)
#                 Made only when missing or when their recipe (label) changed.
#   3. context    the files git sees in this checkout (tracked, plus untracked files that
#                 are not ignored): in CI's clean clone, exactly HEAD. buildah applies the
#                 .dockerignore allow-list itself, as `docker build` does.
#   4. build      buildah bud --pull=never --layers --format docker: Cargo.toml and
#                 Cargo.lock alone (the stub dependency layer), then src/ and the configs:
#                 this is also the proof that `cargo build --release --locked` of the
#                 product needs neither tests/ nor bench/. Crates come from crates.io.
#   5. serve      the image's ENTRYPOINT + CMD (tini, mcpgate serve, the shipped
#                 /etc/mcpgate/mcpgate.toml with the built-in demo backend) inside the image
#                 (`buildah run`, image user and env); only the ports are moved to free
#                 ones. curl /healthz from inside the image, then initialize +
#                 notifications/initialized + tools/call demo__echo over HTTP; SIGTERM to
#                 tini by pid; exit status 0 and no process left behind.
#
# Needs root (buildah --isolation chroot) and network access to the Debian mirror and
# crates.io. Everything cached lives outside the clone, in IMAGE_CHECK_CACHE (default
# ${MCPGATE_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpgate}/image, as .ci/run):
# buildah's storage (stand-ins, layer cache, mcpgate:ci), one per storage driver. Its
# run state (mount bookkeeping, to be forgotten at reboot) is in /run/mcpgate-image-check.
#
# Storage driver: overlay when this kernel mounts it (tried with a scratch container),
# else vfs. vfs stores every layer as a full copy of the tree: this Dockerfile's ~20
# layers then take 15-20 GB and every step copies 1-3 GB; overlay stores what changed.
#
# Environment:
#   IMAGE_CHECK_CACHE    see above
#   IMAGE_CHECK_MIRROR   Debian mirror for debootstrap (default: the first Debian URI in
#                        /etc/apt/sources.list*, else http://deb.debian.org/debian)
#   IMAGE_CHECK_TAG      tag of the built image (default mcpgate:ci)
#   IMAGE_CHECK_STORAGE_DRIVER  overlay or vfs (default: overlay if it works, else vfs)
# Exit status: 0 only if the image built and served the call.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CACHE="${IMAGE_CHECK_CACHE:-${MCPGATE_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mcpgate}/image}"
TAG="${IMAGE_CHECK_TAG:-mcpgate:ci}"
# Bump when a stand-in recipe changes: stand-ins with another recipe label are rebuilt.
RECIPE=1
LABEL=org.mcpgate.image-check.recipe

RUNROOT=/run/mcpgate-image-check
export BUILDAH_ISOLATION=chroot
START=$SECONDS
phase() { printf '\n--- image-check: %s (%ss)\n' "$1" "$((SECONDS - START))"; }
die() {
  echo "image-check: $*" >&2
  exit 1
}

# Working containers and scratch directories of this run, removed on exit.
CONTAINERS=()
SCRATCH=()
SERVE_PID=""
cleanup() {
  local c d
  if [[ -n "$SERVE_PID" ]]; then kill -KILL "$SERVE_PID" 2>/dev/null || true; fi
  for c in "${CONTAINERS[@]}"; do "${B[@]}" rm "$c" >/dev/null 2>&1 || true; done
  for d in "${SCRATCH[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

# --- 1. tools -----------------------------------------------------------------------------

[[ "$(id -u)" == 0 ]] || die "needs root (buildah --isolation chroot); skip it with TEST_SKIP=image"

ensure_packages() {
  local missing=() cmd
  for cmd in buildah debootstrap; do command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd"); done
  ((${#missing[@]})) || return 0
  export DEBIAN_FRONTEND=noninteractive
  # Straight from the cached package lists first; refresh them only if that fails.
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

phase tools
ensure_packages
buildah --version
command -v curl >/dev/null || die "curl is needed on the host"

# storage DRIVER: the buildah options for that driver's storage.
storage() { echo --root "$CACHE/storage-$1" --runroot "$RUNROOT/$1" --storage-driver "$1"; }
# works DRIVER: a scratch container of that driver mounts and unmounts.
works() {
  local opts ctr
  read -ra opts < <(storage "$1")
  ctr="$(buildah "${opts[@]}" from --name mcpgate-image-check-probe scratch 2>/dev/null)" || return 1
  buildah "${opts[@]}" mount "$ctr" >/dev/null 2>&1 && buildah "${opts[@]}" umount "$ctr" >/dev/null 2>&1
  local rc=$?
  buildah "${opts[@]}" rm "$ctr" >/dev/null 2>&1 || true
  return $rc
}
DRIVER="${IMAGE_CHECK_STORAGE_DRIVER:-}"
if [[ -z "$DRIVER" ]]; then
  if works overlay; then DRIVER=overlay; else DRIVER=vfs; fi
fi
read -ra opts < <(storage "$DRIVER")
B=(buildah "${opts[@]}")
echo "storage: $DRIVER in $CACHE/storage-$DRIVER"

# --- 2. stand-ins -------------------------------------------------------------------------

# The Dockerfile's ARG defaults and the images of its FROM lines, with the ARGs expanded.
declare -A ARGS
while read -r name value; do ARGS[$name]="$value"; done < <(sed -n 's/^ARG \([A-Z_]*\)=\(.*\)$/\1 \2/p' Dockerfile)
expand() {
  local s="$1" k
  for k in "${!ARGS[@]}"; do s="${s//\$\{$k\}/${ARGS[$k]}}"; done
  [[ "$s" != *'$'* ]] || die "cannot expand '$1' (an ARG without a default?)"
  printf '%s\n' "$s"
}
BASES=()
STAGES=" "
while read -r image as stage; do
  if [[ "$STAGES" != *" $image "* ]]; then # not FROM an earlier stage
    BASES+=("$(expand "$image")")
  fi
  if [[ "${as,,}" == as ]]; then STAGES+="$stage "; fi
done < <(sed -n 's/^FROM \(--[^ ]* \)*//p' Dockerfile)
((${#BASES[@]})) || die "no FROM line in the Dockerfile"

# recipe_of IMAGE: the stand-in's recipe label, or nothing when the image is missing.
recipe_of() {
  "${B[@]}" inspect --type image "docker.io/library/$1" 2>/dev/null |
    python3 -c 'import json, sys; print((json.load(sys.stdin)["OCIv1"]["config"].get("Labels") or {}).get(sys.argv[1], ""))' \
      "$LABEL" 2>/dev/null || true
}

# The Debian mirror apt uses here (deb822 URIs: or one-line `deb` entries).
debian_mirror() {
  if [[ -n "${IMAGE_CHECK_MIRROR:-}" ]]; then
    echo "$IMAGE_CHECK_MIRROR"
    return
  fi
  local uri
  uri="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *\([^ ]*\/debian\/\{0,1\}\)$/\1/p' | head -1)"
  [[ -n "$uri" ]] || uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\/debian\/\{0,1\}\) .*/\2/p' | head -1)"
  echo "${uri:-http://deb.debian.org/debian}"
}

# make_debian RELEASE RECIPE: debian:RELEASE-slim, a minbase debootstrap with the official image's
# apt sources (the release, its updates and its security suite on deb.debian.org).
make_debian() {
  local release="$1" name="debian:$1-slim" mirror rootfs ctr mnt
  mirror="$(debian_mirror)"
  echo "making stand-in docker.io/library/$name: debootstrap --variant=minbase $release from $mirror"
  rootfs="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
  SCRATCH+=("$rootfs")
  debootstrap --variant=minbase "$release" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 ||
    { tail -30 "$rootfs.log"; die "debootstrap failed"; }
  rm -f "$rootfs.log" "$rootfs/etc/apt/sources.list" "$rootfs"/var/cache/apt/archives/*.deb
  rm -rf "$rootfs"/var/lib/apt/lists/*
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $release $release-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $release-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  "${B[@]}" rm "mcpgate-standin-debian-$release" >/dev/null 2>&1 || true
  ctr="$("${B[@]}" from --name "mcpgate-standin-debian-$release" scratch)"
  CONTAINERS+=("$ctr")
  mnt="$("${B[@]}" mount "$ctr")"
  cp -a "$rootfs/." "$mnt/"
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --cmd bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label "$LABEL=$2" "$ctr"
  "${B[@]}" commit --quiet --rm "$ctr" "docker.io/library/$name" >/dev/null
  rm -rf "$rootfs"
}

# toolchain VERSION: prints "SYSROOT FULL_VERSION" of a toolchain on this machine whose
# rustc is VERSION (1.95 matches 1.95.x, as the official image's tag does).
toolchain() {
  local want="$1" dir v
  for dir in "$(rustc --print sysroot 2>/dev/null)" "${RUSTUP_HOME:-$HOME/.rustup}"/toolchains/*; do
    [[ -x "$dir/bin/rustc" && -x "$dir/bin/cargo" ]] || continue
    v="$("$dir/bin/rustc" --version | awk '{print $2}')"
    if [[ "$v" == "$want" || "$v" == "$want".* ]]; then
      echo "$(readlink -f "$dir") $v"
      return
    fi
  done
}

# local_cas: a digest of the host's /usr/local/share/ca-certificates/*.crt, or nothing.
local_cas() {
  local f=(/usr/local/share/ca-certificates/*.crt)
  [[ -e "${f[0]}" ]] && cat "${f[@]}" | sha256sum | cut -c1-12
  return 0
}

# make_rust VERSION RELEASE RECIPE: rust:VERSION-slim-RELEASE, built like the official
# image: debian:RELEASE-slim + ca-certificates gcc libc6-dev wget + a minimal toolchain.
make_rust() {
  local version="$1" release="$2" name="rust:$1-slim-$2" sysroot full host ctr mnt tc p rustup
  read -r sysroot full < <(toolchain "$version") ||
    die "no Rust $version toolchain on this machine for the stand-in $name (rustup toolchain install $version)"
  host="$("$sysroot/bin/rustc" -vV | sed -n 's/^host: //p')"
  echo "making stand-in docker.io/library/$name: debian:$release-slim + gcc, libc6-dev + Rust $full from $sysroot"
  "${B[@]}" rm "mcpgate-standin-rust-$version" >/dev/null 2>&1 || true
  ctr="$("${B[@]}" from --pull=never --name "mcpgate-standin-rust-$version" "docker.io/library/debian:$release-slim")"
  CONTAINERS+=("$ctr")
  "${B[@]}" run "$ctr" -- sh -c 'apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates gcc libc6-dev wget >/dev/null &&
    rm -rf /var/lib/apt/lists/*'
  mnt="$("${B[@]}" mount "$ctr")"
  if [[ -n "$(local_cas)" ]]; then
    # This machine's own certificate authorities (a TLS-inspecting egress proxy, say):
    # cargo in the build stage must reach crates.io as the host's cargo does. Only the
    # build stand-in gets them; the runtime image is left as the official base makes it.
    cp /usr/local/share/ca-certificates/*.crt "$mnt/usr/local/share/ca-certificates/"
    "${B[@]}" run "$ctr" -- update-ca-certificates >/dev/null
  fi
  tc="$mnt/usr/local/rustup/toolchains/$full-$host"
  mkdir -p "$tc" "$mnt/usr/local/cargo/bin"
  # The minimal profile has no documentation.
  tar -C "$sysroot" --exclude=./share/doc -cf - . | tar -C "$tc" -xf -
  rustup="$(command -v rustup || true)"
  if [[ -n "$rustup" ]]; then
    cp "$(readlink -f "$rustup")" "$mnt/usr/local/cargo/bin/rustup"
    for p in cargo cargo-clippy cargo-fmt clippy-driver rust-gdb rust-gdbgui rust-lldb rustc rustdoc rustfmt; do
      ln -s rustup "$mnt/usr/local/cargo/bin/$p"
    done
    printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\n' "$full-$host" >"$mnt/usr/local/rustup/settings.toml"
  else
    for p in "$tc"/bin/*; do ln -s "../../rustup/toolchains/$full-$host/bin/${p##*/}" "$mnt/usr/local/cargo/bin/"; done
  fi
  chmod -R a+w "$mnt/usr/local/rustup" "$mnt/usr/local/cargo"
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env RUST_VERSION="$full" --label "$LABEL=$3" "$ctr"
  "${B[@]}" run "$ctr" -- sh -c 'cargo --version && rustc --version && gcc --version | head -1'
  "${B[@]}" commit --quiet --rm "$ctr" "docker.io/library/$name" >/dev/null
}

phase "stand-ins for ${BASES[*]}"
for base in "${BASES[@]}"; do
  base="${base#docker.io/}"
  base="${base#library/}"
  if [[ "$base" =~ ^debian:([a-z]+)-slim$ ]]; then
    release="${BASH_REMATCH[1]}"
    want="$RECIPE debian $release"
    [[ "$(recipe_of "$base")" == "$want" ]] || make_debian "$release" "$want"
  elif [[ "$base" =~ ^rust:([0-9.]+)-slim-([a-z]+)$ ]]; then
    version="${BASH_REMATCH[1]}" release="${BASH_REMATCH[2]}"
    [[ "$(recipe_of "debian:$release-slim")" == "$RECIPE debian $release" ]] || make_debian "$release" "$RECIPE debian $release"
    read -r _ full < <(toolchain "$version") || die "no Rust $version toolchain on this machine (rustup toolchain install $version)"
    want="$RECIPE rust $full $release$(cas="$(local_cas)" && [[ -n "$cas" ]] && echo " cas $cas")"
    [[ "$(recipe_of "$base")" == "$want" ]] || make_rust "$version" "$release" "$want"
  else
    die "no stand-in recipe for the base image $base (scripts/image-check.sh knows debian:R-slim and rust:V-slim-R)"
  fi
  echo "stand-in docker.io/library/$base: $(recipe_of "$base")"
done

# --- 3. context ---------------------------------------------------------------------------

phase context
CTX="$(mktemp -d "$CACHE/context.XXXXXX")"
SCRATCH+=("$CTX")
git -C "$ROOT" ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ -f "$f" || -L "$f" ]] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -C "$CTX" -xf -
echo "context: $(find "$CTX" -type f | wc -l) files ($(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo ', with local changes'))"

# --- 4. build -----------------------------------------------------------------------------

phase "build $TAG"
# --layers keeps every step's result as a cache image; the dependency layer (Cargo.toml
# and Cargo.lock only) is reused until they change. The build stage is tagged too (a
# first bud that stops after it): untagged, its chain would be pruned below.
BUD=(bud --pull=never --isolation chroot --format docker --layers --force-rm -f "$CTX/Dockerfile")
"${B[@]}" "${BUD[@]}" --target build -t "$TAG-build" "$CTX"
"${B[@]}" "${BUD[@]}" -t "$TAG" "$CTX"

# Every build leaves the previous build's images untagged: remove those that nothing
# builds on any more (the stand-ins and the chains of the two tags stay).
count() { "${B[@]}" images --all --quiet | wc -l; }
before=-1
while (($(count) != before)); do
  before=$(count)
  "${B[@]}" rmi --prune >/dev/null 2>&1 || break
done
echo "storage: $(du -sh "$CACHE/storage-$DRIVER" | cut -f1) in $CACHE/storage-$DRIVER"

# --- 5. serve -----------------------------------------------------------------------------

phase "serve one call from $TAG"
INSPECT="$("${B[@]}" inspect --type image "$TAG")"
# Checks the image's configuration; prints its ENTRYPOINT + CMD, one argument per line.
mapfile -t ARGV < <(python3 -c '
import json, sys
c = json.load(sys.stdin)["Docker"]["config"]
user = c.get("User")
assert user == "10001:10001", f"User {user!r}, want 10001:10001"
hc = (c.get("Healthcheck") or {}).get("Test") or []
assert any("/healthz" in a for a in hc), f"no /healthz HEALTHCHECK: {hc!r}"
entrypoint = c.get("Entrypoint") or [""]
assert entrypoint[0] == "/usr/bin/tini", f"ENTRYPOINT {entrypoint!r}"
print("\n".join((c.get("Entrypoint") or []) + (c.get("Cmd") or [])))
' <<<"$INSPECT")
((${#ARGV[@]})) || die "cannot read the image's ENTRYPOINT and CMD"
echo "entrypoint + cmd: ${ARGV[*]}"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
MPORT="$(free_port)"
LOG="$CACHE/serve.log"
"${B[@]}" rm mcpgate-image-check-serve >/dev/null 2>&1 || true # left by an interrupted run
ctr="$("${B[@]}" from --pull=never --name mcpgate-image-check-serve "$TAG")"
CONTAINERS+=("$ctr")
# MCPGATE_LISTEN keeps the image's 0.0.0.0 (the shipped config's non-loopback path); only
# the ports move, the machine is shared. TINI_SUBREAPER: tini is not PID 1 here.
"${B[@]}" run --isolation chroot --env "MCPGATE_LISTEN=0.0.0.0:$PORT" \
  --env "MCPGATE_METRICS_LISTEN=127.0.0.1:$MPORT" --env TINI_SUBREAPER=1 \
  "$ctr" -- "${ARGV[@]}" >"$LOG" 2>&1 &
SERVE_PID=$!

# descendants PID: every process below PID.
descendants() {
  local p
  for p in $(ps -o pid= --ppid "$1"); do
    echo "$p"
    descendants "$p"
  done
}

up=0
for _ in $(seq 1 150); do
  kill -0 "$SERVE_PID" 2>/dev/null || break
  if curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$PORT/healthz" 2>/dev/null; then
    up=1
    break
  fi
  sleep 0.2
done
((up)) || { cat "$LOG"; die "the image's mcpgate did not answer /healthz on port $PORT"; }
echo "healthz: up after $((SECONDS - START))s total"

# The image's own curl (the HEALTHCHECK's tool), from inside the image.
"${B[@]}" run --isolation chroot "$ctr" -- curl --fail --silent --show-error --max-time 2 \
  "http://127.0.0.1:$PORT/healthz" || die "curl inside the image failed"
echo

python3 - "http://127.0.0.1:$PORT/mcp" <<'EOF' || { cat "$LOG"; die "the MCP call through the image failed"; }
import json, sys, urllib.request

URL = sys.argv[1]
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def post(message, session=None):
    headers = dict(HEADERS)
    if session:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = "2025-06-18"
    req = urllib.request.Request(URL, json.dumps(message).encode(), headers, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read().decode()
        sid = resp.headers.get("Mcp-Session-Id")
        if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            datas = [l[5:].strip() for l in body.splitlines() if l.startswith("data:")]
            answers = [json.loads(d) for d in datas if d]
            answers = [a for a in answers if a.get("id") == message.get("id")]
            return resp.status, sid, answers[-1] if answers else None
        return resp.status, sid, json.loads(body) if body.strip() else None


status, sid, init = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "image-check", "version": "1"}}})
assert status == 200 and sid, (status, sid, init)
print("initialize:", init["result"]["serverInfo"], init["result"]["protocolVersion"])
status, _, _ = post({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
assert status == 202, status
status, _, call = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "demo__echo", "arguments": {"text": "from the image"}}}, sid)
assert status == 200, status
result = call["result"]
assert not result.get("isError"), result
texts = [c.get("text") for c in result["content"] if c.get("type") == "text"]
assert any("from the image" in (t or "") for t in texts), result
print("tools/call demo__echo:", texts)
EOF

# Stop it as `docker stop` would: SIGTERM to the entrypoint (tini), which forwards it.
mapfile -t PROCS < <(descendants "$SERVE_PID")
TINI=""
for p in "${PROCS[@]}"; do
  [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == */usr/bin/tini ]] && TINI="$p" && break
done
[[ -n "$TINI" ]] || { ps -o pid,ppid,args -p "${PROCS[*]:-0}" || true; die "no tini process under buildah run ($SERVE_PID)"; }
for p in "${PROCS[@]}"; do
  if [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == */usr/local/bin/mcpgate ]]; then
    uid="$(awk '/^Uid:/ {print $2}' "/proc/$p/status")"
    [[ "$uid" == 10001 ]] || die "mcpgate (pid $p) runs as uid $uid, want the image's 10001"
  fi
done
echo "SIGTERM to tini (pid $TINI); processes under buildah run: ${#PROCS[@]}, mcpgate as uid 10001"
kill -TERM "$TINI"
rc=0
for _ in $(seq 1 200); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$SERVE_PID" 2>/dev/null; then
  cat "$LOG"
  die "the image's mcpgate did not exit within 40 s of SIGTERM"
fi
wait "$SERVE_PID" || rc=$?
SERVE_PID=""
left=()
for p in "${PROCS[@]}"; do [[ -d "/proc/$p" ]] && left+=("$p"); done
((${#left[@]} == 0)) || { ps -o pid,ppid,args -p "${left[*]}" || true; kill -KILL "${left[@]}" 2>/dev/null; die "processes left after the stop: ${left[*]}"; }
((rc == 0)) || { cat "$LOG"; die "exit status $rc after SIGTERM, want 0"; }
grep -q '"mcpgate listening"\|mcpgate listening' "$LOG" || { cat "$LOG"; die "no 'mcpgate listening' line in the log"; }
echo "stopped: exit 0, no process left"
phase "ok: $TAG builds and serves"
