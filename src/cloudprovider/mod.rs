//! The cloud edge the controller talks to: plain data in and out (`InstanceTypeInfo`,
//! `LaunchRequest`, `Instance`, `Error`) and the `CloudProvider` trait. The AWS implementation
//! lives in `aws/`; nothing here knows about EC2 or does I/O, so `scheduling/` and the
//! controllers can use these types and tests can implement the trait.
//!
//! Here: the settings, the instance types, the errors and the trait. A Provisioner's AWS settings,
//! the Kubernetes version and the AMI family default are in `node_template`; what a launch takes
//! and gives (options, request, instance) in `launch`.

pub mod aws;
pub mod catalogue;
mod launch;
mod node_template;
pub mod queue;
pub mod shared_types;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use base64::Engine;

use crate::apis::v1alpha1::AwsNodeTemplateStatus;
pub use crate::scheduling::AmiFamily;
use crate::scheduling::InstanceFacts;

pub use launch::{
    instance_id_from_provider_id, instances_named_by, Instance, InstanceOption, LaunchIdentity, LaunchRequest, LAUNCH_CONFIG_TAG,
};
pub use node_template::{ami_family, default_ami_family, spot_max_price, KubernetesVersion, NodeTemplate};

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
    /// Nodes trust the CA the controller's own kube config trusts (`root_cert`, DER), unless a
    /// bundle is configured: what `run` and a view of `explain`'s own both do.
    pub fn trust_kube_config_ca(&mut self, root_cert: Option<&[Vec<u8>]>) {
        if self.cluster_ca_bundle.is_none() {
            self.cluster_ca_bundle = root_cert.filter(|certs| !certs.is_empty()).map(ca_bundle_from_der);
        }
    }

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

/// Which offering: an instance type in a zone as a capacity type, without a price (what a
/// capacity error and the unavailable-offerings cache name; `OfferingInfo` is an offering with its
/// price and availability).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingId {
    /// `t3.large`.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
}

impl fmt::Display for OfferingId {
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
        offerings: Vec<OfferingId>,
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

fn join_offerings(offerings: &[OfferingId]) -> String {
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
    fn mark_unavailable(&self, offerings: &[OfferingId]);
    /// The offerings unavailable now for a capacity error, each with when it is tried again.
    fn unavailable_offerings(&self) -> Vec<(OfferingId, jiff::Timestamp)> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
