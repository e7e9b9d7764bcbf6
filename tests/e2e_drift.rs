//! Drift end to end on the local cluster and the EC2 emulator
//! (`aws@v0.31.0:pkg/cloudprovider/drift.go`, on by default): a node launched before an edit of its
//! Provisioner or AWSNodeTemplate, or before its AMI's SSM parameter moved to a new image, is
//! replaced by a node launched from what they say now, one node at a time through the expiration
//! path (the replacement first, then the drain), with the workload's PodDisruptionBudget
//! (`minAvailable: 1`) kept throughout. An edit that does not change what is launched (`weight`)
//! replaces nothing. (Drift turned off is tested in e2e_deprovisioning, whose controllers run with
//! it off.)
//!
//! The in-process controllers act only on what these tests create: nodes labelled
//! `e2e.karpenter-rs/suite=drift` and instances tagged the same.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::{instance_id_from_provider_id, CloudProvider, Instance};
use karpenter_rs::controllers::deprovisioning::DeprovisioningConfig;
use karpenter_rs::controllers::garbagecollection::GarbageCollectionConfig;
use kube::ResourceExt;
use serde_json::json;
use support::{cluster, fixture, items, kubectl_ok, ready_on, unique, wait_for, AdmissionWebhook, Cluster, Controller, Loops};

const SUITE_KEY: &str = "e2e.karpenter-rs/suite";
const SUITE: &str = "drift";

fn setup() -> (&'static Cluster, &'static Controller) {
    static WEBHOOK: OnceLock<AdmissionWebhook> = OnceLock::new();
    static CONTROLLER: OnceLock<Controller> = OnceLock::new();
    let cluster = cluster();
    WEBHOOK.get_or_init(|| AdmissionWebhook::start(cluster));
    let controller = CONTROLLER.get_or_init(|| {
        let selector = format!("karpenter.sh/provisioner-name,{SUITE_KEY}={SUITE}");
        Controller::start_all(
            cluster,
            Loops {
                termination: Default::default(),
                deprovisioning: DeprovisioningConfig {
                    interval: Duration::from_secs(2),
                    node_selector: selector.clone(),
                    ..Default::default()
                },
                garbage_collection: GarbageCollectionConfig {
                    interval: Duration::from_secs(5),
                    startup_interval: Duration::from_secs(5),
                    grace_period: Duration::from_secs(60),
                    instance_tags: BTreeMap::from([(SUITE_KEY.to_string(), SUITE.to_string())]),
                    node_selector: selector,
                    ..Default::default()
                },
                interruption: Default::default(),
                registration_ttl: Duration::from_secs(120),
            },
        )
    });
    (cluster, controller)
}

fn cloud(controller: &Controller, cluster: &Cluster) -> AwsCloudProvider {
    controller.block_on(AwsCloudProvider::new(support::cloud_config(cluster))).unwrap()
}

fn instance_of(controller: &Controller, cloud: &AwsCloudProvider, node: &Node) -> Instance {
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .expect("our nodes have a providerID");
    let id = instance_id_from_provider_id(&provider_id).expect("an aws:/// provider ID");
    controller.block_on(cloud.get(id)).expect("the node's instance")
}

/// The first write-up's Provisioner and AWSNodeTemplate under names of their own, the nginx
/// Deployment (2 replicas) pinned to their nodes, and a PodDisruptionBudget keeping one Ready.
struct Scenario {
    cluster: &'static Cluster,
    template: String,
    provisioner: String,
    namespace: String,
    node_type: String,
}

