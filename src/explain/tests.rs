//! The explanations against small clusters built in memory: each blocker and state gets its
//! reason, the removal simulation agrees with consolidation's command, each rule that excludes a
//! pending pod is named.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

use super::node::Destination;
use super::render::{render, Format};
use super::*;
use crate::apis::v1alpha5::labels::{
    CAPACITY_TYPE_LABEL, EMPTINESS_TIMESTAMP_ANNOTATION, INITIALIZED_LABEL, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, ZONE_LABEL,
};
use crate::controllers::deprovisioning::consolidation;
use crate::scheduling::testing::{instance_type, pod, provisioner, ZONES};
use crate::scheduling::{ExistingNode, InstanceType, ProvisionerInput};

const SMALL: &str = "m5.large";
const LARGE: &str = "m5.2xlarge";

fn at(seconds: i64) -> Timestamp {
    "2023-06-01T12:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_secs(seconds)
}

/// Provisioner `default` over m5.large and m5.2xlarge on-demand, consolidating or not.
fn default(consolidate: bool) -> Provisioner {
    let mut p = provisioner("default")
        .requirement(INSTANCE_TYPE_LABEL, "In", &[SMALL, LARGE])
        .requirement(CAPACITY_TYPE_LABEL, "In", &["on-demand"])
        .build();
    if consolidate {
        p.spec.consolidation = Some(crate::apis::v1alpha5::Consolidation { enabled: Some(true) });
    }
    p
}

fn types() -> Vec<Arc<InstanceType>> {
    [SMALL, LARGE].map(|n| Arc::new(instance_type(n))).to_vec()
}

fn node(name: &str, instance_type: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "creationTimestamp": at(0).to_string(),
            "labels": {
                PROVISIONER_NAME_LABEL: "default",
                INITIALIZED_LABEL: "true",
                INSTANCE_TYPE_LABEL: instance_type,
                ZONE_LABEL: ZONES[0],
                CAPACITY_TYPE_LABEL: "on-demand",
                "kubernetes.io/hostname": name,
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn bound(name: &str, cpu: &str, node: &str) -> Pod {
    let mut p = pod(name).cpu(cpu).memory("256Mi").label("app", name).build();
    p.spec.as_mut().unwrap().node_name = Some(node.to_string());
    p.status = Some(serde_json::from_value(json!({"phase": "Running", "startTime": at(0).to_string()})).unwrap());
    p
}

/// A pod the scheduler found no node for.
fn unschedulable(mut p: Pod) -> Pod {
    p.status = Some(
        serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]}))
        .unwrap(),
    );
    p
}

fn unbind(p: &Pod) -> Pod {
    let mut p = p.clone();
    p.spec.as_mut().unwrap().node_name = None;
    p
}

/// A cluster in memory: the Provisioner, its nodes (with their types) and pods.
struct Cluster {
    provisioner: Arc<Provisioner>,
    nodes: Vec<StateNode>,
    pods: Vec<Arc<Pod>>,
    pdbs: Vec<PodDisruptionBudget>,
    input: SimulationInput,
    unavailable: Vec<(OfferingId, Timestamp)>,
}

impl Cluster {
    fn new(provisioner: Provisioner, nodes: &[(&str, &str)], pods: Vec<Pod>) -> Cluster {
        let pods: Vec<Arc<Pod>> = pods.into_iter().map(Arc::new).collect();
        let types = types();
        let nodes: Vec<StateNode> = nodes
            .iter()
            .map(|(name, it)| StateNode {
                node: Arc::new(node(name, it)),
                pods: pods
                    .iter()
                    .filter(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some(name))
                    .cloned()
                    .collect(),
                nominated: false,
                instance_type: types.iter().find(|t| t.name == *it).cloned(),
            })
            .collect();
        let input = SimulationInput {
            pods: Vec::new(),
            provisioners: vec![ProvisionerInput {
                provisioner: provisioner.clone(),
                instance_types: types.clone(),
            }],
            nodes: nodes
                .iter()
                .map(|n| {
                    let mut e = ExistingNode::from_node(&n.node, n.pods.clone());
                    let it = n.instance_type.as_ref().unwrap();
                    e.allocatable = it.allocatable();
                    e.capacity = it.allocatable();
                    e
                })
                .collect(),
            daemonset_pods: Vec::new(),
            namespace_labels: BTreeMap::new(),
        };
        Cluster {
            provisioner: Arc::new(provisioner),
            nodes,
            pods,
            pdbs: Vec::new(),
            input,
            unavailable: Vec::new(),
        }
    }

