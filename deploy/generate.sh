#!/usr/bin/env bash
# Regenerates every generated file under deploy/: the CRDs (from the Rust types, into deploy/crds
# and the chart's crds/) and the plain manifests rendered from the chart. tests/crd.rs and
# tests/chart.rs fail until the committed files match.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --bin karpenter-rs -- crds --out-dir deploy/crds
cargo run --quiet --bin karpenter-rs -- crds --out-dir deploy/chart/karpenter-rs/crds
mkdir -p deploy/manifests
bash tests/helm/render.sh >deploy/manifests/karpenter-rs.yaml.tmp
mv deploy/manifests/karpenter-rs.yaml.tmp deploy/manifests/karpenter-rs.yaml
echo "regenerated deploy/crds, deploy/chart/karpenter-rs/crds and deploy/manifests/karpenter-rs.yaml" >&2
