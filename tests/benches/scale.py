#!/usr/bin/env python3
"""Scale benchmark on the local control plane: one workload of N pending pods, run once with
karpenter-rs, once with Karpenter (its KWOK cloud provider, built from the Go module by
tests/karpenter/build.sh) and once with no autoscaler on nodes created beforehand (the floor:
what the API server, kube-scheduler and kwok need on their own), in one run, one after the other.

Run it through tests/benches/scale.sh (which starts the cluster with an audit log); see that
script for the options. Figures per autoscaler and size:

- seconds from `kubectl apply` until every pod is Running, and p50/p90 of each pod's time from
  creation (when the watch first saw it) to Running;
- nodes launched and their $/h (on-demand prices of the shared catalogue file, by the nodes'
  instance-type labels);
- the controller's peak RSS (VmHWM), its RSS before the workload and after it is gone, and its
  CPU-seconds (utime + stime), all from /proc/PID;
- API requests it sent (the API server's audit log, by user agent) and EC2 calls (karpenter-rs's
  karpenter_cloudprovider_duration_seconds_count; Karpenter's KWOK provider calls no cloud);
- seconds from deleting the workload until every node it launched is gone.

Only loopback is touched: the API server and the controllers' metrics ports on 127.0.0.1.
"""

import argparse
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATE = os.path.join(REPO, os.environ.get("LOCAL_CLUSTER_STATE", os.path.join("target", "local-cluster")))
NAMESPACE = "scale"
ZONES = ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"]
# The catalogue both autoscalers see: general purpose, compute and memory optimised, large to
# 4xlarge (12 types).
TYPES = [f"{family}.{size}" for family in ("c5", "m5", "r5") for size in ("large", "xlarge", "2xlarge", "4xlarge")]
# Labels that mark the nodes each side launches.
NODE_LABEL = {"karpenter-rs": "karpenter.sh/provisioner-name", "karpenter": "karpenter.sh/nodepool", "floor": "karpenter.sh/provisioner-name"}
ANTI_GROUP = 10  # pods per hostname anti-affinity group


def log(msg):
    print(f"[scale] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def kubectl(*args, stdin=None, check=True):
    out = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


# ---- the workload ---------------------------------------------------------------------------


def deployment(name, replicas, labels=None, spec_extra=None, cpu="250m", memory="256Mi"):
    labels = dict(labels or {}, app=name)
    spec = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    spec.update(spec_extra or {})
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": labels}, "spec": spec}},
    }


def workload(n):
    """N pods: 50% plain (250m/256Mi), 10% plain larger (1 CPU/1Gi), 20% zonal topology spread,
    10% in hostname anti-affinity groups of 10, 10% with node selectors (zone, arch)."""
    shares = {"plain": n * 50 // 100, "plain-large": n * 10 // 100, "zonal": n * 20 // 100,
              "anti": n * 10 // 100, "zone-a": n * 5 // 100}
    shares["arch"] = n - sum(shares.values())
    objects = [deployment("plain", shares["plain"])]
    objects.append(deployment("plain-large", shares["plain-large"], cpu="1", memory="1Gi"))
    objects.append(deployment("zonal", shares["zonal"], spec_extra={"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "zonal"}}}]}))
    left, group = shares["anti"], 0
    while left > 0:
        size = min(ANTI_GROUP, left)
        name = f"anti-{group}"
        objects.append(deployment(name, size, spec_extra={"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": name}}}]}}}))
        left, group = left - size, group + 1
    objects.append(deployment("zone-a", shares["zone-a"], spec_extra={"nodeSelector": {"topology.kubernetes.io/zone": ZONES[0]}}))
    objects.append(deployment("arch", shares["arch"], spec_extra={"nodeSelector": {"kubernetes.io/arch": "amd64"}}))
    return [o for o in objects if o["spec"]["replicas"] > 0]


# ---- watching the API server ----------------------------------------------------------------


