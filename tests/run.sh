#!/usr/bin/env bash
# Runs sandguard's whole test suite on a fresh machine.
#
# What the tests need, and this script provides when it is missing:
#   - a Docker daemon: installs Debian's docker.io and starts `dockerd --bridge=none
#     --iptables=false` (no default bridge, no NAT: test containers reach no network);
#   - the test image sandguard-test/busybox:latest, built from a static busybox with
#     `docker import` (nothing is pulled);
# then runs `cargo test` (unit tests and the one integration-test binary).
# Extra arguments go to `cargo test`, e.g. `tests/run.sh -- stop_all`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'tests/run.sh: %s\n' "$*" >&2; }
apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

start_docker() {
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null 2>&1 || apt_install docker.io
  command -v docker >/dev/null 2>&1 || apt_install docker.io
  log "starting dockerd (no bridge, no iptables)"
  nohup dockerd --bridge=none --iptables=false >/tmp/sandguard-dockerd.log 2>&1 &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  log "dockerd did not come up; its log follows"
  tail -n 50 /tmp/sandguard-dockerd.log >&2 || true
  return 1
}

static_busybox() {
  for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then echo "$b"; return 0; fi
  done
  return 1
}

build_test_image() {
  docker image inspect sandguard-test/busybox:latest >/dev/null 2>&1 && return 0
  local bb root
  bb=$(static_busybox) || { apt_install busybox-static; bb=$(static_busybox); }
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/tmp"
  cp "$bb" "$root/bin/busybox"
  for applet in sh sleep true false cat echo kill ls; do ln -s busybox "$root/bin/$applet"; done
  log "importing sandguard-test/busybox:latest from $bb"
  tar -C "$root" -c . | docker import - sandguard-test/busybox:latest >/dev/null
  rm -rf "$root"
}

start_docker
build_test_image
exec cargo test --locked "$@"