    fn answer(&self, question: Question) -> Result<Explanation, String> {
        let provisioners = [self.provisioner.clone()];
        let world = World {
            nodes: &self.nodes,
            provisioners: &provisioners,
            pods: &self.pods,
            pdbs: &self.pdbs,
            input: &self.input,
            unavailable: &self.unavailable,
            prepare: &unbind,
            nomination: SignedDuration::from_secs(20),
            drift_enabled: true,
            now: at(600),
        };
        question.answer(&world)
    }

    fn node(&self, name: &str) -> NodeExplanation {
        match self.answer(Question::Node(name.to_string())).unwrap() {
            Explanation::Node(n) => n,
            other => panic!("{other:?}"),
        }
    }

    fn pod(&self, name: &str) -> PodExplanation {
        let question = Question::Pod {
            namespace: "default".to_string(),
            name: name.to_string(),
        };
        match self.answer(question).unwrap() {
            Explanation::Pod(p) => p,
            other => panic!("{other:?}"),
        }
    }
}

fn method<'a>(n: &'a NodeExplanation, name: &str) -> &'a node::Method {
    n.methods.iter().find(|m| m.method == name).unwrap()
}

#[test]
fn removing_a_node_moves_its_pods_where_consolidation_would_and_prices_the_cluster() {
    let cluster = Cluster::new(
        default(true),
        &[("a", SMALL), ("b", SMALL)],
        vec![bound("one", "500m", "a"), bound("two", "500m", "b")],
    );
    let a = cluster.node("a");
    let price = instance_type(SMALL)
        .offerings
        .iter()
        .find(|o| o.zone == ZONES[0] && o.capacity_type == "on-demand")
        .unwrap()
        .price;
    assert_eq!(a.price_per_hour, Some(price));
    assert_eq!(a.removal.moves.len(), 1);
    assert_eq!(a.removal.moves[0].pod, "default/one");
    assert_eq!(a.removal.moves[0].to, Destination::Node { name: "b".to_string() });
    assert!(a.removal.every_pod_placed);
    assert!((a.removal.cluster_price_before - 2.0 * price).abs() < 1e-9);
    assert!((a.removal.cluster_price_after - price).abs() < 1e-9);
    // The decision is consolidation's own command for the node.
    let c = method(&a, "consolidation");
    assert!(c.acts, "{c:?}");
    let candidates: Vec<consolidation::Candidate> = cluster
        .nodes
        .iter()
        .filter_map(|n| {
            let view = consolidation::NodeView {
                node: &n.node,
                pods: &n.pods,
                provisioner: Some(&cluster.provisioner),
                instance_type: n.instance_type.as_deref(),
                nominated: false,
                resuming: false,
            };
            consolidation::candidate(view, &[], &unbind, at(600)).ok()
        })
        .collect();
    let command = consolidation::compute(&cluster.input, &[candidates.iter().find(|c| c.name == "a").unwrap()]).unwrap();
    assert_eq!(c.state, format!("would {}, if it still holds when checked again 15s later", command.describe()));
    assert!(a.summary.starts_with("consolidation: would delete"), "{}", a.summary);
    assert!(
        a.reason().starts_with("consolidation would delete it (pods fit elsewhere)"),
        "{}",
        a.reason()
    );
}

#[test]
fn a_node_kept_by_a_do_not_evict_pod_and_a_pdb_names_both_in_consolidations_words() {
    let mut guarded = bound("guarded", "500m", "a");
    guarded.metadata.annotations = Some([("karpenter.sh/do-not-evict".to_string(), "true".to_string())].into());
    let mut cluster = Cluster::new(
        default(true),
        &[("a", SMALL), ("b", SMALL)],
        vec![guarded, bound("web", "500m", "a"), bound("two", "500m", "b")],
    );
    cluster.pdbs.push(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
        }))
        .unwrap(),
    );
    let a = cluster.node("a");
    let c = method(&a, "consolidation");
    assert!(!c.acts);
    assert_eq!(c.state, "blocked: pod default/guarded has do not evict annotation");
    assert_eq!(
        c.blockers,
        [
            "pod default/guarded has do not evict annotation",
            "pdb default/web prevents pod evictions"
        ]
    );
    assert!(a.summary.contains("do not evict"), "{}", a.summary);
    assert_eq!(a.reason(), "consolidation: pod default/guarded has do not evict annotation");
}

