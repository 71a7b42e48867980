#!/usr/bin/env bash
# Runs sandguard's whole test suite on a fresh machine.
#
# What the tests need, and this script provides when it is missing (tests/engine.sh):
#   - a Docker daemon: installs Debian's docker.io and starts `dockerd --bridge=none
#     --iptables=false` (no default bridge, no NAT: test containers reach no network);
#   - the test image sandguard-test/busybox:latest, built from a static busybox with
#     `docker import` (nothing is pulled);
# and the layers it runs, each of which must pass (a failure stops the run with its status):
#   D. the docs check (tests/docs/run.sh): the checker's own tests, then the checker on the
#      tree: conflict markers anywhere (lock files aside), and in README, the book, config/
#      and packaging/ dead paths, dead test names, dead links and anchors, and citations of
#      README or book sections that do not exist; Python's standard library only, first,
#      since it needs nothing built and takes about a second;
#   Q. README's first command as written (its quick start's first line, on a terminal by
#      script(1)), before anything here has started a daemon: its own set-up step
#      (tests/engine.sh) must start one; the terminal must be told of the reclaim. Its
#      `cargo run --release` is the run's one release build for Linux: the wheel (step 3)
#      and the npm packages (step 5) carry that binary;
#   B. the tests' one debug build (`cargo test --no-run`, the benchmarks' test build too),
#      with clippy as the workspace's compiler wrapper (RUSTC_WORKSPACE_WRAPPER=clippy-driver,
#      `-D warnings`): the Linux lint of every target comes with the build the tests run,
#      and every later debug build here (the engine layers, the emulator example) is that
#      one, reused;
#   1. `cargo test`: unit tests and the one integration-test binary; the vendors' Python SDKs
#      (`e2b`, `daytona`, `modal`, pinned) are installed first into their own venv, and its
#      interpreter exported as SANDGUARD_SDK_PYTHON, for the tests that drive the provider
#      emulators with them;
#   1b. the engine tests (tests/engines.txt: the kill matrix, the Docker proxy with the docker
#      CLI, ps/stop/sweep, networks and volumes) again, with the tests of Podman's pods
#      (tests/providers/docker/podman.rs, which step 1 skips), on rootless Podman: Debian's podman,
#      an unprivileged user made for it, its `podman system service` in a network namespace
#      of its own (start_rootless_podman says what this machine needs for it); then
#      `sandguard providers` run as that user finds the socket itself;
#   1c. the same engine tests (not Podman's pods) on rootless Docker: Debian's dockerd under
#      RootlessKit (`dockerd-rootless.sh`), run by an unprivileged user of its own, the same
#      way (start_rootless_docker);
#   3. the Python wheel: `maturin build --release` in the target directory of step Q, so that
#      it packs the binary Q built (nothing is compiled again); then `pytest tests/python`:
#      the wheel installed into a fresh venv, and guarded Python programs that create
#      containers and then die or exit;
#   5. the npm packages (`packaging/npm/build.sh`, `npm pack`) installed from their tarballs
#      into a scratch project, and `node --test tests/node`: guarded Node programs, with the
#      E2B SDK and testcontainers-node from npm;
# and beside them, in the background at the lowest CPU priority (nice 19), so that they take
# only what the layers above leave of the 2 cores (the integration tests mostly wait on
# daemons and timers):
#   0. `fuzz/run.sh`: every cargo-fuzz target for FUZZ_SECONDS (default 20) on its committed
#      corpus, on the stable toolchain (fuzz/run.sh says why 20 s and no sanitizer), built
#      under the target directory's `fuzz/`; from the end of B on;
#   2. the macOS targets, aarch64-apple-darwin and x86_64-apple-darwin (no Mac runs here):
#      one release build each, the wheel's (`maturin build --zig`, linked against the
#      stand-ins in packaging/darwin/frameworks), with clippy as the workspace's compiler
#      wrapper (`-D warnings`): the lint of the library and the binary for macOS comes with
#      the build that links them, in the target directory's `darwin/`; each wheel checked by
#      packaging/darwin/check (its tag, and a Mach-O executable for its CPU that loads only
#      system libraries, is signed ad hoc on arm64 and asks for the macOS the tag promises);
#      then the macOS platform packages (`@sandguard/darwin-arm64`, `@sandguard/darwin-x64`)
#      made from those binaries and checked the same way (os, cpu, no libc; the Mach-O
#      binary); from the end of B on;
#   2b. the book (book/, mdBook): `mdbook build book` into the target directory;
# and what only waits (apt, pip, npm, rustup, and starting rootless Podman and Docker) is
# started as early as it can be, beside whatever compiles: the Python tools, the vendors'
# SDKs, the macOS Rust targets, the npm vendors' packages and the tools built from crates.io
# from the start (after D); Debian's packages and the rootless engines after Q (Q's own
# set-up must find a machine this script has not prepared).
#
# Tools built from source (cargo-fuzz, mdbook), when not on PATH, are installed once per
# machine into a tool cache, $SANDGUARD_TOOL_CACHE (default ~/.cache/sandguard/tools), one
# directory per tool, version and rustc, and reused by every later run and clone on that
# machine; on a fresh machine they are built, beside Q. maturin, pytest and zig (PyPI's
# `ziglang`) come from PyPI into a venv under the target directory (kept, so a second run
# in a checkout installs nothing); the macOS Rust targets from rustup.
#
# Extra arguments go to `cargo test`, e.g. `tests/run.sh -- stop_all`;
# SANDGUARD_SKIP_FUZZ=1 skips step 0, SANDGUARD_SKIP_ENGINES=1 steps 1b and 1c,
# SANDGUARD_SKIP_DARWIN=1 step 2, SANDGUARD_SKIP_PYTHON=1 steps 3 and 5 and
# SANDGUARD_SKIP_NODE=1 step 5 (each says so, and the closing count says what was skipped).
# When CI is set, a skip is refused: CI runs every layer. For one subsystem's tests while
# working on it, tests/quick.sh is the faster loop (book/src/developing.md).
#
# Tests marked #[ignore] need root (giving a directory to another user); they run here, which
# needs root anyway, with `--include-ignored`.
#
# The run ends with a table of every layer's wall time, its build and its run apart, and
# whether it ran beside the others (then its time overlaps theirs), with the run's own wall
# time; then the last line adds up every layer, the docs check, fuzz targets, unit tests,
# integration tests, macOS targets linted, Python tests, the macOS packages' checks and Node
# tests: `tests/run.sh: N passed, N failed (…)`, also when a layer failed and the run stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

