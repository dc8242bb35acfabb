#!/usr/bin/env bash
# tests/cluster/ensure-redis.sh: installs Redis (Debian package `redis-server`) if
# `redis-server` is not on PATH. Idempotent; returns at once when it is already there.
# Needs root (or sudo) only when it has to install. The package's own service is not
# used: each test starts its own redis-server on a free loopback port, without
# persistence, and stops it by pid (tests/common/redis.rs).
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  redis-server --version
  exit 0
fi

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    echo "ensure-redis: redis-server is missing and this user cannot install it (not root, no sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
# Install from the cached package lists first; refresh them only if that fails.
if ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends redis-server; then
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends redis-server
fi
# The package starts its own service where an init system runs; the tests do not use it.
if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
  "${SUDO[@]}" systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
redis-server --version
