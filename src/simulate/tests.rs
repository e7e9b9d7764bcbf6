//! Scenarios of `simulate`, pure: manifests and the shipped catalogue in, report out.

use super::catalogue::{Snapshot, SHIPPED};
use super::manifests::{Manifests, Source};
use super::*;
use crate::apis::ApiSettings;

fn source(name: &str, text: &str) -> Source {
    Source {
        name: name.into(),
        text: text.into(),
    }
}

fn first_writeup() -> Vec<Source> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/first-writeup/");
    ["provisioner.yaml", "awsnodetemplate.yaml", "nginx-deployment.yaml"]
        .iter()
        .map(|f| source(f, &std::fs::read_to_string(format!("{dir}{f}")).unwrap()))
        .collect()
}

fn settings() -> ApiSettings {
    ApiSettings::new("ssungz-cluster")
}

fn options() -> Options {
    Options {
        cluster_name: "ssungz-cluster".into(),
        kubernetes_version: KubernetesVersion { major: 1, minor: 33 },
        node_settings: NodeSettings::default(),
        catalogue_kind: "snapshot".into(),
    }
}

fn run(sources: &[Source]) -> Report {
    let manifests = Manifests::read(sources, &settings()).unwrap();
    let region = implied_region(&manifests.provisioners).unwrap_or_else(|| DEFAULT_REGION.into());
    let catalogue = Snapshot::parse(SHIPPED).unwrap().catalogue(&region, None).unwrap();
    simulate(&manifests, &catalogue, &options())
}

#[test]
fn the_first_writeup_launches_one_t3_large_for_both_nginx_pods() {
    let report = run(&first_writeup());
    assert_eq!(report.region, "ap-northeast-2");
    assert_eq!(report.nodes.len(), 1, "{report:#?}");
    let node = &report.nodes[0];
    assert_eq!(node.provisioner, "service");
    assert_eq!(node.instance_types, ["t3.large", "t3.xlarge"]);
    assert_eq!(node.zones, ["ap-northeast-2a", "ap-northeast-2c"]);
    assert_eq!(node.capacity_types, ["on-demand"]);
    let cheapest = node.cheapest.as_ref().unwrap();
    assert_eq!(
        (cheapest.instance_type.as_str(), cheapest.capacity_type.as_str()),
        ("t3.large", "on-demand")
    );
    assert_eq!(node.pods, ["default/nginx-karpenter-0", "default/nginx-karpenter-1"]);
    assert_eq!(report.total.price_per_hour, cheapest.price_per_hour);
    assert!((report.total.price_per_month - cheapest.price_per_hour * 730.0).abs() < 1e-6);
    assert!(report.pods.iter().all(|p| p.new_node == Some(1)));
    assert!(report.unschedulable.is_empty() && report.warnings.is_empty(), "{report:#?}");
    assert!(report.notes[0].contains("not resolved by simulate"));
    let table = report.table();
    assert!(table.contains("t3.large, t3.xlarge"), "{table}");
    assert!(table.contains("default/nginx-karpenter-1  new node #1 (t3.large)"), "{table}");
}

#[test]
fn an_invalid_provisioner_gets_the_webhooks_denial() {
    use crate::webhook::admission::{review, Endpoint};
    let provisioner = r#"
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: bad}
spec:
  ttlSecondsAfterEmpty: -1
  requirements:
    - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, reserved]}
"#;
    let err = Manifests::read(&[source("p.yaml", provisioner)], &settings())
        .unwrap_err()
        .to_string();
    // The webhook validates what its defaults made of the object.
    let value: serde_json::Value = serde_yaml_ng::from_str(provisioner).unwrap();
    let mut defaulted: crate::apis::v1alpha5::Provisioner = serde_json::from_value(value).unwrap();
    crate::apis::v1alpha5::defaults::set_defaults(&mut defaulted.spec, &settings());
    let body = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"},
                    "operation": "CREATE", "name": "bad", "object": defaulted}
    });
    let outcome = review(Endpoint::Validate, body.to_string().as_bytes(), &settings());
    let denial = outcome.reason.expect("the webhook denies it");
    assert_eq!(err, format!("p.yaml (document 1): {denial}"));
    assert!(err.contains("spec.ttlSecondsAfterEmpty") && err.contains("-1"), "{err}");
}

