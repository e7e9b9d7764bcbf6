//! The pure decisions of consolidation (`core@v0.27.0:pkg/controllers/deprovisioning/consolidation.go`,
//! `helpers.go`): which nodes are candidates, what removing some of them would take (the same
//! `scheduling::simulate` the provisioner runs, over the rest of the cluster), and the command a
//! method chooses. No clock, no I/O: `mod.rs` beside this file snapshots the cluster, calls these,
//! waits, validates and acts. Which nodes are candidates is `candidacy.rs`; the unit tests are in
//! `tests.rs`.
//!
//! Methods, in the order a pass tries them:
//! - [`empty`]: every empty candidate, deleted in one command (after the 15 s re-check);
//! - [`multi_node`]: the largest prefix of the candidates (cheapest to disrupt first, at most
//!   [`MULTI_NODE_MAX`]) that can be deleted, or replaced by one cheaper node (binary search);
//! - [`single_node`]: the first candidate that can be deleted or replaced by a cheaper node.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};
use crate::scheduling::instance_types::offering_allowed;
use crate::scheduling::{InstanceType, NodeRequest, PodKey, Requirement, Requirements, SimulationInput, Simulator};

/// How long a command waits before it is validated, and how recently a node may have received a
/// pod and still be consolidated (`consolidationTTL`,
/// `core@v0.27.0:pkg/controllers/deprovisioning/consolidation.go`).
pub const CONSOLIDATION_TTL: std::time::Duration = std::time::Duration::from_secs(15);

mod candidacy;
pub use candidacy::{
    blocker_kind, candidate, consolidates, disruption_cost, ineligible, lifetime_remaining, price, sort_candidates, Ineligible, NodeView,
};

/// Most candidates one multi-node command considers (`core@v0.30.0:.../multinodeconsolidation.go`).
pub const MULTI_NODE_MAX: usize = 100;

/// A node consolidation may remove.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Node name.
    pub name: String,
    /// Its Provisioner.
    pub provisioner: String,
    /// Its instance type, zone and capacity type (from its labels).
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// What its offering costs per hour.
    pub price: f64,
    /// Cost of disrupting it (Karpenter's `disruptionCost`): lower goes first.
    pub disruption_cost: f64,
    /// The pods that would need a new home, unbound (ready to be placed again) and carrying any
    /// constraints of their volumes.
    pub pods: Vec<Pod>,
}

/// What a command does with its candidates.
#[derive(Clone, Debug)]
pub enum Action {
    /// Delete them: their pods fit on the rest of the cluster.
    Delete,
    /// Launch this one cheaper node first, then delete them.
    Replace(Box<NodeRequest>),
}

/// A consolidation command: remove `nodes`, possibly for one replacement.
#[derive(Clone, Debug)]
pub struct Command {
    /// The candidates removed, in disruption-cost order.
    pub nodes: Vec<String>,
    /// Delete or replace.
    pub action: Action,
    /// Σ of the removed nodes' prices per hour.
    pub price_before: f64,
    /// The replacement's cheapest allowed price per hour (0 for a delete).
    pub price_after: f64,
    /// The pods that move.
    pub pods: Vec<PodKey>,
}

impl Command {
    /// `delete` or `replace`, as the metric's action label and the log line name it.
    pub fn action_name(&self) -> &'static str {
        match self.action {
            Action::Delete => "delete",
            Action::Replace(_) => "replace",
        }
    }

    /// The replacement's instance-type options, if it has one.
    pub fn replacement(&self) -> Option<&NodeRequest> {
        match &self.action {
            Action::Delete => None,
            Action::Replace(r) => Some(r),
        }
    }

    /// For the log line: the nodes, the replacement's options and the prices.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{}, terminating {} node(s) {}",
            self.action_name(),
            self.nodes.len(),
            self.nodes.join(", ")
        );
        if let Some(r) = self.replacement() {
            let capacity = r
                .requirements
                .get(CAPACITY_TYPE_LABEL)
                .and_then(Requirement::sample)
                .unwrap_or_else(|| CAPACITY_TYPE_ON_DEMAND.to_string());
            let names: Vec<&str> = r.instance_type_options.iter().take(5).map(|t| t.name.as_str()).collect();
            let more = r.instance_type_options.len().saturating_sub(names.len());
            let article = if capacity.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            text.push_str(&format!(
                " and replacing with {article} {capacity} node from types {}",
                names.join(", ")
            ));
            if more > 0 {
                text.push_str(&format!(" and {more} other(s)"));
            }
        }
        text.push_str(&format!(
            ", moving {} pod(s), ${:.4}/h → ${:.4}/h",
            self.pods.len(),
            self.price_before,
            self.price_after
        ));
        text
    }
}

