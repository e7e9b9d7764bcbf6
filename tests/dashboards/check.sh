#!/usr/bin/env bash
# The dashboards check: every query of karpenter-rs's dashboard (deploy/grafana/karpenter-rs.json)
# and of Karpenter's capacity and performance dashboards (their expressions as test data,
# tests/dashboards/karpenter-dashboards.json) has data, evaluated by a real Prometheus server that
# scraped a running karpenter-rs through the first write-up's scenario.
#
# Steps: the local cluster (tests/cluster/up.sh) with karpenter-rs (the binary, its webhook
# registered, an interruption queue in moto's SQS); Prometheus (the Debian package,
# tests/prometheus/build.sh) scraping its /metrics every second; a second Provisioner with
# spec.limits (so the limit panels have something to divide by) and one interruption message for
# an instance that is not ours; then tests/cluster/demo.sh (launch, pods Running, Deployment
# deleted, node gone after ttlSecondsAfterEmpty); then tests/dashboards/check.py.
# Everything listens on 127.0.0.1; every wait is bounded; what it started is stopped at the end
# (the local cluster itself is left as it was found).
# Usage: tests/dashboards/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '[dashboards] %s\n' "$*" >&2; }
QUEUE=karpenter-rs-dashboards

bash tests/cluster/up.sh >/dev/null
# shellcheck source=/dev/null
source "${LOCAL_CLUSTER_STATE:-target/local-cluster}/env"
PROMETHEUS="$(bash tests/prometheus/build.sh | sed -n 's/^PROMETHEUS=//p' | tail -n1)"
PROMTOOL="$(dirname "$PROMETHEUS")/promtool"
# The packaged alerts (deploy/alerts/): valid rules, and each fires on its series and stays quiet
# without them (tests/dashboards/alerts-test.yaml).
"$PROMTOOL" check rules deploy/alerts/karpenter-rs.rules.yaml >&2
"$PROMTOOL" test rules tests/dashboards/alerts-test.yaml >&2

work=$(mktemp -d)
prom_pid=""
cleanup() {
  [[ -n "$prom_pid" ]] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
  kubectl delete deployment nginx-karpenter --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl delete provisioner service service-limits --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 || true
  bash tests/cluster/down.sh --karpenter-only >/dev/null 2>&1 || true
  kubectl delete awsnodetemplate service-lt --ignore-not-found >/dev/null 2>&1 || true
  "$LOCAL_CLUSTER_PYTHON" -c 'import boto3, sys; s = boto3.client("sqs"); s.delete_queue(QueueUrl=s.get_queue_url(QueueName=sys.argv[1])["QueueUrl"])' "$QUEUE" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# karpenter-rs with an interruption queue (a running one without it is restarted).
"$LOCAL_CLUSTER_PYTHON" -c 'import boto3, sys; boto3.client("sqs").create_queue(QueueName=sys.argv[1])' "$QUEUE"
bash tests/cluster/down.sh --karpenter-only >/dev/null
KARPENTER_RS_ARGS="--interruption-queue-name $QUEUE" bash tests/cluster/up.sh --with-karpenter >/dev/null
# shellcheck source=/dev/null
source "${LOCAL_CLUSTER_STATE:-target/local-cluster}/karpenter.env"

# Prometheus, scraping karpenter-rs every second.
prom_port="$("$LOCAL_CLUSTER_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/deploy/alerts/karpenter-rs.rules.yaml
scrape_configs:
  - job_name: karpenter-rs
    static_configs:
      - targets: ["127.0.0.1:$KARPENTER_METRICS_PORT"]
EOF
"$PROMETHEUS" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
prom_pid=$!
PROM="http://127.0.0.1:$prom_port"
for _ in $(seq 1 120); do
  curl -fsS --max-time 2 "$PROM/-/ready" >/dev/null 2>&1 && break
  kill -0 "$prom_pid" 2>/dev/null || { cat "$work/prometheus.log" >&2; log "prometheus exited"; exit 1; }
  sleep 0.5
done
curl -fsS --max-time 2 "$PROM/-/ready" >/dev/null || { cat "$work/prometheus.log" >&2; log "prometheus not ready after 60 s"; exit 1; }
log "prometheus $PROM scraping karpenter-rs on 127.0.0.1:$KARPENTER_METRICS_PORT"
# Two scrapes before the scenario, so that rates see its first events (a counter's first sample
# is its baseline).
scraped() {
  curl -fsS --max-time 2 "$PROM/api/v1/query" --data-urlencode 'query=count_over_time(up{job="karpenter-rs"}[1m]) >= 2' |
    "$LOCAL_CLUSTER_PYTHON" -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
for _ in $(seq 1 60); do scraped && break; sleep 0.5; done
scraped || { cat "$work/prometheus.log" >&2; log "prometheus did not scrape karpenter-rs within 30 s"; exit 1; }

start=$(date +%s)
# A Provisioner with limits and nothing to launch for (no pod selects its label).
"$LOCAL_CLUSTER_PYTHON" - <<'PY' | kubectl apply -f - >/dev/null
import json, yaml
p = yaml.safe_load(open("tests/fixtures/first-writeup/provisioner.yaml"))
p["metadata"]["name"] = "service-limits"
p["spec"]["labels"] = {"nodeType": "dashboards-limits"}
p["spec"]["limits"] = {"resources": {"cpu": "100", "memory": "400Gi"}}
print(json.dumps(p))
PY
kubectl apply -f tests/fixtures/first-writeup/awsnodetemplate.yaml >/dev/null
# One interruption message, for an instance karpenter-rs did not launch: received, no action.
"$LOCAL_CLUSTER_PYTHON" - "$QUEUE" <<'PY'
import boto3, datetime, json, sys
sqs = boto3.client("sqs")
body = {"version": "0", "id": "dashboards-check", "detail-type": "EC2 Instance Rebalance Recommendation",
        "source": "aws.ec2", "account": "123456789012", "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "ap-northeast-2", "resources": [], "detail": {"instance-id": "i-0123456789abcdef0"}}
sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=sys.argv[1])["QueueUrl"], MessageBody=json.dumps(body))
PY

log "the first write-up's scenario (tests/cluster/demo.sh)"
# The pods run for 15 s: every scrape in that time sees them in karpenter_pods_state.
TIMEOUT=300 HOLD=15 bash tests/cluster/demo.sh >&2
sleep 5 # the last scrapes
"$LOCAL_CLUSTER_PYTHON" tests/dashboards/check.py --prometheus "$PROM" --start "$start" \
  --expect provisioner=service --expect capacity_type=on-demand --expect controller=provisioner \
  deploy/grafana/karpenter-rs.json tests/dashboards/karpenter-dashboards.json
# The alerts, evaluated by this Prometheus against what it scraped: every rule healthy (its
# expression ran without error), and the certificate's expiry scraped, so the alert on it has data.
curl -fsS --max-time 5 "$PROM/api/v1/rules" | "$LOCAL_CLUSTER_PYTHON" -c '
import json, sys
rules = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
bad = [(r["name"], r.get("health"), r.get("lastError")) for r in rules if r.get("health") != "ok"]
if len(rules) < 5 or bad:
    sys.exit(f"alert rules not healthy: {len(rules)} loaded, unhealthy {bad}")
print(f"[dashboards] {len(rules)} alert rules loaded and evaluated", file=sys.stderr)'
curl -fsS --max-time 5 "$PROM/api/v1/query" --data-urlencode 'query=karpenter_rs_webhook_certificate_expiration_timestamp_seconds - time() > 0' |
  "$LOCAL_CLUSTER_PYTHON" -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else "the webhook certificate expiry was not scraped")'
