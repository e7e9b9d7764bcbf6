#!/usr/bin/env bash
# Starts a local Kubernetes control plane plus a fake AWS for karpenter-rs tests:
#   moto (EC2/IAM/SSM... on http://127.0.0.1:<port>) seeded by fixtures.py,
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
#   (which plays kubelet for Nodes labelled karpenter.sh/provisioner-name).
# Everything listens on free 127.0.0.1 ports only.
#
# Usage: tests/cluster/up.sh [--with-karpenter]
#   then: source target/local-cluster/env     (KUBECONFIG, AWS_ENDPOINT_URL, ...)
#   stop: tests/cluster/down.sh
#
# Idempotent: if the cluster is already up and healthy it does nothing. If a
# component fails to start, everything this run started is stopped again and
# the script exits non-zero after printing the failing component's log tail.
# State lives in target/local-cluster/ (see lib.sh); a fresh start wipes the
# previous etcd data, certificates and logs, so every start is an empty cluster.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLUSTER_NAME=ssungz-cluster
AWS_REGION_NAME=ap-northeast-2
SERVICE_CIDR=10.96.0.0/16 # the apiserver's service range; AL2023 nodes' NodeConfig names it
APISERVER_TIMEOUT=90 # s; /readyz takes 10-35 s on 2 busy cores
COMPONENT_TIMEOUT=45 # s; everything else
# Requests per second kube-controller-manager and kube-scheduler may send (burst: twice that);
# LOCAL_CLUSTER_QPS raises it for load benchmarks, where 100 would make creating and scheduling
# thousands of pods the slowest part.
CLIENT_QPS="${LOCAL_CLUSTER_QPS:-100}"
PKI="$STATE/pki"
KUBECONFIG_FILE="$STATE/kubeconfig"
ENV_FILE="$STATE/env"
KWOK_STAGES="$STATE/kwok-stages.yaml"      # kwok --config: Node stages (kwok_stages.py)
NODE_RESOURCES="$STATE/node-resources.json" # the same capacity/allocatable table, for tests

WITH_KARPENTER=0

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

log() { printf '[up.sh] %s\n' "$*" >&2; }

