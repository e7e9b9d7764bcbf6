//! The label names of the metrics, and the values of the labels whose values are bounded
//! constants.

use crate::apis::v1alpha5::labels::WELL_KNOWN_LABELS;

/// `result` label values of admission requests.
pub mod result {
    /// Allowed without changes.
    pub const ALLOWED: &str = "allowed";
    /// Allowed with a patch of defaults.
    pub const PATCHED: &str = "patched";
    /// Denied: the object breaks a rule.
    pub const DENIED: &str = "denied";
    /// The AdmissionReview itself could not be read.
    pub const INVALID: &str = "invalid";
}

/// `reason` label values of `karpenter_nodes_terminated`; the deprovisioning methods also name
/// the `action` of `karpenter_deprovisioning_actions_performed` (`<method>/delete`).
pub mod reason {
    /// Empty for `ttlSecondsAfterEmpty`.
    pub const EMPTINESS: &str = "emptiness";
    /// Older than `ttlSecondsUntilExpired`.
    pub const EXPIRATION: &str = "expiration";
    /// Removed (or replaced by a cheaper node) by consolidation.
    pub const CONSOLIDATION: &str = "consolidation";
    /// Replaced (or removed) because it no longer matches its Provisioner or AWSNodeTemplate.
    pub const DRIFT: &str = "drift";
    /// Its instance is gone.
    pub const GARBAGE_COLLECTED: &str = "garbage_collected";
    /// Not Ready within the registration TTL (Karpenter v0.28's machine liveness).
    pub const LIVENESS: &str = "liveness";
}

/// The label names of `karpenter_pods_state`, in order.
pub const POD_STATE_LABELS: [&str; 10] = [
    "name",
    "namespace",
    "owner",
    "node",
    "provisioner",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
];

/// The label names of the `karpenter_nodes_*` resource gauges (`allocatable`,
/// `total_pod_requests`, ...), in order: `resource_type`, `node_name`, `provisioner`, `phase`, then
/// one per well-known node label, named after the key's last path segment in snake case
/// (`topology.kubernetes.io/zone` → `zone`), as Karpenter names them
/// (`core@v0.31.0:pkg/controllers/metrics/node/controller.go`).
pub fn node_label_names() -> Vec<String> {
    let mut names: Vec<String> = ["resource_type", "node_name", "provisioner", "phase"].map(String::from).to_vec();
    names.extend(WELL_KNOWN_LABELS.iter().map(|key| node_label_name(key)));
    names
}

/// `karpenter.k8s.aws/instance-gpu-count` → `instance_gpu_count`.
pub fn node_label_name(key: &str) -> String {
    key.rsplit('/').next().unwrap_or(key).to_lowercase().replace('-', "_")
}

/// The label names of `karpenter_rs_node_price_per_hour`: the node gauges' without
/// `resource_type`.
pub fn node_price_label_names() -> Vec<String> {
    node_label_names().into_iter().skip(1).collect()
}
