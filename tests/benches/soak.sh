#!/usr/bin/env bash
# The soak run (tests/soak.rs): the karpenter-rs binary on the local cluster for MINUTES minutes
# (default 30) carrying the scale benchmark's mixed workload (tests/benches/scale.py), its size
# changed every 3 minutes (every minute on runs under 15 minutes), consolidation on and light EC2
# faults. Pods Running, nodes, memory, descriptors, threads, API requests and series are sampled
# every 10 s; after the warm-up their slopes are reported and clear growth fails the run, as do a
# phase whose pods never all ran and anything left behind. Writes tests/benches/results/soak.md
# (or --out FILE). Brings the local cluster up if it is not (with the audit log of every request,
# which counts the binary's API requests) and leaves it as it found it.
#
#   bash tests/benches/soak.sh                 # 30 minutes
#   bash tests/benches/soak.sh --minutes 2 --out /tmp/soak.md   # what tests/run.sh runs
#   LOCAL_CLUSTER_STATE=target/local-cluster-soak bash tests/benches/soak.sh   # a cluster of its own
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
if [[ ! -f "${LOCAL_CLUSTER_STATE:-target/local-cluster}/env" ]]; then
  export LOCAL_CLUSTER_AUDIT=1
fi
source tests/cluster/use.sh
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
# The test binary is built here and then run directly (tests/test_binary.sh).
soak_bin=$(bash tests/test_binary.sh soak)
changed=$(git status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null | wc -l)
run_on="on $(date -u +%Y-%m-%d) at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ "$changed" != 0 ]]; then
  run_on+=" (with $changed uncommitted change(s) under src/ or Cargo files in the working tree)"
fi
SOAK_RUN_ON="$run_on" SOAK_MINUTES="$minutes" SOAK_OUT="$out_abs" "$soak_bin" --ignored --nocapture
echo "[soak.sh] results in $out" >&2
