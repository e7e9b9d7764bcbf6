#!/usr/bin/env bash
# Runs the tests. This is the command README.md names and .ci/run executes.
#
#   bash tests/run.sh           the full suite: unit tests, the HTTPS webhook tests, CRD freshness,
#                               the binary's own tests, the Helm chart, RBAC and IAM checks, the
#                               end-to-end tests on the local control plane (tests/cluster/), then
#                               the dashboards, the viewer and every benchmark at its smallest size
#   bash tests/run.sh --quick   before every commit (under 2 min warm): the unit tests, the webhook
#                               over HTTPS and the first write-up end to end (a node launched for
#                               the Deployment, removed 30 s after it is deleted)
#
# It brings the local clusters up (building the control plane on first use) and stops at the end
# those that were not already running. Every test binary runs even after one fails; the summary
# counts them all, and a table of seconds per phase and per test binary ends the output (also
# written to target/test-timings.txt). Each group's output is kept in target/test-logs/.
#
# Lanes run side by side: the tests that need no cluster (CPU-bound, short), and five cluster
# lanes (mostly waiting for TTLs, launches and drains), each on a local cluster of its own
# (LOCAL_CLUSTER_STATE: target/local-cluster, target/local-cluster-2, ...), so that their waits
# overlap. Within a cluster lane the binaries run one after another: each starts controllers of
# its own, and two sets of controllers on one cluster would act on each other's Provisioners.
# Inside a binary the tests run concurrently (E2E_TEST_THREADS, default 6), each on a namespace
# and Provisioner of its own, sharing that binary's one set of controllers as a user's workloads
# share one cluster; a test that must run alone is a step of its own in some lane.
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
  -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
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

# cargo_group NAME THREADS CARGO-TARGET-ARGS... [-- TEST-ARGS...]: runs the test binaries that
# `cargo test CARGO-TARGET-ARGS` would run (--lib, --bins, --benches, --test NAME; compiled by the
# compile phase, listed in $TEST_BINS), output to $LOGS/NAME.log and then to the console in one
# piece. The binaries are run directly, not through `cargo test`, which holds the build
# directory's lock while its tests run and so would make the lanes wait for each other.
TEST_BINS=target/test-binaries.tsv
cargo_group() {
  local name=$1 threads=$2 started=$SECONDS status=0 log="$LOGS/$1.log"
  shift 2
  local keys=() test_args=() key exe
  while (($#)); do
    case $1 in
      --) shift; test_args=("$@"); break ;;
      --lib) keys+=(lib) ;;
      --bins) mapfile -t -O "${#keys[@]}" keys < <(cut -f1 "$TEST_BINS" | grep '^bin:') ;;
      --benches) mapfile -t -O "${#keys[@]}" keys < <(cut -f1 "$TEST_BINS" | grep '^bench:') ;;
      --test) keys+=("test:$2"); shift ;;
      *) echo "[run.sh] cargo_group: unknown argument $1" >&2; return 2 ;;
    esac
    shift
  done
  : >"$log"
  for key in "${keys[@]}"; do
    exe=$(awk -F'\t' -v k="$key" '$1 == k { print $2 }' "$TEST_BINS")
    if [[ -z $exe ]]; then
      echo "[run.sh] no test binary for $key in $TEST_BINS" >>"$log"
      status=1
      continue
    fi
    RUST_TEST_THREADS="$threads" "$exe" "${test_args[@]}" >>"$log" 2>&1 || status=$?
  done
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
# The compiled test binaries, one "<kind>:<target name><TAB><path>" line each (kind: lib, bin,
# test, bench), for cargo_group.
compile_tests() {
  cargo test --locked --quiet --no-run --message-format=json-render-diagnostics "${compile_args[@]}" |
    python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    # profile.test: built to run tests; the binary itself is built too, for the tests that start it
    if not m["profile"]["test"]:
        print("binary", m["executable"], sep="\t")
        continue
    kind = "lib" if m["target"]["kind"][0] in ("lib", "rlib") else m["target"]["kind"][0]
    print(kind if kind == "lib" else kind + ":" + m["target"]["name"], m["executable"], sep="\t")
' >"$TEST_BINS.tmp" && mv "$TEST_BINS.tmp" "$TEST_BINS"
}
phase compile compile_tests &
compile=$!
# wait_recorded NAME: waits until NAME (a phase run in the background by another shell, which a
# lane cannot wait for) has recorded its result; true if it passed.
wait_recorded() {
  until [[ -f "$LOGS/$1.result" ]]; do sleep 1; done
  grep -q ' passed$' "$LOGS/$1.result"
}

