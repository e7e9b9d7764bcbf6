//! Provisioning end to end on the local cluster and the EC2 emulator: pending pods → a launched
//! instance → a Node (made Ready by kwok) → the pods Running on it.
//!
//! Termination is not part of provisioning yet, so each test removes its nodes' finalizer and
//! terminates their instances itself when it cleans up.

mod support;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::CloudProvider;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{cluster, fixture, kubectl, kubectl_ok, unique, wait_for, AdmissionWebhook, Cluster, Controller};

fn setup() -> (&'static Cluster, &'static Controller) {
    static WEBHOOK: OnceLock<AdmissionWebhook> = OnceLock::new();
    static CONTROLLER: OnceLock<Controller> = OnceLock::new();
    let cluster = cluster();
    WEBHOOK.get_or_init(|| AdmissionWebhook::start(cluster));
    (cluster, CONTROLLER.get_or_init(|| Controller::start(cluster)))
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
        // The API server says 1.33 and the template names no amiFamily: the node boots AL2023.
        let seeded = cluster.fixtures();
        let al2023 = "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id";
        assert_eq!(instance.image_id.as_deref(), seeded["amis"][al2023]["image_id"].as_str());

        let metrics = controller.metrics.render();
        assert!(
            metrics.contains(&format!(
                "karpenter_nodes_created{{capacity_type=\"on-demand\",instance_type=\"{}\"",
                instance.instance_type
            )),
            "{metrics}"
        );
        assert!(metrics.contains("karpenter_provisioner_batch_duration_seconds_count"), "{metrics}");
        let pod_state = "karpenter_pods_state{arch=\"amd64\",capacity_type=\"on-demand\"";
        wait_for("the pods in karpenter_pods_state", Duration::from_secs(30), || {
            let metrics = controller.metrics.render();
            metrics
                .lines()
                .any(|l| l.starts_with(pod_state) && l.contains(&format!("namespace=\"{namespace}\"")) && l.contains("phase=\"Running\""))
                .then_some(())
        });

        // The price the offering was chosen at is on the Node, for the viewer and the metrics.
        let annotations = node.annotations();
        let price: f64 = annotations
            .get("karpenter-rs.io/price-per-hour")
            .unwrap_or_else(|| panic!("no price: {annotations:?}"))
            .parse()
            .unwrap();
        assert!(price > 0.0, "{annotations:?}");
        assert_eq!(annotations["karpenter-rs.io/priced-capacity-type"], "on-demand");
        assert_eq!(annotations["karpenter-rs.io/priced-zone"], labels["topology.kubernetes.io/zone"]);

        // Karpenter's node gauges, with its label names, for this node and its two pods.
        let node_name = node_names[0].as_str();
        let this_node = [("node_name", node_name), ("provisioner", provisioner_name.as_str())];
        let with = |extra: &[(&'static str, &'static str)]| this_node.iter().chain(extra).copied().collect::<Vec<_>>();
        wait_for("the node's gauges", Duration::from_secs(30), || {
            let m = controller.metrics.render();
            let pods = sample(&m, "karpenter_nodes_total_pod_requests", &with(&[("resource_type", "pods")]))?;
            (pods == 2.0).then_some(())
        });
        let m = controller.metrics.render();
        let cpu = sample(
            &m,
            "karpenter_nodes_allocatable",
            &with(&[("resource_type", "cpu"), ("arch", "amd64"), ("capacity_type", "on-demand")]),
        );
        assert!(cpu.is_some_and(|c| c > 1.0), "{m}");
        for gauge in [
            "karpenter_nodes_total_pod_limits",
            "karpenter_nodes_total_daemon_requests",
            "karpenter_nodes_total_daemon_limits",
            "karpenter_nodes_system_overhead",
        ] {
            assert!(sample(&m, gauge, &with(&[("resource_type", "memory")])).is_some(), "{gauge}: {m}");
        }
        let zone = labels["topology.kubernetes.io/zone"].as_str();
        assert_eq!(
            sample(&m, "karpenter_rs_node_price_per_hour", &[("node_name", node_name), ("zone", zone)]),
            Some(price),
            "{m}"
        );
        let estimate = sample(
            &m,
            "karpenter_cloudprovider_instance_type_price_estimate",
            &[
                ("instance_type", instance.instance_type.as_str()),
                ("capacity_type", "on-demand"),
                ("zone", ""),
            ],
        );
        assert_eq!(estimate, Some(price), "the price it launched at is the catalogue's: {m}");
        assert!(
            sample(
                &m,
                "karpenter_cloudprovider_instance_type_cpu_cores",
                &[("instance_type", "t3.large")]
            ) == Some(2.0),
            "{m}"
        );
        assert!(sample(&m, "karpenter_provisioner_scheduling_simulation_duration_seconds_count", &[]).is_some_and(|c| c >= 1.0));
        assert!(sample(
            &m,
            "controller_runtime_reconcile_total",
            &[("controller", "provisioner"), ("result", "success")]
        )
        .is_some());
        wait_for("both pods' startup times", Duration::from_secs(30), || {
            let m = controller.metrics.render();
            (sample(&m, "karpenter_pods_startup_time_seconds_count", &[])? >= 2.0).then_some(())
        });
    }));

    kubectl_ok(cluster, &["delete", "namespace", &namespace, "--wait=false"], None);
    clean_up_nodes(cluster, controller, &provisioner_name);
    kubectl_ok(cluster, &["delete", "provisioner", &provisioner_name, "--wait=false"], None);
    kubectl_ok(cluster, &["delete", "awsnodetemplate", &template_name, "--wait=false"], None);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    // A deleted node's series go with it.
    let provisioner_label = format!("provisioner=\"{provisioner_name}\"");
    wait_for("the deleted node's series gone", Duration::from_secs(60), || {
        let m = controller.metrics.render();
        let node_series = |l: &&str| {
            [
                "karpenter_nodes_allocatable{",
                "karpenter_nodes_total_",
                "karpenter_nodes_system_overhead{",
                "karpenter_rs_node_price_per_hour{",
            ]
            .iter()
            .any(|g| l.starts_with(g))
        };
        (!m.lines().filter(node_series).any(|l| l.contains(&provisioner_label))).then_some(())
    });
}

