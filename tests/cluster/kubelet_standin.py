#!/usr/bin/env python3
"""A kubelet stand-in for the local cluster: what a real node's bootstrap and kubelet would make
of the user data a launch wrote, applied to its Node before kwok marks it Ready.

kwok runs no bootstrap, so without this nothing would read the user data karpenter-rs writes. For
every Node labelled `karpenter.sh/provisioner-name` (the nodes kwok manages; Karpenter v1's,
labelled `karpenter.sh/nodepool`, have no instance and are registered at once) this process:

  1. finds the instance behind `spec.providerID` in the EC2 emulator and reads its user data
     (DescribeInstanceAttribute userData) and the root/data volume of its launch template;
  2. reads that user data the way the node's AMI does:
       AL2, Ubuntu  /etc/eks/bootstrap.sh and its --kubelet-extra-args
       AL2023       nodeadm NodeConfig documents (merged in order)
       Bottlerocket settings.kubernetes in TOML
     and refuses to join (no Ready, ever) where that AMI would: AL2023 without the cluster's
     name, endpoint, CA or service CIDR (nodeadm's validation), Bottlerocket without an API
     server or CA, AL2 without them when DescribeCluster does not know the cluster either;
  3. writes what the kubelet would report at registration: capacity and allocatable by the
     AMI's own rules (below, written from the AMIs' sources, not from karpenter-rs's code), and
     the labels the kubelet reconciles on a Node that already exists (`updateDefaultLabels`:
     hostname, zone, region, instance type, os, arch and their beta names, taken from
     --node-labels over the kubelet's defaults; other labels and taints are only used when the
     kubelet creates the Node, and are recorded in annotations for tests);
  4. annotates the Node `kubelet.local-cluster/registered: "true"`: only then does kwok's
     node-initialize stage mark it Ready (tests/cluster/kwok_stages.py).

A Node without an instance in the emulator (tests create such Nodes by hand) or whose instance
has no user data and was not launched by karpenter-rs is registered at once with source
`no-instance`, and kwok reports the capacity table for its type as before.

The AMIs' rules (amazon-eks-ami bootstrap.sh and nodeadm; Bottlerocket's kubelet templates):

  max pods      AL2: --max-pods if given, else the eni-max-pods table (ENIs x (IPv4 per ENI - 1)
                + 2) unless --use-max-pods false (then the kubelet's 110). AL2023: kubelet
                config maxPods if given, else nodeadm's ENI figure. Bottlerocket: max-pods if
                given, else the ENI table.
  kube-reserved cpu 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% above;
                memory 11 x pods + 255 Mi with pods = the ENI table's figure on AL2 and AL2023
                (even when max pods is overridden) and the final max-pods on Bottlerocket;
                ephemeral-storage 1Gi. AL2's --kube-reserved replaces the whole map (a kubelet
                map flag); AL2023's and Bottlerocket's settings replace single keys.
  system-reserved  none unless given.
  eviction-hard memory.available 100Mi, nodefs.available 10%, nodefs.inodesFree 5% unless given
                (a given map replaces the defaults).
  capacity      cpu = vCPUs; memory = what the kernel reports: MiB - MiB/64 (its page
                structures) - 48 Mi (kernel image and firmware), less 64 Mi of contiguous-
                allocator memory on Graviton; pods = max pods; ephemeral-storage = the volume
                the AMI keeps pods' data on (/dev/xvda, Bottlerocket /dev/xvdb, Ubuntu
                /dev/sda1; 20Gi when the template has none); GPUs and Neuron devices (their
                device plugins), unless the Node is labelled kubelet.local-cluster/no-device-
                plugin (a cluster without them); vpc.amazonaws.com/pod-eni for trunking types.

Environment: AWS_ENDPOINT_URL (moto), AWS_REGION. Arguments: the API server, its CA and a client
certificate (up.sh passes the admin's).
"""

import argparse
import base64
import email
import json
import math
import os
import queue
import shlex
import signal
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor

import requests
import yaml

from fixtures import add_moto_arguments, branch_interfaces, moto_clients

