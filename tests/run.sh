#!/usr/bin/env bash
# Runs sandguard's whole test suite on a fresh machine.
#
# What the tests need, and this script provides when it is missing (tests/engine.sh):
#   - a Docker daemon: installs Debian's docker.io and starts `dockerd --bridge=none
#     --iptables=false` (no default bridge, no NAT: test containers reach no network);
#   - the test image sandguard-test/busybox:latest, built from a static busybox with
#     `docker import` (nothing is pulled);
# then runs, in this order (each step must pass, or the script stops with its status):
#   D. the docs check (tests/docs/run.sh): the checker's own tests, then the checker on the
#      tree: conflict markers anywhere (lock files aside), and in README, the book, config/
#      and packaging/ dead paths, dead test names, dead links and anchors, and citations of
#      README or book sections that do not exist; Python's standard library only, first,
#      since it needs nothing built and takes about a second;
#   Q. README's first command as written (its quick start's first line, on a terminal by
#      script(1)), before anything here has started a daemon: its own set-up step
#      (tests/engine.sh) must start one; the terminal must be told of the reclaim;
#   0. `fuzz/run.sh`: every cargo-fuzz target for FUZZ_SECONDS (default 30) on its committed
#      corpus, on the stable toolchain (it installs cargo-fuzz when missing, and builds under
#      the target directory's `fuzz/`); first, so that a test runner's summary stays last;
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
#   2. the macOS targets, aarch64-apple-darwin and x86_64-apple-darwin (no Mac runs here):
#      `cargo clippy --all-targets -- -D warnings` for each, with zig as ring's C compiler
#      (packaging/darwin/zig-cc), in the target directory's `darwin/` so that the Linux build
#      is not touched; one pass or failure per target;
#   2b. the book (book/, mdBook): `mdbook build book` into the target directory, mdbook from
#      crates.io (`cargo install --locked`, under the target directory) when not on PATH;
#   3. the Python wheel: `maturin build --release` (the `sandguard` binary plus the pure-Python
#      helper module), in the same target directory as step 1 so that only the release build
#      of the crate and its dependencies is added, and nothing when it is already built; then
#      the two macOS wheels (`maturin build --zig`, linked against the stand-ins in
#      packaging/darwin/frameworks), each checked by packaging/darwin/check: its tag, and a
#      Mach-O executable for its CPU that loads only system libraries, is signed ad hoc on
#      arm64 and asks for the macOS the tag promises;
#   4. `pytest tests/python`: the wheel installed into a fresh venv, and guarded Python
#      programs that create containers and then die or exit;
#   5. the npm packages (`packaging/npm/build.sh`, `npm pack`) installed from their tarballs
#      into a scratch project, and `node --test tests/node`: guarded Node programs, with the
#      E2B SDK and testcontainers-node from npm; first, the macOS platform packages
#      (`@sandguard/darwin-arm64`, `@sandguard/darwin-x64`) made from the macOS wheels'
#      binaries and checked the same way (os, cpu, no libc; the Mach-O binary).
# maturin, pytest and zig (PyPI's `ziglang`) come from PyPI into a venv under the target
# directory (kept, so a second run installs nothing); the macOS Rust targets from rustup.
# Extra arguments go to `cargo test`, e.g. `tests/run.sh -- stop_all`;
# SANDGUARD_SKIP_FUZZ=1 skips step 0, SANDGUARD_SKIP_ENGINES=1 steps 1b and 1c,
# SANDGUARD_SKIP_DARWIN=1 step 2 and the macOS packages of steps 3 and 5,
# SANDGUARD_SKIP_PYTHON=1 steps 3 to 5 and SANDGUARD_SKIP_NODE=1 step 5 (each says so, and
# the closing count says what was skipped).
# When CI is set, a skip is refused: CI runs every layer.
#
# Tests marked #[ignore] need root (giving a directory to another user); they run here, which
# needs root anyway, with `--include-ignored`.
#
# The last line adds up every layer, the docs check, fuzz targets, unit tests, integration
# tests, macOS targets linted, Python tests, the macOS packages' checks and Node tests:
# `tests/run.sh: N passed, N failed (…)`, also when a layer failed and the run stopped.
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