/// The value of the first sample of `name` whose labels include every `(label, value)` pair.
fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(r) => r.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        labels
            .iter()
            .all(|(k, v)| label_text.split(',').any(|pair| pair == format!("{k}=\"{v}\"")))
            .then(|| value.trim().parse().ok())?
    })
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

/// Runs `body`, then cleans up the namespace, nodes, Provisioners and templates; re-raises a
/// failure of `body`.
fn with_clean_up(cluster: &Cluster, controller: &Controller, namespace: &str, created: &[(String, String)], body: impl FnOnce()) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    kubectl_ok(cluster, &["delete", "namespace", namespace, "--wait=false"], None);
    for (template, provisioner) in created {
        clean_up_nodes(cluster, controller, provisioner);
        kubectl_ok(cluster, &["delete", "provisioner", provisioner, "--wait=false"], None);
        kubectl_ok(
            cluster,
            &["delete", "awsnodetemplate", template, "--wait=false", "--ignore-not-found"],
            None,
        );
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn set_requirement(provisioner: &mut serde_json::Value, key: &str, values: &[&str]) {
    let requirements = provisioner["spec"]["requirements"].as_array_mut().unwrap();
    requirements.retain(|r| r["key"] != key);
    requirements.push(json!({"key": key, "operator": "In", "values": values}));
}

fn events(cluster: &Cluster, namespace: &str, reason: &str) -> Vec<serde_json::Value> {
    let selector = format!("reason={reason}");
    let out = kubectl_ok(
        cluster,
        &["get", "events", "-n", namespace, "--field-selector", &selector, "-o", "json"],
        None,
    );
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn the_heavier_provisioner_wins_when_both_fit() {
    let (cluster, controller) = setup();
    let suffix = unique("weights");
    let namespace = format!("ns-{suffix}");
    let shared = format!("t-{suffix}");
    let (light_t, light, _) = service_provisioner(cluster, &format!("{suffix}-light"), |p| {
        p["spec"]["labels"]["nodeType"] = json!(shared);
        p["spec"]["weight"] = json!(10);
        set_requirement(p, "node.kubernetes.io/instance-type", &["t3.large"]);
    });
    let (heavy_t, heavy, _) = service_provisioner(cluster, &format!("{suffix}-heavy"), |p| {
        p["spec"]["labels"]["nodeType"] = json!(shared);
        p["spec"]["weight"] = json!(50);
        set_requirement(p, "node.kubernetes.io/instance-type", &["t3.xlarge"]);
    });
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let created = [(light_t, light.clone()), (heavy_t, heavy.clone())];
    with_clean_up(cluster, controller, &namespace, &created, || {
        kubectl_ok(
            cluster,
            &["apply", "-f", "-"],
            Some(&deployment(&namespace, &shared, 1, |_| {}).to_string()),
        );
        wait_for("the pod Running", Duration::from_secs(120), || {
            (running_pods(cluster, &namespace).len() == 1).then_some(())
        });
        let nodes = our_nodes(cluster, &heavy);
        assert_eq!(nodes.len(), 1, "the weight-50 Provisioner launched the node");
        assert_eq!(nodes[0].labels()["node.kubernetes.io/instance-type"], "t3.xlarge");
        assert!(our_nodes(cluster, &light).is_empty(), "the weight-10 Provisioner launched nothing");
    });
}

#[test]
fn arm64_and_amd64_pods_get_nodes_of_their_architecture() {
    let (cluster, controller) = setup();
    let suffix = unique("arch");
    let namespace = format!("ns-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |p| {
        set_requirement(p, "node.kubernetes.io/instance-type", &["t3.large", "t4g.large"]);
        set_requirement(p, "kubernetes.io/arch", &["amd64", "arm64"]);
    });
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        for arch in ["arm64", "amd64"] {
            let d = deployment(&namespace, &node_type, 1, |d| {
                d["metadata"]["name"] = json!(format!("web-{arch}"));
                d["spec"]["selector"]["matchLabels"]["app"] = json!(format!("web-{arch}"));
                d["spec"]["template"]["metadata"]["labels"]["app"] = json!(format!("web-{arch}"));
                d["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"] = json!(arch);
            });
            kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
        }
        let pods = wait_for("both pods Running", Duration::from_secs(120), || {
            let pods = running_pods(cluster, &namespace);
            (pods.len() == 2).then_some(pods)
        });
        let nodes = our_nodes(cluster, &provisioner);
        for pod in &pods {
            let want = &pod.spec.as_ref().unwrap().node_selector.as_ref().unwrap()["kubernetes.io/arch"];
            let node_name = pod.spec.as_ref().unwrap().node_name.as_ref().unwrap();
            let node = nodes.iter().find(|n| n.name_any() == *node_name).expect("the pod runs on our node");
            assert_eq!(&node.labels()["kubernetes.io/arch"], want);
            let expected_type = if want == "arm64" { "t4g.large" } else { "t3.large" };
            assert_eq!(node.labels()["node.kubernetes.io/instance-type"], expected_type);
        }
    });
}