# ---- karpenter-rs (--with-karpenter) -------------------------------------------
# Builds the binary (cargo, into CARGO_TARGET_DIR or target/), makes a CA and serving certificate
# for 127.0.0.1, starts `karpenter-rs run` against the cluster and moto, installs the CRDs from
# deploy/crds and registers the webhook configurations the binary prints, so kubectl apply goes
# through our webhook exactly as in a user's cluster. Ports: target/local-cluster/karpenter.env.
KARPENTER_ENV="$STATE/karpenter.env"
KARPENTER_CERTS="$STATE/karpenter-certs"
# KARPENTER_RS_PROFILE=release builds and runs the optimised binary (the scale benchmark's);
# KARPENTER_RS_BIN=FILE runs that binary as it is, without building.
# KARPENTER_RS_ARGS="--flag value ..." adds flags to `karpenter-rs run` (split on whitespace).
KARPENTER_RS_PROFILE="${KARPENTER_RS_PROFILE:-debug}"
karpenter_bin() { echo "${KARPENTER_RS_BIN:-${CARGO_TARGET_DIR:-$REPO_ROOT/target}/$KARPENTER_RS_PROFILE/karpenter-rs}"; }
check_karpenter() { [[ "$(curl -fsS --max-time 5 "http://127.0.0.1:$KARPENTER_HEALTH_PORT/readyz")" == ok ]]; }

karpenter_up() {
  [[ -f "$KARPENTER_ENV" ]] || return 1
  # shellcheck source=/dev/null
  source "$KARPENTER_ENV"
  component_pid karpenter >/dev/null && check_karpenter
}

start_karpenter() {
  if karpenter_up; then
    log "karpenter-rs already running (webhook https://127.0.0.1:$KARPENTER_WEBHOOK_PORT)"
    return 0
  fi
  stop_components karpenter
  UP_DONE=0 # a failure from here on stops what this run started, karpenter-rs included
  if [[ -z "${KARPENTER_RS_BIN:-}" ]]; then
    log "building karpenter-rs"
    local profile=()
    [[ "$KARPENTER_RS_PROFILE" == release ]] && profile=(--release)
    (cd "$REPO_ROOT" && cargo build --quiet "${profile[@]}" --bin karpenter-rs) || fail karpenter "cargo build failed"
  fi
  local bin ports
  bin="$(karpenter_bin)"
  rm -rf "$KARPENTER_CERTS"
  "$bin" certs --out-dir "$KARPENTER_CERTS" 2>>"$LOGS/karpenter-certs.log" || fail karpenter-certs "karpenter-rs certs failed"
  read -r -a ports <<<"$(free_ports 3)"
  KARPENTER_WEBHOOK_PORT=${ports[0]} KARPENTER_METRICS_PORT=${ports[1]} KARPENTER_HEALTH_PORT=${ports[2]}
  cat >"$KARPENTER_ENV" <<EOF
KARPENTER_WEBHOOK_PORT=$KARPENTER_WEBHOOK_PORT
KARPENTER_METRICS_PORT=$KARPENTER_METRICS_PORT
KARPENTER_HEALTH_PORT=$KARPENTER_HEALTH_PORT
EOF
  # shellcheck source=/dev/null
  source "$ENV_FILE"
  start_proc karpenter "$bin" "$bin" run \
    --cluster-name "$CLUSTER_NAME" --bind-address 127.0.0.1 \
    --webhook-port "$KARPENTER_WEBHOOK_PORT" --metrics-port "$KARPENTER_METRICS_PORT" \
    --health-probe-port "$KARPENTER_HEALTH_PORT" --cert-dir "$KARPENTER_CERTS" \
    --default-instance-profile KarpenterNodeInstanceProfile ${KARPENTER_RS_ARGS:-}
  wait_ready karpenter "$COMPONENT_TIMEOUT" check_karpenter
  local setup="$LOGS/karpenter-setup.log"
  kubectl apply --server-side --force-conflicts -f "$REPO_ROOT/deploy/crds/" >>"$setup" 2>&1 ||
    fail karpenter-setup "installing the CRDs failed"
  kubectl wait --for condition=established --timeout=60s \
    crd/provisioners.karpenter.sh crd/awsnodetemplates.karpenter.k8s.aws >>"$setup" 2>&1 ||
    fail karpenter-setup "the CRDs were not established"
  "$bin" webhook-config --ca-file "$KARPENTER_CERTS/ca.crt" --url "https://127.0.0.1:$KARPENTER_WEBHOOK_PORT" |
    kubectl apply --server-side --force-conflicts -f - >>"$setup" 2>&1 ||
    fail karpenter-setup "registering the webhook configurations failed"
  UP_DONE=1
  log "karpenter-rs running: webhook https://127.0.0.1:$KARPENTER_WEBHOOK_PORT, metrics http://127.0.0.1:$KARPENTER_METRICS_PORT/metrics, log $LOGS/karpenter.log"
}

# ---- helpers ------------------------------------------------------------------
STARTED=()  # components started by this run (stopped again on failure)
UP_DONE=0

on_exit() {
  local rc=$?
  if ((UP_DONE == 0 && ${#STARTED[@]} > 0)); then
    local reversed=() i
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do reversed+=("${STARTED[i]}"); done
    log "start-up failed (exit $rc); stopping what this run started: ${reversed[*]}"
    stop_components "${reversed[@]}" || true
  fi
  exit "$rc"
}

# Health checks (also used to decide whether an existing cluster is healthy).
curl_admin() { # curl with the admin client certificate against the apiserver
  curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"
}
check_moto() { curl -fsS --max-time 5 -o /dev/null "http://127.0.0.1:$MOTO_PORT/moto-api/"; }
check_etcd() { # captured, then matched: `curl | grep -q` fails under pipefail when grep exits first
  local out
  out="$(curl -fsS --max-time 5 "http://127.0.0.1:$ETCD_CLIENT_PORT/health")" || return 1
  [[ "$out" == *'"health":"true"'* ]]
}
check_apiserver() { [[ "$(curl_admin "https://127.0.0.1:$APISERVER_PORT/readyz")" == ok ]]; }
check_default_ns() { curl_admin -o /dev/null "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default"; }
# KCM and scheduler serve self-signed certs; /healthz is always-allowed.
check_kcm() { [[ "$(curl -ksS --max-time 5 "https://127.0.0.1:$KCM_PORT/healthz")" == ok ]]; }
check_scheduler() { [[ "$(curl -ksS --max-time 5 "https://127.0.0.1:$SCHEDULER_PORT/healthz")" == ok ]]; }
check_kwok() { [[ "$(curl -fsS --max-time 5 "http://127.0.0.1:$KWOK_PORT/healthz")" == ok ]]; }
check_standin() { grep -q "watching Nodes" "$LOGS/kubelet-standin.log"; }

# ident_of NAME: what start_proc records for NAME with the current binaries.
ident_of() {
  case "$1" in
    moto) echo "$CLUSTER_DIR/moto_server.py" ;;
    kubelet-standin) echo "$CLUSTER_DIR/kubelet_standin.py" ;;
    *) echo "$BIN_DIR/$1" ;;
  esac
}

# already_up: every component runs (the current binaries) and is healthy.
already_up() {
  [[ -f "$STATE/state.env" && -f "$ENV_FILE" ]] || return 1
  # shellcheck source=/dev/null
  source "$STATE/state.env"
  local name
  for name in "${COMPONENTS[@]}"; do
    component_pid "$name" >/dev/null || return 1
    [[ "$(<"$PIDS/$name.exe")" == "$(ident_of "$name")" ]] || return 1
  done
  # A kwok started without our Node stages (by an older up.sh) would report kwok's huge defaults.
  [[ -f "$NODE_RESOURCES" ]] || return 1
  proc_has_arg "$(component_pid kwok)" "--config=$KWOK_STAGES" || return 1
  check_moto && check_etcd && check_apiserver && check_kcm && check_scheduler && check_kwok
}

any_running() {
  local name
  for name in "${COMPONENTS[@]}"; do
    component_pid "$name" >/dev/null && return 0
  done
  return 1
}


# ---- certificates and kubeconfig ---------------------------------------------
# One CA (pki/ca.crt) signs the apiserver serving cert (SANs 127.0.0.1,
# localhost, kubernetes.*) and the admin client cert (CN=admin,
# O=system:masters); a front-proxy CA signs the apiserver's proxy client cert;
# a separate RSA key pair signs/verifies service-account tokens. RSA 2048
# everywhere: every TLS stack (rustls, openssl, Go) takes it.
gen_pki() {
  rm -rf "$PKI"
  mkdir -p "$PKI"
  (
    cd "$PKI"
    cat >openssl.cnf <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = IP:127.0.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
    # ca NAME CN: self-signed CA
    ca() {
      openssl genrsa -out "$1.key" 2048 2>/dev/null
      openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 3650 \
        -config openssl.cnf -extensions v3_ca -out "$1.crt"
    }
    # leaf NAME SUBJECT SECTION CA: key + certificate signed by CA
    leaf() {
      openssl genrsa -out "$1.key" 2048 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -config openssl.cnf -out "$1.csr"
      openssl x509 -req -in "$1.csr" -CA "$4.crt" -CAkey "$4.key" -CAcreateserial -days 365 \
        -extfile openssl.cnf -extensions "$3" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr"
    }
    ca ca karpenter-rs-local-ca
    leaf apiserver "/CN=kube-apiserver" server ca
    leaf admin "/O=system:masters/CN=admin" client ca
    # A second admin whose writes the audit log records (group karpenter-rs:audited), for
    # tests that check who wrote what when (tests/e2e_crash.rs, the slow leader).
    leaf audited "/O=system:masters/O=karpenter-rs:audited/CN=karpenter-rs-audited" client ca
    # Front-proxy (request-header) CA: without it KCM and the scheduler keep
    # logging "missing content for CA bundle"; it also makes API aggregation work.
    ca front-proxy-ca karpenter-rs-front-proxy-ca
    leaf front-proxy-client "/CN=front-proxy-client" client front-proxy-ca
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

write_kubeconfig() {
  local tmp="$KUBECONFIG_FILE.tmp"
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 "$PKI/admin.crt")
    client-key-data: $(base64 -w0 "$PKI/admin.key")
contexts:
- name: $CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: admin
current-context: $CLUSTER_NAME
EOF
  chmod 600 "$tmp"
  # The same cluster as the audited admin (pki/audited.*).
  sed -e "s|$(base64 -w0 "$PKI/admin.crt")|$(base64 -w0 "$PKI/audited.crt")|" \
    -e "s|$(base64 -w0 "$PKI/admin.key")|$(base64 -w0 "$PKI/audited.key")|" "$tmp" >"$STATE/kubeconfig-audited"
  chmod 600 "$STATE/kubeconfig-audited"
  mv "$tmp" "$KUBECONFIG_FILE"
}

write_env() {
  local tmp="$ENV_FILE.tmp"
  {
    echo "# Written by tests/cluster/up.sh; source it: . $STATE/env"
    printf 'export %s=%q\n' \
      KUBECONFIG "$KUBECONFIG_FILE" \
      CLUSTER_ENDPOINT "https://127.0.0.1:$APISERVER_PORT" \
      CLUSTER_NAME "$CLUSTER_NAME" \
      CLUSTER_CIDR "$SERVICE_CIDR" \
      AWS_ENDPOINT_URL "http://127.0.0.1:$MOTO_PORT" \
      AWS_REGION "$AWS_REGION_NAME" \
      AWS_DEFAULT_REGION "$AWS_REGION_NAME" \
      AWS_ACCESS_KEY_ID testing \
      AWS_SECRET_ACCESS_KEY testing \
      AWS_EC2_METADATA_DISABLED true \
      LOCAL_CLUSTER_STATE "$STATE" \
      LOCAL_CLUSTER_CA_FILE "$PKI/ca.crt" \
      LOCAL_CLUSTER_BIN_DIR "$BIN_DIR" \
      LOCAL_CLUSTER_PYTHON "$PYTHON" \
      LOCAL_CLUSTER_FIXTURES "$STATE/fixtures.json" \
      LOCAL_CLUSTER_NODE_RESOURCES "$NODE_RESOURCES"
  } >"$tmp"
  mv "$tmp" "$ENV_FILE"
}

# ---- components -----------------------------------------------------------------
start_moto() {
  # MOTO_IAM_LOAD_MANAGED_POLICIES: know the AWS managed policies (AmazonEKS*),
  # so fixtures.py can attach them to the node role.
  start_proc moto "$CLUSTER_DIR/moto_server.py" \
    env MOTO_IAM_LOAD_MANAGED_POLICIES=true \
    "$PYTHON" "$CLUSTER_DIR/moto_server.py" -H 127.0.0.1 -p "$MOTO_PORT"
}

start_etcd() {
  rm -rf "$STATE/etcd-data"
  start_proc etcd "$BIN_DIR/etcd" "$BIN_DIR/etcd" \
    --name=node0 \
    --data-dir="$STATE/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="node0=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true \
    --auto-compaction-retention=1 \
    --snapshot-count=10000 \
    --logger=zap --log-level=warn
}

start_apiserver() {
  # An audit log (logs/audit.log, JSON, metadata only) of every Lease request outside the
  # system namespaces, always: tests/e2e_leader.rs reads who wrote a leader Lease when; and of
  # every write by the audited admin (kubeconfig-audited), which tests/e2e_crash.rs gives a
  # replica to read what it wrote when.
  # LOCAL_CLUSTER_AUDIT=1: of every request (user agent, verb, resource), for benchmarks that
  # count a controller's API requests.
  local rules="- level: None
  namespaces: [kube-system, kube-node-lease]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
  userGroups: [\"karpenter-rs:audited\"]
  verbs: [create, update, patch, delete, deletecollection]
- level: None"
  if [[ "${LOCAL_CLUSTER_AUDIT:-0}" == 1 ]]; then
    rules="- level: Metadata"
  fi
  cat >"$STATE/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
$rules
EOF
  : >"$LOGS/audit.log"
  local audit=(--audit-policy-file="$STATE/audit-policy.yaml" --audit-log-path="$LOGS/audit.log"
    --audit-log-format=json --audit-log-mode=batch --audit-log-batch-max-wait=1s)
  # --disable-admission-plugins=ServiceAccount: like envtest; pods can be created
  #   in a new namespace before KCM made its default ServiceAccount.
  # --endpoint-reconciler-type=none: a loopback advertise address is not a valid
  #   endpoint for the `kubernetes` Service; skip the reconciler and its noise.
  mkdir -p "$STATE/apiserver-certs"
  start_proc kube-apiserver "$BIN_DIR/kube-apiserver" "$BIN_DIR/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --cert-dir="$STATE/apiserver-certs" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=RBAC \
    --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none \
    --profiling=false \
    "${audit[@]}" \
    --v=1
}

start_kcm() {
  # Needed for: removing the node.kubernetes.io/not-ready taint once kwok marks
  # a Node Ready (node-lifecycle), Deployments/ReplicaSets, GC, namespaces, PDBs.
  mkdir -p "$STATE/kcm-certs"
  start_proc kube-controller-manager "$BIN_DIR/kube-controller-manager" \
    "$BIN_DIR/kube-controller-manager" \
    --kubeconfig="$KUBECONFIG_FILE" \
    --authentication-kubeconfig="$KUBECONFIG_FILE" \
    --authorization-kubeconfig="$KUBECONFIG_FILE" \
    --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --cert-dir="$STATE/kcm-certs" \
    --leader-elect=false \
    --cluster-name="$CLUSTER_NAME" \
    --root-ca-file="$PKI/ca.crt" \
    --service-account-private-key-file="$PKI/sa.key" \
    --use-service-account-credentials=false \
    --node-monitor-period=5s \
    --node-monitor-grace-period=40s \
    --kube-api-qps="$CLIENT_QPS" --kube-api-burst="$((CLIENT_QPS * 2))" \
    --profiling=false \
    --v=1
}

start_scheduler() {
  # With --config the scheduler ignores --kubeconfig/--leader-elect flags, so
  # they go into the file.
  mkdir -p "$STATE/scheduler-certs"
  cat >"$STATE/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $KUBECONFIG_FILE
  qps: $CLIENT_QPS
  burst: $((CLIENT_QPS * 2))
leaderElection:
  leaderElect: false
EOF
  start_proc kube-scheduler "$BIN_DIR/kube-scheduler" "$BIN_DIR/kube-scheduler" \
    --config="$STATE/kube-scheduler.yaml" \
    --authentication-kubeconfig="$KUBECONFIG_FILE" \
    --authorization-kubeconfig="$KUBECONFIG_FILE" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT" \
    --cert-dir="$STATE/scheduler-certs" \
    --v=1
}

start_kwok() {
  # KWOK_WORKDIR keeps kwok from reading ~/.kwok/kwok.yaml.
  # --node-lease-duration-seconds=40: keep Leases in kube-node-lease renewed
  #   (every 10 s) and use the 20 s status heartbeat (see the spec, §4.3).
  # --manage-nodes-with-label-selector: the nodes karpenter-rs launches, except those labelled
  #   e2e.karpenter-rs/no-kubelet (a node whose kubelet never starts, for registration tests).
  # --server-address: only for /healthz (plain HTTP on loopback).
  # --cidr: pool for fake pod IPs (just strings; nothing routes to them).
  # --config: our Node stages (kwok_stages.py): node-initialize reports capacity and allocatable
  #   from the node.kubernetes.io/instance-type label, like the node's kubelet would; they
  #   replace kwok's default Node stages, so the default heartbeat is declared there too.
  mkdir -p "$STATE/kwok"
  start_proc kwok "$BIN_DIR/kwok" \
    env KWOK_WORKDIR="$STATE/kwok" \
    "$BIN_DIR/kwok" \
    --config="$KWOK_STAGES" \
    --kubeconfig="$KUBECONFIG_FILE" \
    --manage-all-nodes=false \
    --manage-nodes-with-label-selector='karpenter.sh/provisioner-name,!e2e.karpenter-rs/no-kubelet' \
    --node-lease-duration-seconds=40 \
    --server-address="127.0.0.1:$KWOK_PORT" \
    --cidr=10.244.0.1/16
}

start_standin() {
  # The kubelet stand-in (kubelet_standin.py): reads each launched node's user data from moto and
  # writes what its kubelet would register; kwok's node-initialize stage waits for it.
  start_proc kubelet-standin "$CLUSTER_DIR/kubelet_standin.py" \
    env AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" AWS_REGION="$AWS_REGION_NAME" \
    AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_EC2_METADATA_DISABLED=true \
    "$PYTHON" "$CLUSTER_DIR/kubelet_standin.py" --apiserver "https://127.0.0.1:$APISERVER_PORT" \
    --ca "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key"
}

run_fixtures() {
  log "seeding moto (fixtures.py)"
  local start=$SECONDS
  : >"$LOGS/fixtures.log"
  if ! env AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" AWS_REGION="$AWS_REGION_NAME" \
    AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_EC2_METADATA_DISABLED=true \
    CLUSTER_NAME="$CLUSTER_NAME" \
    "$PYTHON" "$CLUSTER_DIR/fixtures.py" --out "$STATE/fixtures.json" >>"$LOGS/fixtures.log" 2>&1; then
    fail fixtures "fixtures.py failed"
  fi
  log "moto seeded in $((SECONDS - start))s (ids in $STATE/fixtures.json)"
}

# write_kwok_stages: kwok's Node stages, with the capacity/allocatable table computed from moto's
# instance-type catalogue (kwok_stages.py); written before kwok starts.
write_kwok_stages() {
  local start=$SECONDS
  : >"$LOGS/kwok-stages.log"
  rm -f "$KWOK_STAGES" "$NODE_RESOURCES"
  if ! env AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" AWS_REGION="$AWS_REGION_NAME" \
    AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_EC2_METADATA_DISABLED=true \
    "$PYTHON" "$CLUSTER_DIR/kwok_stages.py" --stages "$KWOK_STAGES" --table "$NODE_RESOURCES" \
    >>"$LOGS/kwok-stages.log" 2>&1; then
    fail kwok-stages "kwok_stages.py failed"
  fi
  log "kwok node stages written in $((SECONDS - start))s ($KWOK_STAGES)"
}

# ---- main -------------------------------------------------------------------------
main() {
  while (($#)); do
    case "$1" in
      --with-karpenter) WITH_KARPENTER=1 ;;
      -h | --help) usage; exit 0 ;;
      *) log "unknown argument: $1"; usage >&2; exit 64 ;;
    esac
    shift
  done
  local t0=$SECONDS build_out
  build_out="$("$CLUSTER_DIR/build.sh")"
  BIN_DIR="$(sed -n 's/^BIN_DIR=//p' <<<"$build_out")"
  VENV_DIR="$(sed -n 's/^VENV_DIR=//p' <<<"$build_out")"
  PYTHON="$VENV_DIR/bin/python"
  [[ -x "$BIN_DIR/kube-apiserver" && -x "$PYTHON" ]] || { log "build.sh gave no usable BIN_DIR/VENV_DIR"; exit 1; }

  mkdir -p "$PIDS" "$LOGS"
  # One up.sh/down.sh at a time (fd 8 is closed in every child we start).
  exec 8>"$STATE/.lock"
  flock 8

  if already_up; then
    log "already up and healthy; nothing to do (source $ENV_FILE)"
    if ((WITH_KARPENTER)); then
      trap on_exit EXIT
      start_karpenter
    fi
    echo "$ENV_FILE"
    return 0
  fi
  if any_running; then
    log "cluster partly up or unhealthy; stopping it and starting afresh"
    stop_all
  fi
  rm -f "$ENV_FILE" "$KARPENTER_ENV"
  trap on_exit EXIT
  trap 'exit 130' INT TERM

  local ports
  read -r -a ports <<<"$(free_ports 7)"
  MOTO_PORT=${ports[0]} ETCD_CLIENT_PORT=${ports[1]} ETCD_PEER_PORT=${ports[2]}
  APISERVER_PORT=${ports[3]} KCM_PORT=${ports[4]} SCHEDULER_PORT=${ports[5]} KWOK_PORT=${ports[6]}
  cat >"$STATE/state.env" <<EOF
MOTO_PORT=$MOTO_PORT
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KWOK_PORT=$KWOK_PORT
EOF

  gen_pki
  write_kubeconfig

  # moto and etcd are independent: start both, then the apiserver, and seed
  # moto while the apiserver bootstraps.
  start_moto
  start_etcd
  wait_ready etcd "$COMPONENT_TIMEOUT" check_etcd
  start_apiserver
  wait_ready moto "$COMPONENT_TIMEOUT" check_moto
  run_fixtures
  write_kwok_stages
  wait_ready kube-apiserver "$APISERVER_TIMEOUT" check_apiserver
  wait_ready kube-apiserver "$COMPONENT_TIMEOUT" check_default_ns
  start_kcm
  start_scheduler
  start_kwok
  start_standin
  wait_ready kube-controller-manager "$COMPONENT_TIMEOUT" check_kcm
  wait_ready kube-scheduler "$COMPONENT_TIMEOUT" check_scheduler
  wait_ready kwok "$COMPONENT_TIMEOUT" check_kwok
  wait_ready kubelet-standin "$COMPONENT_TIMEOUT" check_standin

  write_env
  UP_DONE=1
  log "local cluster up in $((SECONDS - t0))s: apiserver https://127.0.0.1:$APISERVER_PORT, moto http://127.0.0.1:$MOTO_PORT"
  if ((WITH_KARPENTER)); then
    start_karpenter
  fi
  log "use it with: source $ENV_FILE"
  echo "$ENV_FILE"
}

main "$@"
