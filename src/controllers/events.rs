//! Events: the one recorder every controller publishes through, and a publish that only logs
//! its failures (an event is never worth failing a reconcile for).

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;
use tracing::debug;

/// The event recorder every controller of karpenter-rs uses.
pub fn recorder(client: &kube::Client) -> Recorder {
    let reporter = Reporter {
        controller: "karpenter-rs".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    Recorder::new(client.clone(), reporter)
}

/// Publishes an event on `object`; a failure is only logged.
pub async fn publish<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    object: &K,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &object.object_ref(&())).await {
        debug!(error = %e, reason, "publishing event");
    }
}
