//! EC2 faults end to end: the controllers talk to moto through the fault proxy
//! (tests/support/fault_proxy.rs), which throttles, fails, drops or refuses chosen calls. Moto
//! stays the EC2 implementation; the proxy only produces the faults moto cannot.
//!
//! - 50% of CreateFleet calls throttled during a 200-pod burst: every pod runs, one instance per
//!   Node, no CreateFleet token ever launches twice, at most two calls per launched node.
//! - TerminateInstances failing for 60 s: the deleted Node keeps its finalizer until its instance
//!   is terminated, after the outage, and the failing calls back off.
//! - DescribeInstances failing: the garbage collector terminates and deletes nothing.
//! - A CreateFleet answer lost after moto launched the instance: the instance without a Node is
//!   collected, the pod runs on one node, nothing is left running without a Node.
//! - A CreateFleet dropped before it reached EC2, then answered 5 s late: retried by the SDK with
//!   the same token, one instance.
//! - Insufficient capacity for the cheapest offering: the launch goes to the next one.
//! - Runaway protection with consolidation on, under faults, for pods evicted by every new node
//!   and for pods the kubelet rejects.
//!
//! The tests share one set of controllers and one proxy and run one at a time (the proxy's
//! rules are global). They act only on nodes labelled and instances tagged
//! `e2e.karpenter-rs/suite=faults`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_rs::cloudprovider::aws::retries::MAX_ATTEMPTS;
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::{instance_id_from_provider_id, CloudProvider, Instance};
use karpenter_rs::controllers::deprovisioning::DeprovisioningConfig;
use karpenter_rs::controllers::garbagecollection::GarbageCollectionConfig;
use kube::ResourceExt;
use serde_json::json;
use support::fault_proxy::{Fault, FaultProxy, Rule};
use support::{cluster, items, kubectl, kubectl_ok, unique, wait_for, AdmissionWebhook, Cluster, Controller, FirstWriteUp, Loops};

const SUITE_KEY: &str = "e2e.karpenter-rs/suite";
const SUITE: &str = "faults";
/// How old an instance without a Node must be before it is collected, in this suite.
const GC_GRACE: Duration = Duration::from_secs(15);

struct Suite {
    cluster: &'static Cluster,
    proxy: FaultProxy,
    controller: Controller,
    /// Straight to moto, for the tests' own reads.
    moto: AwsCloudProvider,
}

fn suite() -> (&'static Suite, MutexGuard<'static, ()>) {
    static WEBHOOK: OnceLock<AdmissionWebhook> = OnceLock::new();
    static SUITE_STATE: OnceLock<Suite> = OnceLock::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = cluster();
    WEBHOOK.get_or_init(|| AdmissionWebhook::start(cluster));
    let suite = SUITE_STATE.get_or_init(|| {
        let proxy = FaultProxy::start(&cluster.env["AWS_ENDPOINT_URL"]);
        let mut cloud = support::cloud_config(cluster);
        cloud.endpoint_url = Some(proxy.url());
        let selector = format!("karpenter.sh/provisioner-name,{SUITE_KEY}={SUITE}");
        let controller = Controller::start_all_with_cloud(
            cluster,
            Loops {
                termination: Default::default(),
                deprovisioning: DeprovisioningConfig {
                    interval: Duration::from_secs(2),
                    node_selector: selector.clone(),
                    ..Default::default()
                },
                garbage_collection: GarbageCollectionConfig {
                    interval: Duration::from_secs(3),
                    startup_interval: Duration::from_secs(3),
                    grace_period: GC_GRACE,
                    instance_tags: BTreeMap::from([(SUITE_KEY.to_string(), SUITE.to_string())]),
                    node_selector: selector,
                    ..Default::default()
                },
                interruption: Default::default(),
                registration_ttl: Duration::from_secs(15 * 60),
            },
            cloud,
        );
        let moto = controller.block_on(AwsCloudProvider::new(support::cloud_config(cluster))).unwrap();
        Suite {
            cluster,
            proxy,
            controller,
            moto,
        }
    });
    (suite, serial)
}

/// A Provisioner like the first write-up's `service` (nodes labelled, instances tagged for this
/// suite), its template and a namespace.
struct Scenario {
    cluster: &'static Cluster,
    template: String,
    provisioner: String,
    namespace: String,
    /// The Deployment for the scenario's nodes, not yet applied.
    deployment: serde_json::Value,
}

