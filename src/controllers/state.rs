//! The one view of the cluster every controller reads (Karpenter's `state.Cluster`,
//! `core@v0.27.0:pkg/controllers/state/cluster.go`): one watch per kind in the process, started
//! once by the controllers' wiring and handed to provisioning, deprovisioning and termination.
//! Read-only for its users: they change the cluster through the API server and see the result
//! here. Besides the caches it keeps what no object records: which nodes a provisioning pass
//! expects pods on soon (nominations), and a generation that moves with every change to a Node,
//! a Pod or a Provisioner (what tells consolidation the cluster may have changed).
//!
//! It also knows when it may be out of date: while any watch fails (the API server or etcd down
//! or restarting) and for `SETTLE_AFTER_WATCH_ERROR` after its last failure, long enough for every
//! watch to reconnect (`watch_backoff` retries at most 6 s apart) and, after a restart, to list
//! again. Provisioning and deprovisioning wait for that (`Cluster::stale`) rather than launch for
//! pods that already have a node or delete a node that got pods meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource};
use tokio_util::sync::CancellationToken;

use crate::apis::v1alpha1::AwsNodeTemplate;
use crate::apis::v1alpha5::Provisioner;
use crate::controllers::supervisor::Liveness;

/// Called with every pod created, changed or deleted.
type PodHook = Box<dyn Fn(&Pod) + Send + Sync>;

/// The pod hook of the current term: each term of leadership makes its controllers afresh and
/// sets its own, which replaces the last one (the old term's batcher would otherwise go on
/// receiving every trigger, and the new term's hear of pending pods only from its 10 s retrigger).
#[derive(Clone, Default)]
struct PodHookSlot(Arc<RwLock<Option<PodHook>>>);

impl PodHookSlot {
    fn set(&self, hook: PodHook) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    fn call(&self, pod: &Pod) {
        if let Some(hook) = self.0.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            hook(pod);
        }
    }
}

/// The caches and the bookkeeping shared by the controllers.
pub struct Cluster {
    /// Nodes.
    pub nodes: Store<Node>,
    /// Pods.
    pub pods: Store<Pod>,
    /// Provisioners.
    pub provisioners: Store<Provisioner>,
    /// AWSNodeTemplates.
    pub templates: Store<AwsNodeTemplate>,
    /// DaemonSets.
    pub daemonsets: Store<DaemonSet>,
    /// PersistentVolumeClaims.
    pub claims: Store<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Store<PersistentVolume>,
    /// StorageClasses.
    pub storage_classes: Store<StorageClass>,
    /// Namespaces.
    pub namespaces: Store<Namespace>,
    /// PodDisruptionBudgets.
    pub pdbs: Store<PodDisruptionBudget>,
    generation: Arc<AtomicU64>,
    on_pod: PodHookSlot,
    nominations: Mutex<HashMap<String, Instant>>,
    last_watch_error: Arc<Mutex<Option<WatchError>>>,
}

/// The last failure of any watch.
#[derive(Clone, Debug)]
struct WatchError {
    kind: String,
    at: Instant,
}

/// How long after a watch last failed the view may still be out of date.
pub const SETTLE_AFTER_WATCH_ERROR: Duration = Duration::from_secs(15);

/// Why the view may be out of date at `now`, given the last watch failure (kind, when): `None`
/// once `SETTLE_AFTER_WATCH_ERROR` has passed since it. Pure.
pub fn staleness(last_error: Option<(&str, Instant)>, now: Instant) -> Option<String> {
    let (kind, at) = last_error?;
    let ago = now.saturating_duration_since(at);
    (ago < SETTLE_AFTER_WATCH_ERROR).then(|| {
        format!(
            "the {kind} watch failed {}s ago; the cluster view settles {}s after the last watch failure",
            ago.as_secs(),
            SETTLE_AFTER_WATCH_ERROR.as_secs()
        )
    })
}