MANAGED = "karpenter.sh/provisioner-name"
# Karpenter v1's Nodes (the scale benchmark's second kwok manages them with the same stages):
# no instance in moto behind them, so they are registered as such at once.
NODEPOOL = "karpenter.sh/nodepool"
REGISTERED = "kubelet.local-cluster/registered"
SOURCE = "kubelet.local-cluster/source"
FAMILY = "kubelet.local-cluster/family"
REFUSED = "kubelet.local-cluster/refused"
NODE_LABELS = "kubelet.local-cluster/node-labels"
REGISTER_TAINTS = "kubelet.local-cluster/register-with-taints"
MAX_PODS = "kubelet.local-cluster/max-pods"
NO_DEVICE_PLUGIN = "kubelet.local-cluster/no-device-plugin"
# A node whose kubelet never starts (registration tests); kwok leaves it alone too.
NO_KUBELET = "e2e.karpenter-rs/no-kubelet"

MIB = 1 << 20
GIB = 1 << 30
DEFAULT_VOLUME_GIB = 20
KUBELET_DEFAULT_MAX_PODS = 110
DEFAULT_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"}

# kubelet_node_status.go updateDefaultLabels: the labels a kubelet sets on a Node that exists.
DEFAULT_LABELS = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
]
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "habana": "habana.ai/gaudi"}
NEURON = "aws.amazon.com/neuron"
POD_ENI = "vpc.amazonaws.com/pod-eni"


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} [kubelet-standin] {msg}", file=sys.stderr, flush=True)


class Refused(Exception):
    """The node's bootstrap would stop here: its kubelet never registers."""


# ---- quantities -------------------------------------------------------------------------------

UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_quantity(text, millis=False):
    """A Kubernetes quantity in base units (millicores when `millis`)."""
    s = str(text).strip()
    if millis and s.endswith("m"):
        return int(float(s[:-1]))
    for suffix in sorted(UNITS, key=len, reverse=True):
        if s.endswith(suffix):
            value = float(s[: -len(suffix)]) * UNITS[suffix]
            return int(value * 1000) if millis else int(value)
    value = float(s)
    return int(value * 1000) if millis else int(math.ceil(value))


def signal_amount(capacity, value):
    """An eviction signal's amount: a percentage of capacity or a quantity."""
    value = str(value).strip()
    if value.endswith("%"):
        return math.ceil(capacity * float(value[:-1]) / 100)
    return parse_quantity(value)


def cpu_string(millis):
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def bytes_string(amount):
    return f"{amount // 1024}Ki" if amount % 1024 == 0 else str(amount)


# ---- the instance type's facts (DescribeInstanceTypes) -------------------------------------------




class Catalogue:
    def __init__(self, ec2):
        self.ec2 = ec2
        self.types = {}
        self.lock = threading.Lock()
        self.branches = branch_interfaces()

    def get(self, name):
        with self.lock:
            if name not in self.types:
                it = self.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"][0]
                network = it.get("NetworkInfo", {})
                index = network.get("DefaultNetworkCardIndex", 0)
                card = next((c for c in network.get("NetworkCards", []) if c.get("NetworkCardIndex", 0) == index), {})
                gpus = {}
                for g in it.get("GpuInfo", {}).get("Gpus", []):
                    resource = GPU_RESOURCES.get(g.get("Manufacturer", "").lower())
                    if resource:
                        gpus[resource] = gpus.get(resource, 0) + g.get("Count", 0)
                neuron = sum(a.get("Count", 0) for a in it.get("InferenceAcceleratorInfo", {}).get("Accelerators", []))
                neuron += sum(d.get("Count", 0) for d in it.get("NeuronInfo", {}).get("NeuronDevices", []))
                self.types[name] = {
                    "vcpus": it["VCpuInfo"]["DefaultVCpus"],
                    "memory_mib": it["MemoryInfo"]["SizeInMiB"],
                    "enis": card.get("MaximumNetworkInterfaces", network.get("MaximumNetworkInterfaces", 0)),
                    "ips": network.get("Ipv4AddressesPerInterface", 0),
                    "extended": gpus | ({NEURON: neuron} if neuron else {}),
                    "pod_eni": self.branches.get(name, 0),
                }
            return self.types[name]


