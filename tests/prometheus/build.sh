#!/usr/bin/env bash
# Fetches (or finds cached) a Prometheus server for the dashboard check (tests/dashboards/): the
# Debian bookworm package `prometheus`, unpacked, no install and no root needed. Nothing is built
# or downloaded from outside the package registries: apt fetches the .deb from the Debian archive.
#
#   ${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}/prometheus-<version>/usr/bin/prometheus
#
# Keyed by the package version, unpacked in a temp dir and renamed into place only after
# `prometheus --version` works, so an interrupted fetch never looks complete. Prints
# `PROMETHEUS=<path>` as its last line of stdout.
set -euo pipefail

PROMETHEUS_DEB_VERSION=2.42.0+ds-5+deb12u1
CACHE_ROOT="${KARPENTER_RS_CACHE:-$HOME/.cache/karpenter-rs}"
PARENT="$CACHE_ROOT/prometheus-${PROMETHEUS_DEB_VERSION}"
PROMETHEUS="$PARENT/usr/bin/prometheus"

log() { printf '[prometheus/build.sh] %s\n' "$*" >&2; }

prometheus_ok() { [[ -x "$1" ]] && "$1" --version >/dev/null 2>&1; }

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.prometheus-build.lock"
flock 9
if prometheus_ok "$PROMETHEUS"; then
  log "prometheus ${PROMETHEUS_DEB_VERSION} up to date in $PROMETHEUS"
else
  for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null || { log "$tool not found: the Debian package cannot be fetched"; exit 1; }
  done
  rm -rf "$CACHE_ROOT"/.tmp-prometheus-* 2>/dev/null || true
  tmp="$(mktemp -d "$CACHE_ROOT/.tmp-prometheus-XXXXXX")"
  (cd "$tmp" && apt-get download "prometheus=${PROMETHEUS_DEB_VERSION}" >&2) ||
    { log "apt-get download prometheus=${PROMETHEUS_DEB_VERSION} failed (is the Debian archive reachable? try apt-get update)"; exit 1; }
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
  prometheus_ok "$tmp/root/usr/bin/prometheus" || { log "the unpacked prometheus does not run"; exit 1; }
  rm -rf "$PARENT"
  mv "$tmp/root" "$PARENT"
  rm -rf "$tmp"
  log "prometheus ${PROMETHEUS_DEB_VERSION} unpacked into $PARENT"
fi
echo "PROMETHEUS=$PROMETHEUS"