class Api:
    def __init__(self):
        env = read_env()
        self.server = env["CLUSTER_ENDPOINT"]
        ctx = ssl.create_default_context(cafile=os.path.join(STATE, "pki", "ca.crt"))
        ctx.load_cert_chain(os.path.join(STATE, "pki", "admin.crt"), os.path.join(STATE, "pki", "admin.key"))
        self.ctx = ctx

    def get(self, path):
        with urllib.request.urlopen(self.server + path, context=self.ctx, timeout=120) as r:
            return json.load(r)

    def watch(self, path, on_event, stop):
        """Lists `path`, then streams its watch until `stop` is set (re-listing on expiry)."""
        while not stop.is_set():
            listed = self.get(path)
            on_event("RESET", listed["items"])  # what went while the watch was down is gone
            rv = listed["metadata"]["resourceVersion"]
            sep = "&" if "?" in path else "?"
            url = f"{self.server}{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=60"
            try:
                with urllib.request.urlopen(url, context=self.ctx, timeout=90) as r:
                    for line in r:
                        if stop.is_set():
                            return
                        ev = json.loads(line)
                        if ev["type"] == "ERROR":
                            break
                        if ev["type"] != "BOOKMARK":
                            on_event(ev["type"], ev["object"])
            except Exception as e:  # a dropped watch is re-listed
                log(f"watch {path}: {e}; re-listing")


class Observer:
    """Every pod's first-seen and Running times, and every node of one side, as watched."""

    def __init__(self, api, node_label):
        self.lock = threading.Lock()
        self.pods = {}  # uid -> [first_seen, running_at or None]
        self.deleted_pods = set()
        self.nodes = {}  # name -> (instance type, zone, capacity type)
        self.live_nodes = set()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=api.watch, args=(f"/api/v1/namespaces/{NAMESPACE}/pods", self.on_pod, self.stop), daemon=True),
            threading.Thread(target=api.watch, args=(f"/api/v1/nodes?labelSelector={node_label}", self.on_node, self.stop), daemon=True),
        ]
        for t in self.threads:
            t.start()

    def on_pod(self, kind, pod):
        if kind == "RESET":
            with self.lock:
                present = {p["metadata"]["uid"] for p in pod}
                self.deleted_pods.update(uid for uid in self.pods if uid not in present)
            for p in pod:
                self.on_pod("ADDED", p)
            return
        now = time.monotonic()
        uid = pod["metadata"]["uid"]
        with self.lock:
            if kind == "DELETED":
                self.deleted_pods.add(uid)
                return
            entry = self.pods.setdefault(uid, [now, None])
            if entry[1] is None and pod.get("status", {}).get("phase") == "Running":
                entry[1] = now

    def on_node(self, kind, node):
        if kind == "RESET":
            with self.lock:
                self.live_nodes &= {n["metadata"]["name"] for n in node}
            for n in node:
                self.on_node("ADDED", n)
            return
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels", {})
        with self.lock:
            if kind == "DELETED":
                self.live_nodes.discard(name)
                return
            self.live_nodes.add(name)
            self.nodes[name] = (labels.get("node.kubernetes.io/instance-type"), labels.get("topology.kubernetes.io/zone"),
                                labels.get("karpenter.sh/capacity-type", "on-demand"))

    def running(self):
        with self.lock:
            return sum(1 for uid, (_, r) in self.pods.items() if r is not None and uid not in self.deleted_pods)

    def live(self):
        with self.lock:
            return len(self.live_nodes)

    def close(self):
        self.stop.set()


# ---- /proc -------------------------------------------------------------------------------------


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB -> MiB
    return 0.0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_env():
    env = {}
    with open(os.path.join(STATE, "env")) as f:
        for line in f:
            if line.startswith("export "):
                k, _, v = line[len("export "):].strip().partition("=")
                env[k] = v.strip("'\"")
    return env


def metric_sum(url, name):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def audit_requests(user_agent_prefix, since, until):
    """Requests with that user agent the audit log recorded between `since` and `until` (epoch s)."""
    path = os.path.join(STATE, "logs", "audit.log")
    if not os.path.exists(path):
        return None
    count = 0
    from datetime import datetime
    with open(path) as f:
        for line in f:
            if user_agent_prefix not in line:
                continue
            ev = json.loads(line)
            if not ev.get("userAgent", "").startswith(user_agent_prefix):
                continue
            t = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if since <= t <= until:
                count += 1
    return count


# ---- the autoscalers ---------------------------------------------------------------------------


