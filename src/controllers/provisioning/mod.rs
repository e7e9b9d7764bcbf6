//! Provisioning: pods the scheduler cannot place → a batch → a scheduling simulation → EC2
//! instances → Nodes → pods bound once their node is ready.
//!
//! This file holds the controller's `Context`, its loop (trigger → `batcher` → a pass, retried
//! with back-off) and the narrow `Provisioning` interface the other controllers use. Beside it:
//! - `pods.rs` decides which pods count, `batcher.rs` owns the batching window;
//! - `pass.rs` runs one pass: snapshot → `scheduling::simulate` → launches;
//! - `launch.rs` launches one node (CreateFleet, then its Node from `node.rs`), `adopt.rs` takes
//!   an instance a crashed run launched instead, `backoff.rs` is the runaway protection;
//! - `template_status.rs` writes each AWSNodeTemplate's status from what the warm-up resolved;
//! - `volumes.rs` reads what a pod's volumes require.
//!
//! Each launch records the pods planned onto its node in the shared view (`state::Plans`), which
//! the binder (`controllers::binding`) reads; node lifecycle and the Provisioners' status are
//! controllers of their own (`controllers::lifecycle`, `controllers::status`).

mod adopt;
pub mod backoff;
pub mod batcher;
mod launch;
/// A cloud of scripted answers, for the tests of the controllers beside provisioning.
#[cfg(test)]
pub(crate) use launch::tests as launch_tests;
mod pass;
pub use pass::Snapshot;
use pass::{NODE_SEEN_LIMIT, NODE_SEEN_POLL, NOMINATION};
pub mod node;
pub mod pods;
pub mod template_status;
pub mod volumes;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector;
use kube::{Resource, ResourceExt};
use std::sync::Mutex as StdMutex;

use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::catalogue;
use crate::cloudprovider::{CloudProvider, KubernetesVersion, NodeTemplate};
use crate::controllers::clock::Clock;
use crate::controllers::events;
use crate::controllers::state::{self, Cluster};
use crate::controllers::Shared;
use crate::metrics::Metrics;
use crate::ratelimit::TokenBucket;
use crate::scheduling::pods::is_provisionable;
use crate::scheduling::{self, ExistingNode};
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
    /// Whether planned pods are bound once their node is ready (Karpenter leaves that to kube-scheduler).
    pub bind_pods: bool,
    /// A node we launched that is not Ready this long after its creation is deleted and its
    /// instance terminated (as by `core@v0.28.0:pkg/controllers/machine/lifecycle/liveness.go`).
    pub registration_ttl: Duration,
    /// At most this many launches per Provisioner in any minute (`backoff::LaunchRate`).
    pub max_launches_per_minute: u32,
    /// The global node settings (memory overhead, pod density, reserved ENIs, pod ENIs) every
    /// Provisioner's kubelet configuration is applied over.
    pub node_settings: crate::scheduling::NodeSettings,
    /// Kubernetes version whose AMIs nodes boot; `None` reads the API server's.
    pub kubernetes_version: Option<KubernetesVersion>,
}

/// How long a launched node may stay not Ready before it is deleted, by default (as by
/// `core@v0.28.0:pkg/controllers/machine/lifecycle/liveness.go`).
pub const DEFAULT_REGISTRATION_TTL: Duration = Duration::from_secs(15 * 60);

impl Default for ProvisioningConfig {
    fn default() -> Self {
        ProvisioningConfig {
            cluster_name: String::new(),
            region: String::new(),
            windows: BatchWindows::default(),
            bind_pods: true,
            registration_ttl: DEFAULT_REGISTRATION_TTL,
            max_launches_per_minute: 100,
            node_settings: Default::default(),
            kubernetes_version: None,
        }
    }
}

/// Pod nomination events: 5 per second, bursts of 10 (Karpenter's
/// `core@v0.27.0:pkg/controllers/provisioning/scheduling/events.go` PodNominationRateLimiter).
const NOMINATION_EVENTS_PER_SECOND: f64 = 5.0;
const NOMINATION_EVENTS_BURST: u32 = 10;

/// How long the API server's version is reused before it is read again (Karpenter's 1 min).
const KUBERNETES_VERSION_TTL: Duration = Duration::from_secs(60);

