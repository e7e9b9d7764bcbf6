//! One node as every controller sees it (Karpenter's `StateNode`,
//! `core@v0.27.0:pkg/controllers/state/statenode.go`): the Node, the pods bound to it that have
//! not finished, whether a provisioning pass nominated it, and the instance type it was launched
//! as (what it offers until it has initialised, and its price). The pods are grouped by node once
//! per read of the view, here, and nowhere else.
//!
//! `group` is pure (the nominations and the instance types are passed in); `Cluster::nodes_view`
//! calls it on the watches' caches.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use crate::apis::v1alpha5::labels::{INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, VOLUNTARY_DISRUPTION_ANNOTATION};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::catalogue::TypeCache;
use crate::scheduling::instance_types::InstanceType;
use crate::scheduling::nodes::{is_labelled_initialized, ExistingNode};
use crate::scheduling::pods::is_terminal;

/// A node with what the controllers need to know about it.
#[derive(Clone, Debug)]
pub struct StateNode {
    /// The Node as the watch last saw it.
    pub node: Arc<Node>,
    /// The pods bound to it that have not finished (`Succeeded` and `Failed` ones are left out:
    /// they hold no resources and need no drain).
    pub pods: Vec<Arc<Pod>>,
    /// A provisioning pass expects pods to land on it soon (Karpenter's nomination).
    pub nominated: bool,
    /// For a node of ours, its instance type as its Provisioner's catalogue translates it: what
    /// it offers before it has initialised, and what it costs.
    pub instance_type: Option<Arc<InstanceType>>,
}

impl StateNode {
    /// The node's name.
    pub fn name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or_default()
    }

    /// The Provisioner that launched it, for a node of ours.
    pub fn provisioner(&self) -> Option<&str> {
        self.node.labels().get(PROVISIONER_NAME_LABEL).map(String::as_str)
    }

    /// Being deleted (the termination finalizer drains it).
    pub fn deleting(&self) -> bool {
        self.node.metadata.deletion_timestamp.is_some()
    }

    /// Cordoned by a deprovisioning command that is replacing or deleting it.
    pub fn disrupting(&self) -> bool {
        self.node.annotations().contains_key(VOLUNTARY_DISRUPTION_ANNOTATION)
    }

    /// Karpenter's `MarkedForDeletion`: being deleted, or a command of ours is removing it.
    pub fn marked_for_deletion(&self) -> bool {
        self.deleting() || self.disrupting()
    }

    /// Initialised: a node not of ours always; one of ours once it carries
    /// `karpenter.sh/initialized`.
    pub fn initialized(&self) -> bool {
        self.provisioner().is_none() || is_labelled_initialized(&self.node)
    }

    /// The node as the scheduling simulation sees it: its pods, its Provisioner's startup taints,
    /// and, until it has initialised, what its instance type offers
    /// (`core@v0.27.0:pkg/controllers/state/node.go` `Allocatable`).
    pub fn existing(&self, provisioners: &[Arc<Provisioner>]) -> ExistingNode {
        let mut existing = ExistingNode::from_node(&self.node, self.pods.clone());
        if let Some(p) = self
            .provisioner()
            .and_then(|owner| provisioners.iter().find(|p| p.name_any() == owner))
        {
            existing.startup_taints = p.spec.startup_taints.clone().unwrap_or_default();
        }
        if !existing.initialized {
            if let Some(it) = &self.instance_type {
                existing.expect(it);
            }
        }
        existing
    }
}

