//! Provisioning: pods the scheduler cannot place → a batch → a scheduling simulation → EC2
//! instances → Nodes → pods bound once their node is ready.
//!
//! `pods.rs` decides which pods count, `batcher.rs` owns the batching window, `catalogue.rs`
//! translates between the cloud's and the simulation's views, `node.rs` builds the Node for a
//! launched instance and `bind.rs` decides when planned pods may be bound. This file is the I/O
//! around them: watches, one pass at a time (read → `scheduling::simulate` → act), the binder.

pub mod backoff;
pub mod batcher;
pub mod bind;
pub mod catalogue;
pub mod lifecycle;
pub mod node;
pub mod pods;
pub mod usage;
pub mod volumes;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Taint};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use std::sync::Mutex as StdMutex;

use k8s_openapi::chrono::Utc;
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};

use crate::apis::v1alpha1::{AwsNodeTemplate, AwsProvider};
use crate::apis::v1alpha5::labels::{INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::{self, CloudProvider, KubernetesVersion, NodeTemplate};
use crate::controllers::reflect;
use crate::metrics::Metrics;
use crate::scheduling::{self, ExistingNode, InstanceType, PodKey, ProvisionerInput, SimulationInput};
use crate::telemetry;
use batcher::{BatchWindows, Batcher};

/// Settings of the provisioning controller.
#[derive(Clone, Debug)]
pub struct ProvisioningConfig {
    /// The cluster's name.
    pub cluster_name: String,
    /// AWS region, for node labels.
    pub region: String,
    /// Batching windows.
    pub windows: BatchWindows,
    /// Whether planned pods are bound once their node is ready (differences.md item 10).
    pub bind_pods: bool,
    /// A node we launched that is not Ready this long after its creation is deleted and its
    /// instance terminated (differences.md item 11).
    pub registration_ttl: Duration,
    /// At most this many launches per Provisioner in any minute (`backoff::LaunchRate`).
    pub max_launches_per_minute: u32,
    /// The global node settings (memory overhead, pod density, reserved ENIs, pod ENIs) every
    /// Provisioner's kubelet configuration is applied over.
    pub node_settings: crate::scheduling::NodeSettings,
    /// Kubernetes version whose AMIs nodes boot; `None` reads the API server's.
    pub kubernetes_version: Option<KubernetesVersion>,
}

impl Default for ProvisioningConfig {
    fn default() -> Self {
        ProvisioningConfig {
            cluster_name: String::new(),
            region: String::new(),
            windows: BatchWindows::default(),
            bind_pods: true,
            registration_ttl: Duration::from_secs(15 * 60),
            max_launches_per_minute: 100,
            node_settings: Default::default(),
            kubernetes_version: None,
        }
    }
}

/// How long the API server's version is reused before it is read again (Karpenter's 1 min).
const KUBERNETES_VERSION_TTL: Duration = Duration::from_secs(60);

/// What a pass and the binder share.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub config: ProvisioningConfig,
    recorder: Recorder,
    batcher: Batcher,
    /// Node name → pods planned onto it and what they request, until bound.
    planned: Mutex<HashMap<String, PlannedNode>>,
    /// The caches, once `run` has started them.
    stores: OnceLock<Stores>,
    /// Held by a pass and by `replace`: one simulation-and-launch at a time.
    pass_lock: Mutex<()>,
    /// Per Provisioner, its instance types as the last pass saw them: what a node that has not
    /// initialised yet is expected to offer.
    instance_types: StdMutex<HashMap<String, Vec<Arc<InstanceType>>>>,
    /// Runaway protection per owner of pods, and the launch rate per Provisioner.
    backoff: StdMutex<backoff::LaunchBackoff>,
    launch_rate: StdMutex<backoff::LaunchRate>,
    /// The API server's version and when it was read.
    api_server_version: StdMutex<Option<(Instant, KubernetesVersion)>>,
}

struct PlannedNode {
    pods: Vec<PodKey>,
    startup_taints: Vec<Taint>,
    requested: BTreeMap<String, f64>,
    since: Instant,
}

/// The informer caches a pass reads.
#[derive(Clone)]
struct Stores {
    pods: Store<Pod>,
    nodes: Store<Node>,
    provisioners: Store<Provisioner>,
    templates: Store<AwsNodeTemplate>,
    daemonsets: Store<DaemonSet>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    storage_classes: Store<StorageClass>,
    namespaces: Store<Namespace>,
}

