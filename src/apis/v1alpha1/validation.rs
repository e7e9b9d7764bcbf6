//! Validation of the AWS settings: the `AWSNodeTemplate` kind and a Provisioner's inline
//! `spec.provider`, sharing one set of rules. Pure functions returning every problem at once.

use std::collections::BTreeMap;

use super::{AwsNodeTemplate, AwsProvider, AwsSettings, BlockDeviceMapping, MetadataOptions};
use crate::apis::field_error::{FieldError, FieldErrors, Path};
use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::apis::validate_object_name;

/// The AMI families karpenter-rs knows how to bootstrap.
pub const AMI_FAMILIES: &[&str] = &["AL2", "AL2023", "Bottlerocket", "Ubuntu", "Windows2019", "Windows2022", "Custom"];
/// EBS volume types.
pub const VOLUME_TYPES: &[&str] = &["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"];
/// Selector keys that select by id rather than by tag.
pub const ID_FILTER_KEYS: &[&str] = &["aws-ids", "aws::ids"];
/// Tag naming the cluster whose karpenter-rs manages an instance. Not Karpenter's
/// `karpenter.sh/managed-by`: Karpenter v0.28–v0.31's garbage collector terminates every
/// instance carrying that tag that none of its Machines names, so a Karpenter still installed
/// during a migration would delete ours 30 s after launch
/// (`aws@v0.29.0:pkg/controllers/machine/garbagecollection/controller.go`).
pub const MANAGED_BY_TAG: &str = "karpenter-rs.sh/managed-by";
/// The tag Karpenter v0.28+ keys its garbage collection on; refused as a user tag, since it
/// would invite that collector to delete our instances.
pub const KARPENTER_MANAGED_BY_TAG: &str = "karpenter.sh/managed-by";
/// Tag keys karpenter-rs sets itself on what it launches, or that would hand the instance to
/// another controller.
pub const RESTRICTED_TAG_KEYS: &[&str] = &[PROVISIONER_NAME_LABEL, MANAGED_BY_TAG, KARPENTER_MANAGED_BY_TAG];
/// Prefix of the cluster-ownership tag EKS and karpenter-rs set.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";

const MIN_VOLUME_BYTES: f64 = 1e9;
const MAX_VOLUME_BYTES: f64 = 64e12;

/// Validates an AWSNodeTemplate: its name and every field of its spec.
pub fn validate(template: &AwsNodeTemplate) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::new();
    errs.extend(validate_object_name(&template.metadata));
    let spec = &template.spec;
    let path = Path::new("spec");
    errs.extend(validate_settings(&spec.settings(), &path).errors().iter().cloned());
    if let (Some(_), Some(_)) = (&spec.user_data, &spec.launch_template) {
        errs.push(FieldError::forbidden(
            path.child("userData"),
            "userData and launchTemplate are mutually exclusive: the launch template carries its own user data",
        ));
    }
    if let Some(selector) = &spec.ami_selector {
        let ami_path = path.child("amiSelector");
        if spec.launch_template.is_some() {
            errs.push(FieldError::forbidden(
                ami_path.clone(),
                "amiSelector and launchTemplate are mutually exclusive: the launch template names its own AMI",
            ));
        }
        errs.extend(validate_selector(selector, &ami_path, "ami-"));
    }
    if spec.ami_family.as_deref() == Some("Custom") && spec.ami_selector.is_none() {
        errs.push(FieldError::required(
            path.child("amiSelector"),
            "amiFamily Custom needs an amiSelector to find its AMIs",
        ));
    }
    errs.into_result()
}

