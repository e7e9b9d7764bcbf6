//! `explain pod NAMESPACE/NAME`: for a pending pod, what a provisioning pass would do with it and,
//! per Provisioner, the first rule that excludes it; for a pod on a node, the node's type and
//! price and the types a pass would choose for the pod today. Pure: the pod is simulated on its
//! own against the cluster's nodes and Provisioners, as a pass would place it.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use super::World;
use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL};
use crate::controllers::deprovisioning::consolidation;
use crate::scheduling::pods::is_daemon_or_mirror;
use crate::scheduling::pods::is_provisionable;
use crate::scheduling::pods::PodState;
use crate::scheduling::{provisioner_requirements, simulate, validate_pod, PodKey, Refusal, SimulationInput};

/// The answer to `explain pod`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    /// Its phase.
    pub phase: Option<String>,
    /// The node it is bound to.
    pub node: Option<String>,
    /// The node the scheduler nominated it to (`status.nominatedNodeName`).
    pub nominated_node: Option<String>,
    /// What happens to it, in a sentence.
    pub summary: String,
    /// For a pod on a node of ours: that node's type and price.
    pub node_type: Option<TypeChoice>,
    /// The instance types a pass would choose for the pod on its own today, cheapest first (at
    /// most three).
    pub cheapest_types: Vec<TypeChoice>,
    /// Per Provisioner, whether it could launch for the pod and if not the first rule that
    /// excludes it.
    pub provisioners: Vec<Verdict>,
    /// The offerings a Provisioner could launch for it that a launch found without capacity,
    /// each with when launches try it again: why a pending pod waits, or why a running pod got a
    /// dearer type than the cheapest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable_offerings: Vec<Unavailable>,
}

/// An offering cached as unavailable after a capacity error (insufficient capacity).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unavailable {
    /// The type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// When launches try it again.
    pub until: Timestamp,
}

/// An instance type with its price.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypeChoice {
    /// The type.
    pub instance_type: String,
    /// Its cheapest allowed offering's price per hour.
    pub price_per_hour: f64,
}

/// One Provisioner's answer for the pod.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The Provisioner.
    pub provisioner: String,
    /// `launches`, or the kind of refusal: `incompatible` (taints, requirements, topology),
    /// `limits`, `no_room`, `no_offering`.
    pub outcome: String,
    /// The rule, with both sides or the figures.
    pub reason: String,
}

