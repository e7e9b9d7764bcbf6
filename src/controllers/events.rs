//! Events: the one recorder every controller publishes through, and a publish that only logs
//! its failures (an event is never worth failing a reconcile for) and sends an event again only
//! after `DEDUPE_PERIOD`: the same object, reason and note within it is dropped, as Karpenter's
//! recorder does (core@v0.27.0:pkg/events/recorder.go, 2 minutes), so a pod pending for an hour
//! costs a few dozen event writes, not one per pass.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Resource;
use tracing::debug;

/// How long the same event (object, reason, note) is not sent again.
pub const DEDUPE_PERIOD: Duration = Duration::from_secs(120);
/// How many recent events are remembered before the expired ones are forgotten.
const DEDUPE_PRUNE_AT: usize = 4096;

/// The replica's name (`--pod-name`) as the events' reporting instance, set once at start.
static INSTANCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Names this replica in every event it records from now on (the binary's `--pod-name`).
pub fn set_instance(name: &str) {
    let _ = INSTANCE.set(name.to_string());
}

/// The event recorder every controller of karpenter-rs uses.
pub fn recorder(client: &kube::Client) -> Recorder {
    let reporter = Reporter {
        controller: "karpenter-rs".into(),
        instance: INSTANCE.get().cloned(),
    };
    Recorder::new(client.clone(), reporter)
}

/// What makes two events the same: the object (by kind, namespace, name and uid), the reason
/// and the note.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventKey {
    object: (Option<String>, Option<String>, Option<String>, Option<String>),
    reason: String,
    note: String,
}

impl EventKey {
    /// The key of an event with `reason` and `note` on `reference`.
    pub fn new(reference: &ObjectReference, reason: &str, note: &str) -> EventKey {
        EventKey {
            object: (
                reference.kind.clone(),
                reference.namespace.clone(),
                reference.name.clone(),
                reference.uid.clone(),
            ),
            reason: reason.to_string(),
            note: note.to_string(),
        }
    }
}

/// The events sent recently, by key.
#[derive(Debug, Default)]
pub struct Dedupe {
    sent: HashMap<EventKey, Instant>,
}

impl Dedupe {
    /// Whether an event with `key` is to be sent at `now` (none with that key within
    /// `DEDUPE_PERIOD`); if so it counts as sent.
    pub fn admit(&mut self, key: EventKey, now: Instant) -> bool {
        if self.sent.len() >= DEDUPE_PRUNE_AT {
            self.sent.retain(|_, at| now.saturating_duration_since(*at) < DEDUPE_PERIOD);
        }
        match self.sent.get(&key) {
            Some(at) if now.saturating_duration_since(*at) < DEDUPE_PERIOD => false,
            _ => {
                self.sent.insert(key, now);
                true
            }
        }
    }

    /// How many events are remembered.
    pub fn len(&self) -> usize {
        self.sent.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.sent.is_empty()
    }
}

/// The process's record of recent events: every recorder publishes through `publish_to`.
static SENT: LazyLock<Mutex<Dedupe>> = LazyLock::new(Mutex::default);

/// Publishes an event on `object`; a failure is only logged, a repeat within `DEDUPE_PERIOD` dropped.
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
    let note: String = note.chars().take(1024).collect();
    let key = EventKey::new(reference, reason, &note);
    if !SENT.lock().unwrap_or_else(PoisonError::into_inner).admit(key, Instant::now()) {
        debug!(reason, "event sent within the last {DEDUPE_PERIOD:?}; not sent again");
        return;
    }
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, reference).await {
        debug!(error = %e, reason, "publishing event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_same_event_is_sent_once_per_period() {
        let mut dedupe = Dedupe::default();
        let t0 = Instant::now();
        let key = |reason: &str, note: &str| EventKey::new(&pod("a", "u1"), reason, note);
        assert!(dedupe.admit(key("FailedProvisioning", "no fit"), t0));
        assert!(
            !dedupe.admit(key("FailedProvisioning", "no fit"), t0 + Duration::from_secs(10)),
            "a pass later"
        );
        assert!(dedupe.admit(key("FailedProvisioning", "another reason"), t0), "another note");
        assert!(dedupe.admit(key("Nominated", "no fit"), t0), "another reason");
        assert!(
            dedupe.admit(EventKey::new(&pod("a", "u2"), "FailedProvisioning", "no fit"), t0),
            "a pod of the same name made again"
        );
        assert!(
            dedupe.admit(key("FailedProvisioning", "no fit"), t0 + DEDUPE_PERIOD),
            "once the period is over"
        );
    }

    #[test]
    fn expired_events_are_forgotten_once_many_are_remembered() {
        let mut dedupe = Dedupe::default();
        let t0 = Instant::now();
        for i in 0..DEDUPE_PRUNE_AT {
            assert!(dedupe.admit(EventKey::new(&pod(&format!("p{i}"), "u"), "R", "n"), t0));
        }
        assert_eq!(dedupe.len(), DEDUPE_PRUNE_AT);
        assert!(dedupe.admit(EventKey::new(&pod("late", "u"), "R", "n"), t0 + DEDUPE_PERIOD));
        assert_eq!(dedupe.len(), 1, "only the new one is left");
    }
}
