//! Deprovisioning: a periodic pass (leader only) that runs Karpenter's methods in Karpenter's
//! order, one command per pass (`core@v0.27.0:pkg/controllers/deprovisioning/controller.go`):
//!
//! | method | I/O | pure rules |
//! |---|---|---|
//! | expiration: replace a node older than `ttlSecondsUntilExpired` | `expiration.rs` | `decide.rs` |
//! | drift: replace a node that no longer matches its Provisioner or AWSNodeTemplate | `drift_marks.rs` | `drift.rs`, `decide.rs` |
//! | emptiness: delete a node empty for `ttlSecondsAfterEmpty` | `emptiness.rs` | `decide.rs` |
//! | consolidation: delete or replace nodes whose pods fit elsewhere | `consolidation/mod.rs` | `consolidation/decide.rs` |
//!
//! This file holds the pass loop, the helpers the methods share (`replace` of one expired or
//! drifted node, `cordon`, `delete_node`, the wait for replacements) and the error type. The
//! pure files read no clock (the time is passed in) and do no I/O; their unit tests are in
//! `decide/tests.rs`, `consolidation/decide/tests.rs` and `drift.rs`.

pub mod consolidation;
pub mod decide;
pub mod drift;
mod drift_marks;
mod emptiness;
mod expiration;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{EventType, Recorder};
use kube::ResourceExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};

use crate::apis::v1alpha5::labels::{EMPTINESS_TIMESTAMP_ANNOTATION, PROVISIONER_NAME_LABEL};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::CloudProvider;
use crate::controllers::clock::Clock;
use crate::controllers::events::publish;
use crate::controllers::node_ops::{self, Cordon, Written};
use crate::controllers::provisioning::Provisioning;
use crate::controllers::state::{Cluster, StateNode};
use crate::controllers::Shared;
use crate::metrics::{self, Metrics};
use crate::scheduling::nodes::is_ready;
use crate::telemetry;
use decide::Candidate;

/// Settings of the deprovisioning controller.
#[derive(Clone, Debug)]
pub struct DeprovisioningConfig {
    /// How often a pass runs.
    pub interval: Duration,
    /// How long after launch a node is presumed nominated for the pods it was launched for, and so
    /// not empty yet.
    pub nomination: Duration,
    /// Label selector of the nodes considered (ours by default; narrower to shard or to test):
    /// `key`, `key=value`, `key!=value`, `!key`, comma-separated.
    pub node_selector: String,
    /// How long the replacements of an expired node may take to become Ready before the
    /// replacement is abandoned (the node uncordoned, tried again by a later pass).
    pub replacement_timeout: Duration,
    /// How long after deleting a node of its own the pass waits for it to be gone before it starts
    /// anything new; past it, the pass moves on (logged) even if the drain is still held up.
    pub deletion_timeout: Duration,
    /// How long a consolidation command waits before it is validated again (15 s,
    /// Karpenter's `consolidationTTL`).
    pub consolidation_ttl: Duration,
    /// Whether drifted nodes are marked and replaced (`--drift-enabled`); off removes the marks.
    pub drift_enabled: bool,
}

/// How often a deprovisioning pass runs, by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// How long after launch a node is presumed nominated for its pods, by default.
pub const DEFAULT_NOMINATION: Duration = Duration::from_secs(20);
/// How long replacements may take to become Ready before a replacement is abandoned, by default.
pub const DEFAULT_REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How long a pass waits for a node it deleted to be gone before it moves on, by default.
pub const DEFAULT_DELETION_TIMEOUT: Duration = Duration::from_secs(10 * 60);

impl Default for DeprovisioningConfig {
    fn default() -> Self {
        DeprovisioningConfig {
            interval: DEFAULT_INTERVAL,
            nomination: DEFAULT_NOMINATION,
            node_selector: PROVISIONER_NAME_LABEL.to_string(),
            replacement_timeout: DEFAULT_REPLACEMENT_TIMEOUT,
            deletion_timeout: DEFAULT_DELETION_TIMEOUT,
            consolidation_ttl: consolidation::CONSOLIDATION_TTL,
            drift_enabled: true,
        }
    }
}

/// The annotation on a node a command of ours is replacing or deleting, with the method
/// (`expired`, `consolidation`).
pub use crate::apis::v1alpha5::labels::VOLUNTARY_DISRUPTION_ANNOTATION;
/// The `karpenter.sh/voluntary-disruption` value of a node marked drifted.
pub use drift_marks::DRIFTED;

