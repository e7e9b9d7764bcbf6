#!/usr/bin/env bash
# Runs every test: unit tests, the HTTPS webhook tests, CRD freshness, the binary's own tests,
# the Helm chart, RBAC and IAM checks and the end-to-end tests on the local control plane
# (tests/cluster/). This is the command README.md names and .ci/run executes. It brings the local
# cluster up (building it on first use) and, if it was not already running, stops it again at the
# end. Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -f target/local-cluster/env ]]; then
  echo "[run.sh] reusing the running local cluster" >&2
else
  trap 'bash tests/cluster/down.sh' EXIT
fi
bash tests/cluster/up.sh >/dev/null
# A karpenter-rs left by `up.sh --with-karpenter` would provision for the tests' pods too.
bash tests/cluster/down.sh --karpenter-only
# helm for the chart tests (tests/chart.rs, tests/rbac.rs), built from its Go module on first use.
bash tests/helm/build.sh >/dev/null

log=$(mktemp)
status=0
cargo test --locked --all-targets 2>&1 | tee "$log" || status=$?
passed=$(grep -o '^test result: [a-zA-Z]*\. [0-9]* passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -o '; [0-9]* failed' "$log" | awk '{s+=$2} END {print s+0}')
rm -f "$log"
# Karpenter's dashboards and ours against a real Prometheus that scraped karpenter-rs through the
# first write-up's scenario (tests/dashboards/check.sh).
dashboards=passed
bash tests/dashboards/check.sh || { dashboards=failed; status=1; }
# `karpenter-rs nodes` full-screen under tmux through the first write-up (tests/viewer/tmux.sh).
viewer=passed
bash tests/viewer/tmux.sh || { viewer=failed; status=1; }
# The scale benchmark at 30 pods (karpenter-rs, Karpenter and the floor, each from start to every
# node gone), so that it cannot rot; it restarts the local cluster with an audit log and stops it.
scale=passed
bash tests/benches/scale.sh --quick || { scale=failed; status=1; }
# The soak run for 2 minutes (tests/soak.rs; 30 minutes by hand), likewise; its results go to a
# temporary file, not tests/benches/results/soak.md.
soak=passed
soak_out=$(mktemp)
bash tests/benches/soak.sh --minutes 2 --out "$soak_out" || { soak=failed; status=1; }
rm -f "$soak_out"
# Karpenter's scheduling benchmark and ours at 1 and 100 pods (debug build), likewise.
scheduling=passed
quick_out=$(mktemp)
bash tests/benches/scheduling_vs_karpenter.sh --quick --out "$quick_out" || { scheduling=failed; status=1; }
rm -f "$quick_out"
# The HTTPS load benchmark for 2 s per case (debug build, wrk from Debian), likewise.
https_load=passed
bash tests/benches/https_load.sh --quick >/dev/null || { https_load=failed; status=1; }
echo "cargo: ${passed} passed, ${failed} failed; dashboards: ${dashboards}; viewer: ${viewer}; scale --quick: ${scale}; soak --minutes 2: ${soak}; scheduling_vs_karpenter --quick: ${scheduling}; https_load --quick: ${https_load}"
exit "$status"
