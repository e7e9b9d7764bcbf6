//! Binding (karpenter-rs only; Karpenter leaves every pod to kube-scheduler): every 500 ms, the
//! pods a provisioning pass planned onto a node it launched (`state::Plans`) are bound once the
//! node is ready for them and `scheduling::binding::bindable` admits them; everything else is
//! left to kube-scheduler. The ready plans are copied out of the view and no lock is held across
//! an API call, so launches recording new plans never wait on the binder. A pod whose room went to
//! other pods is handed back to provisioning (`Provisioning::seats_taken`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::reflector;
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use futures::StreamExt;

use crate::controllers::clock::Clock;
use crate::controllers::provisioning::Provisioning;
use crate::controllers::state::leading_tick;
use crate::controllers::state::Cluster;
use crate::controllers::Shared;
use crate::metrics::Metrics;
use crate::scheduling::binding as rules;
use crate::scheduling::nodes::is_ready_for_pods;
use crate::scheduling::PodKey;

/// How often the binder looks for planned pods whose node is ready.
const TICK: Duration = Duration::from_millis(500);
/// Ready nodes whose planned pods are bound at the same time.
const NODES_AT_ONCE: usize = 8;
/// Bindings in flight at once for one node (the client's rate limit bounds them all).
const BINDINGS_AT_ONCE: usize = 16;

/// What the binder works with.
pub struct Context {
    client: kube::Client,
    metrics: Metrics,
    clock: Arc<dyn Clock>,
    state: Arc<Cluster>,
    /// Where pods whose room was taken go back to.
    provisioning: Arc<dyn Provisioning>,
    /// Whether planned pods are bound at all (else plans are only forgotten, and kube-scheduler
    /// places every pod, as with Karpenter).
    bind_pods: bool,
}

impl Context {
    /// The binder's context: `bind_pods` as `ProvisioningConfig::bind_pods` says.
    pub fn new(shared: &Shared, provisioning: Arc<dyn Provisioning>, bind_pods: bool) -> Arc<Context> {
        Arc::new(Context {
            client: shared.client.clone(),
            metrics: shared.metrics.clone(),
            clock: shared.clock.clone(),
            state: shared.state.clone(),
            provisioning,
            bind_pods,
        })
    }
}

/// While this replica leads, every 500 ms: binds planned pods to their node once it is ready;
/// forgets plans older than `PLAN_TTL`. Only the ready plans' pods are copied out, and no lock is
/// held across an API call, so launches recording new plans never wait on the binder.
pub async fn run(ctx: Arc<Context>, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(TICK);
    let stores = &ctx.state;
    // Plans outlive a term (they are in the shared view): a replica that follows binds nothing.
    while leading_tick(&mut ticker, "binder", &ctx.metrics.liveness, &leading, stores, &shutdown).await {
        crate::failpoint::stall_point("binder").await;
        let ready: Vec<(Arc<Node>, Vec<PodKey>)> = stores.plans.due(ctx.clock.instant(), |node_name, plan| {
            let node = stores.nodes.get(&reflector::ObjectRef::new(node_name))?;
            is_ready_for_pods(&node, &plan.startup_taints, &plan.requested).then_some(node)
        });
        if ctx.bind_pods {
            let binds: Vec<_> = ready.iter().map(|(node, pods)| bind_planned(&ctx, node, pods)).collect();
            futures::stream::iter(binds)
                .buffer_unordered(NODES_AT_ONCE)
                .collect::<Vec<()>>()
                .await;
        }
        stores.plans.forget(ready.iter().map(|(node, _)| node.name_any()));
    }
}