/// The webhook's denial of `object`, sent as the API server sends it (with its name).
fn webhook_denial(
    endpoint: crate::webhook::admission::Endpoint,
    group: &str,
    version: &str,
    kind: &str,
    object: serde_json::Value,
) -> String {
    let name = object.pointer("/metadata/name").cloned().unwrap_or_default();
    let body = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": group, "version": version, "kind": kind},
                    "operation": "CREATE", "name": name, "object": object}
    });
    crate::webhook::admission::review(endpoint, body.to_string().as_bytes(), &settings())
        .reason
        .expect("the webhook denies it")
}

#[test]
fn an_unreadable_field_and_an_invalid_template_get_the_webhooks_denials() {
    use crate::webhook::admission::Endpoint;
    let provisioner = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec: {ttlSecondsAfterEmpty: soon}\n";
    let err = Manifests::read(&[source("a.yaml", provisioner)], &settings())
        .unwrap_err()
        .to_string();
    let value: serde_json::Value = serde_yaml_ng::from_str(provisioner).unwrap();
    let denial = webhook_denial(Endpoint::Mutate, "karpenter.sh", "v1alpha5", "Provisioner", value);
    assert_eq!(err, format!("a.yaml (document 1): {denial}"));
    assert!(err.contains("spec.ttlSecondsAfterEmpty") && err.contains("soon"), "{err}");

    let template = "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: t}\nspec:\n  amiFamily: Windows\n  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n";
    let text = format!(
        "---\n{provisioner_ok}---\n{template}",
        provisioner_ok = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: ok}\nspec: {providerRef: {name: t}}\n"
    );
    let err = Manifests::read(&[source("b.yaml", &text)], &settings()).unwrap_err().to_string();
    let value: serde_json::Value = serde_yaml_ng::from_str(template).unwrap();
    let denial = webhook_denial(Endpoint::Validate, "karpenter.k8s.aws", "v1alpha1", "AWSNodeTemplate", value);
    assert_eq!(err, format!("b.yaml (document 2): {denial}"));
    assert!(err.contains("amiFamily") && err.contains("Windows"), "{err}");
}

const PROVISIONER: &str = r#"
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: default}
spec:
  requirements:
    - {key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}
  provider:
    subnetSelector: {karpenter.sh/discovery: c}
    securityGroupSelector: {karpenter.sh/discovery: c}
"#;

fn pod_template(cpu: &str) -> String {
    format!(
        "metadata: {{labels: {{app: x}}}}\n    spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]}}"
    )
}

#[test]
fn workloads_are_expanded_into_pending_pods() {
    let t = pod_template("100m");
    let workloads = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  replicas: 3
  template:
    {t}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db}}
spec:
  replicas: 2
  template:
    {t}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: rs}}
spec:
  template:
    {t}
---
apiVersion: v1
kind: List
items:
  - apiVersion: batch/v1
    kind: Job
    metadata: {{name: batch}}
    spec:
      parallelism: 4
      completions: 2
      template:
        metadata: {{labels: {{app: job}}}}
        spec: {{containers: [{{name: c, image: i}}], restartPolicy: Never}}
  - apiVersion: batch/v1
    kind: Job
    metadata: {{name: wide}}
    spec:
      parallelism: 3
      template:
        spec: {{containers: [{{name: c, image: i}}], restartPolicy: Never}}
---
apiVersion: v1
kind: Pod
metadata: {{name: bare}}
spec: {{containers: [{{name: c, image: i}}]}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: "1"}}}}}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
"#
    );
    let manifests = Manifests::read(&[source("p.yaml", PROVISIONER), source("w.yaml", &workloads)], &settings()).unwrap();
    let names: Vec<String> = manifests.pending.iter().map(|p| PodKey::of(p).to_string()).collect();
    assert_eq!(
        names,
        [
            "shop/web-0",
            "shop/web-1",
            "shop/web-2",
            "default/db-0",
            "default/db-1",
            "default/rs-0",
            "default/batch-0",
            "default/batch-1",
            "default/wide-0",
            "default/wide-1",
            "default/wide-2",
            "default/bare"
        ]
    );
    assert_eq!(manifests.pending[0].metadata.labels.as_ref().unwrap()["app"], "x");
    assert_eq!(manifests.daemonsets.len(), 1);
    assert_eq!(manifests.warnings.len(), 1, "{:?}", manifests.warnings);
    assert!(manifests.warnings[0].contains("Service \"web\""), "{:?}", manifests.warnings);

    let catalogue = Snapshot::parse(SHIPPED).unwrap().catalogue("us-west-2", None).unwrap();
    let report = simulate(&manifests, &catalogue, &options());
    assert_eq!(report.region, "us-west-2");
    assert!(report.pods.iter().all(|p| p.new_node.is_some()), "{report:#?}");
    assert!(report.nodes.iter().all(|n| n.zones == ["us-west-2a"]));
    // The DaemonSet's 1 CPU is overhead of every new node: none is smaller than 2 vCPUs.
    let cheapest = &report.nodes[0].cheapest.as_ref().unwrap().instance_type;
    let it = catalogue.types.iter().find(|t| t.facts.name == *cheapest).unwrap();
    assert!(it.facts.vcpus >= 2, "{cheapest}");
}

