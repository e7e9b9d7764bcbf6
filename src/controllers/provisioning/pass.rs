//! One provisioning pass: the pending pods and the cluster as the shared view holds them → a
//! snapshot (nodes before pods, the catalogue translated, the Provisioners' node templates
//! resolved) → `scheduling::simulate` → the new nodes launched (at most
//! `MAX_CONCURRENT_LAUNCHES` at once) and their pods nominated. `snapshot` is also what
//! deprovisioning simulates removals on; `provision` is also `Context::replace`'s path.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::runtime::events::EventType;
use kube::runtime::reflector;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, instrument, warn};

use super::{events, launch, pods, publish, volumes, Context, PassError, Stores, ACTION};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::{NodeTemplate, OfferingId};
use crate::cpu;
use crate::scheduling::pods::is_provisionable;
use crate::scheduling::{self, PodKey, ProvisionerInput, SimulationInput};
use crate::telemetry;


/// At most this many launches (CreateFleet, then the Node) are in flight at once.
const MAX_CONCURRENT_LAUNCHES: usize = 16;

/// How long a pass waits for the cluster view to settle after a watch failure before it fails
/// (and is retried after `backoff::pass_retry_delay`).
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// How long a launch waits for the Nodes it created to appear in the cluster view (a pass fails
/// past it; `Provisioner::launch` returns anyway).
pub(super) const NODE_SEEN_LIMIT: Duration = Duration::from_secs(30);
/// How often a launch looks again for its Nodes in the cluster view.
pub(super) const NODE_SEEN_POLL: Duration = Duration::from_millis(100);

/// One provisioning pass: read (nodes before pods), simulate, launch.
#[instrument(skip_all)]
pub(super) async fn pass(ctx: &Context, stores: &Stores) -> Result<(), PassError> {
    let _one_at_a_time = ctx.pass_lock.lock().await;
    stores.ready().await?;
    // After an API server or etcd outage the caches lag: a pod that got its node meanwhile would
    // look pending and get a second one.
    stores.settled(SETTLE_LIMIT).await.map_err(PassError::Unsettled)?;
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
fn held_back(ctx: &Context, pending: &[Arc<Pod>], all_pods: &[Arc<Pod>], nodes: &[Arc<Node>]) -> HashSet<PodKey> {
    let now = ctx.clock.instant();
    let by_uid: HashMap<String, &Pod> = all_pods
        .iter()
        .filter_map(|p| Some((p.metadata.uid.clone()?, p.as_ref())))
        .collect();
    let by_name: HashMap<String, &Node> = nodes.iter().map(|n| (n.name_any(), n.as_ref())).collect();
    let mut history = ctx.backoff.lock().unwrap_or_else(|e| e.into_inner());
    history.observe(&by_uid, &by_name, now, ctx.clock.now());
    let mut held = HashSet::new();
    for pod in pending {
        if let Some(until) = history.blocked_until(pod, now) {
            debug!(pod = %PodKey::of(pod), wait_seconds = until.duration_since(now).as_secs(), "no new capacity for the pod yet: it waits for the node launched for it, or its owner's pods were lost from the capacity launched for them");
            held.insert(PodKey::of(pod));
        }
    }
    held
}

/// What a simulation of the cluster needs, read from the shared state and the cloud.
pub struct Snapshot {
    /// The simulation's input: the pods to place (volume constraints applied), every Provisioner
    /// that can launch with its instance types, the nodes with their pods, DaemonSet overhead.
    pub input: SimulationInput,
    /// The volumes the pods use, to constrain pods moved from one node to another.
    pub volumes: volumes::Volumes,
    /// The offerings unavailable for a capacity error, each with when it is tried again.
    pub unavailable: Vec<(OfferingId, jiff::Timestamp)>,
    provisioners: Vec<Arc<Provisioner>>,
    templates: HashMap<String, (NodeTemplate, Option<f64>)>,
}

impl Snapshot {
    /// `pod` as it would be placed again when its node goes: unbound, with its volumes'
    /// constraints (what consolidation moves, and what explain's removal simulates).
    pub fn prepare(&self, pod: &Pod) -> Pod {
        let mut pod = pod.clone();
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = None;
        }
        self.volumes.constrain(pod)
    }
}

/// How long a node a pass expects pods on is left alone by deprovisioning (Karpenter's 20 s).
pub(super) const NOMINATION: Duration = Duration::from_secs(20);

