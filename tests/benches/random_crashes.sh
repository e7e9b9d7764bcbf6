#!/usr/bin/env bash
# Crashes at random across operations, at full size: tests/e2e_crash.rs's
# random_crashes_across_operations_converge_without_leaks_or_second_launches for ROUNDS rounds in
# all, shared out over L local clusters side by side. Each round picks an operation (provisioning,
# consolidation, expiration, drift, interruption) and how its first run ends (a named crash point
# of that operation, or SIGKILL at a random moment of it) from the seed, and counts from the EC2
# emulator and the API server. tests/run.sh runs the same test with 2 rounds and a fresh seed.
#
# Usage: tests/benches/random_crashes.sh [--rounds N] [--lanes L] [--seed S] [--out FILE]
#   --rounds  rounds in all (default 100)
#   --lanes   local clusters side by side (default 4); lane n plays seed S+n-1
#   --seed    KARPENTER_RS_CRASH_SEED of lane 1 (default: from the clock, printed)
#   --out     results file (default tests/benches/results/random-crash.md)
# Brings its clusters up and stops them again.
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=100 lanes=4 seed="" out=tests/benches/results/random-crash.md
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --lanes) lanes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "random_crashes.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "random_crashes.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 2; }
[[ $lanes =~ ^[1-9][0-9]*$ ]] || { echo "random_crashes.sh: --lanes must be a positive integer, got '$lanes'" >&2; exit 2; }
[[ -z $seed || $seed =~ ^[0-9]+$ ]] || { echo "random_crashes.sh: --seed must be a number, got '$seed'" >&2; exit 2; }
[[ -n $seed ]] || seed=$(date +%s)
test_name=random_crashes_across_operations_converge_without_leaks_or_second_launches

# Appends the totals over every lane's rounds to results file $1 (from its own round lines).
summarize() {
  awk '
    /^round [0-9]+\/[0-9]+: Tally/ {
      rounds++
      match($0, /leaked: [0-9]+/); leaked += substr($0, RSTART + 8, RLENGTH - 8)
      match($0, /stuck: [0-9]+/); stuck += substr($0, RSTART + 7, RLENGTH - 7)
      match($0, /launched [0-9]+/); n = substr($0, RSTART + 9, RLENGTH - 9); if (n + 0 > 1) second++
      match($0, /cordoned [0-9]+/); cordoned += substr($0, RSTART + 9, RLENGTH - 9)
      if (match($0, /fewest Running Some\([0-9]+\)/)) { kept++; f = substr($0, RSTART + 20, RLENGTH - 21); if (f + 0 < 1) lost++ }
    }
    /^round [0-9]+\/[0-9]+: [A-Za-z]+, / { split($3, op, ","); how = ($4 ~ /^At/) ? "a named point" : "a random moment"; seen[op[1] " at " how]++ }
    /: [0-9]+ violations$/ { match($0, /[0-9]+ violations$/); violations += $0 ~ /: 0 violations$/ ? 0 : substr($0, RSTART, RLENGTH) + 0 }
    END {
      print ""
      print "## Totals"
      print ""
      printf "- rounds: %d; violations reported by the lanes: %d\n", rounds, violations
      printf "- rounds with more than one instance launched for the need (terminated ones included): %d\n", second
      printf "- instances running without a Node after convergence: %d; Nodes stuck deleting: %d; Nodes left cordoned with no deletion: %d\n", leaked, stuck, cordoned
      printf "- rounds where a budget keeps one of two replicas: %d; of them, rounds where no replica was Running at some check: %d\n", kept, lost
      print "- rounds by operation and crash:"
      for (k in seen) printf "  - %s: %d\n", k, seen[k] | "sort"
      close("sort")
    }' "$1" >"$1.totals" && cat "$1.totals" >>"$1" && rm -f "$1.totals"
}

# The test harness, run directly (tests/test_binary.sh), so the lanes do not wait for each other
# on the build directory's lock.
crash_bin=$(bash tests/test_binary.sh e2e_crash)
work=$(mktemp -d)
states=()
stop_clusters() {
  for state in "${states[@]}"; do LOCAL_CLUSTER_STATE=$state bash tests/cluster/down.sh >/dev/null 2>&1 || true; done
}
trap 'stop_clusters; rm -rf "$work"' EXIT
for ((n = 1; n <= lanes; n++)); do
  state=target/local-cluster-random-$n
  states+=("$state")
  LOCAL_CLUSTER_STATE=$state bash tests/cluster/up.sh >"$work/up-$n.log" 2>&1 ||
    { echo "random_crashes.sh: cluster $n did not come up:" >&2; tail -20 "$work/up-$n.log" >&2; exit 1; }
  LOCAL_CLUSTER_STATE=$state bash tests/cluster/down.sh --karpenter-only >/dev/null
done

built_from=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests Cargo.toml Cargo.lock || echo +)
started=$SECONDS
echo "random_crashes.sh: $rounds rounds, seed $seed, $lanes lanes; logs in $work until the end" >&2
pids=()
for ((n = 1; n <= lanes; n++)); do
  share=$((rounds / lanes + (n - 1 < rounds % lanes ? 1 : 0)))
  ((share > 0)) || continue
  (
    export LOCAL_CLUSTER_STATE=${states[n - 1]} KARPENTER_RS_RANDOM_CRASH_ROUNDS=$share KARPENTER_RS_CRASH_SEED=$((seed + n - 1))
    "$crash_bin" --test-threads 1 --nocapture --exact "$test_name"
  ) >"$work/lane-$n.log" 2>&1 &
  pids+=($!)
done
status=0 failed=()
for ((i = 0; i < ${#pids[@]}; i++)); do
  wait "${pids[i]}" || { status=1; failed+=("lane $((i + 1))"); }
done
elapsed=$((SECONDS - started))

{
  echo "# Crashes at random across operations"
  echo
  echo "\`tests/benches/random_crashes.sh --rounds $rounds --lanes $lanes --seed $seed\` on $(date -u +%Y-%m-%d),"
  echo "built from commit $built_from, $(nproc) cores, $((elapsed / 60)) min; exit status $status${failed[*]:+ (failed: ${failed[*]})}."
  echo
  echo "Each round (\`tests/e2e_crash.rs\`, \`$test_name\`): an operation and how its first run"
  echo "of the real \`karpenter-rs run\` binary ends (a named crash point, or SIGKILL at a random moment),"
  echo "then a fresh run converges; counted from the EC2 emulator and the API server: instances launched"
  echo "in the round (terminated ones included), instances without a Node, Nodes cordoned with no"
  echo "deletion in progress, Nodes stuck deleting, and the fewest Running replicas where a budget keeps one."
  for ((n = 1; n <= lanes; n++)); do
    [[ -f "$work/lane-$n.log" ]] || continue
    echo
    echo "## Lane $n (seed $((seed + n - 1)))"
    echo
    echo '```'
    grep -oE '(random crashes:|round [0-9]+/[0-9]+:|test result:|panicked at).*' "$work/lane-$n.log" || true
    echo '```'
  done
} >"$out"
summarize "$out"
if ((status)); then
  for ((n = 1; n <= lanes; n++)); do
    [[ -f "$work/lane-$n.log" ]] && { echo "--- lane $n (last 40 lines)" >&2; tail -40 "$work/lane-$n.log" >&2; }
  done
fi
echo "random_crashes.sh: results in $out" >&2
exit "$status"
