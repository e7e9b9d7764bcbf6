//! User data: what a node's bootstrap reads to join the cluster, for each AMI family. Pure: the
//! EKS bootstrap script in MIME multipart (AL2, Ubuntu), nodeadm's `NodeConfig` in MIME multipart
//! (AL2023), Bottlerocket's TOML settings, and a Custom AMI's own user data as given; the labels a
//! kubelet registers with; and what a family's bootstrap cannot do without. Each family has a
//! golden file under `testdata/user_data/` for the first write-up's node
//! (`UPDATE_GOLDEN=1 cargo test --lib user_data` writes them again).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::apis::v1alpha5::KubeletConfiguration;
use crate::cloudprovider::{AmiFamily, CloudConfig, Error};

/// MIME boundary of generated user data (Karpenter's).
const BOUNDARY: &str = "//";
/// MIME type of a shell-script part.
const SHELL_CONTENT_TYPE: &str = "text/x-shellscript; charset=\"us-ascii\"";
/// MIME type of a nodeadm `NodeConfig` part.
const NODE_CONFIG_CONTENT_TYPE: &str = "application/node.eks.aws";

/// What the node bootstrap needs to know.
#[derive(Clone, Debug)]
pub struct Bootstrap<'a> {
    /// Cluster name.
    pub cluster_name: &'a str,
    /// API server URL.
    pub cluster_endpoint: &'a str,
    /// Base64 CA bundle of the API server.
    pub ca_bundle: Option<&'a str>,
    /// The cluster's service IPv4 CIDR (AL2023's `spec.cluster.cidr`).
    pub cluster_cidr: Option<&'a str>,
    /// Cluster DNS IP (`clusterDNS` of the kubelet settings wins).
    pub cluster_dns: Option<&'a str>,
    /// Node labels, capacity type included.
    pub labels: &'a BTreeMap<String, String>,
    /// Taints and startup taints.
    pub taints: &'a [Taint],
    /// Kubelet settings.
    pub kubelet: &'a KubeletConfiguration,
    /// The template's own user data, merged in.
    pub custom_user_data: Option<&'a str>,
}

/// The labels a node's kubelet registers with (`--node-labels`, nodeadm's and Bottlerocket's
/// `node-labels`): the node's labels except the well-known ones, plus the provisioner and the
/// capacity type. A well-known label describes the instance the fleet picks (zone, instance
/// type, architecture, its size and hardware): the launch only knows the choices, not the pick,
/// and a kubelet registering with the first choice would overwrite the true value karpenter-rs
/// put on the Node (its own well-known labels the kubelet sets from the instance anyway). As
/// Karpenter's `Requirements.Labels()` leaves out `IsRestrictedNodeLabel` keys
/// (core@v0.27.0:pkg/scheduling/requirements.go) and its launch template adds the capacity type
/// (aws@v0.27.0:pkg/providers/launchtemplate/launchtemplate.go).
pub fn kubelet_labels(labels: &BTreeMap<String, String>, provisioner: &str, capacity_type: &str) -> BTreeMap<String, String> {
    use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, PROVISIONER_NAME_LABEL, WELL_KNOWN_LABELS};
    let mut kubelet: BTreeMap<String, String> = labels
        .iter()
        .filter(|(k, _)| !WELL_KNOWN_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    kubelet.insert(PROVISIONER_NAME_LABEL.to_string(), provisioner.to_string());
    kubelet.insert(CAPACITY_TYPE_LABEL.to_string(), capacity_type.to_string());
    kubelet
}

/// The user data of a family, not yet base64-encoded. Custom AMIs get the template's user data only.
pub fn user_data(family: AmiFamily, b: &Bootstrap<'_>) -> Result<String, Error> {
    match family {
        AmiFamily::Al2 | AmiFamily::Ubuntu => Ok(eks_user_data(b)),
        AmiFamily::Al2023 => nodeadm_user_data(b),
        AmiFamily::Bottlerocket => bottlerocket_user_data(b),
        AmiFamily::Custom => Ok(b.custom_user_data.unwrap_or_default().to_string()),
    }
}

fn taint_arg(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={}:{}", t.key, v, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

fn joined<V: AsRef<str>>(map: &BTreeMap<String, V>, sep: &str) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}{sep}{}", v.as_ref()))
        .collect::<Vec<_>>()
        .join(",")
}

fn quantities(map: &BTreeMap<String, Quantity>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect()
}

