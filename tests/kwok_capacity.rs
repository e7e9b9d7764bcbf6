//! The local cluster's stand-ins for what runs on a node.
//!
//! A Node karpenter-rs launched is registered by the kubelet stand-in
//! (tests/cluster/kubelet_standin.py) from its instance's user data, by the AMI's own rules; the
//! tests at the end show that it refuses to join a node whose bootstrap would fail, and that
//! kwok marks a node Ready only after it.
//!
//! A Node with no instance behind it (tests make such Nodes by hand) gets its capacity from
//! kwok's node-initialize stage (written by tests/cluster/kwok_stages.py at up.sh time), which
//! looks the Node's `node.kubernetes.io/instance-type` up in a table of capacity and
//! allocatable. These tests check that table against what karpenter-rs computes for every
//! instance type moto describes, and that kwok reports it on Nodes created with and without a
//! status.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::CloudProvider;
use karpenter_rs::scheduling::{InstanceType, NodeSettings, Resources};
use kube::ResourceExt;
use serde_json::json;
use support::{kubectl, kubectl_ok, unique, wait_for, Cluster};

/// Capacity and allocatable of one instance type, as resource lists.
#[derive(Debug, PartialEq, serde::Deserialize)]
struct Row {
    capacity: BTreeMap<String, String>,
    allocatable: BTreeMap<String, String>,
}

/// target/local-cluster/node-resources.json: the table the kwok stage was generated from.
#[derive(Debug, serde::Deserialize)]
struct Table {
    /// What a Node of an unknown instance type without a status of its own gets.
    default: BTreeMap<String, String>,
    #[serde(rename = "instanceTypes")]
    instance_types: BTreeMap<String, Row>,
}

fn table(cluster: &Cluster) -> Table {
    let path = &cluster.env["LOCAL_CLUSTER_NODE_RESOURCES"];
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

fn strings(list: BTreeMap<String, Quantity>) -> BTreeMap<String, String> {
    list.into_iter().map(|(k, q)| (k, q.0)).collect()
}

fn resources(list: &BTreeMap<String, String>) -> Resources {
    let quantities = list.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect();
    Resources::from_quantities(&quantities).expect("the table holds quantities")
}

#[tokio::test]
async fn kwok_table_holds_what_karpenter_rs_computes_for_every_catalogue_type() {
    let cluster = support::cluster();
    let table = table(cluster);
    let cloud = AwsCloudProvider::new(support::cloud_config(cluster))
        .await
        .expect("building the provider");
    let catalogue = cloud.instance_types().await.expect("describing instance types");
    assert!(catalogue.len() >= 400, "only {} instance types", catalogue.len());

    let mut differences = Vec::new();
    for info in &catalogue {
        // The local cluster advertises pod-eni on trunking-compatible types, as one with security
        // groups for pods does.
        let settings = NodeSettings {
            enable_pod_eni: true,
            ..NodeSettings::default()
        };
        let it = InstanceType::from_facts(&info.facts, vec![], &settings, None);
        let want = Row {
            capacity: strings(it.capacity.to_quantities()),
            allocatable: strings(it.allocatable().to_quantities()),
        };
        match table.instance_types.get(&info.facts.name) {
            None => differences.push(format!("{}: not in the kwok table", info.facts.name)),
            Some(got) if *got != want => differences.push(format!("{}: kwok {got:?}, karpenter-rs {want:?}", info.facts.name)),
            Some(_) => {}
        }
    }
    let names: std::collections::BTreeSet<&str> = catalogue.iter().map(|i| i.facts.name.as_str()).collect();
    differences.extend(
        table
            .instance_types
            .keys()
            .filter(|name| !names.contains(name.as_str()))
            .map(|name| format!("{name}: in the kwok table but not in the catalogue")),
    );
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
    // A t3.large worked by hand from the formulas of `aws@v0.27.0:pkg/providers/instancetype/types.go`,
    // so table and code cannot drift together.
    let t3 = &table.instance_types["t3.large"];
    assert_eq!(
        resources(&t3.allocatable).to_string(),
        "cpu=1830m, memory=6737Mi, pods=35, ephemeral-storage=16Gi"
    );
    assert_eq!(
        resources(&table.default).to_string(),
        "cpu=2, memory=4Gi, pods=110, ephemeral-storage=20Gi"
    );
}

/// A managed Node (no finalizer, nothing else owns it) with these labels and status.
fn node(name: &str, instance_type: Option<&str>, status: Option<serde_json::Value>) -> serde_json::Value {
    let mut labels = json!({"karpenter.sh/provisioner-name": "kwok-capacity"});
    if let Some(t) = instance_type {
        labels["node.kubernetes.io/instance-type"] = json!(t);
    }
    let mut node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}});
    if let Some(status) = status {
        node["status"] = status;
    }
    node
}

