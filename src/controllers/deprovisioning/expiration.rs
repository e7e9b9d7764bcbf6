//! Expiration, the first method of a pass (`ttlSecondsUntilExpired`,
//! `core@v0.27.0:pkg/controllers/deprovisioning/expiration.go`): replaces at most one node older
//! than its Provisioner's `ttlSecondsUntilExpired`, the one that expired first, unless a
//! do-not-evict pod or a PodDisruptionBudget allowing no disruption blocks it. The rules are in
//! `decide.rs` (`decide::expiration`); the replacement is `replace` in `mod.rs`, shared with drift.
//!
//! An expired node is cordoned and marked `karpenter.sh/voluntary-disruption=expired`; the
//! provisioning controller launches room for its pods (`provisioning::Context::replace`); once the
//! replacements are Ready the node is deleted, and the termination controller drains it (the
//! Eviction API honours PodDisruptionBudgets) and terminates its instance. Every step is stored
//! on the Node, so a restart at any point carries on: a marked node still expired is picked
//! again (its replacements now exist, so nothing more launches); one no longer expired is
//! uncordoned.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;

use super::decide::{self, Candidate};
use super::{
    cordon, drift_marks, is_marked_for_replacement, publish_blocked, replace, Context, DeprovisioningError, Disruption,
    VOLUNTARY_DISRUPTION_ANNOTATION,
};
use crate::apis::v1alpha5::Provisioner;
use crate::metrics;

/// The `karpenter.sh/voluntary-disruption` value of an expired node being replaced.
pub(super) const EXPIRED: &str = "expired";

/// Replaces at most one expired node of `candidates` (none while the pass is `waiting` for a
/// deletion of its own), and puts back into service the nodes an earlier pass marked for
/// replacement that are not replaced now. True when a node was replaced: the pass ends there.
pub(super) async fn replace_expired<'p>(
    ctx: &Context,
    nodes: &[Arc<Node>],
    candidates: &[Candidate<'_>],
    pdbs: &[PodDisruptionBudget],
    provisioner_of: impl Fn(&Node) -> Option<&'p Arc<Provisioner>>,
    waiting: bool,
    now: Timestamp,
) -> Result<bool, DeprovisioningError> {
    let expiration = if waiting {
        decide::Expiration::default()
    } else {
        decide::expiration(candidates, pdbs, now)
    };
    publish_blocked(ctx, nodes, &expiration.blocked, "expired").await;
    // A node marked for replacement by an earlier pass that is not being replaced now (it is no
    // longer expired, or is blocked) goes back into service. (Nodes a consolidation command
    // marked are resumed or released by consolidation, `consolidation::resume`.)
    for node in nodes
        .iter()
        .filter(|n| is_marked_for_replacement(n) && n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            let method = n.annotations().get(VOLUNTARY_DISRUPTION_ANNOTATION).map(String::as_str);
            method != Some(metrics::reason::CONSOLIDATION) && method != Some(drift_marks::DRIFTED)
        })
    {
        if expiration.expire.as_deref() != Some(node.name_any().as_str()) {
            cordon(ctx, node, None).await?;
        }
    }
    if let Some(name) = &expiration.expire {
        let node = nodes
            .iter()
            .find(|n| n.name_any() == *name)
            .expect("the expired node comes from this list");
        let ttl = provisioner_of(node)
            .and_then(|p| p.spec.ttl_seconds_until_expired)
            .unwrap_or_default();
        replace(ctx, &ctx.state, node, Disruption::Expired { ttl }).await?;
        return Ok(true);
    }
    Ok(false)
}
