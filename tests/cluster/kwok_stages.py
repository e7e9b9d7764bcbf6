#!/usr/bin/env python3
"""Write the kwok configuration that makes kwok report Node capacity like a kubelet.

Run by up.sh (with the moto venv's python) once moto is up. It reads the
instance-type catalogue from moto exactly as karpenter-rs does
(DescribeInstanceTypes, hvm, x86_64/arm64), computes each type's capacity and
allocatable with karpenter-rs's default node settings, and writes:

  * --stages: a multi-document YAML of kwok Stages for `kwok --config`:
      node-initialize  kwok v0.7.0's default stage (conditions, addresses,
                       nodeInfo, phase), for Nodes the kubelet stand-in
                       (kubelet_standin.py) has registered, except that `capacity` and
                       `allocatable` come from a table keyed by the Node's
                       `node.kubernetes.io/instance-type` label. A type not in
                       the table keeps the status the Node already has, or
                       gets DEFAULT_RESOURCES (not kwok's cpu 1k / memory 1Ti /
                       pods 1M, which fits everything); so does a Node the
                       stand-in registered from its instance's user data.
      node-heartbeat   kwok v0.7.0's default heartbeat, verbatim. Stages given
                       with --config replace *all* default Node stages, so it
                       is declared again. (kwok keeps its default Pod stages
                       when the config has none, so they are not repeated.)
  * --table: the same table as JSON, for the test that checks it against
    karpenter-rs (tests/kwok_capacity.rs).

The formulas are karpenter-rs's (src/scheduling/capacity.rs, after
aws@v0.27.0:pkg/providers/instancetype/types.go) with default settings: AL2,
vmMemoryOverheadPercent 0.075, ENI-limited pods, no kubelet overrides, 20Gi
root volume:

  capacity    cpu = vCPUs; memory = M - ceil(M * 0.075) Mi, M = MiB (less 64 on arm64);
              pods = ENIs * (IPv4 per ENI - 1) + 2; ephemeral-storage = 20Gi;
              nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi, aws.amazon.com/neuron;
              vpc.amazonaws.com/pod-eni = branch interfaces of a trunking-compatible
              type (src/cloudprovider/aws/branch_interfaces.tsv), as the VPC resource
              controller advertises it on a cluster with security groups for pods
  allocatable capacity - kube-reserved (cpu by tiers, (11 * pods + 255)Mi, 1Gi)
              - system-reserved (100m, 100Mi, 1Gi) - eviction (memory 100Mi, 10% of
              ephemeral-storage)

Environment: AWS_ENDPOINT_URL (required, the moto URL), AWS_REGION,
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (any value).
"""

import argparse
import json
import math
import sys
from pathlib import Path

from fixtures import add_moto_arguments, branch_interfaces, moto_clients

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Set by the kubelet stand-in (kubelet_standin.py) once it has read the node's user data: kwok
# marks a Node Ready only then, as a kubelet registers only after its bootstrap.
REGISTERED_ANNOTATION = "kubelet.local-cluster/registered"
SOURCE_ANNOTATION = "kubelet.local-cluster/source"

MIB = 1 << 20
GIB = 1 << 30
VM_MEMORY_OVERHEAD_PERCENT = 0.075
EPHEMERAL_STORAGE_BYTES = 20 * GIB
EVICTION_MEMORY_BYTES = 100 * MIB
EVICTION_NODEFS_PERCENT = 10
GRAVITON_CMA_MIB = 64

# What a managed Node of an unknown instance type (or without the label) reports
# when it has no status of its own: a small node, so nothing fits by accident.
DEFAULT_RESOURCES = {"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "20Gi"}

# Resource names in the order karpenter-rs lists them (cpu, memory, pods,
# ephemeral-storage, then extended resources by name).
CPU, MEMORY, PODS, EPHEMERAL_STORAGE = "cpu", "memory", "pods", "ephemeral-storage"
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "habana": "habana.ai/gaudi"}
NEURON = "aws.amazon.com/neuron"
POD_ENI = "vpc.amazonaws.com/pod-eni"

BRANCHES = branch_interfaces()


def log(msg):
    print(f"[kwok_stages.py] {msg}", file=sys.stderr)


# ---- the catalogue, as karpenter-rs reads it (src/cloudprovider/aws/instance_types.rs) ----


def describe_instance_types(ec2):
    pages = ec2.get_paginator("describe_instance_types").paginate(
        Filters=[
            {"Name": "supported-virtualization-type", "Values": ["hvm"]},
            {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]},
        ]
    )
    return [it for page in pages for it in page["InstanceTypes"]]


