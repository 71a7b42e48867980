#!/usr/bin/env bash
# Runs every fuzz target for a bounded time on its committed seed corpus (fuzz/corpus/TARGET).
#
#   fuzz/run.sh                 every target, FUZZ_SECONDS (default 20) each
#   fuzz/run.sh config          one target
#   FUZZ_SECONDS=600 fuzz/run.sh config    a longer search, by hand
#
# Only a stable toolchain is needed: cargo-fuzz passes nightly-only flags (-Z sanitizer, …),
# which RUSTC_BOOTSTRAP=1 lets stable rustc accept. cargo-fuzz is the one on PATH, else
# tests/tools.sh's tool cache (built there once per machine). New inputs the fuzzer finds go
# to a scratch directory under the target directory, never into the committed corpus; a crash
# is saved under fuzz/artifacts/TARGET/; the other targets still run, and the script fails. Builds go to
# $CARGO_TARGET_DIR/fuzz (default target/fuzz): instrumented, apart from the test builds.
#
# The budget, from what the targets have found so far: one crash in all, a panic (a
# non-ASCII Tenki session sliced inside a character, 5dc9aab), found in the first seconds of
# the target's first run; nothing since, in every CI run's 30 s a target. So:
# - no sanitizer (`-s none`): what the targets reach is safe Rust, whose failures are panics,
#   which libFuzzer catches without one (the tree's few `unsafe` blocks are system calls in
#   src/unix/, which no target reaches); AddressSanitizer made the build 554 s and every input
#   2 to 4 times slower to run; without it the build is about 340 s alone on 2 cores, and its one
#   compilation unit per crate (cargo-fuzz's, for inlining) leaves a core to the rest;
# - debug-assertions on (cargo-fuzz's default), so overflow and the crate's own
#   debug_assert!s still fail; no debug info (fuzz/Cargo.toml): a panic's message carries its
#   file and line without it, and libFuzzer saves the input, which replays under a debugger;
# - 20 s a target (FUZZ_SECONDS): without the sanitizer that is more executions than the 30 s
#   were with it, and a smoke test against regressions on the corpus, which is what CI's
#   fuzzing is for here; a longer search is FUZZ_SECONDS by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'fuzz/run.sh: %s\n' "$*" >&2; }
seconds=${FUZZ_SECONDS:-20}
# No sanitizer (see above); the same flags for the build and every run, which builds first.
flags=(--sanitizer none)

# shellcheck source=tests/tools.sh
. tests/tools.sh
cargo_fuzz=$(cached_tool cargo-fuzz "$CARGO_FUZZ_VERSION" cargo-fuzz)
PATH=${cargo_fuzz%/*}:$PATH

export RUSTC_BOOTSTRAP=1
target_dir=${CARGO_TARGET_DIR:-$PWD/target}/fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi

started=$(date +%s)
log "building ${#targets[@]} fuzz targets"
CARGO_TARGET_DIR=$target_dir cargo fuzz build "${flags[@]}"
log "fuzz targets built in $(( $(date +%s) - started )) s"

failed=()
for t in "${targets[@]}"; do
  scratch=$target_dir/new-corpus/$t
  out=$target_dir/logs/$t.log
  mkdir -p "$scratch" "$(dirname "$out")"
  t0=$(date +%s)
  # libFuzzer's progress lines go to a log; on a crash its tail (the panic, the input, the
  # artifact path) is shown.
  if ! CARGO_TARGET_DIR=$target_dir cargo fuzz run "${flags[@]}" "$t" "$scratch" "fuzz/corpus/$t" -- \
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
