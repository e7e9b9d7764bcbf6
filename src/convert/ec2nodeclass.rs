//! A defaulted, valid AWSNodeTemplate (or a Provisioner's inline provider) → a Karpenter v1
//! EC2NodeClass document (aws@v1.6.3:pkg/apis/v1/ec2nodeclass.go and the CRD's CEL rules), with
//! the kubelet settings v1 moved here from the NodePool. Pure.
//!
//! Selectors become selector terms with karpenter-rs's meaning kept: keys are ANDed within a
//! term, a comma-separated tag value matched any of its values (so each combination becomes a
//! term, and terms are ORed), `aws-ids`/`aws::ids` become one `id` term per id. The AMI family
//! becomes an `alias` term, the launch-time defaults (metadata options, Ubuntu's SSM
//! parameters and root device) are written out, since v1's defaults differ. How the AMI family
//! and selector become terms is in `ami`.

mod ami;

use std::collections::BTreeMap;

use super::nodepool::object_metadata;
use super::yaml::{self, Document, Item, MapBuilder, Node};
use super::class_plan::ClassPlan;
use super::Settings;
use crate::apis::field_error::{FieldError, FieldErrors, Path};
use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha1::validation::ID_FILTER_KEYS;
use crate::apis::v1alpha1::{BlockDeviceMapping, MetadataOptions};
use crate::apis::v1alpha5::KubeletConfiguration;
use crate::cloudprovider::aws::launch_template::Metadata;
use crate::cloudprovider::aws::subnets::split_comma;
use ami::ami;

/// Most selector terms a v1 EC2NodeClass takes per selector.
pub const MAX_TERMS: usize = 30;
/// Most tags one v1 selector term takes.
pub const MAX_TERM_TAGS: usize = 20;
/// Tag keys (or, for the cluster tag, prefixes) Karpenter v1 sets itself and refuses in `tags`.
pub const V1_RESTRICTED_TAGS: &[&str] = &[
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
];
/// Prefix of the cluster tags v1 refuses in `tags` (a plain prefix, with or without a slash).
pub const V1_RESTRICTED_TAG_PREFIX: &str = "kubernetes.io/cluster";