def facts(it):
    """The facts karpenter-rs's `convert` keeps, or None for a type it skips."""
    if "hvm" not in it.get("SupportedVirtualizationTypes", []):
        return None
    archs = it.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
    if not any(a in ("x86_64", "arm64") for a in archs):
        return None
    network = it.get("NetworkInfo", {})
    index = network.get("DefaultNetworkCardIndex", 0)
    card = next((c for c in network.get("NetworkCards", []) if c.get("NetworkCardIndex", 0) == index), {})
    max_enis = card.get("MaximumNetworkInterfaces", network.get("MaximumNetworkInterfaces", 0))
    gpus = [
        (g.get("Manufacturer", "").lower(), g.get("Count", 0))
        for g in it.get("GpuInfo", {}).get("Gpus", [])
    ]
    neuron = sum(
        a.get("Count", 0)
        for a in it.get("InferenceAcceleratorInfo", {}).get("Accelerators", [])
        if a.get("Manufacturer", "").lower() == "aws"
    )
    neuron += sum(d.get("Count", 0) for d in it.get("NeuronInfo", {}).get("NeuronDevices", []))
    arch = next(a for a in archs if a in ("x86_64", "arm64"))
    return {
        "name": it["InstanceType"],
        "arm64": arch == "arm64",
        "vcpus": it.get("VCpuInfo", {}).get("DefaultVCpus", 0),
        "memory_mib": it.get("MemoryInfo", {}).get("SizeInMiB", 0),
        "max_enis": max_enis,
        "ipv4_per_eni": network.get("Ipv4AddressesPerInterface", 0),
        "gpus": gpus,
        "neuron": neuron,
    }


# ---- capacity and overhead, as karpenter-rs computes them (src/scheduling/capacity.rs) ----


def eni_limited_pods(f):
    return f["max_enis"] * (f["ipv4_per_eni"] - 1) + 2


def memory_capacity_bytes(f):
    mib = f["memory_mib"] - (GRAVITON_CMA_MIB if f["arm64"] else 0)
    return (mib - math.ceil(mib * VM_MEMORY_OVERHEAD_PERCENT)) * MIB


def kube_reserved_cpu_millis(cpu_millis):
    tiers = [(0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025)]
    total = 0
    for start, end, pct in tiers:
        if cpu_millis >= start:
            span = cpu_millis - start if cpu_millis < end else end - start
            total += int(span * pct)  # truncates, like Rust's `as i64`
    return total


def capacity(f):
    r = {
        CPU: f["vcpus"] * 1000,
        MEMORY: memory_capacity_bytes(f),
        PODS: eni_limited_pods(f),
        EPHEMERAL_STORAGE: EPHEMERAL_STORAGE_BYTES,
        NEURON: f["neuron"],
        POD_ENI: BRANCHES.get(f["name"], 0),
    }
    for manufacturer, count in f["gpus"]:
        name = GPU_RESOURCES.get(manufacturer)
        if name:
            r[name] = r.get(name, 0) + count
    return r


def overhead(f):
    return {
        CPU: kube_reserved_cpu_millis(f["vcpus"] * 1000) + 100,
        MEMORY: (11 * eni_limited_pods(f) + 255) * MIB + 100 * MIB + EVICTION_MEMORY_BYTES,
        EPHEMERAL_STORAGE: GIB + GIB + math.ceil(EPHEMERAL_STORAGE_BYTES / 100 * EVICTION_NODEFS_PERCENT),
    }


def allocatable(cap, over):
    return {k: max(v - over.get(k, 0), 0) for k, v in cap.items()}


def format_amount(name, amount):
    """karpenter-rs's `format_amount`: 1830m / 2 for cpu, 7577Mi / 18Gi for bytes."""
    if name == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if name in (MEMORY, EPHEMERAL_STORAGE) or name.startswith("hugepages-"):
        for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if amount != 0 and amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


def quantities(resources):
    """The resource list a Node carries: zero amounts left out, like `to_quantities`."""
    return {k: format_amount(k, v) for k, v in sorted(resources.items()) if v != 0}


def table(instance_types):
    out = {}
    for it in instance_types:
        f = facts(it)
        if f is None:
            continue
        cap = capacity(f)
        out[f["name"]] = {
            "capacity": quantities(cap),
            "allocatable": quantities(allocatable(cap, overhead(f))),
        }
    return dict(sorted(out.items()))


# ---- the kwok Stages ----


def go_string(s):
    """A Go template string literal (JSON's escaping is a subset of Go's)."""
    return json.dumps(s)


def go_dict(resources):
    return "(dict " + " ".join(f"{go_string(k)} {go_string(v)}" for k, v in resources.items()) + ")"