def eni_max_pods(facts):
    """eni-max-pods.txt and nodeadm: ENIs x (IPv4 per ENI - 1) + 2."""
    return facts["enis"] * (facts["ips"] - 1) + 2


def kube_reserved_cpu_millis(vcpus):
    """bootstrap.sh get_cpu_millicores_to_reserve (same tiers in nodeadm and Bottlerocket)."""
    total = vcpus * 1000
    reserved = 0
    for start, end, per_10000 in ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, None, 25)):
        if total <= start:
            break
        span = (min(total, end) if end else total) - start
        reserved += span * per_10000 // 10000
    return reserved


def kernel_memory_bytes(memory_mib, arm64):
    mib = memory_mib - memory_mib // 64 - 48 - (64 if arm64 else 0)
    return mib * MIB


# ---- reading user data -----------------------------------------------------------------------


def mime_parts(text):
    """(content type, payload) of each part; the whole text as one part when it is not MIME."""
    message = email.message_from_string(text)
    if message.is_multipart():
        return [(p.get_content_type(), p.get_payload(decode=True).decode()) for p in message.walk() if not p.is_multipart()]
    return [("text/x-shellscript" if text.startswith("#!") else "text/plain", text)]


def kubelet_flags(words):
    """--name=value / --name value words as a dict (later wins)."""
    flags = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            if "=" in w:
                name, value = w[2:].split("=", 1)
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                name, value = w[2:], words[i + 1]
                i += 1
            else:
                name, value = w[2:], "true"
            flags[name] = value
        i += 1
    return flags


def map_flag(value, sep="="):
    """`a=1,b=2` (or `a<1,b<2` for eviction flags) as a dict."""
    out = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        if sep not in item:
            raise Refused(f"kubelet refuses {item!r}: not key{sep}value")
        k, v = item.split(sep, 1)
        out[k] = v
    return out


def bootstrap_args(script):
    """The words of the /etc/eks/bootstrap.sh command line in a shell script, or None."""
    at = script.find("/etc/eks/bootstrap.sh")
    if at < 0:
        return None
    rest = script[at:].replace("\\\n", " ")
    return shlex.split(rest.split("\n", 1)[0])[1:]


def read_eks_bootstrap(parts, lookup_cluster):
    """AL2 and Ubuntu: bootstrap.sh's options and the kubelet flags it passes on."""
    words = None
    for _, payload in parts:
        words = bootstrap_args(payload)
        if words is not None:
            break
    if words is None:
        return None
    cluster = words[0] if words and not words[0].startswith("--") else ""
    options = {}
    rest = words[1:] if cluster else words
    for i in range(0, len(rest) - 1, 2):
        options[rest[i]] = rest[i + 1]
    if not cluster:
        raise Refused("bootstrap.sh: no cluster name")
    if not options.get("--apiserver-endpoint") or not options.get("--b64-cluster-ca"):
        # bootstrap.sh: `aws eks describe-cluster` fills in what is missing.
        if not lookup_cluster(cluster):
            raise Refused(f"bootstrap.sh: no --apiserver-endpoint/--b64-cluster-ca and DescribeCluster does not know {cluster!r}")
    flags = kubelet_flags(shlex.split(options.get("--kubelet-extra-args", "")))
    use_max_pods = options.get("--use-max-pods", "true") == "true"
    return {"flags": flags, "use_max_pods": use_max_pods}


def merge(dst, src):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def read_node_config(parts):
    """AL2023: nodeadm's NodeConfig documents merged in order (flags appended)."""
    config = {}
    flags = []
    found = False
    for content_type, payload in parts:
        if content_type != "application/node.eks.aws":
            continue
        for doc in yaml.safe_load_all(payload):
            if not isinstance(doc, dict) or doc.get("kind") != "NodeConfig":
                continue
            found = True
            spec = doc.get("spec") or {}
            flags += (spec.get("kubelet") or {}).get("flags") or []
            merge(config, {k: v for k, v in spec.items()})
    if not found:
        return None
    cluster = config.get("cluster") or {}
    for key, what in (
        ("name", "Name"),
        ("apiServerEndpoint", "Apiserver endpoint"),
        ("certificateAuthority", "Certificate authority"),
        ("cidr", "CIDR"),
    ):
        if not cluster.get(key):
            raise Refused(f"nodeadm: {what} is missing in cluster configuration")
    return {"config": (config.get("kubelet") or {}).get("config") or {}, "flags": kubelet_flags(flags)}


