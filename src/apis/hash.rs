//! The static-drift hashes written on every node at launch (`karpenter.sh/provisioner-hash`,
//! `karpenter.k8s.aws/nodetemplate-hash`; `aws@v0.31.0:pkg/cloudprovider/drift.go`): a digest of
//! the fields of a Provisioner and of an AWSNodeTemplate that change what is launched and that no
//! other drift check sees. A node whose annotation differs from the hash of the objects now was
//! launched from settings that have changed since.
//!
//! Left out, because they do not change a launched node: `weight`, `limits`, the TTLs and
//! `consolidation`. Left out, because another check compares what they resolve to rather than
//! how they are written: `requirements` (requirements drift), and the subnet, security-group and
//! AMI selectors (subnet, security-group and AMI drift). So re-writing a selector that selects the
//! same subnets replaces nothing. Empty maps and lists count as absent, and map keys are sorted,
//! so a field the webhook defaulted to `{}` or a re-ordered manifest does not count as a change.
//! No I/O here.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::v1alpha1::AwsNodeTemplateSpec;
use super::v1alpha5::ProvisionerSpec;

/// The annotation holding a node's Provisioner hash at launch.
pub const PROVISIONER_HASH_ANNOTATION: &str = "karpenter.sh/provisioner-hash";
/// The annotation holding a node's AWSNodeTemplate hash at launch.
pub const NODE_TEMPLATE_HASH_ANNOTATION: &str = "karpenter.k8s.aws/nodetemplate-hash";

/// Selector keys of an AWSNodeTemplate or an inline `spec.provider`, compared by what they select.
const SELECTORS: [&str; 3] = ["subnetSelector", "securityGroupSelector", "amiSelector"];

/// The hash of the Provisioner fields that change what is launched: annotations, labels,
/// taints, startup taints, kubelet configuration, the inline provider (without its selectors) and
/// the AWSNodeTemplate it refers to by name.
pub fn provisioner_hash(spec: &ProvisionerSpec) -> String {
    let provider = spec.provider.clone().map(|mut p| {
        if let Some(object) = p.as_object_mut() {
            for key in SELECTORS {
                object.remove(key);
            }
        }
        p
    });
    digest(&serde_json::json!({
        "annotations": spec.annotations,
        "labels": spec.labels,
        "taints": spec.taints,
        "startupTaints": spec.startup_taints,
        "kubeletConfiguration": spec.kubelet_configuration,
        "provider": provider,
        "providerRef": spec.provider_ref.as_ref().map(|r| &r.name),
    }))
}

/// The hash of the AWSNodeTemplate fields that change what is launched: everything but the
/// subnet, security-group and AMI selectors.
pub fn node_template_hash(spec: &AwsNodeTemplateSpec) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or(Value::Null);
    if let Some(object) = value.as_object_mut() {
        for key in SELECTORS {
            object.remove(key);
        }
    }
    digest(&value)
}

/// The digest of what shapes a launched node beyond its instance type and zone: the Provisioner
/// (by name and [`provisioner_hash`]), its AWSNodeTemplate ([`node_template_hash`]) and the node
/// labels the kubelet registers. Tagged on the instance (`karpenter-rs.io/launch-config`): an
/// instance left without a Node is adopted only by a launch of the same configuration.
pub fn launch_config_hash(
    provisioner: &str,
    spec: &ProvisionerSpec,
    template: Option<&AwsNodeTemplateSpec>,
    labels: &std::collections::BTreeMap<String, String>,
) -> String {
    digest(&serde_json::json!({
        "provisioner": provisioner,
        "provisionerHash": provisioner_hash(spec),
        "nodeTemplateHash": template.map(node_template_hash),
        "labels": labels,
    }))
}

/// The digest of one need: a launch configuration ([`launch_config_hash`]), the pods the node is
/// launched for (`namespace/name`, in any order) and the attempt's `generation`. The same pending
/// pods planned the same way give the same need, in this process or in one restarted.
pub fn need_hash(config: &str, pods: &[String], generation: u32) -> String {
    let mut pods = pods.to_vec();
    pods.sort();
    digest(&serde_json::json!({"config": config, "pods": pods, "generation": generation}))
}

/// The first 64 bits of the SHA-256 of the canonical form, in decimal (as Karpenter's hashes
/// read).
fn digest(value: &Value) -> String {
    let canonical = canonical(value).map(|v| v.to_string()).unwrap_or_default();
    let sum = Sha256::digest(canonical.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&sum[..8]);
    u64::from_be_bytes(first).to_string()
}

