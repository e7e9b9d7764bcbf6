#!/usr/bin/env bash
# Starts Karpenter (sigs.k8s.io/karpenter v1.6.4 with its KWOK cloud provider, built by
# tests/karpenter/build.sh) against the running local cluster (tests/cluster/up.sh), plus a
# second kwok that plays the kubelet of the Nodes Karpenter creates.
#
# Usage: tests/karpenter/up.sh [--nodepool FILE] [--instance-types FILE] [--nodeclass FILE]
#                              [--log-level debug|info|error]
#   --nodepool FILE        NodePool(s) to apply (default tests/karpenter/nodepool.yaml)
#   --instance-types FILE  Karpenter KWOK instance-types JSON (instance_types.py writes it).
#                          Default: instance_types.py --types <the NodePool file's
#                          node.kubernetes.io/instance-type In values>
#   --nodeclass FILE       KWOKNodeClass(es) to apply (default tests/karpenter/nodeclass.yaml);
#                          their status is set Ready=True (nothing in Karpenter's KWOK binary does)
#   --log-level LEVEL      Karpenter's LOG_LEVEL (default info)
# Karpenter's other settings come from the environment as in its Helm chart (BATCH_MAX_DURATION,
# BATCH_IDLE_DURATION, KUBE_CLIENT_QPS, KUBE_CLIENT_BURST, CPU_REQUESTS, FEATURE_GATES,
# PREFERENCE_POLICY, ...: pkg/operator/options/options.go); they are passed through.
#
# Steps: installs the NodePool/NodeClaim/KWOKNodeClass CRDs (waits until established), applies
# the KWOKNodeClass(es) and NodePool(s), starts kwok #2 (same flags and Node stages as the
# cluster's kwok, but --manage-nodes-with-label-selector=karpenter.sh/nodepool), starts
# karpenter-kwok and waits for its /readyz. A Karpenter this script started before is stopped
# first (so each call starts afresh with the given files).
#
# Prints on stdout, KEY=VALUE lines (also in target/local-cluster/karpenter-kwok.env):
#   KARPENTER_PID, KARPENTER_METRICS_URL, KARPENTER_HEALTH_URL, KARPENTER_LOG, KARPENTER_KWOK_PID,
#   KARPENTER_INSTANCE_TYPES (the copy Karpenter reads), KARPENTER_BIN_DIR
# Progress and errors on stderr; on failure, the log tail and exit 1 (what it started is stopped).
# Stop with tests/karpenter/down.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
source "$HERE/../cluster/lib.sh" # REPO_ROOT, STATE, PIDS, LOGS, component_pid, stop_components, free_ports

NODEPOOL="$HERE/nodepool.yaml"
NODECLASS="$HERE/nodeclass.yaml"
INSTANCE_TYPES=""
LOG_LEVEL=info
while (($#)); do
  case "$1" in
    --nodepool) NODEPOOL="$2"; shift ;;
    --instance-types) INSTANCE_TYPES="$2"; shift ;;
    --nodeclass) NODECLASS="$2"; shift ;;
    --log-level) LOG_LEVEL="$2"; shift ;;
    -h | --help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 64 ;;
  esac
  shift
done

