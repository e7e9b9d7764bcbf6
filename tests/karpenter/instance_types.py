#!/usr/bin/env python3
"""Write the instance-types file Karpenter's KWOK cloud provider reads (INSTANCE_TYPES_FILE_PATH),
from the same catalogue karpenter-rs sees on the local cluster.

Run with the local cluster's python (it has boto3), after `source target/local-cluster/env`:

    "$LOCAL_CLUSTER_PYTHON" tests/karpenter/instance_types.py --out /tmp/it.json \
        --types c5.large,m5.xlarge            # or --families c5,m5,r5 --sizes large,xlarge
    [--spot]                                  # also spot offerings (default: on-demand only)
    [--prices FILE]                           # a karpenter-rs price-overrides file to use instead
    [--overrides-out FILE]                    # also write the prices as a karpenter-rs overrides file

Where each field comes from:

* the types: moto's DescribeInstanceTypes, filtered exactly as karpenter-rs and kwok_stages.py do
  (hvm, x86_64/arm64; tests/cluster/kwok_stages.py's describe_instance_types/facts), and the
  zones of each type from DescribeInstanceTypeOfferings (availability-zone), as karpenter-rs
  reads them, limited to --zones (default ap-northeast-2a,b,c).
* architecture: the first of x86_64/arm64 the type supports (karpenter-rs's
  kubernetes_architecture), as amd64/arm64; operatingSystems: [linux].
* on-demand price: the price karpenter-rs uses on the local cluster. moto does not emulate the
  AWS Pricing API and `up.sh --with-karpenter` passes no --price-overrides, so karpenter-rs uses
  its resource-based estimate (src/cloudprovider/aws/pricing.rs, estimate_on_demand); that
  formula is reproduced below with the same rates (it is a formula, not a table, so there is
  nothing to read). With --prices FILE, the file's prices win (the same precedence as
  karpenter-rs's --price-overrides); pass the same file to karpenter-rs (PRICE_OVERRIDES) to be
  sure both sides agree. --overrides-out writes the prices used, in that format.
* spot price (--spot only): the override's spot, else moto's newest DescribeSpotPriceHistory
  entry for (type, zone), else 0.35 x on-demand (pricing.rs, Pricing::spot).
* resources: chosen so that what Karpenter's KWOK provider computes as allocatable equals what
  the node really reports on this cluster. kwok reports capacity/allocatable from the table
  kwok_stages.py writes ($LOCAL_CLUSTER_NODE_RESOURCES, karpenter-rs's own formula: VM
  overhead, ENI-limited pods, kube-reserved, system-reserved, eviction threshold). Karpenter's
  KWOK provider (kwok/cloudprovider/helpers.go, newInstanceType) takes `resources` as capacity
  and subtracts only kubeReserved cpu 100m + memory 10Mi (no system-reserved, no eviction
  threshold, nothing for pods or ephemeral-storage), and defaults pods to 110 when absent. So:
      resources.cpu    = table allocatable cpu + 100m
      resources.memory = table allocatable memory + 10Mi
      resources.pods   = table allocatable pods (ENI-limited, e.g. 29 for m5.large)
      resources.<other> (ephemeral-storage, vpc.amazonaws.com/pod-eni, GPUs, Neuron)
                       = table allocatable amount
  and Karpenter's allocatable = the table's allocatable exactly (all in whole millicores /
  MiB, no rounding). Karpenter's *capacity* (what it writes on the Node before kwok's stage
  overwrites it, and what labels karpenter.kwok.sh/instance-cpu/-memory show) is therefore not
  the table's capacity; only allocatable matters for scheduling.

Offerings are written with `requirements` (karpenter.sh/capacity-type and
topology.kubernetes.io/zone, the v1.6.4 format the provider parses; encoding/json matches keys
case-insensitively) and, for readers of this file such as tests/benches/scale.py, also plain
`capacityType` and `zone` keys, which the Go parser ignores.
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))

import kwok_stages  # noqa: E402  (the catalogue filter and facts, shared with kwok's table)
from fixtures import add_moto_arguments, moto_clients  # noqa: E402

ZONES = ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"]
SPOT_FRACTION = 0.35  # pricing.rs SPOT_FRACTION
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ZONE = "topology.kubernetes.io/zone"
# Karpenter's KWOK provider's KubeReserved (helpers.go newInstanceType).
KWOK_OVERHEAD_CPU_MILLIS = 100
KWOK_OVERHEAD_MEMORY_MIB = 10


def log(msg):
    print(f"[instance_types.py] {msg}", file=sys.stderr)


# ---- karpenter-rs's price estimate (src/cloudprovider/aws/pricing.rs estimate_on_demand) ----


def category(name):
    """`m` of m5d.large, `u` of u-6tb1.metal (instance_types.rs parse_name)."""
    family = name.split(".", 1)[0]
    return re.match(r"[a-z]*", family).group(0)


def architecture(it):
    for a in it.get("ProcessorInfo", {}).get("SupportedArchitectures", []):
        if a in ("x86_64", "arm64"):
            return {"x86_64": "amd64", "arm64": "arm64"}[a]
    return None


def estimate_on_demand(it):
    name = it["InstanceType"]
    per_vcpu, per_gib = {
        "c": (0.0340, 0.00425),
        "r": (0.0252, 0.0047), "x": (0.0252, 0.0047), "z": (0.0252, 0.0047), "u": (0.0252, 0.0047),
        "t": (0.0269, 0.00349),
    }.get(category(name), (0.0316, 0.0041))
    vcpus = it.get("VCpuInfo", {}).get("DefaultVCpus", 0)
    mib = it.get("MemoryInfo", {}).get("SizeInMiB", 0)
    base = vcpus * per_vcpu + mib / 1024.0 * per_gib
    if architecture(it) == "arm64":
        base *= 0.8
    gpus = sum(g.get("Count", 0) for g in it.get("GpuInfo", {}).get("Gpus", []))
    accelerators = sum(a.get("Count", 0) for a in it.get("InferenceAcceleratorInfo", {}).get("Accelerators", []))
    accelerators += sum(d.get("Count", 0) for d in it.get("NeuronInfo", {}).get("NeuronDevices", []))
    storage = it.get("InstanceStorageInfo") or {}
    nvme_gb = storage.get("TotalSizeInGB", 0) if storage.get("NvmeSupport", "unsupported") != "unsupported" else 0
    return round_price(base + gpus * 0.35 + accelerators * 0.25 + nvme_gb * 0.00006)


def round_price(p):
    # Rust's f64::round rounds half away from zero; Python's round() is banker's. Same here for
    # every non-tie, and ties need an exact .5 at the 7th decimal.
    x = p * 1e6
    return (int(x + 0.5) if x >= 0 else -int(-x + 0.5)) / 1e6


def load_overrides(path):
    """karpenter-rs's overrides file: `type: price` or `type: {onDemand: p, spot: s}` (YAML/JSON)."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        import yaml  # moto's venv has PyYAML (a moto dependency)

        data = yaml.safe_load(text)
    out = {}
    for name, v in (data or {}).items():
        if isinstance(v, dict):
            out[name] = (float(v["onDemand"]), None if v.get("spot") is None else float(v["spot"]))
        else:
            out[name] = (float(v), None)
    return out