impl Context {
    /// A context for the controller.
    pub fn new(client: kube::Client, cloud: Arc<dyn CloudProvider>, metrics: Metrics, config: ProvisioningConfig) -> Arc<Context> {
        let reporter = Reporter {
            controller: "karpenter-rs".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            cloud,
            metrics,
            batcher: Batcher::default(),
            planned: Mutex::new(HashMap::new()),
            stores: OnceLock::new(),
            pass_lock: Mutex::new(()),
            instance_types: StdMutex::new(HashMap::new()),
            backoff: StdMutex::new(backoff::LaunchBackoff::default()),
            launch_rate: StdMutex::new(backoff::LaunchRate::new(config.max_launches_per_minute)),
            api_server_version: StdMutex::new(None),
            config,
        })
    }

    /// The instance type `name` as `provisioner`'s last pass saw it.
    pub fn expected_instance_type(&self, provisioner: &str, name: &str) -> Option<Arc<InstanceType>> {
        let types = self.instance_types.lock().unwrap_or_else(|e| e.into_inner());
        types.get(provisioner)?.iter().find(|it| it.name == name).cloned()
    }

    /// `nodes` as the simulation sees them, with the pods bound to them: a node of ours that has
    /// not initialised counts what its instance type offers (karpenter-behavior.md §4.3).
    fn existing_nodes(&self, nodes: &[Arc<Node>], all_pods: &[Arc<Pod>], provisioners: &[Arc<Provisioner>]) -> Vec<ExistingNode> {
        let mut existing = existing_nodes(nodes, all_pods, provisioners);
        for node in existing.iter_mut().filter(|n| !n.initialized) {
            let expected = node
                .provisioner()
                .zip(node.labels.get(INSTANCE_TYPE_LABEL))
                .and_then(|(p, name)| self.expected_instance_type(p, name));
            if let Some(it) = expected {
                node.expect(&it);
            }
        }
        existing
    }

    /// Provisions room for the pods of `node_name`, which is about to be drained (expiration,
    /// karpenter-behavior.md §5.4): the simulation treats its pods as pending and the node as
    /// gone (as every pass does for nodes being deleted, `pods::to_place`), fills existing nodes
    /// first and launches what is still needed through the normal path. Returns the names of the Nodes launched (none when the pods fit elsewhere). Runs
    /// between passes, never beside one.
    pub async fn replace(&self, node_name: &str) -> Result<Vec<String>, PassError> {
        let stores = self.stores.get().ok_or("the provisioning controller is not running")?;
        let _one_at_a_time = self.pass_lock.lock().await;
        stores.ready().await?;
        let all_nodes = stores.nodes.state();
        let all_pods = stores.pods.state();
        let (nodes, pending) = pods::to_place(&all_nodes, &all_pods, Some(node_name));
        provision(self, stores, pending, &nodes, &all_pods, &HashSet::new()).await
    }
}

/// Runs the provisioning controller until `shutdown`; passes only run while `leading` is true.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    let stores = start_watches(&ctx, &shutdown);
    // A second `run` on the same context keeps the first one's caches.
    let stores = ctx.stores.get_or_init(|| stores).clone();
    let binder = tokio::spawn(bind_loop(ctx.clone(), stores.clone(), shutdown.clone()));
    let status = tokio::spawn(status_loop(ctx.clone(), stores.clone(), leading.clone(), shutdown.clone()));
    let mut leading = leading;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            window = ctx.batcher.wait(ctx.config.windows) => ctx.metrics.batch_duration.observe(window.as_secs_f64()),
        }
        if !*leading.borrow_and_update() {
            continue;
        }
        let started = Instant::now();
        if let Err(e) = pass(&ctx, &stores).await {
            warn!(error = %telemetry::chain(e.as_ref()), "provisioning pass failed; retrying with the next batch");
            ctx.batcher.trigger();
        }
        ctx.metrics.scheduling_duration.observe(started.elapsed().as_secs_f64());
    }
    let _ = binder.await;
    let _ = status.await;
}

/// Every 10 s on the leader: each Provisioner's `status.resources` (written only when it
/// changed), the usage, limit and usage-percentage gauges, and `karpenter_pods_state`.
async fn status_loop(ctx: Arc<Context>, stores: Stores, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    // Every 2 s the node lifecycle (`lifecycle::step`), every 10 s the status.
    let mut ticker = tokio::time::interval(Duration::from_secs(2));
    let mut ticks: u64 = 0;
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported: BTreeSet<(String, String)> = BTreeSet::new();
    let mut pod_series: BTreeSet<[String; 10]> = BTreeSet::new();
    while next_leading_tick(&mut ticker, &leading, &stores, &shutdown).await {
        lifecycle::step(&ctx, &stores).await;
        ticks += 1;
        if ticks % 5 != 1 {
            continue;
        }
        let nodes = ctx.existing_nodes(&stores.nodes.state(), &[], &stores.provisioners.state());
        let mut now_reported = BTreeSet::new();
        for p in stores.provisioners.state() {
            let name = p.name_any();
            let used = scheduling::provisioner_usage(&nodes, &name);
            for r in usage::resource_usage(&p, &used) {
                let labels = [name.as_str(), r.resource.as_str()];
                ctx.metrics.provisioner_usage.with_label_values(&labels).set(r.usage);
                if let (Some(limit), Some(percent)) = (r.limit, r.percent()) {
                    ctx.metrics.provisioner_limit.with_label_values(&labels).set(limit);
                    ctx.metrics.provisioner_usage_pct.with_label_values(&labels).set(percent);
                }
                now_reported.insert((name.clone(), r.resource));
            }
            let resources = usage::status_resources(&used);
            if p.status.as_ref().and_then(|s| s.resources.as_ref()) == Some(&resources) || p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let api: Api<Provisioner> = Api::all(ctx.client.clone());
            // A merge patch keeps keys it does not name: resources no longer used are set to null.
            let mut listed = serde_json::to_value(&resources).unwrap_or_default();
            for gone in p.status.iter().flat_map(|s| s.resources.iter().flatten()).map(|(k, _)| k) {
                if !resources.contains_key(gone) {
                    listed[gone.as_str()] = serde_json::Value::Null;
                }
            }
            let patch = serde_json::json!({"status": {"resources": listed}});
            match api
                .patch_status(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
                .await
            {
                Ok(_) => debug!(provisioner = %name, "updated status.resources"),
                Err(e) => debug!(provisioner = %name, error = %e, "updating status.resources; retrying later"),
            }
        }
        for (name, resource) in reported.difference(&now_reported) {
            let labels = [name.as_str(), resource.as_str()];
            for gauge in [
                &ctx.metrics.provisioner_usage,
                &ctx.metrics.provisioner_limit,
                &ctx.metrics.provisioner_usage_pct,
            ] {
                let _ = gauge.remove_label_values(&labels);
            }
        }
        reported = now_reported;

        let by_name: HashMap<String, Arc<Node>> = stores.nodes.state().into_iter().map(|n| (n.name_any(), n)).collect();
        let mut now_series = BTreeSet::new();
        for pod in stores.pods.state() {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| by_name.get(n));
            let labels = pods::pod_state_labels(&pod, node.map(|n| n.as_ref()));
            let values: Vec<&str> = labels.iter().map(String::as_str).collect();
            ctx.metrics.pods_state.with_label_values(&values).set(1.0);
            now_series.insert(labels);
        }
        for gone in pod_series.difference(&now_series) {
            let values: Vec<&str> = gone.iter().map(String::as_str).collect();
            let _ = ctx.metrics.pods_state.remove_label_values(&values);
        }
        pod_series = now_series;
    }
}