#[test]
fn spot_capacity_is_launched_as_spot_and_capped_by_spot_price() {
    let (cluster, controller) = setup();
    let suffix = unique("spot");
    let namespace = format!("ns-{suffix}");
    let template = fixture("first-writeup/awsnodetemplate.yaml");
    // Inline providers: spotPrice belongs to `spec.provider`.
    let inline = |spot_price: &'static str| {
        let mut provider = template["spec"].clone();
        provider["spotPrice"] = json!(spot_price);
        move |p: &mut serde_json::Value| {
            set_requirement(p, "karpenter.sh/capacity-type", &["spot"]);
            let spec = p["spec"].as_object_mut().unwrap();
            spec.remove("providerRef");
            spec.insert("provider".into(), provider);
        }
    };
    let (t1, generous, generous_type) = service_provisioner(cluster, &format!("{suffix}-ok"), inline("5.00"));
    // The emulator prices t3 spot capacity at $0.00001/h; this cap is below that.
    let (t2, stingy, stingy_type) = service_provisioner(cluster, &format!("{suffix}-cap"), inline("0.000001"));
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let created = [(t1, generous.clone()), (t2, stingy.clone())];
    with_clean_up(cluster, controller, &namespace, &created, || {
        kubectl_ok(
            cluster,
            &["apply", "-f", "-"],
            Some(&deployment(&namespace, &generous_type, 1, |_| {}).to_string()),
        );
        let capped = deployment(&namespace, &stingy_type, 1, |d| d["metadata"]["name"] = json!("capped"));
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&capped.to_string()));
        wait_for("the spot pod Running", Duration::from_secs(120), || {
            (running_pods(cluster, &namespace).len() == 1).then_some(())
        });
        let nodes = our_nodes(cluster, &generous);
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].labels()["karpenter.sh/capacity-type"], "spot");
        let id = nodes[0].spec.as_ref().unwrap().provider_id.clone().unwrap();
        let instance = controller.block_on(async {
            let cloud = AwsCloudProvider::new(support::cloud_config(cluster)).await.unwrap();
            cloud.get(id.rsplit('/').next().unwrap()).await.unwrap()
        });
        assert_eq!(instance.capacity_type, "spot", "EC2 runs it as a spot instance");

        // spotPrice below every spot price: the pod waits with an event naming it, nothing runs.
        wait_for("a FailedProvisioning event naming spotPrice", Duration::from_secs(90), || {
            events(cluster, &namespace, "FailedProvisioning")
                .iter()
                .any(|e| e["message"].as_str().unwrap_or_default().contains("spotPrice"))
                .then_some(())
        });
        assert!(our_nodes(cluster, &stingy).is_empty(), "no node above spotPrice");
    });
}

#[test]
fn a_gpu_request_gets_a_gpu_instance_type() {
    let (cluster, controller) = setup();
    let suffix = unique("gpu");
    let namespace = format!("ns-{suffix}");
    // Any GPU family: without an instance-type requirement the defaults would allow only c, m, r.
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |p| {
        let requirements = p["spec"]["requirements"].as_array_mut().unwrap();
        requirements.retain(|r| r["key"] != "node.kubernetes.io/instance-type");
        set_requirement(p, "karpenter.k8s.aws/instance-category", &["g", "p"]);
    });
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        let d = deployment(&namespace, &node_type, 1, |d| {
            d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"limits": {"nvidia.com/gpu": "1"}});
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
        wait_for("the GPU pod Running", Duration::from_secs(120), || {
            (running_pods(cluster, &namespace).len() == 1).then_some(())
        });
        let nodes = our_nodes(cluster, &provisioner);
        assert_eq!(nodes.len(), 1);
        let labels = nodes[0].labels();
        let gpus: u32 = labels
            .get("karpenter.k8s.aws/instance-gpu-count")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        assert!(gpus >= 1, "a GPU instance type: {labels:?}");
        let allocatable = nodes[0].status.as_ref().unwrap().allocatable.clone().unwrap_or_default();
        assert!(allocatable.contains_key("nvidia.com/gpu"), "{allocatable:?}");
    });
}

/// A pod requesting `vpc.amazonaws.com/pod-eni` (security groups for pods) gets a
/// trunking-compatible type: of t3.large (which cannot trunk) and m5.large, the dearer m5.large.
#[test]
fn a_pod_eni_request_gets_a_trunking_compatible_instance_type() {
    let (cluster, controller) = setup();
    let suffix = unique("podeni");
    let namespace = format!("ns-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |p| {
        set_requirement(p, "node.kubernetes.io/instance-type", &["t3.large", "m5.large"]);
    });
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        let d = deployment(&namespace, &node_type, 1, |d| {
            d["spec"]["template"]["spec"]["containers"][0]["resources"] =
                json!({"requests": {"vpc.amazonaws.com/pod-eni": "1"}, "limits": {"vpc.amazonaws.com/pod-eni": "1"}});
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
        wait_for("the pod-eni pod Running", Duration::from_secs(120), || {
            (running_pods(cluster, &namespace).len() == 1).then_some(())
        });
        let nodes = our_nodes(cluster, &provisioner);
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].labels()["node.kubernetes.io/instance-type"], "m5.large");
        let allocatable = nodes[0].status.as_ref().unwrap().allocatable.clone().unwrap_or_default();
        assert_eq!(allocatable["vpc.amazonaws.com/pod-eni"].0, "9", "{allocatable:?}");
    });
}

