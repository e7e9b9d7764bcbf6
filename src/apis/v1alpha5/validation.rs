//! Validation of a Provisioner: every rule of Karpenter's core and AWS webhooks as karpenter-rs
//! amends them, plus the warnings for accepted-but-suspicious specs. Pure functions that return
//! every problem at once.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Taint;

use super::labels::{self, PROVISIONER_NAME_LABEL};
use super::requirements::{admits, validate_requirement};
use super::{KubeletConfiguration, Provisioner, ProvisionerSpec};
use crate::apis::decode::decode;
use crate::apis::field_error::{FieldError, FieldErrors, Path};
use crate::apis::names::{check_label_value, check_qualified_name};
use crate::apis::quantity::{check_spec_quantity, parse_go_duration, parse_quantity, MAX_AMOUNT};
use crate::apis::v1alpha1::validation::validate_provider;
use crate::apis::v1alpha1::AwsProvider;
use crate::apis::{validate_object_name, ApiSettings};

/// The longest TTL a Provisioner may give (100 years of 365 days): every date computed from a
/// node's creation and a TTL stays representable.
pub const MAX_TTL_SECONDS: i64 = 100 * 365 * 24 * 3600;

/// Taint effects a node accepts.
pub const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// Eviction signals the kubelet supports in evictionHard / evictionSoft.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];
/// Resources that kubeReserved / systemReserved may reserve.
pub const RESERVED_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// Validates a Provisioner: its name and every field of its spec.
pub fn validate(provisioner: &Provisioner, settings: &ApiSettings) -> Result<(), FieldErrors> {
    let mut errs = FieldErrors::new();
    errs.extend(validate_object_name(&provisioner.metadata));
    errs.extend(validate_spec(&provisioner.spec, settings));
    errs.into_result()
}

/// Every problem in a Provisioner spec, with paths under `spec`.
pub fn validate_spec(spec: &ProvisionerSpec, settings: &ApiSettings) -> Vec<FieldError> {
    let path = Path::new("spec");
    let mut errs = Vec::new();

    // TTLs and consolidation.
    for (field, ttl) in [
        ("ttlSecondsAfterEmpty", spec.ttl_seconds_after_empty),
        ("ttlSecondsUntilExpired", spec.ttl_seconds_until_expired),
    ] {
        match ttl {
            Some(ttl) if ttl < 0 => errs.push(FieldError::invalid(path.child(field), ttl, "must be 0 or greater")),
            Some(ttl) if ttl > MAX_TTL_SECONDS => errs.push(FieldError::invalid(
                path.child(field),
                ttl,
                format!("must be at most {MAX_TTL_SECONDS} (100 years)"),
            )),
            _ => {}
        }
    }
    let consolidating = spec.consolidation.as_ref().and_then(|c| c.enabled) == Some(true);
    if consolidating && spec.ttl_seconds_after_empty.is_some_and(|t| t >= 0) {
        errs.push(FieldError::forbidden(
            path.child("ttlSecondsAfterEmpty"),
            "ttlSecondsAfterEmpty and consolidation.enabled: true are mutually exclusive: consolidation already removes empty nodes",
        ));
    }
    if let Some(weight) = spec.weight.filter(|w| !(1..=100).contains(w)) {
        errs.push(FieldError::invalid(path.child("weight"), weight, "must be between 1 and 100"));
    }

    // Where the AWS settings come from.
    match (&spec.provider, &spec.provider_ref) {
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(
            path.child("provider"),
            "provider and providerRef are mutually exclusive: give exactly one (providerRef to an AWSNodeTemplate is preferred)",
        )),
        (None, None) => errs.push(FieldError::required(
            path.child("providerRef"),
            "give exactly one of providerRef (the name of an AWSNodeTemplate) or provider",
        )),
        (Some(raw), None) => {
            let provider_path = path.child("provider");
            match decode::<AwsProvider>(raw, &provider_path) {
                Ok(provider) => errs.extend(
                    validate_provider(&provider, &provider_path, &settings.cluster_name)
                        .errors()
                        .iter()
                        .cloned(),
                ),
                Err(e) => errs.push(e),
            }
        }
        (None, Some(reference)) => {
            let ref_path = path.child("providerRef");
            if reference.name.is_empty() {
                errs.push(FieldError::required(
                    ref_path.child("name"),
                    "name the AWSNodeTemplate holding this Provisioner's AWS settings",
                ));
            }
            if let Some(kind) = reference.kind.as_deref().filter(|k| *k != "AWSNodeTemplate") {
                errs.push(FieldError::invalid(ref_path.child("kind"), kind, "must be AWSNodeTemplate"));
            }
            if let Some(v) = reference.api_version.as_deref().filter(|v| *v != "karpenter.k8s.aws/v1alpha1") {
                errs.push(FieldError::invalid(
                    ref_path.child("apiVersion"),
                    v,
                    "must be karpenter.k8s.aws/v1alpha1",
                ));
            }
        }
    }

    if let Some(node_labels) = &spec.labels {
        errs.extend(validate_labels(node_labels, &path.child("labels")));
    }
    let requirements = spec.requirements.as_deref().unwrap_or_default();
    for (i, r) in requirements.iter().enumerate() {
        errs.extend(validate_requirement(r, &path.child("requirements").index(i)));
    }
    errs.extend(contradictions(spec, &path));
    errs.extend(validate_taints(spec, &path));
    if let Some(kubelet) = &spec.kubelet_configuration {
        errs.extend(validate_kubelet(kubelet, &path.child("kubeletConfiguration")));
    }
    if let Some(resources) = spec.limits.as_ref().and_then(|l| l.resources.as_ref()) {
        let limits_path = path.child("limits").child("resources");
        for (name, q) in resources {
            if let Err(reason) = check_qualified_name(name) {
                errs.push(FieldError::invalid(limits_path.clone(), name, format!("resource name {reason}")));
            }
            if let Err(reason) = check_spec_quantity(name, &q.0) {
                errs.push(FieldError::invalid(limits_path.key(name), &q.0, reason));
            }
        }
    }
    errs
}