/// Waits for the next tick of `ticker` at which this replica leads and the caches are ready;
/// false once `shutdown` is cancelled.
async fn next_leading_tick(
    ticker: &mut tokio::time::Interval,
    leading: &watch::Receiver<bool>,
    stores: &Stores,
    shutdown: &CancellationToken,
) -> bool {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = ticker.tick() => {}
        }
        let leads = *leading.borrow();
        if leads && stores.ready().await.is_ok() {
            return true;
        }
    }
}

/// Starts the reflectors; every change to a provisionable pod triggers the batcher, and a
/// ticker re-triggers every 10 s while such pods remain (they may need a later pass).
fn start_watches(ctx: &Arc<Context>, shutdown: &CancellationToken) -> Stores {
    let client = ctx.client.clone();
    let trigger_ctx = ctx.clone();
    let stores = Stores {
        pods: reflect(Api::<Pod>::all(client.clone()), watcher::Config::default(), shutdown, move |pod| {
            if pods::is_provisionable(pod) {
                trigger_ctx.batcher.trigger();
            }
        }),
        nodes: reflect(Api::<Node>::all(client.clone()), watcher::Config::default(), shutdown, |_| {}),
        provisioners: reflect(
            Api::<Provisioner>::all(client.clone()),
            watcher::Config::default(),
            shutdown,
            |_| {},
        ),
        templates: reflect(
            Api::<AwsNodeTemplate>::all(client.clone()),
            watcher::Config::default(),
            shutdown,
            |_| {},
        ),
        daemonsets: reflect(Api::<DaemonSet>::all(client.clone()), watcher::Config::default(), shutdown, |_| {}),
        claims: reflect(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            watcher::Config::default(),
            shutdown,
            |_| {},
        ),
        volumes: reflect(
            Api::<PersistentVolume>::all(client.clone()),
            watcher::Config::default(),
            shutdown,
            |_| {},
        ),
        storage_classes: reflect(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
            shutdown,
            |_| {},
        ),
        namespaces: reflect(Api::<Namespace>::all(client), watcher::Config::default(), shutdown, |_| {}),
    };
    let (ticker_ctx, pods_store, token) = (ctx.clone(), stores.pods.clone(), shutdown.clone());
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = ticker.tick() => {
                    if pods_store.state().iter().any(|p| pods::is_provisionable(p)) {
                        ticker_ctx.batcher.trigger();
                    }
                }
            }
        }
    });
    stores
}

/// Why a pass or a replacement failed.
pub type PassError = Box<dyn std::error::Error + Send + Sync>;

impl Stores {
    /// Waits until every cache has its initial list.
    async fn ready(&self) -> Result<(), PassError> {
        for ready in [
            self.nodes.wait_until_ready().await,
            self.pods.wait_until_ready().await,
            self.provisioners.wait_until_ready().await,
            self.templates.wait_until_ready().await,
            self.daemonsets.wait_until_ready().await,
            self.claims.wait_until_ready().await,
            self.volumes.wait_until_ready().await,
            self.storage_classes.wait_until_ready().await,
            self.namespaces.wait_until_ready().await,
        ] {
            ready?;
        }
        Ok(())
    }
}

