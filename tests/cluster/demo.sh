#!/usr/bin/env bash
# The first write-up's scenario on the local cluster, as a readable timeline:
#   Provisioner `service` + AWSNodeTemplate `service-lt` + the nginx Deployment (2 replicas,
#   nodeSelector nodeType=service-2023, toleration for service=true:NoSchedule)
#   → pods Pending → karpenter-rs launches an instance in the EC2 emulator → its Node turns Ready
#   → the pods run on it.
#   Then the Deployment is deleted: the node is empty, gets karpenter.sh/emptiness-timestamp, and
#   ttlSecondsAfterEmpty (30 s) later it is drained, its instance terminated and the Node removed.
# Usage: tests/cluster/demo.sh      (starts the cluster and karpenter-rs if needed; leaves them running)
#   TIMEOUT=240  give up after this many seconds;  HOLD=0  seconds to keep the pods running first
set -euo pipefail
cd "$(dirname "$0")/../.."
FIXTURES=tests/fixtures/first-writeup
TIMEOUT=${TIMEOUT:-240}
HOLD=${HOLD:-0} # seconds the pods keep running before the Deployment is deleted

bash tests/cluster/up.sh --with-karpenter >/dev/null
# shellcheck source=/dev/null
source "${LOCAL_CLUSTER_STATE:-target/local-cluster}/env"
LOG="${LOCAL_CLUSTER_STATE:-target/local-cluster}/logs/karpenter.log"

start=$(date +%s)
say() { printf '[%3ss] %s\n' "$(($(date +%s) - start))" "$*"; }

# Start from a clean slate so the timeline shows a launch.
kubectl delete deployment nginx-karpenter --ignore-not-found --wait=true >/dev/null
log_from=$(wc -l <"$LOG")

kubectl apply -f "$FIXTURES/awsnodetemplate.yaml" -f "$FIXTURES/provisioner.yaml" >/dev/null
say "applied AWSNodeTemplate service-lt and Provisioner service; requirements after defaulting:"
kubectl get provisioner service -o jsonpath='{range .spec.requirements[*]}        {.key} {.operator} {.values}{"\n"}{end}'
say "ttlSecondsAfterEmpty=$(kubectl get provisioner service -o jsonpath='{.spec.ttlSecondsAfterEmpty}') ttlSecondsUntilExpired=$(kubectl get provisioner service -o jsonpath='{.spec.ttlSecondsUntilExpired}')"
kubectl apply -f "$FIXTURES/nginx-deployment.yaml" >/dev/null
say "applied Deployment nginx-karpenter (2 replicas)"

seen_pending="" seen_launch="" seen_ready="" node="" instance_id=""
while true; do
  now=$(($(date +%s) - start))
  ((now < TIMEOUT)) || { say "timed out after ${TIMEOUT}s; see $LOG"; exit 1; }
  pods=$(kubectl get pods -l app=nginx-karpenter -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.spec.nodeName}{"\n"}{end}')
  pending=$(grep -c ' Pending' <<<"$pods" || true)
  if [[ -z "$seen_pending" && "$pending" -gt 0 ]]; then
    reason=$(kubectl get pods -l app=nginx-karpenter -o jsonpath='{.items[0].status.conditions[?(@.type=="PodScheduled")].message}')
    say "$pending pods Pending: ${reason:-waiting for the scheduler}"
    seen_pending=1
  fi
  if [[ -z "$seen_launch" ]]; then
    line=$(tail -n +"$((log_from + 1))" "$LOG" | grep 'launched node' | grep 'provisioner=service' | tail -1 || true)
    if [[ -n "$line" ]]; then
      field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line" | tr -d '"'; }
      node=$(field node)
      instance_id=$(field instance_id)
      say "instance launched: $(field instance_id) $(field instance_type) in $(field zone), $(field capacity_type), \$$(field price)/h → node $node"
      seen_launch=1
    fi
  fi
  if [[ -n "$node" && -z "$seen_ready" ]]; then
    if [[ "$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; then
      say "node $node Ready; labels: $(kubectl get node "$node" -o jsonpath='{.metadata.labels.nodeType} {.metadata.labels.node\.kubernetes\.io/instance-type} {.metadata.labels.topology\.kubernetes\.io/zone}'); taints: $(kubectl get node "$node" -o jsonpath='{range .spec.taints[*]}{.key}={.value}:{.effect} {end}')"
      seen_ready=1
    fi
  fi
  running=$(grep -c ' Running ' <<<"$pods" || true)
  if [[ "$running" -ge 2 ]]; then
    say "pods Running:"
    sed 's/^/        /' <<<"$pods"
    break
  fi
  sleep 1
done
if [[ -z "$node" ]]; then
  node=$(awk 'NR == 1 {print $3}' <<<"$pods")
  instance_id=$(kubectl get node "$node" -o jsonpath='{.spec.providerID}' | sed 's|.*/||')
  say "the pods went to node $node, which an earlier run launched"
fi
if ((HOLD > 0)); then
  say "holding the pods for ${HOLD}s (HOLD)"
  sleep "$HOLD"
fi
kubectl delete deployment nginx-karpenter --wait=false >/dev/null
say "deleted Deployment nginx-karpenter; node $node is empty now"
seen_marked=""
while kubectl get node "$node" >/dev/null 2>&1; do
  now=$(($(date +%s) - start))
  ((now < TIMEOUT)) || { say "timed out after ${TIMEOUT}s; see $LOG"; exit 1; }
  if [[ -z "$seen_marked" ]]; then
    stamp=$(kubectl get node "$node" -o jsonpath='{.metadata.annotations.karpenter\.sh/emptiness-timestamp}' 2>/dev/null || true)
    if [[ -n "$stamp" ]]; then
      say "node marked empty at $stamp (karpenter.sh/emptiness-timestamp); removal after ttlSecondsAfterEmpty=30s"
      seen_marked=1
    fi
  fi
  if [[ "$(kubectl get node "$node" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)" != "" && -z "${seen_deleting:-}" ]]; then
    say "node $node deleting: cordon, drain, terminate the instance, release the finalizer"
    seen_deleting=1
  fi
  sleep 1
done
say "node $node removed"
if [[ -n "$instance_id" ]]; then
  state=$("$LOCAL_CLUSTER_PYTHON" -c "import boto3,sys; r=boto3.client('ec2').describe_instances(InstanceIds=[sys.argv[1]])['Reservations']; print(r[0]['Instances'][0]['State']['Name'] if r else 'gone')" "$instance_id")
  say "instance $instance_id in the emulator: $state"
fi
say "done. Inspect with: source ${LOCAL_CLUSTER_STATE:-target/local-cluster}/env; kubectl get nodes,pods -o wide"
say "instances in the emulator: \"\$LOCAL_CLUSTER_PYTHON\" -c 'import boto3; print([(i[\"InstanceId\"], i[\"InstanceType\"], i[\"State\"][\"Name\"]) for r in boto3.client(\"ec2\").describe_instances()[\"Reservations\"] for i in r[\"Instances\"]])'"