# helm for the chart tests (tests/chart.rs, tests/rbac.rs), Karpenter (scale.sh --quick,
# scheduling_vs_karpenter.sh --quick) and Prometheus (the dashboards check), built from their Go
# modules on first use (then cached by version: they cost nothing), at the lowest priority; on a
# new machine only once the control plane is built and the first cluster is up (cluster-up-1,
# below), which every lane waits for, while these are needed minutes into lanes 1 and 3.
if ((!QUICK)); then
  (
    wait_recorded cluster-up-1
    phase helm-build nice -n 19 bash -c 'bash tests/helm/build.sh >/dev/null'
  ) &
  (
    wait_recorded cluster-up-1
    s=$SECONDS r=passed
    { nice -n 19 bash tests/karpenter/build.sh && nice -n 19 bash tests/prometheus/build.sh; } >"$LOGS/go-builds.out" 2>&1 || r=failed
    [[ $r == passed ]] || cat "$LOGS/go-builds.out" >&2
    record go-builds-in-background $((SECONDS - s)) 0 0 "$r"
  ) &
fi

# ---- the local clusters -----------------------------------------------------------------------
# The quick tier uses one cluster (target/local-cluster); the full suite one per cluster lane
# (CLUSTER_LANES, below), lane 1 on target/local-cluster, lane N on target/local-cluster-N.
# A cluster that is already up is reused and left running; the others are stopped at the end.
CLUSTER_LANES=5
((QUICK)) && CLUSTER_LANES=1
lane_state() { if (($1 == 1)); then echo target/local-cluster; else echo "target/local-cluster-$1"; fi; }
started_clusters=()
stop_clusters() {
  local dir
  for dir in "${started_clusters[@]}"; do LOCAL_CLUSTER_STATE=$dir bash tests/cluster/down.sh; done
}
trap stop_clusters EXIT
for n in $(seq 1 "$CLUSTER_LANES"); do
  dir=$(lane_state "$n")
  if [[ -f "$dir/env" ]]; then
    echo "[run.sh] reusing the running local cluster in $dir" >&2
  else
    started_clusters+=("$dir")
  fi
done
# The clusters start one after another, beside the compile (several API servers starting at once
# on two cores would each take longer than its start-up timeout; the first start builds the
# control plane on a new machine); each records cluster-up-N, and its lane starts as soon as
# both it and the compile are done.
clusters_up() {
  local n dir ok=1
  for n in $(seq 1 "$CLUSTER_LANES"); do
    dir=$(lane_state "$n")
    # A karpenter-rs left by `up.sh --with-karpenter` would provision for the tests' pods too.
    # After a failed start (e.g. the control plane's build), the rest are not tried.
    if ((!ok)); then record "cluster-up-$n" 0 0 0 failed; continue; fi
    phase "cluster-up-$n" bash -c "export LOCAL_CLUSTER_STATE=$dir
      bash tests/cluster/up.sh >/dev/null && bash tests/cluster/down.sh --karpenter-only" || ok=0
  done
}
clusters_up &
status=0
wait "$compile" || status=1
if ((status != 0)); then
  wait
  summary
  exit 1
