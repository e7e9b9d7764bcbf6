#!/usr/bin/env bash
# Builds (or finds cached) the helm CLI from its Go module, for the chart tests (tests/chart.rs)
# and for rendering deploy/manifests/ (tests/helm/render.sh). No binary download: the Go module
# proxy serves helm.sh/helm/v3 like any other module.
#
#   ${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}/helm-<version>/bin/helm
#
# Keyed by version, built in a temp dir and renamed into place only after `helm version` reports
# the expected version, so an interrupted build never looks complete. Does nothing when the binary
# is there (well under a second). Prints `HELM=<path>` as its last line of stdout; the tests
# (tests/support/helm.rs) and tests/helm/render.sh run this script to find helm, unless $HELM is set.
# Cold build: about a minute (tests/README.md).
set -euo pipefail

HELM_VERSION=v3.22.0
CACHE_ROOT="${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}"
PARENT="$CACHE_ROOT/helm-${HELM_VERSION}"
HELM="$PARENT/bin/helm"

log() { printf '[helm/build.sh] %s\n' "$*" >&2; }

helm_ok() { # $1 = binary
  # Captured, then compared: a pipe into `grep -q` fails under pipefail when grep exits first.
  [[ -x "$1" ]] || return 1
  local out
  out="$("$1" version --template '{{.Version}}' 2>/dev/null)" || return 1
  [[ "$out" == "${HELM_VERSION}" ]]
}

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.helm-build.lock"
flock 9
if helm_ok "$HELM"; then
  log "helm ${HELM_VERSION} up to date in $HELM"
else
  command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
  rm -rf "$CACHE_ROOT"/.tmp-helm-"${HELM_VERSION}".* 2>/dev/null || true
  tmp="$(mktemp -d "$CACHE_ROOT/.tmp-helm-${HELM_VERSION}.XXXXXX")"
  chmod 755 "$tmp"
  start=$SECONDS
  log "building helm ${HELM_VERSION} from helm.sh/helm/v3 (about a minute cold)"
  # helm's version is a linker variable (internal/version.version), as its Makefile sets it.
  (cd / && env GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$tmp/bin" \
    nice -n "${BUILD_NICE:-19}" go install -trimpath \
    -ldflags "-s -w -buildid= -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}")
  if ! helm_ok "$tmp/bin/helm"; then
    log "built helm does not report ${HELM_VERSION}: $("$tmp/bin/helm" version 2>&1 || true)"
    rm -rf "$tmp"
    exit 1
  fi
  rm -rf "$PARENT"
  mv "$tmp" "$PARENT"
  log "helm built in $((SECONDS - start)) s into $HELM"
fi
echo "HELM=$HELM"
