//! Launch templates: one per distinct configuration (AMI, user data with its labels and taints,
//! instance profile, security groups, block devices, metadata options, monitoring, tags), named
//! `karpenter-rs/<cluster>/<hash of the configuration>`, created when missing and reused.
//!
//! Templates no launch has used for a while are deleted, as
//! `aws@v0.27.0:pkg/providers/launchtemplate/launchtemplate.go` does on cache eviction: a
//! configuration that changed (a new label, AMI or security group) leaves its old template
//! behind, and EC2 caps templates per region. Instances keep running without their template.
//!
//! The family defaults, the name and which templates are unused are pure (the user data they
//! carry is rendered by `user_data`); `ensure`, `list` and `delete` call EC2.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6, LaunchTemplateTagSpecificationRequest,
    LaunchTemplatesMonitoringRequest, RequestLaunchTemplateData, ResourceType, Tag, TagSpecification, VolumeType,
};
use aws_sdk_ec2::Client;
use base64::Engine;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::errors;
use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha1::{BlockDevice, BlockDeviceMapping, MetadataOptions};
use crate::cloudprovider::{AmiFamily, Error};

pub use crate::apis::v1alpha5::labels::LAUNCH_TEMPLATE_CLUSTER_TAG;

/// Block devices of a family when the template names none.
pub fn default_block_devices(family: AmiFamily) -> Vec<BlockDeviceMapping> {
    let gp3 = |device: &str, size: &str| BlockDeviceMapping {
        device_name: Some(device.to_string()),
        ebs: Some(BlockDevice {
            encrypted: Some(true),
            volume_size: Some(Quantity(size.to_string())),
            volume_type: Some("gp3".to_string()),
            ..Default::default()
        }),
    };
    match family {
        AmiFamily::Al2 | AmiFamily::Al2023 => vec![gp3("/dev/xvda", "20Gi")],
        AmiFamily::Ubuntu => vec![gp3("/dev/sda1", "20Gi")],
        AmiFamily::Bottlerocket => vec![gp3("/dev/xvda", "4Gi"), gp3("/dev/xvdb", "20Gi")],
        AmiFamily::Custom => vec![],
    }
}

/// Metadata options with Karpenter's defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Metadata {
    /// `enabled` / `disabled`.
    pub http_endpoint: String,
    /// `enabled` / `disabled`.
    pub http_protocol_ipv6: String,
    /// 1 to 64.
    pub http_put_response_hop_limit: i64,
    /// `required` / `optional`.
    pub http_tokens: String,
}

impl Metadata {
    /// Defaults: endpoint enabled, IPv6 disabled, hop limit 2, tokens required.
    pub fn resolve(options: Option<&MetadataOptions>) -> Metadata {
        let o = options.cloned().unwrap_or_default();
        Metadata {
            http_endpoint: o.http_endpoint.unwrap_or_else(|| "enabled".into()),
            http_protocol_ipv6: o.http_protocol_ipv6.unwrap_or_else(|| "disabled".into()),
            http_put_response_hop_limit: o.http_put_response_hop_limit.unwrap_or(2),
            http_tokens: o.http_tokens.unwrap_or_else(|| "required".into()),
        }
    }
}

/// Everything a generated launch template holds; its hash names the template.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LaunchTemplateConfig {
    /// Cluster name (also part of the name).
    pub cluster_name: String,
    /// AMI id.
    pub image_id: String,
    /// Instance profile name.
    pub instance_profile: String,
    /// Security group ids, sorted.
    pub security_group_ids: Vec<String>,
    /// User data, not yet base64-encoded.
    pub user_data: String,
    /// Block devices (family defaults already applied).
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// Instance metadata options.
    pub metadata: Metadata,
    /// Detailed monitoring.
    pub detailed_monitoring: bool,
    /// Tags of the template and of the network interfaces it creates.
    pub tags: BTreeMap<String, String>,
}

impl LaunchTemplateConfig {
    /// `karpenter-rs/<cluster>/<first 16 hex digits of the SHA-256 of the configuration>`.
    pub fn name(&self) -> String {
        let json = serde_json::to_vec(self).expect("plain data always serializes");
        let digest = Sha256::digest(&json);
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!("{}{hex}", name_prefix(&self.cluster_name))
    }
}

/// GiB, rounded up, of a volume size quantity.
pub fn volume_gib(size: &Quantity) -> Result<i32, Error> {
    let bytes = parse_quantity(&size.0)
        .filter(|b| *b > 0.0)
        .ok_or_else(|| Error::InvalidConfiguration(format!("volumeSize {:?} is not a positive quantity", size.0)))?;
    Ok((bytes / 1024f64.powi(3)).ceil() as i32)
}

fn tags(map: &BTreeMap<String, String>) -> Vec<Tag> {
    map.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect()
}

