//! Whether a pod planned for a node may be bound to it now (karpenter-rs only; Karpenter has not
//! bound pods since v0.11): the node is Ready, no startup or not-ready taint is left, and it
//! advertises every resource the pods requested; and only the pods that still fit on it, as
//! kube-scheduler and the kubelet would admit them. Read by the binder and by provisioning's back-off
//! (a pod its node could take); whether a node is ready for its pods is `nodes::is_ready_for_pods`.
//! Pure; `controllers::binding` makes the one call that writes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};

use super::pods::{is_terminal, is_terminal_or_terminating, PodState};
use super::resources::pod_requests;
use super::{taints, Resources};

/// Why a planned pod is left to kube-scheduler (logged with the pod).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LeftToScheduler {
    /// It names another scheduler.
    #[error("its scheduler is {0:?}")]
    OtherScheduler(String),
    /// A claim of its is not bound yet: the scheduler picks the node and the volume together.
    #[error("its claim {0:?} is not bound yet")]
    ClaimNotBound(String),
    /// Required pod (anti-)affinity, which depends on the pods on other nodes.
    #[error("it has required pod (anti-)affinity")]
    PodAffinity,
    /// A `DoNotSchedule` topology spread, which depends on the pods on other nodes.
    #[error("it has a DoNotSchedule topology spread constraint")]
    TopologySpread,
    /// The node's labels do not match its node selector on this key.
    #[error("the node does not match its node selector on {0:?}")]
    NodeSelector(String),
    /// The node's labels match none of its required node-affinity terms.
    #[error("the node matches none of its required node-affinity terms")]
    NodeAffinity,
    /// A taint of the node it does not tolerate.
    #[error("{0}")]
    Taint(String),
    /// The node reports no allocatable resources yet.
    #[error("the node reports no allocatable resources")]
    NoAllocatable,
    /// Other pods took the room planned for it.
    #[error("the node has no room left for it")]
    NoRoom,
    /// Pending pods the scheduler may bind to the node meanwhile could take the room planned
    /// for it.
    #[error("pending pods the scheduler may bind to the node could take its room")]
    Contested,
}

/// The scheduler whose pods karpenter-rs may bind.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Why a planned pod is left to kube-scheduler rather than bound (as Karpenter leaves them all), or
/// `None` when the binder can verify everything the scheduler and the kubelet would check:
/// what only the scheduler can decide (`scheduler_decides`), and a pod whose node selector,
/// required node affinity or tolerations do not admit `node` as it is now (`node_refuses`).
pub fn leave_to_scheduler(node: &Node, pod: &Pod, claim_bound: &dyn Fn(&str, &str) -> bool) -> Option<LeftToScheduler> {
    scheduler_decides(pod, claim_bound).or_else(|| node_refuses(node, pod))
}

/// What makes a pod's placement the scheduler's to decide, whatever the node: a pod of another
/// scheduler; a pod with a claim that is not bound yet (for a `WaitForFirstConsumer` claim the
/// scheduler picks the node and the volume together); required pod (anti-)affinity or a
/// `DoNotSchedule` topology spread, which depend on the pods on other nodes at this moment.
pub fn scheduler_decides(pod: &Pod, claim_bound: &dyn Fn(&str, &str) -> bool) -> Option<LeftToScheduler> {
    let spec = pod.spec.as_ref()?;
    let scheduler = spec.scheduler_name.as_deref().unwrap_or(DEFAULT_SCHEDULER);
    if scheduler != DEFAULT_SCHEDULER {
        return Some(LeftToScheduler::OtherScheduler(scheduler.to_string()));
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    for volume in spec.volumes.iter().flatten() {
        if let Some(claim) = &volume.persistent_volume_claim {
            if !claim_bound(namespace, &claim.claim_name) {
                return Some(LeftToScheduler::ClaimNotBound(claim.claim_name.clone()));
            }
        }
    }
    let affinity = spec.affinity.as_ref();
    let required_pod_terms = |terms: Option<&Vec<k8s_openapi::api::core::v1::PodAffinityTerm>>| terms.is_some_and(|t| !t.is_empty());
    if required_pod_terms(
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
    ) || required_pod_terms(
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
    ) {
        return Some(LeftToScheduler::PodAffinity);
    }
    if spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .any(|c| c.when_unsatisfiable == "DoNotSchedule")
    {
        return Some(LeftToScheduler::TopologySpread);
    }
    None
}

/// Why `node` as it is now (its labels and taints) cannot take the pod, whatever else runs on
/// it: its node selector, required node affinity or tolerations.
pub fn node_refuses(node: &Node, pod: &Pod) -> Option<LeftToScheduler> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if let Err(why) = matches_node_affinity(pod, &labels) {
        return Some(why);
    }
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .collect();
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    taints::tolerates_all(tolerations, &taints).err().map(LeftToScheduler::Taint)
}