/// Label keys must be qualified names outside the restricted domains; values must be label values.
fn validate_labels(node_labels: &BTreeMap<String, String>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, value) in node_labels {
        let entry = path.key(key);
        if key == PROVISIONER_NAME_LABEL {
            errs.push(FieldError::forbidden(
                entry.clone(),
                format!("{PROVISIONER_NAME_LABEL} is set by karpenter-rs on every node it launches"),
            ));
        } else if let Err(reason) = check_qualified_name(key) {
            errs.push(FieldError::invalid(path.clone(), key, format!("invalid label key: {reason}")));
            continue;
        } else if let Some(reason) = labels::restriction(key) {
            errs.push(FieldError::invalid(path.clone(), key, reason));
        }
        if let Err(reason) = check_label_value(value) {
            errs.push(FieldError::invalid(entry, value, reason));
        }
    }
    errs
}

/// A label whose value the Provisioner's own requirements exclude can never produce a node.
fn contradictions(spec: &ProvisionerSpec, path: &Path) -> Vec<FieldError> {
    let (Some(node_labels), Some(reqs)) = (&spec.labels, &spec.requirements) else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    for (key, value) in node_labels {
        for (i, r) in reqs.iter().enumerate() {
            if labels::normalize(&r.key) == labels::normalize(key) && !admits(r, Some(value)) {
                errs.push(FieldError::invalid(
                    path.child("labels").key(key),
                    value,
                    format!(
                        "contradicts spec.requirements[{i}] ({} {} {}): no node could carry both",
                        r.key,
                        r.operator,
                        serde_json::to_string(r.values.as_deref().unwrap_or_default()).expect("strings serialize")
                    ),
                ));
            }
        }
    }
    errs
}

