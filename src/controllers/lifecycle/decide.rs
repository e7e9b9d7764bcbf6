//! Node lifecycle's decisions, pure: what to do about one node of ours that is not initialised
//! yet (`decide`), and the node annotation that records what its pods requested at launch.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};

use crate::apis::v1alpha5::labels::{PROVISIONER_NAME_LABEL, REQUESTED_RESOURCES_ANNOTATION};
use crate::scheduling::nodes::{is_labelled_initialized, is_ready, is_ready_for_pods};
use crate::scheduling::InstanceType;

/// The resources every kubelet reports when it registers.
const KUBELET_RESOURCES: &[&str] = &["cpu", "memory", "pods", "ephemeral-storage"];

/// `requested` (a launch's summed pod requests) without what every kubelet reports: the value of
/// the node's `REQUESTED_RESOURCES_ANNOTATION`.
pub fn requested_annotation(requested: &BTreeMap<String, f64>) -> String {
    let extended: BTreeMap<&String, &f64> = requested
        .iter()
        .filter(|(resource, amount)| !KUBELET_RESOURCES.contains(&resource.as_str()) && **amount > 0.0)
        .collect();
    serde_json::to_string(&extended).unwrap_or_else(|_| "{}".to_string())
}

/// The extended resources `node`'s pods requested at launch (`REQUESTED_RESOURCES_ANNOTATION`),
/// or None for a node launched before it was written (or whose value does not parse).
fn requested_at_launch(node: &Node) -> Option<BTreeMap<String, f64>> {
    let value = node.metadata.annotations.as_ref()?.get(REQUESTED_RESOURCES_ANNOTATION)?;
    serde_json::from_str(value).ok()
}

/// What to do about one node of ours that is not initialised yet.
#[derive(Clone, Debug, PartialEq)]
pub enum Lifecycle {
    /// Initialised already, not ours, or being deleted: nothing to do.
    Ignore,
    /// Still coming up, within the registration TTL.
    Wait,
    /// Ready, free of startup and not-ready taints, advertising what its instance type has.
    Initialize,
    /// Not Ready within the registration TTL of its creation.
    RegistrationFailed {
        /// How long it has existed.
        age: Duration,
    },
}

