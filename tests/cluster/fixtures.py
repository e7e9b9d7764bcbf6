#!/usr/bin/env python3
"""Seed moto's EC2/IAM/SSM with what Karpenter expects to discover in a real account.

Run by up.sh (with the moto venv's python) once moto is up; safe to run again:
every object is found by its `karpenter-rs/fixture` tag (or its name, for IAM)
before anything is created, so a re-run creates nothing new. Writes the ids to
target/local-cluster/fixtures.json (or --out).

What it creates, for cluster CLUSTER_NAME (default ssungz-cluster):
  * VPC 10.0.0.0/16 and one subnet in each of <region>a/b/c (10.0.0.0/19,
    10.0.32.0/19, 10.0.64.0/19), tagged karpenter.sh/discovery=CLUSTER_NAME and
    karpenter.sh/discovery/CLUSTER_NAME=shared (+ kubernetes.io/cluster/CLUSTER_NAME=shared)
  * security group "<cluster>-node" tagged aws:eks:cluster-name=CLUSTER_NAME and
    karpenter.sh/discovery=CLUSTER_NAME
  * IAM role KarpenterNodeRole-CLUSTER_NAME and instance profile
    KarpenterNodeInstanceProfile containing it
  * one AMI per EKS-optimized / Bottlerocket flavour (copied from a moto stock
    image of the right architecture, renamed like the real ones) and the public
    SSM parameters that point at them, e.g.
    /aws/service/eks/optimized-ami/1.33/amazon-linux-2/recommended/image_id and
    /aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id.
    Writing /aws/service/* needs moto_server.py (stock moto refuses those names).

  * the EKS cluster CLUSTER_NAME (version 1.33, those subnets and security group), so that
    eks:DescribeCluster answers with an endpoint (moto's own, not the local API server's)

Environment: AWS_ENDPOINT_URL (required, the moto URL), AWS_REGION,
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (any value), CLUSTER_NAME.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import boto3
from botocore.exceptions import ClientError

K8S_MINOR = "1.33"
FIXTURE_TAG = "karpenter-rs/fixture"

# (SSM parameter, AMI name, architecture) — names follow the real images'
# naming so AMI-family logic that looks at names/architectures sees something
# plausible. The GPU/NVIDIA ones are extra: Karpenter's AL2 and Bottlerocket
# families also query them.
AMI_PARAMS = [
    (
        f"/aws/service/eks/optimized-ami/{K8S_MINOR}/amazon-linux-2/recommended/image_id",
        f"amazon-eks-node-{K8S_MINOR}-v20250101",
        "x86_64",
    ),
    (
        f"/aws/service/eks/optimized-ami/{K8S_MINOR}/amazon-linux-2-arm64/recommended/image_id",
        f"amazon-eks-arm64-node-{K8S_MINOR}-v20250101",
        "arm64",
    ),
    (
        f"/aws/service/eks/optimized-ami/{K8S_MINOR}/amazon-linux-2-gpu/recommended/image_id",
        f"amazon-eks-gpu-node-{K8S_MINOR}-v20250101",
        "x86_64",
    ),
    # AL2023 (nodeadm): the default family from 1.33 on.
    (
        f"/aws/service/eks/optimized-ami/{K8S_MINOR}/amazon-linux-2023/x86_64/standard/recommended/image_id",
        f"amazon-eks-node-al2023-x86_64-standard-{K8S_MINOR}-v20250101",
        "x86_64",
    ),
    (
        f"/aws/service/eks/optimized-ami/{K8S_MINOR}/amazon-linux-2023/arm64/standard/recommended/image_id",
        f"amazon-eks-node-al2023-arm64-standard-{K8S_MINOR}-v20250101",
        "arm64",
    ),
    (
        f"/aws/service/eks/optimized-ami/{K8S_MINOR}/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
        f"amazon-eks-node-al2023-x86_64-nvidia-{K8S_MINOR}-v20250101",
        "x86_64",
    ),
    (
        f"/aws/service/bottlerocket/aws-k8s-{K8S_MINOR}/x86_64/latest/image_id",
        f"bottlerocket-aws-k8s-{K8S_MINOR}-x86_64-v1.30.0-00000000",
        "x86_64",
    ),
    (
        f"/aws/service/bottlerocket/aws-k8s-{K8S_MINOR}/arm64/latest/image_id",
        f"bottlerocket-aws-k8s-{K8S_MINOR}-aarch64-v1.30.0-00000000",
        "arm64",
    ),
    (
        f"/aws/service/bottlerocket/aws-k8s-{K8S_MINOR}-nvidia/x86_64/latest/image_id",
        f"bottlerocket-aws-k8s-{K8S_MINOR}-nvidia-x86_64-v1.30.0-00000000",
        "x86_64",
    ),
]

NODE_ROLE_POLICIES = [
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
]


def log(msg):
    print(f"[fixtures.py] {msg}", file=sys.stderr)


def tags_list(tags):
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def find_one(items, what):
    if len(items) > 1:
        log(f"warning: {len(items)} objects tagged as {what}, using the first")
    return items[0] if items else None


def ensure_vpc(ec2, cluster):
    fixture = f"{cluster}/vpc"
    vpcs = ec2.describe_vpcs(Filters=[{"Name": f"tag:{FIXTURE_TAG}", "Values": [fixture]}])["Vpcs"]
    vpc = find_one(vpcs, fixture)
    if vpc:
        return vpc["VpcId"], False
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.create_tags(
        Resources=[vpc_id],
        Tags=tags_list({FIXTURE_TAG: fixture, "Name": f"{cluster}-vpc"}),
    )
    return vpc_id, True


def ensure_subnets(ec2, cluster, region, vpc_id):
    out = {}
    for i, suffix in enumerate("abc"):
        az = f"{region}{suffix}"
        fixture = f"{cluster}/subnet-{az}"
        subnets = ec2.describe_subnets(
            Filters=[{"Name": f"tag:{FIXTURE_TAG}", "Values": [fixture]}]
        )["Subnets"]
        subnet = find_one(subnets, fixture)
        if subnet:
            out[az] = subnet["SubnetId"]
            continue
        subnet_id = ec2.create_subnet(
            VpcId=vpc_id, CidrBlock=f"10.0.{i * 32}.0/19", AvailabilityZone=az
        )["Subnet"]["SubnetId"]
        ec2.create_tags(
            Resources=[subnet_id],
            Tags=tags_list(
                {
                    FIXTURE_TAG: fixture,
                    "Name": f"{cluster}-private-{az}",
                    "karpenter.sh/discovery": cluster,
                    f"karpenter.sh/discovery/{cluster}": "shared",
                    f"kubernetes.io/cluster/{cluster}": "shared",
                }
            ),
        )
        out[az] = subnet_id
    return out


def ensure_security_group(ec2, cluster, vpc_id):
    fixture = f"{cluster}/node-security-group"
    groups = ec2.describe_security_groups(
        Filters=[{"Name": f"tag:{FIXTURE_TAG}", "Values": [fixture]}]
    )["SecurityGroups"]
    group = find_one(groups, fixture)
    if group:
        return group["GroupId"]
    group_id = ec2.create_security_group(
        GroupName=f"{cluster}-node",
        Description=f"EKS node security group of {cluster} (karpenter-rs test fixture)",
        VpcId=vpc_id,
    )["GroupId"]
    ec2.create_tags(
        Resources=[group_id],
        Tags=tags_list(
            {
                FIXTURE_TAG: fixture,
                "Name": f"{cluster}-node",
                "aws:eks:cluster-name": cluster,
                "karpenter.sh/discovery": cluster,
                f"kubernetes.io/cluster/{cluster}": "owned",
            }
        ),
    )
    return group_id


def ensure_instance_profile(iam, cluster):
    role_name = f"KarpenterNodeRole-{cluster}"
    profile_name = "KarpenterNodeInstanceProfile"
    try:
        iam.get_role(RoleName=role_name)
    except iam.exceptions.NoSuchEntityException:
        iam.create_role(
            RoleName=role_name,
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            Tags=tags_list({FIXTURE_TAG: f"{cluster}/node-role"}),
        )
    attached = {
        p["PolicyArn"]
        for p in iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]
    }
    for arn in NODE_ROLE_POLICIES:
        if arn in attached:
            continue
        try:
            iam.attach_role_policy(RoleName=role_name, PolicyArn=arn)
        except ClientError as e:  # not every AWS managed policy is known to moto
            log(f"note: could not attach {arn}: {e.response['Error']['Code']}")
    try:
        profile = iam.get_instance_profile(InstanceProfileName=profile_name)["InstanceProfile"]
    except iam.exceptions.NoSuchEntityException:
        profile = iam.create_instance_profile(InstanceProfileName=profile_name)["InstanceProfile"]
    if role_name not in {r["RoleName"] for r in profile.get("Roles", [])}:
        iam.add_role_to_instance_profile(InstanceProfileName=profile_name, RoleName=role_name)
    profile = iam.get_instance_profile(InstanceProfileName=profile_name)["InstanceProfile"]
    return role_name, profile_name, profile["Arn"]


def pick_source_image(ec2, arch, cache):
    """A moto stock image of the given architecture, to copy ours from."""
    if arch not in cache:
        images = ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}])["Images"]
        images = [i for i in images if i.get("State", "available") == "available"]
        if not images:
            raise SystemExit(f"moto has no {arch} image to copy from")
        # Prefer moto's EKS image for x86_64, else any Linux one, deterministically.
        images.sort(
            key=lambda i: (
                "eks" not in (i.get("Name") or "").lower(),
                "windows" in (i.get("Name") or "").lower() or i.get("Platform") == "windows",
                i["ImageId"],
            )
        )
        cache[arch] = images[0]["ImageId"]
    return cache[arch]


def ensure_amis(ec2, ssm, cluster, region):
    out = {}
    sources = {}
    for param, name, arch in AMI_PARAMS:
        fixture = f"{cluster}/ami/{name}"
        images = ec2.describe_images(
            Owners=["self"], Filters=[{"Name": f"tag:{FIXTURE_TAG}", "Values": [fixture]}]
        )["Images"]
        image = find_one(images, fixture)
        if image:
            image_id = image["ImageId"]
        else:
            source = pick_source_image(ec2, arch, sources)
            # copy_image keeps the source's architecture (register_image in
            # moto cannot set one and always yields x86_64).
            image_id = ec2.copy_image(
                SourceImageId=source,
                SourceRegion=region,
                Name=name,
                Description=f"{name} (karpenter-rs test fixture, copy of {source})",
            )["ImageId"]
            ec2.create_tags(Resources=[image_id], Tags=tags_list({FIXTURE_TAG: fixture, "Name": name}))
        got = ec2.describe_images(ImageIds=[image_id])["Images"][0]["Architecture"]
        if got != arch:
            raise SystemExit(f"{image_id} ({name}) has architecture {got}, wanted {arch}")
        # Always overwrite: moto could pre-populate some /aws/service names.
        ssm.put_parameter(
            Name=param, Value=image_id, Type="String", DataType="aws:ec2:image", Overwrite=True
        )
        out[param] = {"image_id": image_id, "name": name, "architecture": arch}
    return out


def ensure_eks_cluster(eks, cluster, role, subnets, sg_id):
    """The EKS cluster itself, so that eks:DescribeCluster answers for it (karpenter-rs looks the
    cluster endpoint up that way when none is set); returns moto's endpoint for it."""
    try:
        return eks.describe_cluster(name=cluster)["cluster"]["endpoint"]
    except eks.exceptions.ResourceNotFoundException:
        pass
    created = eks.create_cluster(
        name=cluster,
        version="1.33",
        roleArn=f"arn:aws:iam::123456789012:role/{role}",
        resourcesVpcConfig={"subnetIds": sorted(subnets.values()), "securityGroupIds": [sg_id]},
    )
    return created["cluster"]["endpoint"]