/// The CreateLaunchTemplate data of a configuration.
pub fn template_data(config: &LaunchTemplateConfig) -> Result<RequestLaunchTemplateData, Error> {
    let mut devices = Vec::new();
    for m in &config.block_device_mappings {
        let ebs = match &m.ebs {
            Some(e) => Some(
                LaunchTemplateEbsBlockDeviceRequest::builder()
                    .set_delete_on_termination(e.delete_on_termination)
                    .set_encrypted(e.encrypted)
                    .set_iops(e.iops.map(|i| i as i32))
                    .set_kms_key_id(e.kms_key_id.clone())
                    .set_snapshot_id(e.snapshot_id.clone())
                    .set_throughput(e.throughput.map(|t| t as i32))
                    .set_volume_size(e.volume_size.as_ref().map(volume_gib).transpose()?)
                    .set_volume_type(e.volume_type.as_deref().map(VolumeType::from))
                    .build(),
            ),
            None => None,
        };
        devices.push(
            LaunchTemplateBlockDeviceMappingRequest::builder()
                .set_device_name(m.device_name.clone())
                .set_ebs(ebs)
                .build(),
        );
    }
    let md = &config.metadata;
    Ok(RequestLaunchTemplateData::builder()
        .image_id(&config.image_id)
        .iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(&config.instance_profile)
                .build(),
        )
        .set_security_group_ids(Some(config.security_group_ids.clone()))
        .user_data(base64::engine::general_purpose::STANDARD.encode(&config.user_data))
        .set_block_device_mappings((!devices.is_empty()).then_some(devices))
        .metadata_options(
            LaunchTemplateInstanceMetadataOptionsRequest::builder()
                .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(md.http_endpoint.as_str()))
                .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(md.http_protocol_ipv6.as_str()))
                .http_put_response_hop_limit(md.http_put_response_hop_limit as i32)
                .http_tokens(LaunchTemplateHttpTokensState::from(md.http_tokens.as_str()))
                .build(),
        )
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(config.detailed_monitoring)
                .build(),
        )
        .tag_specifications(
            LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(ResourceType::NetworkInterface)
                .set_tags(Some(tags(&config.tags)))
                .build(),
        )
        .build())
}

/// Makes sure the launch template of `config` exists; returns its name.
pub async fn ensure(ec2: &Client, config: &LaunchTemplateConfig) -> Result<String, Error> {
    let name = config.name();
    match ec2.describe_launch_templates().launch_template_names(&name).send().await {
        Ok(out) if !out.launch_templates().is_empty() => return Ok(name),
        Ok(_) => {}
        Err(e) if e.as_service_error().and_then(|s| s.meta().code()).is_some_and(errors::is_not_found) => {}
        Err(e) => return Err(errors::api("ec2:DescribeLaunchTemplates", e)),
    }
    let mut lt_tags = config.tags.clone();
    lt_tags.insert(LAUNCH_TEMPLATE_CLUSTER_TAG.to_string(), config.cluster_name.clone());
    let created = ec2
        .create_launch_template()
        .launch_template_name(&name)
        .launch_template_data(template_data(config)?)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::LaunchTemplate)
                .set_tags(Some(tags(&lt_tags)))
                .build(),
        )
        .send()
        .await;
    match created {
        Ok(_) => {
            tracing::debug!(launch_template = %name, "created launch template");
            Ok(name)
        }
        // Another launch created it between our look-up and our create.
        Err(e) if e.as_service_error().and_then(|s| s.meta().code()) == Some("InvalidLaunchTemplateName.AlreadyExistsException") => {
            Ok(name)
        }
        Err(e) => Err(errors::api("ec2:CreateLaunchTemplate", e)),
    }
}

/// The name prefix of every launch template karpenter-rs creates for `cluster`.
pub fn name_prefix(cluster: &str) -> String {
    format!("karpenter-rs/{cluster}/")
}

/// When each launch template was last used, for deciding which are unused.
#[derive(Debug, Default)]
pub struct Usage {
    last_used: HashMap<String, Instant>,
}

impl Usage {
    /// Whether `name` is known to exist (created or used by this process and not deleted since).
    pub fn contains(&self, name: &str) -> bool {
        self.last_used.contains_key(name)
    }

    /// A launch uses (or has just created) `name` at `now`.
    pub fn used(&mut self, name: &str, now: Instant) {
        self.last_used.insert(name.to_string(), now);
    }

    /// Forgets every template (they may have been deleted behind our back).
    pub fn clear(&mut self) {
        self.last_used.clear();
    }

    /// Of the templates that exist, those unused for longer than `unused_for`; they are
    /// forgotten, so a launch after this creates them anew. A template this process has not
    /// seen before counts as used when first seen: after a restart or a change of leader, what
    /// the previous process used gets the full `unused_for` before it goes. Templates that no
    /// longer exist are forgotten.
    pub fn take_unused(&mut self, existing: &[String], unused_for: Duration, now: Instant) -> Vec<String> {
        self.last_used.retain(|name, _| existing.contains(name));
        let mut unused = Vec::new();
        for name in existing {
            let last = *self.last_used.entry(name.clone()).or_insert(now);
            if now.saturating_duration_since(last) > unused_for {
                unused.push(name.clone());
            }
        }
        for name in &unused {
            self.last_used.remove(name);
        }
        unused.sort();
        unused
    }
}

