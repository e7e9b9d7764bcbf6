# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts
# Shared by up.sh and down.sh (sourced, not executed).
# Layout of the running cluster's state, relative to the repository root (LOCAL_CLUSTER_STATE
# instead of target/local-cluster where set):
#   target/local-cluster/pids/<component>.pid   pid of the process we started
#   target/local-cluster/pids/<component>.exe   the argument that identifies it in
#                                               /proc/<pid>/cmdline (binary or script path)
#   target/local-cluster/logs/<component>.log   its stdout+stderr
#   target/local-cluster/env                    export lines (only while up)
#   target/local-cluster/state.env              ports etc. used by up.sh's health checks

CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CLUSTER_DIR/../.." && pwd)"
# LOCAL_CLUSTER_STATE puts a second (third, ...) local cluster's state elsewhere, so that several
# clusters run side by side (tests/run.sh gives each lane of end-to-end tests one); relative paths
# are taken from the repository root.
STATE="${LOCAL_CLUSTER_STATE:-target/local-cluster}"
[[ "$STATE" == /* ]] || STATE="$REPO_ROOT/$STATE"
PIDS="$STATE/pids"
LOGS="$STATE/logs"

# Start order; stopped in reverse.
COMPONENTS=(moto etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubelet-standin)
# Started on request (up.sh --with-karpenter) on top of a running cluster; stopped first.
OPTIONAL_COMPONENTS=(karpenter)

# proc_has_arg PID ARG: true if ARG is one whole argument of PID's command line.
# A zombie or a vanished process has an empty cmdline and never matches, and a
# recycled pid running something else does not match either.
proc_has_arg() {
  local pid="$1" want="$2" arg
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  while IFS= read -r -d '' arg; do
    [[ "$arg" == "$want" ]] && return 0
  done <"/proc/$pid/cmdline" 2>/dev/null
  return 1
}

# wait_exec PID ARG: waits (at most 10 s) until PID has exec'd a command with ARG, or is gone.
# A just-forked background shell still has its parent script's command line, so an identity
# check (component_pid) made before the exec takes a process that is still starting for one
# that exited, and it then runs on unrecorded and unstopped.
wait_exec() {
  local pid="$1" want="$2" i
  for ((i = 0; i < 200; i++)); do
    proc_has_arg "$pid" "$want" && return 0
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
}

# component_pid NAME: prints the recorded pid of NAME and returns 0 if that
# process is alive and still the one we started; returns 1 otherwise.
component_pid() {
  local name="$1" pid exe
  [[ -f "$PIDS/$name.pid" && -f "$PIDS/$name.exe" ]] || return 1
  pid="$(<"$PIDS/$name.pid")"
  exe="$(<"$PIDS/$name.exe")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  proc_has_arg "$pid" "$exe" || return 1
  echo "$pid"
}

# stop_components NAME...: SIGTERM every named component we started (verified
# by component_pid), wait up to STOP_TIMEOUT seconds (default 10), SIGKILL the
# rest, then remove their pid files. Never touches a process it cannot verify.
stop_components() {
  local name pid deadline
  local -A pending=()
  for name in "$@"; do
    if pid="$(component_pid "$name")"; then
      echo "stopping $name (pid $pid)" >&2
      kill -TERM "$pid" 2>/dev/null || true
      pending[$name]="$pid"
    elif [[ -f "$PIDS/$name.pid" ]]; then
      echo "$name: recorded pid $(<"$PIDS/$name.pid") is not running (or is not ours); dropping the pid file" >&2
    fi
  done
  deadline=$((SECONDS + ${STOP_TIMEOUT:-10}))
  while ((${#pending[@]} > 0 && SECONDS < deadline)); do
    for name in "${!pending[@]}"; do
      proc_has_arg "${pending[$name]}" "$(<"$PIDS/$name.exe")" || unset "pending[$name]"
    done
    ((${#pending[@]} > 0)) && sleep 0.2
  done
  for name in "${!pending[@]}"; do
    if proc_has_arg "${pending[$name]}" "$(<"$PIDS/$name.exe")"; then
      echo "$name (pid ${pending[$name]}) ignored SIGTERM; sending SIGKILL" >&2
      kill -KILL "${pending[$name]}" 2>/dev/null || true
    fi
  done
  for name in "$@"; do
    rm -f "$PIDS/$name.pid" "$PIDS/$name.exe"
  done
}

# stop_all: stop every component, last started first.
stop_all() {
  local reversed=() i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do reversed+=("${COMPONENTS[i]}"); done
  stop_components "${OPTIONAL_COMPONENTS[@]}" "${reversed[@]}"
}

# ---- starting components (tests/cluster/up.sh, tests/karpenter/up.sh) -------
# Each caller defines log() (its own prefix) and the array STARTED (what it stopped again on failure).

# fail NAME MESSAGE: print MESSAGE and the tail of NAME's log, then exit 1
# (the EXIT trap stops everything started so far).
fail() {
  local name="$1"
  shift
  log "ERROR: $name: $*"
  if [[ -f "$LOGS/$name.log" ]]; then
    log "---- last 40 lines of $LOGS/$name.log ----"
    tail -n 40 "$LOGS/$name.log" >&2 || true
    log "----"
  fi
  exit 1
}

# start_proc NAME IDENT CMD...: run CMD in its own session (so it outlives this
# script and a terminal hang-up), output to logs/NAME.log, and record its pid.
# IDENT is the argument of CMD that down.sh looks for in /proc/PID/cmdline.
# fd 8 (our lock) is closed for the child so it does not keep the lock.
start_proc() {
  local name="$1" ident="$2"
  shift 2
  : >"$LOGS/$name.log"
  # In a non-interactive script the background child is not a process-group
  # leader, so setsid calls setsid(2) and execs CMD in place: $! is CMD's pid.
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 8>&- &
  local pid=$!
  printf '%s\n' "$ident" >"$PIDS/$name.exe"
  printf '%s\n' "$pid" >"$PIDS/$name.pid"
  STARTED+=("$name")
  wait_exec "$pid" "$ident"
  log "started $name (pid $pid)"
}

# wait_ready NAME TIMEOUT CHECK...: poll CHECK until it succeeds; fail early if
# NAME's process died, fail after TIMEOUT seconds.
wait_ready() {
  local name="$1" timeout="$2" start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    component_pid "$name" >/dev/null || fail "$name" "process exited during start-up"
    ((SECONDS - start < timeout)) || fail "$name" "not ready after ${timeout}s"
    sleep 0.25
  done
  log "$name ready after $((SECONDS - start))s"
}

# free_ports N: N distinct free TCP ports on 127.0.0.1, chosen at random below the kernel's
# ephemeral range (ip_local_port_range) and checked free by binding them together. A port from
# the ephemeral range (what binding port 0 gives) can be taken by any outgoing connection before
# the component binds it, which with five clusters and their clients busy happened ("bind:
# address already in use" from etcd); below the range only a program that picks its port on
# purpose can take it.
free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral_low = 32768
low = 10000
high = max(ephemeral_low, low + 1000)
socks = []
while len(socks) < int(sys.argv[1]):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(low, high)))
    except OSError:
        s.close()
        continue
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