/// The EC2NodeClass of `plan`, or the fields that have no v1 equivalent v1 could accept.
pub fn convert(plan: &ClassPlan<'_>, settings: &Settings) -> Result<Document, FieldErrors> {
    let spec = &plan.spec;
    let path = &plan.path;
    let mut errs = FieldErrors::new();
    let mut out = MapBuilder::new();

    if let Some(template) = &spec.launch_template {
        errs.push(FieldError::forbidden(
            path.child("launchTemplate"),
            format!("Karpenter v1 has no launchTemplate ({template:?}): move its AMI, security groups, user data and devices into the template's own fields and convert again"),
        ));
    }
    if let Some(k) = plan.kubelet {
        let (node, notes) = kubelet(k);
        out.noted("kubelet", node, notes);
    }
    let selectors = [
        ("subnetSelector", "subnetSelectorTerms", &spec.subnet_selector),
        ("securityGroupSelector", "securityGroupSelectorTerms", &spec.security_group_selector),
    ];
    for (field, terms_field, selector) in selectors {
        // Defaulting fills both in unless a launch template (refused above) owns the groups.
        let Some(selector) = selector else { continue };
        match selector_terms(selector, &path.child(field), &[]) {
            Ok((node, notes)) => {
                out.noted(terms_field, node, notes);
            }
            Err(e) => errs.push(e),
        }
    }
    match ami(spec.ami_family.as_deref(), spec.ami_selector.as_ref(), path, settings) {
        Ok(a) => {
            if let Some(family) = a.family {
                out.noted("amiFamily", Node::str(family), a.family_notes);
            }
            out.noted("amiSelectorTerms", a.terms, a.notes);
            if let Some(devices) = a.block_devices.filter(|_| spec.block_device_mappings.is_none()) {
                out.noted(
                    "blockDeviceMappings",
                    block_device_mappings(&devices, true),
                    vec!["Ubuntu's root device as karpenter-rs set it up (Karpenter v1's AL2 default names /dev/xvda)".to_string()],
                );
            }
        }
        Err(e) => errs.push(e),
    }
    let instance_profile = spec.instance_profile.as_ref().filter(|p| !p.is_empty());
    match (instance_profile, &settings.default_instance_profile) {
        (Some(profile), _) => {
            out.field("instanceProfile", Node::str(profile.clone()));
        }
        (None, Some(profile)) => {
            out.noted(
                "instanceProfile",
                Node::str(profile.clone()),
                vec!["instanceProfile was not set: karpenter-rs used its --default-instance-profile.".to_string()],
            );
        }
        (None, None) => {
            out.noted(
                "role",
                Node::str(format!("KarpenterNodeRole-{}", plan.cluster_name)),
                vec![
                    "REPLACE: instanceProfile was not set, so karpenter-rs used its --default-instance-profile, which this".to_string(),
                    "conversion does not know. Karpenter v1 needs the nodes' IAM role (role) or an instance profile".to_string(),
                    "(instanceProfile): put your node role's name here, or replace role with instanceProfile.".to_string(),
                ],
            );
        }
    }
    if let Some(user_data) = &spec.user_data {
        out.field("userData", Node::str(user_data.clone()));
    }
    if let Some(tags) = &spec.tags {
        let mut kept = BTreeMap::new();
        let mut notes = Vec::new();
        for (k, v) in tags {
            if V1_RESTRICTED_TAGS.contains(&k.as_str()) || k.starts_with(V1_RESTRICTED_TAG_PREFIX) {
                notes.push(format!(
                    "tag {k}: {v} is left out: Karpenter v1 sets that tag itself and refuses it here."
                ));
            } else {
                kept.insert(k.clone(), v.clone());
            }
        }
        out.noted("tags", Node::string_map(&kept), notes);
    }
    let (metadata, metadata_notes) = metadata_options(spec.metadata_options.as_ref());
    out.noted("metadataOptions", metadata, metadata_notes);
    if let Some(devices) = &spec.block_device_mappings {
        match block_device_notes(devices, &path.child("blockDeviceMappings")) {
            Ok(notes) => {
                out.noted("blockDeviceMappings", block_device_mappings(devices, false), notes);
            }
            Err(e) => errs.extend(e.errors().iter().cloned()),
        }
    }
    if let Some(monitoring) = spec.detailed_monitoring {
        out.field("detailedMonitoring", Node::Bool(monitoring));
    }
    if let Some(context) = &spec.context {
        out.field("context", Node::str(context.clone()));
    }
    if !errs.is_empty() {
        return Err(errs);
    }

    let mut metadata = object_metadata(plan.metadata);
    if let Node::Map(fields) = &mut metadata {
        if let Some(name) = fields.iter_mut().find(|f| f.key == "name") {
            name.value = Node::str(plan.name.clone());
        }
    }
    let mut root = MapBuilder::new();
    root.field("apiVersion", Node::str("karpenter.k8s.aws/v1"));
    root.field("kind", Node::str("EC2NodeClass"));
    root.field("metadata", metadata);
    root.noted("spec", out.build(), plan.notes.clone());
    Ok(Document {
        header: plan.header.clone(),
        root: root.build(),
    })
}