/// What the deprovisioning loop needs.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub config: DeprovisioningConfig,
    /// Launches the replacements of expired and consolidated nodes, and snapshots the cluster.
    pub provisioning: Arc<dyn Provisioning>,
    /// The cloud (drift compares nodes with what it would launch now).
    pub cloud: Arc<dyn CloudProvider>,
    /// The shared cluster state.
    pub state: Arc<Cluster>,
    /// What emptiness, expiry, deletion and replacement timeouts, the consolidation
    /// short-circuit and the instance cache are timed on.
    pub clock: Arc<dyn Clock>,
    recorder: Recorder,
    /// The cluster generation and time of the last consolidation evaluation that found nothing
    /// to do (Karpenter's "consolidated" short-circuit).
    consolidated: StdMutex<Option<(u64, Instant)>>,
    /// (node, reason) → when an `Unconsolidatable` event last said so.
    unconsolidatable: StdMutex<HashMap<(String, String), Instant>>,
    /// What EC2 said about the instances, for drift.
    instances: StdMutex<drift_marks::InstanceCache>,
}

impl Context {
    /// A context for the controller.
    pub fn new(shared: &Shared, config: DeprovisioningConfig, provisioning: Arc<dyn Provisioning>) -> Arc<Context> {
        Arc::new(Context {
            recorder: shared.recorder.clone(),
            client: shared.client.clone(),
            cloud: shared.cloud.clone(),
            metrics: shared.metrics.clone(),
            config,
            provisioning,
            state: shared.state.clone(),
            clock: shared.clock.clone(),
            consolidated: StdMutex::new(None),
            unconsolidatable: StdMutex::new(HashMap::new()),
            instances: StdMutex::new(drift_marks::InstanceCache::default()),
        })
    }
}

/// Runs deprovisioning passes until `shutdown`, only while `leading` is true.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    ctx.metrics.controller_started("deprovisioning");
    let mut ticker = tokio::time::interval(ctx.config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        ctx.metrics.liveness.beat("deprovisioning", ctx.config.interval);
        if !*leading.borrow() {
            continue;
        }
        let started = std::time::Instant::now();
        let _pass = ctx.metrics.liveness.pass("deprovisioning");
        crate::failpoint::pass_point("deprovisioning").await;
        let result = pass(&ctx).await;
        if let Err(e) = &result {
            warn!(error = %telemetry::chain(e), "deprovisioning pass failed; retrying with the next one");
        }
        ctx.metrics.reconciled("deprovisioning", started, result.is_ok());
    }
}