/// Taints and startup taints: qualified keys, label-value values, a real effect, and no
/// (key, effect) pair twice across both lists.
fn validate_taints(spec: &ProvisionerSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen: BTreeMap<(String, String), Path> = BTreeMap::new();
    let lists: [(&str, &Option<Vec<Taint>>); 2] = [("taints", &spec.taints), ("startupTaints", &spec.startup_taints)];
    for (field, taints) in lists {
        for (i, t) in taints.as_deref().unwrap_or_default().iter().enumerate() {
            let taint_path = path.child(field).index(i);
            if t.key.is_empty() {
                errs.push(FieldError::required(taint_path.child("key"), "a taint needs a key"));
            } else if let Err(reason) = check_qualified_name(&t.key) {
                errs.push(FieldError::invalid(taint_path.child("key"), &t.key, reason));
            }
            if let Some(value) = &t.value {
                if let Err(reason) = check_label_value(value) {
                    errs.push(FieldError::invalid(taint_path.child("value"), value, reason));
                }
            }
            if t.effect.is_empty() {
                errs.push(FieldError::required(
                    taint_path.child("effect"),
                    format!("must be one of {}", TAINT_EFFECTS.join(", ")),
                ));
            } else if !TAINT_EFFECTS.contains(&t.effect.as_str()) {
                errs.push(FieldError::invalid(
                    taint_path.child("effect"),
                    &t.effect,
                    format!("must be one of {}", TAINT_EFFECTS.join(", ")),
                ));
            }
            match seen.get(&(t.key.clone(), t.effect.clone())) {
                Some(first) => errs.push(FieldError::invalid(
                    taint_path,
                    format!("{}:{}", t.key, t.effect),
                    format!("duplicate taint: the same key and effect are already at {first}"),
                )),
                None => {
                    seen.insert((t.key.clone(), t.effect.clone()), taint_path);
                }
            }
        }
    }
    errs
}

fn validate_kubelet(k: &KubeletConfiguration, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(dns) = &k.cluster_dns {
        for (i, ip) in dns.iter().enumerate() {
            if ip.parse::<IpAddr>().is_err() {
                errs.push(FieldError::invalid(path.child("clusterDNS").index(i), ip, "must be an IP address"));
            }
        }
    }
    for (field, map) in [("evictionHard", &k.eviction_hard), ("evictionSoft", &k.eviction_soft)] {
        for (signal, threshold) in map.iter().flatten() {
            let entry = path.child(field).key(signal);
            if !EVICTION_SIGNALS.contains(&signal.as_str()) {
                errs.push(FieldError::invalid(
                    path.child(field),
                    signal,
                    format!("unsupported eviction signal; use one of {}", EVICTION_SIGNALS.join(", ")),
                ));
            } else if let Err(reason) = check_threshold(threshold) {
                errs.push(FieldError::invalid(entry, threshold, reason));
            }
        }
    }
    let soft: BTreeSet<&String> = k.eviction_soft.iter().flatten().map(|(s, _)| s).collect();
    let grace = k.eviction_soft_grace_period.as_ref();
    for signal in &soft {
        if !grace.is_some_and(|g| g.contains_key(*signal)) {
            errs.push(FieldError::required(
                path.child("evictionSoftGracePeriod").key(signal),
                format!("soft eviction threshold {signal:?} needs a grace period"),
            ));
        }
    }
    for (signal, period) in grace.into_iter().flatten() {
        let entry = path.child("evictionSoftGracePeriod").key(signal);
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            errs.push(FieldError::invalid(
                path.child("evictionSoftGracePeriod"),
                signal,
                format!("unsupported eviction signal; use one of {}", EVICTION_SIGNALS.join(", ")),
            ));
        } else if !soft.contains(signal) {
            errs.push(FieldError::invalid(
                entry.clone(),
                period,
                format!("has no matching evictionSoft threshold for {signal:?}"),
            ));
        }
        match parse_go_duration(period) {
            Some(s) if s >= 0.0 => {}
            _ => errs.push(FieldError::invalid(entry, period, "must be a duration such as 1m or 1m30s")),
        }
    }
    if let Some(g) = k.eviction_max_pod_grace_period.filter(|g| *g < 0) {
        errs.push(FieldError::invalid(
            path.child("evictionMaxPodGracePeriod"),
            g,
            "must be 0 or greater",
        ));
    }
    for (field, map) in [("kubeReserved", &k.kube_reserved), ("systemReserved", &k.system_reserved)] {
        for (resource, q) in map.iter().flatten() {
            if !RESERVED_RESOURCES.contains(&resource.as_str()) {
                errs.push(FieldError::invalid(
                    path.child(field),
                    resource,
                    format!("unsupported resource; use one of {}", RESERVED_RESOURCES.join(", ")),
                ));
                continue;
            }
            if let Err(reason) = check_spec_quantity(resource, &q.0) {
                errs.push(FieldError::invalid(path.child(field).key(resource), &q.0, reason));
            }
        }
    }
    for (field, value) in [
        ("imageGCHighThresholdPercent", k.image_gc_high_threshold_percent),
        ("imageGCLowThresholdPercent", k.image_gc_low_threshold_percent),
    ] {
        if let Some(v) = value.filter(|v| !(0..=100).contains(v)) {
            errs.push(FieldError::invalid(path.child(field), v, "must be between 0 and 100"));
        }
    }
    if let (Some(high), Some(low)) = (k.image_gc_high_threshold_percent, k.image_gc_low_threshold_percent) {
        if low > high {
            errs.push(FieldError::invalid(
                path.child("imageGCLowThresholdPercent"),
                low,
                format!("must not be greater than imageGCHighThresholdPercent ({high})"),
            ));
        }
    }
    for (field, value) in [("maxPods", k.max_pods), ("podsPerCore", k.pods_per_core)] {
        if let Some(v) = value.filter(|v| *v < 0) {
            errs.push(FieldError::invalid(path.child(field), v, "must be 0 or greater"));
        }
    }
    errs
}

