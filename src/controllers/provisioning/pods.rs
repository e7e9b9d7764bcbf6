//! What a pass places (the provisionable pods and those a leaving node displaces, by the pod
//! predicates of `scheduling::pods`) and the DaemonSet pods whose requests are a new node's
//! overhead. Pure functions; no I/O here.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::scheduling::pods::{is_displaced_by_drain, is_provisionable, is_terminal_or_terminating};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::pods::predicate_tests::{pod, unschedulable};
    use serde_json::json;

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
