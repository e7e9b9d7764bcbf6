use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

use super::*;
use crate::apis::v1alpha5::labels::{
    DO_NOT_CONSOLIDATE_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION, INITIALIZED_LABEL, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, ZONE_LABEL,
};
use crate::apis::v1alpha5::Provisioner;
use crate::controllers::deprovisioning::VOLUNTARY_DISRUPTION_ANNOTATION;
use crate::scheduling::testing::{instance_type, pod, provisioner, ZONES};
use crate::scheduling::{ExistingNode, ProvisionerInput};

const SMALL: &str = "m5.large";
const MEDIUM: &str = "m5.xlarge";
const LARGE: &str = "m5.2xlarge";

fn at(seconds: i64) -> Timestamp {
    "2023-06-01T12:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_secs(seconds)
}

/// Provisioner `default`, consolidating, limited to the m5 sizes and the capacity types given.
fn consolidating(capacity_types: &[&str]) -> Provisioner {
    let mut p = provisioner("default")
        .requirement(INSTANCE_TYPE_LABEL, "In", &[SMALL, MEDIUM, LARGE])
        .requirement(CAPACITY_TYPE_LABEL, "In", capacity_types)
        .build();
    p.spec.consolidation = Some(crate::apis::v1alpha5::Consolidation { enabled: Some(true) });
    p
}

/// The node's instance type among `types`, as the controller looks it up.
fn type_of<'a>(types: &'a [Arc<InstanceType>], node: &Node) -> Option<&'a InstanceType> {
    let name = node.metadata.labels.as_ref()?.get(INSTANCE_TYPE_LABEL)?;
    types.iter().find(|it| it.name == *name).map(|it| &**it)
}

fn types() -> Vec<Arc<InstanceType>> {
    [SMALL, MEDIUM, LARGE].map(|n| Arc::new(instance_type(n))).to_vec()
}

/// A Ready, initialised node of Provisioner `default`.
fn node(name: &str, instance_type: &str, capacity_type: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "creationTimestamp": at(0).to_string(),
            "labels": {
                PROVISIONER_NAME_LABEL: "default",
                INITIALIZED_LABEL: "true",
                INSTANCE_TYPE_LABEL: instance_type,
                ZONE_LABEL: ZONES[0],
                CAPACITY_TYPE_LABEL: capacity_type,
                "kubernetes.io/hostname": name,
            },
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn on(mut p: Pod, node: &str) -> Pod {
    p.spec.as_mut().unwrap().node_name = Some(node.to_string());
    p.status = Some(serde_json::from_value(json!({"phase": "Running", "startTime": at(0).to_string()})).unwrap());
    p
}

fn bound(name: &str, cpu: &str, node: &str) -> Pod {
    on(pod(name).cpu(cpu).memory("256Mi").build(), node)
}

fn unbind(p: &Pod) -> Pod {
    let mut p = p.clone();
    p.spec.as_mut().unwrap().node_name = None;
    p
}

struct World {
    provisioner: Provisioner,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
}

impl World {
    fn new(provisioner: Provisioner) -> Self {
        World {
            provisioner,
            nodes: Vec::new(),
            pods: Vec::new(),
        }
    }

    fn with_node(mut self, name: &str, instance_type: &str, capacity_type: &str, pod_cpus: &[&str]) -> Self {
        self.nodes.push(node(name, instance_type, capacity_type));
        for (i, cpu) in pod_cpus.iter().enumerate() {
            self.pods.push(bound(&format!("{name}-p{i}"), cpu, name));
        }
        self
    }

    fn pods_of(&self, node: &str) -> Vec<Arc<Pod>> {
        self.pods
            .iter()
            .filter(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some(node))
            .map(|p| Arc::new(p.clone()))
            .collect()
    }

    fn cluster(&self) -> SimulationInput {
        let allocatable = |it: &str| instance_type(it).allocatable();
        SimulationInput {
            pods: Vec::new(),
            provisioners: vec![ProvisionerInput {
                provisioner: self.provisioner.clone(),
                instance_types: types(),
            }],
            nodes: self
                .nodes
                .iter()
                .map(|n| {
                    let mut e = ExistingNode::from_node(n, self.pods_of(n.metadata.name.as_deref().unwrap()));
                    let it = &n.metadata.labels.as_ref().unwrap()[INSTANCE_TYPE_LABEL];
                    e.allocatable = allocatable(it);
                    e.capacity = allocatable(it);
                    e
                })
                .collect(),
            daemonset_pods: Vec::new(),
            namespace_labels: BTreeMap::new(),
        }
    }

    fn candidates(&self) -> Vec<Candidate> {
        let types = types();
        let mut out: Vec<Candidate> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let pods = self.pods_of(n.metadata.name.as_deref().unwrap());
                let view = NodeView {
                    node: n,
                    pods: &pods,
                    provisioner: Some(&self.provisioner),
                    instance_type: type_of(&types, n),
                    nominated: false,
                    resuming: false,
                };
                candidate(view, &[], &unbind, at(600)).ok()
            })
            .collect();
        sort_candidates(&mut out);
        out
    }

    fn compute(&self, name: &str) -> Result<Command, Unconsolidatable> {
        let candidates = self.candidates();
        let c = candidates.iter().find(|c| c.name == name).expect("a candidate");
        compute(&self.cluster(), &[c])
    }
}