/// What provisioning's passes, its warm-up and the other controllers' calls share.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub config: ProvisioningConfig,
    /// What launch back-offs and rates, plans awaiting their node, registration and the cached
    /// API server version are timed on.
    pub clock: Arc<dyn Clock>,
    recorder: Recorder,
    batcher: Batcher,
    /// The shared cluster state.
    state: Stores,
    /// Held by a pass and by `replace`: one simulation-and-launch at a time.
    pass_lock: Mutex<()>,
    /// Runaway protection per owner of pods, and the launch rate per Provisioner.
    backoff: StdMutex<backoff::LaunchBackoff>,
    launch_rate: StdMutex<backoff::LaunchRate>,
    /// The API server's version and when it was read.
    api_server_version: StdMutex<Option<(Instant, KubernetesVersion)>>,
    /// The rate limit of `Nominated` events.
    nomination_events: StdMutex<TokenBucket>,
    /// Event publishing left to run in the background. Dropped with the context, which aborts
    /// what is still running: a term that lost the Lease writes nothing more.
    background: StdMutex<tokio::task::JoinSet<()>>,
    /// Instances launched before this term that no Node names, listed at the term's first
    /// launch (`adopt.rs`); a launch of the same configuration takes one instead of launching.
    adoptable: Mutex<Option<Vec<crate::cloudprovider::Instance>>>,
}

/// The shared cluster state a pass reads.
type Stores = Arc<Cluster>;

impl Context {
    /// A context for the controller.
    pub fn new(shared: &Shared, config: ProvisioningConfig) -> Arc<Context> {
        Arc::new(Context {
            recorder: shared.recorder.clone(),
            client: shared.client.clone(),
            cloud: shared.cloud.clone(),
            metrics: shared.metrics.clone(),
            batcher: Batcher::default(),
            state: shared.state.clone(),
            pass_lock: Mutex::new(()),
            backoff: StdMutex::new(backoff::LaunchBackoff::default()),
            launch_rate: StdMutex::new(backoff::LaunchRate::new(config.max_launches_per_minute)),
            api_server_version: StdMutex::new(None),
            nomination_events: StdMutex::new(TokenBucket::new(
                NOMINATION_EVENTS_PER_SECOND,
                NOMINATION_EVENTS_BURST,
                shared.clock.instant(),
            )),
            background: StdMutex::new(tokio::task::JoinSet::new()),
            adoptable: Mutex::new(None),
            clock: shared.clock.clone(),
            config,
        })
    }

    /// `nodes` as the simulation sees them, with the pods bound to them (`StateNode::existing`),
    /// their instance types as `types` has them.
    fn existing_nodes_with(
        types: &catalogue::TypeCache,
        nodes: &[Arc<Node>],
        all_pods: &[Arc<Pod>],
        provisioners: &[Arc<Provisioner>],
    ) -> Vec<ExistingNode> {
        state::node::group(nodes, all_pods, |_| false, types)
            .iter()
            .map(|n| n.existing(provisioners))
            .collect()
    }

    /// Starts a provisioning pass soon (after the batching window), e.g. for the pods of a node
    /// that is going away.
    pub fn trigger(&self) {
        self.batcher.trigger();
    }

    /// Provisions room for the pods of `node_name`, which is about to be drained (expiration,
    /// `core@v0.27.0:pkg/controllers/deprovisioning/expiration.go`): the simulation treats its
    /// pods as pending and the node as gone (as every pass does for nodes being deleted,
    /// `pods::to_place`), fills existing nodes
    /// first and launches what is still needed through the normal path. Returns the names of the Nodes launched (none when the pods fit elsewhere). Runs
    /// between passes, never beside one.
    pub async fn replace(&self, node_name: &str) -> Result<Vec<String>, PassError> {
        let stores = &self.state;
        let _one_at_a_time = self.pass_lock.lock().await;
        stores.ready().await?;
        let all_nodes = stores.nodes.state();
        let all_pods = stores.pods.state();
        let (nodes, pending) = pods::to_place(&all_nodes, &all_pods, Some(node_name));
        pass::provision(self, stores, pending, &nodes, &all_pods, &HashSet::new()).await
    }
}