class KarpenterRs:
    name = "karpenter-rs"
    user_agent = "karpenter-rs/"

    def start(self, profile):
        env = dict(os.environ, KARPENTER_RS_PROFILE=profile)
        subprocess.run(["bash", "tests/cluster/up.sh", "--with-karpenter"], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        self.pid = int(open(os.path.join(STATE, "pids", "karpenter.pid")).read())
        ports = dict(line.strip().split("=", 1) for line in open(os.path.join(STATE, "karpenter.env")) if "=" in line)
        self.metrics = f"http://127.0.0.1:{ports['KARPENTER_METRICS_PORT']}/metrics"
        for f in ("awsnodetemplate.yaml", "provisioner.yaml"):
            kubectl("apply", "-f", os.path.join(REPO, "tests", "benches", "scale", f))

    def ec2_calls(self):
        return metric_sum(self.metrics, "karpenter_cloudprovider_duration_seconds_count")

    def stop(self):
        kubectl("delete", "provisioner", "scale", "--ignore-not-found", "--wait=true")
        subprocess.run(["bash", "tests/cluster/down.sh", "--karpenter-only"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)


class Karpenter:
    name = "karpenter"
    user_agent = "karpenter/"

    def __init__(self, types_file):
        self.types_file = types_file

    def start(self, profile):
        command = ["bash", "tests/karpenter/up.sh", "--nodepool", os.path.join(REPO, "tests", "benches", "scale", "nodepool.yaml"),
                   "--instance-types", self.types_file]
        started = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
        if started.returncode != 0:
            # up.sh printed why (its log tail) and stopped what it started; one more try, as a
            # start-up on a loaded machine can miss a deadline once.
            log(f"karpenter: tests/karpenter/up.sh failed (exit {started.returncode}); trying once more")
            started = subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True)
        out = started.stdout
        info = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        self.pid = int(info["KARPENTER_PID"])
        self.metrics = info.get("KARPENTER_METRICS_URL")

    def ec2_calls(self):
        return 0

    def stop(self):
        subprocess.run(["bash", "tests/karpenter/down.sh"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)


class Floor:
    """No autoscaler: the nodes karpenter-rs launched for the same size, created up front."""

    name = "floor"
    user_agent = None

    def __init__(self, nodes_of):
        self.nodes_of = nodes_of
        self.pid = None

    def start(self, profile, n=None):
        pass

    def create_nodes(self, nodes):
        # The scheduler packs differently from the plan those nodes were made for (zonal spread
        # pods need room in every zone), so some slack: a tenth more of each zone's nodes, and a
        # tenth of the count again as 4xlarges spread over the zones.
        extra = max(1, len(nodes) // 10)
        nodes = list(nodes) + list(nodes[:extra]) + [("m5.4xlarge", ZONES[i % len(ZONES)], "on-demand") for i in range(max(3, extra))]
        items = []
        for i, (itype, zone, _) in enumerate(nodes):
            items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"floor-{i}", "labels": {
                "karpenter.sh/provisioner-name": "floor", "node.kubernetes.io/instance-type": itype,
                "topology.kubernetes.io/zone": zone, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": f"floor-{i}"}}})
        kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    def ec2_calls(self):
        return 0

    def stop(self):
        kubectl("delete", "nodes", "-l", "karpenter.sh/provisioner-name=floor", "--ignore-not-found", "--wait=false")


# ---- one run ---------------------------------------------------------------------------------


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run_one(api, side, n, profile, prices, timeout, floor_nodes=None):
    log(f"{side.name}: {n} pods")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
    kubectl("create", "namespace", NAMESPACE)
    side.start(profile)
    if floor_nodes is not None:
        side.create_nodes(floor_nodes)
    obs = Observer(api, NODE_LABEL[side.name])
    started_wall = time.time()
    # Both controllers start cold; a user's has been up long before a burst. 20 s is enough for
    # karpenter-rs to have read the catalogue (moto answers DescribeInstanceTypes in seconds) and
    # for Karpenter to have synced its caches.
    time.sleep(20)
    idle_rss = proc_status(side.pid, "VmRSS") if side.pid else None
    cpu0 = cpu_seconds(side.pid) if side.pid else None
    ec2_0 = side.ec2_calls() or 0
    if floor_nodes is not None:
        deadline = time.monotonic() + 120
        extra = max(1, len(floor_nodes) // 10)
        while time.monotonic() < deadline and obs.live() < len(floor_nodes) + extra + max(3, extra):
            time.sleep(1)
        time.sleep(10)  # Ready, and the not-ready taint gone (kube-controller-manager, every 5 s)
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": workload(n)}))
    rss_peak_seen = 0.0
    done = None
    while time.monotonic() - t0 < timeout:
        if side.pid:
            rss_peak_seen = max(rss_peak_seen, proc_status(side.pid, "VmRSS"))
        if obs.running() >= n:
            done = time.monotonic() - t0
            break
        time.sleep(0.5)
    running = obs.running()
    with obs.lock:
        latencies = [r - s for s, r in obs.pods.values() if r is not None]
        nodes = list(obs.nodes.values())
    result = {
        "autoscaler": side.name, "pods": n, "running": running, "all_running_s": done,
        "p50_s": percentile(latencies, 50), "p90_s": percentile(latencies, 90),
        "nodes": len(nodes), "price_per_hour": round(sum(prices.get(t, 0.0) for t, _, _ in nodes), 4),
        "unpriced_types": sorted({t for t, _, _ in nodes if t not in prices}),
        "types": sorted({t for t, _, _ in nodes}),
    }
    if side.pid:
        result.update(idle_rss_mib=round(idle_rss, 1), peak_rss_mib=round(proc_status(side.pid, "VmHWM"), 1),
                      cpu_s=round(cpu_seconds(side.pid) - cpu0, 2), ec2_calls=(side.ec2_calls() or 0) - ec2_0)
    log(f"{side.name}: {running}/{n} Running after {done}s on {len(nodes)} nodes; deleting the workload")
    t1 = time.monotonic()
    kubectl("delete", "deployments", "--all", "-n", NAMESPACE, "--wait=false")
    if floor_nodes is not None:
        side.stop()
    gone = None
    while time.monotonic() - t1 < max(300, timeout):
        if obs.live() == 0 and obs.running() == 0:
            gone = time.monotonic() - t1
            break
        time.sleep(1)
    result["nodes_gone_s"] = gone
    if side.pid:
        time.sleep(10)
        result["after_rss_mib"] = round(proc_status(side.pid, "VmRSS"), 1)
    stopped_wall = time.time()
    obs.close()
    if floor_nodes is None:
        side.stop()
    if side.user_agent:
        result["api_requests"] = audit_requests(side.user_agent, started_wall - 10, stopped_wall)
    log(f"{side.name}: {json.dumps(result)}")
    return result, nodes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,5000,10000")
    parser.add_argument("--autoscalers", default="karpenter-rs,karpenter,floor")
    parser.add_argument("--profile", default="release", help="karpenter-rs's cargo profile (release or debug)")
    parser.add_argument("--instance-types", required=True, help="the catalogue file both sides use (Karpenter's KWOK format)")
    parser.add_argument("--out", required=True, help="JSON lines of results")
    parser.add_argument("--floor-max-pods", type=int, default=5000, help="the largest size the floor is measured at")
    args = parser.parse_args()
    with open(args.instance_types) as f:
        catalogue = json.load(f)
    prices = {}
    for it in catalogue:
        on_demand = [o["price"] for o in it["offerings"] if o["capacityType"] == "on-demand"]
        if on_demand:
            prices[it["name"]] = min(on_demand)
    api = Api()
    sides = args.autoscalers.split(",")
    with open(args.out, "a") as out:
        for n in (int(s) for s in args.sizes.split(",")):
            timeout = 120 + n * 0.2
            ours_nodes = None
            for name in sides:
                if name == "karpenter-rs":
                    result, ours_nodes = run_one(api, KarpenterRs(), n, args.profile, prices, timeout)
                elif name == "karpenter":
                    result, _ = run_one(api, Karpenter(args.instance_types), n, args.profile, prices, timeout)
                elif name == "floor":
                    if ours_nodes is None:
                        log("floor: needs a karpenter-rs run of the same size first; skipped")
                        continue
                    if n > args.floor_max_pods:
                        log(f"floor: skipped above --floor-max-pods {args.floor_max_pods}")
                        continue
                    # Its pods run or they do not: most of them in seconds, and a few may find
                    # no room on nodes made for another packing; 3 minutes is enough to tell.
                    result, _ = run_one(api, Floor(ours_nodes), n, args.profile, prices, min(timeout, 180), floor_nodes=ours_nodes)
                else:
                    raise SystemExit(f"unknown autoscaler {name}")
                result["load_avg"] = open("/proc/loadavg").read().split()[0]
                out.write(json.dumps(result) + "\n")
                out.flush()
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
