//! `karpenter-rs convert`'s output is accepted by Karpenter v1's own CRDs: the NodePool CRD of
//! sigs.k8s.io/karpenter v1.6.4 and the EC2NodeClass CRD of github.com/aws/karpenter-provider-aws
//! v1.6.3 (from tests/karpenter/v1-crds.sh), installed on the local cluster, take every converted
//! object with `kubectl create --dry-run=server --validate=strict` (schema, CEL rules, no unknown
//! fields). Dry runs only: nothing is stored, so no controller sharing the cluster acts on them.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use karpenter_rs::convert::{self, Settings, Source};
use serde::Deserialize;
use serde_json::{json, Value};
use support::{cluster, kubectl, kubectl_ok, repo_root, unique, Cluster};

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-rs");

/// The cached CRD directory tests/karpenter/v1-crds.sh prints.
fn v1_crds() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/karpenter/v1-crds.sh"))
        .stdin(Stdio::null())
        .output()
        .expect("running tests/karpenter/v1-crds.sh");
    assert!(out.status.success(), "v1-crds.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let dir = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("KARPENTER_V1_CRDS="))
        .expect("v1-crds.sh prints KARPENTER_V1_CRDS=");
    PathBuf::from(dir)
}

/// Installs the EC2NodeClass CRD, and the NodePool CRD unless one is there already (the one
/// tests/karpenter/up.sh installs is the same file); waits until both are served.
fn install_v1_crds(cluster: &Cluster, dir: &std::path::Path) {
    let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
    kubectl_ok(
        cluster,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &file("karpenter.k8s.aws_ec2nodeclasses.yaml"),
        ],
        None,
    );
    if !kubectl(cluster, &["get", "crd", "nodepools.karpenter.sh"], None).status.success() {
        kubectl_ok(
            cluster,
            &["apply", "--server-side", "-f", &file("karpenter.sh_nodepools.yaml")],
            None,
        );
    }
    kubectl_ok(
        cluster,
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd/nodepools.karpenter.sh",
            "crd/ec2nodeclasses.karpenter.k8s.aws",
        ],
        None,
    );
}

/// Templates and Provisioners that use every field the conversion handles.
const KITCHEN_SINK: &str = r#"
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata:
  name: kitchen
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
spec:
  amiFamily: Bottlerocket
  amiSelector:
    aws::name: bottlerocket-aws-k8s-*
    team: a,b
  instanceProfile: KarpenterNodeInstanceProfile
  userData: |
    [settings.kubernetes]
    max-pods = 50
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs: {volumeSize: 4Gi, volumeType: gp3, encrypted: true}
    - deviceName: /dev/xvdb
      ebs: {volumeSize: 20000Mi, volumeType: gp3, iops: 3000, throughput: 125, encrypted: true, kmsKeyID: "arn:aws:kms:ap-northeast-2:123456789012:key/abc", deleteOnTermination: true}
  metadataOptions: {httpTokens: optional}
  detailedMonitoring: true
  context: cr-0123456789abcdef0
  tags:
    team: platform
    eks:eks-cluster-name: ssungz-cluster
    karpenter.sh/nodepool: x
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: ids}
spec:
  amiFamily: Custom
  amiSelector: {aws-ids: "ami-0a1b2c3d, ami-4e5f6a7b"}
  subnetSelector: {aws-ids: "subnet-0a1b2c3d,subnet-4e5f6a7b"}
  securityGroupSelector: {aws::ids: sg-0a1b2c3d}
  userData: |
    #!/bin/bash
    /etc/eks/bootstrap.sh ssungz-cluster
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: ubuntu}
spec:
  amiFamily: Ubuntu
  subnetSelector: {environment: "production,staging", tier: "*"}
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: ubuntu-ids}
spec:
  amiFamily: Ubuntu
  amiSelector: {aws::ids: ami-0a1b2c3d}
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: al2023}
spec:
  amiFamily: AL2023
  metadataOptions: {httpEndpoint: enabled, httpProtocolIPv6: enabled, httpPutResponseHopLimit: 1, httpTokens: required}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: kitchen-a
  labels: {team: platform}