#[test]
fn limits_stop_provisioning_with_an_event_and_status_reports_usage() {
    let (cluster, controller) = setup();
    let suffix = unique("limits");
    let namespace = format!("ns-{suffix}");
    // t3.large has 2 vCPUs: one node fits under 3 CPUs, a second would not.
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |p| {
        set_requirement(p, "node.kubernetes.io/instance-type", &["t3.large"]);
        p["spec"]["limits"] = json!({"resources": {"cpu": "3"}});
    });
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        let d = deployment(&namespace, &node_type, 2, |d| {
            d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1500m"}});
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
        // At least one, then exactly one with what is where: two Running means two nodes (the
        // limit broken) or two pods bound to one node that has room for one (an overcommit).
        let running = wait_for("a pod Running", Duration::from_secs(120), || {
            let running = running_pods(cluster, &namespace);
            (!running.is_empty()).then_some(running)
        });
        let placed: Vec<String> = running
            .iter()
            .map(|p| format!("{} on {:?}", p.name_any(), p.spec.as_ref().and_then(|s| s.node_name.clone())))
            .collect();
        let nodes: Vec<String> = our_nodes(cluster, &provisioner).iter().map(|n| n.name_any()).collect();
        assert_eq!(running.len(), 1, "one pod Running; Running: {placed:?}, nodes: {nodes:?}");
        let event = wait_for("a FailedProvisioning event naming the limits", Duration::from_secs(90), || {
            events(cluster, &namespace, "FailedProvisioning")
                .into_iter()
                .find(|e| e["message"].as_str().unwrap_or_default().contains("exceed provisioner limits"))
        });
        let message = event["message"].as_str().unwrap();
        assert!(
            message.contains(&provisioner),
            "the reason names the limited Provisioner: {message}"
        );
        wait_for("a ProvisionerLimitsReached event", Duration::from_secs(60), || {
            let out = kubectl_ok(
                cluster,
                &[
                    "get",
                    "events",
                    "-A",
                    "--field-selector",
                    &format!("involvedObject.name={provisioner},reason=ProvisionerLimitsReached"),
                    "-o",
                    "name",
                ],
                None,
            );
            (!out.trim().is_empty()).then_some(())
        });
        assert_eq!(our_nodes(cluster, &provisioner).len(), 1, "the limit holds");
        let running: Vec<String> = running_pods(cluster, &namespace)
            .iter()
            .map(|p| format!("{} on {:?}", p.name_any(), p.spec.as_ref().and_then(|s| s.node_name.clone())))
            .collect();
        assert_eq!(running.len(), 1, "the second pod stays Pending: {running:?}");
        let status = wait_for("status.resources", Duration::from_secs(60), || {
            let out = kubectl_ok(cluster, &["get", "provisioner", &provisioner, "-o", "json"], None);
            let p: serde_json::Value = serde_json::from_str(&out).unwrap();
            p["status"]["resources"]["cpu"].as_str().map(str::to_string)
        });
        assert_eq!(status, "2", "status.resources reports the node's 2 CPUs");
        let metrics = controller.metrics.render();
        let usage = format!("karpenter_provisioner_usage_pct{{provisioner=\"{provisioner}\",resource_type=\"cpu\"}}");
        assert!(metrics.contains(&usage), "{usage} in\n{metrics}");
    });
}

#[test]
fn a_burst_of_200_pods_gets_a_few_well_packed_nodes() {
    let (cluster, controller) = setup();
    let suffix = unique("burst");
    let namespace = format!("ns-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        let d = deployment(&namespace, &node_type, 200, |d| {
            d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "100m", "memory": "128Mi"}});
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
        wait_for("200 pods Running", Duration::from_secs(300), || {
            (running_pods(cluster, &namespace).len() == 200).then_some(())
        });
        let nodes = our_nodes(cluster, &provisioner);
        // A lower bound: the fewest nodes of the largest allowed type (t3.xlarge: 4 vCPUs, ENI
        // limit 58 pods) that hold 200 pods by CPU and by pod count.
        let allocatable_cpu_millis: f64 = 3_920.0;
        let by_cpu = (200.0 * 100.0 / allocatable_cpu_millis).ceil() as usize;
        let by_pods = 200_usize.div_ceil(58);
        let bound = by_cpu.max(by_pods);
        assert!(
            nodes.len() <= bound + 1,
            "{} nodes for 200 pods, lower bound {bound}: {:?}",
            nodes.len(),
            nodes
                .iter()
                .map(|n| n.labels()["node.kubernetes.io/instance-type"].clone())
                .collect::<Vec<_>>()
        );
    });
}

#[test]
fn a_pod_too_big_for_every_instance_type_gets_events_and_launches_nothing() {
    let (cluster, controller) = setup();
    let suffix = unique("toobig");
    let namespace = format!("ns-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        let d = deployment(&namespace, &node_type, 1, |d| {
            d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "64"}});
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
        let event = wait_for("a FailedProvisioning event", Duration::from_secs(90), || {
            events(cluster, &namespace, "FailedProvisioning").into_iter().next()
        });
        let message = event["message"].as_str().unwrap_or_default();
        assert!(message.contains("no instance type has room"), "{message}");
        assert!(message.contains(&provisioner), "{message}");
        wait_for("a NoInstanceTypeFits event on the Provisioner", Duration::from_secs(60), || {
            let selector = format!("involvedObject.name={provisioner},reason=NoInstanceTypeFits");
            let out = kubectl_ok(cluster, &["get", "events", "-A", "--field-selector", &selector, "-o", "name"], None);
            (!out.trim().is_empty()).then_some(())
        });
        assert!(our_nodes(cluster, &provisioner).is_empty(), "nothing launched");
        // And the metric says so, by Provisioner and reason (the pass after the pod appeared).
        wait_for("karpenter_rs_pods_unschedulable for the Provisioner", Duration::from_secs(60), || {
            let text = controller.metrics.render();
            let labels = [("provisioner", provisioner.as_str()), ("reason", "no_room")];
            (sample(&text, "karpenter_rs_pods_unschedulable", &labels) >= Some(1.0)).then_some(())
        });
    });
}

/// A statically provisioned volume that exists only in `zone` and the claim bound to it.
fn zonal_volume(pv: &str, namespace: &str, claim: &str, zone: &str) -> [serde_json::Value; 2] {
    [
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                "hostPath": {"path": "/data"},
                "claimRef": {"namespace": namespace, "name": claim},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}
                ]}}
            }
        }),
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}
        }),
    ]
}

/// A pod for `node_type`'s Provisioner that mounts `claim`.
fn volume_pod(name: &str, namespace: &str, node_type: &str, claim: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"nodeType": node_type},
            "tolerations": [{"key": "service", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            "containers": [{"name": "db", "image": "postgres"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        }
    })
}

