//! Candidacy: which nodes consolidation may remove, and every reason one is not a candidate
//! (`core@v0.27.0:pkg/controllers/deprovisioning/helpers.go` `candidateNodes`, consolidation's
//! `ShouldDeprovision`), in the words of the node's `Unconsolidatable` event; with what removing a
//! candidate would disrupt (its pods' deletion cost and the lifetime it has left). Pure.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::{Candidate, CONSOLIDATION_TTL};
use crate::apis::keys::POD_DELETION_COST_ANNOTATION;
use crate::apis::v1alpha5::labels::{
    opted_out, CAPACITY_TYPE_LABEL, DO_NOT_CONSOLIDATE_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL,
    ZONE_LABEL,
};
use crate::apis::v1alpha5::Provisioner;
use crate::controllers::deprovisioning::decide::{blocking_pdb, do_not_evict, occupies};
use crate::controllers::deprovisioning::VOLUNTARY_DISRUPTION_ANNOTATION;
use crate::scheduling::nodes::is_labelled_initialized;
use crate::scheduling::InstanceType;

/// Why a node is not a candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// Not for consolidation at all (not ours, being deleted or replaced, its Provisioner does
    /// not consolidate, no price known): no event.
    Skip(String),
    /// Blocked by something the user can see and change: an `Unconsolidatable` event on the node
    /// says why (Karpenter's reason strings).
    Blocked(String),
}

/// What blocks a node, as the `reason` of `karpenter_rs_nodes_consolidation_blocked`: one of the
/// blockers `candidate` reports.
pub fn blocker_kind(why: &str) -> &'static str {
    if why.ends_with("annotation exists") {
        "opted_out"
    } else if why.starts_with("pdb ") {
        "pdb"
    } else if why.contains("do not evict") {
        "do_not_evict_pod"
    } else if why.contains("nominated") {
        "nominated"
    } else if why.contains("not initialized") {
        "not_initialized"
    } else {
        "other"
    }
}

/// One node as candidate selection sees it.
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    /// The Node.
    pub node: &'a Node,
    /// Every pod bound to it.
    pub pods: &'a [Arc<Pod>],
    /// Its Provisioner, if it still exists.
    pub provisioner: Option<&'a Provisioner>,
    /// Its instance type as its Provisioner's nodes get it (capacity, offerings and prices), if
    /// the catalogue has it.
    pub instance_type: Option<&'a InstanceType>,
    /// Whether a provisioning pass expects pods to land on it soon.
    pub nominated: bool,
    /// Resuming a command of ours that marked the node (`karpenter.sh/voluntary-disruption`)
    /// and did not finish: the mark does not disqualify it.
    pub resuming: bool,
}

/// Whether `provisioner` has `consolidation.enabled: true`.
pub fn consolidates(provisioner: &Provisioner) -> bool {
    provisioner.spec.consolidation.as_ref().and_then(|c| c.enabled) == Some(true)
}

/// Whether the node is a candidate (Karpenter's `candidateNodes` and consolidation's
/// `ShouldDeprovision`), with its pods as they would be placed again (`prepare` unbinds them and
/// adds their volumes' constraints).
pub fn candidate(
    view: NodeView<'_>,
    pdbs: &[PodDisruptionBudget],
    prepare: &dyn Fn(&Pod) -> Pod,
    now: Timestamp,
) -> Result<Candidate, Ineligible> {
    if let Some(first) = ineligible(view, pdbs, now, false).into_iter().next() {
        return Err(first);
    }
    let node = view.node;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let (Some(provisioner), Some(instance_type), Some(zone), Some(capacity_type), Some(price)) = (
        view.provisioner,
        labels.get(INSTANCE_TYPE_LABEL),
        labels.get(ZONE_LABEL),
        labels.get(CAPACITY_TYPE_LABEL),
        price(view),
    ) else {
        // `ineligible` has named each of these missing; kept total rather than trusted.
        return Err(Ineligible::Skip("missing its provisioner, labels or price".to_string()));
    };
    let pods: Vec<Pod> = view
        .pods
        .iter()
        .filter(|p| crate::scheduling::pods::is_displaced_by_drain(p))
        .map(|p| prepare(p))
        .collect();
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let lifetime = lifetime_remaining(created, provisioner.spec.ttl_seconds_until_expired, now);
    Ok(Candidate {
        name: node.metadata.name.clone().unwrap_or_default(),
        provisioner: labels.get(PROVISIONER_NAME_LABEL).cloned().unwrap_or_default(),
        instance_type: instance_type.clone(),
        zone: zone.clone(),
        capacity_type: capacity_type.clone(),
        price,
        disruption_cost: disruption_cost(&pods) * lifetime,
        pods,
    })
}

/// The node's price per hour: its instance type's offering in its zone and capacity type.
pub fn price(view: NodeView<'_>) -> Option<f64> {
    let labels = view.node.metadata.labels.as_ref()?;
    let (instance_type, zone, capacity_type) = (
        labels.get(INSTANCE_TYPE_LABEL)?,
        labels.get(ZONE_LABEL)?,
        labels.get(CAPACITY_TYPE_LABEL)?,
    );
    view.instance_type
        .filter(|it| it.name == *instance_type)
        .and_then(|it| it.offerings.iter().find(|o| o.zone == *zone && o.capacity_type == *capacity_type))
        .map(|o| o.price)
}

