//! Garbage collection (karpenter-rs creates Nodes at launch as Karpenter v0.27 did, but unlike
//! v0.27 collects what that leaks): instances of this cluster that no Node names after a grace
//! period are terminated (a Node force-deleted without its finalizer; an instance launched for
//! pending pods whose Node was never created once nobody adopted it within the registration TTL), and Nodes of ours whose instance is gone are deleted (the termination
//! controller then drains them and, the instance being gone, releases them). Launch templates
//! unused for a while are deleted too (`aws@v0.27.0:pkg/providers/launchtemplate/launchtemplate.go`).
//! Leader only; every 10 s for the first 20 passes, then every `interval`. `collect.rs` decides.

pub mod collect;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::runtime::events::{EventType, Recorder};
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, instrument, warn};

use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::cloudprovider::{self, CloudProvider};
use crate::controllers::clock::Clock;
use crate::controllers::events::publish;
use crate::controllers::node_ops::{self, Written};
use crate::controllers::Shared;
use crate::metrics::{self, Metrics};
use crate::telemetry;

/// Settings of the garbage collector.
#[derive(Clone, Debug)]
pub struct GarbageCollectionConfig {
    /// Period between passes once started up.
    pub interval: Duration,
    /// Period of the first `startup_passes` passes.
    pub startup_interval: Duration,
    /// How many passes run at `startup_interval`.
    pub startup_passes: u32,
    /// How old an instance without a Node (or a Node, before its instance is looked up) must be.
    pub grace_period: Duration,
    /// How long an instance launched for pending pods (tagged with its launch configuration) is
    /// left for a restarted controller to adopt (provisioning's `adopt.rs`): the registration TTL.
    pub adoptable_for: Duration,
    /// Only instances carrying all these tags are collected (none: every instance of the cluster).
    pub instance_tags: BTreeMap<String, String>,
    /// Label selector of the Nodes whose instance is looked up (ours by default).
    pub node_selector: String,
    /// Launch templates no launch has used for this long are deleted.
    pub launch_template_unused_for: Duration,
    /// At most this many instances, and this many Nodes, are removed by one pass.
    pub max_removals_per_pass: usize,
}

/// Period between garbage-collection passes once started up, by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(120);
/// Longest period of the first passes after start (`--gc-interval` may make it shorter).
pub const STARTUP_INTERVAL: Duration = Duration::from_secs(10);
/// How old an instance without a Node must be before it is collected, by default.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(120);
/// How long an instance launched for pending pods is left to be adopted, by default (the
/// registration TTL's default).
pub const DEFAULT_ADOPTABLE_FOR: Duration = Duration::from_secs(15 * 60);
/// Launch templates no launch has used for this long are deleted, by default.
pub const DEFAULT_LAUNCH_TEMPLATE_UNUSED_FOR: Duration = Duration::from_secs(600);

impl Default for GarbageCollectionConfig {
    fn default() -> Self {
        GarbageCollectionConfig {
            interval: DEFAULT_INTERVAL,
            startup_interval: STARTUP_INTERVAL,
            startup_passes: 20,
            grace_period: DEFAULT_GRACE_PERIOD,
            adoptable_for: DEFAULT_ADOPTABLE_FOR,
            instance_tags: BTreeMap::new(),
            node_selector: PROVISIONER_NAME_LABEL.to_string(),
            launch_template_unused_for: DEFAULT_LAUNCH_TEMPLATE_UNUSED_FOR,
            max_removals_per_pass: 20,
        }
    }
}

/// What the garbage collector needs.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub config: GarbageCollectionConfig,
    /// What the grace periods of instances and nodes are measured on.
    pub clock: Arc<dyn Clock>,
    recorder: Recorder,
}

impl Context {
    /// A context for the collector.
    pub fn new(shared: &Shared, config: GarbageCollectionConfig) -> Arc<Context> {
        Arc::new(Context {
            recorder: shared.recorder.clone(),
            client: shared.client.clone(),
            cloud: shared.cloud.clone(),
            metrics: shared.metrics.clone(),
            config,
            clock: shared.clock.clone(),
        })
    }

    /// What of `found` (out of `seen`) this pass removes, logging what it holds back and why.
    fn bounded<T>(&self, what: &str, found: Vec<T>, seen: usize) -> Vec<T> {
        match collect::bounded(found, seen, self.config.max_removals_per_pass) {
            collect::Removal::Remove { now, held_back } => {
                if held_back > 0 {
                    info!(
                        held_back,
                        removing = now.len(),
                        "garbage collection removes at most {} {what} per pass; the rest wait for the next pass",
                        self.config.max_removals_per_pass
                    );
                }
                now
            }
            collect::Removal::Suspicious { found, seen } => {
                error!(
                    found,
                    seen,
                    "{found} of {seen} {what}: garbage collection removes none of them, as this is what a wrong AWS region or account, cluster name or kubeconfig looks like; check the settings, or remove them by hand if they are really gone"
                );
                Vec::new()
            }
        }
    }
}

