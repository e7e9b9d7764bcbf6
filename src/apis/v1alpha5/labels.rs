//! Well-known label keys, annotations, finalizers and the label-restriction rules of
//! `karpenter.sh` (core plus the AWS provider's additions). No I/O here.

/// The label every node launched by a Provisioner carries; never set by users.
pub const PROVISIONER_NAME_LABEL: &str = "karpenter.sh/provisioner-name";
/// Capacity type of a node: `on-demand` or `spot`.
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// Annotation recording when a node became empty.
pub const EMPTINESS_TIMESTAMP_ANNOTATION: &str = "karpenter.sh/emptiness-timestamp";
/// Annotation on pods that must not be evicted voluntarily.
pub const DO_NOT_EVICT_ANNOTATION: &str = "karpenter.sh/do-not-evict";
/// Annotation on nodes that consolidation must leave alone.
pub const DO_NOT_CONSOLIDATE_ANNOTATION: &str = "karpenter.sh/do-not-consolidate";
/// Karpenter v0.31's alias of both (the v1beta1 name, `core@v0.31.0:pkg/apis/v1beta1/labels.go`):
/// on a pod it is `do-not-evict`, on a node `do-not-consolidate`.
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "karpenter.sh/do-not-disrupt";

/// The opt-out annotation among `keys` that `annotations` sets to `"true"`, if any.
pub fn opted_out<'a>(annotations: Option<&std::collections::BTreeMap<String, String>>, keys: &[&'a str]) -> Option<&'a str> {
    let annotations = annotations?;
    keys.iter().copied().find(|k| annotations.get(*k).map(String::as_str) == Some("true"))
}
/// Tag on every launch template karpenter-rs creates, valued with the cluster name.
pub const LAUNCH_TEMPLATE_CLUSTER_TAG: &str = "karpenter.k8s.aws/cluster";
/// Label that takes a node out of external load balancers while it drains.
pub const EXCLUDE_FROM_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// Annotation naming the deprovisioning method that cordoned a node to remove it.
pub const VOLUNTARY_DISRUPTION_ANNOTATION: &str = "karpenter.sh/voluntary-disruption";
/// `karpenter.sh/initialized`: set to `"true"` once a launched node is Ready and its startup
/// taints are gone.
pub const INITIALIZED_LABEL: &str = "karpenter.sh/initialized";
/// Finalizer that makes every node we own drain and release its instance before it goes.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// Tag and selector key used for subnet and security-group discovery.
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";

