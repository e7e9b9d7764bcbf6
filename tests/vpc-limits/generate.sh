#!/usr/bin/env bash
# Regenerates src/cloudprovider/aws/branch_interfaces.tsv from the VPC resource controller's
# limits table (the Go module pinned in go.mod, fetched through the module proxy into Go's module
# cache, outside the repository). tests/vpc_limits.rs fails until the committed file matches.
set -euo pipefail
cd "$(dirname "$0")"
out=../../src/cloudprovider/aws/branch_interfaces.tsv
go run . >"$out.tmp"
mv "$out.tmp" "$out"
echo "regenerated src/cloudprovider/aws/branch_interfaces.tsv ($(grep -vc '^#' "$out") instance types)" >&2
