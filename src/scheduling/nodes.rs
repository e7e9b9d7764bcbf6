//! Nodes that already exist or are being launched (in-flight), as the simulation sees them:
//! labels, effective taints, allocatable and the pods bound to them. Existing capacity is used
//! before any new node is planned. No I/O here: the controller snapshots nodes and calls in.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Node, Pod, Taint};

use crate::apis::keys::{NOT_READY_TAINT_KEY, UNINITIALIZED_TAINT_KEY, UNREACHABLE_TAINT_KEY, UNSCHEDULABLE_TAINT_KEY};
use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha5::labels::{HOSTNAME_LABEL, INITIALIZED_LABEL, PROVISIONER_NAME_LABEL};

use super::instance_types::InstanceType;
use super::pods::{host_ports, is_daemonset_pod, is_terminal_or_terminating, HostPort, PodKey};
use super::requirements::{Requirement, Requirements};
use super::resources::{pod_requests, Resources};
use super::taints::same_taint;

/// The node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The node is cordoned (`spec.unschedulable`).
pub fn is_cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// The node is labelled `karpenter.sh/initialized=true`.
pub fn is_labelled_initialized(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(INITIALIZED_LABEL))
        .is_some_and(|v| v == "true")
}

/// Taints the node lifecycle puts on a node that is not ready yet.
pub const EPHEMERAL_TAINTS: &[&str] = &[NOT_READY_TAINT_KEY, UNREACHABLE_TAINT_KEY, UNINITIALIZED_TAINT_KEY];

/// Whether `node` is ready for pods: Ready, no startup (`startup_taints`) or not-ready taint
/// left, and advertising every resource in `requested` (what the binder binds planned pods to,
/// and what node lifecycle labels initialised).
pub fn is_ready_for_pods(node: &Node, startup_taints: &[Taint], requested: &BTreeMap<String, f64>) -> bool {
    let ready = is_ready(node);
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let blocked = taints
        .iter()
        .any(|t| EPHEMERAL_TAINTS.contains(&t.key.as_str()) || startup_taints.iter().any(|s| s.key == t.key && s.effect == t.effect));
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    let advertises = requested.iter().filter(|(_, amount)| **amount > 0.0).all(|(resource, _)| {
        allocatable
            .get(resource)
            .and_then(|q| parse_quantity(&q.0))
            .is_some_and(|v| v > 0.0)
    });
    ready && !blocked && advertises
}

/// A node pods may be placed on without launching anything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExistingNode {
    /// Node name (also its hostname unless the `kubernetes.io/hostname` label says otherwise).
    pub name: String,
    /// Node labels (zone, capacity type, provisioner name, custom labels...).
    pub labels: BTreeMap<String, String>,
    /// Node taints, as on the Node (or as planned, for an in-flight node).
    pub taints: Vec<Taint>,
    /// The owning Provisioner's startup taints: ignored while the node is not initialised.
    pub startup_taints: Vec<Taint>,
    /// False for an in-flight node (launched, not yet Ready and free of startup taints): its
    /// startup taints and the not-ready/unreachable NoSchedule taints are ignored.
    pub initialized: bool,
    /// Being deleted: receives no pods and does not count against limits.
    pub marked_for_deletion: bool,
    /// What pods may use. For an in-flight node whose kubelet has not reported yet, the
    /// controller passes the instance type's allocatable.
    pub allocatable: Resources,
    /// Everything the node has; counts against its Provisioner's limits.
    pub capacity: Resources,
    /// Pods bound to the node (DaemonSet pods included). Set before the node is first simulated:
    /// what they request is summed once.
    /// Shared with the cluster's cache: a pass reads them, never copies them.
    pub pods: Vec<Arc<Pod>>,
    /// `requested()`, summed on first use (consolidation simulates a node many times over).
    pub(crate) memo: Memo,
}

/// What a simulation reads from a node, computed on first use (consolidation simulates each
/// node many times over) and left out of comparisons (two nodes are equal whether or not either
/// has been simulated yet).
#[derive(Clone, Debug, Default)]
pub(crate) struct Memo {
    requested: OnceLock<Resources>,
    basis: OnceLock<Basis>,
}

/// The node as every simulation starts from it.
#[derive(Clone, Debug)]
pub(crate) struct Basis {
    /// Its labels as requirements, its hostname included.
    pub requirements: Requirements,
    /// `effective_taints()`.
    pub taints: Vec<Taint>,
    /// Requests of the DaemonSet pods running on it.
    pub running_daemons: Resources,
    /// Host ports its active pods hold.
    pub host_ports: Vec<HostPort>,
}

impl PartialEq for Memo {
    fn eq(&self, _: &Memo) -> bool {
        true
    }
}