# ---- quantities ---------------------------------------------------------------------------------

UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def parse_quantity(s):
    """The quantities kwok_stages.format_amount writes: 1830m, 2, 7577Mi, 18Gi, 29."""
    if s.endswith("m"):
        return int(s[:-1]), "m"
    for suffix, unit in UNITS.items():
        if s.endswith(suffix):
            return int(s[:-2]) * unit, "bytes"
    return int(s), ""


def karpenter_resources(allocatable):
    out = {}
    for name, q in allocatable.items():
        amount, _ = parse_quantity(q)
        if name == "cpu":
            millis = amount if q.endswith("m") else amount * 1000
            out[name] = kwok_stages.format_amount("cpu", millis + KWOK_OVERHEAD_CPU_MILLIS)
        elif name == "memory":
            out[name] = kwok_stages.format_amount("memory", amount + KWOK_OVERHEAD_MEMORY_MIB * (1 << 20))
        else:
            out[name] = q
    out.setdefault("pods", "110")
    return out


# ---- main ---------------------------------------------------------------------------------------


def type_zones(ec2):
    zones = {}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone")
    for page in pages:
        for o in page["InstanceTypeOfferings"]:
            zones.setdefault(o["InstanceType"], set()).add(o["Location"])
    return zones


def spot_history(ec2):
    newest = {}
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"])
    for page in pages:
        for e in page["SpotPriceHistory"]:
            try:
                price = float(e["SpotPrice"])
            except (KeyError, ValueError):
                continue
            key = (e.get("InstanceType"), e.get("AvailabilityZone"))
            at = e["Timestamp"].timestamp() if "Timestamp" in e else 0
            if key not in newest or at >= newest[key][0]:
                newest[key] = (at, price)
    return {k: p for k, (_, p) in newest.items()}


