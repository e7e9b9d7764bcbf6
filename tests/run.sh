#!/usr/bin/env bash
# Runs every test: unit tests, the HTTPS webhook tests, CRD freshness and the binary's own tests.
# This is the command README.md names and .ci/run executes. Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked --all-targets 2>&1 | tee "$log" || status=$?
passed=$(grep -o '^test result: [a-zA-Z]*\. [0-9]* passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -o '; [0-9]* failed' "$log" | awk '{s+=$2} END {print s+0}')
echo "cargo: ${passed} passed, ${failed} failed"
exit "$status"
