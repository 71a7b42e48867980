#!/usr/bin/env bash
# The inner loop while working on one subsystem, which CI's tests/run.sh does not replace:
# its unit tests, its integration tests (the real binary, the real daemon) and the model test,
# from the incremental debug build; under 5 minutes for any subsystem on a warm machine
# (book/src/developing.md has each one's time).
#
#   tests/quick.sh reclaim             src/reclaim's unit tests, tests/reclaim/, the model tests
#   tests/quick.sh proxy providers     two subsystems at once
#   tests/quick.sh -- stale            only the tests whose names hold "stale" (cargo's filter)
#   tests/quick.sh                     lists the subsystems
#
# A subsystem is a folder of tests/ (tests/reclaim/: the integration tests `reclaim::…`) and
# the module of src/ of the same name, when there is one (its unit tests, `reclaim::…` in the
# library). The model tests run every time, since they check the trust rules across
# subsystems: random histories against the model in the library (src/model/, about 15 s;
# SANDGUARD_MODEL_CASES for more) and against the real daemon (tests/reclaim/model.rs).
# Tests marked #[ignore] need root, and run when this runs as root.
# A Docker daemon and the test image are started when missing (tests/engine.sh), and the
# vendors' SDKs are the venv tests/run.sh made, when it did; tests that need what only
# tests/run.sh installs (promtool, redis) fail saying what is missing, and the tests of
# Podman's pods are left to tests/run.sh's rootless Podman layer.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf 'tests/quick.sh: %s\n' "$*" >&2; }

subsystems() { find tests -mindepth 2 -maxdepth 2 -name mod.rs | cut -d/ -f2 | grep -vx support | sort; }
if [ $# -eq 0 ]; then
  echo "usage: tests/quick.sh SUBSYSTEM... [-- FILTER...]; the subsystems:" >&2
  subsystems | sed 's/^/  /' >&2
  exit 2
fi
names=() extra=() ignored=()
[ "$(id -u)" -ne 0 ] || ignored=(--include-ignored)
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; extra=("$@"); break ;;
    *) names+=("$1"); shift ;;
  esac
done
for name in ${names[@]+"${names[@]}"}; do
  if ! subsystems | grep -qx "$name"; then
    log "no subsystem $name (tests/$name/ is not there); the subsystems: $(subsystems | tr '\n' ' ')"
    exit 2
  fi
done

ENGINE_LOG_PREFIX=tests/quick.sh
# shellcheck source=tests/engine.sh
. tests/engine.sh
start_docker
build_test_image
target=${CARGO_TARGET_DIR:-$PWD/target}
if [ -z "${SANDGUARD_SDK_PYTHON:-}" ] && [ -x "$target/sdk-venv/bin/python" ]; then
  export SANDGUARD_SDK_PYTHON=$target/sdk-venv/bin/python
fi

started=$(date +%s)
unit=(model::) integration=(reclaim::model::)
for name in ${names[@]+"${names[@]}"}; do
  [ ! -d "src/$name" ] && [ ! -f "src/$name.rs" ] || unit+=("$name::")
  integration+=("$name::")
done
# Filters given after -- replace the subsystems' (libtest runs a test that any filter
# matches, so they could not narrow them).
if [ ${#extra[@]} -gt 0 ]; then
  unit=("${extra[@]}") integration=("${extra[@]}")
fi
# The build first: the library's tests, the integration tests and the examples some of them
# run (tests/watch/guard.rs runs examples/guarded.rs), as `cargo test` builds them.
cargo test --locked --no-run
cargo test --locked --lib -- ${ignored[@]+"${ignored[@]}"} "${unit[@]}"
# Podman's pods (tests/providers/docker/podman.rs) are tests/run.sh's rootless Podman layer's.
cargo test --locked --test integration -- ${ignored[@]+"${ignored[@]}"} "${integration[@]}" \
  --skip providers::docker::podman::
log "${names[*]:-${extra[*]}}: passed in $(( $(date +%s) - started )) s"
