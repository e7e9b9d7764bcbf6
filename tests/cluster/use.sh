# Sourced (from the repository root) by the scripts that run on the local cluster: brings it up
# (a no-op when it is up), stops it again on exit when it was not up before, and stops a
# karpenter-rs left by `up.sh --with-karpenter`, which would provision for the script's pods too.
if [[ ! -f "${LOCAL_CLUSTER_STATE:-target/local-cluster}/env" ]]; then
  trap 'bash tests/cluster/down.sh' EXIT
fi
bash tests/cluster/up.sh >/dev/null
bash tests/cluster/down.sh --karpenter-only