/// Builds the simulation's input for `pending` against the Provisioners and `nodes` (with the
/// pods bound to them). With `report`, pods whose volumes cannot be provided get a
/// FailedProvisioning event and Provisioners that cannot launch an InvalidNodeTemplate event.
pub(super) async fn snapshot(
    ctx: &Context,
    stores: &Stores,
    pending: Vec<Arc<Pod>>,
    nodes: &[Arc<Node>],
    all_pods: &[Arc<Pod>],
    report: bool,
) -> Result<Snapshot, PassError> {
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
            Ok(()) => valid.push(volumes.constrain_shared(pod)),
            Err(reason) => {
                debug!(pod = %PodKey::of(&pod), %reason, "ignoring pod: its volumes cannot be provided");
                if report {
                    let note = format!("Failed to provision new node: {reason}");
                    publish(ctx, pod.as_ref(), EventType::Warning, "FailedProvisioning", &note).await;
                }
            }
        }
    }
    let pending = valid;
    let provisioners: Vec<Arc<Provisioner>> = stores.provisioners.state();
    let version = ctx.kubernetes_version().await?;
    let mut templates: HashMap<String, (NodeTemplate, Option<f64>)> = HashMap::new();
    let mut zones: HashMap<String, BTreeSet<String>> = HashMap::new();
    for p in &provisioners {
        let resolved = match launch::node_template(ctx, stores, p, version) {
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
                if report {
                    publish(ctx, p.as_ref(), EventType::Warning, "InvalidNodeTemplate", &reason).await;
                }
            }
        }
    }
    let catalogue = ctx.metrics.cloud_call("instance_types", ctx.cloud.instance_types()).await?;
    // The catalogue translation is CPU work of up to seconds: run it where it does not hold up
    // the runtime's other tasks (the binder, node lifecycle, the watches), on a copy of the
    // cache that readers do not wait for.
    let daemonset_pods = pods::daemonset_overhead_pods(&stores.daemonsets.state(), all_pods);
    let namespace_labels = stores
        .namespaces
        .state()
        .iter()
        .map(|n| (n.name_any(), n.labels().clone()))
        .collect();
    let (state, metrics, config) = (stores.clone(), ctx.metrics.clone(), ctx.config.clone());
    let (nodes, all_pods) = (nodes.to_vec(), all_pods.to_vec());
    let translated_for = provisioners.clone();
    let (input, templates) = cpu::run(move |_| {
        let provisioners = translated_for;
        let input = state.types.update(|type_cache| {
            type_cache.retain(|name| provisioners.iter().any(|p| p.name_any() == name));
            if type_cache.set_catalogue(catalogue) {
                metrics.set_instance_types(type_cache.shared_catalogue(), &config.region);
            }
            let mut input = SimulationInput {
                pods: pending,
                provisioners: provisioners
                    .iter()
                    .filter_map(|p| {
                        let (template, _) = templates.get(&p.name_any())?;
                        Some(ProvisionerInput {
                            provisioner: (**p).clone(),
                            instance_types: type_cache.instance_types(
                                p,
                                template,
                                &zones[&p.name_any()],
                                &config.region,
                                &config.node_settings,
                            ),
                        })
                    })
                    .collect(),
                // Filled in below, once these instance types are recorded.
                nodes: Vec::new(),
                daemonset_pods,
                namespace_labels,
            };
            input.nodes = Context::existing_nodes_with(type_cache, &nodes, &all_pods, &provisioners);
            input
        });
        (input, templates)
    })
    .await;
    Ok(Snapshot {
        input,
        volumes,
        unavailable: ctx.cloud.unavailable_offerings(),
        provisioners,
        templates,
    })
}

