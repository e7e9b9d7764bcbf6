#!/usr/bin/env bash
# Builds (or finds cached) Karpenter $KARPENTER_VERSION from the Go module sigs.k8s.io/karpenter,
# fetched through the Go module proxy as a dependency of tests/karpenter/go.mod (no Karpenter code
# in this repository):
#   karpenter-kwok    sigs.k8s.io/karpenter/kwok, Karpenter with its KWOK cloud provider
#   scheduling.test   go test -c -tags test_performance of
#                     sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling
#                     (scheduling_benchmark_test.go: BenchmarkScheduling1 ... 20000)
#   crds/             the module's pkg/apis/crds/*.yaml (NodePool, NodeClaim) and
#                     kwok/apis/crds/*.yaml (KWOKNodeClass)
# into a cache directory OUTSIDE the repository keyed by the versions:
#   ${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}/karpenter-<version>-<go version>/
# When that directory is complete (its .complete marker is written last) it does nothing.
#
# Prints, as its last line of stdout:
#   KARPENTER_BIN_DIR=<dir>
# All progress goes to stderr. Cold build on 2 cores: ~5 min for karpenter-kwok, ~5 min for
# scheduling.test (less when Go's build cache is warm).
#
# Options (environment):
#   KARPENTER_RS_CACHE   cache root (default $HOME/.cache/karpenter-rs)
#   BUILD_NICE           nice level for the Go builds (default 19)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Keep in sync with go.mod.
KARPENTER_VERSION=v1.6.4
MODULE=sigs.k8s.io/karpenter

log() { printf '[karpenter/build.sh] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
GO_VERSION="$(GOTOOLCHAIN=local go env GOVERSION)"
CACHE_ROOT="${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}"
KEY="karpenter-${KARPENTER_VERSION}-${GO_VERSION}"
OUT="$CACHE_ROOT/$KEY"
NICE=(nice -n "${BUILD_NICE:-19}")
# Never download another toolchain, static binaries, exactly the committed go.sum, no VCS stamp.
go_env=(env GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false")
LDFLAGS="-s -w -buildid= -X ${MODULE}/pkg/operator.Version=${KARPENTER_VERSION}"

complete() { # $1 = dir
  [[ -f "$1/.complete" && -x "$1/karpenter-kwok" && -x "$1/scheduling.test" ]] &&
    [[ "$(cat "$1/.complete")" == "$KEY" ]] &&
    compgen -G "$1/crds/karpenter.sh_nodepools.yaml" >/dev/null &&
    compgen -G "$1/crds/karpenter.sh_nodeclaims.yaml" >/dev/null &&
    compgen -G "$1/crds/karpenter.kwok.sh_kwoknodeclasses.yaml" >/dev/null
}

build() { # $1 = output dir
  local out="$1" start mod
  # The module's required version must be the one we key the cache by.
  mod="$(cd "$HERE" && "${go_env[@]}" go list -m -f '{{.Version}}' "$MODULE")"
  [[ "$mod" == "$KARPENTER_VERSION" ]] || { log "go.mod requires $MODULE $mod, expected $KARPENTER_VERSION"; return 1; }

  start=$SECONDS
  log "building karpenter-kwok ($MODULE/kwok $KARPENTER_VERSION, $GO_VERSION)"
  (cd "$HERE" && "${go_env[@]}" "${NICE[@]}" go build -trimpath -ldflags "$LDFLAGS" \
    -o "$out/karpenter-kwok" "$MODULE/kwok")
  log "karpenter-kwok built in $((SECONDS - start)) s"

  start=$SECONDS
  log "building scheduling.test (go test -c -tags test_performance $MODULE/pkg/controllers/provisioning/scheduling)"
  (cd "$HERE" && "${go_env[@]}" "${NICE[@]}" go test -c -trimpath -tags test_performance \
    -ldflags "$LDFLAGS" -o "$out/scheduling.test" "$MODULE/pkg/controllers/provisioning/scheduling")
  log "scheduling.test built in $((SECONDS - start)) s"

  # The CRDs, from the module as go.sum pins it (go mod download verifies it).
  local dir
  dir="$(cd "$HERE" && "${go_env[@]}" go mod download -json "$MODULE@$KARPENTER_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$dir/pkg/apis/crds" && -d "$dir/kwok/apis/crds" ]] || { log "CRDs not found under '$dir'"; return 1; }
  mkdir -p "$out/crds"
  cp "$dir"/pkg/apis/crds/*.yaml "$dir"/kwok/apis/crds/*.yaml "$out/crds/"
  chmod 644 "$out"/crds/*.yaml # the module cache is read-only
  echo "$KEY" >"$out/.complete"
}

main() {
  mkdir -p "$CACHE_ROOT"
  # One build at a time per cache root (a separate lock from tests/cluster/build.sh's).
  exec 9>"$CACHE_ROOT/.karpenter-build.lock"
  flock 9
  if complete "$OUT"; then
    log "up to date in $OUT"
  else
    rm -rf "$CACHE_ROOT"/.tmp-"$KEY".* 2>/dev/null || true
    local tmp start=$SECONDS
    tmp="$(mktemp -d "$CACHE_ROOT/.tmp-$KEY.XXXXXX")"
    chmod 755 "$tmp"
    if ! build "$tmp" || ! complete "$tmp"; then
      rm -rf "$tmp"
      log "build failed"
      exit 1
    fi
    rm -rf "$OUT"
    mv "$tmp" "$OUT"
    log "built in $((SECONDS - start)) s into $OUT"
  fi
  echo "KARPENTER_BIN_DIR=$OUT"
}

main "$@"