/// The watches' retry delays: from 0.5 s doubling to 3 s, each jittered up to twice as long (so at
/// most 6 s), started over after a minute without failure. Kubernetes clients wait up to 30 s; a
/// shorter cap brings the view back within seconds of an API server's return, at about two cheap
/// requests a second for all ten watches while it is away.
fn watch_backoff() -> kube::runtime::utils::ResetTimerBackoff<watcher::ExponentialBackoff> {
    kube::runtime::utils::ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(3))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(60),
    )
}

impl Cluster {
    /// Starts one watch per kind, kept up to date until `shutdown`. A watch that ends for good
    /// (its stream closed) is reported to `liveness`, so `/healthz` fails rather than the
    /// controllers going on with a view that no longer changes.
    pub fn start(client: &kube::Client, shutdown: &CancellationToken, liveness: &Liveness) -> Arc<Cluster> {
        let generation = Arc::new(AtomicU64::new(0));
        let on_pod = PodHookSlot::default();
        let bump = |generation: &Arc<AtomicU64>| {
            let generation = generation.clone();
            move || {
                generation.fetch_add(1, Ordering::Relaxed);
            }
        };
        let (pod_bump, pod_hook) = (bump(&generation), on_pod.clone());
        let node_bump = bump(&generation);
        let provisioner_bump = bump(&generation);
        let errors: Arc<Mutex<Option<WatchError>>> = Arc::default();
        let w = Watches {
            shutdown,
            errors: &errors,
            liveness,
        };
        Arc::new(Cluster {
            pods: w.reflect(Api::all(client.clone()), move |pod: &Pod| {
                pod_bump();
                pod_hook.call(pod);
            }),
            nodes: w.reflect(Api::all(client.clone()), move |_: &Node| node_bump()),
            provisioners: w.reflect_tolerant::<Provisioner>(client, move |_| provisioner_bump()),
            templates: w.reflect_tolerant::<AwsNodeTemplate>(client, |_| {}),
            daemonsets: w.reflect(Api::all(client.clone()), |_: &DaemonSet| {}),
            claims: w.reflect(Api::all(client.clone()), |_: &PersistentVolumeClaim| {}),
            volumes: w.reflect(Api::all(client.clone()), |_: &PersistentVolume| {}),
            storage_classes: w.reflect(Api::all(client.clone()), |_: &StorageClass| {}),
            namespaces: w.reflect(Api::all(client.clone()), |_: &Namespace| {}),
            pdbs: w.reflect(Api::all(client.clone()), |_: &PodDisruptionBudget| {}),
            generation,
            on_pod,
            nominations: Mutex::new(HashMap::new()),
            last_watch_error: errors.clone(),
        })
    }

    /// Why the view may be out of date now (`staleness`), or `None`.
    pub fn stale(&self) -> Option<String> {
        let last = self.last_watch_error.lock().unwrap_or_else(|e| e.into_inner()).clone();
        staleness(last.as_ref().map(|e| (e.kind.as_str(), e.at)), Instant::now())
    }

    /// Waits until the view has settled (`stale` is `None`), at most `limit`; returns why it is
    /// still stale when the limit passes.
    pub async fn settled(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let Some(why) = self.stale() else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(why);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Sets what is called with every pod change (provisioning's batcher trigger), in place of
    /// what an earlier call set (an earlier term's).
    pub fn on_pod_change(&self, hook: impl Fn(&Pod) + Send + Sync + 'static) {
        self.on_pod.set(Box::new(hook));
    }

    /// Waits until every cache has its initial list.
    pub async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.nodes.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.provisioners.wait_until_ready().await?;
        self.templates.wait_until_ready().await?;
        self.daemonsets.wait_until_ready().await?;
        self.claims.wait_until_ready().await?;
        self.volumes.wait_until_ready().await?;
        self.storage_classes.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        self.pdbs.wait_until_ready().await
    }

    /// The cached pods bound to a node, by node name.
    pub fn pods_by_node(&self) -> HashMap<String, Vec<Arc<Pod>>> {
        let mut by_node: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
        for pod in self.pods.state() {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                by_node.entry(node).or_default().push(pod);
            }
        }
        by_node
    }