fn never() -> impl Fn() -> bool {
    || false
}

fn option_names(command: &Command) -> Vec<&str> {
    command
        .replacement()
        .expect("a replacement")
        .instance_type_options
        .iter()
        .map(|t| t.name.as_str())
        .collect()
}

#[test]
fn a_node_whose_pods_fit_elsewhere_is_deleted() {
    let world = World::new(consolidating(&["on-demand"]))
        .with_node("a", MEDIUM, "on-demand", &["1", "1"])
        .with_node("b", MEDIUM, "on-demand", &["1"]);
    let candidates = world.candidates();
    assert_eq!(candidates[0].name, "b", "fewest pods first");
    let (command, refused, timed_out) = single_node(&Simulator::new(&world.cluster()), &candidates, &never());
    let command = command.expect("b's pod fits on a");
    assert!(matches!(command.action, Action::Delete));
    assert_eq!(command.nodes, ["b"]);
    assert!(refused.is_empty() && !timed_out);
    assert_eq!(command.price_after, 0.0);
    assert!((command.price_before - 0.236).abs() < 1e-9);
    assert_eq!(command.pods.len(), 1);
}

#[test]
fn an_oversized_node_is_replaced_by_a_strictly_cheaper_one() {
    let world = World::new(consolidating(&["on-demand"])).with_node("a", LARGE, "on-demand", &["1"]);
    let (command, _, _) = single_node(&Simulator::new(&world.cluster()), &world.candidates(), &never());
    let command = command.expect("a 1-cpu pod does not need 8 cpus");
    assert_eq!(option_names(&command), [SMALL, MEDIUM], "only types strictly cheaper than the node");
    assert!((command.price_after - 0.118).abs() < 1e-9);
    assert!(
        command
            .describe()
            .starts_with("replace, terminating 1 node(s) a and replacing with an on-demand node from types m5.large, m5.xlarge"),
        "{}",
        command.describe()
    );
}

#[test]
fn the_cheapest_type_that_fits_is_kept() {
    let world = World::new(consolidating(&["on-demand"])).with_node("a", SMALL, "on-demand", &["1"]);
    let (command, refused, _) = single_node(&Simulator::new(&world.cluster()), &world.candidates(), &never());
    assert!(command.is_none());
    assert_eq!(refused.len(), 1);
    let (node, why) = &refused[0];
    assert_eq!(node, "a");
    // Karpenter's words, then what the node costs and what the cheapest replacement would.
    let price = world.candidates()[0].price;
    assert_eq!(
        why,
        &format!("can't replace with a cheaper node: ${price:.4}/h now, the cheapest replacement ${price:.4}/h")
    );
}

#[test]
fn pods_that_would_need_two_nodes_or_fit_nowhere_block() {
    let apart = |name: &str| {
        on(
            pod(name)
                .cpu("1")
                .label("app", "apart")
                .anti_affinity("kubernetes.io/hostname", &[("app", "apart")])
                .build(),
            "a",
        )
    };
    let mut world = World::new(consolidating(&["on-demand"])).with_node("a", LARGE, "on-demand", &[]);
    world.pods = vec![apart("x"), apart("y")];
    assert_eq!(world.compute("a").unwrap_err().to_string(), "can't remove without creating 2 nodes");
    let world = World::new(consolidating(&["on-demand"])).with_node("a", LARGE, "on-demand", &["7.5", "0.1"]);
    let mut cluster = world.cluster();
    cluster.provisioners.clear();
    let candidates = world.candidates();
    assert_eq!(
        compute(&cluster, &[&candidates[0]]).unwrap_err().to_string(),
        "not all pods would schedule"
    );
}

