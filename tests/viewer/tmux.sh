#!/usr/bin/env bash
# `karpenter-rs nodes` in a real terminal against the local cluster: the viewer runs full-screen
# in a detached tmux session (160×30) while tests/cluster/demo.sh plays the first write-up's
# scenario; the pane is captured every second. The viewer asks the running controller's metrics
# port for each node's reason (`--controller`). Passes when a capture shows the launched node's row
# (t3.large, on-demand, its zone, its price from the annotation, its pods, Ready, a reason) with the
# pods Running, Enter opens that node's explanation (a capture shows `explain node` and its METHOD
# table) and Esc closes it, a later capture shows no nodes, and `q` ends the viewer. `nodes --once`
# is run against the same cluster while the node is up; its output is kept as the README's capture.
# Frames: target/local-cluster/logs/viewer-frames.txt; the --once capture: viewer-once.txt there.
# Everything is on 127.0.0.1 and bounded; the tmux server (its own socket) is stopped at the end.
# Usage: tests/viewer/tmux.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '[viewer] %s\n' "$*" >&2; }
command -v tmux >/dev/null || { log "tmux is required (apt-get install tmux)"; exit 1; }

bash tests/cluster/up.sh --with-karpenter >/dev/null
# shellcheck source=/dev/null
source "${LOCAL_CLUSTER_STATE:-target/local-cluster}/env"
# shellcheck source=/dev/null
source "${LOCAL_CLUSTER_STATE:-target/local-cluster}/karpenter.env"
CONTROLLER="http://127.0.0.1:$KARPENTER_METRICS_PORT"
BIN="${KARPENTER_RS_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/${KARPENTER_RS_PROFILE:-debug}/karpenter-rs}"
[[ -x "$BIN" ]] || { log "no binary at $BIN (tests/cluster/up.sh --with-karpenter builds it)"; exit 1; }
LOGS="${LOCAL_CLUSTER_STATE:-$PWD/target/local-cluster}/logs"
FRAMES="$LOGS/viewer-frames.txt"
ONCE="$LOGS/viewer-once.txt"
EXITED="$LOGS/viewer-exit-status"
: >"$FRAMES"
rm -f "$ONCE" "$EXITED"

SOCKET="karpenter-rs-viewer-$$"
tmux_() { tmux -L "$SOCKET" -f /dev/null "$@"; }
capturer=""
cleanup() {
  [[ -n "$capturer" ]] && kill "$capturer" 2>/dev/null
  tmux_ kill-server 2>/dev/null || true
}
trap cleanup EXIT

tmux_ new-session -d -s viewer -x 160 -y 30 "env KUBECONFIG='$KUBECONFIG' TERM=xterm-256color '$BIN' nodes --controller '$CONTROLLER'; echo \$? >'$EXITED'; sleep 30"
# Captures every second, each headed by its time, until stopped.
(
  while true; do
    printf '=== %s\n' "$(date +%s)" >>"$FRAMES"
    tmux_ capture-pane -p -t viewer >>"$FRAMES" 2>/dev/null || true
    sleep 1
  done
) &
capturer=$!

# The row of the first write-up's node: type, capacity type, zone, annotated price, pods, Ready.
ROW='t3\.large +on-demand +ap-northeast-2[ac] +\$0\.[0-9]{4} +[0-9]+/[0-9]+ .* Ready'
# The same row with a reason in the WHY column (not `…` or `-`).
ROW_WHY="$ROW  +[a-z]"
# While the pods run (HOLD), one --once frame; then Enter opens the node's explanation in the
# viewer (its only row is selected) and Esc closes it.
(
  for _ in $(seq 1 240); do
    if kubectl get pods -l app=nginx-karpenter 2>/dev/null | grep -q ' Running '; then
      sleep 2
      KUBECONFIG="$KUBECONFIG" timeout 60 "$BIN" nodes --once --width 170 --controller "$CONTROLLER" >"$ONCE.tmp" 2>&1 && mv "$ONCE.tmp" "$ONCE"
      tmux_ send-keys -t viewer Enter
      sleep 3
      tmux_ send-keys -t viewer Escape
      exit 0
    fi
    sleep 1
  done
) &
once=$!

log "the first write-up's scenario (tests/cluster/demo.sh) with the viewer in tmux"
TIMEOUT=300 HOLD=8 bash tests/cluster/demo.sh >&2
wait "$once" || true
sleep 3 # the viewer redraws every 0.5 s; the capturer every second
kill "$capturer" 2>/dev/null || true
wait "$capturer" 2>/dev/null || true
capturer=""

failed=0
# A frame with the node's row and its two running pods, and the last frame.
ROW="$ROW_WHY" "$LOCAL_CLUSTER_PYTHON" - "$FRAMES" <<'PY' || failed=1
import os, re, sys
frames = [f.split("\n", 1)[1] if "\n" in f else "" for f in open(sys.argv[1]).read().split("=== ")[1:]]
row = re.compile(os.environ["ROW"])
shown = next((f for f in frames if row.search(f) and "2 running" in f), None)
ok = True
if shown:
    print("[viewer] a frame with the launched node, its 2 running pods and its reason:", file=sys.stderr)
    print("\n".join(shown.splitlines()[:12]), file=sys.stderr)
else:
    print(f"[viewer] no frame showed the t3.large node Ready with 2 running pods and a reason ({len(frames)} frames in {sys.argv[1]})", file=sys.stderr)
    ok = False
explained = next((f for f in frames if "explain node ip-" in f and "METHOD" in f), None)
if explained:
    print("[viewer] Enter opened the node's explanation:", file=sys.stderr)
    print("\n".join(explained.splitlines()[:20]), file=sys.stderr)
else:
    print("[viewer] no frame showed the node's explanation after Enter", file=sys.stderr)
    ok = False
last = frames[-1] if frames else ""
if "explain node" in last:
    print("[viewer] the explanation was still open in the last frame (Esc did not close it)", file=sys.stderr)
    ok = False
if "karpenter-rs nodes  0 nodes" in last:
    print("[viewer] the last frame shows no nodes (the node is gone)", file=sys.stderr)
else:
    print("[viewer] the last frame still shows nodes (or none was captured):\n" + "\n".join(last.splitlines()[:12]), file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)
PY
if [[ -s "$ONCE" ]] && grep -Eq "$ROW_WHY" "$ONCE"; then
  log "nodes --once while the node ran ($ONCE):"
  cat "$ONCE" >&2
else
  log "nodes --once did not show the node:"
  cat "$ONCE" "$ONCE.tmp" 2>/dev/null >&2 || true
  failed=1
fi
# q quits: the pane writes the viewer's exit status to $EXITED, then sleeps.
tmux_ send-keys -t viewer q
for _ in $(seq 1 20); do
  [[ -s "$EXITED" ]] && break
  sleep 0.25
done
if [[ "$(cat "$EXITED" 2>/dev/null)" == 0 ]]; then
  log "q ended the viewer (exit status 0)"
else
  log "the viewer did not exit cleanly on q (status: $(cat "$EXITED" 2>/dev/null || echo "still running"))"
  failed=1
fi
exit "$failed"