def read_bottlerocket(text):
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    k8s = doc.get("settings", {}).get("kubernetes")
    if k8s is None:
        return None
    if not k8s.get("api-server"):
        raise Refused("Bottlerocket: settings.kubernetes.api-server is empty, the kubelet has no server to join")
    if not k8s.get("cluster-certificate"):
        raise Refused("Bottlerocket: settings.kubernetes.cluster-certificate is empty")
    return k8s


# ---- what the kubelet registers ---------------------------------------------------------------


def registration(user_data, facts, volumes, lookup_cluster, image_name):
    """(family, max pods, kube-reserved, system-reserved, eviction-hard, node labels, taints,
    ephemeral-storage volume) as the AMI's bootstrap configures the kubelet."""
    table_pods = eni_max_pods(facts)
    cpu_reserved = f"{kube_reserved_cpu_millis(facts['vcpus'])}m"
    bottlerocket = read_bottlerocket(user_data)
    if bottlerocket is not None:
        max_pods = int(bottlerocket.get("max-pods", table_pods))
        kube_reserved = {"cpu": cpu_reserved, "memory": f"{11 * max_pods + 255}Mi", "ephemeral-storage": "1Gi"}
        kube_reserved |= {k: str(v) for k, v in (bottlerocket.get("kube-reserved") or {}).items()}
        taints = ",".join(
            f"{k}={v}" if not v.startswith(":") else f"{k}{v}"
            for k, values in (bottlerocket.get("node-taints") or {}).items()
            for v in ([values] if isinstance(values, str) else values)
        )
        return {
            "family": "Bottlerocket",
            "max_pods": max_pods,
            "kube_reserved": kube_reserved,
            "system_reserved": {k: str(v) for k, v in (bottlerocket.get("system-reserved") or {}).items()},
            "eviction_hard": dict(bottlerocket.get("eviction-hard") or DEFAULT_EVICTION_HARD),
            "labels": dict(bottlerocket.get("node-labels") or {}),
            "taints": taints,
            "volume": volumes.get("/dev/xvdb", DEFAULT_VOLUME_GIB),
        }
    parts = mime_parts(user_data)
    al2023 = read_node_config(parts)
    if al2023 is not None:
        config, flags = al2023["config"], al2023["flags"]
        max_pods = int(flags.get("max-pods", config.get("maxPods", table_pods)))
        kube_reserved = {"cpu": cpu_reserved, "memory": f"{11 * table_pods + 255}Mi", "ephemeral-storage": "1Gi"}
        kube_reserved |= {k: str(v) for k, v in (config.get("kubeReserved") or {}).items()}
        eviction = dict(DEFAULT_EVICTION_HARD) | {k: str(v) for k, v in (config.get("evictionHard") or {}).items()}
        return {
            "family": "AL2023",
            "max_pods": max_pods,
            "kube_reserved": map_flag(flags["kube-reserved"]) if "kube-reserved" in flags else kube_reserved,
            "system_reserved": map_flag(flags["system-reserved"]) if "system-reserved" in flags
            else {k: str(v) for k, v in (config.get("systemReserved") or {}).items()},
            "eviction_hard": map_flag(flags["eviction-hard"], "<") if "eviction-hard" in flags else eviction,
            "labels": map_flag(flags.get("node-labels", "")),
            "taints": flags.get("register-with-taints", ""),
            "volume": volumes.get("/dev/xvda", DEFAULT_VOLUME_GIB),
        }
    eks = read_eks_bootstrap(parts, lookup_cluster)
    if eks is not None:
        flags = eks["flags"]
        ubuntu = "ubuntu" in image_name.lower()
        default_pods = table_pods if eks["use_max_pods"] else KUBELET_DEFAULT_MAX_PODS
        return {
            "family": "Ubuntu" if ubuntu else "AL2",
            "max_pods": int(flags.get("max-pods", default_pods)),
            # bootstrap.sh reserves memory for the table's pods, whatever --max-pods says.
            "kube_reserved": map_flag(flags["kube-reserved"]) if "kube-reserved" in flags
            else {"cpu": cpu_reserved, "memory": f"{11 * table_pods + 255}Mi", "ephemeral-storage": "1Gi"},
            "system_reserved": map_flag(flags["system-reserved"]) if "system-reserved" in flags else {},
            "eviction_hard": map_flag(flags["eviction-hard"], "<") if "eviction-hard" in flags else dict(DEFAULT_EVICTION_HARD),
            "labels": map_flag(flags.get("node-labels", "")),
            "taints": flags.get("register-with-taints", ""),
            "volume": volumes.get("/dev/sda1" if ubuntu else "/dev/xvda", DEFAULT_VOLUME_GIB),
        }
    raise Refused("user data names no bootstrap this stand-in knows (bootstrap.sh, NodeConfig, Bottlerocket TOML)")


