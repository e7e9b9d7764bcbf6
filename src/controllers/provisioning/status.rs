//! The leader's periodic work beside the passes: every 2 s the node lifecycle
//! (`lifecycle::step`), every 10 s each Provisioner's `status.resources` and the usage, limit and
//! `karpenter_pods_state` gauges.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{lifecycle, pods, usage, Context, Stores};
use crate::apis::v1alpha5::Provisioner;
use crate::scheduling;

/// Every 10 s on the leader: each Provisioner's `status.resources` (written only when it
/// changed), the usage, limit and usage-percentage gauges, and `karpenter_pods_state`.
pub(super) async fn status_loop(ctx: Arc<Context>, stores: Stores, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    // Every 2 s the node lifecycle (`lifecycle::step`), every 10 s the status.
    let mut ticker = tokio::time::interval(Duration::from_secs(2));
    let mut ticks: u64 = 0;
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported: BTreeSet<(String, String)> = BTreeSet::new();
    let mut pod_series: BTreeSet<[String; 10]> = BTreeSet::new();
    while next_leading_tick(&mut ticker, &leading, &stores, &shutdown).await {
        tracing::trace!(ticks, "status tick");
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
