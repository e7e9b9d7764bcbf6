#!/usr/bin/env bash
# Prints the plain manifests committed as deploy/manifests/karpenter-rs.yaml: the chart rendered
# with its default values, CRDs included, for release `karpenter-rs` in namespace `karpenter`,
# with ${CLUSTER_NAME} and ${KARPENTER_IAM_ROLE_ARN} left for envsubst. tests/chart.rs runs this
# and fails when the committed file differs; deploy/generate.sh rewrites it.
# Helm: $HELM, else the one tests/helm/build.sh builds or finds cached.
set -euo pipefail
cd "$(dirname "$0")/../.."
helm="${HELM:-}"
if [[ -z "$helm" ]]; then
  helm="$(bash tests/helm/build.sh | sed -n 's/^HELM=//p')"
fi
cat <<'HEADER'
# karpenter-rs for users without Helm: deploy/chart/karpenter-rs rendered with its default values
# (tests/helm/render.sh; do not edit, run deploy/generate.sh). Namespace `karpenter`; fill in the
# cluster name and the controller's IAM role, then apply:
#   kubectl create namespace karpenter
#   export CLUSTER_NAME=my-cluster KARPENTER_IAM_ROLE_ARN=arn:aws:iam::111122223333:role/KarpenterControllerRole-my-cluster
#   envsubst '${CLUSTER_NAME} ${KARPENTER_IAM_ROLE_ARN}' < deploy/manifests/karpenter-rs.yaml | kubectl apply --server-side -f -
HEADER
"$helm" template karpenter-rs deploy/chart/karpenter-rs --namespace karpenter --include-crds \
  --set 'settings.aws.clusterName=${CLUSTER_NAME}' \
  --set 'serviceAccount.annotations.eks\.amazonaws\.com/role-arn=${KARPENTER_IAM_ROLE_ARN}'
