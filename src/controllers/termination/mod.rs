//! Termination: every Node carrying our finalizer that is being deleted (by deprovisioning, the
//! garbage collector or `kubectl delete node`) is cordoned, drained through the Eviction API,
//! its instance terminated, and only then the finalizer released
//! (`core@v0.27.0:pkg/controllers/termination/controller.go`).
//!
//! Every second the deleting nodes of the shared Node and Pod reflectors are queued; each is
//! reconciled as a task of its own, at most `MAX_CONCURRENT_NODES` at once, never twice at once,
//! and after a failure again only after its own back-off (`queue.rs`). Every step reads the
//! state it acts on and is idempotent, so a restart or a leader hand-over at any point just
//! carries on. `drain.rs` decides which pods go and in which order.

pub mod drain;
pub mod queue;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::events::{EventType, Recorder};
use kube::ResourceExt;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};

use crate::apis::v1alpha5::labels::{PROVISIONER_NAME_LABEL, TERMINATION_FINALIZER};
use crate::cloudprovider::{self, instance_id_from_provider_id, CloudProvider};
use crate::controllers::clock::Clock;
use crate::controllers::events::publish;
use crate::controllers::node_ops::{self, Cordon, Evicted, Written};
use crate::controllers::state::{Cluster, StateNode};
use crate::controllers::Shared;
use crate::metrics::Metrics;
use crate::scheduling::pods::PodKey;
use crate::telemetry;
use queue::{Outcome, WorkQueue};

pub use crate::apis::v1alpha5::labels::EXCLUDE_FROM_LB_LABEL;
/// First retry delay of a pod whose eviction was refused; doubles up to `MAX_EVICTION_BACKOFF`.
const MIN_EVICTION_BACKOFF: Duration = Duration::from_secs(1);
const MAX_EVICTION_BACKOFF: Duration = Duration::from_secs(10);
/// One node's reconcile (a few API and cloud calls) is dropped and retried after this long: an
/// answer that never comes holds one of the `MAX_CONCURRENT_NODES` slots no longer than this.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Most deleting nodes reconciled at once.
const MAX_CONCURRENT_NODES: usize = 16;
/// At most one `FailedDraining` event per node this often.
const DRAINING_EVENT_PERIOD: Duration = Duration::from_secs(30);
/// A retry back-off entry is forgotten this long after its wait ended, so the map does not keep
/// every pod and node ever retried.
const FORGET_BACKOFF_AFTER: Duration = Duration::from_secs(300);

/// Settings of the termination controller.
#[derive(Clone, Debug)]
pub struct TerminationConfig {
    /// How often deleting nodes are reconciled.
    pub interval: Duration,
}

/// How often deleting nodes are reconciled, by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

impl Default for TerminationConfig {
    fn default() -> Self {
        TerminationConfig {
            interval: DEFAULT_INTERVAL,
        }
    }
}

/// What the termination loop shares between passes.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub config: TerminationConfig,
    /// What the work queue's due times, the drain and the eviction back-offs are timed on.
    pub clock: Arc<dyn Clock>,
    /// The shared cluster view.
    pub state: Arc<Cluster>,
    recorder: Recorder,
    backoffs: Mutex<Backoffs>,
}

#[derive(Default)]
struct Backoffs {
    /// Pod → when its eviction may be tried again, and the delay after that.
    backoff: HashMap<PodKey, (Instant, Duration)>,
    /// Node → when the last `FailedDraining` event was published.
    draining_events: HashMap<String, Instant>,
}

impl Context {
    /// A context for the controller.
    pub fn new(shared: &Shared, config: TerminationConfig) -> Arc<Context> {
        Arc::new(Context {
            recorder: shared.recorder.clone(),
            client: shared.client.clone(),
            cloud: shared.cloud.clone(),
            metrics: shared.metrics.clone(),
            config,
            clock: shared.clock.clone(),
            state: shared.state.clone(),
            backoffs: Mutex::default(),
        })
    }
}

/// Whether `node` is ours to finalize now: it carries our finalizer and is being deleted.
pub fn is_terminating(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_some() && node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER)
}

