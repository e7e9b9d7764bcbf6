//! Defaults of a Provisioner: the requirement guard-rails (os, arch, capacity type, instance
//! category and generation) for keys neither requirements nor labels constrain, the TTLs, and
//! the inline provider's selectors. Pure and idempotent: defaulting twice equals once.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::labels::{
    self, ARCH_LABEL, CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, INSTANCE_CATEGORY_LABEL, INSTANCE_FAMILY_LABEL,
    INSTANCE_GENERATION_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL,
};
use super::requirements::constrains;
use super::ProvisionerSpec;
use crate::apis::v1alpha1::defaults::set_provider_defaults;
use crate::apis::ApiSettings;

/// Keys whose presence suppresses the instance category/generation defaults.
const INSTANCE_SHAPE_KEYS: &[&str] = &[
    INSTANCE_TYPE_LABEL,
    INSTANCE_FAMILY_LABEL,
    INSTANCE_CATEGORY_LABEL,
    INSTANCE_GENERATION_LABEL,
];

/// Applies every Provisioner default.
pub fn set_defaults(spec: &mut ProvisionerSpec, settings: &ApiSettings) {
    set_requirement_defaults(spec);
    let consolidating = spec.consolidation.as_ref().and_then(|c| c.enabled) == Some(true);
    if spec.ttl_seconds_after_empty.is_none() && !consolidating {
        spec.ttl_seconds_after_empty = settings.default_ttl_seconds_after_empty;
    }
    if spec.ttl_seconds_until_expired.is_none() {
        spec.ttl_seconds_until_expired = settings.default_ttl_seconds_until_expired;
    }
    if let Some(provider) = spec.provider.as_mut() {
        set_provider_defaults(provider, &settings.cluster_name);
    }
}

/// Appends `os In [linux]`, `arch In [amd64]`, `capacity-type In [on-demand]` and
/// `instance-category In [c, m, r]` + `instance-generation Gt [2]` for keys that no requirement
/// (any operator, deprecated spellings included) and no label already constrains.
pub fn set_requirement_defaults(spec: &mut ProvisionerSpec) {
    let label_keys: Vec<&str> = spec.labels.iter().flatten().map(|(k, _)| labels::normalize(k)).collect();
    let existing = spec.requirements.as_deref().unwrap_or_default();
    let is_set = |key: &str| constrains(existing, key) || label_keys.contains(&key);
    let mut added = Vec::new();
    for (key, value) in [
        (OS_LABEL, "linux"),
        (ARCH_LABEL, "amd64"),
        (CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND),
    ] {
        if !is_set(key) {
            added.push(requirement(key, "In", &[value]));
        }
    }
    if !INSTANCE_SHAPE_KEYS.iter().any(|k| is_set(k)) {
        added.push(requirement(INSTANCE_CATEGORY_LABEL, "In", &["c", "m", "r"]));
        added.push(requirement(INSTANCE_GENERATION_LABEL, "Gt", &["2"]));
    }
    if !added.is_empty() {
        spec.requirements.get_or_insert_with(Vec::new).extend(added);
    }
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: Some(values.iter().map(|v| v.to_string()).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ProvisionerSpec {
        serde_json::from_value(v).expect("test spec decodes")
    }

    fn keys(s: &ProvisionerSpec) -> Vec<String> {
        s.requirements
            .iter()
            .flatten()
            .map(|r| format!("{} {} {}", r.key, r.operator, r.values.clone().unwrap_or_default().join(",")))
            .collect()
    }

    fn defaulted(v: serde_json::Value) -> ProvisionerSpec {
        let mut s = spec(v);
        set_defaults(&mut s, &ApiSettings::new("ssungz-cluster"));
        s
    }

    #[test]
    fn first_write_up_gets_os_and_arch_only() {
        let s = defaulted(json!({
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["t3.large", "t3.xlarge"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["ap-northeast-2a", "ap-northeast-2c"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ],
            "providerRef": {"name": "service-lt"}, "ttlSecondsAfterEmpty": 30, "ttlSecondsUntilExpired": 1209600
        }));
        assert_eq!(
            keys(&s)[3..],
            ["kubernetes.io/os In linux".to_string(), "kubernetes.io/arch In amd64".to_string()]
        );
        assert_eq!(s.ttl_seconds_after_empty, Some(30));
        assert_eq!(s.ttl_seconds_until_expired, Some(1209600));
    }

    #[test]
    fn empty_spec_gets_every_default() {
        let s = defaulted(json!({"providerRef": {"name": "x"}}));
        assert_eq!(
            keys(&s),
            [
                "kubernetes.io/os In linux",
                "kubernetes.io/arch In amd64",
                "karpenter.sh/capacity-type In on-demand",
                "karpenter.k8s.aws/instance-category In c,m,r",
                "karpenter.k8s.aws/instance-generation Gt 2"
            ]
        );
        assert_eq!(s.ttl_seconds_after_empty, Some(30));
        assert_eq!(s.ttl_seconds_until_expired, Some(2_592_000));
    }

    #[test]
    fn defaulting_twice_equals_once() {
        for v in [
            json!({"providerRef": {"name": "x"}}),
            json!({"provider": {"instanceProfile": "p"}, "consolidation": {"enabled": true}}),
            json!({"labels": {"kubernetes.io/arch": "arm64"}, "requirements": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt"}]}),
        ] {
            let once = defaulted(v);
            let mut twice = once.clone();
            set_defaults(&mut twice, &ApiSettings::new("ssungz-cluster"));
            assert_eq!(once, twice);
        }
    }

    #[test]
    fn labels_and_any_operator_suppress_defaults() {
        let s = defaulted(json!({
            "labels": {"kubernetes.io/arch": "arm64", "karpenter.k8s.aws/instance-category": "m"},
            "requirements": [
                {"key": "beta.kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "karpenter.sh/capacity-type", "operator": "DoesNotExist"}
            ]
        }));
        assert_eq!(keys(&s).len(), 2, "{:?}", keys(&s));
        let s =
            defaulted(json!({"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["t2.micro"]}]}));
        assert!(!keys(&s).iter().any(|k| k.contains("instance-category")));
    }

    #[test]
    fn ttl_defaults_follow_settings_and_consolidation() {
        let mut s = spec(json!({"consolidation": {"enabled": true}}));
        set_defaults(&mut s, &ApiSettings::new("c"));
        assert_eq!(s.ttl_seconds_after_empty, None);
        let mut s = spec(json!({"ttlSecondsAfterEmpty": 0, "ttlSecondsUntilExpired": 0}));
        set_defaults(&mut s, &ApiSettings::new("c"));
        assert_eq!((s.ttl_seconds_after_empty, s.ttl_seconds_until_expired), (Some(0), Some(0)));
        let off = ApiSettings {
            default_ttl_seconds_after_empty: None,
            default_ttl_seconds_until_expired: None,
            ..ApiSettings::new("c")
        };
        let mut s = spec(json!({}));
        set_defaults(&mut s, &off);
        assert_eq!((s.ttl_seconds_after_empty, s.ttl_seconds_until_expired), (None, None));
    }

    #[test]
    fn gt_without_values_does_not_panic() {
        let s = defaulted(json!({"requirements": [{"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt"}]}));
        assert!(!keys(&s).iter().any(|k| k.starts_with("karpenter.k8s.aws/instance-category")));
    }
}
