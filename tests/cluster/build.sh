#!/usr/bin/env bash
# Builds (or finds cached) the binaries of the local test control plane:
#   kube-apiserver, kube-controller-manager, kube-scheduler  (Kubernetes $K8S_VERSION)
#   etcd                                                     (etcd $ETCD_VERSION)
#   kwok                                                     (kwok $KWOK_VERSION)
# and a Python venv with moto's server + boto3.
#
# Everything goes into a cache directory OUTSIDE the repository, keyed by the
# versions, so a version bump builds into a new directory and an old one is
# never mistaken for the new one:
#   ${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}/cluster-k8s-<v>-etcd-<v>-kwok-<v>/bin
#   ${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}/moto-<v>-boto3-<v>/venv
#
# Prints, as its last two lines of stdout:
#   BIN_DIR=<dir with the Go binaries>
#   VENV_DIR=<the moto venv>
# All progress goes to stderr. A cold build takes ~20-40 min on 2 cores; when
# every binary exists and reports the expected version it does nothing.
#
# Options (environment):
#   KARPENTER_RS_CACHE   cache root (default $HOME/.cache/karpenter-rs)
#   BUILD_NICE           nice level for the Go builds (default 19)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---- versions (keep in sync with k8s/go.mod and etcd/go.mod) ----------------
K8S_VERSION=v1.33.13
ETCD_VERSION=v3.5.35
KWOK_VERSION=v0.7.0
MOTO_VERSION=5.2.5
BOTO3_VERSION=1.44.8

CACHE_ROOT="${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}"
BIN_KEY="cluster-k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}"
BIN_PARENT="$CACHE_ROOT/$BIN_KEY"
BIN_DIR="$BIN_PARENT/bin"
VENV_PARENT="$CACHE_ROOT/moto-${MOTO_VERSION}-boto3-${BOTO3_VERSION}"
VENV_DIR="$VENV_PARENT/venv"
NICE=(nice -n "${BUILD_NICE:-19}")

log() { printf '[build.sh] %s\n' "$*" >&2; }

# ---- version checks -----------------------------------------------------------
# Each prints nothing and returns 0 when the binary exists and reports the
# expected version. The output is captured before it is matched: piping it into
# `grep -q` under pipefail fails whenever grep exits first and the binary dies
# of SIGPIPE writing the rest (etcd prints several lines).
check_k8s_bin() { # $1 = binary path
  [[ -x "$1" ]] || return 1
  local out
  out="$("$1" --version 2>/dev/null)" || return 1
  [[ "$out" == "Kubernetes ${K8S_VERSION}" ]]
}
check_etcd_bin() {
  [[ -x "$1" ]] || return 1
  local out
  out="$("$1" --version 2>/dev/null)" || return 1
  grep -qx "etcd Version: ${ETCD_VERSION#v}" <<<"$out"
}
check_kwok_bin() {
  [[ -x "$1" ]] || return 1
  # kwok prints e.g. "kwok version v0.7.0 go1.26.8 (linux/amd64)"
  local out
  out="$("$1" --version 2>/dev/null)" || return 1
  [[ "$out" == *"${KWOK_VERSION}"* ]]
}
bins_ok() { # $1 = bin dir
  check_k8s_bin "$1/kube-apiserver" &&
    check_k8s_bin "$1/kube-controller-manager" &&
    check_k8s_bin "$1/kube-scheduler" &&
    check_etcd_bin "$1/etcd" &&
    check_kwok_bin "$1/kwok"
}
venv_ok() {
  # The marker is written last, so a half-installed venv never counts.
  [[ -f "$VENV_PARENT/.complete" && -x "$VENV_DIR/bin/moto_server" && -x "$VENV_DIR/bin/python" ]]
}