#[test]
fn pods_with_zonal_volumes_get_nodes_in_their_volumes_zones() {
    let (cluster, controller) = setup();
    let suffix = unique("volumes");
    let namespace = format!("ns-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let zones = ["ap-northeast-2a", "ap-northeast-2c"];
    let pvs: Vec<String> = zones.iter().map(|z| format!("pv-{suffix}-{z}")).collect();
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        for (zone, pv) in zones.iter().zip(&pvs) {
            // A statically bound volume that exists only in `zone`, its claim, and a pod using it.
            let claim = format!("data-{zone}");
            let [volume, claimed] = zonal_volume(pv, &namespace, &claim, zone);
            let pod = volume_pod(&format!("db-{zone}"), &namespace, &node_type, &claim);
            let manifests = json!({"apiVersion": "v1", "kind": "List", "items": [volume, claimed, pod]});
            kubectl_ok(cluster, &["apply", "-f", "-"], Some(&manifests.to_string()));
        }
        let pods = wait_for("both pods Running", Duration::from_secs(120), || {
            let pods = running_pods(cluster, &namespace);
            (pods.len() == 2).then_some(pods)
        });
        let nodes = our_nodes(cluster, &provisioner);
        for pod in &pods {
            let node_name = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
            let node = nodes.iter().find(|n| n.name_any() == node_name).expect("the pod runs on our node");
            let want = pod.name_any().trim_start_matches("db-").to_string();
            assert_eq!(
                node.labels()["topology.kubernetes.io/zone"],
                want,
                "{} runs in its volume's zone",
                pod.name_any()
            );
        }
    });
    for pv in &pvs {
        kubectl(cluster, &["delete", "pv", pv, "--wait=false"], None);
    }
}

/// The names of the nodes `provisioner` has launched so far, as seen on every poll.
fn launched_names(cluster: &Cluster, provisioner: &str, seen: &mut std::collections::BTreeSet<String>) -> usize {
    for n in our_nodes(cluster, provisioner) {
        seen.insert(n.name_any());
    }
    seen.len()
}

#[test]
fn every_requirement_becomes_a_node_label_and_the_pod_runs_there_with_one_launch() {
    let (cluster, controller) = setup();
    // `team In [a, b]` and `team Exists`, each on a Provisioner of its own with a 1-replica
    // Deployment requiring it.
    let cases = [
        ("in", json!({"key": "team", "operator": "In", "values": ["a", "b"]})),
        ("exists", json!({"key": "team", "operator": "Exists"})),
    ];
    let suffix = unique("reqlabels");
    let namespace = format!("ns-{suffix}");
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let mut created = Vec::new();
    for (name, requirement) in &cases {
        let (template, provisioner, node_type) = service_provisioner(cluster, &format!("{suffix}-{name}"), |p| {
            p["spec"]["requirements"].as_array_mut().unwrap().push(requirement.clone());
        });
        let d = deployment(&namespace, &node_type, 1, |d| {
            d["metadata"]["name"] = json!(format!("web-{name}"));
            d["spec"]["selector"]["matchLabels"]["app"] = json!(format!("web-{name}"));
            d["spec"]["template"]["metadata"]["labels"]["app"] = json!(format!("web-{name}"));
            d["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}});
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&d.to_string()));
        created.push((template, provisioner));
    }
    with_clean_up(cluster, controller, &namespace, &created, || {
        wait_for("both pods Running", Duration::from_secs(120), || {
            (running_pods(cluster, &namespace).len() == 2).then_some(())
        });
        for ((name, requirement), (_, provisioner)) in cases.iter().zip(&created) {
            let nodes = our_nodes(cluster, provisioner);
            assert_eq!(nodes.len(), 1, "{name}: one node");
            let team = nodes[0].labels().get("team").cloned();
            match requirement["operator"].as_str().unwrap() {
                "In" => assert!(matches!(team.as_deref(), Some("a") | Some("b")), "{name}: team label {team:?}"),
                _ => assert!(team.is_some(), "{name}: a team label"),
            }
            let pod = running_pods(cluster, &namespace)
                .into_iter()
                .find(|p| p.name_any().starts_with(&format!("web-{name}")))
                .unwrap();
            assert_eq!(
                pod.spec.unwrap().node_name.unwrap(),
                nodes[0].name_any(),
                "{name}: the pod runs on it"
            );
        }
        // No second launch over 15 passes of the node lifecycle (2 s each, three of provisioning's
        // 10 s re-triggers): the pod stays where it is and nothing loops.
        let mut seen: Vec<std::collections::BTreeSet<String>> = vec![Default::default(); created.len()];
        let until = controller.passes("metric_scraper") + 15;
        while controller.passes("metric_scraper") < until {
            for (i, (_, provisioner)) in created.iter().enumerate() {
                assert_eq!(
                    launched_names(cluster, provisioner, &mut seen[i]),
                    1,
                    "{provisioner} launched again: {:?}",
                    seen[i]
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        assert_eq!(running_pods(cluster, &namespace).len(), 2);
    });
}

/// Reads one object as JSON.
fn get_json(cluster: &Cluster, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl_ok(cluster, &all, None)).unwrap()
}

#[test]
fn a_wait_for_first_consumer_claim_gets_its_selected_node_from_the_scheduler_and_the_pod_runs() {
    let (cluster, controller) = setup();
    let suffix = unique("wffc");
    let namespace = format!("ns-{suffix}");
    let class = format!("sc-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let pv = format!("pv-{suffix}");
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        // A dynamically provisioned class whose provisioner is this test: it waits for the
        // scheduler to pick the node (`volume.kubernetes.io/selected-node`), then makes the volume.
        let manifests = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": class},
             "provisioner": "e2e.karpenter-rs/test-provisioner", "volumeBindingMode": "WaitForFirstConsumer"},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": namespace},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class, "resources": {"requests": {"storage": "1Gi"}}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db", "namespace": namespace},
             "spec": {
                "nodeSelector": {"nodeType": node_type},
                "tolerations": [{"key": "service", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                "containers": [{"name": "db", "image": "postgres", "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}
        ]});
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&manifests.to_string()));
        let selected = wait_for("the scheduler selects a node for the claim", Duration::from_secs(150), || {
            let claim = get_json(cluster, &["pvc", "data", "-n", &namespace]);
            claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
                .as_str()
                .map(str::to_string)
        });
        assert!(
            our_nodes(cluster, &provisioner).iter().any(|n| n.name_any() == selected),
            "the selected node {selected} is the one launched"
        );
        // The provisioner's part: a volume on that node, bound to the claim.
        let volume = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                "hostPath": {"path": "/data"}, "claimRef": {"namespace": namespace, "name": "data"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [selected]}]}]}}}});
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&volume.to_string()));
        let pod = wait_for("the pod Running", Duration::from_secs(120), || {
            running_pods(cluster, &namespace).into_iter().find(|p| p.name_any() == "db")
        });
        assert_eq!(pod.spec.unwrap().node_name.unwrap(), selected);
    });
    kubectl(cluster, &["delete", "pv", &pv, "--wait=false"], None);
    kubectl(cluster, &["delete", "storageclass", &class, "--wait=false"], None);
}