/// Validates a Provisioner's inline provider (already decoded strictly) under `path`
/// (`spec.provider`). `cluster_name` is the cluster karpenter-rs is configured for.
pub fn validate_provider(provider: &AwsProvider, path: &Path, cluster_name: &str) -> FieldErrors {
    let mut errs = validate_settings(&provider.settings(), path);
    if let Some(name) = &provider.cluster_name {
        if name != cluster_name {
            errs.push(FieldError::invalid(
                path.child("clusterName"),
                name,
                format!("karpenter-rs manages cluster {cluster_name:?}; clusterName must be {cluster_name:?} or be left out"),
            ));
        }
    }
    if let Some(price) = &provider.spot_price {
        if let Err(reason) = check_spot_price(price) {
            errs.push(FieldError::invalid(path.child("spotPrice"), price, reason));
        }
    }
    errs
}

/// A maximum spot price: a decimal string of USD per hour greater than 0.
pub fn check_spot_price(price: &str) -> Result<f64, String> {
    const REASON: &str = "must be a decimal number of USD per hour greater than 0, written as a string (\"0.067\")";
    let digits_ok =
        !price.is_empty() && price.bytes().all(|b| b.is_ascii_digit() || b == b'.') && price.matches('.').count() <= 1 && price != ".";
    match price.parse::<f64>() {
        Ok(v) if digits_ok && v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(REASON.to_string()),
    }
}

/// The rules both shapes share, with paths under `path`.
pub fn validate_settings(s: &AwsSettings<'_>, path: &Path) -> FieldErrors {
    let mut errs = FieldErrors::new();
    match s.subnet_selector {
        None => errs.push(FieldError::required(
            path.child("subnetSelector"),
            "select the subnets nodes may use, by tag or with aws-ids",
        )),
        Some(sel) => errs.extend(validate_selector(sel, &path.child("subnetSelector"), "subnet-")),
    }
    match (s.security_group_selector, s.launch_template) {
        (None, None) => errs.push(FieldError::required(
            path.child("securityGroupSelector"),
            "select the security groups of the nodes, by tag or with aws-ids (or name a launchTemplate)",
        )),
        (Some(sel), _) => errs.extend(validate_selector(sel, &path.child("securityGroupSelector"), "sg-")),
        (None, Some(_)) => {}
    }
    if let Some(template) = s.launch_template {
        let conflicts = [
            ("securityGroupSelector", s.security_group_selector.is_some()),
            ("metadataOptions", s.metadata_options.is_some()),
            ("amiFamily", s.ami_family.is_some()),
            ("instanceProfile", s.instance_profile.is_some()),
            ("blockDeviceMappings", s.block_device_mappings.is_some_and(|b| !b.is_empty())),
        ];
        for (field, set) in conflicts {
            if set {
                errs.push(FieldError::forbidden(
                    path.child(field),
                    format!("{field} and launchTemplate ({template:?}) are mutually exclusive: the launch template owns this setting"),
                ));
            }
        }
    }
    if let Some(tags) = s.tags {
        errs.extend(validate_tags(tags, &path.child("tags")));
    }
    if let Some(options) = s.metadata_options {
        errs.extend(validate_metadata_options(options, &path.child("metadataOptions")));
    }
    if let Some(family) = s.ami_family {
        if !AMI_FAMILIES.contains(&family) {
            errs.push(FieldError::invalid(
                path.child("amiFamily"),
                family,
                format!("must be one of {}", AMI_FAMILIES.join(", ")),
            ));
        }
    }
    if let Some(mappings) = s.block_device_mappings {
        for (i, m) in mappings.iter().enumerate() {
            errs.extend(validate_block_device_mapping(m, &path.child("blockDeviceMappings").index(i)));
        }
    }
    errs
}

