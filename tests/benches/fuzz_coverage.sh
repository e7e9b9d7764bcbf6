#!/usr/bin/env bash
# The admission path fuzzed coverage-guided: libFuzzer (cargo-fuzz, a nightly toolchain) drives the
# generator and oracle of the seeded fuzzer (tests/fuzz/generate.rs, tests/fuzz/oracle.rs) through
# fuzz/fuzz_targets/admission.rs, for a time box, from the seeds in fuzz/seeds/admission/; then the
# corpus it kept is replayed under source-based coverage instrumentation and the lines and regions
# of the admission path it reached are reported. A broken rule is a crash: libFuzzer saves the
# input under fuzz/artifacts/admission/ and the script fails.
#
# Usage: tests/benches/fuzz_coverage.sh [--seconds N] [--no-coverage] [--out FILE]
#   --seconds      how long libFuzzer runs (default 600)
#   --no-coverage  skip the coverage build and report (a second build of the crate)
#   --out          results file (default tests/benches/results/fuzz-coverage.md)
# Needs a nightly toolchain with the llvm-tools component (rustup toolchain install nightly
# --component llvm-tools); cargo-fuzz is built once into ~/.cache/karpenter-rs. The seeded fuzzer
# (tests/fuzz_admission.rs) runs in every test run and replays fuzz/seeds/admission/ there too.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=600 coverage=1 out=tests/benches/results/fuzz-coverage.md
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --no-coverage) coverage=0; shift ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "fuzz_coverage.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz_coverage.sh: --seconds must be a positive integer, got '$seconds'" >&2; exit 2; }
rustc +nightly -vV >/dev/null 2>&1 || { echo "fuzz_coverage.sh: needs a nightly toolchain (rustup toolchain install nightly)" >&2; exit 1; }

cache=$HOME/.cache/karpenter-rs
fuzz_version=0.13.2
cargo_fuzz=$cache/cargo-fuzz-$fuzz_version/bin/cargo-fuzz
if [[ ! -x $cargo_fuzz ]]; then
  echo "fuzz_coverage.sh: building cargo-fuzz $fuzz_version into $cache" >&2
  cargo install --quiet --locked --root "$cache/cargo-fuzz-$fuzz_version" "cargo-fuzz@$fuzz_version"
fi
export PATH=$(dirname "$cargo_fuzz"):$PATH
# Keyed by the nightly compiler, like .ci/run's build directory: a new nightly rebuilds.
export CARGO_TARGET_DIR=$cache/fuzz-target-$(rustc +nightly -vV | sha256sum | cut -c1-12)
# The project's versions of every shared dependency.
cp Cargo.lock fuzz/Cargo.lock
corpus=target/fuzz-corpus/admission
mkdir -p "$corpus"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# 16 codegen units: cargo-fuzz's default of 1 makes the AWS SDK's crates (which the target never
# calls) most of an hour's build on 2 cores; the inputs run somewhat slower for it.
flags=(--sanitizer none --codegen-units 16)
built_from=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests fuzz Cargo.toml Cargo.lock || echo +)
started=$SECONDS
cargo +nightly fuzz build "${flags[@]}" admission >&2
build_seconds=$((SECONDS - started))
status=0
# One process, inputs up to 64 KiB (a review with a few objects), the seeds read-only.
cargo +nightly fuzz run "${flags[@]}" admission "$corpus" fuzz/seeds/admission -- \
  -max_total_time="$seconds" -max_len=65536 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
  -dict=fuzz/admission.dict >"$log" 2>&1 || status=$?
run_seconds=$((SECONDS - started - build_seconds))
last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
peak_rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
new_units=$(sed -n 's/^stat::new_units_added: *//p' "$log")

report=""
if ((coverage && status == 0)); then
  # The corpus replayed by a build with -C instrument-coverage; the report covers the admission
  # path's files only (the rest of the crate is linked in but not what the target calls).
  cargo +nightly fuzz coverage "${flags[@]}" admission "$corpus" fuzz/seeds/admission >&2
  tools=$(rustc +nightly --print sysroot)/lib/rustlib/$(rustc +nightly -vV | sed -n 's/^host: //p')/bin
  binary=$(find "$CARGO_TARGET_DIR" -path '*/coverage/*/release/admission' -type f | head -1)
  report=$("$tools/llvm-cov" report "$binary" -instr-profile=fuzz/coverage/admission/coverage.profdata \
    "$PWD/src/webhook/admission.rs" "$PWD/src/webhook/spec_patch.rs" "$PWD/src/apis/decode.rs" \
    "$PWD/src/apis/objects_only.rs" "$PWD/src/apis/field_error.rs" "$PWD/src/apis/v1alpha5/validation.rs" \
    "$PWD/src/apis/v1alpha5/defaults.rs" "$PWD/src/apis/v1alpha1/validation.rs" 2>&1 |
    sed "s#$PWD/##")
fi

{
  echo "# Coverage-guided fuzzing of the admission path"
  echo
  echo "\`tests/benches/fuzz_coverage.sh --seconds $seconds\` on $(date -u +%Y-%m-%d), built from commit $built_from,"
  echo "$(nproc) cores, $(rustc +nightly --version), cargo-fuzz $fuzz_version, libFuzzer without a sanitizer"
  echo "(the crate forbids unsafe code; the oracle is the check). Build ${build_seconds} s, run ${run_seconds} s;"
  if ((status)) && compgen -G "fuzz/artifacts/admission/crash-*" >/dev/null; then
    echo "exit status $status (an input broke the oracle: fuzz/artifacts/admission/)."
  else
    echo "exit status $status$( ((status)) && echo ' (libFuzzer did not finish: its output is printed by the script)')."
  fi
  echo
  echo "Each input becomes a request body through \`tests/fuzz/generate.rs\` (\`from_fuzzer\`: the"
  echo "bytes themselves, or the choices of the seeded fuzzer's generator, so libFuzzer's mutations"
  echo "change the review's structure) and is answered by \`webhook::admission::review\`; the answer"
  echo "must satisfy every rule of \`tests/fuzz/oracle.rs\`."
  echo
  echo "- inputs executed: ${executed:-?}; new corpus units: ${new_units:-?}; peak RSS ${peak_rss:-?} MB"
  echo "- libFuzzer's last status line (\`cov\`: edges reached, \`ft\`: features, \`corp\`: corpus units/size):"
  echo
  echo '```'
  echo "$last"
  echo '```'
  if [[ -n $report ]]; then
    echo
    echo "Source coverage of the admission path by the final corpus (\`cargo fuzz coverage\`, \`llvm-cov report\`):"
    echo
    echo '```'
    echo "$report"
    echo '```'
  fi
} >"$out"
if ((status)); then
  tail -40 "$log" >&2
fi
echo "fuzz_coverage.sh: results in $out" >&2
exit "$status"
