//! The pod facts status reports: `karpenter_pods_state`'s labels and
//! `karpenter_pods_startup_time_seconds`. Pure functions; no I/O here.

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::apis::v1alpha5::labels::{ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, ZONE_LABEL};
use crate::scheduling::pods::is_pending;

pub use crate::metrics::POD_STATE_LABELS;

/// The `karpenter_pods_state` label values of `pod` on `node` (when bound and known); `N/A`
/// where a value is unknown, as Karpenter reports it.
pub fn pod_state_labels<'a>(pod: &'a Pod, node: Option<&'a Node>) -> crate::metrics::PodStateLabels<'a> {
    use std::borrow::Cow;
    let na = || Cow::Borrowed("N/A");
    let text = |value: Option<&'a String>| value.map_or_else(na, |v| Cow::Borrowed(v.as_str()));
    let node_label = |key: &str| text(node.and_then(|n| n.metadata.labels.as_ref()).and_then(|l| l.get(key)));
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .next()
        .map_or_else(na, |o| Cow::Owned(format!("{}/{}", o.kind, o.name)));
    [
        text(pod.metadata.name.as_ref()),
        text(pod.metadata.namespace.as_ref()),
        owner,
        text(pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).filter(|n| !n.is_empty())),
        node_label(PROVISIONER_NAME_LABEL),
        node_label(ZONE_LABEL),
        node_label(ARCH_LABEL),
        node_label(CAPACITY_TYPE_LABEL),
        node_label(INSTANCE_TYPE_LABEL),
        text(pod.status.as_ref().and_then(|s| s.phase.as_ref())),
    ]
}

/// Seconds from `pod`'s creation to its Ready condition turning True, once it has left Pending
/// (what `karpenter_pods_startup_time_seconds` observes, once per pod seen pending); none while it
/// is pending or not Ready.
pub fn startup_seconds(pod: &Pod) -> Option<f64> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref().is_none_or(|p| p == "Pending") {
        return None;
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    let created = pod.metadata.creation_timestamp.as_ref()?;
    let seconds = ready.last_transition_time.as_ref()?.0.duration_since(created.0).as_secs_f64();
    Some(seconds.max(0.0))
}

/// What `karpenter_pods_startup_time_seconds` observes: each pod once, when it is first seen Ready
/// after having been pending (seen pending, or created since `since`, when tracking started),
/// as Karpenter's pod metrics controller (`core@v0.31.0:pkg/controllers/metrics/pod/controller.go`).
pub struct Startups {
    since: jiff::Timestamp,
    pending: std::collections::HashSet<String>,
    observed: std::collections::HashSet<String>,
}

impl Startups {
    /// Tracking from `since`.
    pub fn new(since: jiff::Timestamp) -> Self {
        Startups {
            since,
            pending: Default::default(),
            observed: Default::default(),
        }
    }

    /// A change of `pod`: the seconds to observe, the first time it is seen started.
    pub fn see(&mut self, pod: &Pod) -> Option<f64> {
        let uid = pod.metadata.uid.as_deref()?;
        if self.observed.contains(uid) {
            return None;
        }
        if is_pending(pod) {
            self.pending.insert(uid.to_string());
            return None;
        }
        let created_since = pod.metadata.creation_timestamp.as_ref().is_some_and(|t| t.0 >= self.since);
        if !(self.pending.contains(uid) || created_since) {
            return None;
        }
        let seconds = startup_seconds(pod)?;
        self.pending.remove(uid);
        self.observed.insert(uid.to_string());
        Some(seconds)
    }

    /// Forgets the pods `live` does not keep (they are gone).
    pub fn retain(&mut self, live: impl Fn(&str) -> bool) {
        self.pending.retain(|uid| live(uid));
        self.observed.retain(|uid| live(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::pods::predicate_tests::pod;
    use serde_json::json;

    #[test]
    fn startup_time_runs_from_creation_to_ready() {
        let running = pod(json!({
            "metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:20Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:42Z"},
            ]},
        }));
        assert_eq!(startup_seconds(&running), Some(42.0));
        assert!(!is_pending(&running));
        let pending = pod(json!({
            "metadata": {"name": "b", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": []},
            "status": {"phase": "Pending"},
        }));
        assert_eq!(startup_seconds(&pending), None);
        assert!(is_pending(&pending));
        let not_ready = pod(json!({
            "metadata": {"name": "c", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": []},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:05Z"},
            ]},
        }));
        assert_eq!(startup_seconds(&not_ready), None, "running but not Ready has not started up");
    }

    #[test]
    fn each_pod_that_was_pending_is_observed_once_when_ready() {
        let at = |t: &str| t.parse::<jiff::Timestamp>().unwrap();
        let mut startups = Startups::new(at("2026-01-01T00:00:10Z"));
        let phase = |name: &str, created: &str, phase: &str| {
            pod(json!({
                "metadata": {"name": name, "uid": name, "creationTimestamp": created},
                "spec": {"containers": []},
                "status": {"phase": phase, "conditions": [
                    {"type": "Ready", "status": if phase == "Running" { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:01:00Z"},
                ]},
            }))
        };
        // Older than the tracking and never seen pending: it started before, nothing to observe.
        assert_eq!(startups.see(&phase("old", "2026-01-01T00:00:00Z", "Running")), None);
        // Seen pending, then Ready: observed once.
        assert_eq!(startups.see(&phase("a", "2026-01-01T00:00:00Z", "Pending")), None);
        assert_eq!(startups.see(&phase("a", "2026-01-01T00:00:00Z", "Running")), Some(60.0));
        assert_eq!(startups.see(&phase("a", "2026-01-01T00:00:00Z", "Running")), None, "once");
        // Created since tracking started: it was pending even if never seen so.
        assert_eq!(startups.see(&phase("b", "2026-01-01T00:00:30Z", "Running")), Some(30.0));
        startups.retain(|uid| uid != "a");
        assert!(!startups.observed.contains("a"));
        assert!(startups.observed.contains("b"));
    }

    #[test]
    fn pod_state_labels_describe_the_pod_and_its_node() {
        let web = pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d", "uid": "u"}]},
            "spec": {"containers": [], "nodeName": "ip-10-0-0-5.ec2.internal"},
            "status": {"phase": "Running"}
        }));
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "ip-10-0-0-5.ec2.internal", "labels": {
            PROVISIONER_NAME_LABEL: "service", ZONE_LABEL: "ap-northeast-2a", ARCH_LABEL: "amd64",
            CAPACITY_TYPE_LABEL: "on-demand", INSTANCE_TYPE_LABEL: "t3.large"
        }}}))
        .unwrap();
        assert_eq!(
            pod_state_labels(&web, Some(&node)),
            [
                "web-1",
                "shop",
                "ReplicaSet/web-7d",
                "ip-10-0-0-5.ec2.internal",
                "service",
                "ap-northeast-2a",
                "amd64",
                "on-demand",
                "t3.large",
                "Running"
            ]
        );
        let pending =
            pod(json!({"metadata": {"name": "p", "namespace": "shop"}, "spec": {"containers": []}, "status": {"phase": "Pending"}}));
        assert_eq!(
            pod_state_labels(&pending, None),
            ["p", "shop", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "Pending"]
        );
    }
}