/// Runs the provisioning controller until `shutdown`; passes only run while `leading` is true.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    ctx.metrics.controller_started("provisioner");
    let stores = ctx.state.clone();
    let trigger = ctx.clone();
    stores.on_pod_change("provisioning", move |pod| {
        if is_provisionable(pod) {
            trigger.batcher.trigger();
        }
        if pod.metadata.deletion_timestamp.is_some() {
            trigger.backoff.lock().unwrap_or_else(|e| e.into_inner()).deleting(pod);
        }
    });
    // Provisionable pods may need a later pass (limits, back-off): re-trigger every 10 s while
    // any remain.
    let retrigger = async {
        let mut ticker = tokio::time::interval(RETRIGGER_INTERVAL);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {
                    // The passes run in this task too, so this beat says it is polled; a pass
                    // that does not end is caught by its own deadline.
                    ctx.metrics.liveness.beat("provisioning", RETRIGGER_INTERVAL);
                    if ctx.state.pods.state().iter().any(|p| is_provisionable(p)) {
                        ctx.batcher.trigger();
                    }
                }
            }
        }
    };
    let passes = async {
        let mut leading = leading.clone();
        let mut failures = 0;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                window = ctx.batcher.wait(ctx.config.windows) => ctx.metrics.batch_duration.observe(window.as_secs_f64()),
            }
            if !*leading.borrow_and_update() {
                continue;
            }
            let started = Instant::now();
            let _pass = ctx.metrics.liveness.pass("provisioning");
            crate::failpoint::pass_point("provisioning").await;
            let result = pass::pass(&ctx, &stores).await;
            if let Err(e) = &result {
                failures += 1;
                let delay = crate::retry::jittered(backoff::pass_retry_delay(failures));
                warn!(error = %telemetry::chain(e), retry_in_ms = delay.as_millis() as u64, "provisioning pass failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
                ctx.batcher.trigger();
            } else {
                failures = 0;
            }
            ctx.metrics.scheduling_duration.observe(started.elapsed().as_secs_f64());
            ctx.metrics.reconciled("provisioner", started, result.is_ok());
        }
    };
    tokio::join!(passes, retrigger, warm(&ctx, &stores, leading.clone(), &shutdown));
}

/// Keeps what the first pass of a burst would otherwise fetch while pods wait warm, from the
/// moment this replica leads: the API server's version, the instance-type catalogue with its
/// prices (seconds of EC2 and Pricing calls when cold) and each Provisioner's resolved template
/// (subnets, security groups, AMIs), which every AWSNodeTemplate's status then shows
/// (`template_status`). Re-read every minute, so a catalogue past its TTL is mostly refreshed
/// here rather than in a pass. Failures are left for the passes to report.
async fn warm(ctx: &Context, stores: &Stores, mut leading: watch::Receiver<bool>, shutdown: &CancellationToken) {
    let mut ticker = tokio::time::interval(WARM_INTERVAL);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        while !*leading.borrow_and_update() {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = leading.changed() => if changed.is_err() { return },
            }
        }
        if stores.ready().await.is_err() {
            return;
        }
        let Ok(version) = ctx.kubernetes_version().await else { continue };
        // A failure here is the next pass's too, which reports it; logged, not dropped.
        if let Err(e) = ctx.cloud.instance_types().await {
            debug!(error = %telemetry::chain(&e), "warming the instance-type catalogue");
        }
        // Inline providers here; every AWSNodeTemplate (what a providerRef names) is resolved
        // by the status writer, which warms the same cache.
        for p in stores.provisioners.state().iter().filter(|p| p.spec.provider_ref.is_none()) {
            if let Ok((template, _)) = launch::node_template(ctx, stores, p, version) {
                if let Err(e) = ctx.cloud.resolve(&template).await {
                    debug!(provisioner = %p.name_any(), error = %telemetry::chain(&e), "warming the provisioner's node template");
                }
            }
        }
        template_status::write(ctx, stores, version).await;
    }
}

/// How often `warm` reads the catalogue and templates again.
const WARM_INTERVAL: Duration = Duration::from_secs(60);
/// How often provisioning looks for pods still provisionable, to run another pass for them.
const RETRIGGER_INTERVAL: Duration = Duration::from_secs(10);

