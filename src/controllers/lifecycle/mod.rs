//! Node lifecycle: the life of a node we launched between its creation and its first pods
//! (`core@v0.27.0:pkg/controllers/node/initialization.go`,
//! `core@v0.28.0:pkg/controllers/machine/lifecycle/liveness.go`): it is labelled
//! `karpenter.sh/initialized=true` once it is Ready, its startup and not-ready taints are gone and
//! it advertises every resource its instance type has; one that is not Ready within the
//! registration TTL is deleted (through the termination finalizer, which terminates its instance),
//! so that capacity which never joins stops absorbing pending pods and they get a fresh node.
//! Until initialised, a node is in flight: the simulation counts its instance type's capacity
//! (`scheduling::ExistingNode::expect`) and emptiness leaves it alone.
//!
//! `decide.rs` is pure; `run` is the leader's loop that applies it every 2 s.

mod decide;
pub use decide::{decide, requested_annotation, Lifecycle};

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::{EventType, Recorder};
use kube::ResourceExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apis::v1alpha5::labels::{INITIALIZED_LABEL, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL};
use crate::controllers::clock::Clock;
use crate::controllers::events;
use crate::controllers::node_ops::{self, Written};
use crate::controllers::state::Cluster;
use crate::controllers::state::leading_tick;
use crate::controllers::Shared;
use crate::metrics::{self, Metrics};

/// How often node lifecycle looks at the nodes.
pub const TICK: Duration = Duration::from_secs(2);

/// The action of every event node lifecycle publishes.
const ACTION: &str = "NodeLifecycle";

/// What node lifecycle works with.
pub struct Context {
    client: kube::Client,
    metrics: Metrics,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
    state: Arc<Cluster>,
    /// A node we launched that is not Ready this long after its creation is deleted
    /// (`ProvisioningConfig::registration_ttl`).
    registration_ttl: Duration,
}

impl Context {
    /// Node lifecycle's context, deleting nodes not Ready within `registration_ttl`.
    pub fn new(shared: &Shared, registration_ttl: Duration) -> Arc<Context> {
        Arc::new(Context {
            client: shared.client.clone(),
            metrics: shared.metrics.clone(),
            recorder: shared.recorder.clone(),
            clock: shared.clock.clone(),
            state: shared.state.clone(),
            registration_ttl,
        })
    }
}

/// Every 2 s while this replica leads and the view has its first lists: one `step`.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while leading_tick(&mut ticker, "nodelifecycle", &ctx.metrics.liveness, &leading, &ctx.state, &shutdown).await {
        step(&ctx).await;
    }
}

/// One look at every node of ours: labels those initialised and deletes those that never
/// registered.
async fn step(ctx: &Context) {
    let stores = &ctx.state;
    let now = ctx.clock.now();
    let provisioners = stores.provisioners.state();
    for node in stores.nodes.state() {
        let Some(owner) = node.labels().get(PROVISIONER_NAME_LABEL) else {
            continue;
        };
        let startup_taints = provisioners
            .iter()
            .find(|p| p.name_any() == *owner)
            .and_then(|p| p.spec.startup_taints.clone())
            .unwrap_or_default();
        let instance_type = node
            .labels()
            .get(INSTANCE_TYPE_LABEL)
            .and_then(|name| ctx.state.instance_type(owner, name));
        match decide(&node, &startup_taints, instance_type.as_deref(), ctx.registration_ttl, now) {
            Lifecycle::Ignore | Lifecycle::Wait => {}
            Lifecycle::Initialize => initialize(ctx, &node).await,
            Lifecycle::RegistrationFailed { age } => registration_failed(ctx, &node, age).await,
        }
    }
}

async fn initialize(ctx: &Context, node: &Node) {
    match node_ops::label(&ctx.client, node, &[(INITIALIZED_LABEL, "true")]).await {
        Ok(Written::Written) => info!(node = %node.name_any(), "node initialized"),
        Ok(Written::Gone) => debug!(node = %node.name_any(), "node gone or re-created before it was labelled initialized"),
        Err(e) => debug!(node = %node.name_any(), error = %e, "labelling the node initialized; retrying"),
    }
}

async fn registration_failed(ctx: &Context, node: &Node, age: Duration) {
    let name = node.name_any();
    let ttl = ctx.registration_ttl;
    warn!(node = %name, age_seconds = age.as_secs(), registration_ttl_seconds = ttl.as_secs(), "node did not become Ready within the registration TTL; deleting it and terminating its instance");
    let note = format!(
        "Node was not Ready {}s after launch (registration TTL {}s); deleting it and terminating its instance",
        age.as_secs(),
        ttl.as_secs()
    );
    events::publish(&ctx.recorder, node, EventType::Warning, "NodeRegistrationFailed", ACTION, &note).await;
    match node_ops::delete(&ctx.client, node).await {
        Ok(Written::Written) => {
            let provisioner = node.labels().get(PROVISIONER_NAME_LABEL).cloned().unwrap_or_default();
            ctx.metrics
                .nodes_terminated
                .with_label_values(&[provisioner.as_str(), metrics::reason::LIVENESS])
                .inc();
        }
        Ok(Written::Gone) => {}
        Err(e) => warn!(node = %name, error = %e, "deleting a node that never registered; retrying"),
    }
}