# start_docker, build_test_image, apt_install and log: the set-up README's quick start runs.
ENGINE_LOG_PREFIX=tests/run.sh
# shellcheck source=tests/engine.sh
. tests/engine.sh

# Rootless Podman for step 1b: Debian's podman, an unprivileged user made for it (subordinate
# ids from useradd, else added), and `podman system service` as that user, listening where
# rootless Podman listens, $XDG_RUNTIME_DIR/podman/podman.sock. Three things this machine
# lacks and a desktop login has: the runtime directory is a tmpfs of its own, as pam_systemd
# mounts it (Podman's rootless network namespace bind-mounts it, which fails on a plain
# directory of /run: "failed to mount runtime directory for rootless netns"); /dev/net/tun is
# 0666, Debian's mode (slirp4netns opens it as the user for every container on a network);
# and the service runs in a network namespace of its own with nothing but loopback, so that
# test containers reach no network, as dockerd's --bridge=none gives them. Prints the socket.
PODMAN_USER=sandguard-podman
start_rootless_podman() {
  local uid gid runtime socket
  command -v podman >/dev/null 2>&1 || apt_install podman
  command -v newuidmap >/dev/null 2>&1 || apt_install uidmap
  command -v slirp4netns >/dev/null 2>&1 || apt_install slirp4netns
  # A pod's infra container runs catatonit (Podman builds its pause image from it).
  command -v catatonit >/dev/null 2>&1 || apt_install catatonit
  id "$PODMAN_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$PODMAN_USER"
  grep -q "^$PODMAN_USER:" /etc/subuid 2>/dev/null || usermod --add-subuids 200000-265535 "$PODMAN_USER"
  grep -q "^$PODMAN_USER:" /etc/subgid 2>/dev/null || usermod --add-subgids 200000-265535 "$PODMAN_USER"
  uid=$(id -u "$PODMAN_USER") gid=$(id -g "$PODMAN_USER")
  runtime=/run/user/$uid socket=$runtime/podman/podman.sock
  mkdir -p "$runtime"
  mountpoint -q "$runtime" || mount -t tmpfs -o "mode=700,uid=$uid,gid=$gid" tmpfs "$runtime"
  [ -c /dev/net/tun ] && chmod 0666 /dev/net/tun
  if [ ! -S "$socket" ] || ! DOCKER_HOST=unix://$socket docker version >/dev/null 2>&1; then
    log "starting rootless Podman's service as $PODMAN_USER at $socket (no network)"
    # The socket's directory only its owner writes, whatever su's umask: sandguard skips a
    # socket found in a directory others can write (src/config/docker/sockets/trust.rs).
    unshare --net -- su -s /bin/sh "$PODMAN_USER" -c "cd && mkdir -p -m 700 $runtime/podman &&
      XDG_RUNTIME_DIR=$runtime exec podman system service --time=0 unix://$socket" \
      >/tmp/sandguard-podman.log 2>&1 &
    for _ in $(seq 1 120); do
      DOCKER_HOST=unix://$socket docker version >/dev/null 2>&1 && break
      sleep 0.5
    done
  fi
  if ! DOCKER_HOST=unix://$socket docker version >/dev/null 2>&1; then
    log "rootless Podman did not come up; its log follows"
    tail -n 50 /tmp/sandguard-podman.log >&2 || true
    return 1
  fi
  echo "$socket"
}