spec:
  providerRef: {name: kitchen}
  consolidation: {enabled: true}
  ttlSecondsUntilExpired: 0
  weight: 50
  limits:
    resources: {cpu: 1000, memory: 1000Gi, nvidia.com/gpu: 2}
  labels:
    team: platform
    notkubernetes.io/legacy: "yes"
    example.com/spot: "yes"
    example.com/since: "2001-12-14"
    example.com/count: "1_000"
  annotations:
    karpenter.sh/do-not-consolidate: "true"
    example.com/owner: platform
    example.com/enabled: "on"
  taints:
    - {key: dedicated, value: platform, effect: NoSchedule}
  startupTaints:
    - {key: node.cilium.io/agent-not-ready, effect: NoExecute}
  requirements:
    - {key: karpenter.k8s.aws/instance-pods, operator: Gt, values: ["10"]}
    - {key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["33"]}
    - {key: karpenter.k8s.aws/instance-hypervisor, operator: Exists}
    - {key: karpenter.k8s.aws/instance-local-nvme, operator: DoesNotExist}
    - {key: beta.kubernetes.io/arch, operator: In, values: [amd64, arm64]}
    - {key: topology.kubernetes.io/zone, operator: NotIn, values: [ap-northeast-2d]}
  kubeletConfiguration:
    clusterDNS: [10.100.0.10]
    containerRuntime: containerd
    cpuCFSQuota: false
    maxPods: 110
    podsPerCore: 10
    systemReserved: {cpu: 100m, memory: 100Mi, ephemeral-storage: 1Gi, pid: "100"}
    kubeReserved: {cpu: 200m, memory: 100Mi}
    evictionHard: {memory.available: 5%, nodefs.available: 10%}
    evictionSoft: {memory.available: 500Mi}
    evictionSoftGracePeriod: {memory.available: 1m30s}
    evictionMaxPodGracePeriod: 60
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 85
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: kitchen-b}
spec:
  providerRef: {name: kitchen}
  ttlSecondsAfterEmpty: 0
  kubeletConfiguration: {maxPods: 20}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: inline}
spec:
  requirements:
    - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
  provider:
    apiVersion: extensions.karpenter.sh/v1alpha1
    kind: AWS
    amiFamily: AL2
    clusterName: ssungz-cluster
    spotPrice: "0.067"
    subnetSelector: {karpenter.sh/discovery: ssungz-cluster}
    securityGroupSelector: {aws-ids: "sg-1,sg-2"}
    tags: {karpenter.sh/nodeclaim: x, team: a}
    metadataOptions: {httpPutResponseHopLimit: 3}
    blockDeviceMappings:
      - {deviceName: /dev/xvda, ebs: {volumeSize: 100G, volumeType: gp2}}
  kubeletConfiguration: {maxPods: 30}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: elsewhere}
spec:
  providerRef: {name: not-in-the-input}
  kubeletConfiguration: {maxPods: 40}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: ids}
spec:
  providerRef: {name: ids}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: ubuntu}
spec:
  providerRef: {name: ubuntu}
---
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: al2023}
spec:
  providerRef: {name: al2023}
"#;