impl Scenario {
    fn create(suite: &Suite, base: &str) -> Scenario {
        Self::create_with(suite, base, |_| {})
    }

    /// `create`, with `edit` applied to the Provisioner first.
    fn create_with(suite: &Suite, base: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Scenario {
        let FirstWriteUp {
            template_name,
            provisioner_name,
            namespace,
            mut template,
            mut provisioner,
            deployment,
            ..
        } = FirstWriteUp::named(&unique(base));
        let s = Scenario {
            cluster: suite.cluster,
            template: template_name,
            provisioner: provisioner_name,
            namespace,
            deployment,
        };
        template["spec"]["tags"] = json!({SUITE_KEY: SUITE});
        provisioner["spec"]["labels"][SUITE_KEY] = json!(SUITE);
        // Nodes stay until the test deletes them.
        provisioner["spec"].as_object_mut().unwrap().remove("ttlSecondsAfterEmpty");
        edit(&mut provisioner);
        kubectl_ok(s.cluster, &["create", "namespace", &s.namespace], None);
        kubectl_ok(s.cluster, &["apply", "-f", "-"], Some(&template.to_string()));
        kubectl_ok(s.cluster, &["apply", "-f", "-"], Some(&provisioner.to_string()));
        s
    }

    /// The first write-up's nginx Deployment with `replicas` pods requesting `cpu`/`memory`.
    fn deploy(&self, replicas: i64, cpu: &str, memory: &str) {
        let mut d = self.deployment.clone();
        d["spec"]["replicas"] = json!(replicas);
        d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu, "memory": memory}});
        kubectl_ok(self.cluster, &["apply", "-f", "-"], Some(&d.to_string()));
    }

    /// The base name the scenario was made from (`evicted` of `service-evicted-123-4`).
    fn kind(&self) -> &str {
        self.provisioner
            .trim_start_matches("service-")
            .split('-')
            .next()
            .unwrap_or_default()
    }

    fn pods(&self) -> Vec<Pod> {
        items(&kubectl_ok(
            self.cluster,
            &["get", "pods", "-n", &self.namespace, "-o", "json"],
            None,
        ))
    }

    fn running(&self) -> usize {
        self.pods()
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count()
    }

    fn wait_running(&self, n: usize, timeout: Duration) {
        wait_for(&format!("{n} pods Running in {}", self.namespace), timeout, || {
            (self.running() == n).then_some(())
        });
    }

    fn nodes(&self) -> Vec<Node> {
        items(&kubectl_ok(
            self.cluster,
            &[
                "get",
                "nodes",
                "-l",
                &format!("karpenter.sh/provisioner-name={}", self.provisioner),
                "-o",
                "json",
            ],
            None,
        ))
    }

    /// Instances of this Provisioner that are not terminated, straight from moto.
    fn instances(&self, suite: &Suite) -> Vec<Instance> {
        let all = suite.controller.block_on(suite.moto.list()).unwrap();
        all.into_iter()
            .filter(|i| i.tags.get("karpenter.sh/provisioner-name") == Some(&self.provisioner))
            .filter(|i| i.state != "shutting-down" && i.state != "terminated")
            .collect()
    }

    /// Deletes the workload and the nodes (through the termination controller, with no fault
    /// left), then the Provisioner and template; fails when a node or instance is left.
    fn clean_up(&self, suite: &Suite) {
        for action in ["CreateFleet", "TerminateInstances", "DescribeInstances"] {
            suite.proxy.clear(action);
        }
        kubectl_ok(self.cluster, &["delete", "namespace", &self.namespace, "--wait=false"], None);
        kubectl_ok(self.cluster, &["delete", "provisioner", &self.provisioner, "--wait=false"], None);
        let selector = format!("karpenter.sh/provisioner-name={}", self.provisioner);
        kubectl(self.cluster, &["delete", "nodes", "-l", &selector, "--wait=false"], None);
        wait_for("the scenario's nodes and instances gone", Duration::from_secs(120), || {
            (self.nodes().is_empty() && self.instances(suite).is_empty()).then_some(())
        });
        kubectl_ok(self.cluster, &["delete", "awsnodetemplate", &self.template, "--wait=false"], None);
    }

    /// Runs `body`, then cleans up; re-raises a failure of `body` after cleaning up.
    fn run(&self, suite: &Suite, body: impl FnOnce()) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        self.clean_up(suite);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }
}