/// Why a pass, a snapshot or a replacement failed.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// A watch of the shared cluster view ended (the process is shutting down).
    #[error(transparent)]
    ViewClosed(#[from] crate::controllers::state::ViewClosed),
    /// The shared cluster view did not settle after a watch failure.
    #[error("the cluster view did not settle: {0}")]
    Unsettled(String),
    /// The API server's version could not be read (and none was read before).
    #[error("reading the API server's version")]
    KubernetesVersion(#[source] kube::Error),
    /// The API server gave a version nodes cannot boot.
    #[error("the API server's version: {0}")]
    UnusableVersion(String),
    /// A Provisioner cannot launch: its AWSNodeTemplate or inline provider.
    #[error("provisioner {provisioner} cannot launch nodes: {reason}")]
    NodeTemplate {
        /// The Provisioner.
        provisioner: String,
        /// Why.
        reason: String,
    },
    /// The plan was made from a view that went stale during the pass: nothing launched.
    #[error("not launching: {0}")]
    NotLaunching(String),
    /// The API server does not answer, so the Nodes of a launch could not be created.
    #[error("not launching: the API server does not answer")]
    ApiServerSilent(#[source] kube::Error),
    /// Nodes created by the pass did not appear in the node cache within 30 s.
    #[error("{0} nodes created by this pass did not appear in the node cache within 30 s")]
    NodesNotSeen(usize),
    /// A replacement's Provisioner was deleted meanwhile.
    #[error("provisioner {0} no longer exists")]
    ProvisionerGone(String),
    /// A call to the cloud failed.
    #[error(transparent)]
    Cloud(#[from] crate::cloudprovider::Error),
    /// A launch failed.
    #[error(transparent)]
    Launch(#[from] launch::LaunchError),
    /// A call to the API server failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

impl Context {
    /// The Kubernetes version whose AMIs nodes boot: the configured one, else the API server's
    /// `major.minor` (`/version`), read at most once a minute
    /// (`aws@v0.27.0:pkg/providers/amifamily/ami.go` `KubeServerVersion`). When the API server
    /// cannot be asked, the last version read is kept.
    async fn kubernetes_version(&self) -> Result<KubernetesVersion, PassError> {
        if let Some(v) = self.config.kubernetes_version {
            return Ok(v);
        }
        let cached = *self
            .api_server_version
            .lock()
            .expect("version lock is never poisoned: no panics while held");
        let now = self.clock.instant();
        if let Some((_, v)) = cached.filter(|(at, _)| now.saturating_duration_since(*at) < KUBERNETES_VERSION_TTL) {
            return Ok(v);
        }
        let read = match self.client.apiserver_version().await {
            Ok(info) => KubernetesVersion::from_api_server(&info.major, &info.minor).map_err(|e| PassError::UnusableVersion(e.to_string())),
            Err(e) => Err(PassError::KubernetesVersion(e)),
        };
        match (read, cached) {
            (Ok(v), _) => {
                if cached.is_none_or(|(_, old)| old != v) {
                    info!(kubernetes_version = %v, "nodes boot the AMIs of the API server's Kubernetes version");
                }
                *self
                    .api_server_version
                    .lock()
                    .expect("version lock is never poisoned: no panics while held") = Some((self.clock.instant(), v));
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

impl Context {
    /// The cluster as a provisioning pass would simulate it now (nodes being deleted left out,
    /// their pods and the pending ones to place; `core@v0.27.0:.../deprovisioning/helpers.go`
    /// `simulateScheduling`), for deprovisioning to simulate removing nodes on. Nothing is
    /// reported: pods whose volumes cannot be provided and Provisioners that cannot launch are
    /// left out quietly (the provisioning passes report them).
    pub async fn snapshot(&self) -> Result<Snapshot, PassError> {
        let stores = &self.state;
        stores.ready().await?;
        let all_nodes = stores.nodes.state();
        let all_pods = stores.pods.state();
        let (nodes, pending) = pods::to_place(&all_nodes, &all_pods, None);
        pass::snapshot(self, stores, pending, &nodes, &all_pods, false).await
    }

    /// The AWS settings nodes of `provisioner` are launched with now (its AWSNodeTemplate or its
    /// inline provider), for drift to compare a node with.
    pub async fn node_template_of(&self, provisioner: &Provisioner) -> Result<NodeTemplate, PassError> {
        let version = self.kubernetes_version().await?;
        launch::node_template(self, &self.state, provisioner, version)
            .map(|(template, _)| template)
            .map_err(|reason| PassError::NodeTemplate {
                provisioner: provisioner.name_any(),
                reason,
            })
    }

    /// Launches `request` (a consolidation's replacement) through the normal launch path, between
    /// passes; returns the name of the Node created.
    pub async fn launch_replacement(&self, request: &scheduling::NodeRequest) -> Result<String, PassError> {
        let _one_at_a_time = self.pass_lock.lock().await;
        let stores = &self.state;
        stores.ready().await?;
        let provisioner = stores
            .provisioners
            .state()
            .into_iter()
            .find(|p| p.name_any() == request.provisioner)
            .ok_or_else(|| PassError::ProvisionerGone(request.provisioner.clone()))?;
        let version = self.kubernetes_version().await?;
        let (template, spot_max) =
            launch::node_template(self, stores, &provisioner, version).map_err(|reason| PassError::NodeTemplate {
                provisioner: provisioner.name_any(),
                reason,
            })?;
        self.cloud.resolve(&template).await?;
        let name = launch::launch(self, request, &provisioner, template, spot_max).await?;
        stores.nominate(&name, NOMINATION);
        let deadline = Instant::now() + NODE_SEEN_LIMIT;
        while stores.nodes.get(&reflector::ObjectRef::new(&name)).is_none() && Instant::now() < deadline {
            tokio::time::sleep(NODE_SEEN_POLL).await;
        }
        Ok(name)
    }
}

/// What the other controllers may ask of provisioning (Karpenter's `provisioning.Provisioner`
/// as its deprovisioners and interruption hold it): a pass soon, the cluster as a pass sees it,
/// room for a node's pods, one node launched; and, for the binder, pods whose planned room is
/// gone.
/// They hold this, not provisioning's `Context`.
#[async_trait::async_trait]
pub trait Provisioning: Send + Sync {
    /// Starts a pass soon (after the batching window), e.g. for the pods of a node going away.
    fn trigger(&self);
    /// The pods of these UIDs lost the room planned for them on their node to other pods (the
    /// binder found it taken): they no longer wait for that node, and a pass soon places them
    /// anew (`backoff::LaunchBackoff::seat_taken`).
    fn seats_taken(&self, uids: &[String]);
    /// The cluster as a provisioning pass would simulate it now (`Context::snapshot`).
    async fn snapshot(&self) -> Result<Snapshot, PassError>;
    /// Provisions room for the pods of `node`, about to be drained; the Nodes launched
    /// (`Context::replace`).
    async fn replace(&self, node: &str) -> Result<Vec<String>, PassError>;
    /// Launches `request` through the normal launch path; the Node created
    /// (`Context::launch_replacement`).
    async fn launch(&self, request: &scheduling::NodeRequest) -> Result<String, PassError>;
    /// The AWS settings `provisioner`'s nodes are launched with now (`Context::node_template_of`).
    async fn node_template_of(&self, provisioner: &Provisioner) -> Result<NodeTemplate, PassError>;
}

#[async_trait::async_trait]
impl Provisioning for Context {
    fn trigger(&self) {
        Context::trigger(self)
    }
    fn seats_taken(&self, uids: &[String]) {
        let mut backoff = self.backoff.lock().unwrap_or_else(|e| e.into_inner());
        for uid in uids {
            backoff.seat_taken(uid);
        }
        drop(backoff);
        self.batcher.trigger();
    }
    async fn snapshot(&self) -> Result<Snapshot, PassError> {
        Context::snapshot(self).await
    }
    async fn replace(&self, node: &str) -> Result<Vec<String>, PassError> {
        Context::replace(self, node).await
    }
    async fn launch(&self, request: &scheduling::NodeRequest) -> Result<String, PassError> {
        self.launch_replacement(request).await
    }
    async fn node_template_of(&self, provisioner: &Provisioner) -> Result<NodeTemplate, PassError> {
        Context::node_template_of(self, provisioner).await
    }
}

/// The action of every event provisioning publishes.
const ACTION: &str = "Provisioning";

async fn publish<K: Resource<DynamicType = ()>>(ctx: &Context, object: &K, type_: EventType, reason: &str, note: &str) {
    events::publish(&ctx.recorder, object, type_, reason, ACTION, note).await;
}
