//! `explain node NAME`: the node's Provisioner, type, price and age; the state of each
//! deprovisioning method for it; and what removing it would do, pod by pod. Pure.

use std::collections::{BTreeMap, HashSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use super::{dollars, World};
use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, VOLUNTARY_DISRUPTION_ANNOTATION, ZONE_LABEL};
use crate::controllers::deprovisioning::consolidation::{self, Ineligible, NodeView};
use crate::controllers::deprovisioning::decide::{self, Emptiness};
use crate::controllers::deprovisioning::DRIFTED;
use crate::controllers::state::StateNode;
use crate::scheduling::pods::is_displaced_by_drain;
use crate::scheduling::{PodKey, Simulator};

/// The answer to `explain node`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    /// The node.
    pub node: String,
    /// The Provisioner that launched it (none: not ours).
    pub provisioner: Option<String>,
    /// Its instance type, capacity type and zone, from its labels.
    pub instance_type: Option<String>,
    /// `on-demand` or `spot`.
    pub capacity_type: Option<String>,
    /// Its zone.
    pub zone: Option<String>,
    /// Its price per hour, from the catalogue.
    pub price_per_hour: Option<f64>,
    /// When it was created (RFC 3339).
    pub created: Option<String>,
    /// How long ago, in seconds.
    pub age_seconds: Option<i64>,
    /// The pods bound to it that have not finished.
    pub pods: Vec<String>,
    /// Each deprovisioning method, in the order a pass runs them.
    pub methods: Vec<Method>,
    /// The one line that says why the node stays (or what happens to it next).
    pub summary: String,
    /// What removing the node would do.
    pub removal: Removal,
}

/// One deprovisioning method's state for the node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Method {
    /// `expiration`, `drift`, `emptiness` or `consolidation`.
    pub method: String,
    /// Whether the method would act on the node now (the next pass, or its command).
    pub acts: bool,
    /// Its state, in a sentence.
    pub state: String,
    /// Everything that keeps it from acting (consolidation lists each blocker).
    pub blockers: Vec<String>,
}

/// What removing the node would do.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Removal {
    /// Each pod a drain would move, and where it would go.
    pub moves: Vec<Move>,
    /// The cluster's price per hour now (every node with a known price).
    pub cluster_price_before: f64,
    /// And after: without this node, with the new nodes its pods need.
    pub cluster_price_after: f64,
    /// Whether every pod would find a place.
    pub every_pod_placed: bool,
}

/// Where one pod would go.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    /// `namespace/name`.
    pub pod: String,
    /// Its destination.
    pub to: Destination,
}

/// A pod's destination after the node is gone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Destination {
    /// An existing node with room.
    Node {
        /// Its name.
        name: String,
    },
    /// A new node: the cheapest type the requirements allow and its price.
    NewNode {
        /// The instance type.
        #[serde(rename = "instanceType")]
        instance_type: String,
        /// Its price per hour.
        #[serde(rename = "pricePerHour")]
        price_per_hour: f64,
    },
    /// Nowhere.
    Unschedulable {
        /// Why.
        reason: String,
    },
}

/// Explains node `name` in `world`.
pub fn explain_node(world: &World<'_>, name: &str) -> Result<NodeExplanation, String> {
    let state = world
        .nodes
        .iter()
        .find(|n| n.name() == name)
        .ok_or_else(|| format!("node {name} not found"))?;
    let node = &state.node;
    let labels = node.labels();
    let provisioner = state
        .provisioner()
        .and_then(|p| world.provisioners.iter().find(|x| x.name_any() == p));
    let view = view_of(world, state);
    let price = consolidation::decide::price(view);
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    // The cluster prepared once for both simulations (consolidation's command, the removal).
    let simulator = Simulator::new(world.input);
    let methods = vec![
        expiration(world, state),
        drift(world, state),
        emptiness(world, state),
        consolidation_method(world, &simulator, state, provisioner.map(|p| p.as_ref())),
    ];
    let summary = summary(&methods);
    Ok(NodeExplanation {
        node: name.to_string(),
        provisioner: state.provisioner().map(str::to_string),
        instance_type: state.instance_type.as_ref().map(|it| it.name.clone()),
        capacity_type: labels.get(CAPACITY_TYPE_LABEL).cloned(),
        zone: labels.get(ZONE_LABEL).cloned(),
        price_per_hour: price,
        created: created.map(|t| t.to_string()),
        age_seconds: created.map(|t| world.now.duration_since(t).as_secs()),
        pods: state.pods.iter().map(|p| PodKey::of(p).to_string()).collect(),
        methods,
        summary,
        removal: removal(world, &simulator, state),
    })
}