#[test]
fn a_pod_of_another_scheduler_is_never_bound_by_us() {
    let (cluster, controller) = setup();
    let suffix = unique("othersched");
    let namespace = format!("ns-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "batch", "namespace": namespace},
            "spec": {"schedulerName": "e2e-other-scheduler", "nodeSelector": {"nodeType": node_type},
                "tolerations": [{"key": "service", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}});
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&pod.to_string()));
        // The other scheduler found no node for it: it says so the way kube-scheduler does.
        let status = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/0 nodes are available"}]}});
        kubectl_ok(
            cluster,
            &[
                "patch",
                "pod",
                "batch",
                "-n",
                &namespace,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ],
            None,
        );
        // karpenter-rs launches for it (capacity is its job) but leaves the binding to that
        // scheduler: the node becomes Ready and the pod stays unbound.
        let node = wait_for("a node Ready for the pod", Duration::from_secs(120), || {
            our_nodes(cluster, &provisioner).into_iter().find(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
        });
        for _ in 0..10 {
            let pod = get_json(cluster, &["pod", "batch", "-n", &namespace]);
            assert!(
                pod["spec"]["nodeName"].is_null(),
                "bound to {} by karpenter-rs",
                pod["spec"]["nodeName"]
            );
            std::thread::sleep(Duration::from_secs(2));
        }
        assert_eq!(our_nodes(cluster, &provisioner).len(), 1, "one launch for {}", node.name_any());
    });
}

#[test]
fn pods_whose_claim_or_storage_class_is_missing_get_an_event_and_no_node_until_it_exists() {
    let (cluster, controller) = setup();
    let suffix = unique("noclaim");
    let namespace = format!("ns-{suffix}");
    let pv = format!("pv-{suffix}");
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let pod = |name: &str, claim: &str| volume_pod(name, &namespace, &node_type, claim);
    with_clean_up(cluster, controller, &namespace, &[(template, provisioner.clone())], || {
        // One pod whose claim does not exist, one whose claim names a StorageClass that does not.
        let fast_claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "fast-data", "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": format!("fast-{suffix}"), "resources": {"requests": {"storage": "1Gi"}}}
        });
        let manifests = json!({"apiVersion": "v1", "kind": "List", "items": [
            fast_claim, pod("needs-claim", "data"), pod("needs-class", "fast-data")
        ]});
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&manifests.to_string()));
        for (pod, missing) in [
            ("needs-claim", r#"persistentvolumeclaim "data" not found"#.to_string()),
            ("needs-class", format!(r#"storageclass "fast-{suffix}" not found"#)),
        ] {
            let what = format!("a FailedProvisioning event on {pod} naming {missing}");
            wait_for(&what, Duration::from_secs(90), || {
                events(cluster, &namespace, "FailedProvisioning")
                    .into_iter()
                    .find(|e| e["involvedObject"]["name"] == pod && e["message"].as_str().is_some_and(|m| m.contains(&missing)))
            });
        }
        // Several passes (one every 10 s while pods are pending) launch nothing for them.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            let nodes = our_nodes(cluster, &provisioner);
            assert!(nodes.is_empty(), "no node for pods whose volumes cannot be provided: {nodes:?}");
            std::thread::sleep(Duration::from_secs(1));
        }
        // Nor do they send the same event again within 2 minutes (its note names the claim only,
        // so no other test's Provisioners change it): kube's recorder would count a repeat in the
        // Event's series.
        controller.wait_passes("provisioner", 2, Duration::from_secs(90));
        let again = events(cluster, &namespace, "FailedProvisioning");
        let claim_events: Vec<_> = again.iter().filter(|e| e["involvedObject"]["name"] == "needs-claim").collect();
        assert_eq!(claim_events.len(), 1, "{claim_events:?}");
        assert!(claim_events[0]["series"]["count"].as_u64().unwrap_or(1) <= 1, "sent again: {}", claim_events[0]);

        // Once the claim exists (bound to a volume in one zone), its pod gets a node there.
        let [volume, claim] = zonal_volume(&pv, &namespace, "data", "ap-northeast-2c");
        let volume = json!({"apiVersion": "v1", "kind": "List", "items": [volume, claim]});
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&volume.to_string()));
        let running = wait_for("the pod with its claim Running", Duration::from_secs(120), || {
            let pods = running_pods(cluster, &namespace);
            (!pods.is_empty()).then_some(pods)
        });
        assert_eq!(running.iter().map(|p| p.name_any()).collect::<Vec<_>>(), ["needs-claim"]);
        let nodes = our_nodes(cluster, &provisioner);
        assert_eq!(nodes.len(), 1, "one node, for the pod whose claim exists");
        assert_eq!(nodes[0].labels()["topology.kubernetes.io/zone"], "ap-northeast-2c");
    });
    kubectl(cluster, &["delete", "pv", &pv, "--wait=false"], None);
}

