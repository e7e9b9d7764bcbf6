//! What the garbage collector removes (differences.md item 11, karpenter-behavior.md §6.2):
//! instances of this cluster that no Node names, and which of our Nodes to check against the
//! cloud. Pure; the time is passed in.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::chrono::{DateTime, Utc};

use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::cloudprovider::{instance_id_from_provider_id, Instance};

/// Instances launched more than `grace` ago that no Node's `spec.providerID` names. An
/// instance without a launch time is left alone (its age is unknown).
pub fn leaked_instances(instances: &[Instance], nodes: &[Node], grace: Duration, now: SystemTime) -> Vec<String> {
    let named: HashSet<&str> = nodes
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
        .filter_map(instance_id_from_provider_id)
        .collect();
    let mut leaked: Vec<String> = instances
        .iter()
        .filter(|i| !named.contains(i.id.as_str()))
        .filter(|i| i.launch_time.is_some_and(|t| now.duration_since(t).is_ok_and(|age| age > grace)))
        .map(|i| i.id.clone())
        .collect();
    leaked.sort();
    leaked
}

/// Our Nodes (provisioner label, not being deleted, created more than `grace` ago) with the
/// instance their providerID names: (node, instance id). Younger ones may not be visible in
/// the cloud's eventually consistent reads yet.
pub fn nodes_to_check(nodes: &[Node], grace: Duration, now: DateTime<Utc>) -> Vec<(String, String)> {
    let grace = k8s_openapi::chrono::Duration::from_std(grace).unwrap_or_default();
    nodes
        .iter()
        .filter(|n| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(PROVISIONER_NAME_LABEL)))
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| n.metadata.creation_timestamp.as_ref().is_some_and(|t| now - t.0 > grace))
        .filter_map(|n| {
            let id = instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?)?;
            Some((n.metadata.name.clone()?, id.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::chrono::TimeZone;
    use serde_json::json;

    fn instance(id: &str, age_seconds: Option<u64>, now: SystemTime) -> Instance {
        Instance {
            id: id.into(),
            instance_type: "t3.large".into(),
            zone: "ap-northeast-2a".into(),
            capacity_type: "on-demand".into(),
            private_dns_name: String::new(),
            private_ip: None,
            launch_time: age_seconds.map(|a| now - Duration::from_secs(a)),
            state: "running".into(),
            tags: Default::default(),
            image_id: None,
        }
    }

    fn node(name: &str, provider_id: &str, created: DateTime<Utc>) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {PROVISIONER_NAME_LABEL: "default"}, "creationTimestamp": created.to_rfc3339()},
            "spec": {"providerID": provider_id}
        }))
        .unwrap()
    }

    #[test]
    fn collects_instances_without_a_node_after_the_grace_period_only() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let created = Utc.timestamp_opt(1_699_999_000, 0).unwrap();
        let nodes = [node("a", "aws:///ap-northeast-2a/i-0aaa", created)];
        let instances = [
            instance("i-0aaa", Some(600), now),
            instance("i-0bbb", Some(600), now),
            instance("i-0ccc", Some(10), now),
            instance("i-0ddd", None, now),
        ];
        assert_eq!(leaked_instances(&instances, &nodes, Duration::from_secs(120), now), ["i-0bbb"]);
    }

    #[test]
    fn checks_our_settled_nodes_that_name_an_instance() {
        let now = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let old = now - k8s_openapi::chrono::Duration::seconds(600);
        let mut foreign = node("foreign", "aws:///ap-northeast-2a/i-0f", old);
        foreign.metadata.labels = None;
        let mut deleting = node("deleting", "aws:///ap-northeast-2a/i-0d", old);
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        let nodes = [
            node("old", "aws:///ap-northeast-2a/i-0a", old),
            node("young", "aws:///ap-northeast-2a/i-0b", now),
            node("kind", "kind://docker/x", old),
            foreign,
            deleting,
        ];
        assert_eq!(
            nodes_to_check(&nodes, Duration::from_secs(120), now),
            [("old".to_string(), "i-0a".to_string())]
        );
    }
}