/// Runs garbage-collection passes until `shutdown`, only while `leading` is true.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    ctx.metrics.controller_started("garbagecollection");
    let mut passes = 0u32;
    loop {
        let wait = if passes < ctx.config.startup_passes {
            ctx.config.startup_interval
        } else {
            ctx.config.interval
        };
        ctx.metrics.liveness.beat("garbagecollection", wait);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if !*leading.borrow() {
            continue;
        }
        let started = std::time::Instant::now();
        let _pass = ctx.metrics.liveness.pass("garbagecollection");
        crate::failpoint::pass_point("garbagecollection").await;
        let result = pass(&ctx).await;
        ctx.metrics.reconciled("garbagecollection", started, result.is_ok());
        match result {
            Ok(()) => passes = passes.saturating_add(1),
            Err(e) => warn!(error = %telemetry::chain(&e), "garbage collection pass failed; retrying with the next one"),
        }
    }
}

/// One pass: instances first, then Nodes (listed after the instances, so an instance launched
/// before the listing has its Node in it once past the grace period).
#[instrument(skip_all)]
async fn pass(ctx: &Context) -> Result<(), GarbageCollectionError> {
    let instances = ctx
        .metrics
        .cloud_call("list", ctx.cloud.list())
        .await
        .map_err(|source| GarbageCollectionError::ListInstances { source })?;
    let instances: Vec<_> = instances
        .into_iter()
        .filter(|i| ctx.config.instance_tags.iter().all(|(k, v)| i.tags.get(k) == Some(v)))
        .collect();
    let nodes_api: Api<Node> = Api::all(ctx.client.clone());
    let nodes = nodes_api
        .list(&ListParams::default())
        .await
        .map_err(|source| GarbageCollectionError::ListNodes { source })?
        .items;
    let leaked = collect::leaked_instances(
        &instances,
        &nodes,
        ctx.config.grace_period,
        ctx.config.adoptable_for,
        ctx.clock.now().into(),
    );
    for instance_id in ctx.bounded("instances without a node", leaked, instances.len()) {
        let provisioner = instances
            .iter()
            .find(|i| i.id == instance_id)
            .and_then(|i| i.tags.get(PROVISIONER_NAME_LABEL).cloned())
            .unwrap_or_default();
        match ctx.metrics.cloud_call("delete", ctx.cloud.delete(&instance_id)).await {
            Ok(()) => info!(instance_id = %instance_id, provisioner = %provisioner, "garbage collected instance without a node"),
            Err(e) => warn!(instance_id = %instance_id, error = %telemetry::chain(&e), "terminating leaked instance; retrying next pass"),
        }
    }
    let selected = nodes_api
        .list(&ListParams::default().labels(&ctx.config.node_selector))
        .await
        .map_err(|source| GarbageCollectionError::ListNodes { source })?
        .items;
    let checked = collect::nodes_to_check(&selected, ctx.config.grace_period, ctx.clock.now());
    let mut gone = Vec::new();
    for (node_name, instance_id) in &checked {
        // Timed by hand: a gone instance is the answer looked for here, not an error to count.
        let result = {
            let _timer = ctx.metrics.cloudprovider_duration.with_label_values(&["get"]).start_timer();
            ctx.cloud.get(instance_id).await
        };
        match result {
            Ok(_) => {}
            Err(e) if e.is_not_found() => gone.push((node_name.clone(), instance_id.clone())),
            Err(e) => {
                ctx.metrics.cloudprovider_errors.with_label_values(&["get", e.kind()]).inc();
                warn!(node = %node_name, instance_id = %instance_id, error = %telemetry::chain(&e), "looking up the instance of node; retrying next pass");
            }
        }
    }
    for (node_name, instance_id) in ctx.bounded("nodes whose instance is gone", gone, checked.len()) {
        let Some(node) = selected.iter().find(|n| n.name_any() == node_name) else {
            continue;
        };
        match node_ops::delete(&ctx.client, node).await {
            Ok(Written::Written) => {}
            Ok(Written::Gone) => continue,
            Err(source) => {
                warn!(node = %node_name, error = %telemetry::chain(&source), "deleting node whose instance is gone; retrying next pass");
                continue;
            }
        }
        let provisioner = node.labels().get(PROVISIONER_NAME_LABEL).cloned().unwrap_or_default();
        ctx.metrics
            .nodes_terminated
            .with_label_values(&[&provisioner, metrics::reason::GARBAGE_COLLECTED])
            .inc();
        info!(node = %node_name, instance_id = %instance_id, provisioner = %provisioner, "garbage collected node whose instance is gone");
        let note = format!("Instance {instance_id} no longer exists; deleting the node");
        publish(
            &ctx.recorder,
            node,
            EventType::Normal,
            "GarbageCollected",
            "GarbageCollecting",
            &note,
        )
        .await;
    }
    // Last, and not failing the pass: a template deleted late costs nothing meanwhile.
    let unused = ctx.cloud.delete_unused_launch_templates(ctx.config.launch_template_unused_for);
    if let Err(e) = ctx.metrics.cloud_call("delete_launch_templates", unused).await {
        warn!(error = %telemetry::chain(&e), "deleting unused launch templates; retrying next pass");
    }
    Ok(())
}

/// What can go wrong in a garbage-collection pass.
#[derive(Debug, thiserror::Error)]
pub enum GarbageCollectionError {
    /// The cluster's instances could not be listed.
    #[error("listing the cluster's instances")]
    ListInstances {
        /// Why.
        #[source]
        source: cloudprovider::Error,
    },
    /// The Nodes could not be listed.
    #[error("listing nodes")]
    ListNodes {
        /// Why.
        #[source]
        source: kube::Error,
    },
}