fn is_ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

fn reported(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    Resources::from_quantities(list.unwrap_or(&BTreeMap::new())).expect("the API server holds quantities")
}

#[test]
fn kwok_reports_capacity_and_allocatable_from_the_instance_type_label() {
    let cluster = support::cluster();
    let table = table(cluster);
    let stale = json!({"capacity": {"cpu": "1", "memory": "1Gi", "pods": "5"}, "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "5"}});
    let own = json!({"capacity": {"cpu": "3", "memory": "5Gi", "pods": "7"}, "allocatable": {"cpu": "3", "memory": "5Gi", "pods": "7"}});
    let own_list: BTreeMap<String, String> = [("cpu", "3"), ("memory", "5Gi"), ("pods", "7")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let row = |t: &str| {
        let r = &table.instance_types[t];
        (resources(&r.capacity), resources(&r.allocatable))
    };
    // (node, what kwok must report as capacity and allocatable)
    let cases = [
        // What karpenter-rs creates once the kubelet reports capacity: no status at all.
        (node(&unique("kwok-t3-large"), Some("t3.large"), None), row("t3.large")),
        // A status written at creation is replaced by the instance type's, as a kubelet does.
        (node(&unique("kwok-m5-xlarge"), Some("m5.xlarge"), Some(stale)), row("m5.xlarge")),
        // GPUs are reported too, so GPU pods fit.
        (node(&unique("kwok-g4dn"), Some("g4dn.xlarge"), None), row("g4dn.xlarge")),
        // An unknown type without a status gets the small default, not kwok's 1k CPUs.
        (
            node(&unique("kwok-unknown"), Some("x9.unknown"), None),
            (resources(&table.default), resources(&table.default)),
        ),
        // No instance type: a status of its own is kept.
        (
            node(&unique("kwok-unlabelled"), None, Some(own)),
            (resources(&own_list), resources(&own_list)),
        ),
    ];
    assert_eq!(
        row("t3.large").1.to_string(),
        "cpu=1830m, memory=6737Mi, pods=35, ephemeral-storage=16Gi"
    );
    assert_eq!(row("g4dn.xlarge").1.get("nvidia.com/gpu"), 1);

    let names: Vec<String> = cases
        .iter()
        .map(|(n, _)| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (n, _) in &cases {
            kubectl_ok(cluster, &["create", "-f", "-"], Some(&n.to_string()));
        }
        for ((n, (capacity, allocatable)), name) in cases.iter().zip(&names) {
            let labels = &n["metadata"]["labels"];
            wait_for(
                &format!("kwok to make {name} ({labels}) Ready with capacity {capacity} and allocatable {allocatable}"),
                Duration::from_secs(60),
                || {
                    let out = kubectl_ok(cluster, &["get", "node", name, "-o", "json"], None);
                    let node: Node = serde_json::from_str(&out).unwrap();
                    let status = node.status.as_ref()?;
                    let done = is_ready(&node)
                        && reported(status.capacity.as_ref()) == *capacity
                        && reported(status.allocatable.as_ref()) == *allocatable;
                    done.then_some(())
                },
            );
        }
    }));
    if result.is_err() {
        let mut get = vec!["get", "node", "-o", "yaml"];
        get.extend(names.iter().map(String::as_str));
        eprintln!("{}", String::from_utf8_lossy(&kubectl(cluster, &get, None).stdout));
    }
    let mut delete = vec!["delete", "node", "--wait=false", "--ignore-not-found"];
    delete.extend(names.iter().map(String::as_str));
    kubectl(cluster, &delete, None);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A t3.large started in the EC2 emulator with `user_data`, tagged as karpenter-rs's, and its
/// Node (named after the instance's private DNS name, as its kubelet would register it).
/// Returns (node name, instance id).
async fn launch_by_hand(cluster: &Cluster, user_data: &str) -> (String, String) {
    use aws_sdk_ec2::types::{InstanceType as Ec2Type, ResourceType, Tag, TagSpecification};
    use base64::Engine;
    let cloud = AwsCloudProvider::new(support::cloud_config(cluster)).await.unwrap();
    let fixtures = cluster.fixtures();
    let image = fixtures["amis"]["/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"]["image_id"]
        .as_str()
        .expect("the AL2023 fixture image")
        .to_string();
    let subnet = cluster.fixture_subnets()["ap-northeast-2a"].clone();
    let tag = TagSpecification::builder()
        .resource_type(ResourceType::Instance)
        .tags(Tag::builder().key("karpenter.sh/provisioner-name").value("kubelet-standin").build())
        .build();
    let out = cloud
        .ec2()
        .run_instances()
        .image_id(image)
        .instance_type(Ec2Type::T3Large)
        .subnet_id(subnet)
        .min_count(1)
        .max_count(1)
        .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
        .tag_specifications(tag)
        .send()
        .await
        .expect("RunInstances");
    let instance = &out.instances()[0];
    let id = instance.instance_id().unwrap().to_string();
    let name = instance.private_dns_name().unwrap().to_lowercase();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"karpenter.sh/provisioner-name": "kubelet-standin", "node.kubernetes.io/instance-type": "t3.large"}},
        "spec": {"providerID": format!("aws:///ap-northeast-2a/{id}")},
    });
    kubectl_ok(cluster, &["create", "-f", "-"], Some(&node.to_string()));
    (name, id)
}

