//! What the simulation reads from a pod: its identity, requests, tolerations, node selector and
//! affinity as requirements, topology constraints and host ports; and which pending pods
//! Karpenter refuses to provision for (`validate_pod`). No I/O here.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Pod, PodAffinityTerm, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::apis::field_error::{FieldErrorKind, Path};
use crate::apis::keys::MIRROR_POD_ANNOTATION;
use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::apis::v1alpha5::requirements::validate_requirement;

use super::requirements::Requirements;
use super::resources::{pod_requests, Resources};

/// Identifies a pod in a plan: namespace and name, shown as `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    /// `metadata.namespace` (`default` when unset).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl PodKey {
    /// The key of a pod object.
    pub fn of(pod: &Pod) -> Self {
        PodKey {
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".to_string()),
            name: pod.metadata.name.clone().unwrap_or_default(),
        }
    }

    /// A Pod carrying only this name, to refer to it (in an event) without reading it: after
    /// its eviction it may already be gone.
    pub fn as_object(&self) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why Karpenter does not provision for this pending pod, or Ok. Karpenter skips a pod whose
/// node affinity names `karpenter.sh/provisioner-name DoesNotExist` (how its own Deployment stays
/// off its nodes), uses `matchFields`, or has a requirement that fails the Provisioner
/// requirement rules (restricted key such as `kubernetes.io/hostname`, bad operator or value).
/// `spec.nodeSelector` is not checked.
pub fn validate_pod(pod: &Pod) -> Result<(), String> {
    let Some(node_affinity) = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return Ok(());
    };
    let root = Path::new("spec.affinity.nodeAffinity");
    let mut terms = Vec::new();
    if let Some(required) = node_affinity.required_during_scheduling_ignored_during_execution.as_ref() {
        let path = root.child("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
        for (i, t) in required.node_selector_terms.iter().enumerate() {
            terms.push((path.index(i), t.match_expressions.as_deref(), t.match_fields.as_deref()));
        }
    }
    for (i, t) in node_affinity
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        let path = root
            .child("preferredDuringSchedulingIgnoredDuringExecution")
            .index(i)
            .child("preference");
        terms.push((
            path,
            t.preference.match_expressions.as_deref(),
            t.preference.match_fields.as_deref(),
        ));
    }
    for (path, exprs, fields) in terms {
        if fields.is_some_and(|f| !f.is_empty()) {
            return Err(format!("{}: matchFields is not supported", path.child("matchFields")));
        }
        for (j, r) in exprs.unwrap_or_default().iter().enumerate() {
            let rpath = path.child("matchExpressions").index(j);
            if r.key == PROVISIONER_NAME_LABEL && r.operator == "DoesNotExist" {
                return Err(format!(
                    "{rpath}: {PROVISIONER_NAME_LABEL} DoesNotExist keeps the pod off provisioned nodes"
                ));
            }
            let errs: Vec<String> = validate_requirement(r, &rpath)
                .into_iter()
                // Pods may select a Provisioner by name; only Provisioners may not set that key.
                .filter(|e| !(e.kind == FieldErrorKind::Forbidden && r.key == PROVISIONER_NAME_LABEL))
                .map(|e| e.to_string())
                .collect();
            if !errs.is_empty() {
                return Err(errs.join("; "));
            }
        }
    }
    Ok(())
}

// ---- what kind of pod a pod is: the one set of pod predicates every part asks ----------------

/// Finished: Succeeded or Failed, so it will not run again.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Being deleted (has a deletionTimestamp).
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Owned by a DaemonSet (`apps`).
pub fn is_daemonset_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" && o.api_version.starts_with("apps/"))
}

/// The API mirror of a static pod (owned by its Node, or annotated by the kubelet).
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node" && o.api_version == "v1")
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}

/// A DaemonSet pod or a static pod's mirror: it stays with its node and never needs a node of
/// its own.
pub fn is_daemon_or_mirror(pod: &Pod) -> bool {
    is_daemonset_pod(pod) || is_mirror_pod(pod)
}

