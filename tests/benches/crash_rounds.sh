#!/usr/bin/env bash
# The crash-safety rounds at full size: tests/e2e_crash.rs's provisioning crash test (the first
# round at every crash point, later ones at points chosen at random from a printed seed) and its
# consolidation crash test, each for ROUNDS rounds, and its control-plane outage test with both
# components (kube-apiserver and etcd), against local clusters. tests/run.sh runs the same tests
# with 2 rounds each and kube-apiserver's outage so that they cannot rot; this is the run whose
# figures count.
#
# Usage: tests/benches/crash_rounds.sh [--rounds N] [--lanes L] [--seed S] [--out FILE]
#   --rounds  rounds of each crash test (default 100)
#   --lanes   local clusters side by side (default 4): lane 1 runs the provisioning rounds and the
#             outage test on target/local-cluster-crash-1; lanes 2..L share the consolidation
#             rounds, each on a cluster of its own. A round mostly waits (timers, the crash, the
#             restart), so lanes overlap the waits; on 2 cores a provisioning round takes about
#             12 s, a consolidation round 1.7 min and the outage test 11 min (one lane: 3.2 h).
#   --seed    KARPENTER_RS_CRASH_SEED, to replay a failing order (default: from the clock, printed)
#   --out     results file (default tests/benches/results/crash.md)
# Brings its clusters up and stops them again.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=100 lanes=4 seed="" out=tests/benches/results/crash.md
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --lanes) lanes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "crash_rounds.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "crash_rounds.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 2; }
[[ $lanes =~ ^[1-9][0-9]*$ ]] || { echo "crash_rounds.sh: --lanes must be a positive integer, got '$lanes'" >&2; exit 2; }
((lanes >= 2)) || { echo "crash_rounds.sh: --lanes must be at least 2 (one for provisioning, one for consolidation), got $lanes" >&2; exit 2; }
[[ -n $seed ]] || seed=$(date +%s)

# The test harness, run directly (tests/test_binary.sh), so that the lanes do not wait for each
# other on the build directory's lock.
crash_bin=$(bash tests/test_binary.sh e2e_crash)

work=$(mktemp -d)
states=()
stop_clusters() {
  for state in "${states[@]}"; do LOCAL_CLUSTER_STATE=$state bash tests/cluster/down.sh >/dev/null 2>&1 || true; done
}
trap 'stop_clusters; rm -rf "$work"' EXIT
for ((n = 1; n <= lanes; n++)); do
  state=target/local-cluster-crash-$n
  states+=("$state")
  LOCAL_CLUSTER_STATE=$state bash tests/cluster/up.sh >"$work/up-$n.log" 2>&1 ||
    { echo "crash_rounds.sh: cluster $n did not come up:" >&2; tail -20 "$work/up-$n.log" >&2; exit 1; }
  LOCAL_CLUSTER_STATE=$state bash tests/cluster/down.sh --karpenter-only >/dev/null
done

# The commit the binaries were built from ("+" when the tree had changes).
built_from=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests Cargo.toml Cargo.lock || echo +)
started=$SECONDS
export KARPENTER_RS_CRASH_SEED=$seed KARPENTER_RS_OUTAGE_COMPONENTS=kube-apiserver,etcd
echo "crash_rounds.sh: $rounds rounds, seed $seed, $lanes lanes; logs in $work until the end" >&2
# Lane 1: the provisioning rounds, then the outage test.
(
  export LOCAL_CLUSTER_STATE=${states[0]} KARPENTER_RS_CRASH_ROUNDS=$rounds
  "$crash_bin" --test-threads 1 --nocapture --exact \
    crashes_at_every_point_converge_without_leaks_stuck_nodes_or_double_launches \
    api_server_and_etcd_outages_mid_launch_drain_and_consolidation_leave_nothing_behind
) >"$work/lane-1.log" 2>&1 &
pids=($!)
# Lanes 2..L: the consolidation rounds, shared out.
consolidation_lanes=$((lanes - 1))
for ((n = 2; n <= lanes; n++)); do
  share=$((rounds / consolidation_lanes + (n - 2 < rounds % consolidation_lanes ? 1 : 0)))
  ((share > 0)) || continue
  (
    export LOCAL_CLUSTER_STATE=${states[n - 1]} KARPENTER_RS_CONSOLIDATION_CRASH_ROUNDS=$share
    "$crash_bin" --test-threads 1 --nocapture --exact \
      consolidation_crashes_converge_without_leaks_cordoned_nodes_or_double_replacements
  ) >"$work/lane-$n.log" 2>&1 &
  pids+=($!)
done
status=0 failed=()
for ((i = 0; i < ${#pids[@]}; i++)); do
  wait "${pids[i]}" || { status=1; failed+=("lane $((i + 1))"); }
done
elapsed=$((SECONDS - started))

{
  echo "# Crash-safety rounds"
  echo
  echo "\`tests/benches/crash_rounds.sh --rounds $rounds --lanes $lanes --seed $seed\` on $(date -u +%Y-%m-%d),"
  echo "built from commit $built_from, $(nproc) cores, $((elapsed / 60)) min; exit status $status${failed[*]:+ (failed: ${failed[*]})}."
  echo
  echo "What each round does: \`tests/e2e_crash.rs\` (the real \`karpenter-rs run\` binary made to exit at"
  echo "\`KARPENTER_RS_CRASH_AT\` and started again, against a local control plane and moto). Lane 1"
  echo "ran the provisioning rounds and the control-plane outage test (kube-apiserver and etcd); lanes"
  echo "2..$lanes shared the $rounds consolidation rounds, each on a local cluster of its own."
  for ((n = 1; n <= lanes; n++)); do
    [[ -f "$work/lane-$n.log" ]] || continue
    echo
    echo "## Lane $n"
    echo
    echo '```'
    # (a test's own lines may follow the harness's "test NAME ... " on the same line)
    grep -oE '(crash safety:|round [0-9]+/[0-9]+:|after the |test result:|panicked at).*' "$work/lane-$n.log" || true
    echo '```'
  done
} >"$out"
if ((status)); then
  for ((n = 1; n <= lanes; n++)); do
    [[ -f "$work/lane-$n.log" ]] && { echo "--- lane $n (last 40 lines)" >&2; tail -40 "$work/lane-$n.log" >&2; }
  done
fi
echo "crash_rounds.sh: results in $out" >&2
exit "$status"