/// Binds the still-unbound pods planned for `node` that `rules::bindable` admits.
async fn bind_planned(ctx: &Context, node: &Node, keys: &[PodKey]) {
    let stores = &ctx.state;
    let node_name = node.name_any();
    let unbound: Vec<Arc<Pod>> = keys
        .iter()
        .filter_map(|key| stores.pods.get(&reflector::ObjectRef::new(&key.name).within(&key.namespace)))
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty) && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if unbound.is_empty() {
        return;
    }
    // What is on the node now, read from the API server rather than the cache: the scheduler
    // binds to a node the moment it is ready.
    let on_node = match crate::controllers::node_ops::pods_on(&ctx.client, &node_name).await {
        Ok(pods) => pods,
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
    // Every other pod in the cache: the scheduler may bind the pending ones to this node while
    // we bind, so `bindable` keeps their room from the planned pods.
    let all_pods = stores.pods.state();
    let planned_keys: HashSet<&PodKey> = keys.iter().collect();
    let others: Vec<&Pod> = all_pods
        .iter()
        .filter(|p| !planned_keys.contains(&PodKey::of(p)))
        .map(|p| p.as_ref())
        .collect();
    let (fitting, left) = rules::bindable(node, &on_node, &others, &planned, &claim_bound);
    let mut seats_taken = Vec::new();
    for (pod, why) in left {
        debug!(pod = %PodKey::of(pod), node = %node_name, reason = %why, "not binding; the scheduler will place the pod");
        // The scheduler gave its room to other pending pods: nothing is wrong with the node or
        // the pod, so it need not wait out the grace for its node before a pass places it anew.
        if why == rules::LeftToScheduler::NoRoom {
            seats_taken.extend(pod.metadata.uid.clone());
        }
    }
    if !seats_taken.is_empty() {
        ctx.provisioning.seats_taken(&seats_taken);
    }
    let node_name = &node_name;
    let binds: Vec<_> = fitting
        .into_iter()
        .map(|pod| async move {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
            match bind(&api, &pod.name_any(), node_name).await {
                Ok(outcome) => {
                    ctx.metrics.pods_bound.with_label_values(&[bind_label(&outcome)]).inc();
                    if outcome == BindOutcome::Bound {
                        info!(pod = %PodKey::of(pod), node = %node_name, "bound pod");
                    }
                }
                Err(e) => warn!(pod = %PodKey::of(pod), node = %node_name, error = %e, "binding pod; the scheduler will place it"),
            }
        })
        .collect();
    futures::stream::iter(binds)
        .buffer_unordered(BINDINGS_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

fn bind_label(outcome: &BindOutcome) -> &'static str {
    match outcome {
        BindOutcome::Bound => "bound",
        BindOutcome::AlreadyBound => "already_bound",
        BindOutcome::Gone => "gone",
    }
}

/// What binding a pod did.
#[derive(Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// Bound by us.
    Bound,
    /// Already bound (by the scheduler, typically): nothing to do.
    AlreadyBound,
    /// The pod is gone.
    Gone,
}

/// Binds `pod` to `node` through the Binding subresource. A conflict because someone bound it
/// first, or a pod that no longer exists, is not an error.
pub async fn bind(pods: &Api<Pod>, pod: &str, node: &str) -> Result<BindOutcome, kube::Error> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    match pods
        .create_subresource::<_, serde_json::Value>("binding", pod, &PostParams::default(), &binding)
        .await
    {
        Ok(_) => Ok(BindOutcome::Bound),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(BindOutcome::AlreadyBound),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(BindOutcome::Gone),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::controllers::clock::FakeClock;
    use crate::controllers::provisioning::launch_tests::ScriptedCloud;
    use crate::controllers::provisioning::{self, ProvisioningConfig};
    use crate::controllers::state::plans::{Plan, PLAN_TTL};

    /// Plans are in the shared view and outlive a term, so the binder must act only while this
    /// replica leads: a follower leaves even a lapsed plan alone; once leading, it is forgotten.
    /// (A lapsed plan is forgotten without any API call, so the client here never connects.)
    #[tokio::test(start_paused = true)]
    async fn a_follower_binds_and_forgets_nothing_and_the_leader_forgets_lapsed_plans() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a valid URL"));
        let client = kube::Client::try_from(config).expect("a client needs no connection to be made");
        let clock = Arc::new(FakeClock::new("2026-12-06T10:00:00Z".parse().unwrap(), Instant::now()));
        let mut shared = Shared::new(
            client,
            Arc::new(ScriptedCloud::default()),
            Metrics::new(),
            crate::controllers::state::Cluster::detached(),
        );
        shared.clock = clock.clone();
        let provisioning = provisioning::Context::new(&shared, ProvisioningConfig::default());
        let ctx = Context::new(&shared, provisioning, true);
        let plan = Plan {
            pods: vec![PodKey {
                namespace: "default".into(),
                name: "web".into(),
            }],
            startup_taints: Vec::new(),
            requested: Default::default(),
            since: clock.instant(),
        };
        shared.state.plans.record("node-a".into(), plan);
        clock.advance(PLAN_TTL + Duration::from_secs(1));

        let (leading_tx, leading) = watch::channel(false);
        let shutdown = CancellationToken::new();
        let ran = tokio::time::timeout(Duration::from_secs(5), run(ctx.clone(), leading.clone(), shutdown.clone())).await;
        assert!(ran.is_err(), "the binder runs until shutdown");
        assert_eq!(shared.state.plans.nodes(), ["node-a"], "a follower forgets no plan");

        leading_tx.send(true).unwrap();
        let ran = tokio::time::timeout(Duration::from_secs(5), run(ctx, leading, shutdown.clone())).await;
        assert!(ran.is_err(), "the binder runs until shutdown");
        assert!(shared.state.plans.nodes().is_empty(), "the leader forgets a lapsed plan");
    }
}