/// Why removing candidates would not consolidate (`computeConsolidation`'s reasons, in
/// Karpenter's words, then the figures): the text of the `Unconsolidatable` event.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unconsolidatable {
    /// A pod of theirs would fit nowhere.
    #[error("not all pods would schedule")]
    PodsWouldNotSchedule,
    /// A pod of theirs would move to a node that has not initialised (a launch in flight).
    #[error("not all pods would schedule: would schedule against a non-initialized node {0}")]
    UninitializedNode(String),
    /// Their pods need this many new nodes; consolidation launches at most one.
    #[error("can't remove without creating {0} nodes")]
    TooManyNodes(usize),
    /// No replacement is cheaper than `now` $/h; `cheapest` is the cheapest that would hold them.
    #[error("can't replace with a cheaper node{}", cheapest.map(|c| format!(": ${now:.4}/h now, the cheapest replacement ${c:.4}/h")).unwrap_or_default())]
    NotCheaper {
        /// The price of the nodes removed, $/h.
        now: f64,
        /// The cheapest replacement, $/h.
        cheapest: Option<f64>,
    },
    /// Spot nodes are not replaced with spot nodes.
    #[error("can't replace a spot node with a spot node")]
    SpotToSpot,
}

/// What would happen if `candidates` were removed from `cluster` (the existing nodes with their
/// pods, the pending pods and the pods of nodes being deleted): a command, or why not
/// (Karpenter's `computeConsolidation`).
pub fn compute(cluster: &SimulationInput, candidates: &[&Candidate]) -> Result<Command, Unconsolidatable> {
    compute_on(&Simulator::new(cluster), candidates)
}

/// `compute` on a prepared cluster.
pub fn compute_on(simulator: &Simulator, candidates: &[&Candidate]) -> Result<Command, Unconsolidatable> {
    let cluster = simulator.input();
    let removed: HashSet<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
    let moved: Vec<PodKey> = candidates.iter().flat_map(|c| c.pods.iter().map(PodKey::of)).collect();
    let moved_set: HashSet<&PodKey> = moved.iter().collect();
    let moved_pods: Vec<&Pod> = candidates.iter().flat_map(|c| c.pods.iter()).collect();
    let plan = simulator.simulate_without(&removed, &moved_pods);
    if plan
        .unschedulable
        .iter()
        .chain(plan.ignored.iter())
        .any(|(k, _)| moved_set.contains(k))
    {
        return Err(Unconsolidatable::PodsWouldNotSchedule);
    }
    // Pods cannot move to a node that is not ready for them yet (as in `computeConsolidation`).
    let uninitialized: HashSet<&str> = cluster
        .nodes
        .iter()
        .filter(|n| !n.initialized && !removed.contains(n.name.as_str()))
        .map(|n| n.name.as_str())
        .collect();
    if let Some((_, node)) = plan
        .existing_assignments
        .iter()
        .find(|(k, n)| moved_set.contains(k) && uninitialized.contains(n.as_str()))
    {
        return Err(Unconsolidatable::UninitializedNode(node.clone()));
    }
    let price_before: f64 = candidates.iter().map(|c| c.price).sum();
    let mut new: Vec<NodeRequest> = plan
        .new_nodes
        .into_iter()
        .filter(|r| r.pods.iter().any(|k| moved_set.contains(k)))
        .collect();
    let names = || candidates.iter().map(|c| c.name.clone()).collect();
    match new.len() {
        0 => {
            return Ok(Command {
                nodes: names(),
                action: Action::Delete,
                price_before,
                price_after: 0.0,
                pods: moved,
            })
        }
        1 => {}
        n => return Err(Unconsolidatable::TooManyNodes(n)),
    }
    let mut request = new.remove(0);
    let cheapest = request.cheapest().map(|(_, o)| o.price);
    request.instance_type_options = cheaper_than(&request.instance_type_options, &request.requirements, price_before);
    if request.instance_type_options.is_empty() {
        // Karpenter's words, then the figures.
        return Err(Unconsolidatable::NotCheaper {
            now: price_before,
            cheapest,
        });
    }
    let capacity = request.requirements.get(CAPACITY_TYPE_LABEL).cloned();
    let allows = |value: &str| capacity.as_ref().is_none_or(|r| r.has(value));
    if candidates.iter().all(|c| c.capacity_type == CAPACITY_TYPE_SPOT) && allows(CAPACITY_TYPE_SPOT) {
        return Err(Unconsolidatable::SpotToSpot);
    }
    // The options were priced as spot where spot is allowed: launching on-demand instead could
    // cost more than the nodes replaced, so the replacement must be spot (as in `computeConsolidation`).
    if allows(CAPACITY_TYPE_SPOT) && allows(CAPACITY_TYPE_ON_DEMAND) {
        request
            .requirements
            .add(CAPACITY_TYPE_LABEL, Requirement::in_values([CAPACITY_TYPE_SPOT]));
        if request.labels.contains_key(CAPACITY_TYPE_LABEL) {
            request.labels.insert(CAPACITY_TYPE_LABEL.into(), CAPACITY_TYPE_SPOT.into());
        }
    }
    let price_after = request.cheapest().map_or(0.0, |(_, o)| o.price);
    Ok(Command {
        nodes: names(),
        action: Action::Replace(Box::new(request)),
        price_before,
        price_after,
        pods: moved,
    })
}