impl Scenario {
    fn create(
        cluster: &'static Cluster,
        base: &str,
        edit_provisioner: impl FnOnce(&mut serde_json::Value),
        edit_template: impl FnOnce(&mut serde_json::Value),
    ) -> Scenario {
        let suffix = unique(base);
        let s = Scenario {
            cluster,
            template: format!("lt-{suffix}"),
            provisioner: format!("drift-{suffix}"),
            namespace: format!("ns-{suffix}"),
            node_type: format!("drift-{suffix}"),
        };
        let mut template = fixture("first-writeup/awsnodetemplate.yaml");
        template["metadata"]["name"] = json!(s.template);
        template["spec"]["tags"][SUITE_KEY] = json!(SUITE);
        edit_template(&mut template);
        let mut provisioner = fixture("first-writeup/provisioner.yaml");
        provisioner["metadata"]["name"] = json!(s.provisioner);
        provisioner["spec"]["providerRef"]["name"] = json!(s.template);
        provisioner["spec"]["labels"]["nodeType"] = json!(s.node_type);
        provisioner["spec"]["labels"][SUITE_KEY] = json!(SUITE);
        provisioner["spec"].as_object_mut().unwrap().remove("ttlSecondsAfterEmpty");
        edit_provisioner(&mut provisioner);
        kubectl_ok(cluster, &["create", "namespace", &s.namespace], None);
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&template.to_string()));
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&provisioner.to_string()));
        let pdb = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "nginx", "namespace": s.namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "nginx-karpenter"}}}
        });
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&pdb.to_string()));
        let mut deployment = fixture("first-writeup/nginx-deployment.yaml");
        deployment["metadata"]["namespace"] = json!(s.namespace);
        deployment["spec"]["template"]["spec"]["nodeSelector"]["nodeType"] = json!(s.node_type);
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&deployment.to_string()));
        s
    }

    fn pods(&self) -> Vec<Pod> {
        items(&kubectl_ok(
            self.cluster,
            &["get", "pods", "-n", &self.namespace, "-o", "json"],
            None,
        ))
    }

    fn nodes(&self) -> Vec<Node> {
        let selector = format!("karpenter.sh/provisioner-name={}", self.provisioner);
        items(&kubectl_ok(self.cluster, &["get", "nodes", "-l", &selector, "-o", "json"], None))
    }

    /// Waits until both replicas are Ready; returns the nodes they are on.
    fn wait_ready(&self) -> BTreeSet<String> {
        wait_for("2 replicas Ready", Duration::from_secs(150), || {
            let on = ready_on(&self.pods());
            (on.len() == 2).then(|| on.into_iter().collect())
        })
    }

    fn patch(&self, kind: &str, name: &str, patch: serde_json::Value) {
        kubectl_ok(self.cluster, &["patch", kind, name, "--type=merge", "-p", &patch.to_string()], None);
    }

    /// Replaces the template's field `field` (a selector) as a whole.
    fn replace_in_template(&self, field: &str, value: serde_json::Value) {
        let patch = json!([{"op": "replace", "path": format!("/spec/{field}"), "value": value}]);
        kubectl_ok(
            self.cluster,
            &["patch", "awsnodetemplate", &self.template, "--type=json", "-p", &patch.to_string()],
            None,
        );
    }

    /// Watches the workload until every node of `first` is gone and both replicas are Ready on
    /// other nodes, with at least one Ready throughout (the PDB's minAvailable); returns the
    /// nodes they moved to.
    fn rolled_from(&self, first: &BTreeSet<String>, what: &str) -> Vec<Node> {
        let deadline = Instant::now() + Duration::from_secs(300);
        let mut fewest_ready = usize::MAX;
        let moved = loop {
            assert!(Instant::now() < deadline, "{what}: the drifted node was not replaced within 300 s");
            let on = ready_on(&self.pods());
            fewest_ready = fewest_ready.min(on.len());
            let nodes: BTreeSet<String> = self.nodes().iter().map(|n| n.name_any()).collect();
            let moved: BTreeSet<String> = on.iter().cloned().collect();
            if first.iter().all(|n| !nodes.contains(n)) && on.len() == 2 && moved.is_disjoint(first) {
                break moved;
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        assert!(
            fewest_ready >= 1,
            "{what}: fewer than minAvailable=1 replicas were Ready during the replacement"
        );
        self.nodes().into_iter().filter(|n| moved.contains(&n.name_any())).collect()
    }

    fn clean_up(&self, controller: &Controller) {
        support::tear_down_scenario(self.cluster, controller, &self.namespace, &self.provisioner, &self.template);
    }
}

fn with_scenario(scenario: Scenario, controller: &Controller, body: impl FnOnce(&Scenario)) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&scenario)));
    scenario.clean_up(controller);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn drift_events(cluster: &Cluster, node: &str) -> Vec<String> {
    let out = kubectl_ok(
        cluster,
        &[
            "get",
            "events",
            "-A",
            "--field-selector",
            &format!("involvedObject.name={node},reason=Drifted"),
            "-o",
            "json",
        ],
        None,
    );
    let events: Vec<serde_json::Value> = serde_json::from_str::<serde_json::Value>(&out).unwrap()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    events.iter().filter_map(|e| e["message"].as_str().map(str::to_string)).collect()
}

