#!/usr/bin/env bash
# The whole benchmark suite, one command: `benches/run.sh`.
# Needs what tests/run.sh sets up (a Docker daemon and the sandguard-test/busybox image; run
# tests/run.sh once, or let this script call its setup), and Debian's tini, which this script
# installs when it is missing (the wrapper's start is measured against `tini -s -- true`).
#
# The goals of issue 25 run first, side by side in one run, each figure printed beside its
# goal: P1 (owner SIGKILL -> first remove request, label path and proxy path, p50/p99) and P4
# (`sandguard -- true` against `tini -s -- true`, defaults on and every proxy off) from
# `cargo bench --bench watchdog`, then P2 (reclaim of N running containers against
# `docker rm -f` of N, N = 10, 50, 100, 200) from the suite's throughput part. The other
# benchmarks follow, mass death (issue 44: N guarded programs SIGKILLed at once against
# `docker rm -f` of all their containers) first. Every benchmark prints its figures and appends them to
# bench-results/results.md; the pictures (latency.svg, latency_proxy.svg, throughput.svg) land
# beside it. The goals' lines are printed once more at the end, with `uptime`'s load averages
# (the figures are meant for a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! docker image inspect sandguard-test/busybox:latest >/dev/null 2>&1; then
  echo "benches/run.sh: run tests/run.sh once first (it starts dockerd and builds the test image)" >&2
  exit 1
fi
if ! command -v tini >/dev/null 2>&1; then
  echo "benches/run.sh: installing tini" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tini >/dev/null
fi
mkdir -p bench-results
: > bench-results/results.md
load_before=$(uptime)
# The goals: P1 and P4, then P2.
cargo bench --locked --bench watchdog
ONLY=throughput cargo bench --locked --bench suite
# The rest.
for part in idle claims sweep; do
  ONLY=$part cargo bench --locked --bench suite
done
for bench in mass_death e2b_reclaim docker_proxy cloud_proxy fleet_sweep fleet_lease python_exit notify; do
  cargo bench --locked --bench "$bench"
done
echo
echo "== goals (issue 25), one run =="
echo "load before: $load_before"
echo "load after:  $(uptime)"
grep -E '\b(P1|P2|P4)\b' bench-results/results.md || true
echo "results: bench-results/results.md"
