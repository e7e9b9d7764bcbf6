#!/usr/bin/env bash
# Stops the local cluster started by tests/cluster/up.sh.
#
# Only the processes whose pids up.sh recorded in target/local-cluster/pids/
# are signalled, and only after /proc/PID/cmdline shows they still run the
# binary (or script) recorded next to the pid: SIGTERM, up to 10 s
# (STOP_TIMEOUT) of grace, then SIGKILL. Pid files and the env file are
# removed; logs, kubeconfig, certificates and fixtures.json are left for
# post-mortems. Idempotent: with nothing running it just cleans up and exits 0.
# `down.sh --karpenter-only` stops only the karpenter-rs of `up.sh --with-karpenter`.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ ! -d "$STATE" ]]; then
  echo "[down.sh] nothing to stop ($STATE does not exist)" >&2
  exit 0
fi
mkdir -p "$PIDS"
# Same lock as up.sh, so a stop never races a start.
exec 8>"$STATE/.lock"
flock 8

if [[ "${1:-}" == "--karpenter-only" ]]; then
  # Leave the cluster running; stop only the karpenter-rs that up.sh --with-karpenter started.
  stop_components karpenter
  rm -f "$STATE/karpenter.env"
  exit 0
fi
stop_all
rm -f "$STATE/env" "$STATE/karpenter.env"
echo "[down.sh] stopped; logs kept in $LOGS" >&2