#[test]
fn pods_never_move_to_a_node_that_has_not_initialised() {
    let mut world = World::new(consolidating(&["on-demand"]))
        .with_node("a", MEDIUM, "on-demand", &["1"])
        .with_node("b", MEDIUM, "on-demand", &[]);
    world.nodes[1].metadata.labels.as_mut().unwrap().remove(INITIALIZED_LABEL);
    let err = world.compute("a").unwrap_err();
    assert_eq!(err, Unconsolidatable::UninitializedNode("b".into()));
    assert!(err.to_string().contains("non-initialized node b"), "{err}");
}

#[test]
fn spot_is_not_replaced_by_spot_and_on_demand_replacements_are_narrowed_to_spot() {
    let both = consolidating(&["spot", "on-demand"]);
    let world = World::new(both.clone()).with_node("a", LARGE, "spot", &["1"]);
    assert_eq!(
        world.compute("a").unwrap_err().to_string(),
        "can't replace a spot node with a spot node"
    );
    let world = World::new(both).with_node("a", LARGE, "on-demand", &["1"]);
    let command = world.compute("a").unwrap();
    assert_eq!(
        command.replacement().unwrap().requirements.get(CAPACITY_TYPE_LABEL),
        Some(&Requirement::in_values([CAPACITY_TYPE_SPOT]))
    );
    // A spot node may become on-demand when that is cheaper and spot is not allowed.
    let world = World::new(consolidating(&["on-demand"])).with_node("a", LARGE, "spot", &["1"]);
    assert_eq!(option_names(&world.compute("a").unwrap()), [SMALL]);
}

#[test]
fn worst_launch_price_is_the_highest_allowed_spot_price_else_on_demand() {
    let it = instance_type(LARGE);
    let spot = Requirements::new().with(CAPACITY_TYPE_LABEL, Requirement::in_values(["spot", "on-demand"]));
    let on_demand = Requirements::new().with(CAPACITY_TYPE_LABEL, Requirement::in_values(["on-demand"]));
    assert!((worst_launch_price(&it, &spot).unwrap() - 0.472 * 0.30).abs() < 1e-9);
    assert!((worst_launch_price(&it, &on_demand).unwrap() - 0.472).abs() < 1e-9);
}

#[test]
fn multi_node_deletes_the_longest_prefix_whose_pods_fit_on_the_rest() {
    let world = World::new(consolidating(&["on-demand"]))
        .with_node("a", MEDIUM, "on-demand", &["1"])
        .with_node("b", MEDIUM, "on-demand", &["1"])
        .with_node("c", MEDIUM, "on-demand", &["1"]);
    let (command, timed_out) = multi_node(&Simulator::new(&world.cluster()), &world.candidates(), &never());
    let command = command.expect("three 1-cpu pods fit on one m5.xlarge");
    assert!(!timed_out);
    // Removing all three would need an m5.xlarge, no cheaper than keeping c (filterOutSameType).
    assert!(matches!(command.action, Action::Delete));
    assert_eq!(command.nodes, ["a", "b"]);
}

#[test]
fn multi_node_replaces_several_nodes_with_one_cheaper_node() {
    let world = World::new(consolidating(&["on-demand"]))
        .with_node("a", LARGE, "on-demand", &["0.5"])
        .with_node("b", LARGE, "on-demand", &["0.5"]);
    let (command, _) = multi_node(&Simulator::new(&world.cluster()), &world.candidates(), &never());
    let command = command.expect("one small node holds both pods");
    assert_eq!(command.nodes, ["a", "b"]);
    assert_eq!(
        option_names(&command),
        [SMALL, MEDIUM],
        "no m5.2xlarge: as expensive as one of those removed"
    );
    assert!((command.price_before - 0.944).abs() < 1e-9);
}

#[test]
fn multi_node_stops_when_the_evaluation_times_out() {
    let world = World::new(consolidating(&["on-demand"]))
        .with_node("a", MEDIUM, "on-demand", &["1"])
        .with_node("b", MEDIUM, "on-demand", &["1"]);
    let (command, timed_out) = multi_node(&Simulator::new(&world.cluster()), &world.candidates(), &|| true);
    assert!(command.is_none() && timed_out);
}