/// `--kubelet-extra-args` of the EKS bootstrap, in Karpenter's order.
pub fn kubelet_extra_args(b: &Bootstrap<'_>) -> Vec<String> {
    let mut args = Vec::new();
    if !b.labels.is_empty() {
        args.push(format!("--node-labels={}", joined(b.labels, "=")));
    }
    if !b.taints.is_empty() {
        let taints: Vec<String> = b.taints.iter().map(taint_arg).collect();
        args.push(format!("--register-with-taints={}", taints.join(",")));
    }
    let k = b.kubelet;
    if let Some(n) = k.max_pods {
        args.push(format!("--max-pods={n}"));
    }
    if let Some(n) = k.pods_per_core {
        args.push(format!("--pods-per-core={n}"));
    }
    if let Some(m) = k.system_reserved.as_ref().filter(|m| !m.is_empty()) {
        args.push(format!("--system-reserved={}", joined(&quantities(m), "=")));
    }
    if let Some(m) = k.kube_reserved.as_ref().filter(|m| !m.is_empty()) {
        args.push(format!("--kube-reserved={}", joined(&quantities(m), "=")));
    }
    if let Some(m) = k.eviction_hard.as_ref().filter(|m| !m.is_empty()) {
        args.push(format!("--eviction-hard={}", joined(m, "<")));
    }
    if let Some(m) = k.eviction_soft.as_ref().filter(|m| !m.is_empty()) {
        args.push(format!("--eviction-soft={}", joined(m, "<")));
    }
    if let Some(m) = k.eviction_soft_grace_period.as_ref().filter(|m| !m.is_empty()) {
        args.push(format!("--eviction-soft-grace-period={}", joined(m, "=")));
    }
    if let Some(n) = k.eviction_max_pod_grace_period {
        args.push(format!("--eviction-max-pod-grace-period={n}"));
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        args.push(format!("--image-gc-high-threshold={n}"));
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        args.push(format!("--image-gc-low-threshold={n}"));
    }
    if let Some(q) = k.cpu_cfs_quota {
        args.push(format!("--cpu-cfs-quota={q}"));
    }
    args
}

fn cluster_dns<'a>(b: &'a Bootstrap<'_>) -> Option<&'a str> {
    b.kubelet
        .cluster_dns
        .as_ref()
        .and_then(|d| d.first())
        .map(String::as_str)
        .or(b.cluster_dns)
}

/// The EKS bootstrap script (AL2, Ubuntu).
pub fn eks_bootstrap_script(b: &Bootstrap<'_>) -> String {
    let mut s = String::from("#!/bin/bash -xe\n");
    s.push_str("exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n");
    // bootstrap.sh takes its options as separate words, never `--opt=value`.
    s.push_str(&format!(
        "/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}'",
        b.cluster_name, b.cluster_endpoint
    ));
    if let Some(ca) = b.ca_bundle {
        s.push_str(&format!(" --b64-cluster-ca '{ca}'"));
    }
    let runtime = b.kubelet.container_runtime.as_deref().unwrap_or("containerd");
    s.push_str(&format!(" \\\n--container-runtime {runtime}"));
    if let Some(dns) = cluster_dns(b) {
        s.push_str(&format!(" \\\n--dns-cluster-ip '{dns}'"));
    }
    if b.kubelet.max_pods.is_some() {
        s.push_str(" \\\n--use-max-pods false");
    }
    let args = kubelet_extra_args(b);
    if !args.is_empty() {
        s.push_str(&format!(" \\\n--kubelet-extra-args '{}'", args.join(" ")));
    }
    s.push('\n');
    s
}

/// The parts of a MIME multipart document (raw, headers included), or `None` when `text` is not one.
fn mime_parts(text: &str) -> Option<Vec<String>> {
    let header_end = text.find("\n\n")?;
    let headers = &text[..header_end];
    if !headers.lines().any(|l| l.to_ascii_lowercase().starts_with("mime-version:")) {
        return None;
    }
    let boundary = headers
        .split("boundary=")
        .nth(1)?
        .trim()
        .trim_matches('"')
        .split(['"', ';', '\n'])
        .next()?;
    let delimiter = format!("--{boundary}");
    let body = &text[header_end + 2..];
    let mut parts = Vec::new();
    for chunk in body.split(delimiter.as_str()).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        let part = chunk.trim_start_matches('\n').trim_end_matches('\n');
        if !part.is_empty() {
            parts.push(part.to_string());
        }
    }
    Some(parts)
}

