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
//!
//! Per node, `nodes_view` gives one `StateNode` (`node.rs`): its unfinished pods, nomination and
//! instance type, grouped once per read, so no controller regroups pods by node itself.
//!
//! Nominations and staleness are timed on the view's `Clock`: the real one from `start`, and
//! from then on the controllers' (`set_clock`, which `run_all` calls with `Shared::clock`), so a
//! test's `FakeClock` decides when a nomination lapses and when the view has settled.

pub mod node;
pub mod plans;
mod watches;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, Store};
use kube::{Api, Resource};
use tokio_util::sync::CancellationToken;

use crate::apis::v1alpha1::AwsNodeTemplate;
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::shared_types::SharedTypes;
use crate::controllers::clock::{Clock, SystemClock};
use crate::controllers::supervisor::Liveness;
pub use node::StateNode;
pub use plans::{Plan, Plans};
pub use watches::{tolerant_event, validation_conditions, watch_tolerant, Tolerant, VALIDATION_CONDITION};
use watches::Watches;
#[cfg(test)]
use watches::{slim, watch_backoff};

/// Called with every pod created, changed or deleted.
type PodHook = Box<dyn Fn(&Pod) + Send + Sync>;

/// The pod hooks of the current term, by the controller that set them: each term of leadership
/// makes its controllers afresh and each sets its own, which replaces the last term's under the
/// same name (the old term's batcher would otherwise go on receiving every trigger, and the new
/// term's hear of pending pods only from its 10 s retrigger).
#[derive(Clone, Default)]
struct PodHooks(Arc<RwLock<Vec<(&'static str, PodHook)>>>);

impl PodHooks {
    fn set(&self, name: &'static str, hook: PodHook) {
        let mut hooks = self.0.write().unwrap_or_else(|e| e.into_inner());
        hooks.retain(|(n, _)| *n != name);
        hooks.push((name, hook));
    }

    fn call(&self, pod: &Pod) {
        for (_, hook) in self.0.read().unwrap_or_else(|e| e.into_inner()).iter() {
            hook(pod);
        }
    }
}

/// The clock of the view, shared with its watches' tasks (which time their failures on it) and
/// replaced by `Cluster::set_clock`.
#[derive(Clone)]
struct ClockSlot(Arc<RwLock<Arc<dyn Clock>>>);

impl Default for ClockSlot {
    fn default() -> Self {
        ClockSlot(Arc::new(RwLock::new(Arc::new(SystemClock))))
    }
}

impl ClockSlot {
    fn get(&self) -> Arc<dyn Clock> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn instant(&self) -> Instant {
        self.get().instant()
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
    on_pod: PodHooks,
    nominations: Mutex<HashMap<String, Instant>>,
    /// The pods planned onto each node launched for them, until the binder is done with them.
    pub plans: Plans,
    /// The instance types as the last provisioning pass translated the catalogue for each
    /// Provisioner (what a node that has not initialised is expected to offer, and its price).
    pub types: SharedTypes,
    last_watch_error: Arc<Mutex<Option<WatchError>>>,
    synced: Synced,
    clock: ClockSlot,
}

/// A watch of the cluster view ended before its first list was in (the process is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("a watch of the cluster view ended before its first list was in")]
pub struct ViewClosed;

/// Whether every store of the view has its first list, for any number of waiting tasks.
///
/// kube's `Store::wait_until_ready` keeps one waker (a oneshot receiver behind a mutex): of
/// several tasks waiting at once only the last to poll is woken, and the others wait for good.
/// One task here is the stores' only waiter and passes the outcome on through a watch channel,
/// which wakes every waiter.
#[derive(Clone)]
pub struct Synced(tokio::sync::watch::Receiver<Option<bool>>);

impl Synced {
    /// Follows `first_lists` (each store's `wait_until_ready`) in a task of its own.
    pub fn follow(first_lists: Vec<futures::future::BoxFuture<'static, Result<(), reflector::store::WriterDropped>>>) -> Synced {
        let (tx, rx) = tokio::sync::watch::channel(None);
        tokio::spawn(async move {
            let mut all = true;
            for first_list in first_lists {
                all &= first_list.await.is_ok();
            }
            let _ = tx.send(Some(all));
        });
        Synced(rx)
    }

    /// Waits until every store has its first list.
    pub async fn wait(&self) -> Result<(), ViewClosed> {
        let mut rx = self.0.clone();
        match rx.wait_for(Option::is_some).await.map(|v| *v) {
            Ok(Some(true)) => Ok(()),
            _ => Err(ViewClosed),
        }
    }
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

/// `store`'s first list, as a future `Synced` can wait on.
fn first_list<K>(store: &Store<K>) -> futures::future::BoxFuture<'static, Result<(), reflector::store::WriterDropped>>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let store = store.clone();
    Box::pin(async move { store.wait_until_ready().await })
}

/// How often `Cluster::settled` looks again whether the view is still stale.
const SETTLED_POLL: Duration = Duration::from_millis(500);

impl Cluster {
    /// Starts one watch per kind, kept up to date until `shutdown`. A watch that ends for good
    /// (its stream closed) is reported to `liveness`, so `/healthz` fails rather than the
    /// controllers going on with a view that no longer changes.
    pub fn start(client: &kube::Client, shutdown: &CancellationToken, liveness: &Liveness) -> Arc<Cluster> {
        let generation = Arc::new(AtomicU64::new(0));
        let on_pod = PodHooks::default();
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
        let clock = ClockSlot::default();
        let w = Watches {
            shutdown,
            errors: &errors,
            liveness,
            clock: &clock,
        };
        let pods = w.reflect(Api::all(client.clone()), move |pod: &Pod| {
            pod_bump();
            pod_hook.call(pod);
        });
        let nodes = w.reflect(Api::all(client.clone()), move |_: &Node| node_bump());
        let provisioners = w.reflect_tolerant::<Provisioner>(client, move |_| provisioner_bump());
        let templates = w.reflect_tolerant::<AwsNodeTemplate>(client, |_| {});
        let daemonsets = w.reflect(Api::all(client.clone()), |_: &DaemonSet| {});
        let claims = w.reflect(Api::all(client.clone()), |_: &PersistentVolumeClaim| {});
        let volumes = w.reflect(Api::all(client.clone()), |_: &PersistentVolume| {});
        let storage_classes = w.reflect(Api::all(client.clone()), |_: &StorageClass| {});
        let namespaces = w.reflect(Api::all(client.clone()), |_: &Namespace| {});
        let pdbs = w.reflect(Api::all(client.clone()), |_: &PodDisruptionBudget| {});
        let synced = Synced::follow(vec![
            first_list(&nodes),
            first_list(&pods),
            first_list(&provisioners),
            first_list(&templates),
            first_list(&daemonsets),
            first_list(&claims),
            first_list(&volumes),
            first_list(&storage_classes),
            first_list(&namespaces),
            first_list(&pdbs),
        ]);
        Arc::new(Cluster {
            pods,
            nodes,
            provisioners,
            templates,
            daemonsets,
            claims,
            volumes,
            storage_classes,
            namespaces,
            pdbs,
            generation,
            on_pod,
            nominations: Mutex::new(HashMap::new()),
            plans: Plans::default(),
            types: SharedTypes::default(),
            last_watch_error: errors.clone(),
            synced,
            clock,
        })
    }

    /// Times nominations and staleness on `clock` from now on (the real clock until then). The
    /// view is started before the controllers' `Shared` exists and outlives each term's
    /// controllers, so it takes their clock afterwards, from `run_all`, rather than as a
    /// parameter of `start` every caller would have to pass. Meant to be called before the
    /// controllers run: a watch failure already recorded stays timed on the clock before.
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.clock.0.write().unwrap_or_else(|e| e.into_inner()) = clock;
    }

    /// A view of empty stores that no watch fills, on the real clock: for unit tests of what
    /// the view keeps itself (nominations, staleness) and of contexts built on it.
    #[cfg(test)]
    pub(crate) fn detached() -> Arc<Cluster> {
        Arc::new(Cluster {
            nodes: reflector::store().0,
            pods: reflector::store().0,
            provisioners: reflector::store().0,
            templates: reflector::store().0,
            daemonsets: reflector::store().0,
            claims: reflector::store().0,
            volumes: reflector::store().0,
            storage_classes: reflector::store().0,
            namespaces: reflector::store().0,
            pdbs: reflector::store().0,
            generation: Arc::default(),
            on_pod: PodHooks::default(),
            nominations: Mutex::new(HashMap::new()),
            plans: Plans::default(),
            types: SharedTypes::default(),
            last_watch_error: Arc::default(),
            synced: Synced(tokio::sync::watch::channel(Some(true)).1),
            clock: ClockSlot::default(),
        })
    }

    /// Why the view may be out of date now (`staleness`), or `None`.
    pub fn stale(&self) -> Option<String> {
        let last = self.last_watch_error.lock().unwrap_or_else(|e| e.into_inner()).clone();
        staleness(last.as_ref().map(|e| (e.kind.as_str(), e.at)), self.clock.instant())
    }

    /// Waits until the view has settled (`stale` is `None`), at most `limit` of real time (how
    /// long the caller waits, not a rule about the cluster); returns why it is still stale when
    /// the limit passes.
    pub async fn settled(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let Some(why) = self.stale() else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(why);
            }
            tokio::time::sleep(SETTLED_POLL).await;
        }
    }

    /// Sets what is called with every pod change for the controller `name` (provisioning's
    /// batcher trigger, the pod startup times of `status`), in place of what an earlier call of
    /// the same name set (an earlier term's).
    pub fn on_pod_change(&self, name: &'static str, hook: impl Fn(&Pod) + Send + Sync + 'static) {
        self.on_pod.set(name, Box::new(hook));
    }

    /// Waits until every cache has its initial list; any number of tasks may wait at once.
    pub async fn ready(&self) -> Result<(), ViewClosed> {
        self.synced.wait().await
    }

    /// Every node with its unfinished pods, nomination and instance type, read from the caches
    /// now (`node::group`).
    pub fn nodes_view(&self) -> Vec<StateNode> {
        self.view_of(&self.nodes.state(), &self.pods.state())
    }

    /// `nodes_view` of nodes and pods already read from the caches (a pass reads them once).
    pub fn view_of(&self, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> Vec<StateNode> {
        let nominations = self.nominations.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let now = self.clock.instant();
        node::group(
            nodes,
            pods,
            |name| nominations.get(name).is_some_and(|until| *until > now),
            &self.types.current(),
        )
    }

    /// What the last pass's catalogue says instance type `name` of `provisioner` offers.
    pub fn instance_type(&self, provisioner: &str, name: &str) -> Option<Arc<crate::scheduling::instance_types::InstanceType>> {
        self.types.current().instance_type(provisioner, name)
    }

    /// Moves with every change to a Node, a Pod or a Provisioner.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The AWSNodeTemplate `provisioner` names in `spec.providerRef`, if it has one and it exists.
    pub fn node_template_of(&self, provisioner: &Provisioner) -> Option<Arc<AwsNodeTemplate>> {
        let reference = provisioner.spec.provider_ref.as_ref()?;
        let name = reflector::ObjectRef::new(&reference.name);
        self.templates.get(&name)
    }

    /// Records that a provisioning pass expects pods to land on `node` within `period`
    /// (Karpenter's nomination, 20 s): deprovisioning leaves it alone meanwhile.
    pub fn nominate(&self, node: &str, period: Duration) {
        let mut nominations = self.nominations.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.instant();
        nominations.retain(|_, until| *until > now);
        nominations.insert(node.to_string(), now + period);
    }
}

/// Waits for the next tick of `ticker` at which this replica leads and the view has its first
/// lists, beating `controller`'s liveness at every tick; false once `shutdown` is cancelled. The
/// loop head of the leader's periodic controllers (binding, node lifecycle, status).
pub async fn leading_tick(
    ticker: &mut tokio::time::Interval,
    controller: &'static str,
    liveness: &Liveness,
    leading: &tokio::sync::watch::Receiver<bool>,
    state: &Cluster,
    shutdown: &CancellationToken,
) -> bool {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = ticker.tick() => {}
        }
        liveness.beat(controller, ticker.period());
        let leads = *leading.borrow();
        if leads && state.ready().await.is_ok() {
            return true;
        }
    }
}

#[cfg(test)]
mod tests;
