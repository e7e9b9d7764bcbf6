#!/usr/bin/env bash
# Runs every test: unit tests, the HTTPS webhook tests, CRD freshness and the binary's own tests.
# This is the command README.md names and .ci/run executes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked --all-targets
