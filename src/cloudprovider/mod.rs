//! The cloud edge the controller talks to: plain data in and out (`InstanceTypeInfo`,
//! `LaunchRequest`, `Instance`, `Error`) and the `CloudProvider` trait. The AWS implementation
//! lives in `aws/`; nothing here knows about EC2 or does I/O, so `scheduling/` and the
//! controllers can use these types and tests can implement the trait.

pub mod aws;
pub mod catalogue;
pub mod queue;
pub mod shared_types;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Taint;

use base64::Engine;

use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha1::defaults::discovery_selector;
use crate::apis::v1alpha1::{AwsNodeTemplateSpec, AwsNodeTemplateStatus, AwsProvider, BlockDeviceMapping, MetadataOptions};
use crate::apis::v1alpha5::KubeletConfiguration;
use crate::scheduling::capacity::DEFAULT_EPHEMERAL_STORAGE_BYTES;
pub use crate::scheduling::AmiFamily;
use crate::scheduling::InstanceFacts;

/// A Kubernetes `major.minor`: the version whose EKS-optimized AMIs nodes boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubernetesVersion {
    /// `1` of `1.33`.
    pub major: u32,
    /// `33` of `1.33`.
    pub minor: u32,
}

impl KubernetesVersion {
    /// The first version whose nodes default to AL2023: EKS publishes no AL2 AMIs from 1.33 on
    /// (Karpenter v0.31 always defaulted to AL2; README's table of differences).
    pub const FIRST_AL2023_DEFAULT: KubernetesVersion = KubernetesVersion { major: 1, minor: 33 };

    /// From `major.minor` (`1.33`); a leading `v` and a patch (`v1.33.2`) are accepted.
    pub fn parse(value: &str) -> Result<KubernetesVersion, String> {
        let err = || format!("invalid Kubernetes version {value:?}: expected major.minor, e.g. 1.33");
        let parts: Vec<&str> = value.trim().trim_start_matches('v').split('.').collect();
        let numeric = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(numeric) {
            return Err(err());
        }
        Ok(KubernetesVersion {
            major: parts[0].parse().map_err(|_| err())?,
            minor: parts[1].parse().map_err(|_| err())?,
        })
    }

    /// From the API server's `/version` `major` and `minor`, whose trailing `+` (and anything
    /// else after the digits, as some distributions add) is dropped
    /// (`aws@v0.27.0:pkg/providers/version/version.go`).
    pub fn from_api_server(major: &str, minor: &str) -> Result<KubernetesVersion, String> {
        let digits = |s: &str| -> String { s.chars().take_while(char::is_ascii_digit).collect() };
        let err = || format!("the API server reports version major {major:?} minor {minor:?}, not numbers");
        Ok(KubernetesVersion {
            major: digits(major).parse().map_err(|_| err())?,
            minor: digits(minor).parse().map_err(|_| err())?,
        })
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for KubernetesVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KubernetesVersion::parse(s)
    }
}

/// The AMI family of a template that names none: AL2 up to Kubernetes 1.32, AL2023 from 1.33
/// on (a deliberate difference, in README's table; Karpenter v0.31 always took AL2).
pub fn default_ami_family(version: KubernetesVersion) -> AmiFamily {
    if version >= KubernetesVersion::FIRST_AL2023_DEFAULT {
        AmiFamily::Al2023
    } else {
        AmiFamily::Al2
    }
}

/// The AMI family of `spec.amiFamily`, or the version's default when absent.
pub fn ami_family(value: Option<&str>, version: KubernetesVersion) -> Result<AmiFamily, Error> {
    match value {
        Some(v) => AmiFamily::parse(v).map_err(Error::InvalidConfiguration),
        None => Ok(default_ami_family(version)),
    }
}

/// The CA bundle as EKS reports it (base64 of the PEM certificates) of DER certificates, e.g.
/// the root certificates of the controller's own kube config.
pub fn ca_bundle_from_der(certificates: &[Vec<u8>]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut pem = String::new();
    for der in certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = b64.encode(der);
        for line in body.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    b64.encode(pem)
}