#[test]
fn pod_affinity_namespace_selector_follows_pods_in_namespaces_with_those_labels() {
    let (cluster, controller) = setup();
    let suffix = unique("nssel");
    let (db_namespace, api_namespace) = (format!("db-{suffix}"), format!("api-{suffix}"));
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |_| {});
    for namespace in [&db_namespace, &api_namespace] {
        kubectl_ok(cluster, &["create", "namespace", namespace], None);
    }
    kubectl_ok(cluster, &["label", "namespace", &db_namespace, &format!("team={suffix}")], None);
    let pod = |name: &str, namespace: &str, spec: serde_json::Value| {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {
                "nodeSelector": {"nodeType": node_type},
                "tolerations": [{"key": "service", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
                "containers": [{"name": "c", "image": "nginx"}]
            }
        });
        for (k, v) in spec.as_object().unwrap() {
            pod["spec"][k] = v.clone();
        }
        pod
    };
    let node_of = |namespace: &str| {
        wait_for("a Running pod", Duration::from_secs(120), || {
            running_pods(cluster, namespace)
                .first()
                .and_then(|p| p.spec.as_ref()?.node_name.clone())
        })
    };
    with_clean_up(cluster, controller, &api_namespace, &[(template, provisioner.clone())], || {
        let db = pod(
            "db",
            &db_namespace,
            json!({"nodeSelector": {"nodeType": node_type, "topology.kubernetes.io/zone": "ap-northeast-2c"}}),
        );
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&db.to_string()));
        let db_node = node_of(&db_namespace);

        // Required: the zone of the `db` pods in namespaces labelled team=<suffix>, but not their
        // node. The simulation must find the db pod through its namespace's labels to pick 2c.
        let term = |key: &str| {
            json!([{"topologyKey": key, "labelSelector": {"matchLabels": {"app": "db"}},
                    "namespaceSelector": {"matchLabels": {"team": suffix}}}])
        };
        let api = pod(
            "api",
            &api_namespace,
            json!({"affinity": {
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term("topology.kubernetes.io/zone")},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term("kubernetes.io/hostname")}
            }}),
        );
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&api.to_string()));
        let api_node = node_of(&api_namespace);
        assert_ne!(api_node, db_node);
        let nodes = our_nodes(cluster, &provisioner);
        let zone_of = |name: &str| {
            let node = nodes.iter().find(|n| n.name_any() == name).expect("one of our nodes");
            node.labels()["topology.kubernetes.io/zone"].clone()
        };
        assert_eq!(zone_of(&api_node), "ap-northeast-2c", "the zone of the selected namespace's db pod");
    });
    kubectl(cluster, &["delete", "namespace", &db_namespace, "--wait=false"], None);
}

/// Every AWSNodeTemplate's status shows what its selectors resolve to now, as Karpenter's
/// AWSNodeTemplate controller writes it: the first write-up's template lists the subnet of each
/// zone and the security group its tags select (the local cluster's fixtures), and the AMIs of
/// its family (AL2023 on Kubernetes 1.33, one per architecture).
#[test]
fn an_awsnodetemplate_status_shows_its_resolved_subnets_security_groups_and_amis() {
    let (cluster, _controller) = setup();
    let suffix = unique("tstatus");
    let (template, provisioner, _) = service_provisioner(cluster, &suffix, |_| {});
    // The warm-up writes it within a minute of the template's creation.
    let status = wait_for("the template's status", Duration::from_secs(120), || {
        let out = kubectl_ok(cluster, &["get", "awsnodetemplate", &template, "-o", "json"], None);
        let t: serde_json::Value = serde_json::from_str(&out).unwrap();
        t["status"]["subnets"].as_array().filter(|s| !s.is_empty()).map(|_| t["status"].clone())
    });
    let fixtures = cluster.fixtures();
    let subnets: BTreeMap<String, String> = status["subnets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["zone"].as_str().unwrap().to_string(), s["id"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(subnets, cluster.fixture_subnets(), "{status}");
    assert_eq!(status["securityGroups"][0]["id"], fixtures["security_group_id"], "{status}");
    assert_eq!(status["securityGroups"].as_array().unwrap().len(), 1, "{status}");
    assert_eq!(status["amis"].as_array().unwrap().len(), 2, "an AMI per architecture: {status}");
    kubectl_ok(cluster, &["delete", "provisioner", &provisioner, "--wait=false"], None);
    kubectl_ok(cluster, &["delete", "awsnodetemplate", &template, "--wait=false"], None);
}

/// Node writes carry the UID of the node they were decided on: a node deleted and created again
/// under the same name (EC2 reuses private DNS names) is neither cordoned, annotated nor deleted
/// by a decision about the old one; the node itself is written as asked.
#[test]
fn node_writes_never_reach_a_node_created_again_under_the_same_name() {
    use karpenter_rs::controllers::node_ops::{self, Cordon, Written};
    let (cluster, controller) = setup();
    let name = unique("recreated");
    controller.block_on(async {
        let client = support::client(cluster).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let finalizer = "e2e.karpenter-rs/held";
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "finalizers": [finalizer]}})).unwrap();
        let drop_finalizers = json!({"metadata": {"finalizers": null}});
        let old = nodes.create(&Default::default(), &node).await.unwrap();
        nodes.delete(&name, &Default::default()).await.unwrap();
        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&drop_finalizers)).await.unwrap();
        let new = nodes.create(&Default::default(), &node).await.unwrap();
        assert_ne!(old.uid(), new.uid());
        assert_eq!(node_ops::release_finalizer(&client, &old, finalizer).await.unwrap(), Written::Gone);
        assert_eq!(nodes.get(&name).await.unwrap().finalizers(), [finalizer]);
        assert_eq!(node_ops::cordon(&client, &old, Cordon::Terminating).await.unwrap(), Written::Gone);
        assert_eq!(
            node_ops::annotate(&client, &old, &[("e2e.karpenter-rs/written", Some("old"))]).await.unwrap(),
            Written::Gone
        );
        assert_eq!(node_ops::delete(&client, &old).await.unwrap(), Written::Gone);
        let still = nodes.get(&name).await.expect("the new node is still there");
        assert_eq!(still.uid(), new.uid());
        assert_ne!(still.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
        assert!(!still.annotations().contains_key("e2e.karpenter-rs/written"));

        assert_eq!(
            node_ops::cordon(&client, &new, Cordon::Disrupting("expired")).await.unwrap(),
            Written::Written
        );
        let cordoned = nodes.get(&name).await.unwrap();
        assert_eq!(cordoned.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
        assert_eq!(cordoned.annotations()["karpenter.sh/voluntary-disruption"], "expired");
        assert_eq!(node_ops::cordon(&client, &new, Cordon::Lift).await.unwrap(), Written::Written);
        let lifted = nodes.get(&name).await.unwrap();
        assert_ne!(lifted.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
        assert!(!lifted.annotations().contains_key("karpenter.sh/voluntary-disruption"));
        assert_eq!(node_ops::delete(&client, &new).await.unwrap(), Written::Written);
        let deleting = nodes.get(&name).await.unwrap();
        assert_eq!(node_ops::release_finalizer(&client, &deleting, finalizer).await.unwrap(), Written::Written);
        assert!(nodes.get_opt(&name).await.unwrap().is_none());
    });
}