fi
# The scripts that start karpenter-rs (up.sh --with-karpenter, the dashboards, the viewer, the scale
# and HTTPS benchmarks) run the binary the compile built for the tests, as they are: a `cargo
# build --bin karpenter-rs` of their own would build it again without the dev-dependencies'
# features (minutes on a new machine), holding the build directory's lock meanwhile.
KARPENTER_RS_BIN=$(awk -F'\t' '$1 == "binary" { print $2 }' "$TEST_BINS")
export KARPENTER_RS_BIN

# ---- the quick tier ---------------------------------------------------------------------------
if ((QUICK)); then
  cargo_group unit 2 --lib --bins || status=1
  cargo_group webhook 2 --test webhook || status=1
  wait_recorded cluster-up-1 || status=1
  cargo_group e2e-first-write-up 1 --test e2e_deprovisioning -- --exact \
    first_write_up_node_is_removed_once_empty_for_ttl_seconds_after_empty || status=1
  summary || status=1
  exit "$status"
fi

# ---- the full suite ---------------------------------------------------------------------------
# The no-cluster lane: unit tests, benches in test mode, and the tests that need no cluster.
(
  s=0
  cargo_group unit 2 --lib --bins --benches || s=1
  for t in webhook binary simulate crd fuzz_admission iam vpc_limits docs; do
    cargo_group "$t" 2 --test "$t" || s=1
  done
  # Every link and runnable command block of README.md, docs/ and tests/README.md (tests/README.md).
  phase docs-check python3 tests/docs_check.py || s=1
  exit "$s"
) &
no_cluster_lane=$!