# The venv that holds the Python test tools (maturin, pytest); not the one the tests install
# the wheel into (each test session makes a fresh one).
python_tools() {
  local venv=$1
  if [ ! -x "$venv/bin/pytest" ] || [ ! -x "$venv/bin/maturin" ]; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv python3-pip
    python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$venv"; }
    log "installing maturin and pytest into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      'maturin>=1.5,<2' 'pytest>=7'
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

# The macOS targets (step 2, and the macOS packages of steps 3 and 5). The wheel tag is the
# minimum macOS rustc builds for (and maturin's default MACOSX_DEPLOYMENT_TARGET), which
# packaging/darwin/check finds again in the linked binary; the npm platform is npm's
# process.platform-process.arch on that Mac.
DARWIN_TARGETS=(aarch64-apple-darwin x86_64-apple-darwin)
declare -A DARWIN_WHEEL_TAG=([aarch64-apple-darwin]=macosx_11_0_arm64
  [x86_64-apple-darwin]=macosx_10_12_x86_64)
declare -A DARWIN_NPM=([aarch64-apple-darwin]=darwin-arm64 [x86_64-apple-darwin]=darwin-x64)
# zig as the macOS C compiler and linker: the version these builds were checked with.
ZIG_PIN='ziglang>=0.17,<0.18'

# What the macOS steps need: the Rust targets (rustup) and zig in the tools venv.
darwin_tools() { # VENV
  local venv=$1 installed t missing=()
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
  if ! "$venv/bin/python" -m ziglang version >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv python3-pip
    python3 -m venv "$venv" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$venv"; }
    log "installing zig ($ZIG_PIN) into $venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$ZIG_PIN"
  fi
}

# Step 2 for one target: clippy over the whole crate, tests included, with zig compiling
# ring's C through packaging/darwin/zig-cc (CC_<target>, which cc-rs reads).
darwin_clippy() { # TARGET
  local started
  started=$(date +%s)
  log "cargo clippy --target $1 (zig as the C compiler)"
  env "CC_${1//-/_}=$PWD/packaging/darwin/zig-cc" SANDGUARD_ZIG_PYTHON="$tools/bin/python" \
    CARGO_TARGET_DIR="$target/darwin" \
    cargo clippy --locked --all-targets --target "$1" -- -D warnings || return
  log "clippy for $1 passed in $(( $(date +%s) - started )) s"
}

# Step 3 for one target: the macOS wheel, built by maturin with zig as the linker (maturin sets
# MACOSX_DEPLOYMENT_TARGET and zig's target from it), the frameworks resolved against the
# stand-ins in packaging/darwin/frameworks; then checked. stdout: one line per check.
darwin_wheel() { # TARGET
  local started tag=${DARWIN_WHEEL_TAG[$1]} whl
  started=$(date +%s)
  log "building the Python wheel for $1 (maturin build --zig)"
  if ! CARGO_TARGET_DIR=$target/darwin CARGO_ZIGBUILD_PYTHON_PATH=$tools/bin/python \
    "$tools/bin/maturin" build --release --locked --target "$1" --zig --out "$target/darwin/wheels" \
    -- -C "link-arg=-F$PWD/packaging/darwin/frameworks" >&2; then
    echo "FAILED: the wheel for $1 was not built"
    return 1
  fi
  log "wheel for $1 built in $(( $(date +%s) - started )) s"
  whl=$(ls "$target/darwin/wheels"/sandguard-*-"$tag".whl) ||
    { echo "FAILED: no wheel tagged $tag"; return 1; }
  "$tools/bin/python" packaging/darwin/check wheel "$whl" "$1" "$tag"
}

# Step 5 for one target: the npm platform package holding the macOS wheel's binary, built by
# packaging/npm/build.sh into OUT (not the Linux packages' directory, which the Node tests
# install from), then checked. stdout: one line per check.
darwin_npm_package() { # TARGET OUT
  local platform=${DARWIN_NPM[$1]} whl bin
  whl=$(ls "$target/darwin/wheels"/sandguard-*-"${DARWIN_WHEEL_TAG[$1]}".whl) ||
    { echo "FAILED: no macOS wheel for $1 to take the binary from"; return 1; }
  bin=$2/unpacked/$1/sandguard
  mkdir -p "${bin%/*}"
  wheel_binary "$whl" "$bin"
  packaging/npm/build.sh "$2" "$bin" "$platform" >&2 ||
    { echo "FAILED: packaging/npm/build.sh did not build @sandguard/$platform"; return 1; }
  "$tools/bin/python" packaging/darwin/check npm "$(ls "$2"/sandguard-"$platform"-[0-9]*.tgz)" "$1"
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
  local rc=$? note
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
trap closing_line EXIT

# Counts `test result:` lines of cargo test output: "N passed; M failed".
cargo_counts() { # LOG
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       END { printf "%d %d\n", p, f }' "$1"
}

if [ -n "${CI:-}" ]; then
  for var in SANDGUARD_SKIP_FUZZ SANDGUARD_SKIP_ENGINES SANDGUARD_SKIP_DARWIN SANDGUARD_SKIP_PYTHON SANDGUARD_SKIP_NODE; do
    if [ -n "${!var:-}" ]; then
      log "$var is set, but CI is set too: CI runs every layer"
      exit 2
    fi
  done
fi

logs=$(mktemp -d)

# Step D: the docs check (tests/docs/run.sh), whose last line counts its self-tests and the
# tree's check.
command -v python3 >/dev/null 2>&1 || apt_install python3
set +e
tests/docs/run.sh 2>&1 | tee "$logs/docs"
rc=${PIPESTATUS[0]}
set -e
read -r p f < <(sed -n 's/^docs check: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' \
  "$logs/docs") || true
tally "docs check" "${p:-0}" "${f:-1}"
[ "$rc" -eq 0 ] || exit "$rc"

command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd
command -v flock >/dev/null 2>&1 || apt_install util-linux
# The fleet tests (tests/fleet/) start their own redis-server on a loopback port, with a
# password and no persistence, and stop it at the end; redis-cli reads the store back.
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
command -v redis-cli >/dev/null 2>&1 || apt_install redis-tools
# The metrics tests (tests/sweep/metrics.rs, tests/fleet/metrics.rs) check a scrape with
# Prometheus' own `promtool check metrics`, and tests/sweep/dashboard.rs the Grafana
# dashboard's expressions with `promtool check rules` (Debian's prometheus package).
command -v promtool >/dev/null 2>&1 || apt_install prometheus
# tests/fleet/ reads packaging/kubernetes/ with a YAML parser.
python3 -c 'import yaml' 2>/dev/null || apt_install python3-yaml

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
set +e
script -qfec "$quick"$'\n'"sleep 5" /dev/null </dev/null 2>&1 | tr -d '\r' | tee "$logs/quick"
set -e
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

# Step 0: the fuzz targets, a bounded time each.
if [ "${SANDGUARD_SKIP_FUZZ:-}" = 1 ]; then
  log "SANDGUARD_SKIP_FUZZ=1: the fuzz targets were NOT run"
  skipped+=("fuzz")
else
  set +e
  fuzz/run.sh 2>&1 | tee "$logs/fuzz"
  rc=${PIPESTATUS[0]}
  set -e
  tally "fuzz targets" "$(grep -c ': no crash in' "$logs/fuzz" || true)" \
    "$(grep -c ': FAILED after' "$logs/fuzz" || true)"
  [ "$rc" -eq 0 ] || exit "$rc"
fi

# The vendors' SDKs for the emulator checks in step 1.
SANDGUARD_SDK_PYTHON=$(sdk_python "${CARGO_TARGET_DIR:-$PWD/target}/sdk-venv")
export SANDGUARD_SDK_PYTHON

# Step 1: the Rust suite (ignored tests too: they need root, which this script has).
# The tests of what only Podman has (tests/providers/docker/podman.rs, pods) are left to step 1b.
args=("$@")
case " $* " in
  *" -- "*) args+=(--include-ignored --skip providers::docker::podman::) ;;
  *) args+=(-- --include-ignored --skip providers::docker::podman::) ;;
