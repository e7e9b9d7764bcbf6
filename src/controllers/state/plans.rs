//! The pods a provisioning pass planned onto each node it launched, kept until the binder has
//! bound them once their node is ready, or until `PLAN_TTL` has passed (karpenter-rs only:
//! Karpenter leaves every pod to kube-scheduler). Provisioning records a plan with each launch;
//! the binder reads them and forgets each one it is done with. Part of the shared view, beside
//! the nominations, so neither controller holds the other's state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Taint;

use crate::scheduling::PodKey;

/// A plan is forgotten this long after it was recorded, bound or not.
pub const PLAN_TTL: Duration = Duration::from_secs(15 * 60);

/// The pods planned onto one launched node, and what the node must show before they are bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The pods, in the order the simulation placed them.
    pub pods: Vec<PodKey>,
    /// The node's Provisioner's startup taints: the node is not ready for pods while one is left.
    pub startup_taints: Vec<Taint>,
    /// What the pods request together (every resource the node must advertise).
    pub requested: BTreeMap<String, f64>,
    /// When the plan was recorded.
    pub since: Instant,
}

impl Plan {
    /// Whether the plan is older than `PLAN_TTL` at `now`.
    pub fn lapsed(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) > PLAN_TTL
    }
}

/// Node name → the plan of pods for it. Held only for a copy or an update, never across an
/// await, so launches recording plans never wait on the binder's API calls.
#[derive(Default)]
pub struct Plans(Mutex<HashMap<String, Plan>>);

impl Plans {
    /// Records `plan` for `node`, in place of any earlier one.
    pub fn record(&self, node: String, plan: Plan) {
        self.lock().insert(node, plan);
    }

    /// Forgets the plans lapsed at `now`; of the others, what `ready` makes of each plan it
    /// accepts (the plan's node, when it is ready for its pods), with the plan's pods. Only the
    /// accepted plans' pods are copied, under the lock and without an await.
    pub fn due<T>(&self, now: Instant, mut ready: impl FnMut(&str, &Plan) -> Option<T>) -> Vec<(T, Vec<PodKey>)> {
        let mut plans = self.lock();
        plans.retain(|_, plan| !plan.lapsed(now));
        plans
            .iter()
            .filter_map(|(node, plan)| Some((ready(node, plan)?, plan.pods.clone())))
            .collect()
    }

    /// The nodes with a plan, in no order.
    #[cfg(test)]
    pub fn nodes(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Forgets the plans of `nodes`.
    pub fn forget(&self, nodes: impl IntoIterator<Item = String>) {
        let mut plans = self.lock();
        for node in nodes {
            plans.remove(&node);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Plan>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(pod: &str, since: Instant) -> Plan {
        Plan {
            pods: vec![PodKey {
                namespace: "default".into(),
                name: pod.into(),
            }],
            startup_taints: Vec::new(),
            requested: BTreeMap::new(),
            since,
        }
    }

    /// A plan recorded again replaces the earlier one; a forgotten one is gone and the others
    /// stay; a plan lapses only after `PLAN_TTL`, and `due` forgets it then; `due` gives only
    /// the plans it is told are ready, with their pods.
    #[test]
    fn plans_are_recorded_replaced_forgotten_and_lapse_after_their_ttl() {
        let now = Instant::now();
        let plans = Plans::default();
        plans.record("a".into(), plan("p1", now));
        plans.record("a".into(), plan("p2", now));
        plans.record("b".into(), plan("p3", now));
        let mut nodes = plans.nodes();
        nodes.sort();
        assert_eq!(nodes, ["a", "b"]);
        let due = plans.due(now, |node, _| (node == "a").then(|| node.to_string()));
        assert_eq!(
            due,
            [("a".to_string(), plan("p2", now).pods)],
            "the plan recorded last, and only the ready one"
        );
        plans.forget(["a".to_string()]);
        assert_eq!(plans.nodes(), ["b"]);
        assert_eq!(plans.due(now + PLAN_TTL, |_, _| Some(())).len(), 1, "not lapsed at its TTL");
        assert_eq!(plans.nodes(), ["b"]);
        assert!(plans.due(now + PLAN_TTL + Duration::from_secs(1), |_, _| Some(())).is_empty());
        assert!(plans.nodes().is_empty(), "a lapsed plan is forgotten");
    }
}
