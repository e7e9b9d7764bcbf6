#!/usr/bin/env python3
"""Writes src/simulate/catalogue.json, the instance-type catalogue `karpenter-rs simulate` uses
without AWS access.

Source: the EC2 data bundled with moto (the emulator the local test cluster runs): its
DescribeInstanceTypes answers (moto/ec2/resources/instance_types.json.gz) and its
DescribeInstanceTypeOfferings answers per region (instance_type_offerings/availability-zone/
<region>.json.gz). Prices are NOT from AWS: every on-demand price is karpenter-rs's own
resource-based estimate (src/cloudprovider/aws/pricing.rs `estimate_on_demand`, mirrored below;
`cargo test --lib simulate` fails when the two disagree). Spot prices are not stored: like the
controller without spot price history, simulate takes SPOT_FRACTION of on-demand.

Usage (from the repository root):
    python3 src/simulate/refresh-catalogue.py [MOTO_EC2_RESOURCES_DIR] > src/simulate/catalogue.json
The directory defaults to the moto virtualenv of the local cluster,
~/.cache/karpenter-rs/moto-*/venv/lib/python3*/site-packages/moto/ec2/resources.
"""

import datetime
import glob
import gzip
import json
import math
import os
import re
import sys

REGIONS = ["ap-northeast-2", "us-east-1", "us-west-2", "eu-west-1"]


def moto_dir():
    if len(sys.argv) > 1:
        return sys.argv[1]
    pattern = os.path.expanduser(
        "~/.cache/karpenter-rs/moto-*/venv/lib/python3*/site-packages/moto/ec2/resources"
    )
    found = sorted(glob.glob(pattern))
    if not found:
        sys.exit(f"no moto resources found at {pattern}; pass the directory")
    return found[-1]


def moto_version(path):
    m = re.search(r"moto-([0-9][^/]*?)-boto3", path)
    return m.group(1) if m else "unknown"


def category(name):
    family = name.split(".", 1)[0]
    return re.match(r"[a-z]*", family).group(0)


def estimate_on_demand(t):
    """src/cloudprovider/aws/pricing.rs `estimate_on_demand`, operation for operation."""
    per_vcpu, per_gib = {
        "c": (0.0340, 0.00425),
        "r": (0.0252, 0.0047),
        "x": (0.0252, 0.0047),
        "z": (0.0252, 0.0047),
        "u": (0.0252, 0.0047),
        "t": (0.0269, 0.00349),
    }.get(category(t["name"]), (0.0316, 0.0041))
    base = float(t["vcpus"]) * per_vcpu + float(t["memoryMiB"]) / 1024.0 * per_gib
    if t["arch"] == "arm64":
        base = base * 0.8
    gpus = sum(g["count"] for g in t.get("gpus", []))
    accelerators = sum(a["count"] for a in t.get("accelerators", []))
    extras = float(gpus) * 0.35 + float(accelerators) * 0.25 + float(t.get("nvmeGB", 0)) * 0.00006
    return math.floor((base + extras) * 1e6 + 0.5) / 1e6


def convert(it):
    """src/cloudprovider/aws/instance_types.rs `convert`, to the snapshot's field names."""
    if "hvm" not in it.get("SupportedVirtualizationTypes", []):
        return None
    arch = next(
        (
            {"x86_64": "amd64", "arm64": "arm64"}[a]
            for a in it.get("ProcessorInfo", {}).get("SupportedArchitectures", [])
            if a in ("x86_64", "arm64")
        ),
        None,
    )
    if arch is None:
        return None
    network = it.get("NetworkInfo", {})
    index = network.get("DefaultNetworkCardIndex", 0)
    card = next((c for c in network.get("NetworkCards", []) if c.get("NetworkCardIndex", 0) == index), None)
    enis = (card or {}).get("MaximumNetworkInterfaces", network.get("MaximumNetworkInterfaces", 0))
    t = {
        "name": it["InstanceType"],
        "vcpus": it.get("VCpuInfo", {}).get("DefaultVCpus", 0),
        "memoryMiB": it.get("MemoryInfo", {}).get("SizeInMiB", 0),
        "arch": arch,
        "maxENIs": enis,
        "ipv4PerENI": network.get("Ipv4AddressesPerInterface", 0),
    }
    gpus = [
        {
            "name": g.get("Name", "").lower(),
            "manufacturer": g.get("Manufacturer", "").lower(),
            "count": g.get("Count", 0),
            "memoryMiB": g.get("MemoryInfo", {}).get("SizeInMiB", 0),
        }
        for g in it.get("GpuInfo", {}).get("Gpus", [])
    ]
    if gpus:
        t["gpus"] = gpus
    accelerators = [
        {"name": a.get("Name", "").lower(), "manufacturer": a.get("Manufacturer", "").lower(), "count": a.get("Count", 0)}
        for a in it.get("InferenceAcceleratorInfo", {}).get("Accelerators", [])
    ] + [
        {"name": d.get("Name", "").lower(), "manufacturer": "aws", "count": d.get("Count", 0)}
        for d in it.get("NeuronInfo", {}).get("NeuronDevices", [])
    ]
    if accelerators:
        t["accelerators"] = accelerators
    if it.get("Hypervisor"):
        t["hypervisor"] = it["Hypervisor"]
    if it.get("BareMetal"):
        t["metal"] = True
    storage = it.get("InstanceStorageInfo")
    if storage and storage.get("NvmeSupport", "unsupported") != "unsupported" and storage.get("TotalSizeInGB"):
        t["nvmeGB"] = storage["TotalSizeInGB"]
    if card and card.get("BaselineBandwidthInGbps") is not None:
        t["bandwidthMbps"] = int(math.floor(card["BaselineBandwidthInGbps"] * 1000.0 + 0.5))
    if network.get("EncryptionInTransitSupported"):
        t["encryptionInTransit"] = True
    t["capacityTypes"] = [u for u in it.get("SupportedUsageClasses", []) if u in ("on-demand", "spot")]
    return t


def main():
    root = moto_dir()
    described = json.load(gzip.open(os.path.join(root, "instance_types.json.gz")))
    types = sorted(filter(None, (convert(it) for it in described.values())), key=lambda t: t["name"])
    by_name = {t["name"]: t for t in types}
    regions = {}
    for region in REGIONS:
        offerings = json.load(gzip.open(os.path.join(root, "instance_type_offerings", "availability-zone", f"{region}.json.gz")))
        zones = {}
        for o in offerings:
            if o["InstanceType"] in by_name:
                zones.setdefault(o["InstanceType"], set()).add(o["Location"])
        regions[region] = {
            "zones": {name: sorted(z) for name, z in sorted(zones.items())},
            "onDemand": {name: estimate_on_demand(by_name[name]) for name in sorted(zones)},
        }
    snapshot = {
        "taken": datetime.date.today().isoformat(),
        "source": f"EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings data bundled with moto {moto_version(root)}; "
        "on-demand prices are karpenter-rs's resource-based estimate (src/cloudprovider/aws/pricing.rs), not AWS prices; "
        "written by src/simulate/refresh-catalogue.py",
        "pricesEstimated": True,
        "types": types,
        "regions": regions,
    }
    json.dump(snapshot, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
