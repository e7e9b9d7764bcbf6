//! The scheduling simulation: pending pods × Provisioners × instance types × existing nodes →
//! `Plan` (nodes to launch, pods expected on existing nodes, pods nothing can hold). Pure: no
//! kube client, no cloud calls, no clock, no async. The controller snapshots the cluster, calls
//! `simulate`, and acts on the plan.
//!
//! - `requirements`: the requirement algebra and the compatibility rule;
//! - `resources`: pod requests and resource arithmetic;
//! - `taints`: tolerations;
//! - `capacity`, `instance_types`: what an instance type offers and costs;
//! - `pods`, `preferences`, `topology`: what a pod asks for, relaxing preferences, spread and
//!   (anti-)affinity;
//! - `nodes`, `template`, `binpack`, `plan`: existing nodes, Provisioner templates, fitting a pod
//!   onto a node, and the solve loop;
//! - `binding`: which pods planned onto a ready node the scheduler and the kubelet would admit
//!   there now (the binder's rules).

pub mod binding;
mod binpack;
pub mod capacity;
pub mod instance_types;
pub mod nodes;
pub mod plan;
pub mod pods;
mod preferences;
pub mod requirements;
pub mod resources;
pub mod taints;
mod template;
mod topology;

#[cfg(test)]
pub(crate) mod testing;

pub use binpack::Refusal;
pub use capacity::{AmiFamily, GpuFacts, InstanceFacts, NodeSettings, Overhead};
pub use instance_types::{InstanceType, Offering};
pub use nodes::{provisioner_usage, ExistingNode};
pub use plan::{simulate, NodeRequest, Plan, ProvisionerInput, SimulationInput, Simulator, MAX_INSTANCE_TYPE_OPTIONS};
pub use pods::{validate_pod, PodKey};
pub use requirements::{Requirement, Requirements};
pub use resources::Resources;
pub use template::provisioner_requirements;
pub(crate) use topology::Selector;