/// True for pods that will not run again (Succeeded, Failed) or are being deleted: they neither
/// use node resources nor count for topology.
pub fn is_terminal_or_terminating(pod: &Pod) -> bool {
    is_terminating(pod) || is_terminal(pod)
}

/// A pod karpenter-rs may launch capacity for: not bound, not nominated, marked unschedulable by
/// kube-scheduler (a pod the scheduler has not tried yet is left to it), and neither a DaemonSet
/// pod nor a static/mirror pod (owned by a Node).
pub fn is_provisionable(pod: &Pod) -> bool {
    let spec_bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let status = pod.status.as_ref();
    let nominated = status.and_then(|s| s.nominated_node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let unschedulable = status.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
    });
    let terminating = pod.metadata.deletion_timestamp.is_some();
    !spec_bound && !nominated && unschedulable && !terminating && !is_daemon_or_mirror(pod)
}

/// A pod that needs a new home when its node is drained: neither a DaemonSet nor a mirror pod
/// (they stay with their node), nor finished (Succeeded, Failed), nor already terminating.
pub fn is_displaced_by_drain(pod: &Pod) -> bool {
    !is_terminal_or_terminating(pod) && !is_daemon_or_mirror(pod)
}

/// True while `pod` is Pending (or has no phase yet).
pub fn is_pending(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Pending")
}

/// A host port a container binds: (protocol, host IP, port).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPort {
    /// `TCP` (default), `UDP` or `SCTP`.
    pub protocol: String,
    /// The host IP; `0.0.0.0` (the default) means every address.
    pub ip: String,
    /// The port.
    pub port: i32,
}

impl HostPort {
    /// Whether two bindings collide: same protocol and port, and the same IP or either on all addresses.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port && self.protocol == other.protocol && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// The host ports a pod binds.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|hp| *hp > 0)?;
            Some(HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".to_string()),
                port,
            })
        })
        .collect()
}

/// A pending pod as the solve loop tracks it. Preferences are treated as requirements until
/// `preferences::relax` drops them one by one, so this holds the pod's *current* constraints.
#[derive(Clone, Debug)]
pub(crate) struct PodState {
    pub key: PodKey,
    pub labels: BTreeMap<String, String>,
    pub uid: String,
    pub created: Option<Time>,
    pub requests: Resources,
    pub tolerations: Vec<Toleration>,
    pub node_selector: Requirements,
    /// OR-ed required node-affinity terms; only the first one applies at a time.
    pub required_terms: Vec<Requirements>,
    /// Preferred node-affinity terms, heaviest first; only the first one applies at a time.
    pub preferred_terms: Vec<(i32, Requirements)>,
    pub spread: Vec<TopologySpreadConstraint>,
    pub affinity: Vec<PodAffinityTerm>,
    pub preferred_affinity: Vec<(i32, PodAffinityTerm)>,
    pub anti_affinity: Vec<PodAffinityTerm>,
    pub preferred_anti_affinity: Vec<(i32, PodAffinityTerm)>,
    pub host_ports: Vec<HostPort>,
    /// Spread constraints count only nodes matching this filter, taken from the pod as written
    /// (node selector ∩ any one required term); empty means every node.
    pub node_filter: Vec<Requirements>,
    /// node selector ∩ heaviest preferred term ∩ first required term.
    pub requirements: Requirements,
}