fn metric(controller: &Controller, series: &str) -> f64 {
    support::metric_sum(&controller.metrics.render(), series)
}

const DRIFT_REPLACE: &str = "karpenter_deprovisioning_actions_performed{action=\"drift/replace\"}";

/// A Provisioner's label edited from `team: a` to `team: b`: the node launched before is
/// replaced by one labelled `team: b`, with a `Drifted` event naming the static drift.
#[test]
fn a_provisioner_label_edit_replaces_the_node_with_one_carrying_the_new_label() {
    let (cluster, controller) = setup();
    let scenario = Scenario::create(cluster, "label", |p| p["spec"]["labels"]["team"] = json!("a"), |_| {});
    with_scenario(scenario, controller, |s| {
        let first = s.wait_ready();
        let replaced_before = metric(controller, DRIFT_REPLACE);
        s.patch("provisioner", &s.provisioner, json!({"spec": {"labels": {"team": "b"}}}));
        let new = s.rolled_from(&first, "label edit");
        assert!(
            new.iter().all(|n| n.labels().get("team").map(String::as_str) == Some("b")),
            "{new:?}"
        );
        let old = first.iter().next().unwrap();
        let events = drift_events(cluster, old);
        assert!(
            events
                .iter()
                .any(|m| m.contains("static") && m.contains("karpenter.sh/provisioner-hash")),
            "{events:?}"
        );
        assert!(metric(controller, DRIFT_REPLACE) > replaced_before, "counted as drift/replace");
    });
}

/// The AWSNodeTemplate's security-group selector pointed at a new group: replaced by a node whose
/// instance is in the new group.
#[test]
fn a_security_group_selector_edit_replaces_the_node_with_one_in_the_new_group() {
    let (cluster, controller) = setup();
    let cloud = cloud(controller, cluster);
    let vpc = cluster.fixtures()["vpc_id"].as_str().unwrap().to_string();
    let tag = unique("sg");
    let group = controller
        .block_on(
            cloud
                .ec2()
                .create_security_group()
                .group_name(&tag)
                .description("drift test")
                .vpc_id(&vpc)
                .send(),
        )
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    controller
        .block_on(
            cloud
                .ec2()
                .create_tags()
                .resources(&group)
                .tags(aws_sdk_ec2::types::Tag::builder().key("drift-test").value(&tag).build())
                .send(),
        )
        .unwrap();
    let scenario = Scenario::create(cluster, "sg", |_| {}, |_| {});
    with_scenario(scenario, controller, |s| {
        let first = s.wait_ready();
        let old = s.nodes().into_iter().find(|n| first.contains(&n.name_any())).unwrap();
        assert!(!instance_of(controller, &cloud, &old).security_group_ids.contains(&group));
        s.replace_in_template("securityGroupSelector", json!({"drift-test": tag}));
        let new = s.rolled_from(&first, "security-group selector edit");
        for node in &new {
            assert_eq!(
                instance_of(controller, &cloud, node).security_group_ids,
                vec![group.clone()],
                "{}",
                node.name_any()
            );
        }
        let events = drift_events(cluster, &old.name_any());
        assert!(
            events.iter().any(|m| m.contains("securitygroup") && m.contains(&group)),
            "{events:?}"
        );
    });
}

/// The subnet selector narrowed to the subnet of the other zone: replaced by a node in that
/// subnet.
#[test]
fn a_subnet_selector_edit_replaces_the_node_with_one_in_the_new_subnet() {
    let (cluster, controller) = setup();
    let cloud = cloud(controller, cluster);
    let subnets = cluster.fixture_subnets();
    let scenario = Scenario::create(cluster, "subnet", |_| {}, |_| {});
    with_scenario(scenario, controller, |s| {
        let first = s.wait_ready();
        let old = s.nodes().into_iter().find(|n| first.contains(&n.name_any())).unwrap();
        let old_subnet = instance_of(controller, &cloud, &old).subnet_id.expect("a subnet");
        let (zone, subnet) = subnets
            .iter()
            .find(|(zone, id)| **id != old_subnet && (zone.ends_with("2a") || zone.ends_with("2c")))
            .map(|(z, id)| (z.clone(), id.clone()))
            .expect("the other zone's subnet");
        s.replace_in_template("subnetSelector", json!({"aws-ids": subnet}));
        let new = s.rolled_from(&first, "subnet selector edit");
        for node in &new {
            let instance = instance_of(controller, &cloud, node);
            assert_eq!(instance.subnet_id.as_deref(), Some(subnet.as_str()), "{}", node.name_any());
            assert_eq!(instance.zone, zone);
        }
        let events = drift_events(cluster, &old.name_any());
        assert!(events.iter().any(|m| m.contains("subnet") && m.contains(&old_subnet)), "{events:?}");
    });
}