/// Simulates `pending` against the Provisioners and `nodes` (with the pods bound to them), then
/// launches the new nodes of the plan, except for the pods `held` back (they still take their
/// place on existing nodes in the simulation); returns the names of the Nodes created.
pub(super) async fn provision(
    ctx: &Context,
    stores: &Stores,
    pending: Vec<Arc<Pod>>,
    nodes: &[Arc<Node>],
    all_pods: &[Arc<Pod>],
    held: &HashSet<PodKey>,
) -> Result<Vec<String>, PassError> {
    let Snapshot {
        input,
        provisioners,
        templates,
        ..
    } = snapshot(ctx, stores, pending, nodes, all_pods, true).await?;
    if input.pods.is_empty() {
        return Ok(Vec::new());
    }
    // The simulation is CPU work of up to seconds, like the translation above.
    let simulating = Instant::now();
    let (input, mut plan) = cpu::run(move |_| {
        let plan = scheduling::simulate(&input);
        (input, plan)
    })
    .await;
    ctx.metrics.simulation_duration.observe(simulating.elapsed().as_secs_f64());
    let pending = &input.pods;
    let by_key: HashMap<PodKey, &Pod> = pending.iter().map(|p| (PodKey::of(p), p.as_ref())).collect();
    // Nodes the plan expects pending pods on are nominated: deprovisioning leaves them alone.
    let displaced: HashSet<PodKey> = pending.iter().filter(|p| !is_provisionable(p)).map(|p| PodKey::of(p)).collect();
    for (key, node) in &plan.existing_assignments {
        if !displaced.contains(key) {
            stores.nominate(node, NOMINATION);
        }
    }
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
    ctx.metrics.pods_unschedulable.reset();
    for ((provisioner, reason), pods) in &plan.unschedulable_by {
        ctx.metrics
            .pods_unschedulable
            .with_label_values(&[provisioner, reason])
            .set(i64::try_from(*pods).unwrap_or(i64::MAX));
    }
    for (key, reason) in &plan.unschedulable {
        if let Some(&pod) = by_key.get(key) {
            debug!(pod = %PodKey::of(pod), %reason, "pod cannot be provisioned for");
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
    // Where each pod is bound now: a node being deleted, for the pods placed again.
    let bound_to: HashMap<&str, &str> = all_pods
        .iter()
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p.spec.as_ref()?.node_name.as_deref()?)))
        .collect();
    let (provisioners, templates, by_key, bound_to) = (&provisioners, &templates, &by_key, &bound_to);
    if !plan.new_nodes.is_empty() {
        // No instance for a plan made from a view that went stale during the pass, or while the
        // API server cannot take the Node: the launch would be terminated again at once.
        if let Some(why) = stores.stale() {
            return Err(PassError::NotLaunching(why.to_string()));
        }
        ctx.client.apiserver_version().await.map_err(PassError::ApiServerSilent)?;
    }
    let admitted = admitted(ctx, &plan.new_nodes);
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
        match launch::launch(ctx, request, provisioner, template.clone(), *spot_max).await {
            Ok(node_name) => {
                stores.nominate(&node_name, NOMINATION);
                let origin = |pod: &Pod| Some(bound_to.get(pod.metadata.uid.as_deref()?)?.to_string());
                let launched_for: Vec<&Pod> = request.pods.iter().filter_map(|key| by_key.get(key).copied()).collect();
                ctx.backoff.lock().unwrap_or_else(|e| e.into_inner()).launched(
                    &node_name,
                    launched_for.iter().map(|p| (*p, origin(p))),
                    ctx.clock.instant(),
                );
                nominated(ctx, &launched_for, &node_name);
                Some(node_name)
            }
            Err(e) => {
                warn!(provisioner = %request.provisioner, error = %telemetry::chain(&e), "launch failed");
                publish(ctx, provisioner.as_ref(), EventType::Warning, "LaunchFailed", &telemetry::chain(&e)).await;
                None
            }
        }
    });
    // Collected first: a stream over the closure's futures trips the compiler's Send check.
    let launches: Vec<_> = launches.collect();
    let launched: Vec<Option<String>> = futures::stream::iter(launches)
        .buffer_unordered(MAX_CONCURRENT_LAUNCHES)
        .collect()
        .await;
    let launched: Vec<String> = launched.into_iter().flatten().collect();
    // The next pass must see every Node this one created (they count against limits and hold
    // the pods planned for them), or it would launch for the same pods again.
    let deadline = Instant::now() + NODE_SEEN_LIMIT;
    while !launched.iter().all(|n| stores.nodes.get(&reflector::ObjectRef::new(n)).is_some()) {
        if Instant::now() > deadline {
            return Err(PassError::NodesNotSeen(launched.len()));
        }
        tokio::time::sleep(NODE_SEEN_POLL).await;
    }
    Ok(launched)
}

/// The requests of `planned` each Provisioner's launch rate (`backoff::LaunchRate`) lets launch
/// now, on the controllers' clock; the others wait for a later pass.
fn admitted<'a>(ctx: &Context, planned: &'a [scheduling::NodeRequest]) -> Vec<&'a scheduling::NodeRequest> {
    let now = ctx.clock.instant();
    let mut rate = ctx.launch_rate.lock().unwrap_or_else(|e| e.into_inner());
    planned.iter().filter(|r| rate.take(&r.provisioner, now)).collect()
}

/// Publishes the `Nominated` event of each pod in the background, at most as many as
/// `NOMINATION_EVENTS` allows (the rest are dropped, as Karpenter drops them): thousands of pods
/// on new nodes would otherwise send thousands of requests before the next pass could start.
fn nominated(ctx: &Context, pods: &[&Pod], node_name: &str) {
    let allowed: Vec<ObjectReference> = {
        let mut bucket = ctx.nomination_events.lock().unwrap_or_else(|e| e.into_inner());
        let now = ctx.clock.instant();
        pods.iter()
            .take_while(|_| bucket.take(now).is_ok())
            .map(|p| p.object_ref(&()))
            .collect()
    };
    if allowed.len() < pods.len() {
        debug!(
            node = node_name,
            dropped = pods.len() - allowed.len(),
            "nomination events over their rate limit are dropped"
        );
    }
    if allowed.is_empty() {
        return;
    }
    let (recorder, note) = (ctx.recorder.clone(), format!("Pod should schedule on node {node_name}"));
    let mut background = ctx.background.lock().unwrap_or_else(|e| e.into_inner());
    // Forget what has finished, so the set holds only what runs.
    while background.try_join_next().is_some() {}
    background.spawn(async move {
        for pod in &allowed {
            events::publish_to(&recorder, pod, EventType::Normal, "Nominated", ACTION, &note).await;
        }
    });
}

#[cfg(test)]
mod tests;