esac
set +e
cargo test --locked "${args[@]}" 2>&1 | tee "$logs/cargo"
rc=${PIPESTATUS[0]}
set -e
read -r p f < <(cargo_counts "$logs/cargo")
tally "cargo tests" "$p" "$f"
[ "$rc" -eq 0 ] || exit "$rc"

# Steps 1b and 1c: the engine tests again on a second and third engine, each run by an
# unprivileged user of its own: the tests tests/engines.txt names (those under providers::docker::podman:: on
# Podman only), from the binary step 1 built, with DOCKER_HOST at the engine's socket for the
# tests, their docker CLI and sandguard alike; then sandguard run as that user, with nothing
# naming a daemon, finds the engine's socket in its runtime directory itself (what it says
# must name WHY). A name that matches no test counts as a failure.
engine_layer() { # NAME USER SOCKET WHY EXCLUDE
  local name=$1 user=$2 socket=$3 why=$4 exclude=$5 rc p f runtime check found
  DOCKER_HOST=unix://$socket build_test_image
  mapfile -t engine_tests < <(grep -v -e '^#' -e '^$' ${exclude:+-e "$exclude"} tests/engines.txt)
  set +e
  DOCKER_HOST=unix://$socket cargo test --locked --test integration -- --exact \
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
  install -m 755 "${CARGO_TARGET_DIR:-$PWD/target}/debug/sandguard" "$check"
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
  tally "$name engine tests" "$p" "$f"
  [ "$rc" -eq 0 ] || exit "$rc"
}