/// AL2/Ubuntu user data: the template's user data parts (a plain script becomes one part), then
/// the bootstrap script, in one MIME multipart document with boundary `//`, without carriage
/// returns.
pub fn eks_user_data(b: &Bootstrap<'_>) -> String {
    let shell_part = |script: &str| format!("Content-Type: {SHELL_CONTENT_TYPE}\n\n{script}");
    let mut parts = Vec::new();
    if let Some(custom) = b.custom_user_data.map(|c| c.replace('\r', "")).filter(|c| !c.trim().is_empty()) {
        match mime_parts(&custom) {
            Some(custom_parts) => parts.extend(custom_parts),
            None => parts.push(shell_part(&custom)),
        }
    }
    parts.push(shell_part(&eks_bootstrap_script(b)));
    multipart(parts)
}

/// One MIME multipart document with boundary `//` of `parts` (headers included).
fn multipart(parts: Vec<String>) -> String {
    let mut out = format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for part in parts {
        out.push_str(&format!("--{BOUNDARY}\n{}\n", part.trim_end_matches('\n')));
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

/// What a family's bootstrap cannot do without: nodeadm (AL2023) refuses a `NodeConfig`
/// without the cluster's CA bundle or service CIDR, so a template of that family is a
/// configuration error naming the settings until both are known (the EKS bootstrap script of AL2
/// and Ubuntu looks up what it is not given).
pub fn check_bootstrap(family: AmiFamily, config: &CloudConfig) -> Result<(), Error> {
    if family != AmiFamily::Al2023 {
        return Ok(());
    }
    let mut missing = Vec::new();
    if config.cluster_ca_bundle.as_deref().is_none_or(str::is_empty) {
        missing.push("the cluster CA bundle (--cluster-ca-bundle, CLUSTER_CA_BUNDLE, or a kube config with a CA)");
    }
    if config.cluster_cidr.as_deref().is_none_or(str::is_empty) {
        missing.push("the cluster's service CIDR (--cluster-cidr, CLUSTER_CIDR)");
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::InvalidConfiguration(format!(
        "amiFamily AL2023 nodes are bootstrapped by nodeadm, which needs {}",
        missing.join(" and ")
    )))
}

/// The `NodeConfig` nodeadm reads on AL2023 (`node.eks.aws/v1alpha1`): the cluster, the
/// kubelet settings as configuration keys (`clusterDNS` from the template or the cluster's DNS
/// IP), and labels and taints as kubelet flags, as the EKS bootstrap of AL2 passes them
/// (`aws@v0.34.0:pkg/providers/amifamily/bootstrap/nodeadm.go`).
pub fn node_config(b: &Bootstrap<'_>) -> Result<String, Error> {
    use serde_json::{json, Map, Value};
    let missing = |what: &str| Error::InvalidConfiguration(format!("amiFamily AL2023 nodes need {what}"));
    let mut kubelet = match serde_json::to_value(b.kubelet) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    // Not a kubelet setting: AL2023 runs containerd only.
    kubelet.remove("containerRuntime");
    if let Some(dns) = cluster_dns(b) {
        kubelet.insert("clusterDNS".into(), json!([dns]));
    }
    let mut flags = Vec::new();
    if !b.labels.is_empty() {
        flags.push(format!("--node-labels={}", joined(b.labels, "=")));
    }
    if !b.taints.is_empty() {
        let taints: Vec<String> = b.taints.iter().map(taint_arg).collect();
        flags.push(format!("--register-with-taints={}", taints.join(",")));
    }
    let mut kubelet_spec = Map::new();
    if !kubelet.is_empty() {
        kubelet_spec.insert("config".into(), Value::Object(kubelet));
    }
    if !flags.is_empty() {
        kubelet_spec.insert("flags".into(), json!(flags));
    }
    let config = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": b.cluster_name,
                "apiServerEndpoint": b.cluster_endpoint,
                "certificateAuthority": b.ca_bundle.filter(|c| !c.is_empty()).ok_or_else(|| missing("the cluster CA bundle"))?,
                "cidr": b.cluster_cidr.filter(|c| !c.is_empty()).ok_or_else(|| missing("the cluster's service CIDR"))?,
            },
            "kubelet": kubelet_spec,
        },
    });
    let yaml = serde_yaml_ng::to_string(&config).map_err(|e| Error::InvalidConfiguration(format!("rendering the AL2023 NodeConfig: {e}")))?;
    Ok(format!("# karpenter-rs generated NodeConfig\n{yaml}"))
}