/// Runs the termination controller until `shutdown`; reconciles only while `leading` is true.
/// Every tick (1 s) queues the deleting nodes of the shared view and the node reconciles that
/// finished are recorded; each node is reconciled as a task of its own, at most
/// `MAX_CONCURRENT_NODES` at once and never twice at once (`queue::WorkQueue`), so one slow node
/// (a drain held by a PodDisruptionBudget, a failing cloud call in back-off) holds up no other.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    ctx.metrics.controller_started("termination");
    let state = ctx.state.clone();
    let nodes = &state.nodes;
    let mut ticker = tokio::time::interval(ctx.config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut queue = WorkQueue::new(MIN_TERMINATE_BACKOFF, MAX_TERMINATE_BACKOFF).with_jitter(crate::retry::jittered);
    // Dropped with the loop (a lost lease, shutdown): its reconciles are aborted at their next
    // await; every step is idempotent, so the next leader carries on.
    let mut running: JoinSet<(String, Result<usize, TerminationError>)> = JoinSet::new();
    // Pods still waiting for eviction, by node, as their last reconcile left them.
    let mut waiting: HashMap<String, usize> = HashMap::new();
    let mut failed_since_tick = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
            Some(ended) = running.join_next(), if !running.is_empty() => {
                let now = ctx.clock.instant();
                match ended {
                    Ok((name, Ok(remaining))) => {
                        waiting.insert(name.clone(), remaining);
                        queue.finished(&name, Outcome::Done, now);
                    }
                    Ok((name, Err(e))) => {
                        queue.finished(&name, Outcome::Failed, now);
                        warn!(node = %name, error = %telemetry::chain(&e), retry_in = ?queue.backoff_of(&name), "terminating node; retrying");
                        failed_since_tick = true;
                    }
                    // A reconcile that panicked: the supervisor's rule for a pass that panics is
                    // to start the controller again.
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(_) => {}
                }
                continue;
            }
        }
        ctx.metrics.liveness.beat("termination", ctx.config.interval);
        if !*leading.borrow() {
            running.abort_all();
            continue;
        }
        if state.ready().await.is_err() {
            continue;
        }
        let terminating: Vec<Arc<Node>> = nodes.state().into_iter().filter(|n| is_terminating(n)).collect();
        let started = std::time::Instant::now();
        let _pass = ctx.metrics.liveness.pass("termination");
        crate::failpoint::pass_point("termination").await;
        let now = ctx.clock.instant();
        queue.retain(|name| terminating.iter().any(|n| n.name_any() == name));
        for node in &terminating {
            queue.add(&node.name_any(), now);
        }
        let due = queue.take(now, MAX_CONCURRENT_NODES);
        if !due.is_empty() {
            // The deleting nodes with their pods, from the shared view, grouped once for the
            // tick (not at all in the ticks, most of them, with no node deleting).
            let mut view = state.view_of(&terminating, &state.pods.state());
            for name in due {
                let Some(at) = view.iter().position(|n| n.name() == name) else {
                    queue.finished(&name, Outcome::Done, now);
                    continue;
                };
                let StateNode { node, pods, .. } = view.swap_remove(at);
                let ctx = ctx.clone();
                running.spawn(async move {
                    let result = match tokio::time::timeout(RECONCILE_TIMEOUT, reconcile(&ctx, &node, &pods)).await {
                        Ok(result) => result,
                        Err(_) => Err(TerminationError::TimedOut {
                            node: name.clone(),
                            after: RECONCILE_TIMEOUT,
                        }),
                    };
                    (name, result)
                });
            }
        }
        ctx.metrics
            .reconciled("termination", started, !std::mem::take(&mut failed_since_tick));
        waiting.retain(|name, _| terminating.iter().any(|n| n.name_any() == *name));
        ctx.metrics.eviction_queue_depth.set(waiting.values().sum::<usize>() as i64);
        let mut state = ctx.backoffs.lock().await;
        let now = ctx.clock.instant();
        state
            .backoff
            .retain(|_, (until, _)| now.duration_since(*until) < FORGET_BACKOFF_AFTER);
        state
            .draining_events
            .retain(|name, _| terminating.iter().any(|n| n.name_any() == *name));
    }
}