/// Dry-runs the objects of `yaml` as new ones and checks every one was accepted. Names get a
/// suffix of this run first (nodeClassRefs too): an object of the same name left on the cluster
/// (the benchmarks' NodePool `default`) would turn a create into an update of that object.
fn accepted(cluster: &Cluster, yaml: &str, objects: usize) {
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("the output is YAML"))
        .collect();
    // kubectl reads YAML 1.1 (where `yes` and `2001-12-14` are no strings): it must read the
    // text exactly as meant, comments as comments.
    let read = kubectl_ok(cluster, &["create", "--dry-run=client", "-o", "json", "-f", "-"], Some(yaml));
    // One JSON object per document, one after the other.
    let read: Vec<Value> = serde_json::Deserializer::from_str(&read)
        .into_iter::<Value>()
        .map(|v| v.expect("kubectl prints JSON"))
        .collect();
    assert_eq!(read, docs, "kubectl reads the output differently:\n{yaml}");
    let suffix = unique("convert");
    let docs: Vec<Value> = docs
        .into_iter()
        .map(|mut d| {
            let name = format!("{}-{suffix}", d["metadata"]["name"].as_str().unwrap());
            d["metadata"]["name"] = json!(name);
            if let Some(class) = d.pointer_mut("/spec/template/spec/nodeClassRef/name") {
                *class = json!(format!("{}-{suffix}", class.as_str().unwrap()));
            }
            d
        })
        .collect();
    assert_eq!(docs.len(), objects, "{yaml}");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string();
    let out = kubectl(
        cluster,
        &["create", "--dry-run=server", "--validate=strict", "-f", "-"],
        Some(&list),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "Karpenter v1's CRDs refused:\n{stderr}\n{stdout}\n---\n{yaml}"
    );
    assert!(stderr.trim().is_empty(), "warnings: {stderr}");
    assert_eq!(stdout.matches("created (server dry run)").count(), objects, "{stdout}");
}

#[test]
fn karpenter_v1_crds_accept_the_converted_write_ups_and_every_converted_field() {
    let cluster = cluster();
    let crds = v1_crds();
    install_v1_crds(cluster, &crds);

    // The binary, on both write-ups (the second's clusterName Provisioner names its own cluster).
    let fixtures = repo_root().join("tests/fixtures");
    let run = |cluster_name: &str, files: &[&str]| {
        let mut command = Command::new(BIN);
        command.args(["convert", "--cluster-name", cluster_name]);
        for f in files {
            command.arg("-f").arg(fixtures.join(f));
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let first = run(
        "ssungz-cluster",
        &[
            "first-writeup/provisioner.yaml",
            "first-writeup/awsnodetemplate.yaml",
            "first-writeup/nginx-deployment.yaml",
        ],
    );
    accepted(cluster, &first, 2);
    let second = run(
        "ssungz-cluster",
        &[
            "second-writeup/provisioner-selectors.yaml",
            "second-writeup/provisioner-spot-price.yaml",
            "second-writeup/provisioner-instance-types.yaml",
        ],
    );
    accepted(cluster, &second, 6);
    let cluster_name = run("your-cluster-name", &["second-writeup/provisioner-cluster-name.yaml"]);
    accepted(cluster, &cluster_name, 2);

    // Every field, through the library, with the cluster's version known.
    let settings = Settings {
        api: karpenter_rs::apis::ApiSettings::new("ssungz-cluster"),
        kubernetes_version: Some(karpenter_rs::cloudprovider::KubernetesVersion { major: 1, minor: 29 }),
        default_instance_profile: None,
    };
    let sources = [Source {
        name: "kitchen-sink.yaml".into(),
        text: KITCHEN_SINK.into(),
    }];
    let converted = convert::convert(&sources, &settings).unwrap_or_else(|e| panic!("{e}"));
    // 5 classes + the kitchen copy for kitchen-b + the inline class; 7 NodePools.
    accepted(cluster, &converted.yaml, 14);
}

/// The NodePool CRD installed here is the core one; Karpenter's AWS provider installs its own
/// copy, which also restricts `karpenter.k8s.aws` keys. The conversion's list of the keys that
/// copy allows must be the list in that CRD's rule.
#[test]
fn the_aws_label_list_is_the_one_in_the_providers_nodepool_crd() {
    let crd = std::fs::read_to_string(v1_crds().join("aws/karpenter.sh_nodepools.yaml")).unwrap();
    let rule = crd
        .lines()
        .find(|l| l.contains("rule:") && l.contains("karpenter.k8s.aws/instance-category"))
        .expect("the provider's NodePool CRD restricts karpenter.k8s.aws labels");
    let listed = &rule[rule.find('[').unwrap() + 1..rule.find(']').unwrap()];
    let keys: Vec<&str> = listed.split(',').map(|k| k.trim().trim_matches('"')).collect();
    assert_eq!(keys, karpenter_rs::convert::V1_AWS_WELL_KNOWN_LABELS);
}
