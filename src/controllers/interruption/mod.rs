//! Interruption handling (`aws@v0.27.0:pkg/controllers/interruption/controller.go`): EC2 warns
//! before it takes an instance away (a spot interruption two minutes ahead, a scheduled
//! retirement, a stop or termination), and EventBridge puts those events on an SQS queue
//! (deploy/interruption/). This controller, on the leader only and only when
//! `--interruption-queue-name` is set, long-polls that queue, and for
//! every message about one of our nodes acts before EC2 does: the Node is deleted, so the
//! termination finalizer cordons it and drains it (PodDisruptionBudgets honoured while there is
//! time; `karpenter.sh/do-not-evict` does not hold a node EC2 is taking anyway), and a
//! provisioning pass is started at once for its pods. A spot interruption also marks the
//! instance's spot offering unavailable, so the replacement is launched elsewhere. A rebalance
//! recommendation is only an event (Karpenter's default).
//!
//! A message is deleted from the queue once its action has succeeded; when the action fails it is
//! left for SQS to deliver again after its visibility timeout. A message that does not parse, or
//! that is about an instance that is not ours, is deleted (and counted): retrying it cannot help.
//! Acting twice on one message is harmless (a Node already being deleted is left alone), so a
//! crash between the action and the deletion only repeats an action that already happened.
//!
//! `messages.rs` parses the messages and [`action`] decides what each asks for; both are pure.
//! The I/O is here: the queue (`cloudprovider::queue`), the Node, the event, the metrics.

pub mod messages;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{EventType, Recorder};
use kube::ResourceExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, CAPACITY_TYPE_SPOT, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, ZONE_LABEL};
use crate::cloudprovider::queue::{Queue, Received};
use crate::cloudprovider::{instance_id_from_provider_id, CloudProvider, OfferingId};
use crate::controllers::clock::Clock;
use crate::controllers::events::publish;
use crate::controllers::node_ops;
use crate::controllers::provisioning::Provisioning;
use crate::controllers::state::Cluster;
use crate::controllers::Shared;
use crate::metrics::Metrics;
use messages::{Kind, Message};

/// Settings of the interruption controller.
#[derive(Clone, Debug)]
pub struct InterruptionConfig {
    /// The SQS queue EventBridge sends the instance events to (`settings.aws.interruptionQueueName`);
    /// empty turns interruption handling off.
    pub queue_name: String,
    /// First wait after a failed queue call; doubled on each failure in a row, up to
    /// `max_backoff`, each wait jittered (`retry::Backoff`).
    pub backoff: Duration,
    /// Longest wait between failed queue calls.
    pub max_backoff: Duration,
}

/// First wait after a failed queue call, by default.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between failed queue calls, by default.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);

impl Default for InterruptionConfig {
    fn default() -> Self {
        InterruptionConfig {
            queue_name: String::new(),
            backoff: DEFAULT_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
        }
    }
}

/// `karpenter_interruption_actions_performed{action_type}` of a message that deleted a node
/// (Karpenter's `CordonAndDrain`).
pub const CORDON_AND_DRAIN: &str = "CordonAndDrain";
/// `karpenter_interruption_actions_performed{action_type}` of a message that changed nothing.
pub const NO_ACTION: &str = "NoAction";
/// `karpenter_interruption_received_messages{message_type}` of a message that does not parse.
pub const UNKNOWN_MESSAGE_TYPE: &str = "unknown";

/// What a message asks to be done to the node it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// The event published on the node: reason and note.
    pub reason: &'static str,
    /// The event's note.
    pub note: &'static str,
    /// Delete the node (cordon and drain through the termination finalizer) and replace its
    /// capacity.
    pub delete: bool,
    /// Mark the node's offering (instance type × zone × spot) unavailable first.
    pub mark_unavailable: bool,
}