/// One pass: read the stores, finish or release a consolidation command left unfinished, then the
/// methods in Karpenter's order, each ending the pass when it acts: replace at most one expired
/// node, mark drifted nodes and replace at most one, mark, unmark and delete empty ones, then
/// consolidate.
#[instrument(skip_all)]
async fn pass(ctx: &Context) -> Result<(), DeprovisioningError> {
    let stores = &ctx.state;
    stores.ready().await.map_err(|e| DeprovisioningError::Stores(e.to_string()))?;
    // Nothing is deleted on a view that may lag the cluster (after an API server or etcd
    // outage): a node that got pods meanwhile would look empty.
    if let Some(why) = stores.stale() {
        debug!(reason = %why, "deprovisioning waits for the cluster view to settle");
        return Ok(());
    }
    let now = ctx.clock.now();
    let view = considered(ctx);
    let nodes: Vec<Arc<Node>> = view.iter().map(|n| n.node.clone()).collect();
    debug!(nodes = nodes.len(), "deprovisioning pass");
    let provisioners: HashMap<String, Arc<Provisioner>> = stores.provisioners.state().into_iter().map(|p| (p.name_any(), p)).collect();
    let provisioner_of = |node: &Node| node.labels().get(PROVISIONER_NAME_LABEL).and_then(|name| provisioners.get(name));
    // Only a deletion of our own command holds the pass, and only up to the deletion timeout.
    let deletion_timeout = jiff::SignedDuration::try_from(ctx.config.deletion_timeout).unwrap_or(jiff::SignedDuration::MAX);
    let deletions = decide::deletions(nodes.iter().map(|n| n.as_ref()), deletion_timeout, now);
    for name in &deletions.overdue {
        warn!(node = %name, timeout = ?ctx.config.deletion_timeout, "node deleted by deprovisioning is still there after the deletion timeout; no longer waiting for it");
    }
    let waiting = !deletions.awaited.is_empty();
    if waiting {
        debug!(nodes = ?deletions.awaited, "waiting for the deletion of nodes of ours before deprovisioning more");
    }

    // A consolidation command a stopped process left unfinished is finished or released first,
    // whatever its Provisioner says now: one command at a time (as in Karpenter), and no node
    // left cordoned.
    if !waiting && consolidation::resume(ctx).await?.is_some() {
        return Ok(());
    }

    // Expiration first, at most one node (Karpenter's order).
    let expiration_timer = ctx
        .metrics
        .deprovisioning_evaluation
        .with_label_values(&[metrics::reason::EXPIRATION])
        .start_timer();
    let candidates: Vec<Candidate<'_>> = view
        .iter()
        .map(|n| Candidate {
            node: &n.node,
            pods: &n.pods,
            ttl_seconds_until_expired: provisioner_of(&n.node).and_then(|p| p.spec.ttl_seconds_until_expired),
        })
        .collect();
    // Expiration and drift both pick their node past the same PodDisruptionBudgets.
    let pdbs: Vec<_> = stores.pdbs.state().iter().map(|b| (**b).clone()).collect();
    if expiration::replace_expired(ctx, &nodes, &candidates, &pdbs, provisioner_of, waiting, now).await? {
        return Ok(());
    }
    drop(expiration_timer);

    // Drift second (Karpenter's order): mark and unmark every node, replace at most one, oldest first.
    let drift_timer = ctx
        .metrics
        .deprovisioning_evaluation
        .with_label_values(&[metrics::reason::DRIFT])
        .start_timer();
    if drift_marks::replace_drifted(ctx, &nodes, &provisioners, &candidates, &pdbs, waiting).await? {
        return Ok(());
    }
    drop(drift_timer);

    // Emptiness: mark, unmark, and delete every node empty for its TTL. While a node our own
    // command deleted is draining (up to the deletion timeout), nodes are neither marked nor
    // deleted: its evicted pods may be on their way to them. A node someone else deletes does not
    // hold them.
    let emptiness_timer = ctx
        .metrics
        .deprovisioning_evaluation
        .with_label_values(&[metrics::reason::EMPTINESS])
        .start_timer();
    let deleted = emptiness::remove_empty(ctx, &view, provisioner_of, waiting, now).await;
    drop(emptiness_timer);
    // One command per pass; and nothing new while a deletion of ours drains.
    if deleted? || waiting {
        return Ok(());
    }
    let _consolidation_timer = ctx
        .metrics
        .deprovisioning_evaluation
        .with_label_values(&[metrics::reason::CONSOLIDATION])
        .start_timer();
    consolidation::consolidate(ctx).await.map(drop)
}

/// The nodes deprovisioning considers, with their pods: ours, narrowed by the configured selector.
fn considered(ctx: &Context) -> Vec<StateNode> {
    let nodes: Vec<Arc<Node>> = ctx
        .state
        .nodes
        .state()
        .into_iter()
        .filter(|n| n.labels().contains_key(PROVISIONER_NAME_LABEL) && decide::selects(&ctx.config.node_selector, n.labels()))
        .collect();
    ctx.state.view_of(&nodes, &ctx.state.pods.state())
}

/// Whether an earlier pass cordoned `node` to replace it.
fn is_marked_for_replacement(node: &Node) -> bool {
    node.annotations().contains_key(VOLUNTARY_DISRUPTION_ANNOTATION)
}

/// Why a node is replaced one at a time.
#[derive(Clone, Copy, Debug)]
enum Disruption<'a> {
    /// Older than its Provisioner's `ttlSecondsUntilExpired`.
    Expired {
        /// The TTL, for the event.
        ttl: i64,
    },
    /// No longer matches its Provisioner or AWSNodeTemplate.
    Drifted(&'a drift::Drift),
}

impl Disruption<'_> {
    /// The `karpenter.sh/voluntary-disruption` mark.
    fn mark(&self) -> &'static str {
        match self {
            Disruption::Expired { .. } => expiration::EXPIRED,
            Disruption::Drifted(_) => drift_marks::DRIFTED,
        }
    }

    /// The method, as metrics name it.
    fn method(&self) -> &'static str {
        match self {
            Disruption::Expired { .. } => metrics::reason::EXPIRATION,
            Disruption::Drifted(_) => metrics::reason::DRIFT,
        }
    }
}

