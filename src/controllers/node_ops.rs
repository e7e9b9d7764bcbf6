//! Every write the controllers make to a Node, and the eviction of its pods: one way each, with
//! one rule for a node that is gone or was re-created under the same name.
//!
//! A Node's name is its instance's private DNS name, which EC2 reuses: a write meant for a node
//! that has since been deleted and re-created (another instance, the same name) must not reach
//! the new one. So every write here carries the UID of the Node it was decided on as a
//! precondition (a delete's `preconditions`, a patch's `metadata.uid`), and a node that is
//! gone (404) or is another node now (409) is `Gone`, not an error: the decision was about a
//! node that no longer exists.
//!
//! Used by provisioning (create), node lifecycle (label initialised, delete), deprovisioning
//! (cordon and mark, delete), termination (cordon, evict, the fresh list of a node's pods),
//! garbage collection and interruption.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};

use crate::apis::v1alpha5::labels::{EXCLUDE_FROM_LB_LABEL, VOLUNTARY_DISRUPTION_ANNOTATION};

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The node was written.
    Written,
    /// The node is gone, or a node of that name is another one now: nothing was written.
    Gone,
}

/// How a node is cordoned or uncordoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cordon<'a> {
    /// Cordoned for termination, and taken out of external load balancers.
    Terminating,
    /// Cordoned and marked with the deprovisioning method removing it (`expired`,
    /// `consolidation`, ...).
    Disrupting(&'a str),
    /// Uncordoned and the method's mark removed: a disruption that did not go ahead.
    Lift,
    /// Uncordoned, the mark kept: a drifted node not being replaced now.
    Uncordon,
}

impl Cordon<'_> {
    /// The merge patch.
    fn patch(self) -> serde_json::Value {
        match self {
            Cordon::Terminating => serde_json::json!({
                "metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "karpenter"}},
                "spec": {"unschedulable": true},
            }),
            Cordon::Disrupting(method) => serde_json::json!({
                "metadata": {"annotations": {VOLUNTARY_DISRUPTION_ANNOTATION: method}},
                "spec": {"unschedulable": true},
            }),
            Cordon::Lift => serde_json::json!({
                "metadata": {"annotations": {VOLUNTARY_DISRUPTION_ANNOTATION: null}},
                "spec": {"unschedulable": null},
            }),
            Cordon::Uncordon => serde_json::json!({"spec": {"unschedulable": null}}),
        }
    }
}

/// `patch` with `uid` written as `metadata.uid`: the API server refuses it (422, naming
/// metadata.uid) when the node of that name has another UID.
fn with_uid(mut patch: serde_json::Value, uid: Option<&str>) -> serde_json::Value {
    if let Some(uid) = uid {
        patch["metadata"]["uid"] = serde_json::json!(uid);
    }
    patch
}

/// The node is gone (404), or the name is another node's now: a delete's UID precondition fails
/// with 409, a patch writing the old UID with 422 "metadata.uid: ... field is immutable".
fn gone(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => {
            status.code == 404 || status.code == 409 || (status.code == 422 && status.message.contains("metadata.uid"))
        }
        _ => false,
    }
}

fn outcome<T>(result: Result<T, kube::Error>) -> Result<Written, kube::Error> {
    match result {
        Ok(_) => Ok(Written::Written),
        Err(e) if gone(&e) => Ok(Written::Gone),
        Err(e) => Err(e),
    }
}

/// Cordons or uncordons `node` as `how` says, if it is still the node it was.
pub async fn cordon(client: &Client, node: &Node, how: Cordon<'_>) -> Result<Written, kube::Error> {
    merge_patch(client, node, how.patch()).await
}

/// Sets (`Some`) or removes (`None`) annotations of `node`, if it is still the node it was.
pub async fn annotate(client: &Client, node: &Node, annotations: &[(&str, Option<&str>)]) -> Result<Written, kube::Error> {
    let mut patch = serde_json::json!({"metadata": {"annotations": {}}});
    for (key, value) in annotations {
        patch["metadata"]["annotations"][*key] = serde_json::json!(value);
    }
    merge_patch(client, node, patch).await
}

/// Sets labels of `node` (initialisation's `karpenter.sh/initialized`), if it is still the node it was.
pub async fn label(client: &Client, node: &Node, labels: &[(&str, &str)]) -> Result<Written, kube::Error> {
    let mut patch = serde_json::json!({"metadata": {"labels": {}}});
    for (key, value) in labels {
        patch["metadata"]["labels"][*key] = serde_json::json!(value);
    }
    merge_patch(client, node, patch).await
}

