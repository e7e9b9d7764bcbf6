#!/usr/bin/env bash
# Stops or starts one component of the running local cluster, for the outage tests
# (tests/e2e_crash.rs): the component is stopped as a crash or a maintenance would stop it
# (SIGTERM, then SIGKILL after 10 s) and started again later with its exact command line and
# its data kept (etcd's data directory is not wiped, unlike on a fresh `up.sh`).
#
#   bash tests/cluster/restart.sh stop kube-apiserver   # or etcd, kube-scheduler, ...
#   bash tests/cluster/restart.sh start kube-apiserver  # waits until it answers again
#
# `stop` records the command line in target/local-cluster/pids/<name>.cmdline; `start` runs it
# under setsid like up.sh does, records the new pid, and waits (at most 60 s) until the
# component is healthy: /readyz for kube-apiserver, /health for etcd, a live process otherwise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
log() { echo "[restart.sh] $*" >&2; }

usage() {
  echo "usage: $0 stop|start COMPONENT" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
what="$1" name="$2"
[[ " ${COMPONENTS[*]} " == *" $name "* ]] || { echo "$0: unknown component $name (one of ${COMPONENTS[*]})" >&2; exit 2; }
[[ -f "$STATE/env" ]] || { echo "$0: the local cluster is not up (no $STATE/env)" >&2; exit 1; }
source "$STATE/env"
[[ -f "$STATE/state.env" ]] && source "$STATE/state.env"
saved="$PIDS/$name.cmdline" saved_exe="$PIDS/$name.exe.stopped"

case "$what" in
  stop)
    pid="$(component_pid "$name")" || { echo "$0: $name is not running" >&2; exit 1; }
    cp "/proc/$pid/cmdline" "$saved"
    cp "$PIDS/$name.exe" "$saved_exe"
    STOP_TIMEOUT=10 stop_components "$name"
    log "stopped $name (pid $pid)"
    ;;
  start)
    [[ -f "$saved" && -f "$saved_exe" ]] || { echo "$0: $name was not stopped by this script (no $saved)" >&2; exit 1; }
    component_pid "$name" >/dev/null && { echo "$0: $name is already running" >&2; exit 1; }
    mapfile -d '' args <"$saved"
    STARTED=()
    # Appends to the component's log rather than truncating it (start_proc would).
    setsid "${args[@]}" >>"$LOGS/$name.log" 2>&1 </dev/null 8>&- &
    pid=$!
    mv "$saved_exe" "$PIDS/$name.exe"
    printf '%s\n' "$pid" >"$PIDS/$name.pid"
    wait_exec "$pid" "$(<"$PIDS/$name.exe")"
    case "$name" in
      kube-apiserver) wait_ready "$name" 60 kubectl --kubeconfig "$KUBECONFIG" get --raw /readyz ;;
      etcd) wait_ready "$name" 60 curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" ;;
      *) sleep 1; component_pid "$name" >/dev/null || fail "$name" "exited right after starting" ;;
    esac
    rm -f "$saved"
    log "started $name again (pid $pid)"
    ;;
  *) usage ;;
esac