/// What `message` asks for (Karpenter's actions and event reasons in
/// `aws@v0.27.0:pkg/controllers/interruption/controller.go` and `events/events.go`); `None` for a
/// message with nothing to do.
pub fn action(message: &Message) -> Option<Action> {
    let act = |reason, note, delete, mark_unavailable| Action {
        reason,
        note,
        delete,
        mark_unavailable,
    };
    match message.kind {
        Kind::SpotInterruption => Some(act("SpotInterrupted", "Spot interruption warning was triggered", true, true)),
        Kind::RebalanceRecommendation => Some(act(
            "SpotRebalanceRecommendation",
            "Spot rebalance recommendation was triggered",
            false,
            false,
        )),
        Kind::ScheduledChange => Some(act(
            "InstanceUnhealthy",
            "An unhealthy warning was triggered for the instance",
            true,
            false,
        )),
        Kind::StateChange => match message.state.as_deref() {
            Some("stopping") | Some("stopped") => Some(act("InstanceStopping", "Instance is stopping", true, false)),
            Some("shutting-down") | Some("terminated") => Some(act("InstanceTerminating", "Instance is terminating", true, false)),
            _ => None,
        },
        Kind::NoOp => None,
    }
}

/// What the interruption controller needs.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The queue the events arrive on.
    pub queue: Arc<dyn Queue>,
    /// The cloud provider (the unavailable-offerings cache).
    pub cloud: Arc<dyn CloudProvider>,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub config: InterruptionConfig,
    /// The shared cluster state: nodes by instance id.
    pub state: Arc<Cluster>,
    /// Started at once for the pods of an interrupted node.
    pub provisioning: Arc<dyn Provisioning>,
    /// The controllers' clock (nothing here decides by time yet: the messages carry their own).
    pub clock: Arc<dyn Clock>,
    recorder: Recorder,
}

impl Context {
    /// A context for the controller.
    pub fn new(shared: &Shared, queue: Arc<dyn Queue>, config: InterruptionConfig, provisioning: Arc<dyn Provisioning>) -> Arc<Context> {
        Arc::new(Context {
            recorder: shared.recorder.clone(),
            client: shared.client.clone(),
            queue,
            cloud: shared.cloud.clone(),
            metrics: shared.metrics.clone(),
            config,
            state: shared.state.clone(),
            provisioning,
            clock: shared.clock.clone(),
        })
    }
}

/// The longest a follower's loop waits for leadership before it beats again.
const FOLLOWER_BEAT: Duration = Duration::from_secs(30);