impl Context {
    /// The Kubernetes version whose AMIs nodes boot: the configured one, else the API server's
    /// `major.minor` (`/version`), read at most once a minute (karpenter-behavior.md §3.3). When
    /// the API server cannot be asked, the last version read is kept.
    async fn kubernetes_version(&self) -> Result<KubernetesVersion, PassError> {
        if let Some(v) = self.config.kubernetes_version {
            return Ok(v);
        }
        let cached = *self
            .api_server_version
            .lock()
            .expect("version lock is never poisoned: no panics while held");
        if let Some((_, v)) = cached.filter(|(at, _)| at.elapsed() < KUBERNETES_VERSION_TTL) {
            return Ok(v);
        }
        let read = match self.client.apiserver_version().await {
            Ok(info) => KubernetesVersion::from_api_server(&info.major, &info.minor).map_err(PassError::from),
            Err(e) => Err(format!("reading the API server's version: {e}").into()),
        };
        match (read, cached) {
            (Ok(v), _) => {
                if cached.is_none_or(|(_, old)| old != v) {
                    info!(kubernetes_version = %v, "nodes boot the AMIs of the API server's Kubernetes version");
                }
                *self
                    .api_server_version
                    .lock()
                    .expect("version lock is never poisoned: no panics while held") = Some((Instant::now(), v));
                Ok(v)
            }
            (Err(e), Some((_, old))) => {
                warn!(error = %e, kubernetes_version = %old, "keeping the last Kubernetes version read");
                Ok(old)
            }
            (Err(e), None) => Err(e),
        }
    }
}

/// One provisioning pass: read (nodes before pods), simulate, launch.
#[instrument(skip_all)]
async fn pass(ctx: &Context, stores: &Stores) -> Result<(), PassError> {
    let _one_at_a_time = ctx.pass_lock.lock().await;
    stores.ready().await?;
    // Nodes first: a pod that binds between the two reads is then seen on its node, never as
    // pending with no node, so it cannot get a second one.
    let all_nodes = stores.nodes.state();
    let all_pods = stores.pods.state();
    let (nodes, pending) = pods::to_place(&all_nodes, &all_pods, None);
    if pending.is_empty() {
        return Ok(());
    }
    let held = held_back(ctx, &pending, &all_pods, &nodes);
    provision(ctx, stores, pending, &nodes, &all_pods, &held).await.map(drop)
}

/// The pending pods new capacity must not be launched for now (`backoff::LaunchBackoff`), after
/// the history has looked at every pod and node.
fn held_back(ctx: &Context, pending: &[Pod], all_pods: &[Arc<Pod>], nodes: &[Arc<Node>]) -> HashSet<PodKey> {
    let now = Instant::now();
    let by_uid: HashMap<String, &Pod> = all_pods
        .iter()
        .filter_map(|p| Some((p.metadata.uid.clone()?, p.as_ref())))
        .collect();
    let ready: HashMap<String, bool> = nodes
        .iter()
        .map(|n| (n.name_any(), bind::is_ready_for_pods(n, &[], &BTreeMap::new())))
        .collect();
    let mut history = ctx.backoff.lock().unwrap_or_else(|e| e.into_inner());
    history.observe(&by_uid, &ready, now, Utc::now());
    let mut held = HashSet::new();
    for pod in pending {
        if let Some(until) = history.blocked_until(pod, now) {
            debug!(pod = %pods::pod_key(pod), wait_seconds = until.duration_since(now).as_secs(), "no new capacity for the pod yet: it waits for the node launched for it, or its owner's pods were lost from the capacity launched for them");
            held.insert(PodKey::of(pod));
        }
    }
    held
}