fn instance_ids_of(nodes: &[Node]) -> BTreeSet<String> {
    nodes
        .iter()
        .filter_map(|n| instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?).map(str::to_string))
        .collect()
}

#[test]
fn half_of_create_fleet_throttled_during_a_200_pod_burst_launches_each_node_once() {
    let (suite, _serial) = suite();
    let s = Scenario::create(suite, "throttle");
    let before = suite.proxy.calls("CreateFleet").len();
    suite.proxy.add(Rule::new("CreateFleet", Fault::Throttle).fraction(0.5));
    s.run(suite, || {
        s.deploy(200, "100m", "128Mi");
        s.wait_running(200, Duration::from_secs(300));
        // A launch still in flight has its instance before its Node: settle first.
        let nodes = wait_for("one running instance per Node, none without", Duration::from_secs(30), || {
            let nodes = s.nodes();
            let instances: BTreeSet<String> = s.instances(suite).into_iter().map(|i| i.id).collect();
            (instances == instance_ids_of(&nodes)).then_some(nodes)
        });
        let calls: Vec<_> = suite.proxy.calls("CreateFleet").into_iter().skip(before).collect();
        let throttled = calls.iter().filter(|c| c.fault == Some(Fault::Throttle)).count();
        let forwarded = calls.len() - throttled;
        eprintln!(
            "throttled burst: {} nodes, {} CreateFleet calls, {throttled} throttled",
            nodes.len(),
            calls.len()
        );
        assert!(throttled >= 1, "the proxy throttled nothing: {calls:?}");
        assert_eq!(
            forwarded,
            nodes.len(),
            "every CreateFleet that reached EC2 launched a node that stayed"
        );
        assert!(
            calls.len() <= 2 * nodes.len() + 1,
            "{} CreateFleet calls for {} nodes",
            calls.len(),
            nodes.len()
        );
        // Each launch attempt has its own token, reused by the SDK's retries only.
        let mut by_token: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for c in &calls {
            let token = c
                .params
                .get("ClientToken")
                .cloned()
                .expect("every CreateFleet carries a ClientToken");
            let entry = by_token.entry(token).or_default();
            entry.0 += 1;
            entry.1 += usize::from(c.fault.is_none());
        }
        for (token, (sent, launched)) in &by_token {
            assert!(*sent <= MAX_ATTEMPTS as usize, "token {token} sent {sent} times");
            assert!(*launched <= 1, "token {token} reached EC2 {launched} times");
        }
        assert!(
            by_token.values().any(|(sent, _)| *sent > 1),
            "some throttled call was retried with its token: {by_token:?}"
        );
    });
}

#[test]
fn terminate_instances_failing_for_60_s_keeps_the_finalizer_until_the_instance_is_gone() {
    let (suite, _serial) = suite();
    let s = Scenario::create(suite, "terminate");
    s.run(suite, || {
        s.deploy(1, "100m", "128Mi");
        s.wait_running(1, Duration::from_secs(150));
        let node = s.nodes().pop().expect("a node");
        let name = node.name_any();
        let instance = instance_ids_of(&[node]).pop_first().expect("the node names its instance");
        let outage = Duration::from_secs(60);
        let before = suite.proxy.calls("TerminateInstances").len();
        suite
            .proxy
            .add(Rule::new("TerminateInstances", Fault::Status(503)).for_duration(outage));
        let started = Instant::now();
        kubectl_ok(s.cluster, &["delete", "node", &name, "--wait=false"], None);
        let mut terminated_at = None;
        let gone_at = wait_for("the node gone after its instance", Duration::from_secs(180), || {
            // The Node first: once it is gone, its instance must already be terminated.
            let out = kubectl(s.cluster, &["get", "node", &name, "-o", "json"], None);
            let instance_live = s.instances(suite).iter().any(|i| i.id == instance);
            if !instance_live && terminated_at.is_none() {
                terminated_at = Some(started.elapsed());
            }
            if !out.status.success() {
                assert!(!instance_live, "node {name} released while instance {instance} still runs");
                return Some(started.elapsed());
            }
            let node: Node = serde_json::from_slice(&out.stdout).unwrap();
            assert!(
                node.finalizers().iter().any(|f| f == "karpenter.sh/termination"),
                "the finalizer went before the node: {:?}",
                node.finalizers()
            );
            None
        });
        let terminated_at = terminated_at.expect("seen terminated");
        assert!(
            terminated_at >= outage,
            "terminated after {terminated_at:?}, inside the {outage:?} outage"
        );
        assert!(gone_at >= terminated_at);
        let calls: Vec<_> = suite.proxy.calls("TerminateInstances").into_iter().skip(before).collect();
        let failed = calls.iter().filter(|c| c.fault.is_some()).count();
        eprintln!("TerminateInstances outage: {failed} failed calls, terminated after {terminated_at:?}, node gone after {gone_at:?}");
        assert!(failed >= 2, "the outage was retried: {failed} failed calls");
        // The SDK's bounded retries per attempt, then the node's own back-off between attempts:
        // far fewer than one call a second.
        assert!(failed <= 40, "{failed} TerminateInstances calls in a {outage:?} outage");
    });
}

