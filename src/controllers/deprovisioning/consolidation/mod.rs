//! Consolidation, the last method of a pass. This file is its I/O
//! (`core@v0.27.0:pkg/controllers/deprovisioning/consolidation.go`, `controller.go`
//! `executeCommand`): snapshot the cluster, choose a command with the pure search in `decide.rs`
//! (its unit tests in `tests.rs`), wait 15 s and validate it on a fresh snapshot, then execute it:
//! cordon and mark the nodes, launch the replacement through the normal launch path and wait for
//! it to initialise (bounded; on timeout the nodes are uncordoned and the command abandoned), then
//! delete the nodes through the termination finalizer (a drain that honours
//! PodDisruptionBudgets).
//!
//! Every step is stored on the Nodes, so a restart converges: a node marked by a command that
//! did not finish is uncordoned by the next pass (as an expired node no longer being replaced);
//! a replacement launched for it is an ordinary node, which the next evaluation counts as room
//! (the old node's pods now fit on it, so it is deleted without a second launch) or, if it stays
//! empty, removes.

pub mod decide;

// The pure search at the paths it had as `deprovisioning::consolidation` (benches and property
// tests use them).
pub use decide::{
    blocker_kind, candidate, choose, compute, compute_on, consolidates, disruption_cost, empty, lifetime_remaining, multi_node, releasable,
    single_node, sort_candidates, still_valid, worst_launch_price, Action, Candidate, Choice, Command, Evaluation, Ineligible, NodeView, Unconsolidatable,
    CONSOLIDATION_TTL, MULTI_NODE_MAX,
};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use tracing::{debug, info, warn};

use super::{cordon, delete_node, Context, DeprovisioningError};
use crate::cpu;
use crate::controllers::events::publish;
use crate::controllers::provisioning::Snapshot;
use crate::metrics::{self, reason::CONSOLIDATION};
use crate::scheduling::nodes::is_labelled_initialized;
use crate::scheduling::PodKey;
use crate::telemetry;

/// How long a multi-node evaluation may run before it settles for the best command so far.
const MULTI_NODE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a single-node evaluation may run.
const SINGLE_NODE_TIMEOUT: Duration = Duration::from_secs(3 * 60);
/// After a pass that found nothing, consolidation is evaluated again only once the cluster has
/// changed, or after this long (`core@v0.27.0:pkg/controllers/state/cluster.go` `Consolidated`).
const CONSOLIDATED_FOR: Duration = Duration::from_secs(5 * 60);
/// How often the same `Unconsolidatable` reason is published again on a node.
const EVENT_EVERY: Duration = Duration::from_secs(5 * 60);

/// One consolidation evaluation: empty nodes, then multi-node, then single-node; executes at
/// most one command. True when a command ran.
pub(super) async fn consolidate(ctx: &Context) -> Result<bool, DeprovisioningError> {
    let state = &ctx.state;
    if !state.provisioners.state().iter().any(|p| decide::consolidates(p)) {
        return Ok(false);
    }
    // Read before the snapshot: a change while evaluating clears the short-circuit.
    let generation = state.generation();
    let consolidated = *ctx.consolidated.lock().unwrap_or_else(|e| e.into_inner());
    let now = ctx.clock.instant();
    if consolidated.is_some_and(|(g, at)| g == generation && now.saturating_duration_since(at) < CONSOLIDATED_FOR) {
        return Ok(false);
    }
    let snapshot = snapshot(ctx).await?;
    let candidates = candidates(ctx, &snapshot, true).await;

    let started = Instant::now();
    // The search stops at its timeouts, or when this pass is abandoned (a lost lease).
    let (snapshot, candidates, evaluation) = cpu::run(move |abandoned| {
        let multi_expired = || abandoned.is_set() || started.elapsed() > MULTI_NODE_TIMEOUT;
        let single_expired = || abandoned.is_set() || started.elapsed() > MULTI_NODE_TIMEOUT + SINGLE_NODE_TIMEOUT;
        let evaluation = decide::choose(&snapshot.input, &candidates, &multi_expired, &single_expired);
        (snapshot, candidates, evaluation)
    })
    .await;
    for (timed_out, kind, timeout) in [
        (evaluation.multi_timed_out, "multi-node", MULTI_NODE_TIMEOUT),
        (evaluation.single_timed_out, "single-node", SINGLE_NODE_TIMEOUT),
    ] {
        if timed_out {
            warn!(?timeout, "{kind} consolidation evaluation timed out");
            ctx.metrics.consolidation_timeouts.with_label_values(&[kind]).inc();
        }
    }
    match evaluation.choice {
        // Empty-node consolidation: all at once, after the 15 s re-check.
        Choice::Empty(empty) => {
            tokio::time::sleep(ctx.config.consolidation_ttl).await;
            let fresh = candidates_now(ctx).await?;
            let still: Vec<&Candidate> = fresh.iter().filter(|c| c.pods.is_empty() && empty.contains(&c.name)).collect();
            if still.is_empty() {
                debug!(nodes = ?empty, "empty nodes gained pods or stopped being candidates while waiting; evaluating again");
                return Ok(false);
            }
            let command = Command {
                nodes: still.iter().map(|c| c.name.clone()).collect(),
                action: decide::Action::Delete,
                price_before: still.iter().map(|c| c.price).sum(),
                price_after: 0.0,
                pods: Vec::new(),
            };
            execute(ctx, &command, &[]).await?;
            return Ok(true);
        }
        Choice::Command { command, multi } => {
            debug!(multi, command = %command.describe(), "consolidation chose a command");
            return validate_and_execute(ctx, &command, &snapshot).await;
        }
        Choice::Nothing { refused } => {
            let nodes: HashMap<String, Arc<Node>> = state.nodes.state().into_iter().map(|n| (n.name_any(), n)).collect();
            for (name, why) in &refused {
                if let Some(node) = nodes.get(name) {
                    unconsolidatable(ctx, node, why).await;
                }
            }
        }
    }
    *ctx.consolidated.lock().unwrap_or_else(|e| e.into_inner()) = Some((generation, ctx.clock.instant()));
    debug!(candidates = candidates.len(), "nothing to consolidate");
    Ok(false)
}