/// Runs the controller until `shutdown`; it polls only while `leading` is true, and not at all
/// when no queue is configured. A queue that cannot be found or read is an error in the log and in
/// `karpenter_cloudprovider_errors_total{method}`, retried with a growing wait; it never stops
/// the other controllers.
pub async fn run(ctx: Arc<Context>, mut leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    if ctx.config.queue_name.is_empty() {
        debug!("interruption handling is off: no interruption queue name");
        return;
    }
    ctx.metrics.controller_started("interruption");
    let name = ctx.config.queue_name.clone();
    let mut url: Option<String> = None;
    let mut backoff = crate::retry::Backoff::new(ctx.config.backoff, ctx.config.max_backoff);
    loop {
        ctx.metrics.liveness.beat("interruption", FOLLOWER_BEAT);
        if !*leading.borrow() {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                // A follower's loop still beats while it waits.
                _ = tokio::time::sleep(FOLLOWER_BEAT) => continue,
                changed = leading.changed() => {
                    // No leader election any more: nothing will make this replica lead.
                    if changed.is_err() {
                        ctx.metrics.liveness.finished("interruption");
                        shutdown.cancelled().await;
                        return;
                    }
                    continue;
                }
            }
        }
        let failure = match &url {
            None => match ctx.queue.resolve(&name).await {
                Ok(resolved) => {
                    info!(queue = %name, url = %resolved.url, arn = %resolved.arn, "handling interruption events from the queue");
                    url = Some(resolved.url);
                    backoff.reset();
                    None
                }
                Err(e) => Some(e),
            },
            Some(u) => {
                let _pass = ctx.metrics.liveness.pass("interruption");
                crate::failpoint::pass_point("interruption").await;
                let received = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    received = ctx.queue.receive(u) => received,
                };
                let started = std::time::Instant::now();
                ctx.metrics.reconciled("interruption", started, received.is_ok());
                match received {
                    Ok(batch) => {
                        backoff.reset();
                        let u = u.clone();
                        join_all(batch.into_iter().map(|m| handle(&ctx, &u, m))).await;
                        None
                    }
                    Err(e) => {
                        // A queue deleted or re-created under us is looked up again.
                        if e.is_not_found() {
                            url = None;
                        }
                        Some(e)
                    }
                }
            }
        };
        if let Some(e) = failure {
            ctx.metrics
                .cloudprovider_errors
                .with_label_values(&[e.operation, e.code.as_deref().unwrap_or("")])
                .inc();
            let wait = backoff.next_wait();
            error!(error = %e, retry_in = ?wait, "interruption queue call failed; retrying");
            ctx.metrics.liveness.beat("interruption", wait);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// Handles one message: parses it, acts on every node of ours it names, then deletes it. A
/// failed action leaves the message on the queue for redelivery.
async fn handle(ctx: &Context, url: &str, received: Received) {
    let parsed = messages::parse(&received.body);
    let message_type = parsed.as_ref().map_or(UNKNOWN_MESSAGE_TYPE, |m| m.kind.as_str());
    ctx.metrics.interruption_received_messages.with_label_values(&[message_type]).inc();
    match &parsed {
        Err(e) => warn!(error = %e, "interruption message does not parse; deleting it"),
        Ok(message) => {
            if let Some(action) = action(message) {
                for instance_id in &message.instance_ids {
                    if let Err(e) = act(ctx, message, instance_id, &action).await {
                        warn!(error = %e, kind = message.kind.as_str(), instance = %instance_id, "interruption action failed; the message stays on the queue for redelivery");
                        return;
                    }
                }
                crate::failpoint::hit("interruption-before-delete");
            } else {
                debug!(kind = message.kind.as_str(), id = %message.id, "interruption message asks for nothing");
            }
            if let Some(latency) = message.event_time.and_then(|t| SystemTime::now().duration_since(t).ok()) {
                ctx.metrics.interruption_message_latency.observe(latency.as_secs_f64());
            }
        }
    }
    match ctx.queue.delete(url, &received.receipt_handle).await {
        Ok(()) => ctx.metrics.interruption_deleted_messages.inc(),
        Err(e) => {
            ctx.metrics
                .cloudprovider_errors
                .with_label_values(&[e.operation, e.code.as_deref().unwrap_or("")])
                .inc();
            warn!(error = %e, "deleting an interruption message failed; it will be delivered again");
        }
    }
}

/// Why an action could not be taken.
#[derive(Debug, thiserror::Error)]
enum ActionError {
    #[error("the cluster state is not ready: {0}")]
    State(String),
    #[error("deleting node {node}: {source}")]
    Delete {
        node: String,
        #[source]
        source: kube::Error,
    },
}

/// Acts on the node of `instance_id`, when it is one of ours.
async fn act(ctx: &Context, message: &Message, instance_id: &str, action: &Action) -> Result<(), ActionError> {
    ctx.state.ready().await.map_err(|e| ActionError::State(e.to_string()))?;
    let Some(node) = node_of(&ctx.state, instance_id) else {
        debug!(instance = %instance_id, kind = message.kind.as_str(), "interruption message for an instance that is not one of our nodes");
        ctx.metrics.interruption_actions_performed.with_label_values(&[NO_ACTION]).inc();
        return Ok(());
    };
    let name = node.name_any();
    // Karpenter's event types: a rebalance recommendation is Normal, the rest are warnings.
    let type_ = if action.delete { EventType::Warning } else { EventType::Normal };
    publish(&ctx.recorder, node.as_ref(), type_, action.reason, "Interruption", action.note).await;
    if action.mark_unavailable {
        let labels = node.labels();
        if let (Some(instance_type), Some(zone)) = (labels.get(INSTANCE_TYPE_LABEL), labels.get(ZONE_LABEL)) {
            if labels.get(CAPACITY_TYPE_LABEL).map(String::as_str) == Some(CAPACITY_TYPE_SPOT) {
                ctx.cloud.mark_unavailable(&[OfferingId {
                    instance_type: instance_type.clone(),
                    zone: zone.clone(),
                    capacity_type: CAPACITY_TYPE_SPOT.to_string(),
                }]);
            }
        }
    }
    if !action.delete {
        ctx.metrics.interruption_actions_performed.with_label_values(&[NO_ACTION]).inc();
        return Ok(());
    }
    if node.metadata.deletion_timestamp.is_none() {
        let started = Instant::now();
        // With its UID as the precondition: a node re-created under the name is another one.
        match node_ops::delete(&ctx.client, node.as_ref()).await {
            Ok(_) => {}
            Err(source) => return Err(ActionError::Delete { node: name, source }),
        }
        let note = "Interruption triggered termination for the Node";
        publish(
            &ctx.recorder,
            node.as_ref(),
            EventType::Warning,
            "TerminatingOnInterruption",
            "Interruption",
            note,
        )
        .await;
        info!(
            node = %name,
            instance = %instance_id,
            kind = message.kind.as_str(),
            reason = action.reason,
            took = ?started.elapsed(),
            "deleting the node ahead of its interruption; its pods are being placed elsewhere"
        );
    } else {
        debug!(node = %name, "interrupted node is already being deleted");
    }
    // Its pods are to be placed now, not when the drain evicts them.
    ctx.provisioning.trigger();
    ctx.metrics
        .interruption_actions_performed
        .with_label_values(&[CORDON_AND_DRAIN])
        .inc();
    Ok(())
}

/// Our node (launched by a Provisioner) running `instance_id`.
fn node_of(state: &Cluster, instance_id: &str) -> Option<Arc<Node>> {
    state.nodes.state().into_iter().find(|n| {
        n.labels().contains_key(PROVISIONER_NAME_LABEL)
            && n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(instance_id_from_provider_id)
                == Some(instance_id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: Kind, state: Option<&str>) -> Message {
        Message {
            kind,
            instance_ids: vec!["i-0123456789abcdef0".into()],
            state: state.map(str::to_string),
            event_time: None,
            id: "id".into(),
        }
    }

    #[test]
    fn spot_interruptions_delete_the_node_and_mark_the_offering() {
        let a = action(&message(Kind::SpotInterruption, None)).unwrap();
        assert_eq!((a.reason, a.delete, a.mark_unavailable), ("SpotInterrupted", true, true));
    }

    #[test]
    fn rebalance_recommendations_are_only_an_event() {
        let a = action(&message(Kind::RebalanceRecommendation, None)).unwrap();
        assert_eq!(
            (a.reason, a.delete, a.mark_unavailable),
            ("SpotRebalanceRecommendation", false, false)
        );
    }

    #[test]
    fn scheduled_changes_and_state_changes_delete_the_node() {
        let a = action(&message(Kind::ScheduledChange, None)).unwrap();
        assert_eq!((a.reason, a.delete, a.mark_unavailable), ("InstanceUnhealthy", true, false));
        for (state, reason) in [
            ("stopping", "InstanceStopping"),
            ("stopped", "InstanceStopping"),
            ("shutting-down", "InstanceTerminating"),
            ("terminated", "InstanceTerminating"),
        ] {
            let a = action(&message(Kind::StateChange, Some(state))).unwrap();
            assert_eq!((a.reason, a.delete, a.mark_unavailable), (reason, true, false), "{state}");
        }
        assert_eq!(action(&message(Kind::StateChange, Some("running"))), None);
    }

    #[test]
    fn no_ops_ask_for_nothing() {
        assert_eq!(action(&message(Kind::NoOp, None)), None);
    }
}
