#!/usr/bin/env bash
# The soak run (tests/soak.rs): the karpenter-rs binary on the local cluster for MINUTES minutes
# (default 30) with a workload scaled every minute, consolidation on and light EC2 faults;
# memory, descriptors, threads and series sampled every 10 s must stay flat, and nothing may be
# left behind. Writes tests/benches/results/soak.md (or --out FILE). Brings the local cluster up
# if it is not (and leaves it as it found it).
#
#   bash tests/benches/soak.sh                 # 30 minutes
#   bash tests/benches/soak.sh --minutes 2 --out /tmp/soak.md   # what tests/run.sh runs
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=30
out="tests/benches/results/soak.md"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "usage: $0 [--minutes N] [--out FILE]" >&2; exit 2 ;;
  esac
done
source tests/cluster/use.sh
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
# The test binary is built here and then run directly (tests/test_binary.sh).
soak_bin=$(bash tests/test_binary.sh soak)
SOAK_MINUTES="$minutes" SOAK_OUT="$out_abs" "$soak_bin" --ignored --nocapture
echo "[soak.sh] results in $out" >&2
