#!/usr/bin/env bash
# Scripted HTTPS load benchmark of the admission webhook, side by side with a bare rustls server
# that returns a fixed AdmissionReview (tests/benches/load_server.rs), in the same run, on the
# same machine, with the same certificate and keep-alive connections. Load generator: wrk
# (Debian package). Traffic goes to 127.0.0.1 only; every run is bounded by --duration.
#
#   bash tests/benches/https_load.sh            # writes tests/benches/results/https-load.md
#   bash tests/benches/https_load.sh --quick    # CI: 2 s runs, one round, debug build, temp file
#
# Runs: for each server, (a) paced at about 2,000 requests/s for the latency figures, and
# (b) unpaced for the highest throughput, ROUNDS times (5), the cases taking turns; each case's
# median round counts, and the ratios are the median of each round's own ratio. The first
# write-up's Provisioner is the request body.
set -euo pipefail
cd "$(dirname "$0")/../.."
QUICK=false
[ "${1:-}" = --quick ] && QUICK=true
DURATION="${DURATION:-15s}"
CONNECTIONS="${CONNECTIONS:-8}"
RATE="${RATE:-2000}"
ROUNDS="${ROUNDS:-5}"
OUT="${OUT:-tests/benches/results/https-load.md}"
PROFILE=release
if $QUICK; then
  # Only that the benchmark still runs end to end; its figures mean nothing (debug build).
  DURATION=2s ROUNDS=1 PROFILE=dev OUT=$(mktemp)
fi
# The Cargo build directory .ci/run shares between clones (see there).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/karpenter-rs/target-$(rustc -vV | sha256sum | cut -c1-12)}"

command -v wrk >/dev/null || { apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# KARPENTER_RS_BIN (tests/run.sh sets it): a debug build made already, used as it is with --quick.
if [[ -n "${KARPENTER_RS_BIN:-}" && "$PROFILE" == dev ]]; then
  bin=$KARPENTER_RS_BIN
else
  cargo build --locked --profile "$PROFILE" --quiet --bin karpenter-rs
  bin="$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo release)/karpenter-rs"
fi
bare=$(cargo build --locked --profile "$PROFILE" --bench load_server --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"]=="load_server"]' | tail -1)
[ -x "$bare" ] || { echo "the load_server bench was not built" >&2; exit 1; }
"$bin" certs --out-dir "$work/certs" 2>/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 200); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; return 1; }

real_port=$(free_port); bare_port=$(free_port)
"$bin" webhook --cluster-name ssungz-cluster --bind-address 127.0.0.1 --webhook-port "$real_port" \
  --metrics-port "$(free_port)" --health-probe-port "$(free_port)" --cert-dir "$work/certs" \
  --log-level info >"$work/webhook.log" 2>&1 &
pids+=($!)
"$bare" --port "$bare_port" --cert-dir "$work/certs" >/dev/null 2>&1 &
pids+=($!)
wait_port "$real_port"; wait_port "$bare_port"

"$bare" --print-body >"$work/body.json"

cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BODY_FILE"), "r"); wrk.body = f:read("*a"); f:close()
local pause = tonumber(os.getenv("DELAY_MS") or "0")
if pause > 0 then function delay() return pause end end
LUA

# One wrk run; prints "rps p50_ms p99_ms errors".
run() {
  local url=$1 delay=$2
  local out
  out=$(BODY_FILE="$work/body.json" DELAY_MS="$delay" wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency -s "$work/post.lua" "$url")
  echo "$out" >>"$work/wrk.log"
  python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
def ms(label):
    m = re.search(r"^\s*%s%%\s+([\d.]+)(us|ms|s)\s*$" % label, out, re.M)
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
sock = re.search(r"Socket errors: (.*)", out)
print(f"{rps:.0f} {ms('50'):.3f} {ms('99'):.3f} {(int(errors.group(1)) if errors else 0)}{' socket:' + sock.group(1).replace(' ', '') if sock else ''}")
PY
}

# Per-connection pause that paces all connections together at about $RATE requests/s.
pace=$(python3 -c "print(f'{1000*$CONNECTIONS/$RATE:.3f}')")
declare -A result
url_of() { echo "https://127.0.0.1:$([ "$1" = bare ] && echo "$bare_port" || echo "$real_port")/$2"; }
cases=("bare validate" "real validate" "real mutate")
for c in "${cases[@]}"; do
  set -- $c
  result[$1,$2,paced]=$(run "$(url_of "$1" "$2")" "$pace")
