//! What a Provisioner's nodes boot and where: the AWS settings of one Provisioner (`NodeTemplate`,
//! from its AWSNodeTemplate or inline `spec.provider`, selectors defaulted to the cluster's
//! discovery tag), the Kubernetes version whose AMIs they boot and the AMI family it defaults to.

use std::collections::BTreeMap;
use std::fmt;

use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha1::defaults::discovery_selector;
use crate::apis::v1alpha1::{AwsNodeTemplateSpec, AwsProvider, BlockDeviceMapping, MetadataOptions};
use crate::scheduling::capacity::DEFAULT_EPHEMERAL_STORAGE_BYTES;

use super::{AmiFamily, Error};

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

#[cfg(test)]
mod tests;
