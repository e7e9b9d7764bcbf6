//! The controllers of karpenter-rs. Pure decisions live beside the I/O that acts on them, in
//! files of their own, so they can be tested and benchmarked directly.
//!
//! ```text
//! pending pod (PodScheduled=False/Unschedulable) → provisioning::pods::is_provisionable
//!   → batcher (idle 1 s / max 10 s) → snapshot (nodes before pods) → scheduling::simulate
//!   → cloud provider create → provisioning::node::node_for → Node created
//!   → node Ready → provisioning::bind
//!
//! deprovisioning (every 10 s): expired node / node empty for its TTL → Node deleted;
//!   consolidation: nodes whose pods fit elsewhere (or on one cheaper node) → cordon → replacement
//!   launched and initialised → Node deleted
//! garbagecollection: instance without a Node → terminated; Node without an instance → deleted
//! interruption (SQS): spot interruption / scheduled change / stopping → Node deleted, pods placed
//! Node deleted → termination: cordon → evict pods → terminate instance → finalizer removed
//! ```
//!
//! Every controller reads one shared view of the cluster, `state::Cluster` (one watch per kind
//! in the process), started once by the wiring. `events` and `pods` are helpers they all use.
//! Dependencies point one way: deprovisioning uses provisioning's snapshot and launch path;
//! nothing in provisioning, termination or garbage collection imports deprovisioning.

pub mod deprovisioning;
pub mod events;
pub mod garbagecollection;
pub mod interruption;
pub mod leader;
pub mod pods;
pub mod provisioning;
pub mod state;
pub mod termination;