/// Replaces an expired or drifted node: cordons and marks it, has the provisioning controller
/// launch room for its pods, waits for the new nodes to be Ready, then deletes it (the
/// termination controller drains it). A node whose pods all fit elsewhere is deleted without a
/// replacement. A failed or timed-out replacement puts the node back into service.
#[instrument(skip_all, fields(node = %node.name_any()))]
async fn replace(ctx: &Context, stores: &Cluster, node: &Node, why: Disruption<'_>) -> Result<(), DeprovisioningError> {
    let name = node.name_any();
    match why {
        Disruption::Expired { ttl } if !is_marked_for_replacement(node) => {
            let note = format!("Node expired: older than ttlSecondsUntilExpired={ttl}s; replacing it");
            publish(&ctx.recorder, node, EventType::Normal, "Expired", "Deprovisioning", &note).await;
        }
        Disruption::Expired { .. } => {}
        Disruption::Drifted(drift) => info!(node = %name, drift = drift.kind.as_str(), detail = %drift.detail, "replacing drifted node"),
    }
    let method = why.method();
    cordon(ctx, node, Some(why.mark())).await?;
    crate::failpoint::hit("replacement-after-cordon");
    let started = Instant::now();
    let deadline = ctx.clock.instant() + ctx.config.replacement_timeout;
    let launched = match ctx.provisioning.replace(&name).await {
        Ok(launched) => launched,
        Err(e) => {
            cordon(ctx, node, None).await?;
            return Err(DeprovisioningError::Replace {
                node: name,
                reason: telemetry::chain(&e),
            });
        }
    };
    if !launched.is_empty() {
        let note = format!("Launching replacement node(s) {}", launched.join(", "));
        info!(node = %name, replacements = ?launched, method, "launched replacements for node");
        publish(
            &ctx.recorder,
            node,
            EventType::Normal,
            "DeprovisioningLaunchingNode",
            "Deprovisioning",
            &note,
        )
        .await;
        let awaited = await_nodes(stores, &*ctx.clock, &launched, deadline, is_ready).await;
        if awaited != Awaited::Done {
            cordon(ctx, node, None).await?;
            let (why, note) = match &awaited {
                Awaited::Gone(gone) => (
                    format!("replacement {gone} was deleted before it was Ready"),
                    format!("Replacement node {gone} was deleted before it was Ready; keeping this node"),
                ),
                _ => (
                    format!("replacements {launched:?} not Ready within {:?}", ctx.config.replacement_timeout),
                    format!("Replacement node(s) {} not Ready in time; keeping this node", launched.join(", ")),
                ),
            };
            publish(
                &ctx.recorder,
                node,
                EventType::Warning,
                "DeprovisioningWaitingReadiness",
                "Deprovisioning",
                &note,
            )
            .await;
            return Err(DeprovisioningError::Replace { node: name, reason: why });
        }
        ctx.metrics.replacement_initialized.observe(started.elapsed().as_secs_f64());
    }
    crate::failpoint::hit("replacement-before-delete");
    let action = if launched.is_empty() { "delete" } else { "replace" };
    let note = match &launched[..] {
        [] => "Deleting node: its pods fit on other nodes".to_string(),
        replacements => format!("Deleting node: replacement(s) {} ready", replacements.join(", ")),
    };
    publish(
        &ctx.recorder,
        node,
        EventType::Normal,
        "DeprovisioningTerminatingNode",
        "Deprovisioning",
        &note,
    )
    .await;
    delete_node(ctx, node, method, action).await
}

/// A `BlockedDeprovisioning` event on each of `blocked` (node, why) of the `what` nodes.
async fn publish_blocked(ctx: &Context, nodes: &[Arc<Node>], blocked: &[(String, String)], what: &str) {
    for (node_name, why) in blocked {
        debug!(node = %node_name, reason = %why, "{what} node kept for now");
        if let Some(node) = nodes.iter().find(|n| n.name_any() == *node_name) {
            let note = format!("Cannot deprovision node due to {why}");
            publish(
                &ctx.recorder,
                node.as_ref(),
                EventType::Normal,
                "BlockedDeprovisioning",
                "Deprovisioning",
                &note,
            )
            .await;
        }
    }
}

