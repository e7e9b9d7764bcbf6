//! Emptiness, the third method of a pass (`ttlSecondsAfterEmpty`,
//! `core@v0.27.0:pkg/controllers/node/emptiness.go`,
//! `core@v0.27.0:pkg/controllers/deprovisioning/emptiness.go`): a node of ours with no pods but
//! DaemonSet, mirror and terminal ones gets the emptiness timestamp, loses it when pods arrive,
//! and is deleted once empty for its Provisioner's `ttlSecondsAfterEmpty`, after its pods are
//! checked with the API server. The rules are in `decide.rs` (`decide::emptiness`); an empty node
//! is simply deleted, no replacement needed.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::events::EventType;
use kube::ResourceExt;
use tracing::{debug, info};

use super::decide::{self, Emptiness};
use super::{delete_node, Context, DeprovisioningError};
use crate::apis::v1alpha5::labels::EMPTINESS_TIMESTAMP_ANNOTATION;
use crate::apis::v1alpha5::Provisioner;
use crate::controllers::events::publish;
use crate::controllers::node_ops::{self, Written};
use crate::controllers::state::StateNode;
use crate::metrics;

/// Marks, unmarks and deletes (after checking with the API server) every node of `nodes` by its
/// emptiness; marks and deletes nothing while the pass is `waiting` for a deletion of its own.
/// True when a node was deleted. Every node is handled even when one fails; the first error is
/// returned.
pub(super) async fn remove_empty<'p>(
    ctx: &Context,
    nodes: &[StateNode],
    provisioner_of: impl Fn(&Node) -> Option<&'p Arc<Provisioner>>,
    waiting: bool,
    now: Timestamp,
) -> Result<bool, DeprovisioningError> {
    let nomination = jiff::SignedDuration::try_from(ctx.config.nomination).unwrap_or_default();
    let mut errors = Vec::new();
    let mut deleted = false;
    for StateNode { node, pods, .. } in nodes {
        let node: &Node = node;
        let ttl = provisioner_of(node).and_then(|p| p.spec.ttl_seconds_after_empty);
        let result = match decide::emptiness(node, pods, ttl, nomination, now) {
            Emptiness::Ignore | Emptiness::Occupied | Emptiness::Wait { .. } => Ok(()),
            Emptiness::Mark | Emptiness::Delete if waiting => {
                debug!(node = %node.name_any(), "emptiness waits: a node is draining");
                Ok(())
            }
            Emptiness::Mark => mark(ctx, node, Some(decide::emptiness_timestamp(now)), ttl.unwrap_or_default()).await,
            Emptiness::Unmark => mark(ctx, node, None, ttl.unwrap_or_default()).await,
            Emptiness::Delete => delete_empty(ctx, node, ttl, nomination).await.map(|d| deleted |= d),
        };
        if let Err(e) = result {
            errors.push(e);
        }
    }
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    Ok(deleted)
}

/// Sets (`Some`) or removes (`None`) the emptiness timestamp.
async fn mark(ctx: &Context, node: &Node, timestamp: Option<String>, ttl: i64) -> Result<(), DeprovisioningError> {
    let name = node.name_any();
    match node_ops::annotate(&ctx.client, node, &[(EMPTINESS_TIMESTAMP_ANNOTATION, timestamp.as_deref())]).await {
        Ok(Written::Written) => {}
        Ok(Written::Gone) => return Ok(()),
        Err(source) => return Err(DeprovisioningError::Annotate { node: name, source }),
    }
    if timestamp.is_some() {
        info!(node = %name, ttl_seconds_after_empty = ttl, "added TTL to empty node");
        let note = format!("Node is empty; deleting it after ttlSecondsAfterEmpty={ttl}s unless pods arrive");
        publish(&ctx.recorder, node, EventType::Normal, "Emptied", "Deprovisioning", &note).await;
    } else {
        info!(node = %name, "removed emptiness TTL from node");
    }
    Ok(())
}

/// Deletes a node the stores say has been empty for its TTL, after checking its pods with the API
/// server (the store may not have seen a pod bound a moment ago).
async fn delete_empty(ctx: &Context, node: &Node, ttl: Option<i64>, nomination: jiff::SignedDuration) -> Result<bool, DeprovisioningError> {
    let name = node.name_any();
    let fresh = node_ops::pods_on(&ctx.client, &name)
        .await
        .map_err(|source| DeprovisioningError::ListPods {
            node: name.clone(),
            source,
        })?;
    let fresh: Vec<Arc<Pod>> = fresh.into_iter().map(Arc::new).collect();
    if decide::emptiness(node, &fresh, ttl, nomination, ctx.clock.now()) != Emptiness::Delete {
        debug!(node = %name, "node is no longer empty; keeping it");
        return Ok(false);
    }
    let note = format!("Node was empty for ttlSecondsAfterEmpty={}s; deleting it", ttl.unwrap_or_default());
    publish(&ctx.recorder, node, EventType::Normal, "Deleted", "Deprovisioning", &note).await;
    delete_node(ctx, node, metrics::reason::EMPTINESS, "delete").await.map(|()| true)
}