/// A tag selector: no empty keys or values; an id filter (`aws-ids`) must stand alone and list
/// ids that start with `id_prefix`.
fn validate_selector(selector: &BTreeMap<String, String>, path: &Path, id_prefix: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, value) in selector {
        if key.is_empty() {
            errs.push(FieldError::invalid(path.clone(), key, "selector keys must not be empty"));
            continue;
        }
        let entry = path.key(key);
        if value.is_empty() {
            errs.push(FieldError::invalid(
                entry,
                value,
                "selector values must not be empty; use \"*\" to match any value",
            ));
            continue;
        }
        if ID_FILTER_KEYS.contains(&key.as_str()) {
            if selector.len() > 1 {
                errs.push(FieldError::forbidden(
                    entry.clone(),
                    format!("{key} selects by id and must be the only key of the selector"),
                ));
            }
            for id in value.split(',').map(str::trim) {
                if !is_aws_id(id, id_prefix) {
                    errs.push(FieldError::invalid(
                        entry.clone(),
                        value,
                        format!("{id:?} is not an id of the form {id_prefix}<lowercase letters and digits>; list ids separated by commas"),
                    ));
                }
            }
        }
    }
    errs
}

/// `subnet-0abc`, `sg-12`, `ami-9f`: the prefix then one or more lowercase letters or digits.
fn is_aws_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// Tags: no empty keys, and none of the keys karpenter-rs sets itself.
fn validate_tags(tags: &BTreeMap<String, String>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for key in tags.keys() {
        if key.is_empty() {
            errs.push(FieldError::invalid(path.clone(), key, "tag keys must not be empty"));
        } else if RESTRICTED_TAG_KEYS.contains(&key.as_str()) || key.starts_with(CLUSTER_TAG_PREFIX) {
            errs.push(FieldError::forbidden(
                path.key(key),
                format!("tag {key:?} is set by karpenter-rs itself to track the instances it owns"),
            ));
        }
    }
    errs
}

fn validate_metadata_options(o: &MetadataOptions, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let enums = [
        ("httpEndpoint", &o.http_endpoint, &["enabled", "disabled"][..]),
        ("httpProtocolIPv6", &o.http_protocol_ipv6, &["enabled", "disabled"][..]),
        ("httpTokens", &o.http_tokens, &["optional", "required"][..]),
    ];
    for (field, value, allowed) in enums {
        if let Some(v) = value {
            if !allowed.contains(&v.as_str()) {
                errs.push(FieldError::invalid(
                    path.child(field),
                    v,
                    format!("must be one of {}", allowed.join(", ")),
                ));
            }
        }
    }
    if let Some(hops) = o.http_put_response_hop_limit {
        if !(1..=64).contains(&hops) {
            errs.push(FieldError::invalid(
                path.child("httpPutResponseHopLimit"),
                hops,
                "must be between 1 and 64",
            ));
        }
    }
    errs
}

fn validate_block_device_mapping(m: &BlockDeviceMapping, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if m.device_name.as_deref().unwrap_or("").is_empty() {
        errs.push(FieldError::required(path.child("deviceName"), "name the device, e.g. /dev/xvda"));
    }
    let Some(ebs) = &m.ebs else {
        errs.push(FieldError::required(path.child("ebs"), "describe the EBS volume"));
        return errs;
    };
    let ebs_path = path.child("ebs");
    if let Some(t) = &ebs.volume_type {
        if !VOLUME_TYPES.contains(&t.as_str()) {
            errs.push(FieldError::invalid(
                ebs_path.child("volumeType"),
                t,
                format!("must be one of {}", VOLUME_TYPES.join(", ")),
            ));
        }
    }
    match (&ebs.volume_size, &ebs.snapshot_id) {
        (None, None) => errs.push(FieldError::required(
            ebs_path.child("volumeSize"),
            "give a size, or a snapshotID to size the volume from",
        )),
        (Some(size), _) => match parse_quantity(&size.0) {
            Some(bytes) if (MIN_VOLUME_BYTES..=MAX_VOLUME_BYTES).contains(&bytes) => {}
            Some(_) => errs.push(FieldError::invalid(
                ebs_path.child("volumeSize"),
                &size.0,
                "must be between 1G and 64T (decimal units; a bare number is bytes)",
            )),
            None => errs.push(FieldError::invalid(
                ebs_path.child("volumeSize"),
                &size.0,
                "must be a quantity such as 20Gi or 100G",
            )),
        },
        (None, Some(_)) => {}
    }
    errs
}

#[cfg(test)]
mod tests;