#[test]
fn an_evaluation_tries_empty_then_multi_node_then_single_node() {
    let choose_in = |world: &World| choose(&world.cluster(), &world.candidates(), &never(), &never()).choice;
    let world = World::new(consolidating(&["on-demand"]))
        .with_node("a", MEDIUM, "on-demand", &[])
        .with_node("b", MEDIUM, "on-demand", &["1"])
        .with_node("c", MEDIUM, "on-demand", &["1"]);
    assert!(matches!(choose_in(&world), Choice::Empty(names) if names == ["a"]));
    let world = World::new(consolidating(&["on-demand"]))
        .with_node("b", MEDIUM, "on-demand", &["1"])
        .with_node("c", MEDIUM, "on-demand", &["1"])
        .with_node("d", MEDIUM, "on-demand", &["1"]);
    assert!(matches!(choose_in(&world), Choice::Command { multi: true, command } if command.nodes.len() == 2));
    let world = World::new(consolidating(&["on-demand"])).with_node("a", LARGE, "on-demand", &["1"]);
    assert!(matches!(choose_in(&world), Choice::Command { multi: false, command } if command.replacement().is_some()));
    let world = World::new(consolidating(&["on-demand"])).with_node("a", SMALL, "on-demand", &["1"]);
    assert!(matches!(choose_in(&world), Choice::Nothing { refused } if refused.len() == 1));
}

#[test]
fn empty_candidates_are_all_deleted_at_once() {
    let world = World::new(consolidating(&["on-demand"]))
        .with_node("a", MEDIUM, "on-demand", &[])
        .with_node("b", MEDIUM, "on-demand", &["1"])
        .with_node("c", SMALL, "on-demand", &[]);
    let mut names = empty(&world.candidates());
    names.sort();
    assert_eq!(names, ["a", "c"]);
}

#[test]
fn every_blocker_has_a_kind_for_the_metric() {
    for (why, kind) in [
        ("node is nominated for a pending pod", "nominated"),
        ("karpenter.sh/do-not-consolidate annotation exists", "opted_out"),
        ("karpenter.sh/do-not-disrupt annotation exists", "opted_out"),
        ("node is not initialized", "not_initialized"),
        ("pod default/pinned has do not evict annotation", "do_not_evict_pod"),
        ("pdb default/web prevents pod evictions", "pdb"),
        ("something new", "other"),
    ] {
        assert_eq!(blocker_kind(why), kind, "{why}");
    }
}

#[test]
fn a_candidate_needs_consolidation_an_initialised_node_and_no_opt_out() {
    let p = consolidating(&["on-demand"]);
    let types = types();
    let check = |n: &Node, provisioner: &Provisioner, nominated: bool, pods: &[Pod], pdbs: &[PodDisruptionBudget]| {
        let pods: Vec<Arc<Pod>> = pods.iter().cloned().map(Arc::new).collect();
        let view = NodeView {
            node: n,
            pods: &pods,
            provisioner: Some(provisioner),
            instance_type: type_of(&types, n),
            nominated,
            resuming: false,
        };
        candidate(view, pdbs, &unbind, at(600)).map(|c| c.name)
    };
    let blocked = |why: &str| Err(Ineligible::Blocked(why.to_string()));
    let n = node("a", MEDIUM, "on-demand");
    assert_eq!(check(&n, &p, false, &[], &[]), Ok("a".to_string()));
    let emptiness = provisioner("default").build();
    assert!(matches!(check(&n, &emptiness, false, &[], &[]), Err(Ineligible::Skip(_))));
    assert_eq!(check(&n, &p, true, &[], &[]), blocked("node is nominated for a pending pod"));
    let mut opted_out = n.clone();
    opted_out
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DO_NOT_CONSOLIDATE_ANNOTATION.into(), "true".into());
    assert_eq!(
        check(&opted_out, &p, false, &[], &[]),
        blocked("karpenter.sh/do-not-consolidate annotation exists")
    );
    opted_out
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(DO_NOT_CONSOLIDATE_ANNOTATION.into(), "false".into());
    assert_eq!(check(&opted_out, &p, false, &[], &[]), Ok("a".to_string()));
    // Karpenter v0.31's alias on a node.
    opted_out
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(DO_NOT_DISRUPT_ANNOTATION.into(), "true".into());
    assert_eq!(
        check(&opted_out, &p, false, &[], &[]),
        blocked("karpenter.sh/do-not-disrupt annotation exists")
    );
    let mut uninitialized = n.clone();
    uninitialized.metadata.labels.as_mut().unwrap().remove(INITIALIZED_LABEL);
    assert_eq!(check(&uninitialized, &p, false, &[], &[]), blocked("node is not initialized"));
    let mut pinned = bound("pinned", "1", "a");
    pinned
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("karpenter.sh/do-not-evict".into(), "true".into());
    assert_eq!(
        check(&n, &p, false, &[pinned], &[]),
        blocked("pod default/pinned has do not evict annotation")
    );
    // And on a pod.
    let mut pinned = bound("pinned", "1", "a");
    pinned
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DO_NOT_DISRUPT_ANNOTATION.into(), "true".into());
    assert_eq!(
        check(&n, &p, false, &[pinned], &[]),
        blocked("pod default/pinned has do not evict annotation")
    );
    let guarded = on(pod("web").cpu("1").label("app", "web").build(), "a");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    }))
    .unwrap();
    assert_eq!(
        check(&n, &p, false, &[guarded], &[pdb]),
        blocked("pdb default/web prevents pod evictions")
    );
    let mut replaced = n.clone();
    replaced
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(VOLUNTARY_DISRUPTION_ANNOTATION.into(), "consolidation".into());
    assert!(matches!(check(&replaced, &p, false, &[], &[]), Err(Ineligible::Skip(_))));
}