/// Nodes a consolidation command marked and did not finish (the process stopped midway): the
/// command is finished as a delete when their pods now fit on the rest of the cluster (its
/// replacement was launched and has initialised), waited for while a node they could move to
/// has not initialised yet (the replacement in flight; bounded by the registration TTL), and
/// otherwise abandoned (the nodes uncordoned, evaluated afresh): also when their Provisioner no
/// longer consolidates; but never while one of them is being deleted: the command is finishing.
/// `Some(acted)` ends the pass; `None` lets it go on. The pass calls this before anything else,
/// so no other command starts while one is unfinished.
pub(super) async fn resume(ctx: &Context) -> Result<Option<bool>, DeprovisioningError> {
    let marked: Vec<Arc<Node>> = super::considered(ctx)
        .into_iter()
        .map(|n| n.node)
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| n.annotations().get(super::VOLUNTARY_DISRUPTION_ANNOTATION).map(String::as_str) == Some(CONSOLIDATION))
        .collect();
    if marked.is_empty() {
        return Ok(None);
    }
    let names: Vec<String> = marked.iter().map(|n| n.name_any()).collect();
    let snapshot = snapshot(ctx).await?;
    let resumed: Vec<Candidate> = candidates_of(ctx, &snapshot, true)
        .await
        .into_iter()
        .filter(|c| names.contains(&c.name))
        .collect();
    if resumed.len() == marked.len() {
        match compute_off_runtime(snapshot, resumed).await {
            Ok(command) if matches!(command.action, decide::Action::Delete) => {
                info!(nodes = ?names, "resuming an unfinished consolidation: the nodes' pods fit on the rest of the cluster");
                terminate(ctx, &marked, "delete").await?;
                return Ok(Some(true));
            }
            Err(why @ decide::Unconsolidatable::UninitializedNode(_)) => {
                debug!(nodes = ?names, reason = %why, "an unfinished consolidation waits for a node to initialise");
                return Ok(Some(false));
            }
            _ => {}
        }
    }
    // `marked` was read before the snapshot: look again, so that a node the command has just
    // deleted (or whose deletion the view has just learnt of) is never uncordoned and unmarked.
    let now: Vec<Option<Arc<Node>>> = names.iter().map(|n| ctx.state.nodes.get(&ObjectRef::new(n))).collect();
    if !decide::releasable(&now.iter().map(Option::as_deref).collect::<Vec<_>>()) {
        info!(nodes = ?names, "an unfinished consolidation is deleting its nodes; waiting for them");
        return Ok(Some(false));
    }
    info!(nodes = ?names, "abandoning an unfinished consolidation; the nodes go back into service");
    for node in &marked {
        cordon(ctx, node, None).await?;
    }
    Ok(None)
}

async fn snapshot(ctx: &Context) -> Result<Snapshot, DeprovisioningError> {
    ctx.provisioning
        .snapshot()
        .await
        .map_err(|e| DeprovisioningError::Snapshot(telemetry::chain(&e)))
}

/// `decide::compute` of removing `candidates` from `snapshot`, on the blocking pool.
async fn compute_off_runtime(snapshot: Snapshot, candidates: Vec<Candidate>) -> Result<Command, decide::Unconsolidatable> {
    cpu::run(move |_| decide::compute(&snapshot.input, &candidates.iter().collect::<Vec<_>>())).await
}

