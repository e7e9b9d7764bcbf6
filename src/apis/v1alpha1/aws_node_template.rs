//! The AWS settings of a Provisioner, in two shapes: the `AWSNodeTemplate` custom resource
//! (karpenter.k8s.aws/v1alpha1) referenced by `spec.providerRef`, and the inline
//! `spec.provider` of a Provisioner (`AwsProvider`). Plain data; the rules live in
//! `validation.rs` and `defaults.rs`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// AWSNodeTemplate holds the AWS settings (subnets, security groups, AMI, user data, tags) of the
/// Provisioners that reference it by `spec.providerRef`.
#[derive(CustomResource, Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1alpha1",
    kind = "AWSNodeTemplate",
    root = "AwsNodeTemplate",
    plural = "awsnodetemplates",
    status = "AwsNodeTemplateStatus",
    category = "karpenter",
    doc = "AWSNodeTemplate holds the AWS settings (subnets, security groups, AMI, user data, tags) of the Provisioners that reference it.",
    printcolumn = r#"{"name":"AMIFamily","type":"string","jsonPath":".spec.amiFamily"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AwsNodeTemplateSpec {
    /// Tags that select the subnets nodes are launched in (`key: value`, `key: "*"`, or
    /// `aws-ids: subnet-1,subnet-2` alone). Defaults to `karpenter.sh/discovery: <cluster name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_selector: Option<BTreeMap<String, String>>,
    /// Tags that select the security groups of launched nodes (`aws-ids: sg-1,sg-2` alone selects
    /// by id). Defaults to `karpenter.sh/discovery: <cluster name>` unless launchTemplate is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group_selector: Option<BTreeMap<String, String>>,
    /// Tags added to every instance, volume and launch template created for these nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// AMI family: AL2, AL2023, Bottlerocket, Ubuntu, Windows2019, Windows2022 or Custom. Default: AL2 up to Kubernetes 1.32, AL2023 from 1.33.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    /// Tags or ids (`aws-ids`) that select the AMIs to use instead of the family's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_selector: Option<BTreeMap<String, String>>,
    /// IAM instance profile of the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// User data merged with the bootstrap script karpenter-rs generates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// Block devices attached to the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    /// Instance metadata service settings of the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
    /// Capacity reservation or other launch context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Name of an existing launch template to use instead of generated ones (deprecated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<String>,
    /// Whether detailed CloudWatch monitoring is enabled for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
}

/// Observed state of an AWSNodeTemplate: what its selectors currently resolve to.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AwsNodeTemplateStatus {
    /// Subnets the subnet selector resolves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnets: Option<Vec<SubnetStatus>>,
    /// Security groups the security group selector resolves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_groups: Option<Vec<SecurityGroupStatus>>,
    /// AMIs the AMI family or selector resolves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amis: Option<Vec<AmiStatus>>,
    /// Conditions of this AWSNodeTemplate (`ValidationSucceeded` False while the controllers cannot
    /// read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
}

/// A resolved subnet.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    /// Subnet id.
    pub id: String,
    /// Availability zone of the subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// A resolved security group.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    /// Security group id.
    pub id: String,
    /// Security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved AMI.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AmiStatus {
    /// AMI id.
    pub id: String,
    /// AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Requirements (architecture, ...) the AMI satisfies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>>,
}

/// The inline `spec.provider` of a Provisioner. Decoded strictly (`apis::decode`): an unknown
/// key is an error.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AwsProvider {
    /// Optional type information, `extensions.karpenter.sh/v1alpha1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Optional type information, `AWS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The cluster these nodes join; must equal the cluster karpenter-rs is configured for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// Maximum price in USD per hour paid for a spot instance, as a decimal string ("0.067").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_price: Option<String>,
    /// See AWSNodeTemplate `subnetSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_selector: Option<BTreeMap<String, String>>,
    /// See AWSNodeTemplate `securityGroupSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_group_selector: Option<BTreeMap<String, String>>,
    /// See AWSNodeTemplate `tags`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    /// See AWSNodeTemplate `amiFamily`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    /// See AWSNodeTemplate `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// See AWSNodeTemplate `blockDeviceMappings`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_device_mappings: Option<Vec<BlockDeviceMapping>>,
    /// See AWSNodeTemplate `metadataOptions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
    /// See AWSNodeTemplate `context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// See AWSNodeTemplate `launchTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<String>,
}

/// Instance metadata service settings.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` or `disabled`. Default enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    /// `enabled` or `disabled`. Default disabled.
    #[serde(default, rename = "httpProtocolIPv6", skip_serializing_if = "Option::is_none")]
    pub http_protocol_ipv6: Option<String>,
    /// Hop limit of metadata PUT responses, 1 to 64. Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_put_response_hop_limit: Option<i64>,
    /// `optional` or `required` (IMDSv2). Default required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
}

/// A block device attached to a node.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// Device name, e.g. /dev/xvda.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
}

/// An EBS volume.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Whether the volume is deleted with the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// KMS key of an encrypted volume.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Snapshot the volume is created from.
    #[serde(default, rename = "snapshotID", skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Size, 1G to 64T (decimal), required unless snapshotID is set.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::apis::schema::deserialize_quantity")]
    #[schemars(transform = crate::apis::schema::quantities_as_strings)]
    pub volume_size: Option<Quantity>,
    /// standard, io1, io2, gp2, sc1, st1 or gp3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
}

/// The AWS settings both shapes share, borrowed, so one set of rules validates both.
pub struct AwsSettings<'a> {
    /// `subnetSelector`.
    pub subnet_selector: Option<&'a BTreeMap<String, String>>,
    /// `securityGroupSelector`.
    pub security_group_selector: Option<&'a BTreeMap<String, String>>,
    /// `tags`.
    pub tags: Option<&'a BTreeMap<String, String>>,
    /// `amiFamily`.
    pub ami_family: Option<&'a str>,
    /// `instanceProfile`.
    pub instance_profile: Option<&'a str>,
    /// `blockDeviceMappings`.
    pub block_device_mappings: Option<&'a [BlockDeviceMapping]>,
    /// `metadataOptions`.
    pub metadata_options: Option<&'a MetadataOptions>,
    /// `launchTemplate`.
    pub launch_template: Option<&'a str>,
}

impl AwsNodeTemplateSpec {
    /// The shared AWS settings.
    pub fn settings(&self) -> AwsSettings<'_> {
        AwsSettings {
            subnet_selector: self.subnet_selector.as_ref(),
            security_group_selector: self.security_group_selector.as_ref(),
            tags: self.tags.as_ref(),
            ami_family: self.ami_family.as_deref(),
            instance_profile: self.instance_profile.as_deref(),
            block_device_mappings: self.block_device_mappings.as_deref(),
            metadata_options: self.metadata_options.as_ref(),
            launch_template: self.launch_template.as_deref(),
        }
    }
}

impl AwsProvider {
    /// The shared AWS settings.
    pub fn settings(&self) -> AwsSettings<'_> {
        AwsSettings {
            subnet_selector: self.subnet_selector.as_ref(),
            security_group_selector: self.security_group_selector.as_ref(),
            tags: self.tags.as_ref(),
            ami_family: self.ami_family.as_deref(),
            instance_profile: self.instance_profile.as_deref(),
            block_device_mappings: self.block_device_mappings.as_deref(),
            metadata_options: self.metadata_options.as_ref(),
            launch_template: self.launch_template.as_deref(),
        }
    }
}