/// Whether `node` could take the pod if nothing else ran on it: it admits the pod
/// (`node_refuses`) and its allocatable holds the pod's requests. A pod its node could take
/// that is still pending lost the node's room (or its place in a topology) to other pods.
pub fn could_take(node: &Node, pod: &Pod) -> bool {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let Some(Ok(allocatable)) = allocatable.map(Resources::from_quantities) else {
        return false;
    };
    node_refuses(node, pod).is_none() && pod_requests(pod).fits(&allocatable)
}

/// Whether `labels` satisfy the pod's node selector and one of its required node-affinity
/// terms, as kube-scheduler's NodeAffinity filter decides (an absent label satisfies only
/// `NotIn` and `DoesNotExist`).
pub fn matches_node_affinity(pod: &Pod, labels: &BTreeMap<String, String>) -> Result<(), LeftToScheduler> {
    let state = PodState::new(pod);
    if let Err(key) = state.node_selector.matched_by(labels) {
        return Err(LeftToScheduler::NodeSelector(key));
    }
    if state.required_terms.is_empty() || state.required_terms.iter().any(|t| t.matched_by(labels).is_ok()) {
        return Ok(());
    }
    Err(LeftToScheduler::NodeAffinity)
}

/// Of the pods planned for `node`, in order, those that may be bound to it now: admitted by the
/// node (`node_refuses`), room beside `on_node` (the pods already bound to it; Succeeded and
/// Failed ones hold nothing) and the ones before them, room beside every pod of `pending` (the
/// other unbound pods) that the scheduler could bind to the node at the same moment
/// (`may_compete`), and nothing only the scheduler can decide (`scheduler_decides`). The
/// scheduler may have put other pending pods on the node since the plan was made (it binds to
/// any ready node with room), and the API server does not check a Binding against anything:
/// binding regardless would overcommit the node or break the pod's constraints, and its kubelet
/// would reject the pod. Listing the node's pods does not settle it: the scheduler may bind a
/// pod right after the list, or from a cache that does not show our binding yet, so the room of
/// a pod it may still bind there is not ours to give. A pod left to the scheduler keeps its room
/// from the pods after it, so the scheduler can still put it where it was planned. Each pod left
/// out comes with the reason (`NoRoom` when the room is gone, whoever decides; `Contested` when
/// pending pods may take it); it stays pending for the scheduler.
pub fn bindable<'a>(
    node: &Node,
    on_node: &[Pod],
    pending: &[&Pod],
    planned: &[&'a Pod],
    claim_bound: &dyn Fn(&str, &str) -> bool,
) -> (Vec<&'a Pod>, Vec<(&'a Pod, LeftToScheduler)>) {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let Some(Ok(allocatable)) = allocatable.map(Resources::from_quantities) else {
        return (Vec::new(), planned.iter().map(|p| (*p, LeftToScheduler::NoAllocatable)).collect());
    };
    let mut used = Resources::zero();
    for pod in on_node {
        if !is_terminal(pod) {
            used.add(&pod_requests(pod));
        }
    }
    // Every pending pod the scheduler could bind there now, all together: it packs them against
    // its own view, which need not hold our bindings.
    let mut contested = used.clone();
    for pod in pending.iter().filter(|p| may_compete(node, p)) {
        let requests = pod_requests(pod);
        if used.plus(&requests).fits(&allocatable) {
            contested.add(&requests);
        }
    }
    let (mut taken, mut left) = (Vec::new(), Vec::new());
    for pod in planned {
        if let Some(why) = node_refuses(node, pod) {
            left.push((*pod, why));
            continue;
        }
        let requests = pod_requests(pod);
        let with_pod = used.plus(&requests);
        if !with_pod.fits(&allocatable) {
            left.push((*pod, LeftToScheduler::NoRoom));
            continue;
        }
        used = with_pod;
        contested.add(&requests);
        match scheduler_decides(pod, claim_bound) {
            Some(why) => left.push((*pod, why)),
            None if !contested.fits(&allocatable) => left.push((*pod, LeftToScheduler::Contested)),
            None => taken.push(*pod),
        }
    }
    (taken, left)
}

