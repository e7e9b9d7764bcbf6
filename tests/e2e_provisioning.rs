//! Provisioning end to end on the local cluster and the EC2 emulator: pending pods → a launched
//! instance → a Node (made Ready by kwok) → the pods Running on it.
//!
//! Termination is not part of provisioning yet, so each test removes its nodes' finalizer and
//! terminates their instances itself when it cleans up.

mod support;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::CloudProvider;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{cluster, fixture, kubectl_ok, unique, AdmissionWebhook, Cluster, Controller};

fn setup() -> (&'static Cluster, &'static Controller) {
    static WEBHOOK: OnceLock<AdmissionWebhook> = OnceLock::new();
    static CONTROLLER: OnceLock<Controller> = OnceLock::new();
    let cluster = cluster();
    WEBHOOK.get_or_init(|| AdmissionWebhook::start(cluster));
    (cluster, CONTROLLER.get_or_init(|| Controller::start(cluster)))
}

fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Deletes the test's nodes (dropping the finalizer no termination controller handles yet) and
/// terminates their instances.
fn clean_up_nodes(cluster: &Cluster, controller: &Controller, provisioner: &str) {
    controller.block_on(async {
        let client = support::client(cluster).await;
        let nodes: Api<Node> = Api::all(client);
        let cloud = AwsCloudProvider::new(support::cloud_config(cluster)).await.unwrap();
        let list = nodes
            .list(&ListParams::default().labels(&format!("karpenter.sh/provisioner-name={provisioner}")))
            .await
            .unwrap();
        for node in list {
            let patch = json!({"metadata": {"finalizers": null}});
            let _ = nodes.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
            let _ = nodes.delete(&node.name_any(), &Default::default()).await;
            if let Some(id) = node
                .spec
                .and_then(|s| s.provider_id)
                .and_then(|p| p.rsplit('/').next().map(str::to_string))
            {
                cloud.delete(&id).await.unwrap();
            }
        }
    });
}

#[test]
fn first_write_up_launches_one_node_and_runs_nginx_on_it() {
    let (cluster, controller) = setup();
    let suffix = unique("fw");
    let (template_name, provisioner_name, namespace) = (format!("lt-{suffix}"), format!("service-{suffix}"), format!("ns-{suffix}"));
    let node_type = format!("service-{suffix}");

    let mut template = fixture("first-writeup/awsnodetemplate.yaml");
    template["metadata"]["name"] = json!(template_name);
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    provisioner["metadata"]["name"] = json!(provisioner_name);
    provisioner["spec"]["providerRef"]["name"] = json!(template_name);
    provisioner["spec"]["labels"]["nodeType"] = json!(node_type);
    let mut deployment = fixture("first-writeup/nginx-deployment.yaml");
    deployment["metadata"]["namespace"] = json!(namespace);
    deployment["spec"]["template"]["spec"]["nodeSelector"]["nodeType"] = json!(node_type);

    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&template.to_string()));
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&provisioner.to_string()));
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&deployment.to_string()));

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let running: Vec<Pod> = wait_for("2 nginx pods Running on a new node", Duration::from_secs(120), || {
            let out = kubectl_ok(cluster, &["get", "pods", "-n", &namespace, "-o", "json"], None);
            let pods: Vec<Pod> = serde_json::from_value(serde_json::from_str::<serde_json::Value>(&out).unwrap()["items"].clone()).unwrap();
            let running: Vec<Pod> = pods
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .collect();
            (running.len() == 2).then_some(running)
        });
        let node_names: Vec<String> = running
            .iter()
            .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
            .collect();
        assert_eq!(node_names[0], node_names[1], "both replicas on one node");
        let node: Node = serde_json::from_str(&kubectl_ok(cluster, &["get", "node", &node_names[0], "-o", "json"], None)).unwrap();
        let labels: BTreeMap<String, String> = node.labels().clone();
        assert_eq!(labels["karpenter.sh/provisioner-name"], provisioner_name);
        assert_eq!(labels["nodeType"], node_type);
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
        assert!(
            ["t3.large", "t3.xlarge"].contains(&labels["node.kubernetes.io/instance-type"].as_str()),
            "{labels:?}"
        );
        assert!(
            ["ap-northeast-2a", "ap-northeast-2c"].contains(&labels["topology.kubernetes.io/zone"].as_str()),
            "{labels:?}"
        );
        let taints = node.spec.as_ref().unwrap().taints.clone().unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "service" && t.value.as_deref() == Some("true") && t.effect == "NoSchedule"),
            "{taints:?}"
        );
        assert_eq!(node.finalizers(), ["karpenter.sh/termination"]);

        // The instance exists in EC2 with our tags.
        let instance_id = node
            .spec
            .as_ref()
            .unwrap()
            .provider_id
            .clone()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        let instance = controller.block_on(async {
            let cloud = AwsCloudProvider::new(support::cloud_config(cluster)).await.unwrap();
            cloud.get(&instance_id).await.unwrap()
        });
        assert_eq!(instance.tags.get("karpenter.sh/provisioner-name"), Some(&provisioner_name));
        assert_eq!(
            instance.tags.get("karpenter.sh/discovery").map(String::as_str),
            Some("ssungz-cluster"),
            "template tags"
        );
        assert_eq!(
            instance.tags.get("kubernetes.io/cluster/ssungz-cluster").map(String::as_str),
            Some("owned")
        );
        assert_eq!(instance.instance_type, labels["node.kubernetes.io/instance-type"]);

        let metrics = controller.metrics.render();
        assert!(
            metrics.contains(&format!(
                "karpenter_nodes_created{{capacity_type=\"on-demand\",instance_type=\"{}\"",
                instance.instance_type
            )),
            "{metrics}"
        );
    }));

    kubectl_ok(cluster, &["delete", "namespace", &namespace, "--wait=false"], None);
    clean_up_nodes(cluster, controller, &provisioner_name);
    kubectl_ok(cluster, &["delete", "provisioner", &provisioner_name, "--wait=false"], None);
    kubectl_ok(cluster, &["delete", "awsnodetemplate", &template_name, "--wait=false"], None);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn pods_no_provisioner_serves_get_an_event_and_launch_nothing() {
    let (cluster, _controller) = setup();
    let namespace = unique("orphan");
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan", "namespace": namespace},
        "spec": {"nodeSelector": {"nodeType": "nobody-serves-this"}, "containers": [{"name": "c", "image": "nginx"}]}
    });
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&pod.to_string()));
    let event = wait_for("a FailedProvisioning event", Duration::from_secs(90), || {
        let out = kubectl_ok(cluster, &["get", "events", "-n", &namespace, "-o", "json"], None);
        let events: serde_json::Value = serde_json::from_str(&out).unwrap();
        events["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["reason"] == "FailedProvisioning")
            .cloned()
    });
    assert_eq!(event["involvedObject"]["name"], "orphan");
    let out = kubectl_ok(cluster, &["get", "nodes", "-l", "nodeType=nobody-serves-this", "-o", "name"], None);
    assert!(out.trim().is_empty(), "no node launched: {out}");
    kubectl_ok(cluster, &["delete", "namespace", &namespace, "--wait=false"], None);
}

