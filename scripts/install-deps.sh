#!/usr/bin/env bash
# Installs what Hourglass's tests and demo need and a fresh machine may
# lack: redis-server with redis-cli (cluster creation) and redis-sentinel,
# etcd, gcc/make (the race detector needs cgo), and
# the tools deploy/'s checks run: systemd-analyze and docker-compose (its
# offline schema check only; no daemon is used), and chromium (headless,
# for the dashboard's browser test).
# With the argument "servers" it installs only what `make demo` runs:
# redis-server and etcd.
# Uses Debian's packages; run as root (or with sudo available).
set -euo pipefail

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v etcd >/dev/null || need+=(etcd-server)
if [ "${1:-}" != servers ]; then
  command -v redis-cli >/dev/null || need+=(redis-tools)                 # testenv: cluster creation
  command -v redis-sentinel >/dev/null || need+=(redis-sentinel)         # testenv: sentinel setups
  command -v gcc >/dev/null || need+=(gcc libc6-dev)
  command -v make >/dev/null || need+=(make)
  command -v systemd-analyze >/dev/null || need+=(systemd)               # deploy/: unit checks
  command -v docker-compose >/dev/null || need+=(docker-compose)         # deploy/: compose file check
  command -v chromium >/dev/null || need+=(chromium)                     # the dashboard's browser test
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian's packages start system-wide services where an init system runs;
# Hourglass's tests and demo start their own on free ports instead.
for svc in redis-server redis-sentinel etcd; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$svc" 2>/dev/null; then
    $SUDO systemctl stop "$svc" || true
  fi
done