# Rootless Docker for step 1c: Debian's dockerd, run by `dockerd-rootless.sh` (docker.io's
# contrib) under RootlessKit as an unprivileged user made for it, listening where rootless
# Docker listens, $XDG_RUNTIME_DIR/docker.sock. As for Podman: a tmpfs runtime directory, a
# network namespace of its own with nothing but loopback (slirp4netns gives the daemon's
# namespace a NAT to it, so containers reach no network), and the daemon's own flags as
# start_docker's (--bridge=none --iptables=false). Prints the socket.
ROOTLESS_DOCKER_USER=sandguard-docker
start_rootless_docker() {
  local uid gid runtime socket script=/usr/share/docker.io/contrib/dockerd-rootless.sh
  [ -x "$script" ] || apt_install docker.io
  command -v rootlesskit >/dev/null 2>&1 || apt_install rootlesskit
  command -v newuidmap >/dev/null 2>&1 || apt_install uidmap
  command -v slirp4netns >/dev/null 2>&1 || apt_install slirp4netns
  id "$ROOTLESS_DOCKER_USER" >/dev/null 2>&1 ||
    useradd --create-home --shell /bin/sh "$ROOTLESS_DOCKER_USER"
  grep -q "^$ROOTLESS_DOCKER_USER:" /etc/subuid 2>/dev/null ||
    usermod --add-subuids 300000-365535 "$ROOTLESS_DOCKER_USER"
  grep -q "^$ROOTLESS_DOCKER_USER:" /etc/subgid 2>/dev/null ||
    usermod --add-subgids 300000-365535 "$ROOTLESS_DOCKER_USER"
  uid=$(id -u "$ROOTLESS_DOCKER_USER") gid=$(id -g "$ROOTLESS_DOCKER_USER")
  runtime=/run/user/$uid socket=$runtime/docker.sock
  mkdir -p "$runtime"
  mountpoint -q "$runtime" || mount -t tmpfs -o "mode=700,uid=$uid,gid=$gid" tmpfs "$runtime"
  [ -c /dev/net/tun ] && chmod 0666 /dev/net/tun
  if [ ! -S "$socket" ] || ! DOCKER_HOST=unix://$socket docker version >/dev/null 2>&1; then
    log "starting rootless Docker as $ROOTLESS_DOCKER_USER at $socket (no network)"
    unshare --net -- su -s /bin/sh "$ROOTLESS_DOCKER_USER" -c "cd &&
      XDG_RUNTIME_DIR=$runtime PATH=${script%/*}:/usr/sbin:/usr/bin:/sbin:/bin \
      DOCKERD_ROOTLESS_ROOTLESSKIT_NET=slirp4netns \
      exec dockerd-rootless.sh --bridge=none --iptables=false" \
      >/tmp/sandguard-rootless-docker.log 2>&1 &
    for _ in $(seq 1 120); do
      DOCKER_HOST=unix://$socket docker version >/dev/null 2>&1 && break
      sleep 0.5
    done
  fi
  if ! DOCKER_HOST=unix://$socket docker version >/dev/null 2>&1; then
    log "rootless Docker did not come up; its log follows"
    tail -n 50 /tmp/sandguard-rootless-docker.log >&2 || true
    return 1
  fi
  echo "$socket"
}

# The venv that holds the Python test tools (maturin, pytest, and zig for the macOS builds);
# not the one the tests install the wheel into (each test session makes a fresh one).
# zig: the version these builds were checked with.
ZIG_PIN='ziglang>=0.17,<0.18'
python_tools() {
  local venv=$1
  if [ ! -x "$venv/bin/pytest" ] || [ ! -x "$venv/bin/maturin" ] ||
    ! "$venv/bin/python" -m ziglang version >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv python3-pip
    python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$venv"; }
    log "installing maturin, pytest and zig ($ZIG_PIN) into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      'maturin>=1.5,<2' 'pytest>=7' "$ZIG_PIN"
  fi
}

# The vendors' own SDKs, pinned, in a venv of their own: the integration tests drive the
# project's provider emulators with them (tests/support/sdk.rs), so that every emulator is
# checked by a client nobody here wrote. Kept under the target directory: a second run
# installs nothing.
SDK_PINS=('e2b==2.63.0' 'daytona==0.226.1' 'modal==1.6.4')
sdk_python() {
  local venv=$1 stamp
  stamp="$venv/.pins-$(printf '%s ' "${SDK_PINS[@]}" | md5sum | cut -c1-12)"
  if [ ! -e "$stamp" ]; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv python3-pip
    rm -rf "$venv"
    python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$venv"; }
    log "installing the vendors' SDKs into $venv: ${SDK_PINS[*]}"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${SDK_PINS[@]}"
    touch "$stamp"
  fi
  echo "$venv/bin/python"
}

# The `sandguard` a wheel carries (its .data/scripts), written to OUT, executable.
wheel_binary() { # WHEEL OUT
  "$tools/bin/python" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if n.endswith(".data/scripts/sandguard"))
open(sys.argv[2], "wb").write(z.read(name))' "$1" "$2"
  chmod 755 "$2"
}

# The macOS targets (step 2, their wheels and npm packages). The wheel tag is the
# minimum macOS rustc builds for (and maturin's default MACOSX_DEPLOYMENT_TARGET), which
# packaging/darwin/check finds again in the linked binary; the npm platform is npm's
# process.platform-process.arch on that Mac.
DARWIN_TARGETS=(aarch64-apple-darwin x86_64-apple-darwin)
declare -A DARWIN_WHEEL_TAG=([aarch64-apple-darwin]=macosx_11_0_arm64
  [x86_64-apple-darwin]=macosx_10_12_x86_64)
declare -A DARWIN_NPM=([aarch64-apple-darwin]=darwin-arm64 [x86_64-apple-darwin]=darwin-x64)

# The macOS Rust targets, from rustup (step 2).
darwin_targets() {
  local installed t missing=()
  if ! command -v rustup >/dev/null 2>&1; then
    log "the macOS targets come from rustup, and there is no rustup here"
    return 1
  fi
  installed=$(rustup target list --installed)
  for t in "${DARWIN_TARGETS[@]}"; do
    grep -qx "$t" <<<"$installed" || missing+=("$t")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "rustup target add ${missing[*]}"
    rustup target add "${missing[@]}"
  fi
}

# LINT: the environment under which cargo compiles the workspace's own crates with
# clippy-driver instead of rustc (what `cargo clippy` itself sets), `-D warnings`: a build
# then lints what it compiles, so that no separate lint build is needed. Dependencies are
# compiled by rustc as ever, and the same for every build that runs under LINT.
lint_setup() {
  local driver
  driver=$(rustup which clippy-driver 2>/dev/null) || driver=$(command -v clippy-driver) ||
    { rustup component add clippy && driver=$(rustup which clippy-driver); } ||
    { log "clippy is missing (rustup component add clippy)"; return 1; }
  LINT=(RUSTC_WORKSPACE_WRAPPER="$driver" CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__)
}

# Step 2 for one target: the macOS wheel, built by maturin with zig as the linker (maturin sets
# MACOSX_DEPLOYMENT_TARGET and zig's target from it), the frameworks resolved against the
# stand-ins in packaging/darwin/frameworks, and clippy as the workspace's compiler (LINT): the
# one build of the target lints the library and the binary for macOS with `-D warnings`, and
# links them. Every target's code lives in the library or the binary (src/unix/macos.rs is
# the platform's file): the tests' code, the same on both platforms, is linted on Linux (step B).
# Then the wheel is checked. stdout: one line per check.
darwin_wheel() { # TARGET
  local t0 tag=${DARWIN_WHEEL_TAG[$1]} whl
  t0=$(now)
  log "building the Python wheel for $1 (maturin build --zig, clippy -D warnings)"
  if ! env "${LINT[@]}" CARGO_TARGET_DIR="$target/darwin" CARGO_ZIGBUILD_PYTHON_PATH="$tools/bin/python" \
    "$tools/bin/maturin" build --release --locked --target "$1" --zig --out "$target/darwin/wheels" \
    -- -C "link-arg=-F$PWD/packaging/darwin/frameworks" >&2; then
    echo "FAILED: $1: the wheel's build, or clippy in it"
    return 1
  fi
  stamp "macOS $1" build "$(since "$t0")"
  echo "linted: $1 (clippy -D warnings, in the wheel's build)"
  t0=$(now)
  whl=$(ls "$target/darwin/wheels"/sandguard-*-"$tag".whl) ||
    { echo "FAILED: no wheel tagged $tag"; return 1; }
  "$tools/bin/python" packaging/darwin/check wheel "$whl" "$1" "$tag"
  stamp "macOS $1" run "$(since "$t0")"
}

# Step 2 for one target: the npm platform package holding the macOS wheel's binary, built by
# packaging/npm/build.sh into OUT (not the Linux packages' directory, which the Node tests
# install from), then checked. stdout: one line per check.
darwin_npm_package() { # TARGET OUT
  local platform=${DARWIN_NPM[$1]} whl bin t0
  t0=$(now)
  whl=$(ls "$target/darwin/wheels"/sandguard-*-"${DARWIN_WHEEL_TAG[$1]}".whl) ||
    { echo "FAILED: no macOS wheel for $1 to take the binary from"; return 1; }
  bin=$2/unpacked/$1/sandguard
  mkdir -p "${bin%/*}"
  wheel_binary "$whl" "$bin"
  packaging/npm/build.sh "$2" "$bin" "$platform" >&2 ||
    { echo "FAILED: packaging/npm/build.sh did not build @sandguard/$platform"; return 1; }
  "$tools/bin/python" packaging/darwin/check npm "$(ls "$2"/sandguard-"$platform"-[0-9]*.tgz)" "$1"
  stamp "macOS $1" run "$(since "$t0")"
}

# The npm packages the Node tests install beside sandguard's: pinned (the E2B SDK, and
# testcontainers-node 11.x, since 12.0.4 crashes at require on Node 20).
NPM_PINS=('e2b@2.51.0' 'testcontainers@11.9.0')

# --- Every minute accounted for: each layer's parts, in $logs/times, a line each:
# LAYER, PART (set-up, build or run), wall seconds, and "beside" for what ran in the background.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }
stamp() { # LAYER PART SECONDS
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${BESIDE:-}" >>"$logs/times"
}
# The seconds of cargo's last "Finished … in 1m 54s" (or "in 43.24s") line in LOG; 0 if none.
cargo_took() { # LOG
  sed -n 's/.*Finished.* in \(\([0-9]*\)m \)\{0,1\}\([0-9.]*\)s.*$/\2 \3/p' "$1" | tail -n 1 |
    awk '{ s = NF == 2 ? $1 * 60 + $2 : $1 } END { printf "%.0f", s + 0 }'
}
# The table: a row per layer, its set-up, build and run apart; a part in parentheses ran
# beside the others, its time overlapping theirs. The whole run's wall time is its last row.
time_table() {
  [ -s "$logs/times" ] || return 0
  printf '\ntests/run.sh: where the time went, in wall seconds; (N) ran beside the rest, at nice 19 when it compiled or fuzzed\n'
  awk -F'\t' -v total="$(since "$run_started")" '
    !($1 in seen) { seen[$1] = 1; order[++n] = $1 }
    { t[$1, $2] += $3; if ($4 != "") beside[$1, $2] = 1 }
    function cell(l, part) {
      if (!((l, part) in t)) return "-"
      return ((l, part) in beside) ? "(" t[l, part] ")" : t[l, part]
    }
    END {
      printf "  %-44s %8s %8s %8s\n", "layer", "set-up", "build", "run"
      for (i = 1; i <= n; i++)
        printf "  %-44s %8s %8s %8s\n", order[i], cell(order[i], "set-up"),
          cell(order[i], "build"), cell(order[i], "run")
      printf "  %-44s %26s\n", "the whole run", total
    }' "$logs/times"
}

# --- Layers in the background: `beside NAME NICE FUNCTION ARGS…` runs FUNCTION in a
# subshell at NICE, its output kept in $logs/NAME.out; `join NAME` waits for it, shows that
# output and returns its status. A run that stops leaves no job behind (closing_line).
declare -A job_pid=()
beside() { # NAME NICE FUNCTION [ARGS...]
  local name=$1 nice=$2
  shift 2
  (
    [ "$nice" -eq 0 ] || renice -n "$nice" -p "$BASHPID" >/dev/null
    BESIDE=beside
    set -e
    "$@"
  ) >"$logs/$name.out" 2>&1 </dev/null &
  job_pid[$name]=$!
}
join() { # NAME
  local rc=0
  wait "${job_pid[$1]}" || rc=$?
  unset "job_pid[$1]"
  log "what $1 printed, beside the rest:"
  cat "$logs/$1.out"
  return "$rc"
}
# Until the job NAME has made FILE; fails when it ended without.
await() { # FILE NAME
  while [ ! -e "$1" ]; do
    kill -0 "${job_pid[$2]}" 2>/dev/null || [ -e "$1" ] || return 1
    sleep 1
  done
}
kill_tree() { # PID
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

# Every layer's counts, added up in the closing line.
passed=0
failed=0
parts=()
skipped=()
tally() { # NAME PASSED FAILED
  passed=$((passed + $2)); failed=$((failed + $3)); parts+=("$1 $2/$(($2 + $3))")
}
closing_line() {
  local rc=$? note pid
  for pid in "${job_pid[@]}"; do kill_tree "$pid"; done
  time_table
  note=$(printf '%s, ' "${parts[@]}")
  note=${note%, }
  [ -n "$note" ] || note="nothing ran"
  [ ${#skipped[@]} -eq 0 ] || note="$note; SKIPPED: ${skipped[*]}"
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1
    note="$note; a step failed before its tests could be counted"
  fi
  printf 'tests/run.sh: %d passed, %d failed (%s)\n' "$passed" "$failed" "$note"
}

# Counts `test result:` lines of cargo test output: "N passed; M failed".
cargo_counts() { # LOG
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       END { printf "%d %d\n", p, f }' "$1"
}

run_started=$(now)
logs=$(mktemp -d)
target=${CARGO_TARGET_DIR:-$PWD/target}
[[ $target = /* ]] || target=$PWD/$target
tools=$target/python-tools
trap closing_line EXIT

if [ -n "${CI:-}" ]; then
  for var in SANDGUARD_SKIP_FUZZ SANDGUARD_SKIP_ENGINES SANDGUARD_SKIP_DARWIN SANDGUARD_SKIP_PYTHON SANDGUARD_SKIP_NODE; do
    if [ -n "${!var:-}" ]; then
      log "$var is set, but CI is set too: CI runs every layer"
      exit 2
    fi
  done
fi
fuzz=1 engines=1 darwin=1 python=1 node=1
if [ "${SANDGUARD_SKIP_FUZZ:-}" = 1 ]; then
  log "SANDGUARD_SKIP_FUZZ=1: the fuzz targets are NOT run"
  skipped+=("fuzz") fuzz=
fi
if [ "${SANDGUARD_SKIP_ENGINES:-}" = 1 ]; then
  log "SANDGUARD_SKIP_ENGINES=1: the engine tests on rootless Podman and rootless Docker are NOT run"
  skipped+=("podman" "rootless-docker") engines=
fi
if [ "${SANDGUARD_SKIP_DARWIN:-}" = 1 ]; then
  log "SANDGUARD_SKIP_DARWIN=1: the macOS targets' builds, lint and packages are NOT run"
  skipped+=("darwin") darwin=
fi
if [ "${SANDGUARD_SKIP_PYTHON:-}" = 1 ]; then
  log "SANDGUARD_SKIP_PYTHON=1: the Python wheel and its tests, and the npm package and its tests (which carry the wheel's binary), are NOT run"
  skipped+=("python" "node") python= node=
elif [ "${SANDGUARD_SKIP_NODE:-}" = 1 ]; then
  log "SANDGUARD_SKIP_NODE=1: the npm package and its tests are NOT run"
  skipped+=("node") node=
fi


# Step D: the docs check (tests/docs/run.sh), whose last line counts its self-tests and the
# tree's check.
command -v python3 >/dev/null 2>&1 || apt_install python3
t0=$(now)
set +e
tests/docs/run.sh 2>&1 | tee "$logs/docs"
rc=${PIPESTATUS[0]}
set -e
stamp "docs check" run "$(since "$t0")"
read -r p f < <(sed -n 's/^docs check: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' \
  "$logs/docs") || true
tally "docs check" "${p:-0}" "${f:-1}"
[ "$rc" -eq 0 ] || exit "$rc"

# What only downloads, and the tools built from crates.io, beside step Q: the Python tools
# (maturin, pytest, zig), the vendors' SDKs (for step 1), the macOS Rust targets, and
# cargo-fuzz and mdbook (tests/tools.sh's tool cache). Nothing here installs a Debian package
# but python3-venv when a venv cannot be made without it (apt_install waits its turn).
tools_job() {
  local t0
  t0=$(now)
  python_tools "$tools"
  sdk_python "$target/sdk-venv" >"$logs/sdk-python"
  stamp "Python tools, vendors' SDKs" set-up "$(since "$t0")"
  if [ -n "$darwin" ]; then
    t0=$(now)
    darwin_targets
    stamp "macOS Rust targets" set-up "$(since "$t0")"
  fi
  t0=$(now)
  [ -z "$fuzz" ] || cached_tool cargo-fuzz "$CARGO_FUZZ_VERSION" cargo-fuzz >/dev/null
  cached_tool mdbook "$MDBOOK_VERSION" mdbook search >"$logs/mdbook-path"
  stamp "cargo-fuzz, mdbook (tool cache)" build "$(since "$t0")"
}
# shellcheck source=tests/tools.sh
. tests/tools.sh
beside tools 19 tools_job

# Step Q: README's first command, as written (the first command line of its quick start),
# before anything here started a daemon or made the image: on a fresh machine it is the
# command's own set-up (tests/engine.sh) that does. It runs on a terminal (script(1)), as a
# user types it, so that the closing line sandguard writes to the terminal can be read; the
# terminal stays open 5 s after the command ends, as a user's does, for the sidecar's line
# (it comes after the reclaim). The line must be README's comment under it, figures aside.
quick=$(awk '/<!-- readme: run quick-start -->/ { block = 1; next }
  block && /^```/ { if (open) exit; open = 1; next }
  open && !/^#/ && NF { print; exit }' README.md)
said=$(awk '/<!-- readme: run quick-start -->/ { block = 1; next }
  block && /^# sandguard: / { sub(/^# /, ""); print; exit }' README.md)
command -v script >/dev/null 2>&1 || apt_install bsdutils
log "README's first command: $quick"
t0=$(now)
set +e
script -qfec "$quick"$'\n'"sleep 5" /dev/null </dev/null 2>&1 | tr -d '\r' | tee "$logs/quick"
set -e
took=$(since "$t0") built=$(cargo_took "$logs/quick")
stamp "quick start (the release build)" build "$built"
stamp "quick start (the release build)" run "$((took - built))"
# The time in the line is the run's own: both sides are compared with each amount of time
# written as N ("3.1 sandbox-seconds", "docker 3.1 s)"), so README's 3.1 matches a run's 3.3;
# the count of sandboxes removed is compared as written.
numbers() { sed -E 's/[0-9]+(\.[0-9]+)? (sandbox-[a-z]+|[a-z]+\))/N \2/g'; }
if numbers <"$logs/quick" | grep -qxF "$(printf '%s\n' "$said" | numbers)"; then
  tally "quick start" 1 0
else
  log "README's first command did not print: $said"
  tally "quick start" 0 1
  exit 1
fi
start_docker
build_test_image

# Debian's packages the tests need, in one apt-get, then rootless Podman and rootless Docker
# started (steps 1b and 1c), beside step B: the fleet tests (tests/fleet/) start their own
# redis-server on a loopback port and read the store back with redis-cli; the metrics tests
# check a scrape with Prometheus' own `promtool check metrics`, and tests/sweep/dashboard.rs
# the Grafana dashboard's expressions with `promtool check rules` (Debian's prometheus);
# tests/fleet/ reads packaging/kubernetes/ with a YAML parser; systemd-analyze checks the
# units; Node and npm for step 5 and the macOS npm packages. $logs/packages says they are in.
system_job() {
  local t0 missing=() socket
  t0=$(now)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  command -v flock >/dev/null 2>&1 || missing+=(util-linux)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  python3 -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
  if [ -n "$engines" ]; then
    command -v podman >/dev/null 2>&1 || missing+=(podman)
    command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
    command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
    command -v catatonit >/dev/null 2>&1 || missing+=(catatonit)
    command -v rootlesskit >/dev/null 2>&1 || missing+=(rootlesskit)
  fi
  if [ -n "$node$darwin" ]; then
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
  fi
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
  stamp "Debian packages" set-up "$(since "$t0")"
  touch "$logs/packages"
  if [ -n "$node" ]; then
    # The vendors' npm packages, into the Node tests' project now; sandguard's own tarballs
    # join them in step 5.
    t0=$(now)
    rm -rf "$project" && mkdir -p "$project"
    printf '{ "name": "sandguard-node-tests", "private": true }\n' >"$project/package.json"
    (cd "$project" && npm install --no-audit --no-fund --silent "${NPM_PINS[@]}" >/dev/null)
    stamp "node tests" set-up "$(since "$t0")"
  fi
  if [ -n "$engines" ]; then
    t0=$(now)
    socket=$(start_rootless_podman)
    DOCKER_HOST=unix://$socket build_test_image
    echo "$socket" >"$logs/podman-socket"
    stamp "podman engine tests" set-up "$(since "$t0")"
    t0=$(now)
    socket=$(start_rootless_docker)
    DOCKER_HOST=unix://$socket build_test_image
    echo "$socket" >"$logs/rootless-docker-socket"
    stamp "rootless docker engine tests" set-up "$(since "$t0")"
  fi
}
project=$target/node-tests
beside system 0 system_job

# Step B: the tests' one debug build, linted by clippy as it compiles (LINT), benchmarks'
# test build included (`--all-targets`); every debug build below runs with LINT too, so that
# each finds this one up to date.
lint_setup
t0=$(now)
env "${LINT[@]}" cargo test --locked --all-targets --no-run
stamp "the tests' debug build (clippy -D warnings)" build "$(since "$t0")"

join tools || exit 1
SANDGUARD_SDK_PYTHON=$(cat "$logs/sdk-python")
export SANDGUARD_SDK_PYTHON

# Step 0, beside the rest: the fuzz targets, a bounded time each.
if [ -n "$fuzz" ]; then
  beside fuzz 19 fuzz/run.sh
fi

# Step 2, beside the rest: the macOS targets, a build (linted) and checks each, then their
# npm platform packages (once Node is in: $logs/packages).
darwin_job() {
  local t
  rm -rf "$target/darwin/wheels"
  for t in "${DARWIN_TARGETS[@]}"; do darwin_wheel "$t" || true; done
  await "$logs/packages" system
  rm -rf "$target/darwin/npm/unpacked" && rm -f "$target/darwin/npm"/sandguard-*.tgz
  for t in "${DARWIN_TARGETS[@]}"; do darwin_npm_package "$t" "$target/darwin/npm" || true; done
}
if [ -n "$darwin" ]; then
  beside darwin 19 darwin_job
fi

# Step 2b: the book (book/, the manual README links into), built with mdbook (the tool
# cache's, or the one on PATH); the output goes to the target directory, never into the
# checkout. About a second.
t0=$(now)
if "$(cat "$logs/mdbook-path")" build book -d "$target/book"; then
  tally "book" 1 0
else
  tally "book" 0 1
  log "mdbook build book FAILED"
  exit 1
fi
stamp "book" run "$(since "$t0")"

# Step 1: the Rust suite (ignored tests too: they need root, which this script has), once
# Debian's packages are in. The tests of what only Podman has
# (tests/providers/docker/podman.rs, pods) are left to step 1b.
await "$logs/packages" system || { join system; exit 1; }
args=("$@")
case " $* " in
  *" -- "*) args+=(--include-ignored --skip providers::docker::podman::) ;;
  *) args+=(-- --include-ignored --skip providers::docker::podman::) ;;
esac
t0=$(now)
set +e
env "${LINT[@]}" cargo test --locked "${args[@]}" 2>&1 | tee "$logs/cargo"
rc=${PIPESTATUS[0]}
set -e
stamp "cargo tests (unit, integration)" run "$(since "$t0")"
read -r p f < <(cargo_counts "$logs/cargo")
tally "cargo tests" "$p" "$f"
[ "$rc" -eq 0 ] || exit "$rc"

# Steps 1b and 1c: the engine tests again on a second and third engine, each run by an
# unprivileged user of its own: the tests tests/engines.txt names (those under providers::docker::podman:: on
# Podman only), from the binary step B built, with DOCKER_HOST at the engine's socket for the
# tests, their docker CLI and sandguard alike; then sandguard run as that user, with nothing
# naming a daemon, finds the engine's socket in its runtime directory itself (what it says
# must name WHY). A name that matches no test counts as a failure.
engine_layer() { # NAME USER SOCKET WHY EXCLUDE
  local name=$1 user=$2 socket=$3 why=$4 exclude=$5 rc p f runtime check found t0
  t0=$(now)
  mapfile -t engine_tests < <(grep -v -e '^#' -e '^$' ${exclude:+-e "$exclude"} tests/engines.txt)
  set +e
  DOCKER_HOST=unix://$socket env "${LINT[@]}" cargo test --locked --test integration -- --exact \
    --include-ignored "${engine_tests[@]}" 2>&1 | tee "$logs/$user"
  rc=${PIPESTATUS[0]}
  set -e
  read -r p f < <(cargo_counts "$logs/$user")
  if [ $((p + f)) -ne ${#engine_tests[@]} ]; then
    log "tests/engines.txt names ${#engine_tests[@]} tests for $name, and $((p + f)) ran"
    f=$((${#engine_tests[@]} - p)) rc=1
  fi
  # Discovery, as the user: no DOCKER_HOST, no context, and XDG_RUNTIME_DIR as a login sets
  # it. The binary is copied where the user can run it (the checkout may be private).
  runtime=/run/user/$(id -u "$user")
  check=$(mktemp /tmp/sandguard-engine-check.XXXXXX)
  install -m 755 "$target/debug/sandguard" "$check"
  found=$(env -u DOCKER_HOST -u DOCKER_CONTEXT -u DOCKER_CONFIG -u SANDGUARD_CONFIG \
    -u SANDGUARD_STATE_DIR HOME="$(getent passwd "$user" | cut -d: -f6)" \
    XDG_RUNTIME_DIR="$runtime" setpriv --reuid "$user" --regid "$user" \
    --init-groups "$check" providers --json 2>&1 || true)
  rm -f "$check"
  if grep -q "$why, the first engine socket found" <<<"$found" &&
    grep -q '"reachable": *true' <<<"$found"; then
    log "sandguard run as $user found $why at $socket"
    p=$((p + 1))
  else
    log "sandguard run as $user did not find $why: $found"
    f=$((f + 1)) rc=1
  fi
  stamp "$name engine tests" run "$(since "$t0")"
  tally "$name engine tests" "$p" "$f"
  [ "$rc" -eq 0 ] || exit "$rc"
}

# The rootless engines were started beside steps B and 1 (system_job); their start-up's log
# is shown here.
join system || exit 1
if [ -n "$engines" ]; then
  # Step 1b: rootless Podman, with the tests of its pods.
  engine_layer podman "$PODMAN_USER" "$(cat "$logs/podman-socket")" "rootless Podman's socket" ""
  # Step 1c: rootless Docker, without them.
  engine_layer "rootless docker" "$ROOTLESS_DOCKER_USER" "$(cat "$logs/rootless-docker-socket")" \
    "rootless Docker's socket" "^providers::docker::podman::"
fi

# What ran beside, counted: the fuzz targets and the macOS targets. Each layer's status
# stops the run as a layer in front would, after the Python and Node layers had their turn
# (their counts are in the closing line either way).
collect_beside() {
  local rc=0 p f
  if [ -n "$fuzz" ]; then
    join fuzz || rc=1
    built=$(sed -n 's/^fuzz\/run.sh: fuzz targets built in \([0-9]*\) s$/\1/p' "$logs/fuzz.out")
    all=$(sed -n 's/^fuzz\/run.sh: .* \([0-9]*\) s in all$/\1/p' "$logs/fuzz.out")
    BESIDE=beside stamp "fuzz targets" build "${built:-0}"
    BESIDE=beside stamp "fuzz targets" run "$(( ${all:-0} - ${built:-0} ))"
    tally "fuzz targets" "$(grep -c ': no crash in' "$logs/fuzz.out" || true)" \
      "$(grep -c ': FAILED after' "$logs/fuzz.out" || true)"
  fi
  if [ -n "$darwin" ]; then
    join darwin || rc=1
    p=$(grep -c '^linted: ' "$logs/darwin.out" || true)
    tally "macOS clippy" "$p" "$((${#DARWIN_TARGETS[@]} - p))"
    tally "macOS wheel and npm checks" "$(grep -c '^ok: ' "$logs/darwin.out" || true)" \
      "$(grep -c '^FAILED: ' "$logs/darwin.out" || true)"
    ! grep -q '^FAILED: ' "$logs/darwin.out" || rc=1
  fi
  return "$rc"
}

if [ -z "$python" ]; then
  collect_beside
  exit
fi

# Step 3: the wheel, as users install it. The target directory is step Q's, whose release
# build it packs: nothing is compiled again.
rm -rf "$target/wheels"
log "building the Python wheel (maturin build --release)"
t0=$(now)
CARGO_TARGET_DIR=$target "$tools/bin/maturin" build --release --locked --out "$target/wheels"
stamp "python tests" build "$(since "$t0")"
wheel=$(ls "$target"/wheels/sandguard-*.whl)

# Step 4: the helper's tests against that wheel (a fresh venv, the real Docker daemon). The
# Docker proxy's test also installs docker-py (`docker==7.2.0` from PyPI, pinned in
# tests/python/conftest.py) into that venv.
# -p no:cacheprovider: no .pytest_cache in the work tree.
t0=$(now)
set +e
SANDGUARD_WHEEL=$wheel "$tools/bin/pytest" -p no:cacheprovider -v tests/python 2>&1 | tee "$logs/pytest"
rc=${PIPESTATUS[0]}
set -e
stamp "python tests" run "$(since "$t0")"
# pytest's closing line, e.g. "==== 2 failed, 13 passed, 1 error in 30.1s ====".
summary=$(grep -E '^=+ .* in [0-9.]+s' "$logs/pytest" | tail -n 1)
read -r p f < <(awk '{ for (i = 2; i <= NF; i++) { w = $i; sub(/,$/, "", w)
    if (w == "passed") p += $(i-1); if (w == "failed" || w == "error" || w == "errors") f += $(i-1) } }
    END { printf "%d %d\n", p, f }' <<<"$summary")
tally "python tests" "$p" "$f"
python_rc=$rc

# Step 5: the npm packages, as users install them: `packaging/npm/build.sh` compiles the
# TypeScript helper and packs it (`npm pack`) with a platform package holding the wheel's own
# binary; both tarballs join the vendors' packages (NPM_PINS, installed beside step B) in a
# scratch project, and `node --test tests/node` runs guarded Node programs in it. The E2B
# tests serve the Rust suite's E2B emulator (examples/emulate.rs, from step B) on loopback.
if [ -z "$node" ]; then
  collect_beside
  exit "$python_rc"
fi
# node:test's --test-concurrency needs Node 20.10 or later (the package itself runs on 18).
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 10) ? 0 : 1)'; then
  log "the Node tests need Node 20.10 or later; this is $(node --version)"
  exit 1
fi
t0=$(now)
npm_out=$target/npm
rm -rf "$npm_out/unpacked" && mkdir -p "$npm_out/unpacked"
wheel_binary "$wheel" "$npm_out/unpacked/sandguard"
rm -f "$npm_out"/sandguard-*.tgz
packaging/npm/build.sh "$npm_out" "$npm_out/unpacked/sandguard"
log "installing the npm tarballs into $project"
(cd "$project" && npm install --no-audit --no-fund --silent "$npm_out"/sandguard-linux-*.tgz \
  "$npm_out"/sandguard-[0-9]*.tgz "${NPM_PINS[@]}" >/dev/null)
env "${LINT[@]}" cargo build --locked --example emulate
stamp "node tests" build "$(since "$t0")"
t0=$(now)
set +e
SANDGUARD_NODE_PROJECT=$project SANDGUARD_NPM_OUT=$npm_out \
  SANDGUARD_EMULATE=$target/debug/examples/emulate \
  node --test --test-reporter=tap --test-concurrency=1 --test-timeout=300000 tests/node/*.test.mjs 2>&1 |
  tee "$logs/node"
rc=${PIPESTATUS[0]}
set -e
stamp "node tests" run "$(since "$t0")"
# node:test's TAP summary: "# pass N", "# fail N".
tally "node tests" "$(awk '/^# pass / { print $3 }' "$logs/node" | tail -n 1)" \
  "$(awk '/^# fail / { print $3 }' "$logs/node" | tail -n 1)"
collect_beside || exit 1
[ "$python_rc" -eq 0 ] || exit "$python_rc"
exit "$rc"