/// Explains pod `namespace/name` in `world`.
pub fn explain_pod(world: &World<'_>, namespace: &str, name: &str) -> Result<PodExplanation, String> {
    let pod = world
        .pods
        .iter()
        .find(|p| p.namespace().as_deref() == Some(namespace) && p.name_any() == name)
        .ok_or_else(|| format!("pod {namespace}/{name} not found"))?;
    let key = PodKey::of(pod);
    let status = pod.status.as_ref();
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
    let nominated_node = status.and_then(|s| s.nominated_node_name.clone()).filter(|n| !n.is_empty());
    let alone = (world.prepare)(pod);
    // The pod on its own, against the cluster's nodes (a pending pod) or a cluster without
    // nodes (a bound pod: which type would a pass launch for it today).
    let mut input = SimulationInput {
        pods: vec![Arc::new(alone)],
        provisioners: world.input.provisioners.clone(),
        nodes: if bound.is_some() { Vec::new() } else { world.input.nodes.clone() },
        daemonset_pods: world.input.daemonset_pods.clone(),
        namespace_labels: world.input.namespace_labels.clone(),
    };
    input.nodes.retain(|n| !n.marked_for_deletion);
    let plan = simulate(&input);
    let request = plan.new_nodes.iter().find(|r| r.pods.contains(&key));
    let cheapest_types: Vec<TypeChoice> = request
        .map(|r| {
            let mut priced: Vec<TypeChoice> = r
                .instance_type_options
                .iter()
                .filter_map(|it| {
                    it.cheapest_matching(&r.requirements).map(|o| TypeChoice {
                        instance_type: it.name.clone(),
                        price_per_hour: o.price,
                    })
                })
                .collect();
            priced.sort_by(|a, b| {
                a.price_per_hour
                    .total_cmp(&b.price_per_hour)
                    .then_with(|| a.instance_type.cmp(&b.instance_type))
            });
            priced.truncate(3);
            priced
        })
        .unwrap_or_default();
    let unavailable_offerings = unavailable_for(world, &input.pods[0]);
    let mut provisioners: Vec<Verdict> = plan
        .refusals
        .get(&key)
        .map(|refusals| {
            refusals
                .iter()
                .map(|(provisioner, kind, message)| {
                    let mut reason = message.clone();
                    if *kind == Refusal::NoOffering {
                        let cached: Vec<&Unavailable> = unavailable_offerings.iter().collect();
                        if let Some(first) = cached.iter().min_by_key(|u| u.until) {
                            reason.push_str(&format!(
                                "; {} offering(s) it could use had no capacity at the last launch, retried from {}",
                                cached.len(),
                                first.until.strftime("%Y-%m-%dT%H:%M:%SZ")
                            ));
                        }
                    }
                    Verdict {
                        provisioner: provisioner.clone(),
                        outcome: kind.label().to_string(),
                        reason,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if let Some(r) = request {
        provisioners.push(Verdict {
            provisioner: r.provisioner.clone(),
            outcome: "launches".to_string(),
            reason: cheapest_types
                .first()
                .map(|t| format!("cheapest fitting type {} at {}", t.instance_type, super::dollars(t.price_per_hour)))
                .unwrap_or_default(),
        });
    }
    let node_type = bound.as_deref().and_then(|node| {
        let state = world.nodes.iter().find(|n| n.name() == node)?;
        let view = consolidation::NodeView {
            node: &state.node,
            pods: &state.pods,
            provisioner: None,
            instance_type: state.instance_type.as_deref(),
            nominated: false,
            resuming: false,
        };
        Some(TypeChoice {
            instance_type: state.instance_type.as_ref()?.name.clone(),
            price_per_hour: consolidation::decide::price(view)?,
        })
    });
    let on_existing = plan.existing_assignments.iter().find(|(k, _)| *k == key).map(|(_, n)| n.clone());
    let summary = match (&bound, status.and_then(|s| s.phase.as_deref())) {
        (Some(node), phase) => {
            let mut text = format!("{} on node {node}", phase.unwrap_or("bound"));
            if let Some(t) = &node_type {
                text.push_str(&format!(" ({} at {})", t.instance_type, super::dollars(t.price_per_hour)));
            }
            if let (Some(first), Some(second)) = (cheapest_types.first(), cheapest_types.get(1)) {
                text.push_str(&format!(
                    "; on its own today it would get {} at {} (runner-up {} at {})",
                    first.instance_type,
                    super::dollars(first.price_per_hour),
                    second.instance_type,
                    super::dollars(second.price_per_hour)
                ));
            }
            text
        }
        (None, _) if !is_provisionable(pod) => match &nominated_node {
            Some(node) => format!("nominated to node {node} by the scheduler: it waits for room there (provisioning leaves it alone)"),
            None if pod.metadata.deletion_timestamp.is_some() => "being deleted".to_string(),
            None if is_daemon_or_mirror(pod) => "a DaemonSet or mirror pod: provisioning does not launch for it".to_string(),
            None => "not provisioned for yet: the scheduler has not marked it unschedulable (PodScheduled=False, reason Unschedulable)"
                .to_string(),
        },
        (None, _) => match validate_pod(pod) {
            Err(why) => format!("ignored by provisioning: {why}"),
            Ok(()) => match (&on_existing, request, plan.unschedulable.iter().find(|(k, _)| *k == key)) {
                (Some(node), _, _) => {
                    let initialised = world.nodes.iter().find(|n| n.name() == node).is_none_or(|n| n.initialized());
                    if initialised {
                        format!("fits on node {node}: the scheduler places it there")
                    } else {
                        format!("waits for node {node}, launched for it and not initialised yet")
                    }
                }
                (None, Some(r), _) => format!(
                    "needs a new node: Provisioner {} launches {}",
                    r.provisioner,
                    cheapest_types
                        .first()
                        .map(|t| format!("{} at {}", t.instance_type, super::dollars(t.price_per_hour)))
                        .unwrap_or_else(|| "a node".to_string())
                ),
                (None, None, Some((_, why))) => format!("unschedulable: {why}"),
                (None, None, None) => "no Provisioner can launch a node for it".to_string(),
            },
        },
    };
    Ok(PodExplanation {
        pod: key.to_string(),
        phase: status.and_then(|s| s.phase.clone()),
        node: bound,
        nominated_node,
        summary,
        node_type,
        cheapest_types,
        provisioners,
        unavailable_offerings,
    })
}

/// The offerings of `world.unavailable` some Provisioner could launch for `pod`: an instance
/// type it offers, in a zone and as a capacity type its requirements and the pod's allow.
fn unavailable_for(world: &World<'_>, pod: &Pod) -> Vec<Unavailable> {
    let wanted = PodState::new(pod).requirements;
    let allows =
        |requirements: &crate::scheduling::Requirements, key: &str, value: &str| requirements.get(key).is_none_or(|r| r.has(value));
    // Each Provisioner's requirements, read once for every offering.
    let provisioners: Vec<_> = world
        .input
        .provisioners
        .iter()
        .map(|p| (p, provisioner_requirements(&p.provisioner)))
        .collect();
    let mut out: Vec<Unavailable> = world
        .unavailable
        .iter()
        .filter(|(offering, _)| {
            provisioners.iter().any(|(p, theirs)| {
                p.instance_types.iter().any(|t| t.name == offering.instance_type)
                    && [theirs, &wanted].iter().all(|r| {
                        allows(r, INSTANCE_TYPE_LABEL, &offering.instance_type)
                            && allows(r, ZONE_LABEL, &offering.zone)
                            && allows(r, CAPACITY_TYPE_LABEL, &offering.capacity_type)
                    })
            })
        })
        .map(|(o, until)| Unavailable {
            instance_type: o.instance_type.clone(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.clone(),
            until: *until,
        })
        .collect();
    out.sort_by(|a, b| (a.until, &a.instance_type, &a.zone).cmp(&(b.until, &b.instance_type, &b.zone)));
    out
}
