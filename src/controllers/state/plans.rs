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

    /// A copy of every plan, by node name.
    pub fn all(&self) -> Vec<(String, Plan)> {
        self.lock().iter().map(|(node, plan)| (node.clone(), plan.clone())).collect()
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

    /// A plan recorded again replaces the earlier one; a forgotten one is gone and the others stay;
    /// a plan lapses only after `PLAN_TTL`.
    #[test]
    fn plans_are_recorded_replaced_forgotten_and_lapse_after_their_ttl() {
        let now = Instant::now();
        let plans = Plans::default();
        plans.record("a".into(), plan("p1", now));
        plans.record("a".into(), plan("p2", now));
        plans.record("b".into(), plan("p3", now));
        let mut all = plans.all();
        all.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].1.pods[0].name, "p2");
        plans.forget(["a".to_string()]);
        assert_eq!(plans.all().into_iter().map(|(n, _)| n).collect::<Vec<_>>(), ["b"]);
        let recorded = plans.all()[0].1.clone();
        assert!(!recorded.lapsed(now + PLAN_TTL));
        assert!(recorded.lapsed(now + PLAN_TTL + Duration::from_secs(1)));
    }
}
