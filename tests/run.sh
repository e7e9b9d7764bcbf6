#!/usr/bin/env bash
# Runs the tests. This is the command README.md names and .ci/run executes.
#
#   bash tests/run.sh           the full suite: unit tests, the HTTPS webhook tests, CRD freshness,
#                               the binary's own tests, the Helm chart, RBAC and IAM checks, the
#                               end-to-end tests on the local control plane (tests/cluster/), then
#                               the dashboards, the viewer and every benchmark at its smallest size
#   bash tests/run.sh --quick   before every commit (about 5 min warm): the unit tests, the webhook
#                               over HTTPS and the first write-up end to end (a node launched for
#                               the Deployment, removed 30 s after it is deleted)
#
# It brings the local cluster up (building it on first use) and, if it was not already running,
# stops it again at the end. Every test binary runs even after one fails; the summary counts them
# all, and a table of seconds per phase and per test binary ends the output (also written to
# target/test-timings.txt). Each group's output is kept in target/test-logs/.
#
# Two lanes run side by side: the tests that need no cluster (CPU-bound, short) and the cluster's
# tests (mostly waiting for TTLs, launches and drains), so the first fill the second's idle time.
# Within the cluster lane the binaries run one after another: each starts controllers of its own,
# and two sets of controllers on one cluster would act on each other's Provisioners. Inside a
# binary the tests run concurrently (E2E_TEST_THREADS, default 6), each on a namespace and
# Provisioner of its own, sharing that binary's one set of controllers as a user's workloads share
# one cluster.
#
# Environment: KARPENTER_RS_CRASH_ROUNDS and KARPENTER_RS_CONSOLIDATION_CRASH_ROUNDS (2 here;
# tests/benches/crash_rounds.sh runs 100), KARPENTER_RS_CRASH_SEED (replays a round order),
# KARPENTER_RS_OUTAGE_COMPONENTS (kube-apiserver here; etcd too in crash_rounds.sh),
# E2E_TEST_THREADS.
set -uo pipefail
cd "$(dirname "$0")/.."

QUICK=0
case "${1:-}" in
  --quick) QUICK=1 ;;
  "") ;;
  -h | --help) sed -n '2,28p' "$0"; exit 0 ;;
  *) echo "usage: tests/run.sh [--quick]" >&2; exit 2 ;;
esac

