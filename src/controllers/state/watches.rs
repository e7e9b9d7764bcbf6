//! The watches behind the cluster view: one reflector per kind, retried with back-off, every
//! failure recorded (what `Cluster::stale` reads) and a watch that ends for good reported to
//! liveness; objects slimmed of what no controller reads; and the kinds decoded one by one
//! (`Tolerant`: a Provisioner or AWSNodeTemplate that cannot be read is left out, named in an
//! event and a status condition, while the others go on).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource};
use tokio_util::sync::CancellationToken;

use super::{ClockSlot, WatchError};
use crate::apis::keys::LAST_APPLIED_ANNOTATION;
use crate::apis::v1alpha1::AwsNodeTemplate;
use crate::apis::v1alpha5::Provisioner;
use crate::controllers::supervisor::Liveness;

/// First retry delay of a failed watch (`watch_backoff`).
const WATCH_RETRY_MIN: Duration = Duration::from_millis(500);
/// Longest retry delay of a failed watch before jitter (`watch_backoff`).
const WATCH_RETRY_MAX: Duration = Duration::from_secs(3);
/// A watch's retry delays start over after this long without a failure (`watch_backoff`).
const WATCH_RETRY_RESET: Duration = Duration::from_secs(60);
/// The watches' retry delays: from 0.5 s doubling to 3 s, each jittered up to twice as long (so at
/// most 6 s), started over after a minute without failure. Kubernetes clients wait up to 30 s; a
/// shorter cap brings the view back within seconds of an API server's return, at about two cheap
/// requests a second for all ten watches while it is away.
pub(super) fn watch_backoff() -> kube::runtime::utils::ResetTimerBackoff<watcher::ExponentialBackoff> {
    kube::runtime::utils::ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(WATCH_RETRY_MIN)
                .with_max_delay(WATCH_RETRY_MAX)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        WATCH_RETRY_RESET,
    )
}

/// Drops what no controller reads but every object carries: the field managers' records
/// (`managedFields`, often the larger part of a Pod) and `kubectl apply`'s copy of the last applied
/// object. The caches hold every Pod of the cluster, so this is most of their memory.
pub(super) fn slim<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
    if let Some(annotations) = object.meta_mut().annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// A kind whose watched objects are decoded one by one (`Watches::reflect_tolerant`).
pub trait Tolerant: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static {
    /// An object with only `metadata`: what the store forgets when the real one cannot be used.
    fn placeholder(metadata: kube::api::ObjectMeta) -> Self;
}

impl Tolerant for Provisioner {
    fn placeholder(metadata: kube::api::ObjectMeta) -> Self {
        Provisioner {
            metadata,
            spec: Default::default(),
            status: None,
        }
    }
}

impl Tolerant for AwsNodeTemplate {
    fn placeholder(metadata: kube::api::ObjectMeta) -> Self {
        AwsNodeTemplate {
            metadata,
            spec: Default::default(),
            status: None,
        }
    }
}

/// `event` of raw objects as one of `K`: an object that does not decode is left out of the store
/// (an update of one that did removes it), and named with why in the second value, while every
/// other object goes on. A decoded list would fail whole for one such object and leave every
/// controller without Provisioners (what an object kept under Karpenter's CRDs could do).
pub fn tolerant_event<K: Tolerant>(
    event: watcher::Event<kube::api::DynamicObject>,
) -> (Option<watcher::Event<K>>, Option<(kube::api::DynamicObject, String)>) {
    let decode = |object: &kube::api::DynamicObject| -> Result<K, String> {
        let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
        serde_path_to_error::deserialize::<_, K>(value).map_err(|e| {
            let path = e.path().to_string();
            format!("{path}: {}", e.into_inner())
        })
    };
    match event {
        watcher::Event::Init => (Some(watcher::Event::Init), None),
        watcher::Event::InitDone => (Some(watcher::Event::InitDone), None),
        watcher::Event::InitApply(object) => match decode(&object) {
            Ok(k) => (Some(watcher::Event::InitApply(k)), None),
            Err(why) => (None, Some((object, why))),
        },
        watcher::Event::Apply(object) => match decode(&object) {
            Ok(k) => (Some(watcher::Event::Apply(k)), None),
            Err(why) => {
                let gone = K::placeholder(object.metadata.clone());
                (Some(watcher::Event::Delete(gone)), Some((object, why)))
            }
        },
        watcher::Event::Delete(object) => {
            let k = decode(&object).unwrap_or_else(|_| K::placeholder(object.metadata.clone()));
            (Some(watcher::Event::Delete(k)), None)
        }
    }
}