log() { printf '[karpenter/up.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

KENV="$STATE/karpenter-kwok.env"
KSTATE="$STATE/karpenter-kwok"
READY_TIMEOUT="${KARPENTER_READY_TIMEOUT:-90}"

[[ -f "$STATE/env" ]] || die "the local cluster is not up ($STATE/env missing): run tests/cluster/up.sh first"
# shellcheck source=/dev/null
source "$STATE/env"
for f in "$NODEPOOL" "$NODECLASS" ${INSTANCE_TYPES:+"$INSTANCE_TYPES"}; do
  [[ -f "$f" ]] || die "no such file: $f"
done
NODEPOOL="$(realpath "$NODEPOOL")" NODECLASS="$(realpath "$NODECLASS")"
[[ -z "$INSTANCE_TYPES" ]] || INSTANCE_TYPES="$(realpath "$INSTANCE_TYPES")"
kubectl get --raw /readyz >/dev/null 2>&1 || die "the API server ($CLUSTER_ENDPOINT) is not ready"

# ---- build (cached) -------------------------------------------------------------------------------
KARPENTER_BIN_DIR="$(bash "$HERE/build.sh" | sed -n 's/^KARPENTER_BIN_DIR=//p' | tail -n1)"
[[ -x "$KARPENTER_BIN_DIR/karpenter-kwok" ]] || die "build.sh did not produce karpenter-kwok"

# Same lock as tests/cluster/{up,down}.sh: the cluster is not stopped or restarted under us.
exec 8>"$STATE/.lock"
flock 8
mkdir -p "$PIDS" "$LOGS" "$KSTATE"

# ---- helpers ----------------------------------------------------------------------------------------
STARTED=()
DONE=0
on_exit() {
  local rc=$?
  if ((DONE == 0 && ${#STARTED[@]} > 0)); then
    log "start-up failed (exit $rc); stopping what this run started: ${STARTED[*]}"
    stop_components "${STARTED[@]}" || true
    rm -f "$KENV"
  fi
  exit "$rc"
}
trap on_exit EXIT

setup() { # MESSAGE CMD...: run CMD, output to logs/karpenter-kwok-setup.log; fail with its tail
  local msg="$1"
  shift
  "$@" >>"$LOGS/karpenter-kwok-setup.log" 2>&1 || fail karpenter-kwok-setup "$msg"
}

# ---- stop a previous run of ours --------------------------------------------------------------------
stop_components karpenter-kwok kwok-karpenter
rm -f "$KENV"
: >"$LOGS/karpenter-kwok-setup.log"

# ---- CRDs, NodeClass, NodePool ------------------------------------------------------------------------
log "installing the CRDs from $KARPENTER_BIN_DIR/crds"
setup "installing the CRDs failed" kubectl apply --server-side --force-conflicts -f "$KARPENTER_BIN_DIR/crds/"
setup "the CRDs were not established within 60s" kubectl wait --for condition=established --timeout=60s \
  crd/nodepools.karpenter.sh crd/nodeclaims.karpenter.sh crd/kwoknodeclasses.karpenter.kwok.sh

setup "applying $NODECLASS failed" kubectl apply -f "$NODECLASS"
now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for nc in $(kubectl get -f "$NODECLASS" -o name); do
  setup "setting $nc Ready failed" kubectl patch "$nc" --subresource=status --type=merge -p \
    "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"Ready\",\"message\":\"\",\"lastTransitionTime\":\"$now\",\"observedGeneration\":1}]}}"
done

if [[ -z "$INSTANCE_TYPES" ]]; then
  types="$("$LOCAL_CLUSTER_PYTHON" - "$NODEPOOL" <<'EOF'
import sys, yaml
types = []
for doc in yaml.safe_load_all(open(sys.argv[1])):
    for r in ((doc or {}).get("spec", {}).get("template", {}).get("spec", {}).get("requirements") or []):
        if r.get("key") == "node.kubernetes.io/instance-type" and r.get("operator") == "In":
            types += [t for t in r.get("values", []) if t not in types]
print(",".join(types))
EOF
)"
  INSTANCE_TYPES="$KSTATE/instance-types.json"
  log "writing $INSTANCE_TYPES (instance_types.py --types ${types:-<all>})"
  setup "instance_types.py failed" "$LOCAL_CLUSTER_PYTHON" "$HERE/instance_types.py" --out "$INSTANCE_TYPES" ${types:+--types "$types"}
elif [[ "$INSTANCE_TYPES" != "$KSTATE/instance-types.json" ]]; then
  cp "$INSTANCE_TYPES" "$KSTATE/instance-types.json"
  INSTANCE_TYPES="$KSTATE/instance-types.json"
fi
"$LOCAL_CLUSTER_PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d, list) and d' "$INSTANCE_TYPES" ||
  die "$INSTANCE_TYPES is not a non-empty JSON list of instance types"

setup "applying $NODEPOOL failed" kubectl apply -f "$NODEPOOL"
kubectl get -f "$NODEPOOL" -o name >"$KSTATE/nodepools"

# ---- kwok #2: the "kubelet" of Karpenter's Nodes --------------------------------------------------------
# The cluster's kwok manages nodes labelled karpenter.sh/provisioner-name (karpenter-rs's); Karpenter
# v1's Nodes carry karpenter.sh/nodepool instead (and kwok.x-k8s.io/node=fake as a label and
# annotation, which nothing here selects on). Same Node stages (--config: capacity/allocatable
# from the instance-type label, like the kubelet) and lease settings as tests/cluster/up.sh's
# start_kwok; another fake pod CIDR so pod IPs of the two kwoks never collide.
read -r -a ports <<<"$(free_ports 3)"
KWOK2_PORT=${ports[0]} METRICS_PORT=${ports[1]} HEALTH_PORT=${ports[2]}
KWOK_STAGES="$STATE/kwok-stages.yaml"
[[ -f "$KWOK_STAGES" ]] || die "$KWOK_STAGES missing (tests/cluster/up.sh writes it)"
mkdir -p "$KSTATE/kwok"
start_proc kwok-karpenter "--server-address=127.0.0.1:$KWOK2_PORT" \
  env KWOK_WORKDIR="$KSTATE/kwok" \
  "$LOCAL_CLUSTER_BIN_DIR/kwok" \
  --config="$KWOK_STAGES" \
  --kubeconfig="$KUBECONFIG" \
  --manage-all-nodes=false \
  --manage-nodes-with-label-selector=karpenter.sh/nodepool \
  --node-lease-duration-seconds=40 \
  --server-address="127.0.0.1:$KWOK2_PORT" \
  --cidr=10.245.0.1/16
check_kwok2() { [[ "$(curl -fsS --max-time 5 "http://127.0.0.1:$KWOK2_PORT/healthz")" == ok ]]; }
wait_ready kwok-karpenter 30 check_kwok2

# ---- Karpenter ------------------------------------------------------------------------------------------
# v1.6.4 binds metrics and health on ":PORT" (all interfaces; it has no bind-address option). The
# ports are free loopback ports and only 127.0.0.1 is used to reach them. No SYSTEM_NAMESPACE in
# v1.6.4 (leader election is off, so it needs no namespace).
start_proc karpenter-kwok "$KARPENTER_BIN_DIR/karpenter-kwok" \
  env KUBECONFIG="$KUBECONFIG" \
  DISABLE_LEADER_ELECTION=true \
  METRICS_PORT="$METRICS_PORT" HEALTH_PROBE_PORT="$HEALTH_PORT" \
  INSTANCE_TYPES_FILE_PATH="$INSTANCE_TYPES" \
  LOG_LEVEL="$LOG_LEVEL" \
  "$KARPENTER_BIN_DIR/karpenter-kwok"
check_karpenter() { [[ "$(curl -fsS --max-time 5 "http://127.0.0.1:$HEALTH_PORT/readyz")" == ok ]]; }
wait_ready karpenter-kwok "$READY_TIMEOUT" check_karpenter
if grep -q 'failed constructing instance types' "$LOGS/karpenter-kwok.log"; then
  fail karpenter-kwok "Karpenter could not read $INSTANCE_TYPES"
fi

# The NodePool(s) become Ready once Karpenter has reconciled them (NodeClassReady, ValidationSucceeded).
deadline=$((SECONDS + READY_TIMEOUT))
while read -r np; do
  until [[ "$(kubectl get "$np" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; do
    ((SECONDS < deadline)) || fail karpenter-kwok "$np not Ready after ${READY_TIMEOUT}s: $(kubectl get "$np" -o jsonpath='{.status.conditions}' 2>&1)"
    sleep 0.5
  done
done <"$KSTATE/nodepools"

KARPENTER_PID="$(component_pid karpenter-kwok)"
KWOK2_PID="$(component_pid kwok-karpenter)"
cat >"$KENV" <<EOF
KARPENTER_PID=$KARPENTER_PID
KARPENTER_METRICS_URL=http://127.0.0.1:$METRICS_PORT/metrics
KARPENTER_HEALTH_URL=http://127.0.0.1:$HEALTH_PORT/readyz
KARPENTER_LOG=$LOGS/karpenter-kwok.log
KARPENTER_KWOK_PID=$KWOK2_PID
KARPENTER_KWOK_URL=http://127.0.0.1:$KWOK2_PORT/healthz
KARPENTER_INSTANCE_TYPES=$INSTANCE_TYPES
KARPENTER_BIN_DIR=$KARPENTER_BIN_DIR
EOF
DONE=1
log "Karpenter running: pid $KARPENTER_PID, metrics http://127.0.0.1:$METRICS_PORT/metrics, log $LOGS/karpenter-kwok.log; kwok #2 pid $KWOK2_PID"
cat "$KENV"
