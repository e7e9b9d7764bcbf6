//! What a pass places (the provisionable pods and those a leaving node displaces, by the pod
//! predicates of `scheduling::pods`), the DaemonSet pods whose requests are a new node's
//! overhead, and the pod facts provisioning's metrics report. Pure functions; no I/O here.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::apis::v1alpha5::labels::{ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, ZONE_LABEL};
use crate::scheduling::pods::{is_displaced_by_drain, is_pending, is_provisionable, is_terminal_or_terminating};

/// What a provisioning pass places, and where it may: the nodes that stay, and the pods that need
/// a node: the provisionable ones, plus the pods a drain will displace from every node being
/// deleted (a deletionTimestamp) and from `replacing` (a node about to be drained), unbound so
/// the simulation finds them a new home before they are evicted. The leaving nodes are left out
/// (`core@v0.27.0:pkg/controllers/provisioning/provisioner.go` `Schedule`, "deletingNodePods").
/// `nodes` should be read before `all_pods` (see the pass).
pub fn to_place(nodes: &[Arc<Node>], all_pods: &[Arc<Pod>], replacing: Option<&str>) -> (Vec<Arc<Node>>, Vec<Arc<Pod>>) {
    let (leaving, staying): (Vec<&Arc<Node>>, Vec<&Arc<Node>>) = nodes
        .iter()
        .partition(|n| n.metadata.deletion_timestamp.is_some() || n.metadata.name.as_deref() == replacing);
    let leaving: BTreeSet<&str> = leaving.iter().filter_map(|n| n.metadata.name.as_deref()).chain(replacing).collect();
    let mut pods: Vec<Arc<Pod>> = all_pods.iter().filter(|p| is_provisionable(p)).cloned().collect();
    for pod in all_pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if node.is_some_and(|n| leaving.contains(n)) && is_displaced_by_drain(pod) {
            let mut pod = (**pod).clone();
            if let Some(spec) = pod.spec.as_mut() {
                spec.node_name = None;
            }
            pods.push(Arc::new(pod));
        }
    }
    (staying.into_iter().cloned().collect(), pods)
}

/// One pod per DaemonSet, whose requests are the overhead of every new node it would run on
/// (`core@v0.27.0:pkg/controllers/provisioning/provisioner.go` `getDaemonSetPods`): built from
/// the DaemonSet's pod template, with the containers, init containers and overhead of its newest
/// running pod when it has one, since what a pod really requests can differ from its template
/// (a LimitRange's defaults, a vertical pod autoscaler).
/// Where the pod may run stays the template's: the live pod's affinity is pinned to its node.
pub fn daemonset_overhead_pods(daemonsets: &[Arc<DaemonSet>], pods: &[Arc<Pod>]) -> Vec<Pod> {
    daemonsets
        .iter()
        .filter_map(|ds| {
            let template = ds.spec.as_ref()?.template.clone();
            let mut pod = Pod {
                metadata: template.metadata.unwrap_or_default(),
                spec: template.spec,
                status: None,
            };
            let live = pods
                .iter()
                .filter(|p| is_controlled_by(p, ds) && !is_terminal_or_terminating(p))
                .max_by(|a, b| {
                    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                    created(a).cmp(&created(b)).then_with(|| b.metadata.name.cmp(&a.metadata.name))
                });
            if let (Some(spec), Some(live_spec)) = (pod.spec.as_mut(), live.and_then(|p| p.spec.as_ref())) {
                spec.containers = live_spec.containers.clone();
                spec.init_containers = live_spec.init_containers.clone();
                spec.overhead = live_spec.overhead.clone();
            }
            Some(pod)
        })
        .collect()
}

