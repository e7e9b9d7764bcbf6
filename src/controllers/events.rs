//! Events: the one recorder every controller publishes through, and a publish that only logs
//! its failures (an event is never worth failing a reconcile for).

use k8s_openapi::api::core::v1::ObjectReference;
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
    publish_to(recorder, &object.object_ref(&()), type_, reason, action, note).await;
}

/// `publish` on the object `reference` names: for events sent after the object itself is gone
/// from the caller's hands (a background task need not keep a whole Pod to name it).
pub async fn publish_to(recorder: &Recorder, reference: &ObjectReference, type_: EventType, reason: &str, action: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, reference).await {
        debug!(error = %e, reason, "publishing event");
    }
}