/// `kubernetes.io/os`.
pub const OS_LABEL: &str = "kubernetes.io/os";
/// `kubernetes.io/arch`.
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// `kubernetes.io/hostname`.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// `node.kubernetes.io/instance-type`.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// `topology.kubernetes.io/zone`.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// `karpenter.k8s.aws/instance-category` (`c`, `m`, `r`, ...).
pub const INSTANCE_CATEGORY_LABEL: &str = "karpenter.k8s.aws/instance-category";
/// `karpenter.k8s.aws/instance-family` (`m5`, `t3`, ...).
pub const INSTANCE_FAMILY_LABEL: &str = "karpenter.k8s.aws/instance-family";
/// `karpenter.k8s.aws/instance-generation` (`5`, ...).
pub const INSTANCE_GENERATION_LABEL: &str = "karpenter.k8s.aws/instance-generation";
/// `karpenter.k8s.aws/instance-size`.
pub const INSTANCE_SIZE_LABEL: &str = "karpenter.k8s.aws/instance-size";
/// `karpenter.k8s.aws/instance-cpu`.
pub const INSTANCE_CPU_LABEL: &str = "karpenter.k8s.aws/instance-cpu";
/// `karpenter.k8s.aws/instance-memory` (MiB).
pub const INSTANCE_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-memory";
/// `karpenter.k8s.aws/instance-pods`.
pub const INSTANCE_PODS_LABEL: &str = "karpenter.k8s.aws/instance-pods";
/// `karpenter.k8s.aws/instance-hypervisor`.
pub const INSTANCE_HYPERVISOR_LABEL: &str = "karpenter.k8s.aws/instance-hypervisor";
/// `karpenter.k8s.aws/instance-encryption-in-transit-supported`.
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL: &str = "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// `karpenter.k8s.aws/instance-local-nvme` (GB).
pub const INSTANCE_LOCAL_NVME_LABEL: &str = "karpenter.k8s.aws/instance-local-nvme";
/// `karpenter.k8s.aws/instance-network-bandwidth` (Mbps).
pub const INSTANCE_NETWORK_BANDWIDTH_LABEL: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// `karpenter.k8s.aws/instance-gpu-name`.
pub const INSTANCE_GPU_NAME_LABEL: &str = "karpenter.k8s.aws/instance-gpu-name";
/// `karpenter.k8s.aws/instance-gpu-manufacturer`.
pub const INSTANCE_GPU_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// `karpenter.k8s.aws/instance-gpu-count`.
pub const INSTANCE_GPU_COUNT_LABEL: &str = "karpenter.k8s.aws/instance-gpu-count";
/// `karpenter.k8s.aws/instance-gpu-memory` (MiB).
pub const INSTANCE_GPU_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// `karpenter.k8s.aws/instance-accelerator-name`.
pub const INSTANCE_ACCELERATOR_NAME_LABEL: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// `karpenter.k8s.aws/instance-accelerator-manufacturer`.
pub const INSTANCE_ACCELERATOR_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// `karpenter.k8s.aws/instance-accelerator-count`.
pub const INSTANCE_ACCELERATOR_COUNT_LABEL: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// `karpenter.k8s.aws/instance-accelerator-name`, `-manufacturer`, `-count`.
pub const INSTANCE_ACCELERATOR_LABELS: [&str; 3] =
    [INSTANCE_ACCELERATOR_NAME_LABEL, INSTANCE_ACCELERATOR_MANUFACTURER_LABEL, INSTANCE_ACCELERATOR_COUNT_LABEL];

/// Capacity type values.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity type values.
pub const CAPACITY_TYPE_SPOT: &str = "spot";

/// Label domains users may not set labels or requirements in (the domain or any subdomain).
pub const RESTRICTED_LABEL_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.k8s.aws"];

/// Domains inside the restricted ones that users may use (exact match only).
pub const LABEL_DOMAIN_EXCEPTIONS: &[&str] = &["kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"];

/// karpenter-rs's annotation on the Nodes it launches: USD per hour of the offering the instance
/// was launched as, at launch (`0.0832`).
pub const PRICE_ANNOTATION: &str = "karpenter-rs.io/price-per-hour";
/// The extended resources (beyond the cpu, memory, pods and ephemeral storage every kubelet
/// reports) the pods a node was launched for request, as a JSON object of name to amount: what
/// the node must advertise before it counts as initialised (Karpenter v0.28+ keeps these in
/// its Machine's `spec.resources.requests`).
pub const REQUESTED_RESOURCES_ANNOTATION: &str = "karpenter-rs.io/requested-extended-resources";
/// The capacity type `PRICE_ANNOTATION` was priced for (`on-demand`, `spot`).
pub const PRICE_CAPACITY_TYPE_ANNOTATION: &str = "karpenter-rs.io/priced-capacity-type";
/// The zone `PRICE_ANNOTATION` was priced for.
pub const PRICE_ZONE_ANNOTATION: &str = "karpenter-rs.io/priced-zone";
/// The instance tag naming the configuration an instance was launched with
/// (`cloudprovider::LaunchIdentity::config`): a controller restarted before the instance's Node
/// existed adopts an instance whose tag matches what it would launch now, instead of launching
/// again.
pub const LAUNCH_CONFIG_TAG: &str = "karpenter-rs.io/launch-config";