def resources(reg, facts, arm64, device_plugins):
    """(capacity, allocatable) the kubelet reports."""
    memory = kernel_memory_bytes(facts["memory_mib"], arm64)
    storage = reg["volume"] * GIB
    capacity = {"cpu": facts["vcpus"] * 1000, "memory": memory, "ephemeral-storage": storage, "pods": reg["max_pods"]}
    reserved = {"cpu": 0, "memory": 0, "ephemeral-storage": 0}
    for reservation in (reg["kube_reserved"], reg["system_reserved"]):
        for name, value in reservation.items():
            if name in reserved:
                reserved[name] += parse_quantity(value, millis=(name == "cpu"))
    eviction = reg["eviction_hard"]
    if "memory.available" in eviction:
        reserved["memory"] += signal_amount(memory, eviction["memory.available"])
    if "nodefs.available" in eviction:
        reserved["ephemeral-storage"] += signal_amount(storage, eviction["nodefs.available"])
    allocatable = {k: max(v - reserved.get(k, 0), 0) for k, v in capacity.items()}
    extended = dict(facts["extended"]) if device_plugins else {}
    if facts["pod_eni"]:
        extended[POD_ENI] = facts["pod_eni"]

    def render(r):
        out = {
            "cpu": cpu_string(r["cpu"]),
            "memory": bytes_string(r["memory"]),
            "ephemeral-storage": bytes_string(r["ephemeral-storage"]),
            "pods": str(r["pods"]),
        }
        return out | {k: str(v) for k, v in extended.items()}

    return render(capacity), render(allocatable)


# ---- the API server and the emulator ------------------------------------------------------------


class Api:
    def __init__(self, server, ca, cert, key):
        self.server = server.rstrip("/")
        self.session = requests.Session()
        # Only these settings: no CA bundle or proxy from the environment.
        self.session.trust_env = False
        self.session.verify = ca
        self.session.cert = (cert, key)

    def url(self, path):
        return self.server + path

    def get(self, path, **kw):
        r = self.session.get(self.url(path), timeout=30, **kw)
        r.raise_for_status()
        return r.json()

    def patch(self, path, body):
        r = self.session.patch(
            self.url(path), data=json.dumps(body), headers={"Content-Type": "application/merge-patch+json"}, timeout=30
        )
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()