#[test]
fn describe_instances_failing_makes_the_garbage_collector_terminate_and_delete_nothing() {
    let (suite, _serial) = suite();
    let s = Scenario::create(suite, "describe");
    s.run(suite, || {
        s.deploy(1, "100m", "128Mi");
        s.wait_running(1, Duration::from_secs(150));
        let nodes = s.nodes();
        let instances = instance_ids_of(&nodes);
        // Past the grace period, so the collector looks these up.
        std::thread::sleep(GC_GRACE + Duration::from_secs(1));
        let before = suite.proxy.calls("DescribeInstances").len();
        // At most 2 minutes, should the test fail before it ends the outage itself.
        suite
            .proxy
            .add(Rule::new("DescribeInstances", Fault::Status(500)).for_duration(Duration::from_secs(120)));
        // Three failed lookups in a row, then the outage ends.
        let failed = || {
            suite
                .proxy
                .calls("DescribeInstances")
                .iter()
                .skip(before)
                .filter(|c| c.fault.is_some())
                .count()
        };
        wait_for("three failed lookups of the collector", Duration::from_secs(90), || {
            (failed() >= 3).then_some(())
        });
        suite.controller.wait_passes("garbagecollection", 1, Duration::from_secs(60));
        suite.proxy.clear("DescribeInstances");
        assert_eq!(instance_ids_of(&s.nodes()), instances, "no node deleted");
        let live: BTreeSet<String> = s.instances(suite).into_iter().map(|i| i.id).collect();
        assert_eq!(live, instances, "no instance terminated");
        assert_eq!(s.running(), 1);
        // And after the outage, still nothing to collect: two passes that see every instance.
        suite.controller.wait_passes("garbagecollection", 2, Duration::from_secs(60));
        assert_eq!(instance_ids_of(&s.nodes()), instances);
    });
}

#[test]
fn a_create_fleet_answer_lost_after_the_launch_is_answered_from_its_token_and_launches_once() {
    let (suite, _serial) = suite();
    let s = Scenario::create(suite, "lost");
    let before = suite.proxy.calls("CreateFleet").len();
    suite.proxy.add(Rule::new("CreateFleet", Fault::DropResponse).times(1));
    s.run(suite, || {
        s.deploy(1, "100m", "128Mi");
        s.wait_running(1, Duration::from_secs(150));
        let calls: Vec<_> = suite.proxy.calls("CreateFleet").into_iter().skip(before).collect();
        assert!(
            calls.iter().any(|c| c.fault == Some(Fault::DropResponse)),
            "the answer was dropped: {calls:?}"
        );
        // The SDK's retry carried the same ClientToken, which EC2 (and the emulator,
        // tests/cluster/moto_server.py) answers with the instance it already launched: one
        // instance ever, terminated ones included, and it is the Node's; nothing to collect.
        let ever = suite.controller.block_on(support::instances_ever(suite.moto.ec2(), &s.provisioner));
        assert_eq!(s.nodes().len(), 1, "one node for one pod");
        assert_eq!(ever, instance_ids_of(&s.nodes()), "one instance ever launched, the node's");
        assert_eq!(s.running(), 1);
    });
}