/// AL2023 user data: one NodeConfig with `endpoint` as the API server's.
fn node_config(endpoint: &str) -> String {
    let cluster = support::CLUSTER_NAME;
    format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: application/node.eks.aws\n\n\
         apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {cluster}\n    apiServerEndpoint: '{endpoint}'\n    \
         certificateAuthority: Q0E=\n    cidr: 10.96.0.0/16\n  kubelet:\n    config:\n      maxPods: 20\n    flags:\n    - --node-labels=team=a\n--//--\n"
    )
}

/// The kubelet stand-in reads the instance's user data as nodeadm would: without the API
/// server's endpoint nodeadm stops ("Apiserver endpoint is missing in cluster configuration")
/// and the node never becomes Ready; with it, the node joins with nodeadm's figures (its
/// `maxPods`, kube-reserved for the ENI table's 35 pods), not karpenter-rs's.
#[tokio::test]
async fn the_kubelet_stand_in_joins_a_node_only_as_its_bootstrap_would() {
    let cluster = support::cluster();
    let cloud = AwsCloudProvider::new(support::cloud_config(cluster)).await.unwrap();
    let (refused, refused_id) = launch_by_hand(cluster, &node_config("")).await;
    let (joined, joined_id) = launch_by_hand(cluster, &node_config("https://127.0.0.1:6443")).await;
    let get = |name: &str| -> Node { serde_json::from_str(&kubectl_ok(cluster, &["get", "node", name, "-o", "json"], None)).unwrap() };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let why = wait_for("the stand-in to refuse the node", Duration::from_secs(60), || {
            get(&refused).annotations().get("kubelet.local-cluster/refused").cloned()
        });
        assert!(why.contains("Apiserver endpoint is missing in cluster configuration"), "{why}");
        let node = wait_for("the other node Ready", Duration::from_secs(60), || {
            let node = get(&joined);
            is_ready(&node).then_some(node)
        });
        assert!(!is_ready(&get(&refused)), "a node whose bootstrap stopped is never Ready");
        assert_eq!(node.annotations()["kubelet.local-cluster/family"], "AL2023");
        let status = node.status.clone().unwrap();
        let capacity = reported(status.capacity.as_ref());
        let allocatable = reported(status.allocatable.as_ref());
        assert_eq!(capacity.get("pods"), 20, "the NodeConfig's maxPods");
        // 8192 MiB less the kernel's 128 + 48; kube-reserved 11 x 35 + 255 = 640Mi (nodeadm reserves
        // for the ENI table's pods, not for maxPods) and eviction 100Mi.
        assert_eq!(capacity.memory_bytes, (8192 - 128 - 48) << 20);
        assert_eq!(allocatable.memory_bytes, (8192 - 128 - 48 - 640 - 100) << 20);
        assert_eq!(allocatable.cpu_millis, 2000 - 70);
        // Only --node-labels' default keys are reconciled on an existing Node: team=a is not set.
        assert!(!node.labels().contains_key("team"), "{:?}", node.labels());
    }));
    for (name, id) in [(&refused, &refused_id), (&joined, &joined_id)] {
        kubectl(cluster, &["delete", "node", name, "--wait=false", "--ignore-not-found"], None);
        let _ = cloud.delete(id).await;
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