def selected(name, args):
    family, _, size = name.partition(".")
    if args.types and name not in args.types:
        return False
    if args.families and family not in args.families:
        return False
    if args.sizes and size not in args.sizes:
        return False
    return True


def csv(s):
    return [x for x in (s or "").split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_moto_arguments(ap)
    ap.add_argument("--out", required=True, help="where to write the instance types (JSON)")
    ap.add_argument("--types", type=csv, default=[], help="comma-separated instance types (default: all)")
    ap.add_argument("--families", type=csv, default=[], help="comma-separated families, e.g. c5,m5")
    ap.add_argument("--sizes", type=csv, default=[], help="comma-separated sizes, e.g. large,xlarge")
    ap.add_argument("--zones", type=csv, default=ZONES)
    ap.add_argument("--spot", action="store_true", help="also write spot offerings")
    ap.add_argument("--prices", help="karpenter-rs price-overrides file (YAML/JSON) to use first")
    ap.add_argument("--overrides-out", help="also write the prices used as a karpenter-rs price-overrides file")
    ap.add_argument("--node-resources", default=os.environ.get("LOCAL_CLUSTER_NODE_RESOURCES"),
                    help="kwok's capacity table (default $LOCAL_CLUSTER_NODE_RESOURCES)")
    args = ap.parse_args()
    if not args.node_resources or not Path(args.node_resources).is_file():
        ap.error("--node-resources / LOCAL_CLUSTER_NODE_RESOURCES must name kwok's table "
                 "(target/local-cluster/node-resources.json; source target/local-cluster/env)")
    table = json.loads(Path(args.node_resources).read_text())["instanceTypes"]
    overrides = load_overrides(args.prices) if args.prices else {}

    ec2 = moto_clients(ap, args)("ec2")
    described = [it for it in kwok_stages.describe_instance_types(ec2)
                 if kwok_stages.facts(it) is not None and selected(it["InstanceType"], args)]
    missing = set(args.types) - {it["InstanceType"] for it in described}
    if missing:
        raise SystemExit(f"not in moto's catalogue (hvm, x86_64/arm64): {', '.join(sorted(missing))}")
    zones_of = type_zones(ec2)
    spot = spot_history(ec2) if args.spot else {}

    out, prices = [], {}
    for it in sorted(described, key=lambda it: it["InstanceType"]):
        name = it["InstanceType"]
        if name not in table:
            raise SystemExit(f"{name} is not in {args.node_resources}; restart the cluster (up.sh) to rebuild it")
        zones = [z for z in args.zones if z in zones_of.get(name, set())]
        if not zones:
            log(f"{name}: offered in none of {args.zones}; skipped")
            continue
        od, spot_override = overrides.get(name, (estimate_on_demand(it), None))
        prices[name] = {"onDemand": od}
        offerings = []
        for zone in zones:
            offerings.append(offering("on-demand", zone, od))
        if args.spot:
            for zone in zones:
                sp = spot_override if spot_override is not None else spot.get((name, zone), round_price(od * SPOT_FRACTION))
                offerings.append(offering("spot", zone, sp))
            if spot_override is not None:
                prices[name]["spot"] = spot_override
        out.append({
            "name": name,
            "offerings": offerings,
            "architecture": architecture(it),
            "operatingSystems": ["linux"],
            "resources": karpenter_resources(table[name]["allocatable"]),
        })
    if not out:
        raise SystemExit("no instance type selected")
    write(args.out, json.dumps(out, indent=1) + "\n")
    if args.overrides_out:
        write(args.overrides_out, json.dumps(prices, indent=1, sort_keys=True) + "\n")
    log(f"{len(out)} instance types -> {args.out}")


def offering(capacity_type, zone, price):
    return {
        "price": price,
        "available": True,
        "requirements": [
            {"key": CAPACITY_TYPE, "operator": "In", "values": [capacity_type]},
            {"key": ZONE, "operator": "In", "values": [zone]},
        ],
        "capacityType": capacity_type,
        "zone": zone,
    }


def write(path, text):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


if __name__ == "__main__":
    main()