/// Settings of the cloud provider, handed down from `Config`.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudConfig {
    /// Name of the cluster: tags, launch-template names, bootstrap.
    pub cluster_name: String,
    /// URL of the cluster's API server, written into the node bootstrap.
    pub cluster_endpoint: String,
    /// Base64 PEM CA bundle of the API server, written into the node bootstrap when known
    /// (`--b64-cluster-ca` of AL2's bootstrap.sh, AL2023's `certificateAuthority`).
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's service IPv4 CIDR, which AL2023's nodeadm needs (`spec.cluster.cidr`).
    pub cluster_cidr: Option<String>,
    /// Cluster DNS service IP for the kubelet, when not the AMI's default.
    pub cluster_dns: Option<String>,
    /// AWS region; `None` uses the SDK's chain (`AWS_REGION`, profile, instance metadata).
    pub region: Option<String>,
    /// Endpoint of every AWS API called (an emulator in tests); `None` uses the SDK's
    /// (`AWS_ENDPOINT_URL` or the real AWS endpoints).
    pub endpoint_url: Option<String>,
    /// Fixed credentials (emulators, tests); `None` uses the SDK's default credential chain.
    pub credentials: Option<StaticCredentials>,
    /// YAML or JSON file of instance type → on-demand USD per hour (or `{onDemand, spot}`).
    pub price_overrides: Option<PathBuf>,
    /// Instance profile of nodes whose template names none (`aws.defaultInstanceProfile`).
    pub default_instance_profile: Option<String>,
    /// Tags added to everything launched, under the template's own tags (`aws.tags`).
    pub tags: BTreeMap<String, String>,
    /// How long instance types, offerings and spot prices are reused before they are read again.
    pub catalogue_ttl: Duration,
    /// How long resolved subnets, security groups and AMIs are reused.
    pub resolve_ttl: Duration,
}

/// How long instance types, offerings and spot prices are reused, by default.
pub const DEFAULT_CATALOGUE_TTL: Duration = Duration::from_secs(5 * 60);
/// How long resolved subnets, security groups and AMIs are reused, by default.
pub const DEFAULT_RESOLVE_TTL: Duration = Duration::from_secs(60);

impl CloudConfig {
    /// Settings with the documented defaults for everything but the cluster.
    pub fn new(cluster_name: impl Into<String>, cluster_endpoint: impl Into<String>) -> Self {
        CloudConfig {
            cluster_name: cluster_name.into(),
            cluster_endpoint: cluster_endpoint.into(),
            cluster_ca_bundle: None,
            cluster_cidr: None,
            cluster_dns: None,
            region: None,
            endpoint_url: None,
            credentials: None,
            price_overrides: None,
            default_instance_profile: None,
            tags: BTreeMap::new(),
            catalogue_ttl: DEFAULT_CATALOGUE_TTL,
            resolve_ttl: DEFAULT_RESOLVE_TTL,
        }
    }
}

/// An access key pair.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// What one instance type is, as EC2 describes it, and where and at what price it is offered.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceTypeInfo {
    /// What the simulation needs to know of it: name, vCPUs, memory, architecture, network
    /// interfaces, GPUs, Neuron devices, hypervisor, local NVMe, bandwidth.
    pub facts: InstanceFacts,
    /// Inference/training accelerators (Inferentia, Trainium, Gaudi, ...), one entry per kind.
    pub accelerators: Vec<AcceleratorInfo>,
    /// `t` of `t3.large`.
    pub category: String,
    /// `t3` of `t3.large`.
    pub family: String,
    /// `3` of `t3.large`.
    pub generation: Option<i64>,
    /// `large` of `t3.large`.
    pub size: String,
    /// Capacity types EC2 sells it as: `on-demand`, `spot`.
    pub capacity_types: Vec<String>,
    /// One entry per zone × capacity type where it is offered in the region.
    pub offerings: Vec<OfferingInfo>,
}