/// One step forward for one deleting node; returns how many of its pods still wait for eviction.
#[instrument(skip_all, fields(node = %node.name_any()))]
async fn reconcile(ctx: &Context, node: &Node, cached_pods: &[Arc<Pod>]) -> Result<usize, TerminationError> {
    let name = node.name_any();
    // 1. cordon
    if node.spec.as_ref().and_then(|s| s.unschedulable) != Some(true) {
        match node_ops::cordon(&ctx.client, node, Cordon::Terminating).await {
            Ok(Written::Written) => {
                info!(node = %name, "cordoned node");
                publish(
                    &ctx.recorder,
                    node,
                    EventType::Normal,
                    "Cordoned",
                    "Draining",
                    "Cordoned node for termination",
                )
                .await;
            }
            Ok(Written::Gone) => return Ok(0),
            Err(source) => return Err(TerminationError::Cordon { node: name, source }),
        }
    }
    // 2. drain, from the shared cache; a drain that looks done there is confirmed with one list
    // from the API server before the instance goes (the cache may lag a pod bound just before
    // the cordon).
    let mut plan = drain::plan(cached_pods.iter().map(AsRef::as_ref), ctx.clock.now());
    if plan.is_complete() {
        let pods = node_ops::pods_on(&ctx.client, &name)
            .await
            .map_err(|source| TerminationError::ListPods {
                node: name.clone(),
                source,
            })?;
        plan = drain::plan(&pods, ctx.clock.now());
    }
    if !plan.is_complete() {
        for pod in &plan.evict {
            evict(ctx, pod).await;
        }
        let mut state = ctx.backoffs.lock().await;
        let now = ctx.clock.instant();
        let due = state
            .draining_events
            .get(&name)
            .is_none_or(|t| now.saturating_duration_since(*t) >= DRAINING_EVENT_PERIOD);
        if due {
            state.draining_events.insert(name.clone(), now);
            drop(state);
            let note = format!("{} pods are waiting to be evicted", plan.remaining());
            debug!(node = %name, remaining = plan.remaining(), "draining node");
            publish(&ctx.recorder, node, EventType::Normal, "FailedDraining", "Draining", &note).await;
        }
        crate::failpoint::hit("during-drain");
        return Ok(plan.remaining());
    }
    // 3. terminate the instance (one that is already gone counts as terminated)
    let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default();
    if let Some(instance_id) = instance_id_from_provider_id(provider_id) {
        // A failure is retried after the node's back-off in the work queue.
        if let Err(source) = ctx.metrics.cloud_call("delete", ctx.cloud.delete(instance_id)).await {
            return Err(TerminationError::Terminate {
                node: name,
                instance_id: instance_id.to_string(),
                source,
            });
        }
        info!(node = %name, instance_id, "terminated instance");
        let note = format!("Terminated instance {instance_id}");
        publish(&ctx.recorder, node, EventType::Normal, "TerminatedInstance", "Terminating", &note).await;
        crate::failpoint::hit("after-terminate");
    }
    // 4. remove our finalizer only (the patch fails if the list changed meanwhile)
    if !node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
        return Ok(0);
    }
    if let Err(source) = node_ops::release_finalizer(&ctx.client, node, TERMINATION_FINALIZER).await {
        return Err(TerminationError::RemoveFinalizer { node: name, source });
    }
    let provisioner = node.labels().get(PROVISIONER_NAME_LABEL).cloned().unwrap_or_default();
    let elapsed = node
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| Timestamp::now().duration_since(t.0).as_secs_f64());
    if let Some(seconds) = elapsed {
        ctx.metrics.termination_time.observe(&[&provisioner], seconds.max(0.0));
    }
    info!(node = %name, provisioner = %provisioner, seconds_since_deletion = elapsed, "deleted node");
    Ok(0)
}

