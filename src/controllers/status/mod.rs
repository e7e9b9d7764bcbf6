//! Status: the Provisioners' status and the gauges, on the leader every 10 s: each
//! Provisioner's `status.resources` (Karpenter's counter,
//! `core@v0.27.0:pkg/controllers/counter/controller.go`), the usage, limit and usage-percentage
//! gauges, the `karpenter_nodes_*` and node price gauges (`node_metrics.rs`; Karpenter's
//! `core@v0.27.0:pkg/controllers/metrics/`). `karpenter_pods_state` is written at scrape time from
//! the cluster view (`pod_states`), and `karpenter_pods_startup_time_seconds` observed on every
//! pod change (`pods::Startups`).

pub mod node_metrics;
pub mod pods;
pub mod usage;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::apis::v1alpha5::Provisioner;
use crate::controllers::state::leading_tick;
use crate::controllers::state::{Cluster, StateNode};
use crate::controllers::Shared;
use crate::metrics::{GaugeSeries, Metrics};
use crate::scheduling;

/// How often the Provisioners' status and the gauges are written.
pub const TICK: Duration = Duration::from_secs(10);

/// What status works with.
pub struct Context {
    client: kube::Client,
    metrics: Metrics,
    state: Arc<Cluster>,
    /// Pods seen pending, for `karpenter_pods_startup_time_seconds`; kept here so that the
    /// controller started again after a panic goes on with the same record.
    startups: Arc<Mutex<pods::Startups>>,
}

impl Context {
    /// Status's context; pod startups are tracked from now (`Shared::clock`).
    pub fn new(shared: &Shared) -> Arc<Context> {
        Arc::new(Context {
            client: shared.client.clone(),
            metrics: shared.metrics.clone(),
            state: shared.state.clone(),
            startups: Arc::new(Mutex::new(pods::Startups::new(shared.clock.now()))),
        })
    }
}

/// Every 10 s while this replica leads: each Provisioner's `status.resources` (written only when
/// it changed), the usage, limit and usage-percentage gauges and the node gauges (and pods gone
/// are forgotten by the startup tracker). From the start: `karpenter_pods_state`'s source and the
/// pod startup times, both reported only while this replica leads.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    ctx.metrics.controller_started("metric_scraper");
    let stores = ctx.state.clone();
    pod_states(&ctx.metrics, stores.clone(), leading.clone());
    // Pod startup times are observed on every pod change (the leader's), so a pod that starts
    // and goes between two ticks still counts.
    let (tracker, observing, metrics) = (ctx.startups.clone(), leading.clone(), ctx.metrics.clone());
    stores.on_pod_change("status", move |pod| {
        if *observing.borrow() {
            if let Some(seconds) = tracker.lock().unwrap_or_else(|e| e.into_inner()).see(pod) {
                metrics.pod_startup_time.observe(&[], seconds);
            }
        }
    });
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut usage_series = GaugeSeries::new(ctx.metrics.provisioner_usage.clone());
    let mut limit_series = GaugeSeries::new(ctx.metrics.provisioner_limit.clone());
    let mut percent_series = GaugeSeries::new(ctx.metrics.provisioner_usage_pct.clone());
    let mut node_series = NodeSeries::new(&ctx.metrics);
    while leading_tick(&mut ticker, "status", &ctx.metrics.liveness, &leading, &stores, &shutdown).await {
        let started = Instant::now();
        let provisioners = stores.provisioners.state();
        // One read of the caches and one view of the nodes for the usage and the node gauges.
        let all_pods = stores.pods.state();
        let view = stores.view_of(&stores.nodes.state(), &all_pods);
        let nodes: Vec<_> = view.iter().map(|n| n.existing(&provisioners)).collect();
        let (mut usages, mut limits, mut percents) = (Vec::new(), Vec::new(), Vec::new());
        for p in provisioners {
            let name = p.name_any();
            let used = scheduling::provisioner_usage(&nodes, &name);
            for r in usage::resource_usage(&p, &used) {
                let labels = vec![name.clone(), r.resource.clone()];
                if let (Some(limit), Some(percent)) = (r.limit, r.percent()) {
                    limits.push((labels.clone(), limit));
                    percents.push((labels.clone(), percent));
                }
                usages.push((labels, r.usage));
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
        usage_series.replace_all(usages);
        limit_series.replace_all(limits);
        percent_series.replace_all(percents);

        node_series.replace_all(&stores, &view);
        let live: HashSet<&str> = all_pods.iter().filter_map(|p| p.metadata.uid.as_deref()).collect();
        ctx.startups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid| live.contains(uid));
        ctx.metrics.reconciled("metric_scraper", started, true);
    }
}

/// The `karpenter_nodes_*` gauges and the node price gauge, replaced as a whole each time.
struct NodeSeries {
    /// In `NodeGauges::into_array`'s order.
    gauges: [GaugeSeries; 6],
    price: GaugeSeries,
}

impl NodeSeries {
    fn new(m: &Metrics) -> Self {
        NodeSeries {
            gauges: [
                &m.nodes_allocatable,
                &m.nodes_pod_requests,
                &m.nodes_pod_limits,
                &m.nodes_daemon_requests,
                &m.nodes_daemon_limits,
                &m.nodes_system_overhead,
            ]
            .map(|g| GaugeSeries::new(g.clone())),
            price: GaugeSeries::new(m.node_price.clone()),
        }
    }

    /// Every node's series (pods by the node they are bound to); a node gone takes its series.
    fn replace_all(&mut self, state: &Cluster, nodes: &[StateNode]) {
        let mut all: [Vec<node_metrics::Series>; 6] = Default::default();
        for node in nodes {
            let pods: Vec<&Pod> = node.pods.iter().map(Arc::as_ref).collect();
            for (all, series) in all.iter_mut().zip(node_metrics::node_gauges(&node.node, &pods).into_array()) {
                all.extend(series);
            }
        }
        for (gauge, series) in self.gauges.iter_mut().zip(all) {
            gauge.replace_all(series);
        }
        // Nodes launched before the price annotation existed are priced from the catalogue, as
        // the last finished pass translated it (a pass translating the next one is not waited for).
        let type_cache = state.types.current();
        let mut catalogue_price = |instance_type: &str, capacity_type: &str, zone: &str| {
            type_cache
                .catalogue()
                .iter()
                .find(|t| t.facts.name == instance_type)?
                .offerings
                .iter()
                .find(|o| o.capacity_type == capacity_type && o.zone == zone)
                .map(|o| o.price)
        };
        let prices: Vec<_> = nodes
            .iter()
            .filter_map(|n| node_metrics::node_price(&n.node, &mut catalogue_price))
            .collect();
        self.price.replace_all(prices);
    }
}

/// Sets `karpenter_pods_state`'s source: every pod of the cluster view with the node it is bound
/// to, while this replica leads (a follower reports nothing, as before; the cache is empty until
/// its first list is in).
fn pod_states(metrics: &Metrics, stores: Arc<Cluster>, leading: watch::Receiver<bool>) {
    metrics.pods_state.set_source(move |sink| {
        if !*leading.borrow() {
            return;
        }
        let nodes: HashMap<String, Arc<Node>> = stores.nodes.state().into_iter().map(|n| (n.name_any(), n)).collect();
        for pod in stores.pods.state() {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).and_then(|n| nodes.get(n));
            sink(&pods::pod_state_labels(&pod, node.map(|n| n.as_ref())));
        }
    });
}