impl InstanceTypeInfo {
    /// Pods the AWS VPC CNI can address: `maxENIs × (IPv4PerENI − 1) + 2`.
    pub fn eni_limited_pods(&self) -> i64 {
        self.facts.max_enis * (self.facts.ipv4_per_eni - 1).max(0) + 2
    }

    /// Total GPUs of every kind.
    pub fn gpu_count(&self) -> i64 {
        self.facts.gpus.iter().map(|g| g.count).sum()
    }

    /// Whether the type has an NVIDIA GPU or an AWS Neuron device (they need the GPU AMI variant).
    pub fn needs_accelerated_ami(&self) -> bool {
        self.facts.gpus.iter().any(|g| g.manufacturer.eq_ignore_ascii_case("nvidia"))
            || self.accelerators.iter().any(|a| a.manufacturer.eq_ignore_ascii_case("aws"))
    }

    /// Offerings that are available now.
    pub fn available(&self) -> impl Iterator<Item = &OfferingInfo> {
        self.offerings.iter().filter(|o| o.available)
    }

    /// The cheapest available offering, if any.
    pub fn cheapest(&self) -> Option<&OfferingInfo> {
        self.available().min_by(|a, b| a.price.total_cmp(&b.price))
    }
}

/// A GPU kind of an instance type: the simulation's own type.
pub type GpuInfo = crate::scheduling::GpuFacts;

/// An accelerator kind of an instance type.
#[derive(Clone, Debug, PartialEq)]
pub struct AcceleratorInfo {
    /// `inferentia`, `trainium`, ...
    pub name: String,
    /// `aws`, `habana`, ...
    pub manufacturer: String,
    /// How many.
    pub count: i64,
}

/// Where and how an instance type can be bought, and for how much: the simulation's own type.
pub type OfferingInfo = crate::scheduling::Offering;

/// The AWS settings of one Provisioner, from its AWSNodeTemplate or its inline `spec.provider`,
/// with absent selectors defaulted to the cluster's discovery tag.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTemplate {
    /// Tags (or `aws-ids`) selecting the subnets.
    pub subnet_selector: BTreeMap<String, String>,
    /// Tags (or `aws-ids`) selecting the security groups; empty with `launch_template`.
    pub security_group_selector: BTreeMap<String, String>,
    /// AMI family (bootstrap format, SSM parameters, root device): the template's, else the
    /// Kubernetes version's default.
    pub ami_family: AmiFamily,
    /// Kubernetes `major.minor` whose AMIs the nodes boot (the family's SSM parameters).
    pub kubernetes_version: KubernetesVersion,
    /// Tags or ids selecting AMIs instead of the family's SSM parameter.
    pub ami_selector: Option<BTreeMap<String, String>>,
    /// IAM instance profile; `None` uses `CloudConfig::default_instance_profile`.
    pub instance_profile: Option<String>,
    /// Custom user data merged with the generated bootstrap.
    pub user_data: Option<String>,
    /// Tags for instances, volumes and launch templates.
    pub tags: BTreeMap<String, String>,
    /// Block devices; `None` uses the family's defaults.
    pub block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    /// Instance metadata options; absent fields use the defaults.
    pub metadata_options: Option<MetadataOptions>,
    /// Whether detailed monitoring is on.
    pub detailed_monitoring: bool,
    /// CreateFleet `Context` (capacity reservations etc.).
    pub context: Option<String>,
    /// An existing launch template used as-is instead of generated ones.
    pub launch_template: Option<String>,
}