/// How a wait for replacement nodes ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Awaited {
    /// Every node satisfies the condition.
    Done,
    /// This node was deleted (or is being deleted) before it did: it never will.
    Gone(String),
    /// The deadline passed first.
    TimedOut,
}

/// How often `await_nodes` looks again at the nodes a command waits for.
const AWAIT_NODES_POLL: Duration = Duration::from_secs(1);

/// Waits, checking every second, until every node of `names` is in the shared state and
/// satisfies `done` (`decide::replacements`). Stops as soon as one of them is gone or being
/// deleted: otherwise the pass, and with it every other deprovisioning command (one at a time),
/// would wait out the replacement timeout for a node that will not come. `deadline` is on `clock`.
async fn await_nodes(state: &Cluster, clock: &dyn Clock, names: &[String], deadline: Instant, done: impl Fn(&Node) -> bool) -> Awaited {
    let mut seen = vec![false; names.len()];
    loop {
        let nodes: Vec<Option<Arc<Node>>> = names
            .iter()
            .map(|n| state.nodes.get(&kube::runtime::reflector::ObjectRef::new(n)))
            .collect();
        let nodes: Vec<Option<&Node>> = nodes.iter().map(|n| n.as_deref()).collect();
        match decide::replacements(&nodes, &mut seen, &done) {
            decide::Replacements::Done => return Awaited::Done,
            decide::Replacements::Gone(i) => return Awaited::Gone(names[i].clone()),
            decide::Replacements::Waiting => {}
        }
        if clock.instant() > deadline {
            return Awaited::TimedOut;
        }
        tokio::time::sleep(AWAIT_NODES_POLL).await;
    }
}

/// Cordons `node` and marks it with the method of the command removing it (`Some`), or
/// uncordons it and removes the mark (`None`).
async fn cordon(ctx: &Context, node: &Node, method: Option<&str>) -> Result<(), DeprovisioningError> {
    let name = node.name_any();
    let how = method.map_or(Cordon::Lift, Cordon::Disrupting);
    match node_ops::cordon(&ctx.client, node, how).await {
        Ok(Written::Written) => {
            match method {
                Some(method) => info!(node = %name, method, "cordoned node to deprovision it"),
                None => info!(node = %name, "uncordoned node: not deprovisioned"),
            }
            Ok(())
        }
        Ok(Written::Gone) => Ok(()),
        Err(source) => Err(DeprovisioningError::Cordon { node: name, source }),
    }
}

/// Deletes the Node (the termination controller takes it from there) and counts it as
/// `<method>/<action>`.
async fn delete_node(ctx: &Context, node: &Node, method: &'static str, action: &'static str) -> Result<(), DeprovisioningError> {
    let name = node.name_any();
    let provisioner = node.labels().get(PROVISIONER_NAME_LABEL).cloned().unwrap_or_default();
    match node_ops::delete(&ctx.client, node).await {
        Ok(Written::Written) => {}
        Ok(Written::Gone) => return Ok(()),
        Err(source) => return Err(DeprovisioningError::Delete { node: name, source }),
    }
    ctx.metrics
        .deprovisioning_actions
        .with_label_values(&[&format!("{method}/{action}")])
        .inc();
    ctx.metrics.nodes_terminated.with_label_values(&[&provisioner, method]).inc();
    info!(node = %name, provisioner = %provisioner, "deprovisioning via {method} {action}");
    Ok(())
}

/// What can go wrong in a deprovisioning pass.
#[derive(Debug, thiserror::Error)]
pub enum DeprovisioningError {
    /// A store could not be synced.
    #[error("waiting for the node, pod and provisioner caches: {0}")]
    Stores(String),
    /// The cluster could not be snapshot for a consolidation simulation.
    #[error("snapshotting the cluster for consolidation: {0}")]
    Snapshot(String),
    /// The emptiness timestamp could not be written.
    #[error("writing {EMPTINESS_TIMESTAMP_ANNOTATION} on node {node}")]
    Annotate {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The pods of a node could not be listed.
    #[error("listing the pods of node {node}")]
    ListPods {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The node could not be cordoned or uncordoned.
    #[error("cordoning or uncordoning node {node}")]
    Cordon {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The replacements of a node could not be provisioned or did not become ready.
    #[error("replacing node(s) {node}: {reason}")]
    Replace {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// The node could not be deleted.
    #[error("deleting node {node}")]
    Delete {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}