/// The names of the launch templates karpenter-rs created for `cluster`: tagged with it and
/// named with its prefix (templates of users, or of another tool, are never listed).
pub async fn list(ec2: &Client, cluster: &str) -> Result<Vec<String>, Error> {
    let prefix = name_prefix(cluster);
    let mut pages = ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:{LAUNCH_TEMPLATE_CLUSTER_TAG}"))
                .values(cluster)
                .build(),
        )
        .into_paginator()
        .send();
    let mut names = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("ec2:DescribeLaunchTemplates", e))?;
        names.extend(
            page.launch_templates()
                .iter()
                .filter_map(|t| t.launch_template_name())
                .filter(|n| n.starts_with(&prefix))
                .map(str::to_string),
        );
    }
    Ok(names)
}

/// Deletes the launch template `name`; one already gone is success.
pub async fn delete(ec2: &Client, name: &str) -> Result<(), Error> {
    match ec2.delete_launch_template().launch_template_name(name).send().await {
        Ok(_) => Ok(()),
        Err(e) if e.as_service_error().and_then(|s| s.meta().code()).is_some_and(errors::is_not_found) => Ok(()),
        Err(e) => Err(errors::api("ec2:DeleteLaunchTemplate", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_go_once_unused_for_the_period_counting_first_sight_as_a_use() {
        let start = Instant::now();
        let minute = Duration::from_secs(60);
        let mut usage = Usage::default();
        usage.used("karpenter-rs/c/a", start);
        let existing = ["karpenter-rs/c/a".to_string(), "karpenter-rs/c/b".to_string()];
        // b was made by an earlier process: first seen now.
        assert!(usage.take_unused(&existing, 10 * minute, start + minute).is_empty());
        usage.used("karpenter-rs/c/a", start + 5 * minute);
        assert_eq!(
            usage.take_unused(&existing, 10 * minute, start + 12 * minute),
            ["karpenter-rs/c/b"],
            "b unused since first seen at 1 min; a used at 5 min"
        );
        assert!(!usage.contains("karpenter-rs/c/b"), "forgotten, so a later launch creates it again");
        assert_eq!(
            usage.take_unused(&existing[..1], 10 * minute, start + 16 * minute),
            ["karpenter-rs/c/a"]
        );
        // Deleted behind our back: forgotten.
        usage.used("karpenter-rs/c/a", start + 17 * minute);
        assert!(usage.take_unused(&[], 10 * minute, start + 18 * minute).is_empty());
        assert!(!usage.contains("karpenter-rs/c/a"));
    }

    fn config() -> LaunchTemplateConfig {
        LaunchTemplateConfig {
            cluster_name: "ssungz-cluster".into(),
            image_id: "ami-1".into(),
            instance_profile: "KarpenterNodeInstanceProfile".into(),
            security_group_ids: vec!["sg-1".into()],
            user_data: "#!/bin/bash".into(),
            block_device_mappings: default_block_devices(AmiFamily::Al2),
            metadata: Metadata::resolve(None),
            detailed_monitoring: false,
            tags: BTreeMap::from([("karpenter.sh/discovery".to_string(), "ssungz-cluster".to_string())]),
        }
    }

    #[test]
    fn names_launch_templates_by_a_stable_hash_of_their_configuration() {
        let name = config().name();
        assert!(name.starts_with("karpenter-rs/ssungz-cluster/"), "{name}");
        assert_eq!(name.len(), "karpenter-rs/ssungz-cluster/".len() + 16);
        assert_eq!(name, config().name(), "same configuration, same name");
        // Pinned so that a change of the hashing (which would orphan every existing template) is noticed.
        assert_eq!(name, "karpenter-rs/ssungz-cluster/6519f03c5a686d37");
        let mut other = config();
        other.user_data.push_str("\necho changed");
        assert_ne!(other.name(), name);
        let mut other = config();
        other.tags.insert("team".into(), "a".into());
        assert_ne!(other.name(), name);
    }

    #[test]
    fn defaults_metadata_options_and_block_devices() {
        assert_eq!(default_block_devices(AmiFamily::Al2023), default_block_devices(AmiFamily::Al2));
        assert_eq!(
            Metadata::resolve(None),
            Metadata {
                http_endpoint: "enabled".into(),
                http_protocol_ipv6: "disabled".into(),
                http_put_response_hop_limit: 2,
                http_tokens: "required".into()
            }
        );
        let set = MetadataOptions {
            http_tokens: Some("optional".into()),
            ..Default::default()
        };
        assert_eq!(Metadata::resolve(Some(&set)).http_tokens, "optional");
        let br = default_block_devices(AmiFamily::Bottlerocket);
        assert_eq!(br.len(), 2);
        assert_eq!(volume_gib(br[0].ebs.as_ref().unwrap().volume_size.as_ref().unwrap()).unwrap(), 4);
        assert_eq!(volume_gib(&Quantity("100G".into())).unwrap(), 94);
        assert!(volume_gib(&Quantity("lots".into())).is_err());
        assert!(default_block_devices(AmiFamily::Custom).is_empty());
    }
}