impl PodState {
    pub fn new(pod: &Pod) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let node_selector = Requirements::from_labels(spec.node_selector.iter().flatten());
        let affinity = spec.affinity.clone().unwrap_or_default();
        let node_affinity = affinity.node_affinity.unwrap_or_default();
        let terms = |exprs: &Option<Vec<NodeSelectorRequirement>>| {
            Requirements::from_node_selector_requirements(exprs.as_deref().unwrap_or_default())
        };
        let required_terms: Vec<Requirements> = node_affinity
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flat_map(|ns| ns.node_selector_terms.iter())
            .map(|t| terms(&t.match_expressions))
            .collect();
        let mut preferred_terms: Vec<(i32, Requirements)> = node_affinity
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .map(|t| (t.weight, terms(&t.preference.match_expressions)))
            .collect();
        preferred_terms.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
        let pod_affinity = affinity.pod_affinity.unwrap_or_default();
        let pod_anti_affinity = affinity.pod_anti_affinity.unwrap_or_default();
        let weighted = |v: Option<Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>| {
            let mut out: Vec<(i32, PodAffinityTerm)> = v.unwrap_or_default().into_iter().map(|w| (w.weight, w.pod_affinity_term)).collect();
            out.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
            out
        };
        let node_filter = if required_terms.is_empty() {
            if node_selector.is_empty() {
                Vec::new()
            } else {
                vec![node_selector.clone()]
            }
        } else {
            required_terms
                .iter()
                .map(|t| {
                    let mut r = node_selector.clone();
                    r.add_all(t);
                    r
                })
                .collect()
        };
        let mut state = PodState {
            key: PodKey::of(pod),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            created: pod.metadata.creation_timestamp.clone(),
            requests: pod_requests(pod),
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            node_selector,
            required_terms,
            preferred_terms,
            spread: spec.topology_spread_constraints.clone().unwrap_or_default(),
            affinity: pod_affinity.required_during_scheduling_ignored_during_execution.unwrap_or_default(),
            preferred_affinity: weighted(pod_affinity.preferred_during_scheduling_ignored_during_execution),
            anti_affinity: pod_anti_affinity
                .required_during_scheduling_ignored_during_execution
                .unwrap_or_default(),
            preferred_anti_affinity: weighted(pod_anti_affinity.preferred_during_scheduling_ignored_during_execution),
            host_ports: host_ports(pod),
            node_filter,
            requirements: Requirements::new(),
        };
        state.refresh_requirements();
        state
    }

    /// Recomputes `requirements` after a relaxation.
    pub fn refresh_requirements(&mut self) {
        let mut r = self.node_selector.clone();
        if let Some((_, preferred)) = self.preferred_terms.first() {
            r.add_all(preferred);
        }
        if let Some(required) = self.required_terms.first() {
            r.add_all(required);
        }
        self.requirements = r;
    }
}