if [ "${SANDGUARD_SKIP_ENGINES:-}" = 1 ]; then
  log "SANDGUARD_SKIP_ENGINES=1: the engine tests on rootless Podman and rootless Docker were NOT run"
  skipped+=("podman" "rootless-docker")
else
  # Step 1b: rootless Podman (start_rootless_podman), with the tests of its pods.
  socket=$(start_rootless_podman)
  engine_layer podman "$PODMAN_USER" "$socket" "rootless Podman's socket" ""
  # Step 1c: rootless Docker (start_rootless_docker), without them.
  socket=$(start_rootless_docker)
  engine_layer "rootless docker" "$ROOTLESS_DOCKER_USER" "$socket" \
    "rootless Docker's socket" "^providers::docker::podman::"
fi

# Step 2: the macOS targets, linted. Their own target directory ($target/darwin), so that
# nothing built for Linux above or below is built again; each target passes or fails alone.
target=${CARGO_TARGET_DIR:-$PWD/target}
tools=$target/python-tools
darwin=1
if [ "${SANDGUARD_SKIP_DARWIN:-}" = 1 ]; then
  log "SANDGUARD_SKIP_DARWIN=1: the macOS targets' lint and the macOS packages were NOT run"
  skipped+=("darwin")
  darwin=
else
  darwin_tools "$tools"
  p=0 f=0
  for t in "${DARWIN_TARGETS[@]}"; do
    if darwin_clippy "$t"; then p=$((p + 1)); else f=$((f + 1)); log "clippy FAILED for $t"; fi
  done
  tally "macOS clippy" "$p" "$f"
  [ "$f" -eq 0 ] || exit 1
fi

# Step 2b: the book (book/, the manual README links into), built with mdbook: the one on
# PATH, else the one installed from crates.io into $target/mdbook (kept, so a second run
# installs nothing). Built here, before the steps that a skip ends the run at, so that every
# run builds it; the output goes to the target directory, never into the checkout.
mdbook=$(command -v mdbook || true)
if [ -z "$mdbook" ]; then
  mdbook=$target/mdbook/bin/mdbook
  if [ ! -x "$mdbook" ]; then
    log "installing mdbook 0.4.52 from crates.io into $target/mdbook"
    cargo install --locked mdbook@0.4.52 --root "$target/mdbook"
  fi
