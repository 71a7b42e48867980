#!/usr/bin/env bash
# The docs check, by itself (tests/run.sh's first layer, step D): the checker's own tests on
# scratch trees with planted faults (tests/docs/test_check.py), then the checker on this tree
# (tests/docs/check.py: conflict markers, dead paths and test names, dead links and section
# citations). Python's standard library only: nothing to build or install, under a second.
# The last line counts both, each self-test and the tree's check as one:
# `docs check: N passed, N failed`; the exit status is 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(python3 tests/docs/test_check.py 2>&1)
rc=$?
printf '%s\n' "$out"
read -r p f < <(sed -n 's/^docs check self-tests: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' <<<"$out")
if [ -z "${p:-}" ]; then
  p=0 f=1 # the self-tests did not get to their count
elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
  f=1
fi
if python3 tests/docs/check.py; then p=$((p + 1)); else f=$((f + 1)); fi
echo "docs check: $p passed, $f failed"
[ "$f" -eq 0 ]