/// A new image registered and the family's SSM parameter moved to it (an EKS-optimised AMI
/// release): the node is replaced by one running the new image. Bottlerocket, whose parameter no
/// other test of this binary reads, so the roll-out touches only this test's node; the parameter
/// is put back afterwards.
#[test]
fn a_new_ami_behind_the_ssm_parameter_replaces_the_node_with_one_running_it() {
    let (cluster, controller) = setup();
    let cloud = cloud(controller, cluster);
    let fixtures = cluster.fixtures();
    let parameter = fixtures["amis"]
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.contains("bottlerocket/aws-k8s-") && !k.contains("nvidia") && k.contains("x86_64"))
        .expect("the Bottlerocket x86_64 parameter")
        .clone();
    let old_image = fixtures["amis"][&parameter]["image_id"].as_str().unwrap().to_string();
    let scenario = Scenario::create(cluster, "ami", |_| {}, |t| t["spec"]["amiFamily"] = json!("Bottlerocket"));
    let put = |image: &str| {
        controller
            .block_on(
                cloud
                    .ssm()
                    .put_parameter()
                    .name(&parameter)
                    .value(image)
                    .r#type(aws_sdk_ssm::types::ParameterType::String)
                    .data_type("aws:ec2:image")
                    .overwrite(true)
                    .send(),
            )
            .unwrap();
    };
    with_scenario(scenario, controller, |s| {
        let first = s.wait_ready();
        let old = s.nodes().into_iter().find(|n| first.contains(&n.name_any())).unwrap();
        assert_eq!(instance_of(controller, &cloud, &old).image_id.as_deref(), Some(old_image.as_str()));
        let region = fixtures["region"].as_str().unwrap();
        let new_image = controller
            .block_on(
                cloud
                    .ec2()
                    .copy_image()
                    .source_image_id(&old_image)
                    .source_region(region)
                    .name(unique("bottlerocket-aws-k8s-next"))
                    .send(),
            )
            .unwrap()
            .image_id()
            .unwrap()
            .to_string();
        put(&new_image);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let new = s.rolled_from(&first, "new AMI");
            for node in &new {
                assert_eq!(
                    instance_of(controller, &cloud, node).image_id.as_deref(),
                    Some(new_image.as_str()),
                    "{}",
                    node.name_any()
                );
            }
            let events = drift_events(cluster, &old.name_any());
            assert!(
                events
                    .iter()
                    .any(|m| m.contains("ami") && m.contains(&old_image) && m.contains(&new_image)),
                "{events:?}"
            );
        }));
        put(&old_image);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

/// A `weight` edit does not change what is launched: the node stays, unmarked, through many
/// passes, and carries the hashes it was launched with.
#[test]
fn a_weight_edit_replaces_nothing() {
    let (cluster, controller) = setup();
    let scenario = Scenario::create(cluster, "weight", |_| {}, |_| {});
    with_scenario(scenario, controller, |s| {
        let first = s.wait_ready();
        let node = s.nodes().into_iter().find(|n| first.contains(&n.name_any())).unwrap();
        for key in ["karpenter.sh/provisioner-hash", "karpenter.k8s.aws/nodetemplate-hash"] {
            assert!(node.annotations().contains_key(key), "{key} missing: {:?}", node.annotations());
        }
        s.patch(
            "provisioner",
            &s.provisioner,
            json!({"spec": {"weight": 50, "limits": {"resources": {"cpu": "1000"}}}}),
        );
        controller.wait_passes("deprovisioning", 10, Duration::from_secs(120));
        let now = s.nodes();
        assert_eq!(now.len(), 1, "{now:?}");
        assert_eq!(now[0].name_any(), node.name_any());
        assert!(
            !now[0].annotations().contains_key("karpenter.sh/voluntary-disruption"),
            "{:?}",
            now[0].annotations()
        );
        assert_ne!(now[0].spec.as_ref().and_then(|s| s.unschedulable), Some(true));
        assert!(drift_events(cluster, &node.name_any()).is_empty());
    });
}