impl ExistingNode {
    /// Reads a Node object and the pods bound to it. A node without the
    /// `karpenter.sh/provisioner-name` label counts as initialised; a Karpenter node only once it
    /// is labelled `karpenter.sh/initialized=true`. A cordoned node (`spec.unschedulable`) gets
    /// the `node.kubernetes.io/unschedulable:NoSchedule` taint if it lacks it. Startup taints are
    /// not on the Node object; set `startup_taints` from the Provisioner.
    pub fn from_node(node: &Node, pods: Vec<Arc<Pod>>) -> Self {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        let mut taints = spec.taints.unwrap_or_default();
        if spec.unschedulable == Some(true) && !taints.iter().any(|t| t.key == UNSCHEDULABLE_TAINT_KEY) {
            taints.push(Taint {
                key: UNSCHEDULABLE_TAINT_KEY.to_string(),
                effect: "NoSchedule".to_string(),
                ..Taint::default()
            });
        }
        let status = node.status.clone().unwrap_or_default();
        let resources = |list: Option<BTreeMap<String, _>>| {
            let mut r = Resources::zero();
            for (name, q) in list.unwrap_or_default() {
                let single: BTreeMap<String, _> = [(name, q)].into();
                if let Ok(one) = Resources::from_quantities(&single) {
                    r.add(&one);
                }
            }
            r
        };
        let owned = labels.contains_key(PROVISIONER_NAME_LABEL);
        ExistingNode {
            name: node.metadata.name.clone().unwrap_or_default(),
            initialized: !owned || is_labelled_initialized(node),
            labels,
            taints,
            startup_taints: Vec::new(),
            marked_for_deletion: node.metadata.deletion_timestamp.is_some(),
            allocatable: resources(status.allocatable),
            capacity: resources(status.capacity),
            pods,
            memo: Memo::default(),
        }
    }

    /// Until the node is initialised, what its instance type offers stands for what the kubelet
    /// reports (Karpenter's `state/node.go`): the Node is created without a status, and a kubelet
    /// that has just registered may not have every resource advertised yet.
    pub fn expect(&mut self, instance_type: &InstanceType) {
        if self.initialized {
            return;
        }
        self.capacity = instance_type.capacity.clone();
        self.allocatable = instance_type.allocatable();
    }

    /// The Provisioner that launched this node, from its label.
    pub fn provisioner(&self) -> Option<&str> {
        self.labels.get(PROVISIONER_NAME_LABEL).map(String::as_str)
    }

    /// The node's hostname: its `kubernetes.io/hostname` label, else its name.
    pub fn hostname(&self) -> &str {
        self.labels.get(HOSTNAME_LABEL).map_or(self.name.as_str(), String::as_str)
    }

    /// The taints pods must tolerate now: for an uninitialised node, startup taints and the
    /// not-ready/unreachable NoSchedule taints are left out (they are expected to go away).
    pub fn effective_taints(&self) -> Vec<Taint> {
        if self.initialized {
            return self.taints.clone();
        }
        let ephemeral = |t: &Taint| {
            (t.effect == "NoSchedule" && (t.key == NOT_READY_TAINT_KEY || t.key == UNREACHABLE_TAINT_KEY))
                || self.startup_taints.iter().any(|s| same_taint(s, t))
        };
        self.taints.iter().filter(|t| !ephemeral(t)).cloned().collect()
    }

    /// Pods that still hold resources on the node (not finished, not being deleted).
    pub fn active_pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.iter().map(|p| p.as_ref()).filter(|p| !is_terminal_or_terminating(p))
    }

    /// Sum of the requests of the active pods.
    pub fn requested(&self) -> Resources {
        self.memo
            .requested
            .get_or_init(|| {
                let mut r = Resources::zero();
                for p in self.active_pods() {
                    r.add(&pod_requests(p));
                }
                r
            })
            .clone()
    }

    /// What every simulation starts from for this node.
    pub(crate) fn basis(&self) -> &Basis {
        self.memo.basis.get_or_init(|| {
            let mut requirements = Requirements::from_labels(&self.labels);
            requirements.add(HOSTNAME_LABEL, Requirement::in_values([self.hostname().to_string()]));
            let mut running_daemons = Resources::zero();
            for p in self.active_pods().filter(|p| is_daemonset_pod(p)) {
                running_daemons.add(&pod_requests(p));
            }
            Basis {
                requirements,
                taints: self.effective_taints(),
                running_daemons,
                host_ports: self.active_pods().flat_map(host_ports).collect(),
            }
        })
    }

    /// allocatable − requested, never below zero.
    pub fn available(&self) -> Resources {
        self.allocatable.minus(&self.requested()).clamp_non_negative()
    }

    /// Keys of the pods on the node.
    pub fn pod_keys(&self) -> Vec<PodKey> {
        self.pods.iter().map(|p| PodKey::of(p)).collect()
    }
}