/// `karpenter-rs simulate --live`, reading the same EC2 (the emulator) as the controller and the
/// Provisioner and template as the API server stored them (`kubectl get -o json`), predicts what
/// launches for the same workloads: as many nodes, of the instance types it names cheapest, each
/// in a zone it allows. And, as README's table of differences says, a template naming no AMI
/// family gets AL2023 user data on Kubernetes 1.33 (as the kubelet stand-in read it).
#[test]
fn simulate_predicts_the_nodes_that_launch() {
    let (cluster, controller) = setup();
    let suffix = unique("predict");
    let namespace = format!("ns-{suffix}");
    let types = ["t3.large", "t3.xlarge", "c5.xlarge", "c5.2xlarge", "m5.large", "m5.xlarge", "m5.2xlarge"];
    // Limits of 0 CPU hold every launch until all the pods are pending: the controller's first pass
    // then sees them together, as simulate does (pods created across two batches would be packed
    // differently, rightly).
    let (template, provisioner, node_type) = service_provisioner(cluster, &suffix, |p| {
        set_requirement(p, "node.kubernetes.io/instance-type", &types);
        p["spec"]["limits"] = json!({"resources": {"cpu": "0"}});
    });
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let sized = |name: &str, replicas: i64, cpu: &str, memory: &str| {
        deployment(&namespace, &node_type, replicas, |d| {
            d["metadata"]["name"] = json!(name);
            d["spec"]["selector"]["matchLabels"] = json!({"app": name});
            d["spec"]["template"]["metadata"]["labels"] = json!({"app": name});
            d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu, "memory": memory}});
        })
    };
    let workloads = json!({"apiVersion": "v1", "kind": "List", "items": [
        sized("small", 5, "1500m", "2Gi"),
        sized("large", 1, "3", "10Gi"),
    ]});
    let created = [(template.clone(), provisioner.clone())];
    with_clean_up(cluster, controller, &namespace, &created, || {
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&workloads.to_string()));
        wait_for("6 pods pending", Duration::from_secs(60), || {
            let out = kubectl_ok(cluster, &["get", "pods", "-n", &namespace, "-o", "json"], None);
            let pods: Vec<Pod> = support::items(&out);
            let pending = pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")).count();
            (pending == 6).then_some(())
        });
        kubectl_ok(
            cluster,
            &["patch", "provisioner", &provisioner, "--type=json", "-p", r#"[{"op": "remove", "path": "/spec/limits"}]"#],
            None,
        );
        let dir = tempfile::tempdir().unwrap();
        let stored = kubectl_ok(
            cluster,
            &["get", &format!("provisioner/{provisioner}"), &format!("awsnodetemplate/{template}"), "-o", "json"],
            None,
        );
        std::fs::write(dir.path().join("stored.json"), stored).unwrap();
        std::fs::write(dir.path().join("workloads.json"), workloads.to_string()).unwrap();
        let mut simulate = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-rs"));
        simulate
            .args(["simulate", "--live", "-o", "json", "-f", "stored.json", "-f", "workloads.json"])
            .current_dir(dir.path())
            .env_remove("PRICE_OVERRIDES")
            .env_remove("SIMULATE_CATALOGUE");
        for key in ["AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "CLUSTER_NAME"] {
            if let Some(value) = cluster.env.get(key) {
                simulate.env(key, value);
            }
        }
        let out = simulate.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["catalogue"]["kind"], "live", "{report}");
        assert!(report["unschedulable"].as_array().unwrap().is_empty(), "{report}");
        let planned = report["nodes"].as_array().unwrap().clone();
        assert!(planned.len() >= 2, "a workload that needs more than one node: {report}");
        let mut predicted: Vec<String> = planned
            .iter()
            .map(|n| n["cheapest"]["instanceType"].as_str().unwrap().to_string())
            .collect();
        predicted.sort();

        wait_for("6 pods Running", Duration::from_secs(180), || {
            (running_pods(cluster, &namespace).len() == 6).then_some(())
        });
        let nodes = our_nodes(cluster, &provisioner);
        let mut launched: Vec<String> = nodes.iter().map(|n| n.labels()["node.kubernetes.io/instance-type"].clone()).collect();
        launched.sort();
        assert_eq!(launched, predicted, "simulate said {report}");
        let zones: Vec<&str> = planned[0]["zones"].as_array().unwrap().iter().map(|z| z.as_str().unwrap()).collect();
        for node in &nodes {
            let zone = node.labels()["topology.kubernetes.io/zone"].as_str();
            assert!(zones.contains(&zone), "{} launched in {zone}, simulate allowed {zones:?}", node.name_any());
            assert_eq!(
                node.annotations().get("kubelet.local-cluster/family").map(String::as_str),
                Some("AL2023"),
                "{}: a template naming no AMI family on Kubernetes 1.33",
                node.name_any()
            );
        }
    });
}