/// The decision for `node`: `startup_taints` are its Provisioner's. Every extended resource
/// the pods it was launched for requested (`REQUESTED_RESOURCES_ANNOTATION`) must be advertised,
/// as Karpenter v0.28+ checks, which holds GPU pods back until the device plugin has registered
/// while a GPU type launched for other pods initialises without it. A node launched before that
/// annotation was written needs every extended resource of its capacity (`instance_type`, the
/// catalogue's entry for its `node.kubernetes.io/instance-type` label when known), as Karpenter
/// v0.27 checks.
pub fn decide(
    node: &Node,
    startup_taints: &[Taint],
    instance_type: Option<&InstanceType>,
    registration_ttl: Duration,
    now: Timestamp,
) -> Lifecycle {
    let labels = node.metadata.labels.as_ref();
    let ours = labels.is_some_and(|l| l.contains_key(PROVISIONER_NAME_LABEL));
    if !ours || is_labelled_initialized(node) || node.metadata.deletion_timestamp.is_some() {
        return Lifecycle::Ignore;
    }
    // The kubelet reports cpu, memory, pods and ephemeral storage as it registers; extended
    // resources (GPUs, Neuron devices, pod ENIs) come later, from their device plugins.
    let mut expected = requested_at_launch(node).unwrap_or_else(|| {
        instance_type
            .map(|it| crate::cloudprovider::catalogue::requested(&it.capacity))
            .unwrap_or_default()
    });
    expected.retain(|resource, _| !KUBELET_RESOURCES.contains(&resource.as_str()));
    if is_ready_for_pods(node, startup_taints, &expected) {
        return Lifecycle::Initialize;
    }
    let age = node
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|c| Duration::try_from(now.duration_since(c.0)).ok())
        .unwrap_or_default();
    if !is_ready(node) && age > registration_ttl {
        Lifecycle::RegistrationFailed { age }
    } else {
        Lifecycle::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing;
    use serde_json::json;

    fn node(age_seconds: i64, labels: serde_json::Value, taints: serde_json::Value, status: serde_json::Value) -> (Node, Timestamp) {
        let created = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let node = serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": labels, "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"taints": taints},
            "status": status,
        }))
        .unwrap();
        (node, created + jiff::SignedDuration::from_secs(age_seconds))
    }

    const TTL: Duration = Duration::from_secs(15 * 60);

    #[test]
    fn initialised_once_ready_untainted_and_advertising_what_the_instance_type_has() {
        let ours = json!({"karpenter.sh/provisioner-name": "default", "node.kubernetes.io/instance-type": "g4dn.xlarge"});
        let ready =
            |allocatable: serde_json::Value| json!({"conditions": [{"type": "Ready", "status": "True"}], "allocatable": allocatable});
        let gpu = testing::instance_type("g4dn.xlarge");
        let startup = [Taint {
            key: "cni".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let all = json!({"cpu": "4", "memory": "15Gi", "pods": "29", "ephemeral-storage": "18Gi", "nvidia.com/gpu": "1"});
        let (n, now) = node(30, ours.clone(), json!([]), ready(all.clone()));
        assert_eq!(decide(&n, &startup, Some(&gpu), TTL, now), Lifecycle::Initialize);
        // The device plugin has not registered the GPU yet.
        let (n, now) = node(
            30,
            ours.clone(),
            json!([]),
            ready(json!({"cpu": "4", "memory": "15Gi", "pods": "29", "ephemeral-storage": "18Gi"})),
        );
        assert_eq!(decide(&n, &startup, Some(&gpu), TTL, now), Lifecycle::Wait);
        // A type without extended resources needs only what every kubelet reports.
        let t3 = testing::instance_type("t3.large");
        assert_eq!(decide(&n, &startup, Some(&t3), TTL, now), Lifecycle::Initialize);
        // A startup taint, or a not-ready taint, is still there.
        let (n, now) = node(
            30,
            ours.clone(),
            json!([{"key": "cni", "effect": "NoSchedule"}]),
            ready(all.clone()),
        );
        assert_eq!(decide(&n, &startup, Some(&gpu), TTL, now), Lifecycle::Wait);
        let (n, now) = node(
            30,
            ours.clone(),
            json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
            ready(all.clone()),
        );
        assert_eq!(decide(&n, &startup, Some(&gpu), TTL, now), Lifecycle::Wait);
        // Already labelled, or not ours: nothing to do.
        let mut labelled = ours.clone();
        labelled["karpenter.sh/initialized"] = json!("true");
        let (n, now) = node(30, labelled, json!([]), ready(all.clone()));
        assert_eq!(decide(&n, &startup, Some(&gpu), TTL, now), Lifecycle::Ignore);
        let (n, now) = node(30, json!({}), json!([]), ready(all));
        assert_eq!(decide(&n, &startup, Some(&gpu), TTL, now), Lifecycle::Ignore);
    }

    /// A node records what its pods requested at launch: a GPU type launched for pods without
    /// GPUs initialises before its device plugin registers; one launched for GPU pods waits.
    #[test]
    fn initialised_once_advertising_what_its_pods_requested_at_launch() {
        let gpu = testing::instance_type("g4dn.xlarge");
        let no_gpu_yet = json!({"conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "4", "memory": "15Gi", "pods": "29", "ephemeral-storage": "18Gi"}});
        let launched_for = |requested: &[(&str, f64)]| {
            let requested: BTreeMap<String, f64> = requested.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            let (mut n, now) = node(
                30,
                json!({"karpenter.sh/provisioner-name": "default"}),
                json!([]),
                no_gpu_yet.clone(),
            );
            n.metadata.annotations = Some(BTreeMap::from([(
                REQUESTED_RESOURCES_ANNOTATION.to_string(),
                requested_annotation(&requested),
            )]));
            (n, now)
        };
        let (n, now) = launched_for(&[("cpu", 2.0), ("memory", 1e9), ("pods", 3.0)]);
        assert_eq!(
            n.metadata.annotations.as_ref().unwrap()[REQUESTED_RESOURCES_ANNOTATION],
            "{}",
            "only extended resources are recorded"
        );
        assert_eq!(decide(&n, &[], Some(&gpu), TTL, now), Lifecycle::Initialize);
        let (n, now) = launched_for(&[("cpu", 2.0), ("nvidia.com/gpu", 1.0)]);
        assert_eq!(decide(&n, &[], Some(&gpu), TTL, now), Lifecycle::Wait);
    }

    #[test]
    fn a_node_not_ready_within_the_registration_ttl_fails_registration() {
        let ours = json!({"karpenter.sh/provisioner-name": "default"});
        let (n, now) = node(14 * 60, ours.clone(), json!([]), json!(null));
        assert_eq!(decide(&n, &[], None, TTL, now), Lifecycle::Wait);
        let (n, now) = node(15 * 60 + 1, ours.clone(), json!([]), json!(null));
        assert_eq!(
            decide(&n, &[], None, TTL, now),
            Lifecycle::RegistrationFailed {
                age: Duration::from_secs(15 * 60 + 1)
            }
        );
        // Ready but still waiting for a startup taint to go: registered, so not a liveness case.
        let startup = [Taint {
            key: "cni".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let (n, now) = node(
            20 * 60,
            ours,
            json!([{"key": "cni", "effect": "NoSchedule"}]),
            json!({"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "2"}}),
        );
        assert_eq!(decide(&n, &startup, None, TTL, now), Lifecycle::Wait);
    }
}
