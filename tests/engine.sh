#!/usr/bin/env bash
# A Docker daemon and a local image, on a fresh Debian or Ubuntu machine: the one set-up step
# README's quick start runs first, and tests/run.sh too (it sources this file for its
# functions).
#
# Run as a command, it makes sure that:
#   - `docker` and `dockerd` are installed (Debian's `docker.io`, when missing);
#   - a Docker daemon answers; when none does it starts `dockerd --bridge=none
#     --iptables=false` (no default bridge, no NAT: containers reach no network), logging to
#     /tmp/sandguard-dockerd.log;
#   - the image sandguard-test/busybox:latest exists, made from a static busybox
#     (`busybox-static`) with `docker import`: nothing is pulled, so it works offline.
# What is there already is left as it is, so a second run does nothing. Installing and
# starting the daemon need root: run as root, or as a user who may `sudo` (then the daemon's
# socket belongs to that user's group, so the user's `docker` reaches it without sudo).
set -euo pipefail

: "${ENGINE_LOG_PREFIX:=tests/engine.sh}"
log() { printf '%s: %s\n' "$ENGINE_LOG_PREFIX" "$*" >&2; }

# The command that runs what needs root: nothing as root, sudo otherwise.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    log "root is needed for: $* (run as root, or install sudo)"
    return 1
  fi
}

# apt-get, one at a time: tests/run.sh installs packages from jobs that run side by side,
# and two apt-gets at once fail on dpkg's lock; flock(1) (util-linux, in every Debian) makes
# the second wait for the first, and DPkg::Lock::Timeout waits for anything else holding
# dpkg's lock (unattended upgrades) instead of failing at once.
apt_updated=
apt_get() {
  as_root flock /tmp/sandguard-apt.lock env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=600 "$@"
}
apt_install() {
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    apt_get update -qq
    apt_updated=1
  fi
  log "installing $*"
  apt_get install -y -qq "$@" >/dev/null
}

start_docker() {
  docker info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null 2>&1 || apt_install docker.io
  command -v docker >/dev/null 2>&1 || apt_install docker.io
  docker info >/dev/null 2>&1 && return 0 # the package started one
  local group=()
  [ "$(id -u)" -eq 0 ] || group=(--group "$(id -gn)")
  log "starting dockerd (no bridge, no iptables)"
  as_root true # any password prompt now, in the foreground
  as_root sh -c "nohup dockerd --bridge=none --iptables=false ${group[*]} \
    >/tmp/sandguard-dockerd.log 2>&1 &"
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  log "dockerd did not come up; its log follows"
  as_root tail -n 50 /tmp/sandguard-dockerd.log >&2 || true
  return 1
}

static_busybox() {
  for b in /bin/busybox /usr/bin/busybox; do
    if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then echo "$b"; return 0; fi
  done
  return 1
}

# The test image, on the engine DOCKER_HOST names (dockerd's by default).
build_test_image() {
  docker image inspect sandguard-test/busybox:latest >/dev/null 2>&1 && return 0
  local bb root
  bb=$(static_busybox) || { apt_install busybox-static; bb=$(static_busybox); }
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/tmp"
  cp "$bb" "$root/bin/busybox"
  for applet in sh sleep true false cat echo kill ls; do ln -s busybox "$root/bin/$applet"; done
  log "importing sandguard-test/busybox:latest from $bb${DOCKER_HOST:+ into $DOCKER_HOST}"
  tar -C "$root" -c . | docker import - sandguard-test/busybox:latest >/dev/null
  rm -rf "$root"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  start_docker
  build_test_image
fi