class Standin:
    def __init__(self, api, clients):
        self.api = api
        self.ec2 = clients("ec2")
        self.eks = clients("eks")
        self.catalogue = Catalogue(self.ec2)
        self.templates = {}
        self.templates_lock = threading.Lock()
        self.busy = set()
        # uids registered (or refused) here: a watch event from before the annotation was written
        # must not register a node again.
        self.done = set()
        self.busy_lock = threading.Lock()
        self.retry = queue.Queue()

    def lookup_cluster(self, name):
        try:
            return bool(self.eks.describe_cluster(name=name)["cluster"].get("endpoint"))
        except Exception as e:  # noqa: BLE001 - any failure is "bootstrap.sh could not look it up"
            log(f"DescribeCluster {name}: {e}")
            return False

    def volumes(self, user_data_b64, image_id):
        """Device -> GiB of the launch template this user data came from (moto keeps no volumes
        for fleet instances)."""
        with self.templates_lock:
            key = (user_data_b64, image_id)
            if key in self.templates:
                return self.templates[key]
            found = {}
            for page in self.ec2.get_paginator("describe_launch_templates").paginate():
                for t in page["LaunchTemplates"]:
                    for v in self.ec2.describe_launch_template_versions(
                        LaunchTemplateId=t["LaunchTemplateId"], Versions=["$Latest"]
                    )["LaunchTemplateVersions"]:
                        data = v["LaunchTemplateData"]
                        if data.get("UserData") == user_data_b64 and data.get("ImageId") == image_id:
                            for m in data.get("BlockDeviceMappings", []):
                                size = m.get("Ebs", {}).get("VolumeSize")
                                if size:
                                    dev = m["DeviceName"]
                                    found[dev] = min(found.get(dev, size), size)
            self.templates[key] = found
            return found

    def register(self, node):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        provider_id = (node.get("spec") or {}).get("providerID", "")
        instance_id = provider_id.rsplit("/", 1)[-1] if provider_id.startswith("aws:///") else ""
        instance = None
        if instance_id.startswith("i-"):
            try:
                reservations = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
                instance = reservations[0]["Instances"][0] if reservations else None
            except self.ec2.exceptions.ClientError as e:
                if "NotFound" not in str(e):
                    raise
        user_data_b64 = ""
        if instance is not None:
            attr = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
            user_data_b64 = attr.get("UserData", {}).get("Value", "")
        tags = {t["Key"]: t["Value"] for t in (instance or {}).get("Tags", [])}
        if instance is None or (not user_data_b64 and MANAGED not in tags):
            return self.annotate(name, {REGISTERED: "true", SOURCE: "no-instance"}, {})
        arm64 = instance.get("Architecture") == "arm64"
        facts = self.catalogue.get(instance["InstanceType"])
        try:
            if not user_data_b64:
                raise Refused("the instance has no user data")
            user_data = base64.b64decode(user_data_b64).decode()
            hostname = instance.get("PrivateDnsName", "").lower()
            if hostname and hostname != name:
                raise Refused(f"the kubelet's hostname is {hostname}: it would register a Node of that name, not {name}")
            image = self.ec2.describe_images(ImageIds=[instance["ImageId"]])["Images"]
            reg = registration(
                user_data,
                facts,
                self.volumes(user_data_b64, instance["ImageId"]),
                self.lookup_cluster,
                image[0].get("Name", "") if image else "",
            )
        except Refused as e:
            log(f"{name}: refused to join: {e}")
            return self.annotate(name, {REFUSED: str(e)}, {})
        capacity, allocatable = resources(reg, facts, arm64, NO_DEVICE_PLUGIN not in labels)
        # The kubelet's initial labels (hostname, os, arch), then --node-labels over them; on a
        # Node that exists only the default label keys are reconciled (updateDefaultLabels).
        initial = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "arm64" if arm64 else "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "arm64" if arm64 else "amd64",
        } | reg["labels"]
        label_patch = {k: initial[k] or None for k in DEFAULT_LABELS if k in initial and labels.get(k) != initial[k]}
        # Capacity the Node had that the kubelet does not report: extended resources go to 0
        # (reconcileExtendedResource), others are removed.
        status = node.get("status") or {}
        for field, value in (("capacity", capacity), ("allocatable", allocatable)):
            for k in status.get(field) or {}:
                if k not in value:
                    value[k] = "0" if "/" in k else None
        if self.api.patch(f"/api/v1/nodes/{name}/status", {"status": {"capacity": capacity, "allocatable": allocatable}}) is None:
            return
        annotations = {
            REGISTERED: "true",
            SOURCE: "user-data",
            FAMILY: reg["family"],
            MAX_PODS: str(reg["max_pods"]),
            NODE_LABELS: ",".join(f"{k}={v}" for k, v in sorted(reg["labels"].items())),
            REGISTER_TAINTS: reg["taints"],
        }
        log(
            f"{name}: {reg['family']} {instance['InstanceType']} in {instance['Placement']['AvailabilityZone']}: "
            f"pods {reg['max_pods']}, allocatable {allocatable}, labels changed {label_patch or 'none'}"
        )
        return self.annotate(name, annotations, label_patch)

    def annotate(self, name, annotations, labels):
        self.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"annotations": annotations, "labels": labels}})

    def handle(self, node):
        name = node["metadata"]["name"]
        try:
            self.register(node)
            with self.busy_lock:
                self.done.add(node["metadata"]["uid"])
        except Exception as e:  # noqa: BLE001 - a transient failure is retried, never fatal
            log(f"{name}: {type(e).__name__}: {e}; retrying in 2 s")
            self.retry.put((time.monotonic() + 2, name))
        finally:
            with self.busy_lock:
                self.busy.discard(name)

    def wants(self, node):
        meta = node["metadata"]
        annotations = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        return (
            (MANAGED in labels or NODEPOOL in labels)
            and NO_KUBELET not in labels
            and REGISTERED not in annotations
            and REFUSED not in annotations
            and not meta.get("deletionTimestamp")
        )

    def offer(self, pool, node):
        if not self.wants(node):
            return
        name = node["metadata"]["name"]
        with self.busy_lock:
            if name in self.busy or node["metadata"]["uid"] in self.done:
                return
            self.busy.add(name)
        pool.submit(self.handle, node)

    def run(self, stop, server):
        # Every Node: a label selector cannot say "either label".
        selector = {}
        first = True
        with ThreadPoolExecutor(max_workers=8) as pool:
            threading.Thread(target=self.retries, args=(pool, stop), daemon=True).start()
            while not stop.is_set():
                try:
                    listed = self.api.get("/api/v1/nodes", params=selector)
                    if first:
                        # up.sh waits for this line.
                        log(f"watching Nodes labelled {MANAGED} or {NODEPOOL} on {server}")
                        first = False
                    for node in listed["items"]:
                        self.offer(pool, node)
                    self.watch(pool, stop, listed["metadata"]["resourceVersion"], selector)
                except Exception as e:  # noqa: BLE001 - list and watch again
                    if not stop.is_set():
                        log(f"watch: {type(e).__name__}: {e}; listing again in 1 s")
                        stop.wait(1)

    def watch(self, pool, stop, version, selector):
        params = selector | {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true", "timeoutSeconds": "60"}
        with self.api.session.get(self.api.url("/api/v1/nodes"), params=params, stream=True, timeout=(10, 90)) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if stop.is_set():
                    return
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.offer(pool, event["object"])

    def retries(self, pool, stop):
        while not stop.is_set():
            try:
                due, name = self.retry.get(timeout=0.5)
            except queue.Empty:
                continue
            stop.wait(max(0, due - time.monotonic()))
            try:
                node = self.api.get(f"/api/v1/nodes/{name}")
            except requests.HTTPError:
                continue
            except Exception:  # noqa: BLE001
                self.retry.put((time.monotonic() + 2, name))
                continue
            self.offer(pool, node)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_moto_arguments(ap)
    ap.add_argument("--apiserver", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    args = ap.parse_args()
    stop = threading.Event()

    def exit_now(*_):
        # Nothing to flush: every registration is written to its Node as it is made. (Setting
        # `stop` alone would wait out a watch that is blocked reading, up to its 60 s.)
        log("stopped")
        os._exit(0)

    signal.signal(signal.SIGTERM, exit_now)
    signal.signal(signal.SIGINT, exit_now)
    standin = Standin(Api(args.apiserver, args.ca, args.cert, args.key), moto_clients(ap, args))
    standin.run(stop, args.apiserver)
    log("stopped")
    os._exit(0)


if __name__ == "__main__":
    main()