#[test]
fn a_dropped_then_slow_create_fleet_is_retried_with_its_token_and_launches_once() {
    let (suite, _serial) = suite();
    let s = Scenario::create(suite, "slow");
    let before = suite.proxy.calls("CreateFleet").len();
    suite.proxy.add(Rule::new("CreateFleet", Fault::DropRequest).times(1));
    suite
        .proxy
        .add(Rule::new("CreateFleet", Fault::Latency(Duration::from_secs(5))).times(1));
    s.run(suite, || {
        s.deploy(1, "100m", "128Mi");
        s.wait_running(1, Duration::from_secs(150));
        let calls: Vec<_> = suite.proxy.calls("CreateFleet").into_iter().skip(before).collect();
        let faults: Vec<_> = calls.iter().map(|c| c.fault.clone()).collect();
        assert_eq!(
            faults,
            [Some(Fault::DropRequest), Some(Fault::Latency(Duration::from_secs(5)))],
            "the dropped call retried once, answered late: {calls:?}"
        );
        assert_eq!(calls[0].params.get("ClientToken"), calls[1].params.get("ClientToken"), "one token");
        let nodes = s.nodes();
        assert_eq!(nodes.len(), 1);
        let live: BTreeSet<String> = s.instances(suite).into_iter().map(|i| i.id).collect();
        assert_eq!(live, instance_ids_of(&nodes));
    });
}