/// Simulates `pending` against the Provisioners and `nodes` (with the pods bound to them), then
/// launches the new nodes of the plan, except for the pods `held` back (they still take their
/// place on existing nodes in the simulation); returns the names of the Nodes created.
async fn provision(
    ctx: &Context,
    stores: &Stores,
    pending: Vec<Pod>,
    nodes: &[Arc<Node>],
    all_pods: &[Arc<Pod>],
    held: &HashSet<PodKey>,
) -> Result<Vec<String>, PassError> {
    let volumes = volumes::Volumes {
        claims: stores
            .claims
            .state()
            .iter()
            .map(|c| (format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()), (**c).clone()))
            .collect(),
        volumes: stores.volumes.state().iter().map(|v| (v.name_any(), (**v).clone())).collect(),
        storage_classes: stores
            .storage_classes
            .state()
            .iter()
            .map(|c| (c.name_any(), (**c).clone()))
            .collect(),
    };
    let mut valid = Vec::with_capacity(pending.len());
    for pod in pending {
        match volumes.validate(&pod) {
            Ok(()) => valid.push(volumes.constrain(pod)),
            Err(reason) => {
                debug!(pod = %pods::pod_key(&pod), %reason, "ignoring pod: its volumes cannot be provided");
                let note = format!("Failed to provision new node: {reason}");
                publish(ctx, &pod, EventType::Warning, "FailedProvisioning", &note).await;
            }
        }
    }
    let pending = valid;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let provisioners: Vec<Arc<Provisioner>> = stores.provisioners.state();
    let version = ctx.kubernetes_version().await?;
    let mut templates: HashMap<String, (NodeTemplate, Option<f64>)> = HashMap::new();
    let mut zones: HashMap<String, BTreeSet<String>> = HashMap::new();
    for p in &provisioners {
        let resolved = match node_template(ctx, stores, p, version) {
            Ok(t) => ctx
                .cloud
                .resolve(&t.0)
                .await
                .map(|status| (t, status))
                .map_err(|e| telemetry::chain(&e)),
            Err(reason) => Err(reason),
        };
        match resolved {
            Ok((t, status)) => {
                let subnet_zones = status.subnets.unwrap_or_default().into_iter().filter_map(|s| s.zone).collect();
                zones.insert(p.name_any(), subnet_zones);
                templates.insert(p.name_any(), t);
            }
            Err(reason) => {
                warn!(provisioner = %p.name_any(), %reason, "provisioner cannot launch nodes");
                publish(ctx, p.as_ref(), EventType::Warning, "InvalidNodeTemplate", &reason).await;
            }
        }
    }
    let catalogue = ctx.metrics.cloud_call("instance_types", ctx.cloud.instance_types()).await?;
    // The catalogue translation and the simulation are CPU work of up to seconds: run them
    // where they do not hold up the runtime's other tasks (the binder, node lifecycle, the
    // watches), which would otherwise wait behind this worker.
    let mut plan = tokio::task::block_in_place(|| {
        let mut input = SimulationInput {
            pods: pending.clone(),
            provisioners: provisioners
                .iter()
                .filter_map(|p| {
                    let (template, _) = templates.get(&p.name_any())?;
                    Some(ProvisionerInput {
                        provisioner: (**p).clone(),
                        instance_types: catalogue::instance_types(
                            &catalogue,
                            p,
                            template,
                            &zones[&p.name_any()],
                            &ctx.config.region,
                            &ctx.config.node_settings,
                        ),
                    })
                })
                .collect(),
            // Filled in below, once this pass's instance types are recorded.
            nodes: Vec::new(),
            daemonset_pods: pods::daemonset_overhead_pods(&stores.daemonsets.state(), all_pods),
            namespace_labels: stores
                .namespaces
                .state()
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect(),
        };
        {
            let mut types = ctx.instance_types.lock().unwrap_or_else(|e| e.into_inner());
            for p in &input.provisioners {
                types.insert(p.provisioner.name_any(), p.instance_types.clone());
            }
        }
        input.nodes = ctx.existing_nodes(nodes, all_pods, &provisioners);
        scheduling::simulate(&input)
    });
    if !held.is_empty() {
        let before = plan.new_nodes.len();
        for request in &mut plan.new_nodes {
            request.pods.retain(|k| !held.contains(k));
        }
        plan.new_nodes.retain(|r| !r.pods.is_empty());
        if plan.new_nodes.len() < before {
            info!(
                held_pods = held.len(),
                nodes_not_launched = before - plan.new_nodes.len(),
                "launches held back: the pods wait for the nodes launched for them, or their owners' pods were lost from capacity launched for them"
            );
        }
    }
    info!(
        pending = pending.len(),
        new_nodes = plan.new_nodes.len(),
        on_existing = plan.existing_assignments.len(),
        unschedulable = plan.unschedulable.len(),
        "scheduling simulated"
    );
    for (key, reason) in &plan.unschedulable {
        if let Some(pod) = pending.iter().find(|p| PodKey::of(p) == *key) {
            debug!(pod = %pods::pod_key(pod), %reason, "pod cannot be provisioned for");
            publish(
                ctx,
                pod,
                EventType::Warning,
                "FailedProvisioning",
                &format!("Failed to provision new node: {reason}"),
            )
            .await;
        }
    }
    for name in &plan.limited {
        if let Some(p) = provisioners.iter().find(|p| p.name_any() == *name) {
            info!(provisioner = %name, "provisioner limits reached; pods wait");
            let limits = p
                .spec
                .limits
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .map(|r| r.iter().map(|(k, v)| format!("{k}={}", v.0)).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            publish(
                ctx,
                p.as_ref(),
                EventType::Warning,
                "ProvisionerLimitsReached",
                &format!("Provisioner limits ({limits}) would be exceeded by another node; pods wait"),
            )
            .await;
        }
    }
    for (name, (pod, reason)) in &plan.unfit {
        if let Some(p) = provisioners.iter().find(|p| p.name_any() == *name) {
            let note = format!("No instance type can hold pod {pod}: {reason}");
            publish(ctx, p.as_ref(), EventType::Warning, "NoInstanceTypeFits", &note).await;
        }
    }
    let (provisioners, templates, pending) = (&provisioners, &templates, &pending);
    let admitted: Vec<&scheduling::NodeRequest> = {
        let now = Instant::now();
        let mut rate = ctx.launch_rate.lock().unwrap_or_else(|e| e.into_inner());
        plan.new_nodes.iter().filter(|r| rate.take(&r.provisioner, now)).collect()
    };
    if admitted.len() < plan.new_nodes.len() {
        warn!(
            planned = plan.new_nodes.len(),
            launching = admitted.len(),
            limit_per_minute = ctx.config.max_launches_per_minute,
            "launch rate limit reached; the other nodes wait for a later pass"
        );
    }
    let launches = admitted.into_iter().map(|request| async move {
        let provisioner = provisioners.iter().find(|p| p.name_any() == request.provisioner)?;
        let (template, spot_max) = templates.get(&request.provisioner)?;
        match launch(ctx, request, provisioner, template.clone(), *spot_max).await {
            Ok(node_name) => {
                // Where each pod is bound now: a node being deleted, for the pods placed again.
                let origin = |pod: &Pod| {
                    let uid = pod.metadata.uid.as_deref()?;
                    let live = all_pods.iter().find(|p| p.metadata.uid.as_deref() == Some(uid))?;
                    live.spec.as_ref()?.node_name.clone()
                };
                let launched_for = request
                    .pods
                    .iter()
                    .filter_map(|key| pending.iter().find(|p| PodKey::of(p) == *key))
                    .map(|p| (p, origin(p)));
                ctx.backoff
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .launched(&node_name, launched_for, Instant::now());
                for key in &request.pods {
                    if let Some(pod) = pending.iter().find(|p| PodKey::of(p) == *key) {
                        publish(
                            ctx,
                            pod,
                            EventType::Normal,
                            "Nominated",
                            &format!("Pod should schedule on node {node_name}"),
                        )
                        .await;
                    }
                }
                Some(node_name)
            }
            Err(e) => {
                warn!(provisioner = %request.provisioner, error = %telemetry::chain(&e), "launch failed");
                publish(ctx, provisioner.as_ref(), EventType::Warning, "LaunchFailed", &telemetry::chain(&e)).await;
                None
            }
        }
    });
    let launched: Vec<String> = futures::future::join_all(launches).await.into_iter().flatten().collect();
    // The next pass must see every Node this one created (they count against limits and hold
    // the pods planned for them), or it would launch for the same pods again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !launched.iter().all(|n| stores.nodes.get(&reflector::ObjectRef::new(n)).is_some()) {
        if Instant::now() > deadline {
            return Err("nodes created by this pass did not appear in the node cache within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(launched)
}

/// The AWS settings of a Provisioner for nodes of Kubernetes `version`: its AWSNodeTemplate, or
/// its inline provider.
fn node_template(
    ctx: &Context,
    stores: &Stores,
    provisioner: &Provisioner,
    version: KubernetesVersion,
) -> Result<(NodeTemplate, Option<f64>), String> {
    let cluster = &ctx.config.cluster_name;
    if let Some(reference) = &provisioner.spec.provider_ref {
        let template = stores
            .templates
            .state()
            .into_iter()
            .find(|t| t.name_any() == reference.name)
            .ok_or_else(|| format!("AWSNodeTemplate {:?} (spec.providerRef) does not exist", reference.name))?;
        let node_template = NodeTemplate::from_node_template(&template.spec, cluster, version).map_err(|e| e.to_string())?;
        return Ok((node_template, None));
    }
    let raw = provisioner
        .spec
        .provider
        .clone()
        .ok_or("neither spec.provider nor spec.providerRef is set")?;
    let provider: AwsProvider = serde_json::from_value(raw).map_err(|e| format!("spec.provider: {e}"))?;
    let node_template = NodeTemplate::from_provider(&provider, cluster, version).map_err(|e| e.to_string())?;
    Ok((node_template, cloudprovider::spot_max_price(&provider)))
}

/// Launches one planned node: the instance, then its Node. An instance whose Node cannot be
/// created is terminated before the error is returned, so nothing leaks.
#[instrument(skip_all, fields(provisioner = %request.provisioner))]
async fn launch(
    ctx: &Context,
    request: &scheduling::NodeRequest,
    provisioner: &Provisioner,
    template: NodeTemplate,
    spot_max_price: Option<f64>,
) -> Result<String, LaunchError> {
    let launch_request = catalogue::launch_request(request, provisioner, template, spot_max_price);
    if launch_request.instance_options.is_empty() {
        return Err(LaunchError::NoOffering {
            provisioner: request.provisioner.clone(),
        });
    }
    let instance = create_instance(ctx.cloud.as_ref(), &ctx.metrics, &launch_request)
        .await
        .map_err(|source| LaunchError::Create {
            provisioner: request.provisioner.clone(),
            source,
        })?;
    crate::failpoint::hit("after-launch");
    let instance_type = request.instance_type_options.iter().find(|t| t.name == instance.instance_type);
    let launched = catalogue::launched(&instance, instance_type.map(|t| t.as_ref()), &ctx.config.region);
    let node = node::node_for(provisioner, &launched, &request.labels);
    let node_name = launched.node_name();
    let price = launch_request
        .instance_options
        .iter()
        .find(|o| o.instance_type == instance.instance_type && o.zone == instance.zone)
        .map(|o| o.price)
        .unwrap_or_default();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let created = match nodes.create(&PostParams::default(), &node).await {
        // A Node of that name exists: fine if it is this instance's (a retried create), not if
        // the name belongs to another instance (private addresses are reused after termination).
        Err(kube::Error::Api(e)) if e.code == 409 => match nodes.get(&node_name).await {
            Ok(existing) if existing.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(launched.provider_id().as_str()) => {
                Ok(())
            }
            Ok(_) => Err(kube::Error::Api(e)),
            Err(source) => Err(source),
        },
        other => other.map(|_| ()),
    };
    match created {
        Ok(()) => {}
        Err(source) => {
            if let Err(e) = ctx.cloud.delete(&instance.id).await {
                warn!(instance_id = %instance.id, error = %e, "terminating the instance whose node could not be created; the garbage collector will retry");
            }
            return Err(LaunchError::RegisterNode {
                node: node_name,
                instance_id: instance.id,
                source,
            });
        }
    }
    ctx.metrics
        .nodes_created
        .with_label_values(&[
            &request.provisioner,
            &instance.zone,
            &instance.instance_type,
            &instance.capacity_type,
        ])
        .inc();
    info!(
        provisioner = %request.provisioner,
        instance_id = %instance.id,
        instance_type = %instance.instance_type,
        zone = %instance.zone,
        capacity_type = %instance.capacity_type,
        price,
        node = %node_name,
        pods = request.pods.len(),
        "launched node"
    );
    ctx.planned.lock().await.insert(
        node_name.clone(),
        PlannedNode {
            pods: request.pods.clone(),
            startup_taints: request.startup_taints.clone(),
            requested: catalogue::requested(&request.requests),
            since: Instant::now(),
        },
    );
    Ok(node_name)
}

/// How many times one launch is tried while EC2 reports insufficient capacity.
const LAUNCH_ATTEMPTS: usize = 3;

/// Launches the instance. An insufficient-capacity answer marks those offerings unavailable in
/// the provider (karpenter-behavior.md §3.7), so trying again right away goes to the remaining
/// offerings of the request (e.g. other zones, or on-demand after spot), up to `LAUNCH_ATTEMPTS`.
async fn create_instance(
    cloud: &dyn CloudProvider,
    metrics: &Metrics,
    request: &cloudprovider::LaunchRequest,
) -> Result<cloudprovider::Instance, cloudprovider::Error> {
    let mut attempt = 1;
    loop {
        match metrics.cloud_call("create", cloud.create(request)).await {
            Ok(instance) => return Ok(instance),
            Err(e) => {
                if !matches!(e, cloudprovider::Error::InsufficientCapacity { .. }) || attempt == LAUNCH_ATTEMPTS {
                    return Err(e);
                }
                info!(provisioner = %request.provisioner_name, attempt, error = %e, "retrying the launch with the remaining offerings");
                attempt += 1;
            }
        }
    }
}

/// What can go wrong launching a node.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The requirements leave no offering to launch.
    #[error("no instance type offering left for provisioner {provisioner}")]
    NoOffering {
        /// The Provisioner.
        provisioner: String,
    },
    /// The cloud refused or failed the launch.
    #[error("launching instance for provisioner {provisioner}")]
    Create {
        /// The Provisioner.
        provisioner: String,
        /// Why.
        #[source]
        source: cloudprovider::Error,
    },
    /// The Node could not be created (the instance was terminated).
    #[error("creating node {node} for instance {instance_id} (instance terminated)")]
    RegisterNode {
        /// The node name.
        node: String,
        /// The instance.
        instance_id: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// Existing and in-flight nodes with their pods, for the simulation.
fn existing_nodes(nodes: &[Arc<Node>], all_pods: &[Arc<Pod>], provisioners: &[Arc<Provisioner>]) -> Vec<ExistingNode> {
    let mut by_node: HashMap<&str, Vec<Pod>> = HashMap::new();
    for pod in all_pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded") | Some("Failed")) {
            continue;
        }
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            by_node.entry(node).or_default().push((**pod).clone());
        }
    }
    nodes
        .iter()
        .map(|node| {
            let mut existing = ExistingNode::from_node(node, by_node.remove(node.name_any().as_str()).unwrap_or_default());
            if let Some(owner) = node.labels().get(PROVISIONER_NAME_LABEL) {
                if let Some(p) = provisioners.iter().find(|p| p.name_any() == *owner) {
                    existing.startup_taints = p.spec.startup_taints.clone().unwrap_or_default();
                }
            }
            existing
        })
        .collect()
}