/// AL2023 user data: the generated `NodeConfig`, then the template's user data parts (a plain
/// document becomes one part: a `NodeConfig` when it is YAML, else a shell script), in one MIME
/// multipart document with boundary `//`, without carriage returns. nodeadm merges the
/// `NodeConfig`s in order, so the template's own settings come after ours.
pub fn nodeadm_user_data(b: &Bootstrap<'_>) -> Result<String, Error> {
    let mut parts = vec![format!("Content-Type: {NODE_CONFIG_CONTENT_TYPE}\n\n{}", node_config(b)?)];
    if let Some(custom) = b.custom_user_data.map(|c| c.replace('\r', "")).filter(|c| !c.trim().is_empty()) {
        match mime_parts(&custom) {
            Some(custom_parts) => parts.extend(custom_parts),
            None => {
                let is_yaml = serde_yaml_ng::from_str::<serde_yaml_ng::Mapping>(&custom).is_ok();
                let content_type = if is_yaml { NODE_CONFIG_CONTENT_TYPE } else { SHELL_CONTENT_TYPE };
                parts.push(format!("Content-Type: {content_type}\n\n{custom}"));
            }
        }
    }
    Ok(multipart(parts))
}

/// Bottlerocket user data: the template's TOML with `settings.kubernetes` cluster, labels, taints
/// and kubelet settings overwritten.
pub fn bottlerocket_user_data(b: &Bootstrap<'_>) -> Result<String, Error> {
    use toml::{Table, Value};
    let mut doc: Table = match b.custom_user_data.filter(|c| !c.trim().is_empty()) {
        Some(custom) => {
            toml::from_str(custom).map_err(|e| Error::InvalidConfiguration(format!("userData is not valid Bottlerocket TOML: {e}")))?
        }
        None => Table::new(),
    };
    let settings = table_entry(&mut doc, "settings")?;
    let k8s = table_entry(settings, "kubernetes")?;
    let string_table = |m: &BTreeMap<String, String>| Value::Table(m.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect());
    k8s.insert("cluster-name".into(), Value::String(b.cluster_name.into()));
    k8s.insert("api-server".into(), Value::String(b.cluster_endpoint.into()));
    if let Some(ca) = b.ca_bundle {
        k8s.insert("cluster-certificate".into(), Value::String(ca.into()));
    }
    if let Some(dns) = cluster_dns(b) {
        k8s.insert("cluster-dns-ip".into(), Value::String(dns.into()));
    }
    if let Some(n) = b.kubelet.max_pods {
        k8s.insert("max-pods".into(), Value::Integer(n.into()));
    }
    k8s.insert("node-labels".into(), string_table(b.labels));
    let mut taints: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in b.taints {
        let value = format!("{}:{}", t.value.as_deref().unwrap_or_default(), t.effect);
        taints.entry(t.key.clone()).or_default().push(value);
    }
    k8s.insert(
        "node-taints".into(),
        Value::Table(
            taints
                .into_iter()
                .map(|(k, v)| (k, Value::Array(v.into_iter().map(Value::String).collect())))
                .collect(),
        ),
    );
    let k = b.kubelet;
    if let Some(m) = &k.system_reserved {
        k8s.insert("system-reserved".into(), string_table(&quantities(m)));
    }
    if let Some(m) = &k.kube_reserved {
        k8s.insert("kube-reserved".into(), string_table(&quantities(m)));
    }
    if let Some(m) = &k.eviction_hard {
        k8s.insert("eviction-hard".into(), string_table(m));
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        k8s.insert("image-gc-high-threshold-percent".into(), Value::Integer(n.into()));
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        k8s.insert("image-gc-low-threshold-percent".into(), Value::Integer(n.into()));
    }
    if let Some(q) = k.cpu_cfs_quota {
        k8s.insert("cpu-cfs-quota-enforced".into(), Value::Boolean(q));
    }
    toml::to_string(&doc).map_err(|e| Error::InvalidConfiguration(format!("rendering Bottlerocket user data: {e}")))
}

fn table_entry<'t>(table: &'t mut toml::Table, key: &str) -> Result<&'t mut toml::Table, Error> {
    table
        .entry(key)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or_else(|| Error::InvalidConfiguration(format!("userData: `{key}` must be a TOML table")))
}

#[cfg(test)]
mod tests;
