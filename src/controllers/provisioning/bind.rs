//! Binding planned pods once their node is ready (differences.md item 10): the node is Ready, no
//! startup or not-ready taint is left, and it advertises every resource the pods requested. The
//! decision is pure; `bind` is the one call that writes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::Api;

use crate::apis::quantity::parse_quantity;

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