done
# Unpaced: ROUNDS rounds, each running the three cases one after the other, so that a change in
# the machine's state (another process, the CPU's clock) hits every case alike; each case's figure
# is its median round.
declare -A rounds
for ((round = 1; round <= ROUNDS; round++)); do
  for c in "${cases[@]}"; do
    set -- $c
    rounds[$1,$2]+="$(run "$(url_of "$1" "$2")" 0)"$'\n'
  done
done
# Each round's own ratios, real against bare, and their medians.
ratios=$(python3 - "${rounds[bare,validate]}" "${rounds[real,validate]}" "${rounds[real,mutate]}" <<'PY'
import statistics, sys
bare, validate, mutate = ([float(l.split()[0]) for l in a.splitlines() if l.strip()] for a in sys.argv[1:])
for name, real in (("validate", validate), ("mutate", mutate)):
    each = [r / b for r, b in zip(real, bare)]
    print(f"{name} {statistics.median(each):.2f} {' '.join(f'{x:.2f}' for x in each)}")
PY
)
ratio_of() { echo "$ratios" | awk -v n="$1" '$1 == n {print $2}'; }
rounds_of() { echo "$ratios" | awk -v n="$1" '$1 == n {$1 = ""; $2 = ""; sub(/^ +/, ""); print}'; }
for c in "${cases[@]}"; do
  set -- $c
  result[$1,$2,max]=$(printf '%s' "${rounds[$1,$2]}" | sort -n -k1,1 | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
  result[$1,$2,all]=$(printf '%s' "${rounds[$1,$2]}" | cut -d' ' -f1 | paste -sd' ')
done

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
field() { echo "${result[$1]}" | cut -d' ' -f"$2"; }
mkdir -p "$(dirname "$OUT")"
{
  echo "# HTTPS admission load: karpenter-rs webhook vs a bare rustls server"
  echo
  echo "Generated by \`bash tests/benches/https_load.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores, $(uname -m)); wrk $CONNECTIONS keep-alive connections, 2 threads, $DURATION per run,"
  echo "loader and servers on the same machine over 127.0.0.1. Body: an AdmissionReview (CREATE) of the first write-up's Provisioner ($(wc -c <"$work/body.json") bytes)."
  echo "The bare server (tests/benches/load_server.rs) has the same TLS configuration and certificate and answers a fixed AdmissionReview."
  echo "Paced runs pause ${pace} ms per request on each connection (about $RATE requests/s in all)."
  echo "Unpaced runs: $ROUNDS rounds, the three cases one after the other in each, so that the machine's changes hit them alike; the table shows each case's median round, the ratios are the median of each round's own ratio."
  echo
  echo "| server | path | load | requests/s | p50 ms | p99 ms | non-2xx |"
  echo "|---|---|---|---:|---:|---:|---:|"
  for key in "bare,validate" "real,validate" "real,mutate"; do
    for load in paced max; do
      r=${result[$key,$load]}
      set -- $r
      echo "| ${key%%,*} | /${key##*,} | $load | $1 | $2 | $3 | $4 |"
    done
  done
  echo
  echo "Ratios against the bare server measured in the same run:"
  echo
  echo "- throughput, /validate: $(ratio_of validate) of the bare server; /mutate: $(ratio_of mutate) (median of the rounds' ratios; each round: /validate $(rounds_of validate), /mutate $(rounds_of mutate))"
  echo "- p99 at ~$RATE requests/s, /validate: $(ratio "$(field real,validate,paced 3)" "$(field bare,validate,paced 3)") x the bare server's p99"
  echo "- requests/s of every unpaced round: bare /validate ${result[bare,validate,all]}; /validate ${result[real,validate,all]}; /mutate ${result[real,mutate,all]}"
  echo
  echo "Targets (issue 2): p99 under 2 ms at 2,000 requests/s, and at least half the bare server's throughput."
} >"$OUT"
cat "$OUT"
if $QUICK; then
  # Every case served requests, and answered every one with a 2xx.
  python3 - "$OUT" <<'PY' || { echo "https_load --quick: a case served nothing or answered non-2xx" >&2; exit 1; }
import sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith(("| bare", "| real"))]
assert len(rows) == 6, rows
for row in rows:
    assert float(row[3]) > 0 and int(row[6]) == 0, row
PY
  rm -f "$OUT"
fi
