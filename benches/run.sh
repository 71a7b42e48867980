#!/usr/bin/env bash
# The whole benchmark suite, one command: `benches/run.sh`.
# Needs what tests/run.sh sets up (a Docker daemon and the sandguard-test/busybox image; run
# tests/run.sh once, or let this script call its setup). Every benchmark prints its figures and
# appends them to bench-results/results.md; the pictures (latency.svg, throughput.svg) land
# beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! docker image inspect sandguard-test/busybox:latest >/dev/null 2>&1; then
  echo "benches/run.sh: run tests/run.sh once first (it starts dockerd and builds the test image)" >&2
  exit 1
fi
mkdir -p bench-results
: > bench-results/results.md
for bench in watchdog e2b_reclaim suite docker_proxy cloud_proxy fleet_sweep fleet_lease python_exit; do
  cargo bench --locked --bench "$bench"
done
echo "results: bench-results/results.md"
