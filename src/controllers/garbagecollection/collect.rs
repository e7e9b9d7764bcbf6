//! What the garbage collector removes (Karpenter v0.27 had no collector; this one follows
//! `aws@v0.29.0:pkg/controllers/machine/garbagecollection/controller.go`, for Nodes not Machines):
//! instances of this cluster that no Node names, and which of our Nodes to check against the
//! cloud. Pure; the time is passed in.

use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::cloudprovider::{instance_id_from_provider_id, instances_named_by, Instance, LAUNCH_CONFIG_TAG};

/// Instances launched more than `grace` ago that no Node's `spec.providerID` names. An
/// instance without a launch time is left alone (its age is unknown), and so is one launched for
/// pending pods (tagged with its launch configuration) less than `adoptable_for` ago: a
/// restarted controller adopts it rather than launching again.
pub fn leaked_instances(instances: &[Instance], nodes: &[Node], grace: Duration, adoptable_for: Duration, now: SystemTime) -> Vec<String> {
    let named = instances_named_by(nodes);
    let mut leaked: Vec<String> = instances
        .iter()
        .filter(|i| !named.contains(i.id.as_str()))
        .filter(|i| {
            let wait = if i.tags.contains_key(LAUNCH_CONFIG_TAG) {
                grace.max(adoptable_for)
            } else {
                grace
            };
            i.launch_time.is_some_and(|t| now.duration_since(t).is_ok_and(|age| age > wait))
        })
        .map(|i| i.id.clone())
        .collect();
    leaked.sort();
    leaked
}

/// Our Nodes (provisioner label, not being deleted, created more than `grace` ago) with the
/// instance their providerID names: (node, instance id). Younger ones may not be visible in
/// the cloud's eventually consistent reads yet.
pub fn nodes_to_check(nodes: &[Node], grace: Duration, now: Timestamp) -> Vec<(String, String)> {
    let grace = jiff::SignedDuration::try_from(grace).unwrap_or_default();
    nodes
        .iter()
        .filter(|n| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(PROVISIONER_NAME_LABEL)))
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            n.metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|t| now.duration_since(t.0) > grace)
        })
        .filter_map(|n| {
            let id = instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?)?;
            Some((n.metadata.name.clone()?, id.to_string()))
        })
        .collect()
}

/// What one pass may remove of the `found` things (leaked instances, Nodes whose instance is
/// gone) out of the `seen` it looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal<T> {
    /// Remove these (at most the cap; `held_back` more wait for the next pass).
    Remove {
        /// What to remove now.
        now: Vec<T>,
        /// How many more wait for a later pass.
        held_back: usize,
    },
    /// Remove none: at least `SUSPICIOUS_MINIMUM` things, and more than half, look gone at once,
    /// which is what a wrong region, account, cluster name or kubeconfig looks like from here
    /// (every instance "without a Node", every Node "without an instance"), not a real loss.
    Suspicious {
        /// How many looked gone.
        found: usize,
        /// Out of how many.
        seen: usize,
    },
}

/// From how many things gone at once a majority of them is held to be a misconfiguration.
pub const SUSPICIOUS_MINIMUM: usize = 3;

/// Bounds one pass's removals: none when most of what was seen looks gone (see
/// [`Removal::Suspicious`]), else the first `cap` of `found`.
pub fn bounded<T>(mut found: Vec<T>, seen: usize, cap: usize) -> Removal<T> {
    if found.len() >= SUSPICIOUS_MINIMUM && found.len() * 2 > seen {
        return Removal::Suspicious { found: found.len(), seen };
    }
    let held_back = found.len().saturating_sub(cap);
    found.truncate(cap);
    Removal::Remove { now: found, held_back }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            subnet_id: None,
            security_group_ids: Vec::new(),
        }
    }

    fn node(name: &str, provider_id: &str, created: Timestamp) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {PROVISIONER_NAME_LABEL: "default"}, "creationTimestamp": created.to_string()},
            "spec": {"providerID": provider_id}
        }))
        .unwrap()
    }

    #[test]
    fn collects_instances_without_a_node_after_the_grace_period_only() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let created = Timestamp::from_second(1_699_999_000).unwrap();
        let nodes = [node("a", "aws:///ap-northeast-2a/i-0aaa", created)];
        let instances = [
            instance("i-0aaa", Some(600), now),
            instance("i-0bbb", Some(600), now),
            instance("i-0ccc", Some(10), now),
            instance("i-0ddd", None, now),
        ];
        assert_eq!(
            leaked_instances(&instances, &nodes, Duration::from_secs(120), Duration::from_secs(900), now),
            ["i-0bbb"]
        );
    }

    #[test]
    fn an_instance_launched_for_pending_pods_is_left_for_adoption_until_the_registration_ttl() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let tagged = |id: &str, age: u64| {
            let mut i = instance(id, Some(age), now);
            i.tags.insert(LAUNCH_CONFIG_TAG.into(), "1".into());
            i
        };
        let instances = [tagged("i-0young", 600), tagged("i-0old", 901), instance("i-0bare", Some(600), now)];
        let (grace, ttl) = (Duration::from_secs(120), Duration::from_secs(900));
        assert_eq!(leaked_instances(&instances, &[], grace, ttl, now), ["i-0bare", "i-0old"]);
    }

    #[test]
    fn a_pass_removes_at_most_the_cap_and_nothing_when_most_look_gone() {
        let ids = |n: usize| (0..n).collect::<Vec<_>>();
        assert_eq!(
            bounded(ids(2), 2, 10),
            Removal::Remove { now: ids(2), held_back: 0 },
            "a small cluster's only nodes"
        );
        assert_eq!(bounded(ids(1), 3, 10), Removal::Remove { now: ids(1), held_back: 0 });
        assert_eq!(
            bounded(ids(12), 40, 10),
            Removal::Remove {
                now: ids(10),
                held_back: 2
            }
        );
        assert_eq!(
            bounded(ids(20), 40, 10),
            Removal::Remove {
                now: ids(10),
                held_back: 10
            },
            "half is not most"
        );
        assert_eq!(
            bounded(ids(2), 3, 10),
            Removal::Remove { now: ids(2), held_back: 0 },
            "two leaked after a crash"
        );
        assert_eq!(bounded(ids(3), 5, 10), Removal::Suspicious { found: 3, seen: 5 });
        assert_eq!(
            bounded(ids(500), 500, 10),
            Removal::Suspicious { found: 500, seen: 500 },
            "a wrong region: every node's instance missing"
        );
        assert_eq!(bounded(Vec::<usize>::new(), 0, 10), Removal::Remove { now: vec![], held_back: 0 });
    }

    #[test]
    fn checks_our_settled_nodes_that_name_an_instance() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let old = now - jiff::SignedDuration::from_secs(600);
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