/// The candidates of a fresh snapshot, without events.
async fn candidates_now(ctx: &Context) -> Result<Vec<Candidate>, DeprovisioningError> {
    let snapshot = snapshot(ctx).await?;
    Ok(candidates(ctx, &snapshot, false).await)
}

/// The nodes consolidation may remove, cheapest to disrupt first. With `report`, nodes blocked
/// by something the user controls get an `Unconsolidatable` event saying what.
async fn candidates(ctx: &Context, snapshot: &Snapshot, report: bool) -> Vec<Candidate> {
    let (candidates, blocked) = candidates_and_blocked(ctx, snapshot, false);
    if report {
        let mut kinds = std::collections::BTreeMap::<&str, i64>::new();
        for (_, why) in &blocked {
            *kinds.entry(decide::blocker_kind(why)).or_default() += 1;
        }
        ctx.metrics.consolidation_blocked.reset();
        for (kind, nodes) in kinds {
            ctx.metrics.consolidation_blocked.with_label_values(&[kind]).set(nodes);
        }
        for (node, why) in &blocked {
            unconsolidatable(ctx, node, why).await;
        }
    }
    candidates
}

/// The candidates among the nodes an unfinished command of ours marked.
async fn candidates_of(ctx: &Context, snapshot: &Snapshot, resuming: bool) -> Vec<Candidate> {
    candidates_and_blocked(ctx, snapshot, resuming).0
}

/// Every node's candidacy: the candidates, cheapest to disrupt first, and the blocked nodes with
/// why.
fn candidates_and_blocked(ctx: &Context, snapshot: &Snapshot, resuming: bool) -> (Vec<Candidate>, Vec<(Arc<Node>, String)>) {
    let state = &ctx.state;
    let nodes = super::considered(ctx);
    let provisioners = state.provisioners.state();
    let pdbs: Vec<_> = state.pdbs.state().iter().map(|b| (**b).clone()).collect();
    let prepare = |pod: &Pod| snapshot.prepare(pod);
    let now = ctx.clock.now();
    let mut out = Vec::new();
    let mut blocked = Vec::new();
    for state_node in &nodes {
        let (node, name) = (&state_node.node, state_node.name());
        let provisioner = state_node
            .provisioner()
            .and_then(|p| provisioners.iter().find(|x| x.name_any() == p));
        let view = NodeView {
            node,
            pods: &state_node.pods,
            provisioner: provisioner.map(|p| p.as_ref()),
            instance_type: state_node.instance_type.as_deref(),
            nominated: state_node.nominated,
            resuming,
        };
        match decide::candidate(view, &pdbs, &prepare, now) {
            Ok(c) => out.push(c),
            Err(Ineligible::Skip(why)) => debug!(node = %name, reason = %why, "not a consolidation candidate"),
            Err(Ineligible::Blocked(why)) => blocked.push((node.clone(), why)),
        }
    }
    decide::sort_candidates(&mut out);
    (out, blocked)
}

/// Publishes `Unconsolidatable` on `node`, at most once per reason every few minutes.
async fn unconsolidatable(ctx: &Context, node: &Node, why: &str) {
    debug!(node = %node.name_any(), reason = %why, "node cannot be consolidated");
    let key = (node.name_any(), why.to_string());
    {
        let mut published = ctx.unconsolidatable.lock().unwrap_or_else(|e| e.into_inner());
        let now = ctx.clock.instant();
        published.retain(|_, at| now.duration_since(*at) < EVENT_EVERY);
        if published.contains_key(&key) {
            return;
        }
        published.insert(key, now);
    }
    // The recorder folds events of the same reason and action on an object into one series
    // (keeping the first note), so the action names the blocker: a node that was first nominated
    // and is now opted out shows both.
    let action: String = why.chars().take(128).collect();
    publish(&ctx.recorder, node, EventType::Normal, "Unconsolidatable", &action, why).await;
}

/// Waits `consolidationTTL`, checks the command against a fresh snapshot, and executes it if it
/// still holds (`core@v0.27.0:.../deprovisioning/validation.go`). A command that no longer holds
/// is dropped; the next pass evaluates afresh.
async fn validate_and_execute(ctx: &Context, command: &Command, before: &Snapshot) -> Result<bool, DeprovisioningError> {
    debug!(command = %command.describe(), "validating consolidation after {:?}", ctx.config.consolidation_ttl);
    tokio::time::sleep(ctx.config.consolidation_ttl).await;
    let snapshot = snapshot(ctx).await?;
    let fresh = candidates(ctx, &snapshot, false).await;
    let chosen: Vec<&Candidate> = command.nodes.iter().filter_map(|n| fresh.iter().find(|c| c.name == *n)).collect();
    if chosen.len() < command.nodes.len() {
        info!(nodes = ?command.nodes, "abandoning consolidation: its nodes are no longer all candidates");
        return Ok(false);
    }
    let chosen: Vec<Candidate> = chosen.into_iter().cloned().collect();
    let recomputed = compute_off_runtime(snapshot, chosen).await;
    if !decide::still_valid(command, &recomputed) {
        info!(command = %command.describe(), now = ?recomputed.as_ref().map(Command::describe), "abandoning consolidation: the cluster changed while it waited");
        return Ok(false);
    }
    let pod_names: Vec<String> = before
        .input
        .nodes
        .iter()
        .filter(|n| command.nodes.contains(&n.name))
        .flat_map(|n| n.pods.iter())
        .filter(|p| crate::scheduling::pods::is_displaced_by_drain(p))
        .map(|p| PodKey::of(p).to_string())
        .collect();
    execute(ctx, command, &pod_names).await?;
    Ok(true)
}