/// Whether the scheduler could bind `pod` to `node` now, whatever else runs there: it is unbound,
/// not deleting, not finished, not gated, not pinned to another node by `matchFields` (as the
/// DaemonSet controller pins its pods) and admitted by the node (`node_refuses`).
pub fn may_compete(node: &Node, pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    let unbound = spec.node_name.as_deref().is_none_or(str::is_empty);
    let gated = spec.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty());
    unbound
        && !gated
        && !is_terminal_or_terminating(pod)
        && !is_pinned_elsewhere(pod, node.metadata.name.as_deref().unwrap_or_default())
        && node_refuses(node, pod).is_none()
}

/// Whether every required node-affinity term of the pod names, by `matchFields` on
/// `metadata.name`, only nodes other than `node_name`.
fn is_pinned_elsewhere(pod: &Pod, node_name: &str) -> bool {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    !terms.is_empty()
        && terms.iter().all(|t| {
            t.match_fields
                .iter()
                .flatten()
                .any(|f| f.key == "metadata.name" && f.operator == "In" && !f.values.iter().flatten().any(|v| v == node_name))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn ready(taints: serde_json::Value, allocatable: serde_json::Value) -> Node {
        node(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": allocatable}
        }))
    }

    fn pod_on(name: &str, cpu: &str, node: Option<&str>, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn binds_only_the_planned_pods_that_still_fit_beside_what_the_scheduler_put_there() {
        // A t3.xlarge planned for two 1500m pods; the scheduler already bound a third pod there.
        let node = ready(json!([]), json!({"cpu": "3920m", "memory": "14Gi", "pods": "58"}));
        let planned = [pod_on("x", "1500m", None, "Pending"), pod_on("y", "1500m", None, "Pending")];
        let planned: Vec<&Pod> = planned.iter().collect();
        let names = |(pods, _): (Vec<&Pod>, Vec<(&Pod, LeftToScheduler)>)| {
            pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>()
        };
        fn bindable<'a>(node: &Node, on_node: &[Pod], planned: &[&'a Pod]) -> (Vec<&'a Pod>, Vec<(&'a Pod, LeftToScheduler)>) {
            super::bindable(node, on_node, &[], planned, &|_, _| true)
        }
        assert_eq!(names(bindable(&node, &[], &planned)), ["x", "y"]);
        let scheduled = [pod_on("z", "1500m", Some("n"), "Running")];
        assert_eq!(names(bindable(&node, &scheduled, &planned)), ["x"], "room for one more, not two");
        let full = [
            pod_on("z", "1500m", Some("n"), "Running"),
            pod_on("w", "1500m", Some("n"), "Pending"),
        ];
        assert!(bindable(&node, &full, &planned).0.is_empty());
        // Finished pods hold nothing.
        let finished = [
            pod_on("z", "1500m", Some("n"), "Succeeded"),
            pod_on("w", "1500m", Some("n"), "Failed"),
        ];
        assert_eq!(names(bindable(&node, &finished, &planned)), ["x", "y"]);
        // The pod count is a resource too.
        let one_pod = ready(json!([]), json!({"cpu": "3920m", "pods": "1"}));
        assert_eq!(names(bindable(&one_pod, &[], &planned)), ["x"]);
    }

    fn planned(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]);
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})).unwrap()
    }

    fn labelled(labels: serde_json::Value, taints: serde_json::Value) -> Node {
        node(json!({
            "metadata": {"name": "n", "labels": labels},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "2", "pods": "10"}}
        }))
    }

    #[test]
    fn leaves_to_the_scheduler_what_it_cannot_verify_on_the_node_as_it_is() {
        let node = labelled(
            json!({"team": "a", "nodeType": "service-2023"}),
            json!([{"key": "service", "value": "true", "effect": "NoSchedule"}]),
        );
        let tolerates = json!([{"key": "service", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]);
        let all_bound = |_: &str, _: &str| true;
        let check = |spec: serde_json::Value| leave_to_scheduler(&node, &planned(spec), &all_bound).map(|why| why.to_string());
        assert_eq!(
            check(json!({"tolerations": tolerates, "nodeSelector": {"nodeType": "service-2023"}})),
            None
        );
        assert!(check(json!({"nodeSelector": {"nodeType": "service-2023"}}))
            .unwrap()
            .contains("did not tolerate taint service=true:NoSchedule"));
        // Required node affinity against the node's labels: a node launched without the `team`
        // label (or with another value) must not get the pod.
        let affinity = |op: &str, values: serde_json::Value| {
            json!({"tolerations": tolerates, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "team", "operator": op, "values": values}]}]}}}})
        };
        assert_eq!(check(affinity("In", json!(["a", "b"]))), None);
        assert_eq!(check(affinity("Exists", json!([]))), None);
        assert!(check(affinity("In", json!(["b"])))
            .unwrap()
            .contains("none of its required node-affinity terms"));
        assert!(check(affinity("DoesNotExist", json!([]))).is_some());
        let unlabelled = labelled(json!({}), json!([]));
        assert!(leave_to_scheduler(&unlabelled, &planned(affinity("Exists", json!([]))), &all_bound).is_some());
        assert_eq!(
            leave_to_scheduler(&unlabelled, &planned(affinity("NotIn", json!(["a"]))), &all_bound),
            None
        );
        assert!(
            leave_to_scheduler(&unlabelled, &planned(json!({"nodeSelector": {"team": "a"}})), &all_bound)
                .unwrap()
                .to_string()
                .contains("node selector on \"team\"")
        );
        // Another scheduler's pod, a claim not bound yet, required pod (anti-)affinity and hard
        // topology spread are the scheduler's to place.
        let mut other = json!({"tolerations": tolerates, "schedulerName": "volcano"});
        assert!(check(other.clone()).unwrap().contains("volcano"));
        other["schedulerName"] = json!("default-scheduler");
        assert_eq!(check(other), None);
        let with_claim = json!({"tolerations": tolerates, "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]});
        assert_eq!(check(with_claim.clone()), None);
        let unbound = |ns: &str, name: &str| !(ns == "default" && name == "data");
        assert!(leave_to_scheduler(&node, &planned(with_claim), &unbound)
            .unwrap()
            .to_string()
            .contains("\"data\" is not bound"));
        let term = json!({"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"});
        assert!(check(
            json!({"tolerations": tolerates, "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
        )
        .is_some());
        assert!(check(
            json!({"tolerations": tolerates, "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
        )
        .is_some());
        let spread = |when: &str| json!({"tolerations": tolerates, "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": when, "labelSelector": {"matchLabels": {"app": "x"}}}]});
        assert!(check(spread("DoNotSchedule")).is_some());
        assert_eq!(check(spread("ScheduleAnyway")), None);
        // bindable reports why each pod was left out.
        let pods = [planned(json!({"nodeSelector": {"team": "b"}, "tolerations": tolerates}))];
        let refs: Vec<&Pod> = pods.iter().collect();
        let (taken, left) = bindable(&node, &[], &[], &refs, &all_bound);
        assert!(taken.is_empty());
        assert!(left[0].1.to_string().contains("node selector"), "{left:?}");
    }

    #[test]
    fn a_pod_left_to_the_scheduler_keeps_its_room_and_is_told_when_the_room_is_gone() {
        // 2 CPUs: a 1500m zonal-spread pod planned first, then a plain 1500m pod.
        let node = ready(json!([]), json!({"cpu": "2", "pods": "10"}));
        let mut spread = pod_on("spread", "1500m", None, "Pending");
        spread.spec.as_mut().unwrap().topology_spread_constraints = Some(vec![serde_json::from_value(json!(
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "x"}}}
        ))
        .unwrap()]);
        let plain = pod_on("plain", "1500m", None, "Pending");
        let (taken, left) = bindable(&node, &[], &[], &[&spread, &plain], &|_, _| true);
        assert!(
            taken.is_empty(),
            "the plain pod must not take the room the scheduler may give the spread pod"
        );
        assert_eq!(left[0].1, LeftToScheduler::TopologySpread, "{left:?}");
        assert_eq!(left[1].1, LeftToScheduler::NoRoom);
        // The scheduler gave the room to another pod: the spread pod's room is gone too.
        let other = [pod_on("other", "1", Some("n"), "Running")];
        let (taken, left) = bindable(&node, &other, &[], &[&spread], &|_, _| true);
        assert!(taken.is_empty());
        assert_eq!(left[0].1, LeftToScheduler::NoRoom, "{left:?}");
        // A node that refuses the pod says so, whatever the room.
        let tainted = ready(
            json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
            json!({"cpu": "2", "pods": "10"}),
        );
        let (_, left) = bindable(&tainted, &other, &[], &[&spread], &|_, _| true);
        assert!(left[0].1.to_string().contains("did not tolerate"), "{left:?}");
    }

    #[test]
    fn keeps_from_planned_pods_the_room_of_pending_pods_the_scheduler_may_bind_there_meanwhile() {
        // A t3.large (1830m) launched for one 1500m replica while a second 1500m replica of the
        // same Deployment stays pending (the Provisioner's limits allow one node). The scheduler
        // may bind the second to the node as it turns Ready, from a cache that does not show our
        // binding yet, or after we listed the node's pods: binding the first would overcommit.
        let node = ready(json!([]), json!({"cpu": "1830m", "memory": "7577Mi", "pods": "35"}));
        let planned = pod_on("a", "1500m", None, "Pending");
        let bind = |pending: &[&Pod]| {
            let (taken, left) = bindable(&node, &[], pending, &[&planned], &|_, _| true);
            let taken: Vec<String> = taken.iter().map(|p| p.name_any()).collect();
            (taken, left.into_iter().map(|(p, why)| (p.name_any(), why)).collect::<Vec<_>>())
        };
        let second = pod_on("b", "1500m", None, "Pending");
        let (taken, left) = bind(&[&second]);
        assert!(taken.is_empty(), "the scheduler may put the second replica there: {left:?}");
        assert_eq!(left, [("a".to_string(), LeftToScheduler::Contested)]);
        // Every pending pod that fits counts, not only the first: 1000m beside two 500m pods.
        let planned_1000 = pod_on("a", "1000m", None, "Pending");
        let halves = [pod_on("h1", "500m", None, "Pending"), pod_on("h2", "500m", None, "Pending")];
        let (taken, _) = bindable(&node, &[], &[&halves[0], &halves[1]], &[&planned_1000], &|_, _| true);
        assert!(taken.is_empty());
        // Pending pods the scheduler cannot put there leave the room alone.
        let small = pod_on("small", "200m", None, "Pending");
        let too_big = pod_on("big", "2", None, "Pending");
        let mut elsewhere = pod_on("elsewhere", "1500m", None, "Pending");
        elsewhere.spec.as_mut().unwrap().node_selector = Some(BTreeMap::from([("team".to_string(), "b".to_string())]));
        let mut gated = pod_on("gated", "1500m", None, "Pending");
        gated.spec.as_mut().unwrap().scheduling_gates = Some(vec![serde_json::from_value(json!({"name": "queue"})).unwrap()]);
        let mut daemon = pod_on("daemon", "1500m", None, "Pending");
        daemon.spec.as_mut().unwrap().affinity = Some(
            serde_json::from_value(json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]}}}))
            .unwrap(),
        );
        let bound = pod_on("bound", "1500m", Some("other"), "Running");
        let mut leaving = pod_on("leaving", "1500m", None, "Pending");
        leaving.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        let failed = pod_on("failed", "1500m", None, "Failed");
        let (taken, left) = bind(&[&small, &too_big, &elsewhere, &gated, &daemon, &bound, &leaving, &failed]);
        assert_eq!(taken, ["a"], "{left:?}");
    }

    #[test]
    fn a_node_could_take_a_pod_its_labels_taints_and_allocatable_admit() {
        let open = ready(json!([]), json!({"cpu": "2", "pods": "10"}));
        assert!(could_take(&open, &pod_on("p", "1500m", None, "Pending")));
        assert!(!could_take(&open, &pod_on("p", "3", None, "Pending")), "larger than the node");
        let tainted = ready(
            json!([{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
            json!({"cpu": "2", "pods": "10"}),
        );
        assert!(!could_take(&tainted, &pod_on("p", "1", None, "Pending")));
        let no_status = node(json!({"metadata": {"name": "n"}}));
        assert!(!could_take(&no_status, &pod_on("p", "1", None, "Pending")));
    }
}