CONDITIONS = """\
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""


def resource_lists(value):
    """`allocatable:` and `capacity:`, each followed by `value` formatted with its name."""
    return "\n".join(f"{name}:\n" + value.format(name) for name in ("allocatable", "capacity"))


def node_initialize_template(rows):
    lines = [
        "{{ $now := Now }}",
        "{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}",
        '{{- $instanceType := "" }}',
        "{{- with .metadata.labels }}{{ $instanceType = or (index . "
        + go_string(INSTANCE_TYPE_LABEL)
        + ') "" }}{{ end }}',
        "{{- /* capacity and allocatable per instance type, as karpenter-rs computes them */}}",
        "{{- $resources := dict }}",
        '{{- $_ := "" }}',
    ]
    for name, row in rows.items():
        lines.append(
            "{{- $_ = set $resources "
            + go_string(name)
            + ' (dict "capacity" '
            + go_dict(row["capacity"])
            + ' "allocatable" '
            + go_dict(row["allocatable"])
            + ") }}"
        )
    from_table = resource_lists("{{{{ YAML .{0} 1 }}}}")
    kept_or_default = resource_lists(
        "{{{{ with .status.{0} }}}}\n{{{{ YAML . 1 }}}}\n{{{{ else }}}}\n{{{{ YAML $default 1 }}}}\n{{{{ end }}}}"
    )
    lines.append(
        f"""\
{{{{- $default := {go_dict(DEFAULT_RESOURCES)} }}}}
{{{{- $row := get $resources $instanceType }}}}
{{{{- /* registered from its user data by the kubelet stand-in: keep what it wrote */}}}}
{{{{- with .metadata.annotations }}}}{{{{ if eq (or (index . {go_string(SOURCE_ANNOTATION)}) "") "user-data" }}}}{{{{ $row = "" }}}}{{{{ end }}}}{{{{ end }}}}
{CONDITIONS}
addresses:
{{{{ with .status.addresses }}}}
{{{{ YAML . 1 }}}}
{{{{ else }}}}
{{{{ with NodeIP }}}}
- address: {{{{ . | Quote }}}}
  type: InternalIP
{{{{ end }}}}
{{{{ with NodeName }}}}
- address: {{{{ . | Quote }}}}
  type: Hostname
{{{{ end }}}}
{{{{ end }}}}

{{{{ with NodePort }}}}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{{{ . }}}}
{{{{ end }}}}

{{{{- /* a known instance type: what its kubelet would report, whatever the Node says */}}}}
{{{{ with $row }}}}
{from_table}
{{{{ else }}}}
{kept_or_default}
{{{{ end }}}}

{{{{ $nodeInfo := .status.nodeInfo }}}}
{{{{ $kwokVersion := printf "kwok-%s" Version }}}}
nodeInfo:
  architecture: {{{{ or $nodeInfo.architecture "amd64" }}}}
  bootID: {{{{ or $nodeInfo.bootID `""` }}}}
  containerRuntimeVersion: {{{{ or $nodeInfo.containerRuntimeVersion $kwokVersion }}}}
  kernelVersion: {{{{ or $nodeInfo.kernelVersion $kwokVersion }}}}
  kubeProxyVersion: {{{{ or $nodeInfo.kubeProxyVersion $kwokVersion }}}}
  kubeletVersion: {{{{ or $nodeInfo.kubeletVersion $kwokVersion }}}}
  machineID: {{{{ or $nodeInfo.machineID `""` }}}}
  operatingSystem: {{{{ or $nodeInfo.operatingSystem "linux" }}}}
  osImage: {{{{ or $nodeInfo.osImage `""` }}}}
  systemUUID: {{{{ or $nodeInfo.systemUUID `""` }}}}
phase: Running"""
    )
    return "\n".join(lines)


def block(text, indent):
    pad = " " * indent
    return "\n".join(pad + line if line else "" for line in text.splitlines())


READY_NOT_TRUE = """\
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'"""

RUNNING_AND_READY = """\
    matchExpressions:
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values:
      - 'True'"""


def stages(rows):
    heartbeat = "{{ $now := Now }}\n{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}\n" + CONDITIONS
    return f"""\
# Generated by tests/cluster/kwok_stages.py at up.sh time; passed to kwok with --config.
# Stages in --config replace all of kwok's default Node stages (its default Pod stages stay).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchAnnotations:
      {REGISTERED_ANNOTATION}: "true"
{READY_NOT_TRUE}
  next:
    statusTemplate: |
{block(node_initialize_template(rows), 6)}
---
# kwok v0.7.0's node-heartbeat, unchanged (the one it picks with --node-lease-duration-seconds > 0).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
{RUNNING_AND_READY}
  delay:
    durationMilliseconds: 20000
    jitterDurationMilliseconds: 25000
  next:
    statusTemplate: |
{block(heartbeat, 6)}
  immediateNextStage: true
"""


def write(path, text):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_moto_arguments(ap)
    ap.add_argument("--stages", required=True, help="where to write the kwok Stages (YAML)")
    ap.add_argument("--table", required=True, help="where to write the instance-type table (JSON)")
    args = ap.parse_args()
    rows = table(describe_instance_types(moto_clients(ap, args)("ec2")))
    if not rows:
        raise SystemExit("moto described no hvm x86_64/arm64 instance types")
    doc = {"default": DEFAULT_RESOURCES, "instanceTypes": rows}
    write(args.table, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    write(args.stages, stages(rows))
    log(f"{len(rows)} instance types; wrote {args.stages} and {args.table}")


if __name__ == "__main__":
    main()