/// Requirements a DaemonSet pod needs from a node: its node selector and, when it has required
/// node-affinity terms, any one of them (`matchFields`, which the DaemonSet controller uses to
/// pin pods to their node, is ignored).
pub(crate) fn daemon_requirement_alternatives(pod: &Pod) -> Vec<Requirements> {
    let state = PodState::new(pod);
    if state.required_terms.is_empty() {
        return vec![state.node_selector];
    }
    state
        .required_terms
        .iter()
        .map(|t| {
            let mut r = state.node_selector.clone();
            r.add_all(t);
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::pod;

    #[test]
    fn ignores_pods_karpenter_would_not_provision_for() {
        let cases = [
            (pod("ok").required_term(&[("team", "In", &["a"])]), None),
            (pod("by-name").required_term(&[(PROVISIONER_NAME_LABEL, "In", &["service"])]), None),
            (
                pod("karpenter").required_term(&[(PROVISIONER_NAME_LABEL, "DoesNotExist", &[])]),
                Some("karpenter.sh/provisioner-name DoesNotExist"),
            ),
            (
                pod("hostname").required_term(&[("kubernetes.io/hostname", "In", &["n1"])]),
                Some("matchExpressions[0].key: invalid value \"kubernetes.io/hostname\""),
            ),
            (pod("bad-op").preferred_term(10, &[("team", "Within", &["a"])]), Some("operator")),
            (pod("selector").node_selector("kubernetes.io/hostname", "n1"), None),
        ];
        for (p, want) in cases {
            let got = validate_pod(&p.build());
            match want {
                None => assert_eq!(got, Ok(())),
                Some(part) => assert!(got.as_ref().is_err_and(|e| e.contains(part)), "want {part:?} in {got:?}"),
            }
        }
    }

    #[test]
    fn pod_requirements_combine_selector_heaviest_preference_and_first_term() {
        let p = pod("p")
            .node_selector("nodeType", "service-2023")
            .required_term(&[("team", "In", &["a"])])
            .required_term(&[("team", "In", &["b"])])
            .preferred_term(1, &[("disk", "In", &["hdd"])])
            .preferred_term(50, &[("disk", "In", &["ssd"])])
            .build();
        let s = PodState::new(&p);
        assert_eq!(s.requirements.to_string(), "disk In [ssd], nodeType In [service-2023], team In [a]");
        assert_eq!(s.node_filter.len(), 2);
    }

    #[test]
    fn host_ports_conflict_on_the_same_port_and_address() {
        let a = HostPort {
            protocol: "TCP".into(),
            ip: "0.0.0.0".into(),
            port: 80,
        };
        let b = HostPort {
            ip: "10.0.0.1".into(),
            ..a.clone()
        };
        let c = HostPort {
            protocol: "UDP".into(),
            ..a.clone()
        };
        assert!(a.conflicts(&b));
        assert!(!a.conflicts(&c));
        assert_eq!(host_ports(&pod("p").host_port(80).build()), vec![a]);
    }
}

#[cfg(test)]
pub(crate) mod predicate_tests {
    use serde_json::json;

    use super::*;

    /// A pod from its JSON.
    pub(crate) fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    /// A pod status the scheduler marked unschedulable.
    pub(crate) fn unschedulable() -> serde_json::Value {
        json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
    }

    #[test]
    fn considers_pods_the_scheduler_marked_unschedulable() {
        assert!(is_provisionable(&pod(
            json!({"metadata": {"name": "a"}, "spec": {"containers": []}, "status": unschedulable()})
        )));
    }

    #[test]
    fn leaves_other_pods_alone() {
        let cases = [
            json!({"metadata": {"name": "fresh"}, "spec": {"containers": []}}),
            json!({"metadata": {"name": "bound"}, "spec": {"containers": [], "nodeName": "n"}, "status": unschedulable()}),
            json!({"metadata": {"name": "nominated"}, "spec": {"containers": []}, "status": {"nominatedNodeName": "n", "conditions": unschedulable()["conditions"]}}),
            json!({"metadata": {"name": "ds", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}, "spec": {"containers": []}, "status": unschedulable()}),
            json!({"metadata": {"name": "mirror", "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]}, "spec": {"containers": []}, "status": unschedulable()}),
            json!({"metadata": {"name": "deleting", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": []}, "status": unschedulable()}),
            json!({"metadata": {"name": "other"}, "spec": {"containers": []}, "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]}}),
        ];
        for case in cases {
            assert!(!is_provisionable(&pod(case.clone())), "{case}");
        }
    }

    #[test]
    fn a_drain_displaces_running_workload_pods_only() {
        let running = json!({"phase": "Running"});
        assert!(is_displaced_by_drain(&pod(
            json!({"metadata": {"name": "web"}, "spec": {"containers": [], "nodeName": "n"}, "status": running})
        )));
        let staying = [
            json!({"metadata": {"name": "ds", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}, "spec": {"containers": []}, "status": running}),
            json!({"metadata": {"name": "mirror", "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]}, "spec": {"containers": []}, "status": running}),
            json!({"metadata": {"name": "done"}, "spec": {"containers": []}, "status": {"phase": "Succeeded"}}),
            json!({"metadata": {"name": "failed"}, "spec": {"containers": []}, "status": {"phase": "Failed"}}),
            json!({"metadata": {"name": "leaving", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": []}, "status": running}),
        ];
        for case in staying {
            assert!(!is_displaced_by_drain(&pod(case.clone())), "{case}");
        }
    }
}