/// The most a launch with `requirements` can cost for `it`: its highest available spot price
/// over the allowed zones when spot is allowed, else its highest on-demand price
/// (Karpenter's `worstLaunchPrice`). `None` when nothing is offered.
pub fn worst_launch_price(it: &InstanceType, requirements: &Requirements) -> Option<f64> {
    let allowed = || it.offerings.iter().filter(|o| o.available && offering_allowed(o, requirements));
    let max = |capacity: &str| {
        allowed()
            .filter(|o| o.capacity_type == capacity)
            .map(|o| o.price)
            .max_by(f64::total_cmp)
    };
    max(CAPACITY_TYPE_SPOT).or_else(|| max(CAPACITY_TYPE_ON_DEMAND))
}

/// The options whose worst launch price is strictly below `price`, in their order.
fn cheaper_than(options: &[Arc<InstanceType>], requirements: &Requirements, price: f64) -> Vec<Arc<InstanceType>> {
    options
        .iter()
        .filter(|it| worst_launch_price(it, requirements).is_some_and(|p| p < price))
        .cloned()
        .collect()
}

/// Every empty candidate, for one delete command (`core@v0.27.0:.../emptynodeconsolidation.go`).
pub fn empty(candidates: &[Candidate]) -> Vec<String> {
    candidates.iter().filter(|c| c.pods.is_empty()).map(|c| c.name.clone()).collect()
}

/// Multi-node consolidation (`core@v0.27.0:.../multinodeconsolidation.go`): a binary search over
/// the prefix length of `candidates` (already in disruption-cost order, at most
/// [`MULTI_NODE_MAX`] of them) for the longest prefix of two or more that can be deleted or
/// replaced by one cheaper node. `expired` is asked between simulations; once it says true the
/// best command so far is returned and the second value is true (the evaluation timed out).
pub fn multi_node(cluster: &Simulator, candidates: &[Candidate], expired: &dyn Fn() -> bool) -> (Option<Command>, bool) {
    let candidates = &candidates[..candidates.len().min(MULTI_NODE_MAX)];
    if candidates.len() < 2 {
        return (None, false);
    }
    let (mut min, mut max) = (1, candidates.len() - 1);
    let mut best = None;
    while min <= max {
        if expired() {
            return (best, true);
        }
        let mid = (min + max) / 2;
        let prefix: Vec<&Candidate> = candidates[..=mid].iter().collect();
        let command = compute_on(cluster, &prefix).ok().and_then(|mut command| {
            if let Action::Replace(request) = &mut command.action {
                request.instance_type_options = filter_out_same_type(request, &prefix);
                if request.instance_type_options.is_empty() {
                    return None;
                }
                command.price_after = request.cheapest().map_or(0.0, |(_, o)| o.price);
            }
            Some(command)
        });
        match command {
            Some(command) => {
                best = Some(command);
                min = mid + 1;
            }
            None => max = mid - 1,
        }
    }
    (best, false)
}

/// Replacing several nodes with one of a type already among them must be cheaper than the
/// cheapest of those nodes, or deleting the others alone would do with less disruption
/// (Karpenter's `filterOutSameType`).
fn filter_out_same_type(request: &NodeRequest, candidates: &[&Candidate]) -> Vec<Arc<InstanceType>> {
    let mut cheapest: BTreeMap<&str, f64> = BTreeMap::new();
    for c in candidates {
        let price = cheapest.entry(c.instance_type.as_str()).or_insert(f64::MAX);
        *price = price.min(c.price);
    }
    let limit = request
        .instance_type_options
        .iter()
        .filter_map(|it| cheapest.get(it.name.as_str()))
        .fold(f64::MAX, |a, b| a.min(*b));
    cheaper_than(&request.instance_type_options, &request.requirements, limit)
}

