#!/usr/bin/env bash
# The scale benchmark: the same workload of N pending pods on the local control plane, driven in
# one run by karpenter-rs, by Karpenter (its KWOK cloud provider, built from the Go module
# sigs.k8s.io/karpenter by tests/karpenter/build.sh) and by no autoscaler on nodes made up front
# (the floor the API server, kube-scheduler and kwok set on their own). See scale.py for what is
# measured and how.
#
# Usage: tests/benches/scale.sh [--sizes 100,1000,5000,10000] [--quick] [--autoscalers LIST] [--append]
#   --quick: 30 pods, karpenter-rs's debug build: what tests/run.sh runs so the script cannot rot.
#            Writes nothing under tests/benches/results.
#   --append: keep the rows of scale.jsonl from an earlier run (e.g. the large sizes measured in a
#            second sitting) and render them all; a size run again replaces its rows.
#   --bin FILE: run this karpenter-rs instead of building one (another build, or a wrapper that
#            runs it under a heap profiler; RSS and CPU are then the wrapper's, not the controller's,
#            and a wrapper that forks must stop its child itself: only the wrapper is stopped).
# Results: tests/benches/results/scale.md (+ scale.jsonl, the raw figures), unless --quick.
#
# The cluster is started afresh with the API server's audit log on (API requests are counted from
# it) and stopped at the end. Everything listens on 127.0.0.1 only; every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/../.."

SIZES=100,1000,5000,10000
AUTOSCALERS=karpenter-rs,karpenter,floor
PROFILE=release
QUICK=0
APPEND=0
BIN=
while (($#)); do
  case "$1" in
    --sizes) SIZES="$2"; shift ;;
    --autoscalers) AUTOSCALERS="$2"; shift ;;
    --quick) QUICK=1; SIZES=30; PROFILE=debug ;;
    --append) APPEND=1 ;;
    --bin) BIN="$2"; shift ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 64 ;;
  esac
  shift
done

log() { printf '[scale.sh] %s\n' "$*" >&2; }

bash tests/cluster/down.sh >/dev/null 2>&1 || true
trap 'bash tests/karpenter/down.sh >/dev/null 2>&1 || true; bash tests/cluster/down.sh >/dev/null 2>&1 || true' EXIT
# kube-controller-manager and kube-scheduler at 500 requests/s (100 in the test cluster), so that
# creating and scheduling the pods is not what the figures measure.
LOCAL_CLUSTER_AUDIT=1 LOCAL_CLUSTER_QPS=500 bash tests/cluster/up.sh >/dev/null
# shellcheck source=/dev/null
source "${LOCAL_CLUSTER_STATE:-target/local-cluster}/env"

work=$(mktemp -d)
# One binary for the whole run, copied out of cargo's target dir so later builds cannot change it.
if [[ -n "$BIN" ]]; then
  cp "$BIN" "$work/karpenter-rs"
else
  log "building karpenter-rs ($PROFILE)"
  if [[ "$PROFILE" == release ]]; then cargo build --quiet --release --bin karpenter-rs; else cargo build --quiet --bin karpenter-rs; fi
  cp "${CARGO_TARGET_DIR:-target}/$PROFILE/karpenter-rs" "$work/karpenter-rs"
fi
export KARPENTER_RS_BIN="$work/karpenter-rs"
types="$work/instance-types.json"
"$LOCAL_CLUSTER_PYTHON" tests/karpenter/instance_types.py --out "$types" \
  --types "$("$LOCAL_CLUSTER_PYTHON" -c 'import sys; sys.path.insert(0, "tests/benches"); import scale; print(",".join(scale.TYPES))')"
if [[ ",$AUTOSCALERS," == *,karpenter,* ]]; then
  log "building Karpenter (cached after the first time)"
  bash tests/karpenter/build.sh >/dev/null
fi

if ((QUICK)); then
  out="$work/scale.jsonl"
else
  out=tests/benches/results/scale.jsonl
  if ((APPEND)) && [[ -f "$out" ]]; then
    # Rows of the sizes about to be measured again are dropped; the rest stay.
    "$LOCAL_CLUSTER_PYTHON" - "$out" "$SIZES" <<'PY'
import json, sys
path, sizes = sys.argv[1], {int(s) for s in sys.argv[2].split(",")}
rows = [l for l in open(path) if l.strip() and json.loads(l)["pods"] not in sizes]
open(path, "w").writelines(rows)
PY
  else
    : >"$out"
  fi
fi
"$LOCAL_CLUSTER_PYTHON" tests/benches/scale.py --sizes "$SIZES" --autoscalers "$AUTOSCALERS" \
  --profile "$PROFILE" --instance-types "$types" --out "$out"
"$LOCAL_CLUSTER_PYTHON" tests/benches/scale_report.py "$out" >"$work/scale.md"
if ((QUICK)); then
  cat "$work/scale.md"
  # Every pod ran and every node went, on both sides: the script works end to end.
  "$LOCAL_CLUSTER_PYTHON" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r for r in rows if r["running"] < r["pods"] or r["all_running_s"] is None or r["nodes_gone_s"] is None]
assert rows and not bad, f"incomplete runs: {bad}"
print(f"scale --quick: {len(rows)} runs complete")
PY
else
  cp "$work/scale.md" tests/benches/results/scale.md
  log "results: tests/benches/results/scale.md"
fi
rm -rf "$work"