/// The condition type that says whether the controllers can read an object (Karpenter v1's
/// NodePool and EC2NodeClass use the same type).
pub const VALIDATION_CONDITION: &str = "ValidationSucceeded";

/// The `status.conditions` to write on `object` when `problem` (why it cannot be read, or None)
/// differs from what its `ValidationSucceeded` condition says; None when nothing changes. An
/// object that can be read is marked only when it was marked unreadable before, so objects that
/// were always fine are never written. Other conditions are kept; the transition time moves
/// only when the status does.
pub fn validation_conditions(
    object: &kube::api::DynamicObject,
    problem: Option<&str>,
    now: jiff::Timestamp,
) -> Option<Vec<serde_json::Value>> {
    let existing: Vec<serde_json::Value> = object.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let current = existing.iter().find(|c| c["type"] == VALIDATION_CONDITION);
    let (status, reason, message) = match problem {
        Some(why) => ("False", "InvalidObject", format!("cannot be read; ignored until fixed: {why}")),
        None if current.is_some_and(|c| c["status"] == "False") => ("True", "Valid", "can be read".to_string()),
        None => return None,
    };
    if current.is_some_and(|c| c["status"] == status && c["message"] == message.as_str()) {
        return None;
    }
    let since = current
        .filter(|c| c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{now:.0}"));
    let mut condition = serde_json::json!({
        "type": VALIDATION_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    });
    if let Some(generation) = object.metadata.generation {
        condition["observedGeneration"] = generation.into();
    }
    let mut conditions: Vec<serde_json::Value> = existing.into_iter().filter(|c| c["type"] != VALIDATION_CONDITION).collect();
    conditions.push(condition);
    Some(conditions)
}

/// A store of every `K`, watched as `Cluster::start` watches Provisioners and AWSNodeTemplates
/// (`Watches::reflect_tolerant`) until `shutdown`: for a kind of one's own, e.g. a test's CRD
/// looser than its type.
pub fn watch_tolerant<K: Tolerant>(client: &kube::Client, shutdown: &CancellationToken, liveness: &Liveness) -> Store<K> {
    let errors = Arc::default();
    let w = Watches {
        shutdown,
        errors: &errors,
        liveness,
        clock: &ClockSlot::default(),
    };
    w.reflect_tolerant::<K>(client, |_| {})
}

/// What every watch of `Cluster::start` shares.
pub(super) struct Watches<'a> {
    pub(super) shutdown: &'a CancellationToken,
    pub(super) errors: &'a Arc<Mutex<Option<WatchError>>>,
    pub(super) liveness: &'a Liveness,
    pub(super) clock: &'a ClockSlot,
}

