#!/usr/bin/env bash
# Builds the integration test TARGET (tests/TARGET.rs) and prints the path of its test harness,
# for scripts that run it directly: `cargo test` would hold the build directory's lock for as
# long as the tests run, and every other Cargo command on the machine would wait.
#
# Usage: bash tests/test_binary.sh TARGET   (exits non-zero when the build fails)
set -euo pipefail
target=${1:?usage: tests/test_binary.sh TARGET}
bin=$(cargo test --locked --quiet --no-run --test "$target" --message-format=json-render-diagnostics |
  TARGET=$target python3 -c 'import json, os, sys
for line in sys.stdin:
    m = json.loads(line) if line.startswith("{") else {}
    # the test harness, not the karpenter-rs binary built beside it for the tests to start
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == os.environ["TARGET"]:
        print(m["executable"])')
[[ -x "$bin" ]] || { echo "test_binary.sh: building tests/$target.rs failed" >&2; exit 1; }
echo "$bin"
