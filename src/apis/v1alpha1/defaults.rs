//! Defaults of the AWS settings: subnet and security-group selectors default to the cluster's
//! discovery tag. Pure and idempotent.

use std::collections::BTreeMap;

use super::AwsNodeTemplateSpec;
use crate::apis::v1alpha5::labels::DISCOVERY_TAG;

/// `{karpenter.sh/discovery: <cluster>}`.
pub fn discovery_selector(cluster_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(DISCOVERY_TAG.to_string(), cluster_name.to_string())])
}

/// Fills in absent selectors of an AWSNodeTemplate with the discovery tag of `cluster_name`.
/// The security-group selector is left absent when a launch template owns the security groups.
pub fn set_defaults(spec: &mut AwsNodeTemplateSpec, cluster_name: &str) {
    if spec.subnet_selector.is_none() {
        spec.subnet_selector = Some(discovery_selector(cluster_name));
    }
    if spec.security_group_selector.is_none() && spec.launch_template.is_none() {
        spec.security_group_selector = Some(discovery_selector(cluster_name));
    }
}

/// The same defaults for a Provisioner's inline `spec.provider`, kept as raw JSON so that fields
/// the validator will refuse are left for it to name. The cluster is the provider's own
/// `clusterName` when it has one, else `cluster_name`. Anything but an object is left alone.
pub fn set_provider_defaults(provider: &mut serde_json::Value, cluster_name: &str) {
    let Some(fields) = provider.as_object_mut() else { return };
    let cluster = fields
        .get("clusterName")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(cluster_name)
        .to_string();
    let selector = || serde_json::to_value(discovery_selector(&cluster)).expect("a string map always serializes");
    if fields.get("subnetSelector").is_none_or(|v| v.is_null()) {
        fields.insert("subnetSelector".into(), selector());
    }
    let has_template = fields.get("launchTemplate").is_some_and(|v| !v.is_null());
    if fields.get("securityGroupSelector").is_none_or(|v| v.is_null()) && !has_template {
        fields.insert("securityGroupSelector".into(), selector());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_template_selectors_to_the_discovery_tag() {
        let mut spec = AwsNodeTemplateSpec::default();
        set_defaults(&mut spec, "ssungz-cluster");
        assert_eq!(spec.subnet_selector, Some(discovery_selector("ssungz-cluster")));
        assert_eq!(spec.security_group_selector, Some(discovery_selector("ssungz-cluster")));
        let once = spec.clone();
        set_defaults(&mut spec, "ssungz-cluster");
        assert_eq!(spec, once, "defaulting twice equals once");
    }

    #[test]
    fn keeps_explicit_selectors_and_launch_template_security_groups() {
        let mut spec = AwsNodeTemplateSpec {
            subnet_selector: Some(BTreeMap::from([("a".into(), "b".into())])),
            launch_template: Some("lt".into()),
            ..Default::default()
        };
        set_defaults(&mut spec, "c");
        assert_eq!(spec.subnet_selector, Some(BTreeMap::from([("a".into(), "b".into())])));
        assert_eq!(spec.security_group_selector, None);
    }

    #[test]
    fn inline_provider_uses_its_own_cluster_name() {
        let mut p = json!({"instanceProfile": "KarpenterNodeInstanceProfile", "clusterName": "your-cluster-name"});
        set_provider_defaults(&mut p, "configured");
        assert_eq!(p["subnetSelector"], json!({"karpenter.sh/discovery": "your-cluster-name"}));
        assert_eq!(p["securityGroupSelector"], json!({"karpenter.sh/discovery": "your-cluster-name"}));
        let once = p.clone();
        set_provider_defaults(&mut p, "configured");
        assert_eq!(p, once);
        let mut p = json!({"launchTemplate": "lt"});
        set_provider_defaults(&mut p, "configured");
        assert_eq!(
            p,
            json!({"launchTemplate": "lt", "subnetSelector": {"karpenter.sh/discovery": "configured"}})
        );
        let mut p = json!("not an object");
        set_provider_defaults(&mut p, "configured");
        assert_eq!(p, json!("not an object"));
    }
}
