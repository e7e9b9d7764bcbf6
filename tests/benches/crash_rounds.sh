#!/usr/bin/env bash
# The crash-safety rounds at full size: tests/e2e_crash.rs's provisioning crash test (the first
# round at every crash point, later ones at points chosen at random from a printed seed) and its
# consolidation crash test, each for ROUNDS rounds, and its control-plane outage test with both
# components (kube-apiserver and etcd), against the local cluster. tests/run.sh runs the same
# tests with 2 rounds each and kube-apiserver's outage so that they cannot rot; this is the run
# whose figures count.
#
# Usage: tests/benches/crash_rounds.sh [--rounds N] [--seed S] [--out FILE]
#   --rounds  rounds of each test (default 100; on 2 cores about 12 s a provisioning round,
#             1.7 min a consolidation round, and 11 min for the outage test: about 3.2 h in all)
#   --seed    KARPENTER_RS_CRASH_SEED, to replay a failing order (default: from the clock, printed)
#   --out     results file (default tests/benches/results/crash.md)
# Brings the local cluster up if it is not running, and then stops it again.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=100 seed="" out=tests/benches/results/crash.md
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "crash_rounds.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

source tests/cluster/use.sh

log=$(mktemp)
started=$SECONDS
status=0
export KARPENTER_RS_CRASH_ROUNDS=$rounds KARPENTER_RS_CONSOLIDATION_CRASH_ROUNDS=$rounds
export KARPENTER_RS_OUTAGE_COMPONENTS=kube-apiserver,etcd
[[ -n $seed ]] && export KARPENTER_RS_CRASH_SEED=$seed
cargo test --locked --test e2e_crash -- --test-threads 1 --nocapture \
  crashes_at_every_point_converge_without_leaks_stuck_nodes_or_double_launches \
  consolidation_crashes_converge_without_leaks_cordoned_nodes_or_double_replacements \
  api_server_and_etcd_outages_mid_launch_drain_and_consolidation_leave_nothing_behind 2>&1 | tee "$log" || status=$?
elapsed=$((SECONDS - started))

{
  echo "# Crash-safety rounds"
  echo
  echo "\`tests/benches/crash_rounds.sh --rounds $rounds\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD),"
  echo "$(nproc) cores, $((elapsed / 60)) min; exit status $status."
  echo
  echo "What each round does: \`tests/e2e_crash.rs\` (the real \`karpenter-rs run\` binary made to exit at"
  echo "\`KARPENTER_RS_CRASH_AT\` and started again, against the local control plane and moto)."
  echo
  echo '```'
  grep -E '^crash safety:|^round [0-9]+/[0-9]+:|^after the |^test result:|panicked at' "$log" || true
  echo '```'
} >"$out"
rm -f "$log"
echo "crash_rounds.sh: results in $out" >&2
exit "$status"
