//! A launch and what it gives: the options a launch may take (`InstanceOption`), everything
//! needed to launch one node (`LaunchRequest`, `LaunchIdentity`), and the launched `Instance` with
//! the mapping between instances and Nodes' provider IDs.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Taint;

use crate::apis::v1alpha5::KubeletConfiguration;

use super::{NodeTemplate, OfferingInfo};

/// One (instance type, zone, capacity type) the controller is willing to launch, with its price.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceOption {
    /// `t3.large`.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
}

impl InstanceOption {
    /// The offering `offering` of the instance type `instance_type`.
    pub fn of(instance_type: &str, offering: &OfferingInfo) -> InstanceOption {
        InstanceOption {
            instance_type: instance_type.to_string(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type.clone(),
            price: offering.price,
        }
    }
}

/// Everything needed to launch one node.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRequest {
    /// The Provisioner the node is for (tags, `Name`).
    pub provisioner_name: String,
    /// A name for the node, used in the `Name` tag when given.
    pub node_name: Option<String>,
    /// The Provisioner's AWS settings.
    pub template: NodeTemplate,
    /// What may be launched, cheapest first (the order is kept; see `aws/instance.rs`).
    pub instance_options: Vec<InstanceOption>,
    /// Node labels for the kubelet (provisioner labels + `karpenter.sh/provisioner-name` + custom
    /// requirement labels); `karpenter.sh/capacity-type` is added at launch.
    pub labels: BTreeMap<String, String>,
    /// Taints the node registers with.
    pub taints: Vec<Taint>,
    /// Taints the node starts with and a daemon removes; registered with the others.
    pub startup_taints: Vec<Taint>,
    /// The Provisioner's kubelet settings (maxPods, reserved resources, eviction, ...).
    pub kubelet: KubeletConfiguration,
    /// How many pods a node of each instance type holds as the plan counted them (its `pods`
    /// capacity). Passed to the kubelet as its max pods, one launch template per distinct
    /// figure, so that it takes as many pods as were planned: AL2's bootstrap would otherwise
    /// apply its own ENI table (Karpenter always passes `--max-pods`,
    /// aws@v0.27.0:pkg/providers/amifamily/resolver.go). A type not named here gets the
    /// Provisioner's `maxPods`, or the AMI's own rule.
    pub max_pods: BTreeMap<String, i64>,
    /// Highest USD per hour paid for spot (`spec.provider.spotPrice`); dearer spot options are dropped.
    pub spot_max_price: Option<f64>,
    /// For a launch for pending pods: what makes it idempotent and its instance adoptable.
    /// `None` (a bare launch): a fresh CreateFleet token, no launch-config tag.
    pub identity: Option<LaunchIdentity>,
}

pub use crate::apis::v1alpha5::labels::LAUNCH_CONFIG_TAG;

/// Who a launch is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchIdentity {
    /// Digest of what shapes the node (`apis::hash::launch_config_hash`), tagged on the instance
    /// as [`LAUNCH_CONFIG_TAG`].
    pub config: String,
    /// Digest of the configuration, the pods the node is for and the attempt's generation:
    /// CreateFleet's `ClientToken` is derived from it, so a call retried after its answer was
    /// lost, by this process or by one restarted, gets the instance already launched.
    pub need: String,
}

/// A launched instance as EC2 reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// `i-0123...`.
    pub id: String,
    /// `t3.large`.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// EC2 private DNS name (the node name), may be empty right after launch.
    pub private_dns_name: String,
    /// Private IPv4 address.
    pub private_ip: Option<String>,
    /// When EC2 launched it.
    pub launch_time: Option<SystemTime>,
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping`, `stopped`.
    pub state: String,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// AMI it runs.
    pub image_id: Option<String>,
    /// Subnet it runs in.
    pub subnet_id: Option<String>,
    /// Security groups of its primary network interface, sorted.
    pub security_group_ids: Vec<String>,
}

impl Instance {
    /// `aws:///<zone>/<instance-id>`, the Node's `spec.providerID`.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }

    /// The Node name: the lowercased private DNS name (`aws.nodeNameConvention=ip-name`).
    pub fn node_name(&self) -> String {
        self.private_dns_name.to_lowercase()
    }
}

/// The instance ids the `spec.providerID`s of `nodes` name.
pub fn instances_named_by<'a>(nodes: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::Node>) -> std::collections::HashSet<&'a str> {
    nodes
        .into_iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
        .filter_map(instance_id_from_provider_id)
        .collect()
}

/// The instance id of a `spec.providerID` (`aws:///<zone>/<id>`), if it is one.
pub fn instance_id_from_provider_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    rest.rsplit('/').next().filter(|id| id.starts_with("i-"))
}