/// Evicts one pod through the `policy/v1` Eviction subresource, unless it is backing off after
/// a refusal. 404 means it is gone already; 429 means a PodDisruptionBudget refuses for now.
async fn evict(ctx: &Context, pod: &PodKey) {
    {
        let state = ctx.backoffs.lock().await;
        if state.backoff.get(pod).is_some_and(|(until, _)| ctx.clock.instant() < *until) {
            return;
        }
    }
    let refused = match node_ops::evict(&ctx.client, &pod.namespace, &pod.name).await {
        Evicted::Evicted => {
            info!(pod = %pod, "evicted pod");
            publish(
                &ctx.recorder,
                &pod.as_object(),
                EventType::Normal,
                "Evicted",
                "Evicting",
                "Evicted pod",
            )
            .await;
            false
        }
        Evicted::Refused(message) => {
            warn!(pod = %pod, reason = %message, "evicting pod violates a PodDisruptionBudget; retrying");
            let note = format!("Evicting pod violates a PDB: {message}");
            publish(
                &ctx.recorder,
                &pod.as_object(),
                EventType::Warning,
                "FailedEviction",
                "Evicting",
                &note,
            )
            .await;
            true
        }
        Evicted::Failed(e) => {
            warn!(pod = %pod, error = %telemetry::chain(&e), "evicting pod; retrying");
            true
        }
    };
    let mut state = ctx.backoffs.lock().await;
    if refused {
        let delay = next_delay(state.backoff.get(pod).map(|(_, d)| *d), MIN_EVICTION_BACKOFF, MAX_EVICTION_BACKOFF);
        state
            .backoff
            .insert(pod.clone(), (ctx.clock.instant() + crate::retry::jittered(delay), delay));
    } else {
        state.backoff.remove(pod);
    }
}

/// The first wait after a node's reconcile failed (its instance termination, say); doubles per
/// failure in a row.
pub const MIN_TERMINATE_BACKOFF: Duration = Duration::from_secs(2);
/// The longest wait between reconciles of one node that keep failing: a cloud that keeps
/// failing (an outage, throttling past the SDK's retries) is asked less and less often.
pub const MAX_TERMINATE_BACKOFF: Duration = Duration::from_secs(30);

/// The delay after a failed eviction or termination, given the one before it (none: the first
/// failure): `min`, then doubling up to `max`; the wait itself is jittered within it
/// (`retry::jittered`), so the evictions of many pods refused together do not return together.
pub fn next_delay(previous: Option<Duration>, min: Duration, max: Duration) -> Duration {
    previous.map_or(min, |d| (d * 2).min(max))
}

/// What can go wrong terminating a node.
#[derive(Debug, thiserror::Error)]
pub enum TerminationError {
    /// The node could not be cordoned.
    #[error("cordoning node {node}")]
    Cordon {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Its pods could not be listed.
    #[error("listing the pods of node {node}")]
    ListPods {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The instance could not be terminated.
    #[error("terminating instance {instance_id} of node {node}")]
    Terminate {
        /// The node.
        node: String,
        /// The instance.
        instance_id: String,
        /// Why.
        #[source]
        source: cloudprovider::Error,
    },
    /// One step of the node took longer than `RECONCILE_TIMEOUT` (an API server or cloud that
    /// hangs mid-answer): it was dropped, and is retried after the node's back-off.
    #[error("reconciling node {node} took longer than {after:?}")]
    TimedOut {
        /// The node.
        node: String,
        /// The limit.
        after: Duration,
    },
    /// The finalizer could not be removed.
    #[error("removing finalizer {TERMINATION_FINALIZER} from node {node}")]
    RemoveFinalizer {
        /// The node.
        node: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_terminations_wait_longer_each_time_up_to_the_cap() {
        let mut delay = None;
        let waits: Vec<u64> = (0..6)
            .map(|_| {
                let next = next_delay(delay, MIN_TERMINATE_BACKOFF, MAX_TERMINATE_BACKOFF);
                delay = Some(next);
                next.as_secs()
            })
            .collect();
        assert_eq!(waits, [2, 4, 8, 16, 30, 30]);
    }
}