#[test]
fn an_unplaceable_pod_is_listed_with_the_simulations_reason() {
    let huge = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: huge}}\nspec:\n  template:\n    {}\n",
        pod_template("10000")
    );
    let report = run(&[source("p.yaml", PROVISIONER), source("w.yaml", &huge)]);
    assert!(report.nodes.is_empty());
    assert_eq!(report.unschedulable.len(), 1, "{report:#?}");
    let u = &report.unschedulable[0];
    assert_eq!(u.pod, "default/huge-0");
    assert!(!u.reason.is_empty());
    assert_eq!(report.pods[0].unplaced.as_deref(), Some(u.reason.as_str()));
    let table = report.table();
    assert!(table.contains(&format!("default/huge-0: {}", u.reason)), "{table}");
    // No node costs nothing, never "$-0.0000" (the sum of no floats is -0.0).
    assert!(table.contains("TOTAL 0 nodes: $0.0000/hour, $0.00/month"), "{table}");
}

#[test]
fn existing_nodes_are_filled_first() {
    let node = r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-0-1
  labels: {topology.kubernetes.io/zone: us-west-2a, kubernetes.io/arch: amd64, kubernetes.io/os: linux}
status:
  allocatable: {cpu: "2", memory: 4Gi, pods: "20"}
  capacity: {cpu: "2", memory: 4Gi, pods: "20"}
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: kube-system}
spec: {nodeName: ip-10-0-0-1, containers: [{name: c, image: i, resources: {requests: {cpu: 1500m}}}]}
"#;
    let work = |replicas: i32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: w}}\nspec:\n  replicas: {replicas}\n  template:\n    {}\n",
            pod_template("400m")
        )
    };
    let report = run(&[source("p.yaml", PROVISIONER), source("w.yaml", &work(2)), source("n.yaml", node)]);
    assert_eq!(report.pods[0].existing_node.as_deref(), Some("ip-10-0-0-1"), "{report:#?}");
    assert_eq!(report.pods[1].new_node, Some(1), "500m left on the node: one pod fits");
    let table = report.table();
    assert!(table.contains("existing node ip-10-0-0-1"), "{table}");
}

#[test]
fn a_thousand_pods_are_simulated() {
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: many}}\nspec:\n  replicas: 1000\n  template:\n    {}\n",
        pod_template("250m")
    );
    let report = run(&[source("p.yaml", PROVISIONER), source("w.yaml", &deployment)]);
    assert_eq!(report.pods.len(), 1000);
    assert!(report.pods.iter().all(|p| p.new_node.is_some()));
    let placed: usize = report.nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(placed, 1000);
    assert!(report.total.price_per_hour > 0.0);
}

#[test]
fn the_region_follows_the_provisioners_zones() {
    let manifests = Manifests::read(&[source("p.yaml", PROVISIONER)], &settings()).unwrap();
    assert_eq!(implied_region(&manifests.provisioners).as_deref(), Some("us-west-2"));
    let manifests = Manifests::read(&first_writeup(), &settings()).unwrap();
    assert_eq!(implied_region(&manifests.provisioners).as_deref(), Some("ap-northeast-2"));
}

#[test]
fn a_provisioner_without_its_template_and_pods_of_unknown_nodes_are_warned_about() {
    let provisioner =
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: lonely}\nspec: {providerRef: {name: missing}}\n";
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: elsewhere}\nspec: {nodeName: gone, containers: [{name: c, image: i}]}\n";
    let work = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: w}}\nspec:\n  template:\n    {}\n",
        pod_template("1")
    );
    let report = run(&[source("p.yaml", provisioner), source("pod.yaml", pod), source("w.yaml", &work)]);
    assert!(report.nodes.is_empty());
    assert_eq!(report.unschedulable.len(), 1, "{report:#?}");
    let warnings = report.warnings.join("\n");
    assert!(
        warnings.contains("Provisioner \"lonely\" cannot launch nodes: AWSNodeTemplate \"missing\""),
        "{warnings}"
    );
    assert!(warnings.contains("bound to node gone"), "{warnings}");
}