/// Kubelet settings as YAML comment lines, indented as under `spec:`, for a class this run does
/// not write.
pub fn commented_kubelet(k: &KubeletConfiguration) -> String {
    let (node, notes) = kubelet(k);
    let mut m = MapBuilder::new();
    m.noted("kubelet", node, notes);
    let text = yaml::render_document(&Document {
        header: Vec::new(),
        root: m.build(),
    });
    text.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

/// `spec.kubelet` (aws@v1.6.3:pkg/apis/v1/ec2nodeclass.go `KubeletConfiguration`).
fn kubelet(k: &KubeletConfiguration) -> (Node, Vec<String>) {
    let mut m = MapBuilder::new();
    let mut notes = Vec::new();
    if let Some(dns) = &k.cluster_dns {
        m.field("clusterDNS", Node::string_seq(dns));
    }
    if let Some(v) = k.max_pods {
        m.field("maxPods", Node::Int(v.into()));
    }
    if let Some(v) = k.pods_per_core {
        m.field("podsPerCore", Node::Int(v.into()));
    }
    for (field, map) in [("systemReserved", &k.system_reserved), ("kubeReserved", &k.kube_reserved)] {
        if let Some(map) = map {
            let shown: BTreeMap<String, String> = map.iter().map(|(r, q)| (r.clone(), q.0.clone())).collect();
            m.field(field, Node::string_map(&shown));
        }
    }
    for (field, map) in [
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
        ("evictionSoftGracePeriod", &k.eviction_soft_grace_period),
    ] {
        if let Some(map) = map {
            m.field(field, Node::string_map(map));
        }
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        m.field("evictionMaxPodGracePeriod", Node::Int(v.into()));
    }
    let mut low = k.image_gc_low_threshold_percent;
    if let (Some(high), Some(l)) = (k.image_gc_high_threshold_percent, low) {
        // v1 wants high strictly above low; karpenter-rs accepted them equal.
        if l >= high {
            low = (high > 0).then_some(high - 1);
            notes.push(format!(
                "imageGCLowThresholdPercent {l} equalled imageGCHighThresholdPercent, which Karpenter v1 refuses (high must be greater): {}.",
                match low {
                    Some(v) => format!("lowered to {v}"),
                    None => "left out".to_string(),
                }
            ));
        }
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        m.field("imageGCHighThresholdPercent", Node::Int(v.into()));
    }
    if let Some(v) = low {
        m.field("imageGCLowThresholdPercent", Node::Int(v.into()));
    }
    if let Some(v) = k.cpu_cfs_quota {
        m.field("cpuCFSQuota", Node::Bool(v));
    }
    if let Some(runtime) = &k.container_runtime {
        notes.push(format!(
            "kubeletConfiguration.containerRuntime: {runtime} has no Karpenter v1 equivalent: v1 nodes run containerd."
        ));
    }
    (m.build(), notes)
}

/// Selector terms: one `id` term per id of an id filter, else one `tags` term per combination
/// of comma-separated values. `extra` adds fixed fields (an AMI's name and owner) to each term.
fn selector_terms(selector: &BTreeMap<String, String>, path: &Path, extra: &[(&str, String)]) -> Result<(Node, Vec<String>), FieldError> {
    let mut notes = Vec::new();
    if let Some((key, ids)) = selector.iter().find(|(k, _)| ID_FILTER_KEYS.contains(&k.as_str())) {
        let ids = split_comma(ids);
        if ids.len() > MAX_TERMS {
            return Err(too_many_terms(path, ids.len()));
        }
        let terms = ids
            .iter()
            .map(|id| {
                let mut t = MapBuilder::new();
                t.field("id", Node::str(id.clone()));
                Item::plain(t.build())
            })
            .collect();
        notes.push(format!("from {key}: one term per id"));
        return Ok((Node::Seq(terms), notes));
    }
    if selector.is_empty() && extra.is_empty() {
        return Err(FieldError::invalid(
            path.clone(),
            "{}",
            "an empty selector matches every resource of the region, which Karpenter v1 cannot express: select by tag or with aws-ids",
        ));
    }
    if selector.len() > MAX_TERM_TAGS {
        return Err(FieldError::invalid(
            path.clone(),
            selector.len(),
            format!("Karpenter v1 takes at most {MAX_TERM_TAGS} tags per selector term"),
        ));
    }
    // Each key's alternatives; a term per combination.
    let mut combinations: Vec<BTreeMap<String, String>> = vec![BTreeMap::new()];
    for (key, value) in selector {
        let values = if value == "*" { vec![value.clone()] } else { split_comma(value) };
        if values.len() > 1 {
            notes.push(format!(
                "{key}: {value} matched any of its comma-separated values; Karpenter v1 takes one value per tag, so each one gets a term (terms are ORed)."
            ));
        }
        combinations = combinations
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(key.clone(), v.clone());
                    c
                })
            })
            .collect();
        if combinations.len() > MAX_TERMS {
            return Err(too_many_terms(path, combinations.len()));
        }
    }
    let terms = combinations
        .iter()
        .map(|tags| {
            let mut t = MapBuilder::new();
            if !tags.is_empty() {
                t.field("tags", Node::string_map(tags));
            }
            for (field, value) in extra {
                t.field(field, Node::str(value.clone()));
            }
            Item::plain(t.build())
        })
        .collect();
    Ok((Node::Seq(terms), notes))
}

fn too_many_terms(path: &Path, n: usize) -> FieldError {
    FieldError::invalid(
        path.clone(),
        n,
        format!("would need {n} selector terms; Karpenter v1 takes at most {MAX_TERMS}"),
    )
}