/// What `provisioner` uses: the capacity of its nodes that are not being deleted. This is what
/// `spec.limits.resources` bounds and `status.resources` reports.
pub fn provisioner_usage<'a>(nodes: impl IntoIterator<Item = &'a ExistingNode>, provisioner: &str) -> Resources {
    let mut usage = Resources::zero();
    for n in nodes
        .into_iter()
        .filter(|n| !n.marked_for_deletion && n.provisioner() == Some(provisioner))
    {
        usage.add(&n.capacity);
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::{node, pod, taint};

    #[test]
    fn an_uninitialised_node_offers_its_instance_type_until_then_what_the_kubelet_reports() {
        let t3 = crate::scheduling::testing::instance_type("t3.large");
        // Created by us without a status: nothing reported yet.
        let launched: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "labels": {"karpenter.sh/provisioner-name": "default", "node.kubernetes.io/instance-type": "t3.large"}}
        }))
        .unwrap();
        let mut n = ExistingNode::from_node(&launched, Vec::new());
        assert!(!n.initialized);
        assert!(n.allocatable.is_zero() && n.capacity.is_zero());
        n.expect(&t3);
        assert_eq!(n.allocatable, t3.allocatable());
        assert_eq!(n.capacity, t3.capacity);
        // Once initialised, the kubelet's figures stand.
        let mut ready = node("n", "1", "1Gi", 5);
        ready.expect(&t3);
        assert_eq!(ready.allocatable.get("pods"), 5);
    }

    #[test]
    fn ignores_startup_and_not_ready_taints_until_initialized() {
        let mut n = node("n1", "2", "4Gi", 10);
        n.taints = vec![
            taint("node.kubernetes.io/not-ready:NoSchedule"),
            taint("cilium/agent-not-ready=true:NoExecute"),
            taint("service=true:NoSchedule"),
        ];
        n.startup_taints = vec![taint("cilium/agent-not-ready=true:NoExecute")];
        n.initialized = false;
        let shown: Vec<String> = n.effective_taints().iter().map(crate::scheduling::taints::show_taint).collect();
        assert_eq!(shown, ["service=true:NoSchedule"]);
        n.initialized = true;
        assert_eq!(n.effective_taints().len(), 3);
    }

    #[test]
    fn available_subtracts_active_pods_only() {
        let mut n = node("n1", "2", "4Gi", 10);
        let mut done = pod("done").cpu("1").build();
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        n.pods = vec![Arc::new(pod("a").cpu("500m").memory("1Gi").build()), Arc::new(done)];
        assert_eq!(n.available().to_string(), "cpu=1500m, memory=3Gi, pods=9");
    }

    #[test]
    fn reads_a_node_object() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ip-10-0-0-1", "labels": {"karpenter.sh/provisioner-name": "service"}},
            "spec": {"unschedulable": true},
            "status": {"allocatable": {"cpu": "1830m", "memory": "6737Mi", "pods": "35"},
                       "capacity": {"cpu": "2", "memory": "7577Mi", "pods": "35"}}
        }))
        .expect("node decodes");
        let n = ExistingNode::from_node(&node, vec![]);
        assert!(!n.initialized);
        assert_eq!(n.provisioner(), Some("service"));
        assert_eq!(n.allocatable.to_string(), "cpu=1830m, memory=6737Mi, pods=35");
        assert_eq!(n.taints[0].key, UNSCHEDULABLE_TAINT_KEY);
        assert_eq!(n.hostname(), "ip-10-0-0-1");
    }

    fn ready_node(taints: serde_json::Value, allocatable: serde_json::Value) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": allocatable}
        }))
        .unwrap()
    }

    #[test]
    fn ready_for_pods_once_ready_untainted_and_advertising() {
        let requested = BTreeMap::from([("cpu".to_string(), 0.5), ("nvidia.com/gpu".to_string(), 1.0)]);
        let startup = [Taint {
            key: "cni".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let service_taint = serde_json::json!([{"key": "service", "value": "true", "effect": "NoSchedule"}]);
        assert!(is_ready_for_pods(
            &ready_node(service_taint.clone(), serde_json::json!({"cpu": "2", "nvidia.com/gpu": "1"})),
            &startup,
            &requested
        ));
        assert!(
            !is_ready_for_pods(
                &ready_node(service_taint.clone(), serde_json::json!({"cpu": "2"})),
                &startup,
                &requested
            ),
            "GPU not registered yet"
        );
        assert!(
            !is_ready_for_pods(
                &ready_node(
                    serde_json::json!([{"key": "cni", "effect": "NoSchedule"}]),
                    serde_json::json!({"cpu": "2", "nvidia.com/gpu": "1"})
                ),
                &startup,
                &requested
            ),
            "startup taint left"
        );
        assert!(!is_ready_for_pods(
            &ready_node(
                serde_json::json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
                serde_json::json!({"cpu": "2", "nvidia.com/gpu": "1"})
            ),
            &startup,
            &requested
        ));
        let not_ready: Node = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "False"}], "allocatable": {"cpu": "2"}}}),
        )
        .unwrap();
        assert!(!is_ready_for_pods(&not_ready, &[], &BTreeMap::new()));
    }
}