/// Labels users may constrain although their domain is restricted.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    PROVISIONER_NAME_LABEL,
    ZONE_LABEL,
    REGION_LABEL,
    INSTANCE_TYPE_LABEL,
    ARCH_LABEL,
    OS_LABEL,
    CAPACITY_TYPE_LABEL,
    INSTANCE_HYPERVISOR_LABEL,
    INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL,
    INSTANCE_CATEGORY_LABEL,
    INSTANCE_FAMILY_LABEL,
    INSTANCE_GENERATION_LABEL,
    INSTANCE_SIZE_LABEL,
    INSTANCE_LOCAL_NVME_LABEL,
    INSTANCE_CPU_LABEL,
    INSTANCE_MEMORY_LABEL,
    INSTANCE_NETWORK_BANDWIDTH_LABEL,
    INSTANCE_PODS_LABEL,
    INSTANCE_GPU_NAME_LABEL,
    INSTANCE_GPU_MANUFACTURER_LABEL,
    INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_GPU_MEMORY_LABEL,
    INSTANCE_ACCELERATOR_NAME_LABEL,
    INSTANCE_ACCELERATOR_MANUFACTURER_LABEL,
    INSTANCE_ACCELERATOR_COUNT_LABEL,
    "node.kubernetes.io/windows-build",
];

/// Deprecated beta keys and the stable keys they mean.
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    ("failure-domain.beta.kubernetes.io/zone", ZONE_LABEL),
    ("failure-domain.beta.kubernetes.io/region", REGION_LABEL),
    ("beta.kubernetes.io/arch", ARCH_LABEL),
    ("beta.kubernetes.io/os", OS_LABEL),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE_LABEL),
];

/// The stable spelling of a label key (deprecated beta keys are mapped to their successors).
pub fn normalize(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(old, _)| *old == key)
        .map(|(_, new)| *new)
        .unwrap_or(key)
}

/// True when `key` is a deprecated beta key that `normalize` rewrites.
pub fn is_deprecated(key: &str) -> bool {
    NORMALIZED_LABELS.iter().any(|(old, _)| *old == key)
}

/// Why users may not set or constrain `key`, or `None` when they may.
pub fn restriction(key: &str) -> Option<String> {
    if WELL_KNOWN_LABELS.contains(&key) {
        return None;
    }
    let domain = key.split_once('/').map(|(d, _)| d).unwrap_or("");
    if LABEL_DOMAIN_EXCEPTIONS.contains(&domain) {
        return None;
    }
    RESTRICTED_LABEL_DOMAINS
        .iter()
        .find(|r| domain == **r || domain.ends_with(&format!(".{r}")))
        .map(|r| format!("label domain {domain:?} is restricted (it is or is under {r:?}); use a domain of your own or a well-known label"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricts_domains_and_subdomains_only() {
        assert!(restriction("kubernetes.io/foo").is_some());
        assert!(restriction("x.kubernetes.io/a").is_some());
        assert!(restriction("karpenter.sh/custom").is_some());
        assert!(restriction("sub.kops.k8s.io/x").is_some());
        assert!(restriction("notkubernetes.io/a").is_none());
        assert!(restriction("mykarpenter.sh/x").is_none());
        assert!(restriction("kops.k8s.io/x").is_none());
        assert!(restriction("node.kubernetes.io/lifecycle").is_none());
        assert!(restriction("kubernetes.io/arch").is_none());
        assert!(restriction("karpenter.sh/capacity-type").is_none());
        assert!(restriction("nodeType").is_none());
        assert!(restriction("karpenter.sh").is_none());
        assert!(restriction("kubernetes.io/hostname").is_some());
        assert!(restriction("karpenter.k8s.aws/instance-ami-id").is_some());
    }

    #[test]
    fn normalizes_beta_keys() {
        assert_eq!(normalize("beta.kubernetes.io/arch"), ARCH_LABEL);
        assert_eq!(normalize("failure-domain.beta.kubernetes.io/zone"), ZONE_LABEL);
        assert_eq!(normalize("nodeType"), "nodeType");
    }
}
