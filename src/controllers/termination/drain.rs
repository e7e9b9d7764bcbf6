//! Which pods a draining node still has to lose, and in which order they are evicted
//! (`core@v0.27.0:pkg/controllers/machine/terminator/terminator.go` `Drain`). Pure.

use k8s_openapi::api::core::v1::Pod;

use crate::apis::keys::UNSCHEDULABLE_TAINT_KEY;
use crate::scheduling::pods::{is_daemon_or_mirror, is_terminal, PodKey};
use jiff::{SignedDuration, Timestamp};

/// Priority classes whose pods are evicted only after every other pod.
pub const CRITICAL_PRIORITY_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];
/// A pod deleted longer ago than this is presumed stuck on a partitioned kubelet and ignored.
pub const STUCK_TERMINATING_AFTER_SECONDS: i64 = 60;

/// Tolerates `node.kubernetes.io/unschedulable:NoSchedule` (DaemonSet pods, blanket tolerations).
pub fn tolerates_unschedulable(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| s.tolerations.iter().flatten()).any(|t| {
        let key_matches = t.key.as_deref().is_none_or(|k| k.is_empty() || k == UNSCHEDULABLE_TAINT_KEY);
        let effect_matches = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoSchedule");
        let operator_ok = t.operator.as_deref() == Some("Exists") || (t.key.is_some() && t.value.as_deref().unwrap_or("").is_empty());
        key_matches && effect_matches && operator_ok
    })
}

/// Runs with a `system-cluster-critical` or `system-node-critical` priority class.
pub fn is_critical(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c))
}

/// What is left to do to drain a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// Pods to evict now, in order: the non-critical ones, or the critical ones once no
    /// non-critical pod is left to evict.
    pub evict: Vec<PodKey>,
    /// Pods that must still go but are not evicted now: terminating ones (waited on) and critical
    /// ones held back behind non-critical ones.
    pub waiting: Vec<PodKey>,
}

impl DrainPlan {
    /// No pod that must leave the node is left.
    pub fn is_complete(&self) -> bool {
        self.evict.is_empty() && self.waiting.is_empty()
    }

    /// How many pods still have to go.
    pub fn remaining(&self) -> usize {
        self.evict.len() + self.waiting.len()
    }
}

/// The drain plan for the pods bound to a node at `now`. Terminal, DaemonSet, mirror and
/// unschedulable-tolerating pods stay; pods deleted more than a minute ago are presumed stuck
/// and ignored; `karpenter.sh/do-not-evict` is not consulted (nor is it by Karpenter's drain since v0.26).
pub fn plan<'a>(pods: impl IntoIterator<Item = &'a Pod>, now: Timestamp) -> DrainPlan {
    let stuck_before = now - SignedDuration::from_secs(STUCK_TERMINATING_AFTER_SECONDS);
    let mut plan = DrainPlan::default();
    let (mut critical, mut non_critical) = (Vec::new(), Vec::new());
    for pod in pods {
        if is_terminal(pod) || is_daemon_or_mirror(pod) || tolerates_unschedulable(pod) {
            continue;
        }
        if let Some(deleted) = &pod.metadata.deletion_timestamp {
            if deleted.0 >= stuck_before {
                plan.waiting.push(PodKey::of(pod));
            }
            continue;
        }
        if is_critical(pod) {
            critical.push(PodKey::of(pod));
        } else {
            non_critical.push(PodKey::of(pod));
        }
    }
    critical.sort();
    non_critical.sort();
    if non_critical.is_empty() {
        plan.evict = critical;
    } else {
        plan.evict = non_critical;
        plan.waiting.extend(critical);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2023-06-01T12:00:00Z".parse::<Timestamp>().unwrap()
    }

    fn pod(name: &str, extra: serde_json::Value) -> Pod {
        let mut value = json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": [], "nodeName": "n1"}, "status": {"phase": "Running"}});
        merge(&mut value, extra);
        serde_json::from_value(value).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn names(v: &[PodKey]) -> Vec<&str> {
        v.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn evicts_ordinary_pods_and_leaves_daemonset_mirror_and_terminal_pods() {
        let pods = [
            pod("web", json!({})),
            pod(
                "ds",
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}}),
            ),
            pod("static", json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})),
            pod(
                "static-owned",
                json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}]}}),
            ),
            pod("done", json!({"status": {"phase": "Succeeded"}})),
            pod("failed", json!({"status": {"phase": "Failed"}})),
            pod("tolerates-all", json!({"spec": {"tolerations": [{"operator": "Exists"}]}})),
        ];
        let plan = plan(&pods, now());
        assert_eq!(names(&plan.evict), ["web"]);
        assert!(plan.waiting.is_empty());
        assert!(!plan.is_complete());
    }

    #[test]
    fn evicts_critical_pods_only_after_the_others() {
        let pods = [
            pod("dns", json!({"spec": {"priorityClassName": "system-cluster-critical"}})),
            pod("web", json!({})),
        ];
        let first = plan(&pods, now());
        assert_eq!(names(&first.evict), ["web"]);
        assert_eq!(names(&first.waiting), ["dns"]);
        let second = plan(&pods[..1], now());
        assert_eq!(names(&second.evict), ["dns"]);
    }

    #[test]
    fn terminating_pods_are_waited_on_and_do_not_hold_back_critical_ones() {
        let deleted = (now() - SignedDuration::from_secs(10)).to_string();
        let pods = [
            pod("leaving", json!({"metadata": {"deletionTimestamp": deleted}})),
            pod("node-agent", json!({"spec": {"priorityClassName": "system-node-critical"}})),
        ];
        let plan = plan(&pods, now());
        assert_eq!(names(&plan.evict), ["node-agent"]);
        assert_eq!(names(&plan.waiting), ["leaving"]);
    }

    #[test]
    fn ignores_pods_stuck_terminating_for_more_than_a_minute() {
        let deleted = (now() - SignedDuration::from_secs(61)).to_string();
        let plan = plan(&[pod("stuck", json!({"metadata": {"deletionTimestamp": deleted}}))], now());
        assert!(plan.is_complete());
    }

    #[test]
    fn drain_of_a_node_without_pods_is_complete() {
        assert!(plan(&[], now()).is_complete());
    }

    #[test]
    fn does_not_consult_do_not_evict_when_draining() {
        let plan = plan(
            &[pod(
                "pinned",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-evict": "true"}}}),
            )],
            now(),
        );
        assert_eq!(names(&plan.evict), ["pinned"]);
    }

    #[test]
    fn a_toleration_of_another_key_does_not_exempt_a_pod() {
        let p = pod(
            "web",
            json!({"spec": {"tolerations": [{"key": "service", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]}}),
        );
        assert!(!tolerates_unschedulable(&p));
        let q = pod(
            "ds",
            json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}}),
        );
        assert!(tolerates_unschedulable(&q));
    }
}