def branch_interfaces():
    """Instance type -> branch network interfaces (security groups for pods): the VPC resource
    controller's limits, from the generated table karpenter-rs embeds."""
    table = {}
    path = Path(__file__).resolve().parents[2] / "src/cloudprovider/aws/branch_interfaces.tsv"
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, count = line.split("\t")
            table[name] = int(count)
    return table


def add_moto_arguments(ap):
    """--endpoint-url and --region, defaulting to AWS_ENDPOINT_URL and AWS_REGION."""
    ap.add_argument("--endpoint-url", default=os.environ.get("AWS_ENDPOINT_URL"))
    ap.add_argument("--region", default=os.environ.get("AWS_REGION", "ap-northeast-2"))


def moto_clients(ap, args):
    """A function making boto3 clients for moto (`client("ec2")`); a usage error without an endpoint."""
    if not args.endpoint_url:
        ap.error("--endpoint-url or AWS_ENDPOINT_URL is required (this only talks to moto)")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    session = boto3.session.Session(region_name=args.region)
    return lambda svc: session.client(svc, endpoint_url=args.endpoint_url)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_moto_arguments(ap)
    ap.add_argument("--cluster-name", default=os.environ.get("CLUSTER_NAME", "ssungz-cluster"))
    ap.add_argument("--out", default=None, help="where to write the ids (JSON)")
    args = ap.parse_args()
    client = moto_clients(ap, args)
    ec2, iam, ssm = client("ec2"), client("iam"), client("ssm")
    cluster, region = args.cluster_name, args.region

    vpc_id, created = ensure_vpc(ec2, cluster)
    log(f"vpc {vpc_id} ({'created' if created else 'exists'})")
    subnets = ensure_subnets(ec2, cluster, region, vpc_id)
    sg_id = ensure_security_group(ec2, cluster, vpc_id)
    role, profile, profile_arn = ensure_instance_profile(iam, cluster)
    amis = ensure_amis(ec2, ssm, cluster, region)
    eks_endpoint = ensure_eks_cluster(client("eks"), cluster, role, subnets, sg_id)

    result = {
        "endpoint_url": args.endpoint_url,
        "region": region,
        "cluster_name": cluster,
        "vpc_id": vpc_id,
        "subnets": subnets,
        "security_group_id": sg_id,
        "node_role": role,
        "instance_profile": profile,
        "instance_profile_arn": profile_arn,
        "amis": amis,
        "eks_endpoint": eks_endpoint,
    }
    text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(args.out + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
        log(f"wrote {args.out}")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
