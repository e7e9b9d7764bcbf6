//! The `Provisioner` custom resource (karpenter.sh/v1alpha5): which nodes may be launched for
//! pending pods, and when they are removed. Plain data; the rules live in `validation.rs` and
//! `defaults.rs`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Provisioner decides which nodes may be launched for pending pods and when they are removed.
#[derive(CustomResource, Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha5",
    kind = "Provisioner",
    plural = "provisioners",
    status = "ProvisionerStatus",
    category = "karpenter",
    doc = "Provisioner decides which nodes may be launched for pending pods and when they are removed.",
    printcolumn = r#"{"name":"Template","type":"string","jsonPath":".spec.providerRef.name"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionerSpec {
    /// Annotations applied to every node this Provisioner launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels applied to every node this Provisioner launches. Pods select these nodes by them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Taints applied to every node this Provisioner launches; only pods that tolerate them run there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// Taints present when a node starts that a daemon is expected to remove. Pods need not tolerate
    /// them to be provisioned for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_taints: Option<Vec<Taint>>,
    /// Constraints on the nodes this Provisioner may launch (instance type, zone, capacity type,
    /// architecture, ...). Operators: In, NotIn, Exists, DoesNotExist, Gt, Lt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<Vec<NodeSelectorRequirement>>,
    /// Settings passed to the kubelet of every node this Provisioner launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_configuration: Option<KubeletConfiguration>,
    /// Inline AWS settings (subnetSelector, securityGroupSelector, ...). Mutually exclusive with
    /// providerRef; prefer an AWSNodeTemplate referenced by providerRef.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::apis::schema::deserialize_object"
    )]
    #[schemars(schema_with = "crate::apis::schema::preserve_unknown_object")]
    pub provider: Option<serde_json::Value>,
    /// Reference to the AWSNodeTemplate that holds this Provisioner's AWS settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_ref: Option<ProviderRef>,
    /// Seconds a node may stay empty of non-daemon pods before it is removed. Unset: never
    /// (karpenter-rs defaults it at admission unless consolidation is enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_empty: Option<i64>,
    /// Seconds after launch when a node expires and is replaced. Unset: never (karpenter-rs
    /// defaults it at admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_until_expired: Option<i64>,
    /// Upper bounds on the resources of all nodes this Provisioner has launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Priority among Provisioners that could serve the same pods: higher weights are tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Consolidation replaces or removes nodes whose pods fit elsewhere more cheaply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation: Option<Consolidation>,
}

/// Reference to the object that holds a Provisioner's cloud settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRef {
    /// API version of the referent (karpenter.k8s.aws/v1alpha1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent (AWSNodeTemplate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the referent.
    pub name: String,
}

/// Resource limits of a Provisioner.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Maximum total of each resource (cpu, memory, nvidia.com/gpu, ...) over this Provisioner's
    /// nodes; each a quantity string or a number.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::apis::schema::deserialize_quantity_map"
    )]
    #[schemars(schema_with = "crate::apis::schema::quantity_map")]
    pub resources: Option<BTreeMap<String, Quantity>>,
}

/// Consolidation settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Consolidation {
    /// Whether consolidation is on. Excludes ttlSecondsAfterEmpty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Kubelet settings of the nodes a Provisioner launches.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// IP addresses of the cluster DNS servers.
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Option::is_none")]
    pub cluster_dns: Option<Vec<String>>,
    /// Container runtime (containerd or dockerd), where the AMI supports a choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    /// Whether CPU CFS quota is enforced for containers that set CPU limits.
    #[serde(default, rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    pub cpu_cfs_quota: Option<bool>,
    /// Hard eviction thresholds by signal (memory.available, nodefs.available, ...): a percentage or a quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds by signal; each needs a grace period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    /// Grace periods (Go durations such as 1m30s) of the soft eviction thresholds, by signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Longest grace period, in seconds, granted to pods evicted by a soft threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percentage that always triggers image garbage collection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percentage below which image garbage collection never runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Resources reserved for Kubernetes system daemons (cpu, memory, ephemeral-storage, pid).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::apis::schema::deserialize_quantity_map"
    )]
    #[schemars(transform = crate::apis::schema::quantities_as_strings)]
    pub kube_reserved: Option<BTreeMap<String, Quantity>>,
    /// Resources reserved for OS system daemons (cpu, memory, ephemeral-storage, pid).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::apis::schema::deserialize_quantity_map"
    )]
    #[schemars(transform = crate::apis::schema::quantities_as_strings)]
    pub system_reserved: Option<BTreeMap<String, Quantity>>,
    /// Maximum number of pods per node, overriding the ENI-based limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// Maximum number of pods per CPU core; the lower of this and maxPods applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
}

/// Observed state of a Provisioner.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionerStatus {
    /// When this Provisioner last launched a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Total resources of the nodes this Provisioner has launched.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::apis::schema::deserialize_quantity_map"
    )]
    #[schemars(transform = crate::apis::schema::quantities_as_strings)]
    pub resources: Option<BTreeMap<String, Quantity>>,
    /// Conditions of this Provisioner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
}