/// The node as consolidation's candidate selection sees it.
fn view_of<'a>(world: &'a World<'_>, state: &'a StateNode) -> NodeView<'a> {
    NodeView {
        node: &state.node,
        pods: &state.pods,
        provisioner: state
            .provisioner()
            .and_then(|p| world.provisioners.iter().find(|x| x.name_any() == p))
            .map(|p| p.as_ref()),
        instance_type: state.instance_type.as_deref(),
        nominated: state.nominated,
        resuming: false,
    }
}

/// `d` as people read it: `3h 2m`, `45s`.
pub fn human(d: SignedDuration) -> String {
    let s = d.as_secs().max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn expiration(world: &World<'_>, state: &StateNode) -> Method {
    let method = "expiration".to_string();
    let ttl = state
        .provisioner()
        .and_then(|p| world.provisioners.iter().find(|x| x.name_any() == p))
        .and_then(|p| p.spec.ttl_seconds_until_expired);
    let not = |state: &str| Method {
        method: method.clone(),
        acts: false,
        state: state.to_string(),
        blockers: Vec::new(),
    };
    if state.provisioner().is_none() {
        return not("not a node of a Provisioner");
    }
    let Some(at) = decide::expires_at(&state.node, ttl) else {
        return not("ttlSecondsUntilExpired is not set");
    };
    if world.now < at {
        return not(&format!("expires at {at:.0} (in {})", human(at.duration_since(world.now))));
    }
    let candidate = decide::Candidate {
        node: &state.node,
        pods: &state.pods,
        ttl_seconds_until_expired: ttl,
    };
    let outcome = decide::expiration(&[candidate], world.pdbs, world.now);
    if outcome.expire.is_some() {
        return Method {
            method,
            acts: true,
            state: format!("expired at {at:.0}: replaced by a pass (one node at a time, the first to expire first)"),
            blockers: Vec::new(),
        };
    }
    Method {
        method,
        acts: false,
        state: format!("expired at {at:.0}, kept for now"),
        blockers: outcome.blocked.into_iter().map(|(_, why)| why).collect(),
    }
}

fn drift(world: &World<'_>, state: &StateNode) -> Method {
    let marked = state.node.annotations().get(VOLUNTARY_DISRUPTION_ANNOTATION).map(String::as_str) == Some(DRIFTED);
    let (acts, text) = match (world.drift_enabled, marked) {
        (false, _) => (false, "off (--drift-enabled=false)"),
        (true, true) => (true, "drifted: replaced by a pass, one node at a time"),
        (true, false) => (false, "not drifted as of the last check"),
    };
    Method {
        method: "drift".to_string(),
        acts,
        state: text.to_string(),
        blockers: Vec::new(),
    }
}

fn emptiness(world: &World<'_>, state: &StateNode) -> Method {
    let ttl = state
        .provisioner()
        .and_then(|p| world.provisioners.iter().find(|x| x.name_any() == p))
        .and_then(|p| p.spec.ttl_seconds_after_empty);
    let decision = decide::emptiness(&state.node, &state.pods, ttl, world.nomination, world.now);
    let occupying: Vec<String> = state
        .pods
        .iter()
        .filter(|p| decide::occupies(p))
        .map(|p| PodKey::of(p).to_string())
        .collect();
    let (acts, text) = match decision {
        Emptiness::Ignore if ttl.is_none() => (false, "ttlSecondsAfterEmpty is not set".to_string()),
        Emptiness::Ignore => (
            false,
            "does not apply now: the node is being deleted, not Ready, or was launched less than the nomination period ago".to_string(),
        ),
        Emptiness::Occupied => (
            false,
            format!(
                "not empty: {} pod(s), e.g. {}",
                occupying.len(),
                occupying.first().cloned().unwrap_or_default()
            ),
        ),
        Emptiness::Unmark => (false, "pods arrived: the next pass removes the emptiness mark".to_string()),
        Emptiness::Mark => (
            true,
            format!(
                "empty: the next pass marks it, and it is deleted {}s later",
                ttl.unwrap_or_default()
            ),
        ),
        Emptiness::Wait { until } => (true, format!("empty: deleted at {until:.0}")),
        Emptiness::Delete => (true, "empty for ttlSecondsAfterEmpty: deleted by the next pass".to_string()),
    };
    Method {
        method: "emptiness".to_string(),
        acts,
        state: text,
        blockers: Vec::new(),
    }
}

fn consolidation_method(
    world: &World<'_>,
    simulator: &Simulator,
    state: &StateNode,
    provisioner: Option<&crate::apis::v1alpha5::Provisioner>,
) -> Method {
    let method = "consolidation".to_string();
    if provisioner.is_some_and(|p| !consolidation::consolidates(p)) {
        return Method {
            method,
            acts: false,
            state: "off: its Provisioner does not set consolidation.enabled".to_string(),
            blockers: Vec::new(),
        };
    }
    let view = view_of(world, state);
    let every = consolidation::decide::ineligible(view, world.pdbs, world.now, true);
    let blockers: Vec<String> = every
        .iter()
        .map(|i| match i {
            Ineligible::Skip(why) | Ineligible::Blocked(why) => why.clone(),
        })
        .collect();
    let candidate = match consolidation::candidate(view, world.pdbs, world.prepare, world.now) {
        Ok(c) => c,
        Err(first) => {
            let first = match first {
                Ineligible::Skip(why) => format!("not a candidate: {why}"),
                Ineligible::Blocked(why) => format!("blocked: {why}"),
            };
            return Method {
                method,
                acts: false,
                state: first,
                blockers,
            };
        }
    };
    match consolidation::compute_on(simulator, &[&candidate]) {
        Ok(command) => Method {
            method,
            acts: true,
            state: format!(
                "would {}, if it still holds when checked again {}s later",
                command.describe(),
                consolidation::CONSOLIDATION_TTL.as_secs()
            ),
            blockers,
        },
        Err(why) => Method {
            method,
            acts: false,
            state: format!("kept: {why}"),
            blockers: vec![why.to_string()],
        },
    }
}

/// The `Why` line: `reason::headline`'s method with its whole state.
pub(super) fn summary(methods: &[Method]) -> String {
    match super::reason::headline(methods) {
        Some(m) if m.method == "consolidation" && !m.acts => format!("consolidation {}", m.state),
        Some(m) => format!("{}: {}", m.method, m.state),
        None => super::reason::NO_METHOD.to_string(),
    }
}

/// The node taken away and its pods placed again, as consolidation simulates it.
fn removal(world: &World<'_>, simulator: &Simulator, state: &StateNode) -> Removal {
    let name = state.name();
    let moved: Vec<Pod> = state
        .pods
        .iter()
        .filter(|p| is_displaced_by_drain(p))
        .map(|p| (world.prepare)(p))
        .collect();
    let moved_refs: Vec<&Pod> = moved.iter().collect();
    let removed: HashSet<&str> = HashSet::from([name]);
    let plan = simulator.simulate_without(&removed, &moved_refs);
    let on_existing: BTreeMap<&PodKey, &String> = plan.existing_assignments.iter().map(|(k, n)| (k, n)).collect();
    let mut added = 0.0;
    let mut new_of: BTreeMap<PodKey, Destination> = BTreeMap::new();
    for request in &plan.new_nodes {
        let Some((it, offering)) = request.cheapest() else { continue };
        let carries_moved = request.pods.iter().any(|k| moved.iter().any(|p| PodKey::of(p) == *k));
        if !carries_moved {
            continue;
        }
        added += offering.price;
        for k in &request.pods {
            new_of.insert(
                k.clone(),
                Destination::NewNode {
                    instance_type: it.name.clone(),
                    price_per_hour: offering.price,
                },
            );
        }
    }
    let unschedulable: BTreeMap<&PodKey, &String> = plan
        .unschedulable
        .iter()
        .chain(plan.ignored.iter())
        .map(|(k, why)| (k, why))
        .collect();
    let moves: Vec<Move> = moved
        .iter()
        .map(|p| {
            let key = PodKey::of(p);
            let to = if let Some(node) = on_existing.get(&key) {
                Destination::Node { name: (*node).clone() }
            } else if let Some(d) = new_of.get(&key) {
                d.clone()
            } else {
                Destination::Unschedulable {
                    reason: unschedulable
                        .get(&key)
                        .map_or_else(|| "no place found".to_string(), |why| (*why).clone()),
                }
            };
            Move { pod: key.to_string(), to }
        })
        .collect();
    let before: f64 = world
        .nodes
        .iter()
        .filter_map(|n| consolidation::decide::price(view_of(world, n)))
        .sum();
    let this = consolidation::decide::price(view_of(world, state)).unwrap_or_default();
    Removal {
        every_pod_placed: moves.iter().all(|m| !matches!(m.to, Destination::Unschedulable { .. })),
        moves,
        cluster_price_before: before,
        cluster_price_after: before - this + added,
    }
}

impl NodeExplanation {
    /// The prices as people read them, for the table.
    pub fn price_text(&self) -> String {
        self.price_per_hour.map_or_else(|| "unknown".to_string(), dollars)
    }

    /// The node's age, as people read it.
    pub fn age_text(&self) -> String {
        self.age_seconds
            .map_or_else(|| "unknown".to_string(), |s| human(SignedDuration::from_secs(s)))
    }
}

/// `t` as the table shows it.
pub fn timestamp(t: Timestamp) -> String {
    format!("{t:.0}")
}