/// Single-node consolidation (`core@v0.27.0:.../singlenodeconsolidation.go`): the first
/// candidate, in disruption-cost order, that can be deleted or replaced by one cheaper node, with
/// why each candidate before it could not be (for the `Unconsolidatable` events). `expired` as
/// for [`multi_node`].
pub fn single_node(
    cluster: &Simulator,
    candidates: &[Candidate],
    expired: &dyn Fn() -> bool,
) -> (Option<Command>, Vec<(String, String)>, bool) {
    let mut refused = Vec::new();
    for c in candidates {
        if expired() {
            return (None, refused, true);
        }
        match compute_on(cluster, &[c]) {
            Ok(command) => return (Some(command), refused, false),
            Err(why) => refused.push((c.name.clone(), why.to_string())),
        }
    }
    (None, refused, false)
}

/// What a consolidation evaluation chose, trying the methods in Karpenter's order.
#[derive(Clone, Debug)]
pub enum Choice {
    /// Empty candidates, to delete together after the 15 s re-check.
    Empty(Vec<String>),
    /// A multi-node (`multi: true`) or single-node command, to validate and execute.
    Command {
        /// The command.
        command: Command,
        /// Chosen by multi-node consolidation.
        multi: bool,
    },
    /// Nothing to do; why the single-node candidates could not be consolidated.
    Nothing {
        /// (node, reason), for the `Unconsolidatable` events.
        refused: Vec<(String, String)>,
    },
}

/// The outcome of [`choose`]: the choice, and which evaluations timed out.
#[derive(Clone, Debug)]
pub struct Evaluation {
    /// What to do.
    pub choice: Choice,
    /// The multi-node evaluation was cut off by `multi_expired`.
    pub multi_timed_out: bool,
    /// The single-node evaluation was cut off by `single_expired`.
    pub single_timed_out: bool,
}

/// One consolidation evaluation (in Karpenter's order): empty-node, then multi-node, then single-node
/// consolidation over `candidates` (in disruption-cost order); the first that finds something
/// wins. `multi_expired` and `single_expired` bound the two searches.
pub fn choose(
    cluster: &SimulationInput,
    candidates: &[Candidate],
    multi_expired: &dyn Fn() -> bool,
    single_expired: &dyn Fn() -> bool,
) -> Evaluation {
    let mut evaluation = Evaluation {
        choice: Choice::Nothing { refused: Vec::new() },
        multi_timed_out: false,
        single_timed_out: false,
    };
    let empty = empty(candidates);
    if !empty.is_empty() {
        evaluation.choice = Choice::Empty(empty);
        return evaluation;
    }
    let cluster = Simulator::new(cluster);
    let (multi, timed_out) = multi_node(&cluster, candidates, multi_expired);
    evaluation.multi_timed_out = timed_out;
    if let Some(command) = multi {
        evaluation.choice = Choice::Command { command, multi: true };
        return evaluation;
    }
    let (single, refused, timed_out) = single_node(&cluster, candidates, single_expired);
    evaluation.single_timed_out = timed_out;
    evaluation.choice = match single {
        Some(command) => Choice::Command { command, multi: false },
        None => Choice::Nothing { refused },
    };
    evaluation
}

/// Whether `command`, computed again after the wait on a fresh snapshot (`recomputed`), still
/// holds (`core@v0.27.0:.../deprovisioning/validation.go`): a delete must still be a delete; a
/// replacement must still need exactly one node, and one that may be any of the types the command
/// would launch.
pub fn still_valid(command: &Command, recomputed: &Result<Command, Unconsolidatable>) -> bool {
    let Ok(again) = recomputed else { return false };
    match (&command.action, &again.action) {
        (Action::Delete, Action::Delete) => true,
        (Action::Replace(before), Action::Replace(after)) => {
            let now: BTreeSet<&str> = after.instance_type_options.iter().map(|t| t.name.as_str()).collect();
            before.instance_type_options.iter().all(|t| now.contains(t.name.as_str()))
        }
        _ => false,
    }
}

/// Whether the nodes of an unfinished command (marked `karpenter.sh/voluntary-disruption=
/// consolidation`, none being deleted when the pass found them) may go back into service, as the
/// view shows them just before that (`now[i]` is the i-th of them, `None` once gone). Not when one
/// of them is being deleted or gone: the command reached its delete step before the view caught
/// up (a pass starts the moment a long one ends, and the snapshot taken meanwhile gives the watch
/// time to deliver the deletions). Released, such nodes would drain without their mark, the
/// passes would no longer wait for them (`deprovisioning::decide::deletions`), and another
/// command would start beside them (Karpenter too executes one command at a time).
pub fn releasable(now: &[Option<&Node>]) -> bool {
    now.iter().all(|n| n.is_some_and(|n| n.metadata.deletion_timestamp.is_none()))
}

#[cfg(test)]
mod tests;