/// Executes `command` (Karpenter's `executeCommand`): cordon and mark, launch and await the
/// replacement, delete.
async fn execute(ctx: &Context, command: &Command, pods: &[String]) -> Result<(), DeprovisioningError> {
    let state = &ctx.state;
    let action = command.action_name();
    info!(
        nodes = ?command.nodes,
        pods = ?pods,
        price_before = command.price_before,
        price_after = command.price_after,
        "deprovisioning via {CONSOLIDATION} {}",
        command.describe()
    );
    let nodes: Vec<Arc<Node>> = command.nodes.iter().filter_map(|n| state.nodes.get(&ObjectRef::new(n))).collect();
    for node in &nodes {
        cordon(ctx, node, Some(CONSOLIDATION)).await?;
    }
    crate::failpoint::hit("consolidation-after-cordon");
    if let Some(request) = command.replacement() {
        let started = Instant::now();
        let deadline = ctx.clock.instant() + ctx.config.replacement_timeout;
        let launched = match ctx.provisioning.launch(request).await {
            Ok(name) => name,
            Err(e) => {
                let reason = telemetry::chain(&e);
                for node in &nodes {
                    cordon(ctx, node, None).await?;
                }
                return Err(DeprovisioningError::Replace {
                    node: command.nodes.join(", "),
                    reason,
                });
            }
        };
        for node in &nodes {
            let note = format!("Launching node {launched} for {CONSOLIDATION}/{action}");
            publish(
                &ctx.recorder,
                node.as_ref(),
                EventType::Normal,
                "DeprovisioningLaunchingNode",
                "Consolidation",
                &note,
            )
            .await;
            let note = format!("Waiting on readiness of {launched} to continue deprovisioning");
            publish(
                &ctx.recorder,
                node.as_ref(),
                EventType::Normal,
                "DeprovisioningWaitingReadiness",
                "Consolidation",
                &note,
            )
            .await;
        }
        let replacement = [launched.clone()];
        let awaited = super::await_nodes(state, &*ctx.clock, &replacement, deadline, is_labelled_initialized).await;
        if awaited != super::Awaited::Done {
            let gone = matches!(awaited, super::Awaited::Gone(_));
            warn!(replacement = %launched, nodes = ?command.nodes, timeout = ?ctx.config.replacement_timeout, gone, "replacement did not initialise; keeping the nodes");
            for node in &nodes {
                cordon(ctx, node, None).await?;
                let note = if gone {
                    format!("Replacement node {launched} was deleted before it initialized; keeping this node")
                } else {
                    format!("Replacement node {launched} did not initialize in time; keeping this node")
                };
                publish(
                    &ctx.recorder,
                    node.as_ref(),
                    EventType::Warning,
                    "DeprovisioningWaitingReadiness",
                    "Consolidation",
                    &note,
                )
                .await;
            }
            return Err(DeprovisioningError::Replace {
                node: command.nodes.join(", "),
                reason: if gone {
                    format!("replacement {launched} was deleted before it initialized")
                } else {
                    format!("replacement {launched} not initialized within {:?}", ctx.config.replacement_timeout)
                },
            });
        }
        ctx.metrics.replacement_initialized.observe(started.elapsed().as_secs_f64());
    }
    crate::failpoint::hit("consolidation-before-delete");
    terminate(ctx, &nodes, action).await
}

/// Deletes the nodes of a command (the termination controller drains them), each with a
/// `DeprovisioningTerminatingNode` event, counted as `consolidation/<action>`.
async fn terminate(ctx: &Context, nodes: &[Arc<Node>], action: &'static str) -> Result<(), DeprovisioningError> {
    for node in nodes {
        let note = format!("Deprovisioning node via {CONSOLIDATION}/{action}");
        publish(
            &ctx.recorder,
            node.as_ref(),
            EventType::Normal,
            "DeprovisioningTerminatingNode",
            "Consolidation",
            &note,
        )
        .await;
        delete_node(ctx, node, metrics::reason::CONSOLIDATION, action).await?;
    }
    Ok(())
}
