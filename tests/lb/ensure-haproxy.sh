#!/usr/bin/env bash
# tests/lb/ensure-haproxy.sh: installs HAProxy (Debian package `haproxy`) if it is not
# on PATH. Idempotent; returns at once when HAProxy is already there. Needs root (or
# sudo) only when it has to install. The package's own service is not used: the test
# starts HAProxy itself with deploy/haproxy/haproxy.cfg.
set -euo pipefail
# (haproxy -v | head -1 could die of SIGPIPE under pipefail; sed reads all of it.)

if command -v haproxy >/dev/null 2>&1; then
  haproxy -v | sed -n 1p
  exit 0
fi

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    echo "ensure-haproxy: haproxy is missing and this user cannot install it (not root, no sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
# An install straight from the cached package lists is the fast path; refresh them
# only if that fails (fresh machine, stale lists).
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends haproxy; then
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends haproxy
fi
haproxy -v | sed -n 1p