    /// Moves with every change to a Node, a Pod or a Provisioner.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Records that a provisioning pass expects pods to land on `node` within `period`
    /// (Karpenter's nomination, 20 s): deprovisioning leaves it alone meanwhile.
    pub fn nominate(&self, node: &str, period: Duration) {
        let mut nominations = self.nominations.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        nominations.retain(|_, until| *until > now);
        nominations.insert(node.to_string(), now + period);
    }

    /// Whether `node` is nominated now.
    pub fn is_nominated(&self, node: &str) -> bool {
        let nominations = self.nominations.lock().unwrap_or_else(|e| e.into_inner());
        nominations.get(node).is_some_and(|until| *until > Instant::now())
    }
}

/// Drops what no controller reads but every object carries: the field managers' records
/// (`managedFields`, often the larger part of a Pod) and `kubectl apply`'s copy of the last applied
/// object. The caches hold every Pod of the cluster, so this is most of their memory.
fn slim<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
    if let Some(annotations) = object.meta_mut().annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

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

/// What every watch of `Cluster::start` shares.
struct Watches<'a> {
    shutdown: &'a CancellationToken,
    errors: &'a Arc<Mutex<Option<WatchError>>>,
    liveness: &'a Liveness,
}

impl Watches<'_> {
    /// A reflector store of every `K`, kept up to date until `shutdown`; `on_change` sees every
    /// object created, changed or deleted. A failing watch is retried with `watch_backoff`,
    /// recorded as the last watch failure, and logged at warn with the kind: a forbidden list
    /// leaves the store unsynced, and the controllers waiting on it idle, so an operator must see
    /// why.
    fn reflect<K>(&self, api: Api<K>, on_change: impl Fn(&K) + Send + 'static) -> Store<K>
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
    fn reflect_tolerant<K: Tolerant>(&self, client: &kube::Client, on_change: impl Fn(&K) + Send + 'static) -> Store<K> {
        let (reader, writer) = reflector::store();
        let resource = kube::api::ApiResource::erase::<K>(&());
        let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
        let recorder = crate::controllers::events::recorder(client);
        let kind = K::kind(&()).to_string();
        let stream = futures::TryStreamExt::try_filter_map(watcher(api, watcher::Config::default()).backoff(watch_backoff()), move |event| {
            let (event, unusable) = tolerant_event::<K>(event);
            if let Some((object, why)) = unusable {
                let name = object.metadata.name.clone().unwrap_or_default();
                tracing::error!(kind, name, reason = %why, "cannot use this object; it is left out until it is fixed");
                let reference = object.object_ref(&resource);
                let recorder = recorder.clone();
                let note = format!("{kind} {name} cannot be used and is ignored: {why}");
                tokio::spawn(async move {
                    crate::controllers::events::publish_to(&recorder, &reference, kube::runtime::events::EventType::Warning, "InvalidObject", "Reading", &note)
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
    fn follow<K>(&self, stream: impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static, on_change: impl Fn(&K) + Send + 'static)
    where
        K: Resource + Send + 'static,
        K::DynamicType: Default,
    {
        let shutdown = self.shutdown.clone();
        let errors = self.errors.clone();
        let liveness = self.liveness.clone();
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
                            *errors.lock().unwrap_or_else(|e| e.into_inner()) = Some(WatchError { kind: kind.clone(), at: Instant::now() });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A new term's hook replaces the last term's: pod changes reach only the current one.
    #[test]
    fn the_latest_pod_hook_is_the_one_called() {
        use std::sync::atomic::AtomicU32;
        let slot = PodHookSlot::default();
        slot.call(&Pod::default());
        let (first, second) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let counter = |c: &Arc<AtomicU32>| {
            let c = c.clone();
            Box::new(move |_: &Pod| {
                c.fetch_add(1, Ordering::Relaxed);
            }) as PodHook
        };
        slot.set(counter(&first));
        slot.call(&Pod::default());
        slot.set(counter(&second));
        slot.call(&Pod::default());
        slot.call(&Pod::default());
        assert_eq!((first.load(Ordering::Relaxed), second.load(Ordering::Relaxed)), (1, 2));
    }

    #[test]
    fn an_object_that_does_not_decode_is_left_out_named_and_the_others_go_on() {
        let raw = |value: serde_json::Value| -> kube::api::DynamicObject { serde_json::from_value(value).unwrap() };
        let good = raw(serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
            "metadata": {"name": "good"}, "spec": {"ttlSecondsAfterEmpty": 30, "futureField": true}
        }));
        // What Karpenter's CRD could hold and ours cannot read: a weight that is not a number.
        let bad = raw(serde_json::json!({
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
            "metadata": {"name": "bad"}, "spec": {"weight": "heavy"}
        }));
        let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::InitApply(good.clone()));
        assert!(matches!(event, Some(watcher::Event::InitApply(p)) if p.spec.ttl_seconds_after_empty == Some(30)));
        assert!(unusable.is_none());
        let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::InitApply(bad.clone()));
        assert!(event.is_none(), "left out of the list");
        let (object, why) = unusable.expect("named");
        assert_eq!(object.metadata.name.as_deref(), Some("bad"));
        assert!(why.starts_with("spec.weight: invalid type"), "{why}");
        // An update that breaks a good object takes it out of the store; deleting it works too.
        let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::Apply(bad.clone()));
        assert!(matches!(event, Some(watcher::Event::Delete(p)) if p.metadata.name.as_deref() == Some("bad")));
        assert!(unusable.is_some());
        let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::Delete(bad));
        assert!(matches!(event, Some(watcher::Event::Delete(p)) if p.metadata.name.as_deref() == Some("bad")));
        assert!(unusable.is_none());
        assert!(matches!(tolerant_event::<Provisioner>(watcher::Event::Init).0, Some(watcher::Event::Init)));
        assert!(matches!(tolerant_event::<Provisioner>(watcher::Event::InitDone).0, Some(watcher::Event::InitDone)));
        // A store fed these holds the good object only.
        let (reader, mut writer) = reflector::store::<Provisioner>();
        for event in [watcher::Event::Init, watcher::Event::InitApply(good), watcher::Event::InitDone] {
            if let (Some(event), _) = tolerant_event::<Provisioner>(event) {
                writer.apply_watcher_event(&event);
            }
        }
        let names: Vec<String> = reader.state().iter().filter_map(|p| p.metadata.name.clone()).collect();
        assert_eq!(names, ["good"]);
    }

    #[test]
    fn the_view_settles_a_while_after_the_last_watch_failure() {
        let now = Instant::now();
        assert_eq!(staleness(None, now), None);
        let why = staleness(Some(("Node", now - Duration::from_secs(3))), now).unwrap();
        assert!(why.contains("Node watch failed 3s ago"), "{why}");
        assert!(staleness(Some(("Pod", now - SETTLE_AFTER_WATCH_ERROR + Duration::from_millis(1))), now).is_some());
        assert_eq!(staleness(Some(("Pod", now - SETTLE_AFTER_WATCH_ERROR)), now), None);
        // A reconnecting watch retries at most 6 s apart, well inside the window.
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = (0..20).filter_map(|_| backoff.next()).collect();
        assert_eq!(delays.len(), 20);
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(6)), "{delays:?}");
        assert!(delays.iter().all(|d| *d < SETTLE_AFTER_WATCH_ERROR));
    }

    #[test]
    fn cached_objects_drop_managed_fields_and_the_last_applied_copy_only() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web",
                "annotations": {LAST_APPLIED: "{\"big\": true}", "team": "a"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {"containers": [{"name": "app"}], "nodeName": "n1"}
        }))
        .unwrap();
        slim(&mut pod);
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(
            pod.metadata.annotations,
            Some(std::collections::BTreeMap::from([("team".to_string(), "a".to_string())]))
        );
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
    }
}