/// An eviction threshold: a percentage in [0, 100] (`10%`) or a non-negative quantity (`500Mi`).
fn check_threshold(threshold: &str) -> Result<(), String> {
    if threshold.ends_with('%') {
        return match threshold.trim_matches('%').parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(()),
            _ => Err("a percentage must lie between 0% and 100%".into()),
        };
    }
    match parse_quantity(threshold) {
        Some(v) if v > MAX_AMOUNT as f64 => Err("must be at most 4Ei".into()),
        Some(v) if v >= 0.0 => Ok(()),
        _ => Err("must be a percentage such as 10% or a quantity such as 500Mi".into()),
    }
}

/// Values each well-known key can take on any instance type karpenter-rs launches.
const KNOWN_VALUES: &[(&str, &[&str])] = &[
    (labels::ARCH_LABEL, &["amd64", "arm64"]),
    (labels::OS_LABEL, &["linux", "windows"]),
    (
        labels::CAPACITY_TYPE_LABEL,
        &[labels::CAPACITY_TYPE_ON_DEMAND, labels::CAPACITY_TYPE_SPOT],
    ),
];

/// Things that are accepted but probably not meant, shown by kubectl as warnings.
pub fn warnings(spec: &ProvisionerSpec) -> Vec<String> {
    let mut out = Vec::new();
    let reqs = spec.requirements.as_deref().unwrap_or_default();
    for (i, r) in reqs.iter().enumerate() {
        if labels::is_deprecated(&r.key) {
            out.push(format!(
                "spec.requirements[{i}].key: {:?} is deprecated and is read as {:?}; use the new key",
                r.key,
                labels::normalize(&r.key)
            ));
        }
    }
    // Keys whose requirements (with the Provisioner's own label) leave no value a node could carry.
    let mut keys: Vec<&str> = reqs.iter().map(|r| labels::normalize(&r.key)).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let on_key: Vec<_> = reqs.iter().filter(|r| labels::normalize(&r.key) == key).collect();
        let candidates: Vec<String> = match KNOWN_VALUES.iter().find(|(k, _)| *k == key) {
            Some((_, known)) => known.iter().map(|s| s.to_string()).collect(),
            None => on_key.iter().flat_map(|r| r.values.iter().flatten().cloned()).collect(),
        };
        let bounded = KNOWN_VALUES.iter().any(|(k, _)| *k == key) || on_key.iter().any(|r| r.operator == "In");
        if bounded && !candidates.iter().any(|v| on_key.iter().all(|r| admits(r, Some(v)))) {
            out.push(format!(
                "spec.requirements: the requirements on {key:?} admit no value any instance type has; this Provisioner can never launch a node"
            ));
        }
    }
    let spot_allowed = reqs
        .iter()
        .filter(|r| labels::normalize(&r.key) == labels::CAPACITY_TYPE_LABEL)
        .all(|r| admits(r, Some(labels::CAPACITY_TYPE_SPOT)));
    let has_spot_price = spec.provider.as_ref().and_then(|p| p.get("spotPrice")).is_some();
    if has_spot_price && !spot_allowed {
        out.push("spec.provider.spotPrice: has no effect because the requirements allow on-demand capacity only".into());
    }
    out
}

#[cfg(test)]
mod tests;