# ---- Go builds ----------------------------------------------------------------
# Common Go settings: never download another toolchain, static binaries, use
# exactly the committed go.sum (readonly) and no VCS stamping.
go_env=(env GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false")

build_k8s() { # $1 = output dir
  local out="$1" minor build_date ldflags
  minor="${K8S_VERSION#v1.}"
  minor="${minor%%.*}"
  build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # Same version variables hack/lib/version.sh sets; without them the binaries
  # report v0.0.0-master+$Format:%H$ and kubectl warns about skew.
  ldflags="-s -w -buildid="
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=${K8S_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=${build_date}"
  done
  log "building kube-apiserver, kube-controller-manager, kube-scheduler ${K8S_VERSION} (slow: ~20-30 min cold)"
  (cd "$HERE/k8s" && "${go_env[@]}" "${NICE[@]}" go build -trimpath -tags selinux,notest \
    -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler)
}

build_etcd() { # $1 = output dir
  local out="$1"
  log "building etcd ${ETCD_VERSION}"
  # etcd's version string is hard-coded in go.etcd.io/etcd/api/v3/version.
  (cd "$HERE/etcd" && "${go_env[@]}" "${NICE[@]}" go build -trimpath \
    -ldflags "-s -w -buildid=" -o "$out/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() { # $1 = output dir
  local out="$1"
  log "building kwok ${KWOK_VERSION}"
  # kwok's go.mod has no replace directives, so `go install pkg@version` works;
  # run it from a neutral directory so no go.mod around us is consulted. Its
  # version (pkg/consts.Version) is hard-coded, set it anyway like releases.sh.
  (cd / && env GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$out" \
    "${NICE[@]}" go install -trimpath \
    -ldflags "-s -w -buildid= -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}" \
    "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}")
}

ensure_bins() {
  if bins_ok "$BIN_DIR"; then
    log "Go binaries up to date in $BIN_DIR"
    return 0
  fi
  command -v go >/dev/null || { log "go not found in PATH"; return 1; }
  # Build into a temporary sibling directory and rename it into place only
  # when every binary checks out: an interrupted build leaves a .tmp-* dir
  # behind (removed by the next run) and never a half-filled bin dir.
  local tmp start
  tmp="$(mktemp -d "$CACHE_ROOT/.tmp-${BIN_KEY}.XXXXXX")"
  chmod 755 "$tmp" # mktemp makes it 0700
  start=$SECONDS
  build_etcd "$tmp/bin"
  build_kwok "$tmp/bin"
  build_k8s "$tmp/bin"
  if ! bins_ok "$tmp/bin"; then
    log "built binaries do not report the expected versions:"
    for b in kube-apiserver kube-controller-manager kube-scheduler etcd kwok; do
      log "  $b: $("$tmp/bin/$b" --version 2>&1 | head -n1 || true)"
    done
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$BIN_PARENT"
  mv "$tmp" "$BIN_PARENT"
  log "Go binaries built in $((SECONDS - start)) s into $BIN_DIR"
}

# ---- moto venv ----------------------------------------------------------------
ensure_venv() {
  if venv_ok; then
    log "moto venv up to date in $VENV_DIR"
    return 0
  fi
  # venvs hard-code their path in scripts, so no temp+rename here: a marker
  # file written last says the install completed.
  rm -rf "$VENV_PARENT"
  mkdir -p "$VENV_PARENT"
  log "installing moto[server]==${MOTO_VERSION} boto3==${BOTO3_VERSION} into $VENV_DIR"
  python3 -m venv "$VENV_DIR"
  "${NICE[@]}" "$VENV_DIR/bin/python" -m pip install --quiet \
    "moto[server]==${MOTO_VERSION}" "boto3==${BOTO3_VERSION}" >&2
  touch "$VENV_PARENT/.complete"
}

main() {
  mkdir -p "$CACHE_ROOT"
  # One build at a time per cache root (parallel test runs may call us).
  exec 9>"$CACHE_ROOT/.build.lock"
  flock 9
  # Leftovers of interrupted builds.
  rm -rf "$CACHE_ROOT"/.tmp-"${BIN_KEY}".* 2>/dev/null || true
  ensure_bins
  ensure_venv
  echo "BIN_DIR=$BIN_DIR"
  echo "VENV_DIR=$VENV_DIR"
}

main "$@"
