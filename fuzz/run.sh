#!/usr/bin/env bash
# Runs every fuzz target for a bounded time on its committed seed corpus (fuzz/corpus/TARGET).
#
#   fuzz/run.sh                 every target, FUZZ_SECONDS (default 30) each
#   fuzz/run.sh config          one target
#
# Only a stable toolchain is needed: cargo-fuzz passes nightly-only flags (-Z sanitizer, …),
# which RUSTC_BOOTSTRAP=1 lets stable rustc accept. cargo-fuzz itself is installed when
# missing (into ~/.cargo/bin, so a cached home installs nothing). New inputs the fuzzer finds go
# to a scratch directory under the target directory, never into the committed corpus; a crash
# is saved under fuzz/artifacts/TARGET/; the other targets still run, and the script fails. Builds go to
# $CARGO_TARGET_DIR/fuzz (default target/fuzz): instrumented, apart from the test builds.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'fuzz/run.sh: %s\n' "$*" >&2; }
seconds=${FUZZ_SECONDS:-30}

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
target_dir=${CARGO_TARGET_DIR:-$PWD/target}/fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi

started=$(date +%s)
log "building ${#targets[@]} fuzz targets"
CARGO_TARGET_DIR=$target_dir cargo fuzz build
log "fuzz targets built in $(( $(date +%s) - started )) s"

failed=()
for t in "${targets[@]}"; do
  scratch=$target_dir/new-corpus/$t
  out=$target_dir/logs/$t.log
  mkdir -p "$scratch" "$(dirname "$out")"
  t0=$(date +%s)
  # libFuzzer's progress lines go to a log; on a crash its tail (the panic, the input, the
  # artifact path) is shown.
  if ! CARGO_TARGET_DIR=$target_dir cargo fuzz run "$t" "$scratch" "fuzz/corpus/$t" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 >"$out" 2>&1; then
    tail -n 40 "$out" >&2
    log "$t: FAILED after $(( $(date +%s) - t0 )) s; the input is under fuzz/artifacts/$t/"
    failed+=("$t")
    continue
  fi
  runs=$(grep -o 'Done [0-9]* runs' "$out" | tail -n 1 || true)
  log "$t: no crash in $(( $(date +%s) - t0 )) s (${runs:-? runs})"
done
if [ ${#failed[@]} -gt 0 ]; then
  log "crashes in: ${failed[*]}"
  exit 1
fi
log "${#targets[@]} targets, no crash, $(( $(date +%s) - started )) s in all"
