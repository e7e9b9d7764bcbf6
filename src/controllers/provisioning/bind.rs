//! Binding planned pods once their node is ready (differences.md item 10): the node is Ready, no
//! startup or not-ready taint is left, and it advertises every resource the pods requested; and
//! only the pods that still fit on it. The decisions are pure; `bind` is the one call that writes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::Api;

use crate::apis::quantity::parse_quantity;
use crate::scheduling::resources::pod_requests;
use crate::scheduling::Resources;

/// Taints the node lifecycle puts on a node that is not ready yet.
pub const EPHEMERAL_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
];

/// Whether pods planned for `node` may be bound to it now.
pub fn is_ready_for_pods(node: &Node, startup_taints: &[Taint], requested: &BTreeMap<String, f64>) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
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

/// Of the pods planned for `node`, in order, those that fit on it beside `on_node` (the pods
/// already bound to it; Succeeded and Failed ones hold nothing) and the ones taken before them.
/// The scheduler may have put other pending pods on the node since the plan was made (it binds
/// to any ready node with room), and the API server does not check a Binding against the
/// node's capacity: binding regardless would overcommit the node, and its kubelet would reject
/// the pod. A pod left out stays pending for the scheduler, on the node the others would have used.
pub fn bindable<'a>(node: &Node, on_node: &[Pod], planned: &[&'a Pod]) -> Vec<&'a Pod> {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let Some(Ok(allocatable)) = allocatable.map(Resources::from_quantities) else {
        return Vec::new();
    };
    let mut used = Resources::zero();
    for pod in on_node {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if !matches!(phase, Some("Succeeded") | Some("Failed")) {
            used.add(&pod_requests(pod));
        }
    }
    let mut taken = Vec::new();
    for pod in planned {
        let with_pod = used.plus(&pod_requests(pod));
        if with_pod.fits(&allocatable) {
            used = with_pod;
            taken.push(*pod);
        }
    }
    taken
}

/// What binding a pod did.
#[derive(Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// Bound by us.
    Bound,
    /// Already bound (by the scheduler, typically): nothing to do.
    AlreadyBound,
    /// The pod is gone.
    Gone,
}

/// Binds `pod` to `node` through the Binding subresource. A conflict because someone bound it
/// first, or a pod that no longer exists, is not an error.
pub async fn bind(pods: &Api<Pod>, pod: &str, node: &str) -> Result<BindOutcome, kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    let body = serde_json::to_vec(&binding).expect("a Binding serializes");
    match pods
        .create_subresource::<serde_json::Value>("binding", pod, &PostParams::default(), body)
        .await
    {
        Ok(_) => Ok(BindOutcome::Bound),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(BindOutcome::AlreadyBound),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(BindOutcome::Gone),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn ready(taints: serde_json::Value, allocatable: serde_json::Value) -> Node {
        node(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": allocatable}
        }))
    }

    fn pod_on(name: &str, cpu: &str, node: Option<&str>, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn binds_only_the_planned_pods_that_still_fit_beside_what_the_scheduler_put_there() {
        // A t3.xlarge planned for two 1500m pods; the scheduler already bound a third pod there.
        let node = ready(json!([]), json!({"cpu": "3920m", "memory": "14Gi", "pods": "58"}));
        let planned = [pod_on("x", "1500m", None, "Pending"), pod_on("y", "1500m", None, "Pending")];
        let planned: Vec<&Pod> = planned.iter().collect();
        let names = |pods: Vec<&Pod>| pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>();
        assert_eq!(names(bindable(&node, &[], &planned)), ["x", "y"]);
        let scheduled = [pod_on("z", "1500m", Some("n"), "Running")];
        assert_eq!(names(bindable(&node, &scheduled, &planned)), ["x"], "room for one more, not two");
        let full = [
            pod_on("z", "1500m", Some("n"), "Running"),
            pod_on("w", "1500m", Some("n"), "Pending"),
        ];
        assert!(bindable(&node, &full, &planned).is_empty());
        // Finished pods hold nothing.
        let finished = [
            pod_on("z", "1500m", Some("n"), "Succeeded"),
            pod_on("w", "1500m", Some("n"), "Failed"),
        ];
        assert_eq!(names(bindable(&node, &finished, &planned)), ["x", "y"]);
        // The pod count is a resource too.
        let one_pod = ready(json!([]), json!({"cpu": "3920m", "pods": "1"}));
        assert_eq!(names(bindable(&one_pod, &[], &planned)), ["x"]);
    }

    #[test]
    fn binds_once_ready_untainted_and_advertising() {
        let requested = BTreeMap::from([("cpu".to_string(), 0.5), ("nvidia.com/gpu".to_string(), 1.0)]);
        let startup = [Taint {
            key: "cni".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let service_taint = json!([{"key": "service", "value": "true", "effect": "NoSchedule"}]);
        assert!(is_ready_for_pods(
            &ready(service_taint.clone(), json!({"cpu": "2", "nvidia.com/gpu": "1"})),
            &startup,
            &requested
        ));
        assert!(
            !is_ready_for_pods(&ready(service_taint.clone(), json!({"cpu": "2"})), &startup, &requested),
            "GPU not registered yet"
        );
        assert!(
            !is_ready_for_pods(
                &ready(
                    json!([{"key": "cni", "effect": "NoSchedule"}]),
                    json!({"cpu": "2", "nvidia.com/gpu": "1"})
                ),
                &startup,
                &requested
            ),
            "startup taint left"
        );
        assert!(!is_ready_for_pods(
            &ready(
                json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
                json!({"cpu": "2", "nvidia.com/gpu": "1"})
            ),
            &startup,
            &requested
        ));
        let not_ready = node(
            json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "False"}], "allocatable": {"cpu": "2"}}}),
        );
        assert!(!is_ready_for_pods(&not_ready, &[], &BTreeMap::new()));
    }
}