#[test]
fn a_node_a_replacement_would_not_make_cheaper_says_both_prices() {
    let cluster = Cluster::new(default(true), &[("a", SMALL)], vec![bound("one", "500m", "a")]);
    let a = cluster.node("a");
    let c = method(&a, "consolidation");
    assert!(!c.acts);
    let price = a.price_per_hour.unwrap();
    assert_eq!(
        c.state,
        format!("kept: can't replace with a cheaper node: ${price:.4}/h now, the cheapest replacement ${price:.4}/h")
    );
    assert_eq!(
        a.reason(),
        format!("can't replace with a cheaper node: ${price:.4}/h now, the cheapest replacement ${price:.4}/h")
    );
    assert_eq!(
        a.removal.moves[0].to,
        Destination::NewNode {
            instance_type: SMALL.to_string(),
            price_per_hour: price
        }
    );
}

#[test]
fn emptiness_and_expiry_say_when() {
    let mut p = default(false);
    p.spec.ttl_seconds_after_empty = Some(30);
    p.spec.ttl_seconds_until_expired = Some(86_400);
    let mut cluster = Cluster::new(p, &[("a", SMALL)], vec![]);
    let mut empty = (*cluster.nodes[0].node).clone();
    empty
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(EMPTINESS_TIMESTAMP_ANNOTATION.to_string(), at(590).to_string());
    cluster.nodes[0].node = Arc::new(empty);
    let a = cluster.node("a");
    let e = method(&a, "emptiness");
    assert!(e.acts);
    assert_eq!(e.state, format!("empty: deleted at {:.0}", at(620)));
    assert_eq!(method(&a, "expiration").state, format!("expires at {:.0} (in 23h 50m)", at(86_400)));
    assert_eq!(
        method(&a, "consolidation").state,
        "off: its Provisioner does not set consolidation.enabled"
    );
    assert!(a.summary.starts_with("emptiness: empty: deleted at"), "{}", a.summary);
    assert_eq!(a.reason(), format!("empty: deleted at {:.0}", at(620)));
    let text = render(&Explanation::Node(a), Format::Text, false);
    assert!(
        text.contains("METHOD") && text.contains("Removing it") && text.contains("no pod would move"),
        "{text}"
    );
}

#[test]
fn a_pending_pod_gets_the_rule_each_provisioner_excludes_it_by() {
    let tainted = provisioner("tainted")
        .taint("dedicated=gpu:NoSchedule")
        .requirement(INSTANCE_TYPE_LABEL, "In", &[SMALL])
        .build();
    let mut cluster = Cluster::new(default(false), &[("a", SMALL)], vec![bound("busy", "1500m", "a")]);
    cluster.input.provisioners.push(ProvisionerInput {
        provisioner: tainted,
        instance_types: types(),
    });
    let huge = unschedulable(pod("huge").cpu("64").build());
    let fits = unschedulable(pod("fits").cpu("100m").build());
    let fresh = pod("fresh").cpu("100m").build();
    cluster.pods.extend([huge, fits, fresh].map(Arc::new));
    let huge = cluster.pod("huge");
    let by: BTreeMap<&str, &pod::Verdict> = huge.provisioners.iter().map(|v| (v.provisioner.as_str(), v)).collect();
    assert_eq!(by["tainted"].outcome, "incompatible");
    assert!(by["tainted"].reason.contains("dedicated=gpu:NoSchedule"), "{:?}", by["tainted"]);
    assert_eq!(by["default"].outcome, "no_room");
    assert!(huge.summary.starts_with("unschedulable: "), "{}", huge.summary);
    let fits = cluster.pod("fits");
    assert_eq!(fits.summary, "fits on node a: the scheduler places it there");
    let fresh = cluster.pod("fresh");
    assert!(
        fresh
            .summary
            .starts_with("not provisioned for yet: the scheduler has not marked it unschedulable"),
        "{}",
        fresh.summary
    );
}