/// Why the node is not a candidate, in the order `candidate` checks: only the first unless
/// `every` (what `explain` shows: every blocker at once). A check that needs what an earlier one
/// found missing (the Provisioner, the labels) is not reached.
pub fn ineligible(view: NodeView<'_>, pdbs: &[PodDisruptionBudget], now: Timestamp, every: bool) -> Vec<Ineligible> {
    let node = view.node;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let mut found = Vec::new();
    let skip = |why: &str| Ineligible::Skip(why.to_string());
    // Each check in turn; `found!` records one and, unless `every`, ends the list there.
    macro_rules! found {
        ($why:expr) => {{
            found.push($why);
            if !every {
                return found;
            }
        }};
    }
    if !labels.contains_key(PROVISIONER_NAME_LABEL) {
        found.push(skip("not launched by a Provisioner"));
        return found;
    }
    if node.metadata.deletion_timestamp.is_some() {
        found!(skip("being deleted"));
    }
    if annotations.contains_key(VOLUNTARY_DISRUPTION_ANNOTATION) && !view.resuming {
        found!(skip("being replaced"));
    }
    let Some(provisioner) = view.provisioner else {
        found.push(skip("its provisioner is unknown"));
        return found;
    };
    if !consolidates(provisioner) {
        // Karpenter publishes "provisioner X has consolidation disabled" on every node of every
        // such Provisioner each pass; that is noise for the users who chose emptiness TTLs.
        found!(skip("its provisioner does not consolidate"));
    }
    if let Some(key) = opted_out(Some(&annotations), &[DO_NOT_CONSOLIDATE_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION]) {
        found!(Ineligible::Blocked(format!("{key} annotation exists")));
    }
    if !is_labelled_initialized(node) {
        found!(Ineligible::Blocked("node is not initialized".to_string()));
    }
    if view.nominated {
        found!(Ineligible::Blocked("node is nominated for a pending pod".to_string()));
    }
    let live: Vec<&Pod> = view.pods.iter().map(|p| p.as_ref()).filter(|p| occupies(p)).collect();
    if live.iter().any(|p| scheduled_at(p).is_some_and(|at| now < at + ttl())) {
        found!(skip("received a pod in the last 15s"));
    }
    if !(labels.contains_key(INSTANCE_TYPE_LABEL) && labels.contains_key(ZONE_LABEL) && labels.contains_key(CAPACITY_TYPE_LABEL)) {
        found!(skip("missing its instance type, zone or capacity type label"));
    } else if price(view).is_none() {
        found!(skip("its instance type or offering is not in the catalogue"));
    }
    if let Some(pod) = do_not_evict(view.pods) {
        found!(Ineligible::Blocked(format!(
            "pod {}/{} has do not evict annotation",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        )));
    }
    if let Some((pdb, _)) = blocking_pdb(view.pods, pdbs) {
        found!(Ineligible::Blocked(format!("pdb {pdb} prevents pod evictions")));
    }
    found
}

fn ttl() -> SignedDuration {
    SignedDuration::try_from(CONSOLIDATION_TTL).unwrap_or_default()
}

/// When the pod was bound: its `PodScheduled=True` transition, else its start time.
fn scheduled_at(pod: &Pod) -> Option<Timestamp> {
    let status = pod.status.as_ref()?;
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .or(status.start_time.as_ref())
        .map(|t| t.0)
}

/// Σ over the pods of `clamp(-10, 1 + deletion cost / 2^27 + priority / 2^25, 10)`
/// (`controller.kubernetes.io/pod-deletion-cost`, `spec.priority`; Karpenter's `disruptionCost`).
pub fn disruption_cost(pods: &[Pod]) -> f64 {
    pods.iter()
        .map(|p| {
            let deletion_cost = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            let priority = p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0) as f64;
            (1.0 + deletion_cost / 2f64.powi(27) + priority / 2f64.powi(25)).clamp(-10.0, 10.0)
        })
        .sum()
}

/// `clamp(0, (ttl − age) / ttl, 1)`, 1 without a TTL: a node about to expire costs little to
/// disrupt now (Karpenter's `calculateLifetimeRemaining`).
pub fn lifetime_remaining(created: Option<Timestamp>, ttl_seconds_until_expired: Option<i64>, now: Timestamp) -> f64 {
    let (Some(created), Some(ttl)) = (created, ttl_seconds_until_expired.filter(|t| *t > 0)) else {
        return 1.0;
    };
    let age = now.duration_since(created).as_secs_f64();
    ((ttl as f64 - age) / ttl as f64).clamp(0.0, 1.0)
}

/// Candidates cheapest to disrupt first (ties by name, so a pass is reproducible).
pub fn sort_candidates(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| a.disruption_cost.total_cmp(&b.disruption_cost).then_with(|| a.name.cmp(&b.name)));
}