# The cluster lanes: each on a local cluster of its own (LOCAL_CLUSTER_STATE), side by side, so
# that their waiting for TTLs, launches and drains overlaps. Within a lane the steps run one after
# another: each test binary starts controllers of its own, which would act on another binary's
# Provisioners on the same cluster. A test that must run without others is a lane's step of its
# own (cargo_group ... -- --exact NAME), and its binary runs again with --skip NAME elsewhere.
# The lanes are balanced by the seconds in the last timing table (target/test-timings.txt).
RUNAWAY=a_pod_every_new_node_evicts_does_not_launch_nodes_in_a_loop
OUTAGE=api_server_and_etcd_outages_mid_launch_drain_and_consolidation_leave_nothing_behind
CRASH_ROUNDS=crashes_at_every_point_converge_without_leaks_stuck_nodes_or_double_launches
RANDOM_CRASHES=random_crashes_across_operations_converge_without_leaks_or_second_launches
# e2e_faults' tests run one at a time (its fault proxy's rules are global to the binary): half of
# them (by name) in lane 4, the rest in lane 5.
FAULTS_4=(half_of_create_fleet_throttled terminate_instances_failing fractions_hit refused_offerings a_dropped_then_slow)
lane_1() { # the short binaries, provisioning, then the dashboards
  local s=0 t
  # chart and rbac last: on a new machine helm is still building when the others start.
  for t in cloudprovider_aws kwok_capacity e2e_leader e2e_admission e2e_webhook_outage e2e_certs \
    convert_crds e2e_provisioning chart rbac; do
    if [[ $t == chart ]]; then wait_recorded helm-build || s=1; fi
    cargo_group "$t" "$E2E_TEST_THREADS" --test "$t" || s=1
  done
  # Crashes at random across operations (2 rounds, a fresh seed each run; 100 rounds in
  # tests/benches/random_crashes.sh): here, where the lane has room.
  cargo_group e2e_crash-random 1 --test e2e_crash -- --exact "$RANDOM_CRASHES" || s=1
  # Karpenter's dashboards and ours against a real Prometheus that scraped karpenter-rs through
  # the first write-up's scenario (tests/dashboards/check.sh).
  if wait_recorded go-builds-in-background; then
    phase dashboards bash tests/dashboards/check.sh || s=1
  else
    s=1
  fi
  return "$s"
}
lane_2() { # deprovisioning, the soak, the viewer
  local s=0 soak_out
  cargo_group e2e_deprovisioning "$E2E_TEST_THREADS" --test e2e_deprovisioning -- --skip "$RUNAWAY" || s=1
  # The soak run for 2 minutes (tests/soak.rs; 30 minutes by hand).
  soak_out=$(mktemp)
  phase soak-2min bash tests/benches/soak.sh --minutes 2 --out "$soak_out" || s=1
  rm -f "$soak_out"
  # `karpenter-rs nodes` full-screen under tmux through the first write-up (tests/viewer/tmux.sh).
  phase viewer bash tests/viewer/tmux.sh || s=1
  return "$s"
}
lane_3() { # the runaway test (alone: its bound on nodes at once rests on emptiness, which another
  # test's consolidation or expiration command would hold up), drift, then the scale benchmark
  local s=0
  cargo_group e2e_deprovisioning-runaway 1 --test e2e_deprovisioning -- --exact "$RUNAWAY" || s=1
  # Drift: its controllers run with drift on (e2e_deprovisioning's with it off).
  cargo_group e2e_drift "$E2E_TEST_THREADS" --test e2e_drift || s=1
  # The scale benchmark at 30 pods (karpenter-rs, Karpenter and the floor, each from start to
  # every node gone); it restarts its lane's cluster with an audit log and stops it.
  if wait_recorded go-builds-in-background; then
    phase scale-quick bash tests/benches/scale.sh --quick --bin "$KARPENTER_RS_BIN" || s=1
  else
    s=1
  fi
  return "$s"
}
lane_4() { # the crash tests but the rounds and the outage (one at a time: the real binary they
  # start provisions for every pending pod of the cluster), then half of e2e_faults
  local s=0
  cargo_group e2e_crash "$E2E_TEST_THREADS" --test e2e_crash -- --skip "$OUTAGE" --skip "$CRASH_ROUNDS" \
    --skip "$RANDOM_CRASHES" || s=1
  cargo_group e2e_faults-1 1 --test e2e_faults -- "${FAULTS_4[@]}" || s=1
  return "$s"
}
lane_5() { # the provisioning crash rounds, the control-plane outage, the rest of e2e_faults
  local s=0 skips=() t
  cargo_group e2e_crash-rounds 1 --test e2e_crash -- --exact "$CRASH_ROUNDS" || s=1
  cargo_group e2e_crash-outage 1 --test e2e_crash -- --exact "$OUTAGE" || s=1
  for t in "${FAULTS_4[@]}"; do skips+=(--skip "$t"); done
  cargo_group e2e_faults-2 1 --test e2e_faults -- "${skips[@]}" || s=1
  return "$s"
}
lanes=()
for n in $(seq 1 "$CLUSTER_LANES"); do
  (
    export LOCAL_CLUSTER_STATE
    LOCAL_CLUSTER_STATE=$(lane_state "$n")
    wait_recorded "cluster-up-$n" || exit 1
    "lane_$n"
  ) &
  lanes+=($!)
done
for pid in "${lanes[@]}"; do wait "$pid" || status=1; done
wait "$no_cluster_lane" || status=1
wait_recorded go-builds-in-background || status=1
wait_recorded helm-build || status=1

# The hostile-client tests measure the webhook's memory under 1,000 connections and hold clients
# to its timeouts: run once the lanes are done, not while five clusters' tests load the cores.
cargo_group webhook_hostile 2 --test webhook_hostile || status=1
# Karpenter's scheduling benchmark and ours at 1 and 100 pods (debug build), and the HTTPS load
# benchmark for 2 s per case (debug build, wrk from Debian): the benchmarks at their smallest
# sizes, so that none of them can rot; their results go to temporary files, not
# tests/benches/results/.
quick_out=$(mktemp)
phase scheduling-vs-karpenter-quick bash tests/benches/scheduling_vs_karpenter.sh --quick --out "$quick_out" || status=1
rm -f "$quick_out"
phase https-load-quick bash -c 'bash tests/benches/https_load.sh --quick >/dev/null' || status=1

summary || status=1
exit "$status"