/// Creates `node` for the instance `provider_id`. A Node of that name that already exists is
/// fine when it is this instance's (a create retried after a lost answer) and an error when it
/// is another instance's (EC2 reuses private addresses, and with them names).
pub async fn create(client: &Client, node: &Node, provider_id: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.create(&PostParams::default(), node).await {
        Err(kube::Error::Api(e)) if e.code == 409 => match nodes.get(&node.name_any()).await {
            Ok(existing) if existing.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id) => Ok(()),
            Ok(_) => Err(kube::Error::Api(e)),
            Err(source) => Err(source),
        },
        other => other.map(|_| ()),
    }
}

/// Applies a merge patch to `node`, with its UID as the precondition.
async fn merge_patch(client: &Client, node: &Node, patch: serde_json::Value) -> Result<Written, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = with_uid(patch, node.uid().as_deref());
    outcome(nodes.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await)
}

/// Deletes `node` (its finalizer hands it to termination), if it is still the node it was.
pub async fn delete(client: &Client, node: &Node) -> Result<Written, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let params = DeleteParams {
        preconditions: node.uid().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    outcome(nodes.delete(&node.name_any(), &params).await)
}

/// Removes `finalizer` from `node` and nothing else. The JSON patch carries the node's UID and
/// tests that the finalizer is still where `node` had it: a list changed meanwhile (another
/// finalizer added or removed) fails the patch as an error, and the next pass retries on a fresh
/// view. `Gone` when the node is gone or another node has its name, or `node` has no such
/// finalizer.
pub async fn release_finalizer(client: &Client, node: &Node, finalizer: &str) -> Result<Written, kube::Error> {
    let Some(index) = node.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(Written::Gone);
    };
    let mut ops = vec![
        serde_json::json!({"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer}),
        serde_json::json!({"op": "remove", "path": format!("/metadata/finalizers/{index}")}),
    ];
    if let Some(uid) = node.uid() {
        // Not a `test`: a failed test is one generic 422, while a different UID written over
        // the node's is refused naming metadata.uid (`Gone`); the same UID changes nothing.
        ops.insert(0, serde_json::json!({"op": "replace", "path": "/metadata/uid", "value": uid}));
    }
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).expect("a JSON patch of these operations is well-formed");
    let nodes: Api<Node> = Api::all(client.clone());
    let patched = nodes
        .patch(&node.name_any(), &PatchParams::default(), &Patch::<()>::Json(patch))
        .await;
    outcome(patched)
}

/// What an eviction did.
#[derive(Debug)]
pub enum Evicted {
    /// The pod is being deleted (or was gone already).
    Evicted,
    /// A PodDisruptionBudget does not allow it now (429), with the API server's message.
    Refused(String),
    /// Any other failure.
    Failed(kube::Error),
}

/// Evicts one pod through the `policy/v1` Eviction subresource (PodDisruptionBudgets apply).
pub async fn evict(client: &Client, namespace: &str, name: &str) -> Evicted {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match pods.evict(name, &EvictParams::default()).await {
        Ok(_) => Evicted::Evicted,
        Err(kube::Error::Api(e)) if e.code == 404 => Evicted::Evicted,
        Err(kube::Error::Api(e)) if e.code == 429 => Evicted::Refused(e.message),
        Err(e) => Evicted::Failed(e),
    }
}

/// The pods bound to the node called `name`, read from the API server (not the cluster view,
/// which may not have seen a pod bound a moment ago): the check before a node goes.
pub async fn pods_on(client: &Client, name: &str) -> Result<Vec<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    Ok(pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
        .await?
        .items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_cordon_patch_carries_the_nodes_uid_as_its_precondition() {
        assert_eq!(
            with_uid(Cordon::Terminating.patch(), Some("u1")),
            json!({"metadata": {"uid": "u1", "labels": {EXCLUDE_FROM_LB_LABEL: "karpenter"}}, "spec": {"unschedulable": true}})
        );
        assert_eq!(
            with_uid(Cordon::Disrupting("expired").patch(), Some("u1")),
            json!({"metadata": {"uid": "u1", "annotations": {VOLUNTARY_DISRUPTION_ANNOTATION: "expired"}}, "spec": {"unschedulable": true}})
        );
        assert_eq!(
            with_uid(Cordon::Lift.patch(), None),
            json!({"metadata": {"annotations": {VOLUNTARY_DISRUPTION_ANNOTATION: null}}, "spec": {"unschedulable": null}})
        );
        // Uncordoning keeps the mark (a drifted node not replaced now), and still names the UID.
        assert_eq!(
            with_uid(Cordon::Uncordon.patch(), Some("u1")),
            json!({"metadata": {"uid": "u1"}, "spec": {"unschedulable": null}})
        );
    }
}