fi
book_out=$target/book
[[ $book_out = /* ]] || book_out=$PWD/$book_out
if "$mdbook" build book -d "$book_out"; then
  tally "book" 1 0
else
  tally "book" 0 1
  log "mdbook build book FAILED"
  exit 1
fi

if [ "${SANDGUARD_SKIP_PYTHON:-}" = 1 ]; then
  log "SANDGUARD_SKIP_PYTHON=1: the Python wheel and its tests, and the npm package and its tests (which carry the wheel's binary), were NOT run"
  skipped+=("python" "node")
  [ -z "$darwin" ] || skipped+=("darwin-packages")
  exit 0
fi

# Step 3: the wheel, as users install it. The target directory is cargo's (step 1), so the
# dependencies it shares with the debug build are fetched once; only the release build is new.
python_tools "$tools"
rm -rf "$target/wheels"
log "building the Python wheel (maturin build --release)"
started=$(date +%s)
CARGO_TARGET_DIR=$target "$tools/bin/maturin" build --release --locked --out "$target/wheels"
log "wheel built in $(( $(date +%s) - started )) s"
wheel=$(ls "$target"/wheels/sandguard-*.whl)

# The macOS wheels: a release build per target in $target/darwin, and packaging/darwin/check's
# lines (the tag; the binary's CPU, libraries, signature and minimum macOS) counted.
if [ -n "$darwin" ]; then
  rm -rf "$target/darwin/wheels"
  set +e
  for t in "${DARWIN_TARGETS[@]}"; do
    darwin_wheel "$t" | tee -a "$logs/darwin-wheels"
  done
  set -e
  tally "macOS wheel checks" "$(grep -c '^ok: ' "$logs/darwin-wheels" || true)" \
    "$(grep -c '^FAILED: ' "$logs/darwin-wheels" || true)"
  ! grep -q '^FAILED: ' "$logs/darwin-wheels" || exit 1
fi

# Step 4: the helper's tests against that wheel (a fresh venv, the real Docker daemon). The
# Docker proxy's test also installs docker-py (`docker==7.2.0` from PyPI, pinned in
# tests/python/conftest.py) into that venv.
# -p no:cacheprovider: no .pytest_cache in the work tree.
set +e
SANDGUARD_WHEEL=$wheel "$tools/bin/pytest" -p no:cacheprovider -v tests/python 2>&1 | tee "$logs/pytest"
rc=${PIPESTATUS[0]}
set -e
# pytest's closing line, e.g. "==== 2 failed, 13 passed, 1 error in 30.1s ====".
summary=$(grep -E '^=+ .* in [0-9.]+s' "$logs/pytest" | tail -n 1)
read -r p f < <(awk '{ for (i = 2; i <= NF; i++) { w = $i; sub(/,$/, "", w)
    if (w == "passed") p += $(i-1); if (w == "failed" || w == "error" || w == "errors") f += $(i-1) } }
    END { printf "%d %d\n", p, f }' <<<"$summary")
tally "python tests" "$p" "$f"
python_rc=$rc

# Step 5: the npm packages, as users install them: `packaging/npm/build.sh` compiles the
# TypeScript helper and packs it (`npm pack`) with a platform package holding the wheel's own
# binary; both tarballs are installed into a scratch project with the vendors' packages from
# npm (pinned: the E2B SDK, and testcontainers-node 11.x, since 12.0.4 crashes at require on
# Node 20), and `node --test tests/node` runs guarded Node programs in it. The E2B tests
# serve the Rust suite's E2B emulator (examples/emulate.rs) on loopback.
if [ "${SANDGUARD_SKIP_NODE:-}" = 1 ]; then
  log "SANDGUARD_SKIP_NODE=1: the npm package and its tests were NOT run"
  skipped+=("node")
  [ -z "$darwin" ] || skipped+=("darwin-npm")
  exit "$python_rc"
fi
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
# node:test's --test-concurrency needs Node 20.10 or later (the package itself runs on 18).
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 10) ? 0 : 1)'; then
  log "the Node tests need Node 20.10 or later; this is $(node --version)"
  exit 1
fi
npm_out=$target/npm
rm -rf "$npm_out/unpacked" && mkdir -p "$npm_out/unpacked"
wheel_binary "$wheel" "$npm_out/unpacked/sandguard"
rm -f "$npm_out"/sandguard-*.tgz
packaging/npm/build.sh "$npm_out" "$npm_out/unpacked/sandguard"
# The macOS platform packages, from the macOS wheels' binaries, checked; in a directory of
# their own, so that the Linux packages' directory holds what the Node tests install.
if [ -n "$darwin" ]; then
  rm -rf "$target/darwin/npm/unpacked" && rm -f "$target/darwin/npm"/sandguard-*.tgz
  set +e
  for t in "${DARWIN_TARGETS[@]}"; do
    darwin_npm_package "$t" "$target/darwin/npm" | tee -a "$logs/darwin-npm"
  done
  set -e
  tally "macOS npm checks" "$(grep -c '^ok: ' "$logs/darwin-npm" || true)" \
    "$(grep -c '^FAILED: ' "$logs/darwin-npm" || true)"
  ! grep -q '^FAILED: ' "$logs/darwin-npm" || exit 1
fi
project=$target/node-tests
rm -rf "$project" && mkdir -p "$project"
printf '{ "name": "sandguard-node-tests", "private": true }\n' >"$project/package.json"
log "installing the npm tarballs and the vendors' packages into $project"
(cd "$project" && npm install --no-audit --no-fund --silent "$npm_out"/sandguard-linux-*.tgz \
  "$npm_out"/sandguard-[0-9]*.tgz e2b@2.51.0 testcontainers@11.9.0 >/dev/null)
cargo build --locked --example emulate
set +e
SANDGUARD_NODE_PROJECT=$project SANDGUARD_NPM_OUT=$npm_out \
  SANDGUARD_EMULATE=$target/debug/examples/emulate \
  node --test --test-reporter=tap --test-concurrency=1 --test-timeout=300000 tests/node/*.test.mjs 2>&1 |
  tee "$logs/node"
rc=${PIPESTATUS[0]}
set -e
# node:test's TAP summary: "# pass N", "# fail N".
tally "node tests" "$(awk '/^# pass / { print $3 }' "$logs/node" | tail -n 1)" \
  "$(awk '/^# fail / { print $3 }' "$logs/node" | tail -n 1)"
[ "$python_rc" -eq 0 ] || exit "$python_rc"
exit "$rc"