/// `value` with object keys sorted and nulls, empty objects and empty arrays dropped (`None`
/// when nothing is left).
fn canonical(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                if let Some(v) = canonical(&object[key]) {
                    out.insert(key.clone(), v);
                }
            }
            // serde_json may keep insertion order; the keys went in sorted.
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(items) => {
            let items: Vec<Value> = items.iter().map(|v| canonical(v).unwrap_or(Value::Null)).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        other => Some(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_need_is_the_same_for_the_same_pods_in_any_order_and_differs_by_config_pods_and_generation() {
        let pods = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let need = need_hash("1", &pods(&["default/a", "default/b"]), 0);
        assert_eq!(need, need_hash("1", &pods(&["default/b", "default/a"]), 0));
        assert_ne!(need, need_hash("2", &pods(&["default/a", "default/b"]), 0), "another configuration");
        assert_ne!(need, need_hash("1", &pods(&["default/a"]), 0), "other pods");
        assert_ne!(need, need_hash("1", &pods(&["default/a", "default/b"]), 1), "the next generation");
    }

    #[test]
    fn a_launch_configuration_changes_with_what_shapes_the_node() {
        let labels = |v: &str| std::collections::BTreeMap::from([("team".to_string(), v.to_string())]);
        let spec = provisioner(json!({}));
        let config = launch_config_hash("service", &spec, None, &labels("a"));
        assert_eq!(config, launch_config_hash("service", &spec, None, &labels("a")));
        assert_ne!(
            config,
            launch_config_hash("other", &spec, None, &labels("a")),
            "another Provisioner"
        );
        assert_ne!(
            config,
            launch_config_hash("service", &spec, None, &labels("b")),
            "other node labels"
        );
        let tainted = provisioner(json!({"taints": [{"key": "x", "effect": "NoSchedule"}]}));
        assert_ne!(config, launch_config_hash("service", &tainted, None, &labels("a")), "other taints");
        let template: AwsNodeTemplateSpec = serde_json::from_value(json!({"amiFamily": "Bottlerocket"})).unwrap();
        assert_ne!(
            config,
            launch_config_hash("service", &spec, Some(&template), &labels("a")),
            "a template"
        );
    }

    fn provisioner(extra: Value) -> ProvisionerSpec {
        let mut spec = json!({
            "labels": {"team": "a"},
            "taints": [{"key": "service", "value": "true", "effect": "NoSchedule"}],
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["t3.large"]}],
            "providerRef": {"name": "default"},
            "ttlSecondsAfterEmpty": 30
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(spec).unwrap()
    }

    fn template(extra: Value) -> AwsNodeTemplateSpec {
        let mut spec = json!({"subnetSelector": {"team": "a"}, "securityGroupSelector": {"team": "a"}, "tags": {"cost": "x"}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn a_label_taint_kubelet_or_template_reference_change_changes_the_provisioner_hash() {
        let base = provisioner_hash(&provisioner(json!({})));
        for change in [
            json!({"labels": {"team": "b"}}),
            json!({"taints": []}),
            json!({"startupTaints": [{"key": "init", "effect": "NoSchedule"}]}),
            json!({"annotations": {"a": "b"}}),
            json!({"kubeletConfiguration": {"maxPods": 20}}),
            json!({"providerRef": {"name": "other"}}),
        ] {
            assert_ne!(provisioner_hash(&provisioner(change.clone())), base, "{change}");
        }
    }

    #[test]
    fn weight_limits_ttls_consolidation_and_requirements_leave_the_provisioner_hash_alone() {
        let base = provisioner_hash(&provisioner(json!({})));
        for change in [
            json!({"weight": 50}),
            json!({"limits": {"resources": {"cpu": "100"}}}),
            json!({"ttlSecondsAfterEmpty": 60, "ttlSecondsUntilExpired": 600}),
            json!({"requirements": []}),
            json!({"annotations": {}}),
        ] {
            assert_eq!(provisioner_hash(&provisioner(change.clone())), base, "{change}");
        }
    }

    #[test]
    fn an_inline_providers_selectors_are_not_hashed_but_its_other_fields_are() {
        let with = |provider: Value| provisioner_hash(&provisioner(json!({"providerRef": null, "provider": provider})));
        let base = with(json!({"subnetSelector": {"a": "1"}, "instanceProfile": "p"}));
        assert_eq!(with(json!({"subnetSelector": {"a": "2"}, "instanceProfile": "p"})), base);
        assert_ne!(with(json!({"subnetSelector": {"a": "1"}, "instanceProfile": "q"})), base);
    }

    #[test]
    fn the_template_hash_follows_everything_but_the_selectors() {
        let base = node_template_hash(&template(json!({})));
        assert_eq!(node_template_hash(&template(json!({"subnetSelector": {"team": "b"}}))), base);
        assert_eq!(node_template_hash(&template(json!({"securityGroupSelector": {"x": "y"}}))), base);
        assert_eq!(node_template_hash(&template(json!({"amiSelector": {"x": "y"}}))), base);
        for change in [
            json!({"tags": {"cost": "y"}}),
            json!({"userData": "echo hi"}),
            json!({"amiFamily": "Bottlerocket"}),
            json!({"instanceProfile": "other"}),
            json!({"detailedMonitoring": true}),
            json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi"}}]}),
        ] {
            assert_ne!(node_template_hash(&template(change.clone())), base, "{change}");
        }
    }

    #[test]
    fn hashes_do_not_depend_on_key_order_and_are_decimal() {
        let a: ProvisionerSpec = serde_json::from_value(json!({"labels": {"a": "1", "b": "2"}})).unwrap();
        let b: ProvisionerSpec = serde_json::from_value(json!({"labels": {"b": "2", "a": "1"}})).unwrap();
        assert_eq!(provisioner_hash(&a), provisioner_hash(&b));
        assert!(provisioner_hash(&a).chars().all(|c| c.is_ascii_digit()));
    }
}