impl NodeTemplate {
    /// From an AWSNodeTemplate for nodes of Kubernetes `version`; absent selectors select
    /// `karpenter.sh/discovery: <cluster_name>`.
    pub fn from_node_template(spec: &AwsNodeTemplateSpec, cluster_name: &str, version: KubernetesVersion) -> Result<NodeTemplate, Error> {
        Ok(NodeTemplate {
            subnet_selector: spec.subnet_selector.clone().unwrap_or_else(|| discovery_selector(cluster_name)),
            security_group_selector: default_security_groups(
                spec.security_group_selector.as_ref(),
                spec.launch_template.as_deref(),
                cluster_name,
            ),
            ami_family: ami_family(spec.ami_family.as_deref(), version)?,
            kubernetes_version: version,
            ami_selector: spec.ami_selector.clone(),
            instance_profile: spec.instance_profile.clone(),
            user_data: spec.user_data.clone(),
            tags: spec.tags.clone().unwrap_or_default(),
            block_device_mappings: spec.block_device_mappings.clone(),
            metadata_options: spec.metadata_options.clone(),
            detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
            context: spec.context.clone(),
            launch_template: spec.launch_template.clone(),
        })
    }

    /// From a Provisioner's inline `spec.provider` for nodes of Kubernetes `version`; the cluster
    /// for default selectors is its `clusterName` when set, else `cluster_name`.
    pub fn from_provider(provider: &AwsProvider, cluster_name: &str, version: KubernetesVersion) -> Result<NodeTemplate, Error> {
        let cluster = provider.cluster_name.as_deref().filter(|c| !c.is_empty()).unwrap_or(cluster_name);
        Ok(NodeTemplate {
            subnet_selector: provider.subnet_selector.clone().unwrap_or_else(|| discovery_selector(cluster)),
            security_group_selector: default_security_groups(
                provider.security_group_selector.as_ref(),
                provider.launch_template.as_deref(),
                cluster,
            ),
            ami_family: ami_family(provider.ami_family.as_deref(), version)?,
            kubernetes_version: version,
            ami_selector: None,
            instance_profile: provider.instance_profile.clone(),
            user_data: None,
            tags: provider.tags.clone().unwrap_or_default(),
            block_device_mappings: provider.block_device_mappings.clone(),
            metadata_options: provider.metadata_options.clone(),
            detailed_monitoring: false,
            context: provider.context.clone(),
            launch_template: provider.launch_template.clone(),
        })
    }
}

impl NodeTemplate {
    /// Bytes of the volume holding the kubelet's ephemeral storage: the block-device mapping
    /// of the family's ephemeral device (Custom: the last mapping), else the family's default
    /// root size, 20Gi (`aws@v0.27.0:pkg/providers/instancetype/types.go` `ephemeralStorage`). A
    /// mapping without a readable `volumeSize` counts as absent (admission rejects unreadable sizes).
    pub fn ephemeral_storage_bytes(&self) -> i64 {
        let mappings = self.block_device_mappings.as_deref().unwrap_or_default();
        let root = match self.ami_family.ephemeral_device() {
            Some(device) => mappings.iter().find(|m| m.device_name.as_deref() == Some(device)),
            None => mappings.last(),
        };
        root.and_then(|m| m.ebs.as_ref())
            .and_then(|ebs| ebs.volume_size.as_ref())
            .and_then(|size| parse_quantity(&size.0))
            .map(|bytes| bytes.ceil() as i64)
            .unwrap_or(DEFAULT_EPHEMERAL_STORAGE_BYTES)
    }
}

fn default_security_groups(
    selector: Option<&BTreeMap<String, String>>,
    launch_template: Option<&str>,
    cluster: &str,
) -> BTreeMap<String, String> {
    match (selector, launch_template) {
        (Some(s), _) => s.clone(),
        (None, Some(_)) => BTreeMap::new(),
        (None, None) => discovery_selector(cluster),
    }
}

/// The spot price cap of an inline provider's `spotPrice` (USD per hour), if it has a valid one.
pub fn spot_max_price(provider: &AwsProvider) -> Option<f64> {
    provider
        .spot_price
        .as_deref()
        .and_then(|p| crate::apis::v1alpha1::validation::check_spot_price(p).ok())
}

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