/// Every node of `nodes` with the unfinished pods of `pods` bound to it, whether `nominated`, and
/// its instance type from `types`. Pure.
pub fn group(nodes: &[Arc<Node>], pods: &[Arc<Pod>], nominated: impl Fn(&str) -> bool, types: &TypeCache) -> Vec<StateNode> {
    let mut by_node: HashMap<&str, Vec<Arc<Pod>>> = HashMap::new();
    for pod in pods {
        if is_terminal(pod) {
            continue;
        }
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) {
            by_node.entry(node).or_default().push(pod.clone());
        }
    }
    nodes
        .iter()
        .map(|node| {
            let name = node.name_any();
            let labels = node.labels();
            let instance_type = labels
                .get(PROVISIONER_NAME_LABEL)
                .zip(labels.get(INSTANCE_TYPE_LABEL))
                .and_then(|(p, it)| types.instance_type(p, it));
            StateNode {
                pods: by_node.remove(name.as_str()).unwrap_or_default(),
                nominated: nominated(&name),
                instance_type,
                node: node.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::apis::v1alpha1::AwsProvider;
    use crate::cloudprovider::catalogue::test_info;
    use crate::cloudprovider::{KubernetesVersion, NodeTemplate};
    use crate::scheduling::testing::{pod, provisioner};
    use crate::scheduling::NodeSettings;

    fn node(name: &str, labels: serde_json::Value) -> Arc<Node> {
        Arc::new(serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": labels}})).unwrap())
    }

    fn bound(name: &str, node: &str, phase: &str) -> Arc<Pod> {
        let mut p = pod(name).cpu("1").build();
        p.spec.as_mut().unwrap().node_name = Some(node.to_string());
        p.status.get_or_insert_with(Default::default).phase = Some(phase.to_string());
        Arc::new(p)
    }

    /// A cache holding `service`'s translation of t3.large.
    fn types() -> TypeCache {
        let template = NodeTemplate::from_provider(&AwsProvider::default(), "c", KubernetesVersion { major: 1, minor: 33 }).unwrap();
        let mut cache = TypeCache::default();
        cache.set_catalogue(vec![test_info("t3.large", 0.0832)]);
        cache.instance_types(
            &provisioner("service").build(),
            &template,
            &BTreeSet::from(["ap-northeast-2a".to_string()]),
            "ap-northeast-2",
            &NodeSettings::default(),
        );
        cache
    }

    #[test]
    fn each_node_gets_its_unfinished_pods_its_nomination_and_its_instance_type() {
        let ours = serde_json::json!({PROVISIONER_NAME_LABEL: "service", INSTANCE_TYPE_LABEL: "t3.large"});
        let nodes = [node("a", ours.clone()), node("b", serde_json::json!({})), node("c", ours)];
        let pods = [
            bound("running", "a", "Running"),
            bound("done", "a", "Succeeded"),
            bound("failed", "a", "Failed"),
            bound("pending-on-b", "b", "Pending"),
            Arc::new(pod("unbound").build()),
            bound("elsewhere", "gone", "Running"),
        ];
        let view = group(&nodes, &pods, |n| n == "c", &types());
        let names = |n: &StateNode| n.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>();
        assert_eq!(view.iter().map(StateNode::name).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(names(&view[0]), ["running"], "finished pods hold nothing");
        assert_eq!(names(&view[1]), ["pending-on-b"]);
        assert!(names(&view[2]).is_empty());
        assert_eq!(view.iter().map(|n| n.nominated).collect::<Vec<_>>(), [false, false, true]);
        assert_eq!(view[0].instance_type.as_ref().map(|it| it.name.as_str()), Some("t3.large"));
        assert!(view[1].instance_type.is_none(), "not a node of ours");
        assert_eq!(view[0].provisioner(), Some("service"));
        assert!(view[1].initialized(), "a node not of ours is initialised");
        assert!(!view[0].initialized());
    }

    #[test]
    fn a_node_that_has_not_initialised_offers_what_its_type_does_and_then_what_it_reports() {
        let labels = serde_json::json!({PROVISIONER_NAME_LABEL: "service", INSTANCE_TYPE_LABEL: "t3.large"});
        let fresh = node("fresh", labels.clone());
        let mut labels = labels;
        labels["karpenter.sh/initialized"] = "true".into();
        let ready = node("ready", labels);
        let view = group(&[fresh, ready], &[], |_| false, &types());
        let provisioners = [Arc::new(provisioner("service").build())];
        let expected = view[0].existing(&provisioners);
        assert!(!expected.initialized);
        assert_eq!(expected.allocatable, view[0].instance_type.as_ref().unwrap().allocatable());
        let reported = view[1].existing(&provisioners);
        assert!(reported.initialized);
        assert_eq!(
            reported.allocatable,
            crate::scheduling::Resources::zero(),
            "what its status reports: nothing yet"
        );
    }

    #[test]
    fn deletion_and_a_command_of_ours_both_mark_a_node_for_deletion() {
        let mut deleting: Node = (*node("d", serde_json::json!({}))).clone();
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        let mut disrupting: Node = (*node("x", serde_json::json!({}))).clone();
        disrupting.metadata.annotations = Some([(VOLUNTARY_DISRUPTION_ANNOTATION.to_string(), "expired".to_string())].into());
        let view = group(
            &[Arc::new(deleting), Arc::new(disrupting), node("k", serde_json::json!({}))],
            &[],
            |_| false,
            &TypeCache::default(),
        );
        assert_eq!(
            view.iter()
                .map(|n| (n.deleting(), n.disrupting(), n.marked_for_deletion()))
                .collect::<Vec<_>>(),
            [(true, false, true), (false, true, true), (false, false, false)]
        );
    }
}