/// Metadata options as karpenter-rs launched nodes: what the template set, its defaults for the
/// rest (Karpenter v1's default hop limit is 1, karpenter-rs's 2).
fn metadata_options(options: Option<&MetadataOptions>) -> (Node, Vec<String>) {
    let resolved = Metadata::resolve(options);
    let complete = options.is_some_and(|o| {
        o.http_endpoint.is_some() && o.http_protocol_ipv6.is_some() && o.http_put_response_hop_limit.is_some() && o.http_tokens.is_some()
    });
    let mut m = MapBuilder::new();
    m.field("httpEndpoint", Node::str(resolved.http_endpoint));
    m.field("httpProtocolIPv6", Node::str(resolved.http_protocol_ipv6));
    m.field("httpPutResponseHopLimit", Node::Int(resolved.http_put_response_hop_limit));
    m.field("httpTokens", Node::str(resolved.http_tokens));
    let notes = if complete {
        Vec::new()
    } else {
        vec!["what karpenter-rs launched nodes with; Karpenter v1 would default httpPutResponseHopLimit to 1".to_string()]
    };
    (m.build(), notes)
}

/// Whether a volume size is written as v1's CRD accepts it: whole `Gi`, `G`, `Ti` or `T` within
/// its pattern's bounds.
fn is_v1_volume_size(size: &str) -> bool {
    let digits = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &size[digits.len()..];
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let Ok(n) = digits.parse::<u64>() else { return false };
    match unit {
        "Gi" => (1..=59_000).contains(&n),
        "G" => (1..=64_000).contains(&n),
        "Ti" => (1..=9).contains(&n) || n == 58 || ((10..=57).contains(&n) && n % 10 <= 7),
        "T" => (1..=64).contains(&n),
        _ => false,
    }
}

/// The size v1 accepts for the volume karpenter-rs launched: whole GiB, rounded up as both round.
fn v1_volume_size(size: &str) -> Option<String> {
    if is_v1_volume_size(size) {
        return Some(size.to_string());
    }
    let bytes = parse_quantity(size)?;
    let gib = (bytes / 1024f64.powi(3)).ceil() as u64;
    Some(if gib <= 59_000 {
        format!("{gib}Gi")
    } else {
        format!("{}G", (bytes / 1e9).ceil() as u64)
    })
}

fn block_device_notes(devices: &[BlockDeviceMapping], path: &Path) -> Result<Vec<String>, FieldErrors> {
    let mut notes = Vec::new();
    let mut errs = FieldErrors::new();
    for (i, d) in devices.iter().enumerate() {
        let Some(size) = d.ebs.as_ref().and_then(|e| e.volume_size.as_ref()) else {
            continue;
        };
        match v1_volume_size(&size.0) {
            Some(v1) if v1 != size.0 => notes.push(format!(
                "blockDeviceMappings[{i}].ebs.volumeSize {:?} is written {v1:?}: Karpenter v1 takes whole Gi, G, Ti or T, and both launch the volume rounded up to whole GiB.",
                size.0
            )),
            Some(_) => {}
            None => errs.push(FieldError::invalid(
                path.index(i).child("ebs").child("volumeSize"),
                &size.0,
                "not a size Karpenter v1 can express",
            )),
        }
    }
    if errs.is_empty() {
        Ok(notes)
    } else {
        Err(errs)
    }
}

fn block_device_mappings(devices: &[BlockDeviceMapping], root_volume: bool) -> Node {
    let items = devices
        .iter()
        .map(|d| {
            let mut m = MapBuilder::new();
            if let Some(name) = &d.device_name {
                m.field("deviceName", Node::str(name.clone()));
            }
            if let Some(ebs) = &d.ebs {
                let mut e = MapBuilder::new();
                if let Some(v) = ebs.delete_on_termination {
                    e.field("deleteOnTermination", Node::Bool(v));
                }
                if let Some(v) = ebs.encrypted {
                    e.field("encrypted", Node::Bool(v));
                }
                if let Some(v) = ebs.iops {
                    e.field("iops", Node::Int(v));
                }
                if let Some(v) = &ebs.kms_key_id {
                    e.field("kmsKeyID", Node::str(v.clone()));
                }
                if let Some(v) = &ebs.snapshot_id {
                    e.field("snapshotID", Node::str(v.clone()));
                }
                if let Some(v) = ebs.throughput {
                    e.field("throughput", Node::Int(v));
                }
                if let Some(size) = ebs.volume_size.as_ref().and_then(|s| v1_volume_size(&s.0)) {
                    e.field("volumeSize", Node::str(size));
                }
                if let Some(v) = &ebs.volume_type {
                    e.field("volumeType", Node::str(v.clone()));
                }
                m.field("ebs", e.build());
            }
            if root_volume {
                m.field("rootVolume", Node::Bool(true));
            }
            Item::plain(m.build())
        })
        .collect();
    Node::Seq(items)
}

#[cfg(test)]
mod tests;