/// An offering that could not be launched.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Offering {
    /// `t3.large`.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
}

impl fmt::Display for Offering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} in {}", self.capacity_type, self.instance_type, self.zone)
    }
}

/// What went wrong at the cloud edge.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The instance (or other object) does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// No requested offering had capacity; they are marked unavailable for a while.
    #[error("insufficient capacity for {}", join_offerings(offerings))]
    InsufficientCapacity {
        /// The offerings that failed or were already known to be unavailable.
        offerings: Vec<Offering>,
    },
    /// The settings cannot work as written (no subnet matches the selector, unknown AMI family, ...).
    #[error("{0}")]
    InvalidConfiguration(String),
    /// An AWS call failed.
    #[error("{operation} failed{}", code.as_deref().map(|c| format!(" with {c}")).unwrap_or_default())]
    Api {
        /// `ec2:CreateFleet`, ...
        operation: &'static str,
        /// The AWS error code, when there is one.
        code: Option<String>,
        /// The SDK error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn join_offerings(offerings: &[Offering]) -> String {
    if offerings.is_empty() {
        return "every requested offering".to_string();
    }
    offerings.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", ")
}

/// What a failed call is, as `karpenter_cloudprovider_errors_total{error}` names it.
pub trait ErrorKind {
    /// The label value.
    fn kind(&self) -> &'static str;
}

impl ErrorKind for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::NotFound(_) => "not_found",
            Error::InsufficientCapacity { .. } => "insufficient_capacity",
            Error::InvalidConfiguration(_) => "invalid_configuration",
            Error::Api { .. } => "api",
        }
    }
}

impl Error {
    /// Metric label value.
    pub fn kind(&self) -> &'static str {
        ErrorKind::kind(self)
    }

    /// Whether the instance or object is gone.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }
}

/// The cloud the controller launches nodes in.
#[async_trait]
pub trait CloudProvider: Send + Sync {
    /// Every instance type of the region with its offerings (zones × capacity types) and prices;
    /// offerings with recent capacity failures are `available: false`.
    async fn instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Error>;
    /// What a template's selectors resolve to now (subnets with zones, security groups, AMIs),
    /// in the shape of `AWSNodeTemplate.status`.
    async fn resolve(&self, template: &NodeTemplate) -> Result<AwsNodeTemplateStatus, Error>;
    /// Launches one instance for the request, the cheapest it can get, tagged with the cluster and
    /// provisioner.
    async fn create(&self, request: &LaunchRequest) -> Result<Instance, Error>;
    /// The image a node of `instance_type` launched under `template` would boot now (the family's
    /// SSM parameter for its architecture and accelerator, or the newest `amiSelector` match;
    /// cached as launches cache it), or `None` when the template names its own launch template.
    async fn image_for(&self, template: &NodeTemplate, instance_type: &str) -> Result<Option<String>, Error>;
    /// Terminates the instance. An instance that no longer exists is success.
    async fn delete(&self, instance_id: &str) -> Result<(), Error>;
    /// Deletes the launch templates this cluster's launches created and have not used for
    /// longer than `unused_for` (one first seen by this process counts as used then); returns
    /// the names deleted.
    async fn delete_unused_launch_templates(&self, unused_for: Duration) -> Result<Vec<String>, Error>;
    /// The instances of this cluster (found by tag) that are not terminated.
    async fn list(&self) -> Result<Vec<Instance>, Error>;
    /// One instance; `Error::NotFound` when it does not exist or is terminated.
    async fn get(&self, instance_id: &str) -> Result<Instance, Error>;
    /// Marks offerings unavailable for a while (the insufficient-capacity cache,
    /// `aws@v0.27.0:pkg/cache/unavailableofferings.go`), e.g. the spot offering of an instance EC2
    /// is interrupting: launches go elsewhere meanwhile.
    fn mark_unavailable(&self, offerings: &[Offering]);
}

#[cfg(test)]
mod tests;