/// Binds planned pods to their node once it is ready; forgets plans older than 15 minutes.
/// The plans are copied out under the lock and the lock released before any API call, so
/// launches recording new plans never wait on the binder.
async fn bind_loop(ctx: Arc<Context>, stores: Stores, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let mut done = Vec::new();
        let ready: Vec<(Arc<Node>, Vec<PodKey>)> = {
            let planned = ctx.planned.lock().await;
            planned
                .iter()
                .filter_map(|(node_name, plan)| {
                    if plan.since.elapsed() > Duration::from_secs(15 * 60) {
                        done.push(node_name.clone());
                        return None;
                    }
                    let node = stores.nodes.get(&reflector::ObjectRef::new(node_name))?;
                    bind::is_ready_for_pods(&node, &plan.startup_taints, &plan.requested).then(|| (node, plan.pods.clone()))
                })
                .collect()
        };
        for (node, pods) in ready {
            if ctx.config.bind_pods {
                bind_planned(&ctx, &stores, &node, &pods).await;
            }
            done.push(node.name_any());
        }
        if !done.is_empty() {
            let mut planned = ctx.planned.lock().await;
            for n in done {
                planned.remove(&n);
            }
        }
    }
}

/// Binds the still-unbound pods planned for `node` that `bind::bindable` admits.
async fn bind_planned(ctx: &Context, stores: &Stores, node: &Node, keys: &[PodKey]) {
    let node_name = node.name_any();
    let cached = stores.pods.state();
    let unbound: Vec<&Arc<Pod>> = keys
        .iter()
        .filter_map(|key| cached.iter().find(|p| PodKey::of(p) == *key))
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty) && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if unbound.is_empty() {
        return;
    }
    // What is on the node now, read from the API server rather than the cache: the scheduler
    // binds to a node the moment it is ready.
    let all: Api<Pod> = Api::all(ctx.client.clone());
    let on_node = match all.list(&ListParams::default().fields(&format!("spec.nodeName={node_name}"))).await {
        Ok(list) => list.items,
        Err(e) => {
            warn!(node = %node_name, error = %e, "listing the pods on a ready node before binding; the scheduler will place them");
            return;
        }
    };
    let claims = &stores.claims;
    let claim_bound = |namespace: &str, name: &str| {
        claims
            .get(&reflector::ObjectRef::new(name).within(namespace))
            .is_some_and(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
    };
    let planned: Vec<&Pod> = unbound.iter().map(|p| p.as_ref()).collect();
    let (fitting, left) = bind::bindable(node, &on_node, &planned, &claim_bound);
    for (pod, why) in left {
        debug!(pod = %pods::pod_key(pod), node = %node_name, reason = %why, "not binding; the scheduler will place the pod");
    }
    for pod in fitting {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        match bind::bind(&api, &pod.name_any(), &node_name).await {
            Ok(outcome) => {
                ctx.metrics.pods_bound.with_label_values(&[bind_label(&outcome)]).inc();
                if outcome == bind::BindOutcome::Bound {
                    info!(pod = %pods::pod_key(pod), node = %node_name, "bound pod");
                }
            }
            Err(e) => warn!(pod = %pods::pod_key(pod), node = %node_name, error = %e, "binding pod; the scheduler will place it"),
        }
    }
}