#[test]
fn insufficient_capacity_for_the_cheapest_offering_launches_the_next_one() {
    let (suite, _serial) = suite();
    let s = Scenario::create(suite, "ice");
    let refused = vec![
        ("t3.large".to_string(), "ap-northeast-2a".to_string()),
        ("t3.large".to_string(), "ap-northeast-2c".to_string()),
    ];
    suite
        .proxy
        .add(Rule::new("CreateFleet", Fault::InsufficientCapacity(refused.clone())).times(1));
    s.run(suite, || {
        s.deploy(1, "100m", "128Mi");
        s.wait_running(1, Duration::from_secs(150));
        let nodes = s.nodes();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].labels()["node.kubernetes.io/instance-type"], "t3.xlarge");
        // Explain says why the pod got the dearer type: the offerings without capacity, and when
        // launches try them again (the cache's 3 minutes).
        let pods: serde_json::Value =
            serde_json::from_str(&kubectl_ok(s.cluster, &["get", "pods", "-n", &s.namespace, "-o", "json"], None)).unwrap();
        let pod = format!("{}/{}", s.namespace, pods["items"][0]["metadata"]["name"].as_str().unwrap());
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
            .args(["explain", "pod", &pod, "-o", "json", "--controller", &suite.controller.metrics_url])
            .envs(&s.cluster.env)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let listed: BTreeSet<(String, String)> = answer["unavailableOfferings"]
            .as_array()
            .unwrap_or_else(|| panic!("offerings without capacity: {answer:#}"))
            .iter()
            .map(|u| (u["instanceType"].as_str().unwrap().to_string(), u["zone"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(listed, refused.iter().cloned().collect::<BTreeSet<_>>(), "{answer:#}");
        let until: jiff::Timestamp = answer["unavailableOfferings"][0]["until"].as_str().unwrap().parse().unwrap();
        let left = until.duration_since(jiff::Timestamp::now());
        assert!(left > jiff::SignedDuration::ZERO && left <= jiff::SignedDuration::from_mins(3), "{answer:#}");
    });
}

// The proxy's own pieces.

#[test]
fn fractions_hit_calls_evenly_and_rules_end_after_their_count() {
    let mut rule = Rule::new("CreateFleet", Fault::Throttle).fraction(0.5);
    let hits: Vec<bool> = (0..6).map(|_| support::fault_proxy::take(&mut rule)).collect();
    assert_eq!(hits, [true, false, true, false, true, false]);
    let mut rule = Rule::new("CreateFleet", Fault::Throttle).fraction(0.25);
    assert_eq!((0..8).filter(|_| support::fault_proxy::take(&mut rule)).count(), 2);
    let mut rule = Rule::new("CreateFleet", Fault::Throttle).times(1);
    assert!(support::fault_proxy::take(&mut rule));
    assert!(!support::fault_proxy::active(&rule, Instant::now()));
}

#[test]
fn refused_offerings_are_taken_out_of_create_fleet_and_the_rest_renumbered() {
    let form = support::fault_proxy::parse_form(
        b"Action=CreateFleet&ClientToken=t&LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName=lt%2Fa\
&LaunchTemplateConfigs.1.Overrides.1.InstanceType=t3.large&LaunchTemplateConfigs.1.Overrides.1.AvailabilityZone=ap-northeast-2a\
&LaunchTemplateConfigs.1.Overrides.2.InstanceType=t3.xlarge&LaunchTemplateConfigs.1.Overrides.2.AvailabilityZone=ap-northeast-2a",
    );
    assert_eq!(
        form["LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName"],
        "lt/a"
    );
    let refuse_large = [("t3.large".to_string(), "ap-northeast-2a".to_string())];
    let (kept, refused) = support::fault_proxy::without_offerings(&form, &refuse_large).unwrap();
    assert_eq!(refused, [("lt/a".into(), "t3.large".into(), "ap-northeast-2a".into(), "on-demand".into())]);
    let kept = support::fault_proxy::parse_form(kept.as_bytes());
    assert_eq!(kept["LaunchTemplateConfigs.1.Overrides.1.InstanceType"], "t3.xlarge");
    assert!(!kept.contains_key("LaunchTemplateConfigs.1.Overrides.2.InstanceType"));
    assert_eq!(kept["ClientToken"], "t");
    let refuse_both = [
        ("t3.large".to_string(), "ap-northeast-2a".to_string()),
        ("t3.xlarge".to_string(), "ap-northeast-2a".to_string()),
    ];
    let refused = support::fault_proxy::without_offerings(&form, &refuse_both).unwrap_err();
    assert_eq!(refused.len(), 2);
    assert_eq!(refused[0].0, "lt/a");

    // One launch template per max pods: a config whose overrides are all refused goes, and the
    // one left is config 1.
    let form = support::fault_proxy::parse_form(
        b"Action=CreateFleet&LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName=lt%2F35&LaunchTemplateConfigs.1.Overrides.1.InstanceType=t3.large&LaunchTemplateConfigs.1.Overrides.1.AvailabilityZone=ap-northeast-2a&LaunchTemplateConfigs.2.LaunchTemplateSpecification.LaunchTemplateName=lt%2F58&LaunchTemplateConfigs.2.Overrides.1.InstanceType=t3.xlarge&LaunchTemplateConfigs.2.Overrides.1.AvailabilityZone=ap-northeast-2a",
    );
    let (kept, _) = support::fault_proxy::without_offerings(&form, &refuse_large).unwrap();
    let kept = support::fault_proxy::parse_form(kept.as_bytes());
    assert_eq!(kept["LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName"], "lt/58");
    assert_eq!(kept["LaunchTemplateConfigs.1.Overrides.1.InstanceType"], "t3.xlarge");
    assert!(!kept.keys().any(|k| k.starts_with("LaunchTemplateConfigs.2.")), "{kept:?}");

    // The refused overrides join the errorSet of the answer for the rest, as EC2's instant
    // fleet reports them beside the instances it launched.
    let refused = [("lt/a".to_string(), "t3.large".to_string(), "ap-northeast-2a".to_string(), "on-demand".to_string())];
    for answer in [
        "<CreateFleetResponse><errorSet/><fleetInstanceSet><item/></fleetInstanceSet></CreateFleetResponse>",
        "<CreateFleetResponse><errorSet></errorSet><fleetInstanceSet><item/></fleetInstanceSet></CreateFleetResponse>",
        "<CreateFleetResponse><fleetInstanceSet><item/></fleetInstanceSet></CreateFleetResponse>",
    ] {
        let with = support::fault_proxy::with_errors(answer, &refused);
        assert_eq!(with.matches("<errorCode>InsufficientInstanceCapacity</errorCode>").count(), 1, "{with}");
        assert!(with.contains("<instanceType>t3.large</instanceType><availabilityZone>ap-northeast-2a</availabilityZone>"), "{with}");
        assert!(with.contains("<fleetInstanceSet><item/></fleetInstanceSet>"), "{with}");
    }
}

/// Runaway protection under faults, two Deployments of one replica at once, with consolidation
/// on, while the proxy throttles 30% of CreateFleet calls and fails 20% of DescribeInstances and
/// 30% of TerminateInstances calls:
/// - `evicted`: every node launched for it gets a NoExecute taint as it appears, which evicts
///   the pod; the ReplicaSet makes a new one;
/// - `rejected`: every pod of it bound to a node is failed as a kubelet failing admission fails
///   it (`OutOfcpu`); the ReplicaSet makes a new one. kwok runs no kubelet admission, so the
///   test marks the pods itself: a mock of the one part the local cluster cannot produce.
///
/// Neither may have more than 3 nodes at once or launch more than 10 in the window
/// (`KARPENTER_RS_RUNAWAY_SECONDS`, default 150; 300 is the 5 minutes of the bound). Afterwards
/// no instance is left without a Node.
#[test]
fn runaway_protection_holds_with_consolidation_under_ec2_faults_and_for_pods_the_kubelet_rejects() {
    let (suite, _serial) = suite();
    let window = Duration::from_secs(
        std::env::var("KARPENTER_RS_RUNAWAY_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(150),
    );
    let consolidating = |p: &mut serde_json::Value| {
        p["spec"].as_object_mut().unwrap().remove("ttlSecondsAfterEmpty");
        p["spec"]["consolidation"] = json!({"enabled": true});
    };
    let evicted = Scenario::create_with(suite, "evicted", consolidating);
    let rejected = Scenario::create_with(suite, "rejected", consolidating);
    let faults = [
        Rule::new("CreateFleet", Fault::Throttle).fraction(0.3),
        Rule::new("DescribeInstances", Fault::Status(500)).fraction(0.2),
        Rule::new("TerminateInstances", Fault::Status(503)).fraction(0.3),
    ];
    for rule in faults {
        suite.proxy.add(rule.for_duration(window));
    }
    let body = || {
        evicted.deploy(1, "100m", "128Mi");
        rejected.deploy(1, "100m", "128Mi");
        let chaos = json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "e2e.karpenter-rs/chaos", "value": "evict", "effect": "NoExecute"}}])
            .to_string();
        let rejection = json!({"status": {"phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected: Node didn't have enough resource: cpu"}})
            .to_string();
        let mut launched: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let mut most_at_once: BTreeMap<&str, usize> = BTreeMap::new();
        let started = Instant::now();
        while started.elapsed() < window {
            for s in [&evicted, &rejected] {
                let nodes = s.nodes();
                let most = most_at_once.entry(s.kind()).or_default();
                *most = (*most).max(nodes.len());
                launched.entry(s.kind()).or_default().extend(instance_ids_of(&nodes));
            }
            for node in evicted.nodes() {
                let tainted = node
                    .spec
                    .as_ref()
                    .and_then(|sp| sp.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "e2e.karpenter-rs/chaos"));
                if !tainted && node.metadata.deletion_timestamp.is_none() {
                    kubectl(
                        evicted.cluster,
                        &["patch", "node", &node.name_any(), "--type=json", "-p", &chaos],
                        None,
                    );
                }
            }
            for pod in rejected.pods() {
                let bound = pod.spec.as_ref().and_then(|sp| sp.node_name.as_ref()).is_some();
                let phase = pod.status.as_ref().and_then(|st| st.phase.as_deref());
                if bound && phase != Some("Failed") {
                    kubectl(
                        rejected.cluster,
                        &[
                            "patch",
                            "pod",
                            &pod.name_any(),
                            "-n",
                            &rejected.namespace,
                            "--subresource=status",
                            "--type=merge",
                            "-p",
                            &rejection,
                        ],
                        None,
                    );
                }
            }
            for (kind, most) in &most_at_once {
                assert!(*most <= 3, "{kind}: {most} nodes at once: {launched:?}");
            }
            for (kind, ids) in &launched {
                assert!(
                    ids.len() <= 10,
                    "{kind}: {} nodes launched in {:?}: {ids:?}",
                    ids.len(),
                    started.elapsed()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!("runaway under faults over {window:?}: launched {launched:?}, most at once {most_at_once:?}");
        assert!(launched["evicted"].len() >= 2, "the taint did evict: {launched:?}");
        let failed = rejected
            .pods()
            .iter()
            .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Failed"))
            .count();
        assert!(failed >= 1, "pods were rejected");
    };
    // Both scenarios are cleaned up (nodes drained, instances gone), whatever happened.
    evicted.run(suite, || rejected.run(suite, body));
}
