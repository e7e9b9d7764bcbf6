//! What kind of pod a pod is, as every controller asks it: finished, leaving, owned by a
//! DaemonSet, the mirror of a static pod. Pure.

use k8s_openapi::api::core::v1::Pod;

/// The kubelet's annotation on the API mirror of a static pod.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Succeeded or Failed.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Has a deletionTimestamp.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn owned_by(pod: &Pod, kind: &str) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == kind)
}

/// Owned by a DaemonSet.
pub fn is_daemonset_pod(pod: &Pod) -> bool {
    owned_by(pod, "DaemonSet")
}

/// The API mirror of a static pod (owned by its Node, or annotated by the kubelet).
pub fn is_mirror_pod(pod: &Pod) -> bool {
    owned_by(pod, "Node")
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}