fn bind_label(outcome: &bind::BindOutcome) -> &'static str {
    match outcome {
        bind::BindOutcome::Bound => "bound",
        bind::BindOutcome::AlreadyBound => "already_bound",
        bind::BindOutcome::Gone => "gone",
    }
}

async fn publish<K: Resource<DynamicType = ()>>(ctx: &Context, object: &K, type_: EventType, reason: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: "Provisioning".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &object.object_ref(&())).await {
        debug!(error = %e, reason, "publishing event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex as StdMutex;

    use crate::apis::v1alpha1::AwsNodeTemplateStatus;
    use crate::cloudprovider::{Error, Instance, InstanceTypeInfo, LaunchRequest, Offering};

    /// A cloud whose `create` answers from a script: fault injection (insufficient capacity) the
    /// EC2 emulator cannot produce. Every other method is unused here.
    struct ScriptedCloud {
        answers: StdMutex<VecDeque<Result<Instance, Error>>>,
        calls: StdMutex<usize>,
    }

    #[async_trait::async_trait]
    impl CloudProvider for ScriptedCloud {
        async fn instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Error> {
            unreachable!("not used by create_instance")
        }
        async fn resolve(&self, _: &NodeTemplate) -> Result<AwsNodeTemplateStatus, Error> {
            unreachable!("not used by create_instance")
        }
        async fn create(&self, _: &LaunchRequest) -> Result<Instance, Error> {
            *self.calls.lock().unwrap() += 1;
            self.answers.lock().unwrap().pop_front().expect("a scripted answer")
        }
        async fn delete(&self, _: &str) -> Result<(), Error> {
            unreachable!("not used by create_instance")
        }
        async fn delete_unused_launch_templates(&self, _: Duration) -> Result<Vec<String>, Error> {
            unreachable!("not used by create_instance")
        }
        async fn list(&self) -> Result<Vec<Instance>, Error> {
            unreachable!("not used by create_instance")
        }
        async fn get(&self, _: &str) -> Result<Instance, Error> {
            unreachable!("not used by create_instance")
        }
    }

    fn ice(zone: &str) -> Error {
        Error::InsufficientCapacity {
            offerings: vec![Offering {
                instance_type: "t3.large".into(),
                zone: zone.into(),
                capacity_type: "spot".into(),
            }],
        }
    }

    fn instance() -> Instance {
        Instance {
            id: "i-0123".into(),
            instance_type: "t3.large".into(),
            zone: "ap-northeast-2c".into(),
            capacity_type: "on-demand".into(),
            private_dns_name: String::new(),
            private_ip: None,
            launch_time: None,
            state: "pending".into(),
            tags: BTreeMap::new(),
            image_id: None,
        }
    }

    fn request() -> LaunchRequest {
        LaunchRequest {
            provisioner_name: "service".into(),
            node_name: None,
            template: NodeTemplate::from_provider(&AwsProvider::default(), "ssungz-cluster", KubernetesVersion { major: 1, minor: 33 })
                .unwrap(),
            instance_options: Vec::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            kubelet: Default::default(),
            spot_max_price: None,
        }
    }

    fn run(answers: Vec<Result<Instance, Error>>) -> (Result<Instance, Error>, usize) {
        let cloud = ScriptedCloud {
            answers: StdMutex::new(answers.into()),
            calls: StdMutex::new(0),
        };
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let result = runtime.block_on(create_instance(&cloud, &Metrics::new(), &request()));
        let calls = *cloud.calls.lock().unwrap();
        (result, calls)
    }

    #[test]
    fn insufficient_capacity_is_retried_on_the_remaining_offerings() {
        let (result, calls) = run(vec![Err(ice("ap-northeast-2a")), Ok(instance())]);
        assert_eq!(result.unwrap().zone, "ap-northeast-2c");
        assert_eq!(calls, 2);
    }

    #[test]
    fn retries_stop_after_the_last_attempt() {
        let (result, calls) = run(vec![Err(ice("a")), Err(ice("b")), Err(ice("c")), Ok(instance())]);
        assert!(matches!(result, Err(Error::InsufficientCapacity { .. })));
        assert_eq!(calls, LAUNCH_ATTEMPTS);
    }

    #[test]
    fn other_errors_are_not_retried() {
        let (result, calls) = run(vec![Err(Error::InvalidConfiguration("no subnets".into())), Ok(instance())]);
        assert!(matches!(result, Err(Error::InvalidConfiguration(_))));
        assert_eq!(calls, 1);
    }
}