impl Watches<'_> {
    /// A reflector store of every `K`, kept up to date until `shutdown`; `on_change` sees every
    /// object created, changed or deleted. A failing watch is retried with `watch_backoff`,
    /// recorded as the last watch failure, and logged at warn with the kind: a forbidden list
    /// leaves the store unsynced, and the controllers waiting on it idle, so an operator must see
    /// why.
    pub(super) fn reflect<K>(&self, api: Api<K>, on_change: impl Fn(&K) + Send + 'static) -> Store<K>
    where
        K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let (reader, writer) = reflector::store();
        let stream = watcher(api, watcher::Config::default())
            .backoff(watch_backoff())
            .modify(slim)
            .reflect(writer)
            .touched_objects();
        self.follow(stream, on_change);
        reader
    }

    /// `reflect` for a kind whose objects are decoded one by one (`tolerant_event`): one that
    /// cannot be used is left out, logged and given a Warning event `InvalidObject` naming the
    /// field and why; the watch and every other object go on.
    pub(super) fn reflect_tolerant<K: Tolerant>(&self, client: &kube::Client, on_change: impl Fn(&K) + Send + 'static) -> Store<K> {
        let (reader, writer) = reflector::store();
        let resource = kube::api::ApiResource::erase::<K>(&());
        let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
        let recorder = crate::controllers::events::recorder(client);
        let kind = K::kind(&()).to_string();
        let statuses = api.clone();
        let stream =
            futures::TryStreamExt::try_filter_map(watcher(api, watcher::Config::default()).backoff(watch_backoff()), move |event| {
                // The object as stored, for its ValidationSucceeded condition.
                let stored = match &event {
                    watcher::Event::Apply(object) | watcher::Event::InitApply(object) => Some(object.clone()),
                    _ => None,
                };
                let (event, unusable) = tolerant_event::<K>(event);
                let problem = unusable.as_ref().map(|(_, why)| why.clone());
                if let Some(stored) = stored {
                    if let Some(conditions) = validation_conditions(&stored, problem.as_deref(), jiff::Timestamp::now()) {
                        let (api, name, kind) = (statuses.clone(), stored.metadata.name.clone().unwrap_or_default(), kind.clone());
                        tokio::spawn(async move {
                            let patch = serde_json::json!({"status": {"conditions": conditions}});
                            if let Err(e) = api
                                .patch_status(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
                                .await
                            {
                                tracing::warn!(kind, name, error = %e, "writing the ValidationSucceeded condition");
                            }
                        });
                    }
                }
                if let Some((object, why)) = unusable {
                    let name = object.metadata.name.clone().unwrap_or_default();
                    tracing::error!(kind, name, reason = %why, "cannot use this object; it is left out until it is fixed");
                    let reference = object.object_ref(&resource);
                    let recorder = recorder.clone();
                    let note = format!("{kind} {name} cannot be used and is ignored: {why}");
                    tokio::spawn(async move {
                        crate::controllers::events::publish_to(
                            &recorder,
                            &reference,
                            kube::runtime::events::EventType::Warning,
                            "InvalidObject",
                            "Reading",
                            &note,
                        )
                        .await;
                    });
                }
                futures::future::ready(Ok(event))
            })
            .modify(slim)
            .reflect(writer)
            .touched_objects();
        self.follow(stream, on_change);
        reader
    }

    /// Feeds `stream` to `on_change` until shutdown, recording and logging its failures. A
    /// panic in `on_change` is logged and the watch goes on (the store has the object already);
    /// a stream that ends is reported to the process's liveness.
    fn follow<K>(
        &self,
        stream: impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
        on_change: impl Fn(&K) + Send + 'static,
    ) where
        K: Resource + Send + 'static,
        K::DynamicType: Default,
    {
        let shutdown = self.shutdown.clone();
        let errors = self.errors.clone();
        let liveness = self.liveness.clone();
        let clock = self.clock.clone();
        let kind = K::kind(&K::DynamicType::default()).to_string();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    next = stream.next() => match next {
                        Some(Ok(object)) => {
                            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_change(&object))) {
                                let panic = crate::controllers::supervisor::panic_message(panic.as_ref());
                                tracing::error!(kind, %panic, "a handler of a watched change panicked; the watch goes on");
                            }
                        }
                        Some(Err(e)) => {
                            *errors.lock().unwrap_or_else(|e| e.into_inner()) = Some(WatchError { kind: kind.clone(), at: clock.instant() });
                            tracing::warn!(kind, error = %e, "watch failed; retrying with back-off");
                        }
                        None => {
                            tracing::error!(kind, "watch ended; the cluster view of this kind no longer changes");
                            liveness.broken(format!("the watch of {kind} ended"));
                            return;
                        }
                    }
                }
            }
        });
    }
}
