//! Explain: why a pod is pending or on its node, why a node stays, and what removing a node
//! would do, from the cluster as the controllers see it.
//!
//! The answers come from the same functions that make the decisions: emptiness and expiration
//! from `deprovisioning::decide`, consolidation from `consolidation::decide` (`ineligible`,
//! `candidate`, `compute`, whose reason strings are also the `Unconsolidatable` events'), and
//! placements from the scheduling simulation. `node.rs` and `pod.rs` are pure (the cluster and
//! the time are passed in, as a `World`); `render.rs` turns an answer into the table people
//! read, `reason.rs` a node's answer into one line (the `nodes` viewer's WHY column); `live.rs` builds the `World` from the controllers' view and answers the metrics port's
//! `/explain/...`; `cli.rs` is `karpenter-rs explain`, which asks the running controller and
//! falls back to a view of its own.

pub mod cli;
pub mod live;
pub mod node;
pub mod pod;
pub mod reason;
pub mod render;

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::{Deserialize, Serialize};

use crate::apis::v1alpha5::Provisioner;
use crate::controllers::state::StateNode;
use crate::cloudprovider::OfferingId;
use crate::scheduling::SimulationInput;

pub use node::{explain_node, NodeExplanation};
pub use pod::{explain_pod, PodExplanation};

/// The cluster an answer is computed from.
pub struct World<'a> {
    /// Every node with its pods, nomination and instance type.
    pub nodes: &'a [StateNode],
    /// Every Provisioner.
    pub provisioners: &'a [Arc<Provisioner>],
    /// Every pod of the cluster.
    pub pods: &'a [Arc<Pod>],
    /// Every PodDisruptionBudget.
    pub pdbs: &'a [PodDisruptionBudget],
    /// The simulation's input as a provisioning pass builds it now (pending pods, Provisioners
    /// with their instance types, nodes with their pods).
    pub input: &'a SimulationInput,
    /// The offerings unavailable for a capacity error, each with when it is tried again.
    pub unavailable: &'a [(OfferingId, Timestamp)],
    /// Unbinds a pod and adds its volumes' constraints, as consolidation moves it.
    pub prepare: &'a dyn Fn(&Pod) -> Pod,
    /// How long after launch a node is presumed nominated for the pods it was launched for
    /// (deprovisioning's setting).
    pub nomination: SignedDuration,
    /// Whether drift is on (`--drift-enabled`).
    pub drift_enabled: bool,
    /// Now.
    pub now: Timestamp,
}

/// What `karpenter-rs explain` answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Explanation {
    /// `explain node NAME`.
    Node(NodeExplanation),
    /// `explain pod NAMESPACE/NAME`.
    Pod(PodExplanation),
}

/// What is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Question {
    /// A node, by name.
    Node(String),
    /// A pod, by namespace and name.
    Pod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl Question {
    /// The answer from `world`, or why there is none (no such node or pod).
    pub fn answer(&self, world: &World<'_>) -> Result<Explanation, String> {
        match self {
            Question::Node(name) => explain_node(world, name).map(Explanation::Node),
            Question::Pod { namespace, name } => explain_pod(world, namespace, name).map(Explanation::Pod),
        }
    }
}

/// A price per hour as people read it.
pub fn dollars(price: f64) -> String {
    format!("${price:.4}/h")
}

#[cfg(test)]
mod tests;
