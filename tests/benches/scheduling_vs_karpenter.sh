#!/usr/bin/env bash
# Karpenter's own scheduling benchmark and ours, on the same instance types and pod mix, in one run:
#   (a) BenchmarkScheduling{1,100,1000,5000,20000} of sigs.k8s.io/karpenter v1.6.4
#       (pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go: fake.InstanceTypes(400),
#       makeDiversePods), the `scheduling.test` binary tests/karpenter/build.sh builds outside the repo;
#   (b) `cargo bench --bench scheduling_vs_karpenter` (tests/benches/scheduling_vs_karpenter.rs), the
#       same catalogue, NodePool and mix for `scheduling::simulate`.
# Writes tests/benches/results/scheduling-vs-karpenter.md: per size, pods/s and nodes of both, and
# the ratio of pods/s; the machine, its load before and after, versions, and how to reproduce.
#
# Usage: bash tests/benches/scheduling_vs_karpenter.sh [--quick] [--sizes 1,100,...]
#            [--benchtime DURATION] [--out FILE]
#   --quick        sizes 1 and 100 only (for CI; about a minute once both sides are built)
#   --sizes        comma-separated subset of 1,100,1000,5000,20000 (default: all five)
#   --benchtime    Go's -test.benchtime, and the same minimum time per size for ours (default 3s)
#   --out          results file (default tests/benches/results/scheduling-vs-karpenter.md)
# Honours CARGO_TARGET_DIR. Both sides are built before anything is timed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZES="1,100,1000,5000,20000"
BENCHTIME="3s"
OUT="$ROOT/tests/benches/results/scheduling-vs-karpenter.md"
PROFILE=() # --quick: the dev profile (CI checks that it runs; its figures are not results)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) SIZES="1,100"; PROFILE=(--profile dev); shift ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --benchtime) BENCHTIME="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
for s in ${SIZES//,/ }; do
  [[ "$s" =~ ^(1|100|1000|5000|20000)$ ]] || { echo "--sizes: $s is not one of Karpenter's 1,100,1000,5000,20000" >&2; exit 2; }
done
[[ "$BENCHTIME" =~ ^[0-9]+(ms|s)$ ]] || { echo "--benchtime: want e.g. 3s or 500ms, got $BENCHTIME" >&2; exit 2; }
BENCHTIME_MS=$(( ${BENCHTIME%%[a-z]*} * $([[ "$BENCHTIME" == *ms ]] && echo 1 || echo 1000) ))

log() { printf '[scheduling_vs_karpenter] %s\n' "$*" >&2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# 1. Build both sides first, so that neither build competes with the timed runs.
log "building Karpenter's scheduling.test (cached)"
KARPENTER_BIN_DIR="$(bash "$ROOT/tests/karpenter/build.sh" | tail -1 | sed -n 's/^KARPENTER_BIN_DIR=//p')"
[[ -x "$KARPENTER_BIN_DIR/scheduling.test" ]] || { log "no scheduling.test in '$KARPENTER_BIN_DIR'"; exit 1; }
log "building the bench (cargo bench --no-run)"
(cd "$ROOT" && cargo bench "${PROFILE[@]}" --bench scheduling_vs_karpenter --no-run) >&2

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
START="$(date -u '+%Y-%m-%d %H:%M UTC')"
T0=$SECONDS

# 2. Karpenter. The benchmark draws its pods from one math/rand seeded with 42 and shared by every
# size, so it runs from a scratch directory with the regex the sizes make.
REGEX="BenchmarkScheduling(${SIZES//,/|})\$"
log "Karpenter: -test.bench '$REGEX' -test.benchtime $BENCHTIME"
(cd "$WORK" && "$KARPENTER_BIN_DIR/scheduling.test" -test.run '^$' -test.bench "$REGEX" \
  -test.benchtime "$BENCHTIME") | tee "$WORK/karpenter.txt" >&2
T1=$SECONDS

# 3. Ours.
log "ours: cargo bench --bench scheduling_vs_karpenter -- --sizes $SIZES --benchtime-ms $BENCHTIME_MS"
(cd "$ROOT" && cargo bench "${PROFILE[@]}" --bench scheduling_vs_karpenter -- --sizes "$SIZES" --benchtime-ms "$BENCHTIME_MS") \
  2>/dev/null | tee "$WORK/ours.txt" >&2
T2=$SECONDS
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

# 4. Parse: Go prints `BenchmarkScheduling100-2  N  ns/op  <v> nodes  <v> pods  <v> pods/sec`;
# ours prints `RESULT | pods | runs | mean ms | median ms | pods/s | µs per pod | nodes | unschedulable | solve pods/s |`.
karpenter_field() { # $1 size, $2 unit
  awk -v name="BenchmarkScheduling$1" -v unit="$2" '
    { sub(/-[0-9]+$/, "", $1) } $1 == name { for (i = 2; i <= NF; i++) if ($i == unit) { print $(i-1); exit } }' "$WORK/karpenter.txt"
}
ours_field() { # $1 size, $2 column (1-based after RESULT)
  awk -F'|' -v n="$1" -v c="$2" '$1 ~ /^RESULT/ && $2 + 0 == n && $2 ~ /[0-9]/ { gsub(/ /, "", $(c+1)); print $(c+1); exit }' "$WORK/ours.txt"
}
fmt_int() { printf "%'.0f" "$1"; }

ROWS=""
ALL_MET=yes
for s in ${SIZES//,/ }; do
  kps="$(karpenter_field "$s" pods/sec)"; kn="$(karpenter_field "$s" nodes)"; kruns="$(awk -v name="BenchmarkScheduling$s" '{ sub(/-[0-9]+$/, "", $1) } $1 == name { print $2; exit }' "$WORK/karpenter.txt")"
  ops="$(ours_field "$s" 5)"; on="$(ours_field "$s" 7)"; oruns="$(ours_field "$s" 2)"; ounsched="$(ours_field "$s" 8)"
  osolve="$(ours_field "$s" 9)"
  [[ -n "$kps" && -n "$ops" && -n "$osolve" ]] || { log "size $s: missing figures (karpenter '$kps', ours '$ops', '$osolve')"; exit 1; }
  whole="$(awk -v o="$ops" -v k="$kps" 'BEGIN { printf "%.0f", o / k }')"
  ratio="$(awk -v o="$osolve" -v k="$kps" 'BEGIN { printf "%.0f", o / k }')"
  kn_int="$(printf '%.0f' "$kn")"
  met="yes"
  if [[ "$s" -ge 100 ]] && { [[ "$ratio" -lt 100 ]] || [[ "$on" -gt "$kn_int" ]]; }; then met="no"; ALL_MET=no; fi
  [[ "$s" -lt 100 ]] && met="(not a target)"
  [[ "$ounsched" == "0" ]] || met="no ($ounsched unschedulable)"
  ROWS+="| $(fmt_int "$s") | $(fmt_int "$kps") | $(fmt_int "$kn_int") | $kruns | $(fmt_int "$osolve") | $(fmt_int "$ops") | $(fmt_int "$on") | $oruns | ${ratio}x | ${whole}x | $met |"$'\n'
done

CPU_MODEL="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
HIGH_LOAD="$(awk -v a="${LOAD_BEFORE%% *}" -v b="${LOAD_AFTER%% *}" -v n="$(nproc)" 'BEGIN { m = (a > b ? a : b); print (m >= n * 0.75 ? "yes" : "no") }')"
COMMIT="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
DIRTY="$(cd "$ROOT" && { git diff --quiet HEAD -- src tests/benches 2>/dev/null || echo ' + uncommitted changes'; })"
GO_VERSION="$(basename "$KARPENTER_BIN_DIR" | sed 's/^karpenter-[^-]*-//')"
RUSTC="$(rustc --version)"
SIZES_ARG=""; [[ "$SIZES" == "1,100,1000,5000,20000" ]] || SIZES_ARG=" --sizes $SIZES"
BT_ARG=""; [[ "$BENCHTIME" == "3s" ]] || BT_ARG=" --benchtime $BENCHTIME"

mkdir -p "$(dirname "$OUT")"
{
  echo "# Scheduling: Karpenter's benchmark and ours, side by side"
  echo
  echo "Generated by \`bash tests/benches/scheduling_vs_karpenter.sh$SIZES_ARG$BT_ARG\` on $START, in one run"
  echo "(Karpenter $((T1 - T0)) s, then ours $((T2 - T1)) s)."
  echo
  echo "- Machine: $(nproc) cores, $CPU_MODEL. Load average (1/5/15 min) before: $LOAD_BEFORE, after: $LOAD_AFTER."
  if [[ "$HIGH_LOAD" == yes ]]; then
    echo "  **The load was high**: other processes (builds, the local cluster) shared the cores during the run, so"
    echo "  both sides' absolute figures are low and noisy; both ran under the same conditions, one after the other."
  fi
  echo "- Karpenter: sigs.k8s.io/karpenter v1.6.4, \`scheduling.test\` built by tests/karpenter/build.sh with $GO_VERSION"
  echo "  (\`go test -c -tags test_performance\`), run as \`scheduling.test -test.run '^\$' -test.bench '$REGEX' -test.benchtime $BENCHTIME\`."
  echo "- Ours: karpenter-rs $COMMIT$DIRTY, $RUSTC, release profile (thin LTO),"
  echo "  \`cargo bench --bench scheduling_vs_karpenter -- --sizes $SIZES --benchtime-ms $BENCHTIME_MS\`."
  echo
  echo "**Same input on both sides.** Instance types: Karpenter's \`fake.InstanceTypes(400)\` rebuilt as ours"
  echo "(tests/benches/fixture.rs \`fake_instance_types\`): \`fake-it-0\` .. \`fake-it-399\` with i+1 vCPUs, 2(i+1) GiB and 10(i+1)"
  echo "pods, amd64, linux/windows/darwin, spot in test-zone-1/2 and on-demand in test-zone-1/2/3 at 0.1 × vCPUs + 0.1 ×"
  echo "bytes / 1e9 \$/h, kube-reserved 100m cpu and 10Mi, fake's \`size\`/\`special\`/\`integer\` labels. NodePool: no"
  echo "requirements, limits cpu 10000000 and memory 10000000Gi. Pods: \`makeDiversePods\`, 1/5 each generic, zonal"
  echo "topology spread and hostname topology spread (maxSkew 1, DoNotSchedule, random \`my-label\` selector), zonal"
  echo "self-affinity (random \`my-affininity\` value) and hostname anti-affinity (all \`app: nginx\`); cpu from"
  echo "{100m, 250m, 500m, 1, 1.5}, memory from {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi}. The random draws are not the same"
  echo "numbers: Karpenter draws from Go's \`math/rand\` seeded with 42 and shared across sizes (so its own mix for a size"
  echo "depends on how often earlier benchmarks ran), ours from a fixed-seed generator, same sets, same order of draws."
  echo
  echo "**What is timed.** Karpenter: \`Scheduler.Solve\` per iteration (its scheduler, topology and templates are built"
  echo "before the timer), pods/s = pods / (time / b.N). Ours, after one untimed warm-up, repeated for at least the"
  echo "bench time and 3 times, pods/s = pods / mean time, two ways: **as Karpenter's** (a \`Simulator\` prepared"
  echo "before the timer, then \`simulate_without\` nothing per run; it still copies the templates and builds the"
  echo "topology each run), and the **whole** \`scheduling::simulate\` (templates included). Runs: iterations timed"
  echo "(Go's b.N; ours, whole). Ratio: ours as Karpenter's over Karpenter's, then whole over Karpenter's. Target:"
  echo "ours at least 100x Karpenter's pods/s from 100 to 20,000 pods, with no more nodes (judged on the first ratio)."
  echo
  echo "| pods | Karpenter pods/s | Karpenter nodes | Karpenter runs | ours pods/s, as Karpenter's | ours pods/s, whole | ours nodes | ours runs | ratio | ratio, whole | target met |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
  printf '%s' "$ROWS"
  echo
  if [[ "$ALL_MET" == yes ]]; then echo "Target met at every size measured from 100 pods up."; else echo "Target **not** met at every size (see the last column)."; fi
  echo
  echo "## Reproduce"
  echo
  echo '```sh'
  echo "bash tests/benches/scheduling_vs_karpenter.sh            # all sizes, about 5 minutes once built"
  echo "bash tests/benches/scheduling_vs_karpenter.sh --quick    # 1 and 100 pods (CI)"
  echo "# one side alone:"
  echo "cargo bench --bench scheduling_vs_karpenter -- --sizes 1000,20000"
  echo "cd \$(mktemp -d) && \$KARPENTER_BIN_DIR/scheduling.test -test.run '^\$' -test.bench 'BenchmarkScheduling(1|100|1000|5000|20000)\$' -test.benchtime 3s"
  echo '```'
  echo
  echo "## Raw output"
  echo
  echo '```text'
  grep -E '^(goos|goarch|cpu|Benchmark)' "$WORK/karpenter.txt" || true
  echo
  grep -E '^(instance types|RESULT)' "$WORK/ours.txt" || true
  echo '```'
} >"$OUT"
log "wrote $OUT"