/// True when `pod` is controlled by the DaemonSet `ds` (its controller reference names it).
fn is_controlled_by(pod: &Pod, ds: &DaemonSet) -> bool {
    pod.metadata.namespace == ds.metadata.namespace
        && pod.metadata.owner_references.iter().flatten().any(|o| {
            o.controller == Some(true)
                && o.kind == "DaemonSet"
                && o.api_version == "apps/v1"
                && o.name == ds.metadata.name.as_deref().unwrap_or_default()
                && ds.metadata.uid.as_ref().is_none_or(|uid| *uid == o.uid)
        })
}

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
    use crate::scheduling::pods::predicate_tests::{pod, unschedulable};
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

    fn node(name: &str, deleting: bool) -> Arc<Node> {
        let mut metadata = json!({"name": name});
        if deleting {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            metadata["finalizers"] = json!(["karpenter.sh/termination"]);
        }
        Arc::new(serde_json::from_value(json!({"metadata": metadata})).unwrap())
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect()
    }

    #[test]
    fn pods_of_leaving_nodes_are_placed_again_and_the_nodes_left_out() {
        let running = json!({"phase": "Running"});
        let ds_owner = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]);
        let all_pods: Vec<Arc<Pod>> = [
            json!({"metadata": {"name": "pending"}, "spec": {"containers": []}, "status": unschedulable()}),
            json!({"metadata": {"name": "on-deleting"}, "spec": {"containers": [], "nodeName": "deleting"}, "status": running}),
            json!({"metadata": {"name": "ds-on-deleting", "ownerReferences": ds_owner}, "spec": {"containers": [], "nodeName": "deleting"}, "status": running}),
            json!({"metadata": {"name": "evicted", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": [], "nodeName": "deleting"}, "status": running}),
            json!({"metadata": {"name": "on-expiring"}, "spec": {"containers": [], "nodeName": "expiring"}, "status": running}),
            json!({"metadata": {"name": "on-staying"}, "spec": {"containers": [], "nodeName": "staying"}, "status": running}),
        ]
        .into_iter()
        .map(|v| Arc::new(pod(v)))
        .collect();
        let nodes = [node("deleting", true), node("expiring", false), node("staying", false)];

        let (kept, placed) = to_place(&nodes, &all_pods, None);
        let kept: Vec<_> = kept.iter().map(|n| n.metadata.name.as_deref().unwrap()).collect();
        assert_eq!(kept, ["expiring", "staying"]);
        assert_eq!(names(&placed), ["pending", "on-deleting"]);
        assert!(placed.iter().all(|p| p.spec.as_ref().unwrap().node_name.is_none()), "unbound");

        let (kept, placed) = to_place(&nodes, &all_pods, Some("expiring"));
        let kept: Vec<_> = kept.iter().map(|n| n.metadata.name.as_deref().unwrap()).collect();
        assert_eq!(kept, ["staying"]);
        assert_eq!(names(&placed), ["pending", "on-deleting", "on-expiring"]);
    }

    fn daemonset(name: &str, uid: &str, cpu: &str) -> Arc<DaemonSet> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "kube-system", "uid": uid},
                "spec": {"selector": {}, "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [{"name": "agent", "resources": {"requests": {"cpu": cpu}}}],
                        "tolerations": [{"operator": "Exists"}]
                    }
                }}
            }))
            .unwrap(),
        )
    }

    fn daemon_pod(name: &str, owner: (&str, &str), created: &str, cpu: &str, status: serde_json::Value) -> Arc<Pod> {
        Arc::new(pod(json!({
            "metadata": {
                "name": name, "namespace": "kube-system", "creationTimestamp": created,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner.0, "uid": owner.1, "controller": true}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "agent", "resources": {"requests": {"cpu": cpu}}}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]}}}
            },
            "status": status
        })))
    }

    fn cpu_of(pod: &Pod) -> String {
        serde_json::to_value(pod).unwrap()["spec"]["containers"][0]["resources"]["requests"]["cpu"].to_string()
    }

    #[test]
    fn daemonset_overhead_uses_the_newest_live_pods_requests_else_the_template() {
        let daemonsets = [daemonset("logs", "u-logs", "100m"), daemonset("metrics", "u-metrics", "50m")];
        let running = json!({"phase": "Running"});
        let pods = [
            // A LimitRange raised the request of the live pods; the newest one counts.
            daemon_pod("logs-old", ("logs", "u-logs"), "2026-01-01T00:00:00Z", "200m", running.clone()),
            daemon_pod("logs-new", ("logs", "u-logs"), "2026-01-02T00:00:00Z", "300m", running.clone()),
            // Finished, or of another DaemonSet with the same name (another uid): not counted.
            daemon_pod(
                "metrics-done",
                ("metrics", "u-metrics"),
                "2026-01-03T00:00:00Z",
                "1",
                json!({"phase": "Failed"}),
            ),
            daemon_pod("metrics-other", ("metrics", "u-old"), "2026-01-03T00:00:00Z", "2", running),
        ];
        let overhead = daemonset_overhead_pods(&daemonsets, &pods);
        assert_eq!(overhead.len(), 2);
        assert_eq!(cpu_of(&overhead[0]), r#""300m""#, "the live pod's requests");
        assert_eq!(cpu_of(&overhead[1]), r#""50m""#, "no live pod: the template's");
        // Where it may run stays the template's (not pinned to the live pod's node).
        let spec = overhead[0].spec.as_ref().unwrap();
        assert!(spec.affinity.is_none() && spec.node_name.is_none());
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
    }

}
