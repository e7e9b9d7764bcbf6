//! The binder: every 500 ms, the pods planned onto a node are bound once the node is ready for
//! them and `rules::bindable` admits them; everything else is left to kube-scheduler. Plans are
//! copied out under the lock and the lock is released before any API call, so launches recording
//! new plans never wait on the binder.

pub mod rules;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use futures::StreamExt;

use super::{Context, Stores};
use crate::controllers::supervisor::deadline;
use crate::scheduling::PodKey;

/// How often the binder looks for planned pods whose node is ready.
const TICK: Duration = Duration::from_millis(500);
/// A plan of pods to bind is forgotten this long after it was recorded, bound or not.
const PLAN_TTL: Duration = Duration::from_secs(15 * 60);
/// Ready nodes whose planned pods are bound at the same time.
const NODES_AT_ONCE: usize = 8;
/// Bindings in flight at once for one node (the client's rate limit bounds them all).
const BINDINGS_AT_ONCE: usize = 16;

/// Binds planned pods to their node once it is ready; forgets plans older than 15 minutes.
/// The plans are copied out under the lock and the lock released before any API call, so
/// launches recording new plans never wait on the binder.
pub(super) async fn bind_loop(ctx: Arc<Context>, stores: Stores, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(TICK);
    ctx.metrics.liveness.register("binder", deadline::BINDER);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        ctx.metrics.liveness.beat("binder", TICK);
        crate::failpoint::stall_point("binder").await;
        let mut done = Vec::new();
        let ready: Vec<(Arc<Node>, Vec<PodKey>)> = {
            let planned = ctx.planned.lock().await;
            let now = ctx.clock.instant();
            planned
                .iter()
                .filter_map(|(node_name, plan)| {
                    if now.saturating_duration_since(plan.since) > PLAN_TTL {
                        done.push(node_name.clone());
                        return None;
                    }
                    let node = stores.nodes.get(&reflector::ObjectRef::new(node_name))?;
                    rules::is_ready_for_pods(&node, &plan.startup_taints, &plan.requested).then(|| (node, plan.pods.clone()))
                })
                .collect()
        };
        if ctx.config.bind_pods {
            let binds: Vec<_> = ready.iter().map(|(node, pods)| bind_planned(&ctx, &stores, node, pods)).collect();
            futures::stream::iter(binds)
                .buffer_unordered(NODES_AT_ONCE)
                .collect::<Vec<()>>()
                .await;
        }
        done.extend(ready.iter().map(|(node, _)| node.name_any()));
        if !done.is_empty() {
            let mut planned = ctx.planned.lock().await;
            for n in done {
                planned.remove(&n);
            }
        }
    }
}

/// Binds the still-unbound pods planned for `node` that `rules::bindable` admits.
async fn bind_planned(ctx: &Context, stores: &Stores, node: &Node, keys: &[PodKey]) {
    let node_name = node.name_any();
    let unbound: Vec<Arc<Pod>> = keys
        .iter()
        .filter_map(|key| stores.pods.get(&reflector::ObjectRef::new(&key.name).within(&key.namespace)))
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty) && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if unbound.is_empty() {
        return;
    }
    // What is on the node now, read from the API server rather than the cache: the scheduler
    // binds to a node the moment it is ready.
    let on_node = match crate::controllers::node_ops::pods_on(&ctx.client, &node_name).await {
        Ok(pods) => pods,
        Err(e) => {
            warn!(node = %node_name, error = %e, "listing the pods on a ready node before binding; the scheduler will place them");
            return;
        }
    };
    let claims = &stores.claims;
    let claim_bound = |namespace: &str, name: &str| {
        claims
            .get(&reflector::ObjectRef::new(name).within(namespace))
            .is_some_and(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
    };
    let planned: Vec<&Pod> = unbound.iter().map(|p| p.as_ref()).collect();
    // Every other pod in the cache: the scheduler may bind the pending ones to this node while
    // we bind, so `bindable` keeps their room from the planned pods.
    let all_pods = stores.pods.state();
    let planned_keys: HashSet<&PodKey> = keys.iter().collect();
    let others: Vec<&Pod> = all_pods
        .iter()
        .filter(|p| !planned_keys.contains(&PodKey::of(p)))
        .map(|p| p.as_ref())
        .collect();
    let (fitting, left) = rules::bindable(node, &on_node, &others, &planned, &claim_bound);
    let mut seats_taken = 0;
    for (pod, why) in left {
        debug!(pod = %PodKey::of(pod), node = %node_name, reason = %why, "not binding; the scheduler will place the pod");
        // The scheduler gave its room to other pending pods: nothing is wrong with the node or
        // the pod, so it need not wait out the grace for its node before a pass places it anew.
        if why == rules::LeftToScheduler::NoRoom {
            if let Some(uid) = pod.metadata.uid.as_deref() {
                ctx.backoff.lock().unwrap_or_else(|e| e.into_inner()).seat_taken(uid);
                seats_taken += 1;
            }
        }
    }
    if seats_taken > 0 {
        ctx.batcher.trigger();
    }
    let node_name = &node_name;
    let binds: Vec<_> = fitting
        .into_iter()
        .map(|pod| async move {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
            match rules::bind(&api, &pod.name_any(), node_name).await {
                Ok(outcome) => {
                    ctx.metrics.pods_bound.with_label_values(&[bind_label(&outcome)]).inc();
                    if outcome == rules::BindOutcome::Bound {
                        info!(pod = %PodKey::of(pod), node = %node_name, "bound pod");
                    }
                }
                Err(e) => warn!(pod = %PodKey::of(pod), node = %node_name, error = %e, "binding pod; the scheduler will place it"),
            }
        })
        .collect();
    futures::stream::iter(binds)
        .buffer_unordered(BINDINGS_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

fn bind_label(outcome: &rules::BindOutcome) -> &'static str {
    match outcome {
        rules::BindOutcome::Bound => "bound",
        rules::BindOutcome::AlreadyBound => "already_bound",
        rules::BindOutcome::Gone => "gone",
    }
}