/// A Provisioner with its own label, from the first write-up's, plus the template it references.
fn service_provisioner(cluster: &Cluster, suffix: &str, edit: impl FnOnce(&mut serde_json::Value)) -> (String, String, String) {
    let (template_name, provisioner_name, node_type) = (format!("lt-{suffix}"), format!("p-{suffix}"), format!("t-{suffix}"));
    let mut template = fixture("first-writeup/awsnodetemplate.yaml");
    template["metadata"]["name"] = json!(template_name);
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    provisioner["metadata"]["name"] = json!(provisioner_name);
    provisioner["spec"]["providerRef"]["name"] = json!(template_name);
    provisioner["spec"]["labels"]["nodeType"] = json!(node_type);
    edit(&mut provisioner);
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&template.to_string()));
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&provisioner.to_string()));
    (template_name, provisioner_name, node_type)
}

/// A Deployment of `replicas` pods selecting `node_type` and tolerating the service taint.
fn deployment(namespace: &str, node_type: &str, replicas: i64, edit: impl FnOnce(&mut serde_json::Value)) -> serde_json::Value {
    let mut d = fixture("first-writeup/nginx-deployment.yaml");
    d["metadata"]["namespace"] = json!(namespace);
    d["spec"]["replicas"] = json!(replicas);
    d["spec"]["template"]["spec"]["nodeSelector"]["nodeType"] = json!(node_type);
    edit(&mut d);
    d
}

fn our_nodes(cluster: &Cluster, provisioner: &str) -> Vec<Node> {
    let out = kubectl_ok(
        cluster,
        &[
            "get",
            "nodes",
            "-l",
            &format!("karpenter.sh/provisioner-name={provisioner}"),
            "-o",
            "json",
        ],
        None,
    );
    serde_json::from_value(serde_json::from_str::<serde_json::Value>(&out).unwrap()["items"].clone()).unwrap()
}

fn running_pods(cluster: &Cluster, namespace: &str) -> Vec<Pod> {
    let out = kubectl_ok(cluster, &["get", "pods", "-n", namespace, "-o", "json"], None);
    let pods: Vec<Pod> = serde_json::from_value(serde_json::from_str::<serde_json::Value>(&out).unwrap()["items"].clone()).unwrap();
    pods.into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect()
}

fn clean_up(cluster: &Cluster, controller: &Controller, namespace: &str, template: &str, provisioner: &str) {
    kubectl_ok(cluster, &["delete", "namespace", namespace, "--wait=false"], None);
    clean_up_nodes(cluster, controller, provisioner);
    kubectl_ok(cluster, &["delete", "provisioner", provisioner, "--wait=false"], None);
    kubectl_ok(cluster, &["delete", "awsnodetemplate", template, "--wait=false"], None);
}

#[test]
fn zone_spread_launches_a_node_in_each_allowed_zone() {
    let (cluster, controller) = setup();
    let suffix = unique("spread");
    let namespace = format!("ns-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let d = deployment(&namespace, &node_type, 2, |d| {
        d["spec"]["template"]["spec"]["topologySpreadConstraints"] = json!([{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "nginx-karpenter"}}
        }]);
    });
    kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("2 pods Running", Duration::from_secs(120), || {
            (running_pods(cluster, &namespace).len() == 2).then_some(())
        });
        let zones: std::collections::BTreeSet<String> = our_nodes(cluster, &provisioner)
            .iter()
            .map(|n| n.labels()["topology.kubernetes.io/zone"].clone())
            .collect();
        assert_eq!(
            zones,
            ["ap-northeast-2a".to_string(), "ap-northeast-2c".to_string()].into(),
            "one node per allowed zone"
        );
    }));
    clean_up(cluster, controller, &namespace, &template, &provisioner);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
