#!/usr/bin/env bash
# Copies Karpenter v1's CRDs out of two Go modules, fetched through the Go module proxy into Go's
# module cache (no Karpenter code or CRD in this repository), into a cache directory OUTSIDE the
# repository keyed by their versions:
#   ${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}/karpenter-v1-crds-<core>-aws-<aws>/
#     karpenter.sh_nodepools.yaml, karpenter.sh_nodeclaims.yaml   sigs.k8s.io/karpenter pkg/apis/crds
#     karpenter.k8s.aws_ec2nodeclasses.yaml                       github.com/aws/karpenter-provider-aws pkg/apis/crds
#     aws/karpenter.sh_nodepools.yaml                             the provider's NodePool CRD (the core one plus
#                                                                 its rules on karpenter.k8s.aws labels)
# tests/convert_crds.rs checks `karpenter-rs convert`'s output against them. Nothing is built, so
# this takes seconds (tests/karpenter/build.sh builds Karpenter itself and copies the core CRDs too).
#
# The core module is pinned by tests/karpenter/go.sum; the provider's module zip by AWS_SUM below
# (the go.sum line `github.com/aws/karpenter-provider-aws v1.6.3 h1:...`), checked after download.
#
# Prints, as its last line of stdout:
#   KARPENTER_V1_CRDS=<dir>
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

CORE_MODULE=sigs.k8s.io/karpenter
CORE_VERSION=v1.6.4 # keep in sync with go.mod and build.sh
AWS_MODULE=github.com/aws/karpenter-provider-aws
AWS_VERSION=v1.6.3 # the newest v1.6 release the module proxy serves
AWS_SUM='h1:+qI/dw3gaEEWTubxwYJUj+QBuh5yUTdBk2GBB+CLxzY='

log() { printf '[karpenter/v1-crds.sh] %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
CACHE_ROOT="${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}"
OUT="$CACHE_ROOT/karpenter-v1-crds-${CORE_VERSION}-aws-${AWS_VERSION}"
FILES=(karpenter.sh_nodepools.yaml karpenter.sh_nodeclaims.yaml karpenter.k8s.aws_ec2nodeclasses.yaml aws/karpenter.sh_nodepools.yaml)
go_env=(env GOTOOLCHAIN=local)

complete() { # $1 = dir
  local f
  [[ -f "$1/.complete" ]] || return 1
  for f in "${FILES[@]}"; do [[ -s "$1/$f" ]] || return 1; done
}

# `go mod download -json` prints a JSON object; its "Dir" and "Sum" fields.
field() { sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\$/\\1/p"; }

fetch() { # $1 = output dir
  local out="$1" core aws scratch json sum
  core="$(cd "$HERE" && "${go_env[@]}" GOFLAGS=-mod=readonly go mod download -json "$CORE_MODULE@$CORE_VERSION" | field Dir)"
  [[ -d "$core/pkg/apis/crds" ]] || { log "CRDs not found under '$core'"; return 1; }
  # The provider is no dependency of go.mod here: fetch it in a scratch module, then check its sum.
  scratch="$(mktemp -d)"
  (cd "$scratch" && "${go_env[@]}" go mod init karpenter-rs.local/v1-crds >/dev/null 2>&1)
  json="$(cd "$scratch" && "${go_env[@]}" GOFLAGS=-mod=mod go mod download -json "$AWS_MODULE@$AWS_VERSION")"
  rm -rf "$scratch"
  sum="$(field Sum <<<"$json")"
  aws="$(field Dir <<<"$json")"
  [[ "$sum" == "$AWS_SUM" ]] || { log "$AWS_MODULE@$AWS_VERSION has sum '$sum', expected $AWS_SUM"; return 1; }
  [[ -d "$aws/pkg/apis/crds" ]] || { log "CRDs not found under '$aws'"; return 1; }
  mkdir -p "$out/aws"
  cp "$core/pkg/apis/crds/karpenter.sh_nodepools.yaml" "$core/pkg/apis/crds/karpenter.sh_nodeclaims.yaml" "$out/"
  cp "$aws/pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml" "$out/"
  cp "$aws/pkg/apis/crds/karpenter.sh_nodepools.yaml" "$out/aws/"
  chmod 644 "$out"/*.yaml "$out"/aws/*.yaml # the module cache is read-only
  echo "$CORE_VERSION $AWS_VERSION" >"$out/.complete"
}

main() {
  mkdir -p "$CACHE_ROOT"
  exec 9>"$CACHE_ROOT/.karpenter-v1-crds.lock"
  flock 9
  if complete "$OUT"; then
    log "up to date in $OUT"
  else
    local tmp
    tmp="$(mktemp -d "$CACHE_ROOT/.tmp-v1-crds.XXXXXX")"
    chmod 755 "$tmp"
    if ! fetch "$tmp" || ! complete "$tmp"; then
      rm -rf "$tmp"
      log "fetching the CRDs failed"
      exit 1
    fi
    rm -rf "$OUT"
    mv "$tmp" "$OUT"
    log "copied into $OUT"
  fi
  echo "KARPENTER_V1_CRDS=$OUT"
}

main "$@"