export KARPENTER_RS_CRASH_ROUNDS="${KARPENTER_RS_CRASH_ROUNDS:-2}"
export KARPENTER_RS_CONSOLIDATION_CRASH_ROUNDS="${KARPENTER_RS_CONSOLIDATION_CRASH_ROUNDS:-2}"
# The control-plane outage test takes kube-apiserver here; crash_rounds.sh takes etcd too.
export KARPENTER_RS_OUTAGE_COMPONENTS="${KARPENTER_RS_OUTAGE_COMPONENTS:-kube-apiserver}"
E2E_TEST_THREADS="${E2E_TEST_THREADS:-6}"
LOGS=target/test-logs
TIMINGS=target/test-timings.txt
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log "$LOGS"/*.result
run_started=$SECONDS

# ---- bookkeeping ------------------------------------------------------------------------------
# Every phase and test group writes "<name> <seconds> <passed> <failed> <status>" to
# $LOGS/<name>.result; the summary and the timing table are made from those files.
record() { # name seconds passed failed status
  printf '%s %s %s %s %s\n' "$@" >"$LOGS/$1.result"
}

# phase NAME CMD...: runs a step that is not a Cargo test group, output to the console.
phase() {
  local name=$1 started=$SECONDS status=0
  shift
  echo "[run.sh] ${name}" >&2
  "$@" || status=$?
  record "$name" $((SECONDS - started)) 0 0 "$([[ $status == 0 ]] && echo passed || echo failed)"
  return "$status"
}

# cargo_group NAME THREADS CARGO-TARGET-ARGS... [-- TEST-ARGS...]: one `cargo test` invocation
# (already compiled), its output to $LOGS/NAME.log and then to the console in one piece.
cargo_group() {
  local name=$1 threads=$2 started=$SECONDS status=0 log="$LOGS/$1.log"
  shift 2
  local args=() test_args=()
  while (($#)); do
    if [[ $1 == -- ]]; then shift; test_args=("$@"); break; fi
    args+=("$1"); shift
  done
  RUST_TEST_THREADS="$threads" cargo test --locked --quiet "${args[@]}" -- "${test_args[@]}" >"$log" 2>&1 || status=$?
  local passed failed
  passed=$(grep -o '^test result: [a-zA-Z]*\. [0-9]* passed' "$log" | awk '{s+=$4} END {print s+0}')
  failed=$(grep -o '; [0-9]* failed' "$log" | awk '{s+=$2} END {print s+0}')
  # A binary that died (a signal, a panic outside a test) has no result line: one failure.
  if [[ $status != 0 && $failed == 0 ]]; then failed=1; fi
  record "$name" $((SECONDS - started)) "$passed" "$failed" "$([[ $status == 0 ]] && echo passed || echo failed)"
  {
    echo "==================== ${name} ($((SECONDS - started)) s, ${passed} passed, ${failed} failed) ===================="
    cat "$log"
  } >&2
  return "$status"
}

summary() {
  local total_passed=0 total_failed=0 failed_names=() name secs passed failed status table
  table="Timing (seconds; $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)):"$'\n'
  table+=$(printf '  %-40s %7s %7s %7s  %s' phase seconds passed failed result)$'\n'
  for f in $(ls -tr "$LOGS"/*.result 2>/dev/null); do
    read -r name secs passed failed status <"$f"
    table+=$(printf '  %-40s %7s %7s %7s  %s' "$name" "$secs" "$passed" "$failed" "$status")$'\n'
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    [[ $status == passed ]] || failed_names+=("$name")
  done
  table+=$(printf '  %-40s %7s %7s %7s' "total (wall clock)" $((SECONDS - run_started)) "$total_passed" "$total_failed")
  printf '\n%s\n' "$table" | tee "$TIMINGS" >&2
  if ((${#failed_names[@]})); then
    echo "[run.sh] ${total_passed} passed, ${total_failed} failed; failed: ${failed_names[*]}" >&2
    return 1
  fi
  echo "[run.sh] ${total_passed} passed, 0 failed" >&2
}

# ---- builds --------------------------------------------------------------------------------
# The test binaries compile while the cluster starts: on a new machine the cluster's Go builds
# (at nice 19) take the cores Cargo leaves idle, in its single-threaded stretches and links.
if ((QUICK)); then
  compile_args=(--lib --bins --test webhook --test e2e_deprovisioning)
else
  compile_args=(--all-targets)
fi
phase compile cargo test --locked --quiet --no-run "${compile_args[@]}" &
compile=$!

# ---- the local cluster ------------------------------------------------------------------------
if [[ -f target/local-cluster/env ]]; then
  echo "[run.sh] reusing the running local cluster" >&2
else
  trap 'bash tests/cluster/down.sh' EXIT
fi
status=0
phase cluster-up bash -c 'bash tests/cluster/up.sh >/dev/null' || status=1
# helm for the chart tests (tests/chart.rs, tests/rbac.rs), built from its Go module on first use.
((QUICK)) || phase helm-build bash -c 'bash tests/helm/build.sh >/dev/null' || status=1
wait "$compile" || status=1
if ((status != 0)); then
  summary
  exit 1
fi
# A karpenter-rs left by `up.sh --with-karpenter` would provision for the tests' pods too.
bash tests/cluster/down.sh --karpenter-only

# ---- the quick tier ---------------------------------------------------------------------------
if ((QUICK)); then
  cargo_group unit 2 --lib --bins || status=1
  cargo_group webhook 2 --test webhook || status=1
  cargo_group e2e-first-write-up 1 --test e2e_deprovisioning -- --exact \
    first_write_up_node_is_removed_once_empty_for_ttl_seconds_after_empty || status=1
  summary || status=1
  exit "$status"
fi

# ---- the full suite ---------------------------------------------------------------------------
# Karpenter (scale.sh --quick, scheduling_vs_karpenter.sh --quick) and Prometheus (the
# dashboards check) build from their Go modules at the lowest priority while the cluster lane
# waits for TTLs, instead of after it (both are cached by version and then cost nothing).
(
  s=$SECONDS r=passed
  { bash tests/karpenter/build.sh && bash tests/prometheus/build.sh; } >"$LOGS/go-builds.out" 2>&1 || r=failed
  record go-builds-in-background $((SECONDS - s)) 0 0 "$r"
  [[ $r == passed ]]
) &
go_builds=$!

# Lane 1: no cluster.
(
  s=0
  cargo_group unit 2 --lib --bins --benches || s=1
  for t in webhook webhook_hostile binary simulate crd fuzz_admission iam vpc_limits; do
    cargo_group "$t" 2 --test "$t" || s=1
  done
  exit "$s"
) &
lane1=$!

# Lane 2: the cluster, one binary at a time (see the header).
for t in cloudprovider_aws kwok_capacity e2e_leader e2e_admission e2e_webhook_outage e2e_certs convert_crds \
  chart rbac e2e_provisioning e2e_deprovisioning e2e_faults e2e_crash; do
  cargo_group "$t" "$E2E_TEST_THREADS" --test "$t" || status=1
done
wait "$lane1" || status=1
wait "$go_builds" || { status=1; cat "$LOGS/go-builds.out" >&2; }

# Karpenter's dashboards and ours against a real Prometheus that scraped karpenter-rs through
# the first write-up's scenario (tests/dashboards/check.sh).
phase dashboards bash tests/dashboards/check.sh || status=1
# `karpenter-rs nodes` full-screen under tmux through the first write-up (tests/viewer/tmux.sh).
phase viewer bash tests/viewer/tmux.sh || status=1
# The benchmarks at their smallest sizes, so that none of them can rot; their results go to
# temporary files, not tests/benches/results/.
# The scale benchmark at 30 pods (karpenter-rs, Karpenter and the floor, each from start to
# every node gone); it restarts the local cluster with an audit log and stops it.
phase scale-quick bash tests/benches/scale.sh --quick || status=1
# The soak run for 2 minutes (tests/soak.rs; 30 minutes by hand).
soak_out=$(mktemp)
phase soak-2min bash tests/benches/soak.sh --minutes 2 --out "$soak_out" || status=1
rm -f "$soak_out"
# Karpenter's scheduling benchmark and ours at 1 and 100 pods (debug build).
quick_out=$(mktemp)
phase scheduling-vs-karpenter-quick bash tests/benches/scheduling_vs_karpenter.sh --quick --out "$quick_out" || status=1
rm -f "$quick_out"
# The HTTPS load benchmark for 2 s per case (debug build, wrk from Debian).
phase https-load-quick bash -c 'bash tests/benches/https_load.sh --quick >/dev/null' || status=1

summary || status=1
exit "$status"