#[test]
fn a_pod_a_provisioner_limit_excludes_gets_the_figures() {
    let mut limited = default(false);
    limited.spec.limits = Some(serde_json::from_value(json!({"resources": {"cpu": "2"}})).unwrap());
    let mut cluster = Cluster::new(limited, &[("a", SMALL)], vec![bound("busy", "1500m", "a")]);
    cluster.pods.push(Arc::new(unschedulable(pod("more").cpu("1").build())));
    let more = cluster.pod("more");
    let verdict = &more.provisioners[0];
    assert_eq!(verdict.outcome, "limits", "{more:?}");
    assert!(verdict.reason.contains("(cpu: limit 2, "), "{}", verdict.reason);
    assert!(
        verdict.reason.contains(" left; the smallest type, m5.large, has 2)"),
        "{}",
        verdict.reason
    );
    assert!(more.summary.contains("exceed provisioner limits (cpu: limit 2"), "{}", more.summary);
}

#[test]
fn a_pod_whose_offerings_had_no_capacity_says_until_when() {
    let mut cluster = Cluster::new(default(false), &[], Vec::new());
    let offering = |t: &str, zone: &str, capacity_type: &str| OfferingId {
        instance_type: t.to_string(),
        zone: zone.to_string(),
        capacity_type: capacity_type.to_string(),
    };
    cluster.unavailable = vec![
        (offering(SMALL, ZONES[0], "on-demand"), at(700)),
        (offering(LARGE, ZONES[1], "on-demand"), at(650)),
        // Neither the Provisioner (on-demand only) nor its types (m5) allow these.
        (offering(SMALL, ZONES[0], "spot"), at(640)),
        (offering("c5.large", ZONES[0], "on-demand"), at(640)),
    ];
    cluster.pods.push(Arc::new(unschedulable(pod("web").cpu("100m").build())));
    // Other offerings still launch: the cached ones are listed, soonest retried first.
    let web = cluster.pod("web");
    let listed: Vec<(&str, &str, String)> = web
        .unavailable_offerings
        .iter()
        .map(|u| (u.instance_type.as_str(), u.zone.as_str(), u.until.to_string()))
        .collect();
    assert_eq!(
        listed,
        [(LARGE, ZONES[1], at(650).to_string()), (SMALL, ZONES[0], at(700).to_string())]
    );
    let text = render(&Explanation::Pod(web), Format::Text, false);
    assert!(
        text.contains("No capacity  on-demand m5.2xlarge in ap-northeast-2b (insufficient capacity at the last launch), retried from 2023-06-01T12:10:50Z"),
        "{text}"
    );
    // With every offering unavailable, the Provisioner's refusal says when launches try again.
    for t in &mut cluster.input.provisioners[0].instance_types {
        for o in &mut Arc::make_mut(t).offerings {
            o.available = false;
        }
    }
    let web = cluster.pod("web");
    assert_eq!(web.provisioners[0].outcome, "no_offering", "{web:?}");
    assert!(
        web.provisioners[0]
            .reason
            .ends_with("; 2 offering(s) it could use had no capacity at the last launch, retried from 2023-06-01T12:10:50Z"),
        "{}",
        web.provisioners[0].reason
    );
}

#[test]
fn a_running_pod_shows_its_nodes_type_and_what_it_would_get_alone() {
    let cluster = Cluster::new(default(false), &[("a", LARGE)], vec![bound("web", "500m", "a")]);
    let web = cluster.pod("web");
    assert_eq!(web.node.as_deref(), Some("a"));
    assert_eq!(web.node_type.as_ref().unwrap().instance_type, LARGE);
    assert_eq!(web.cheapest_types[0].instance_type, SMALL);
    assert!(
        web.summary.starts_with(&format!("Running on node a ({LARGE} at $")),
        "{}",
        web.summary
    );
    assert!(
        web.summary.contains(&format!("on its own today it would get {SMALL} at")),
        "{}",
        web.summary
    );
    // What tools read.
    let json: serde_json::Value = serde_json::from_str(&render(&Explanation::Pod(web), Format::Json, false)).unwrap();
    assert_eq!(json["kind"], "pod");
    assert_eq!(json["node"], "a");
}

#[test]
fn an_unknown_node_or_pod_is_named() {
    let cluster = Cluster::new(default(false), &[("a", SMALL)], vec![]);
    assert_eq!(cluster.answer(Question::Node("x".into())).unwrap_err(), "node x not found");
    let question = Question::Pod {
        namespace: "ns".into(),
        name: "p".into(),
    };
    assert_eq!(cluster.answer(question).unwrap_err(), "pod ns/p not found");
}
