#!/usr/bin/env bash
# Stops what tests/karpenter/up.sh started, leaving the local cluster running.
#
# Usage: tests/karpenter/down.sh [--crds]
#   1. while Karpenter still runs: deletes the NodePools up.sh applied and waits (up to
#      KARPENTER_DRAIN_TIMEOUT, default 60 s) for Karpenter to remove their NodeClaims and Nodes;
#   2. stops karpenter-kwok and kwok #2: only the pids up.sh recorded, after checking
#      /proc/PID/cmdline (SIGTERM, 10 s, SIGKILL; tests/cluster/lib.sh stop_components);
#   3. deletes whatever is left: NodeClaims, Nodes labelled karpenter.sh/nodepool (their
#      finalizers removed, since no Karpenter is left to honour them), NodePools, KWOKNodeClasses.
#   --crds: also deletes the three CRDs (NodePool, NodeClaim, KWOKNodeClass).
# Idempotent; with the cluster down it only stops the processes and removes the state files.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/lib.sh
source "$HERE/../cluster/lib.sh"

DELETE_CRDS=0
[[ "${1:-}" == "--crds" ]] && DELETE_CRDS=1

log() { printf '[karpenter/down.sh] %s\n' "$*" >&2; }
KENV="$STATE/karpenter-kwok.env"
KSTATE="$STATE/karpenter-kwok"
[[ -d "$STATE" ]] || { log "nothing to stop ($STATE does not exist)"; exit 0; }
mkdir -p "$PIDS"
exec 8>"$STATE/.lock"
flock 8

api=0
if [[ -f "$STATE/env" ]]; then
  # shellcheck source=/dev/null
  source "$STATE/env"
  kubectl get --raw /readyz >/dev/null 2>&1 && api=1
fi
k() { kubectl --request-timeout=20s "$@"; }
have_crd() { k get crd "$1" >/dev/null 2>&1; }

if ((api)) && component_pid karpenter-kwok >/dev/null && have_crd nodepools.karpenter.sh; then
  if [[ -s "$KSTATE/nodepools" ]]; then
    log "deleting NodePools $(tr '\n' ' ' <"$KSTATE/nodepools")"
    xargs -r kubectl delete --ignore-not-found --wait=false <"$KSTATE/nodepools" >&2 || true
  fi
  deadline=$((SECONDS + ${KARPENTER_DRAIN_TIMEOUT:-60}))
  while :; do
    left="$(k get nodeclaims.karpenter.sh -o name 2>/dev/null | wc -l)"
    left=$((left + $(k get nodes -l karpenter.sh/nodepool -o name 2>/dev/null | wc -l)))
    ((left == 0)) && break
    if ((SECONDS >= deadline)); then
      log "$left NodeClaims/Nodes still there after ${KARPENTER_DRAIN_TIMEOUT:-60}s; removing them by force"
      break
    fi
    sleep 1
  done
fi

stop_components karpenter-kwok kwok-karpenter

if ((api)); then
  if have_crd nodeclaims.karpenter.sh; then
    for nc in $(k get nodeclaims.karpenter.sh -o name 2>/dev/null); do
      k patch "$nc" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    done
    k delete nodeclaims.karpenter.sh --all --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  for n in $(k get nodes -l karpenter.sh/nodepool -o name 2>/dev/null); do
    k patch "$n" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    k delete "$n" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  done
  if have_crd nodepools.karpenter.sh; then
    k delete nodepools.karpenter.sh --all --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  if have_crd kwoknodeclasses.karpenter.kwok.sh; then
    for nc in $(k get kwoknodeclasses.karpenter.kwok.sh -o name 2>/dev/null); do
      k patch "$nc" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    done
    k delete kwoknodeclasses.karpenter.kwok.sh --all --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  # Pods the deleted Nodes held are garbage-collected by the controller-manager (orphaned pods).
  if ((DELETE_CRDS)); then
    k delete crd nodepools.karpenter.sh nodeclaims.karpenter.sh kwoknodeclasses.karpenter.kwok.sh \
      --ignore-not-found --timeout=60s >/dev/null 2>&1 || log "deleting the CRDs did not finish within 60s"
  fi
fi
rm -f "$KENV" "$KSTATE/nodepools"
log "stopped; logs kept in $LOGS/karpenter-kwok.log and $LOGS/kwok-karpenter.log"