#[test]
fn a_node_that_just_received_a_pod_is_not_a_candidate() {
    let p = consolidating(&["on-demand"]);
    let types = types();
    let n = node("a", MEDIUM, "on-demand");
    let mut fresh = bound("web", "1", "a");
    fresh.status = Some(
        serde_json::from_value(json!({"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at(590).to_string()}
        ]}))
        .unwrap(),
    );
    let pods = [Arc::new(fresh)];
    let view = NodeView {
        node: &n,
        pods: &pods,
        provisioner: Some(&p),
        instance_type: type_of(&types, &n),
        nominated: false,
        resuming: false,
    };
    assert!(matches!(candidate(view, &[], &unbind, at(600)), Err(Ineligible::Skip(_))));
    assert!(candidate(view, &[], &unbind, at(606)).is_ok());
}

#[test]
fn disruption_cost_follows_deletion_cost_priority_and_lifetime() {
    let plain = bound("a", "1", "n");
    let mut costly = plain.clone();
    costly
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("controller.kubernetes.io/pod-deletion-cost".into(), format!("{}", 1i64 << 27));
    let mut important = plain.clone();
    important.spec.as_mut().unwrap().priority = Some(1 << 30);
    assert_eq!(disruption_cost(std::slice::from_ref(&plain)), 1.0);
    assert_eq!(disruption_cost(&[costly]), 2.0);
    assert_eq!(disruption_cost(&[important]), 10.0, "clamped");
    assert_eq!(disruption_cost(&[plain.clone(), plain]), 2.0);
    assert_eq!(lifetime_remaining(Some(at(0)), Some(100), at(25)), 0.75);
    assert_eq!(lifetime_remaining(Some(at(0)), Some(100), at(500)), 0.0);
    assert_eq!(lifetime_remaining(Some(at(0)), None, at(500)), 1.0);
}

#[test]
fn validation_needs_the_same_action_and_no_fewer_types() {
    let world = World::new(consolidating(&["on-demand"])).with_node("a", LARGE, "on-demand", &["1"]);
    let command = world.compute("a").unwrap();
    assert!(still_valid(&command, &world.compute("a")));
    assert!(!still_valid(&command, &Err(Unconsolidatable::PodsWouldNotSchedule)));
    // A node appeared that holds the pod: the replacement would now be a delete, which is
    // not what was planned; the next pass decides afresh.
    let world = world.with_node("b", MEDIUM, "on-demand", &[]);
    assert!(matches!(world.compute("a").unwrap().action, Action::Delete));
    assert!(!still_valid(&command, &world.compute("a")));
}

#[test]
fn an_unfinished_command_whose_nodes_started_deleting_meanwhile_is_not_released() {
    let marked = |name: &str| {
        let mut n = node(name, SMALL, "on-demand");
        n.metadata.annotations = Some(BTreeMap::from([(
            VOLUNTARY_DISRUPTION_ANNOTATION.to_string(),
            "consolidation".to_string(),
        )]));
        n
    };
    let (a, b) = (marked("a"), marked("b"));
    assert!(releasable(&[Some(&a), Some(&b)]));
    // The command deleted its nodes just before the pass began; the view learnt of it while
    // the pass took its snapshot.
    let mut deleting = b.clone();
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(1)));
    assert!(!releasable(&[Some(&a), Some(&deleting)]));
    // Or one of them is gone already.
    assert!(!releasable(&[Some(&a), None]));
}
