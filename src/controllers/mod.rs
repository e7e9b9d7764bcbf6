//! The controllers of karpenter-rs. Pure decisions live beside the I/O that acts on them, in
//! files of their own, so they can be tested and benchmarked directly.
//!
//! ```text
//! pending pod (PodScheduled=False/Unschedulable) → provisioning::pods::is_provisionable
//!   → batcher (idle 1 s / max 10 s) → snapshot (nodes before pods) → scheduling::simulate
//!   → cloud provider create → provisioning::node::node_for → Node created
//!   → node Ready → provisioning::bind
//!
//! deprovisioning (every 10 s): expired node / node empty for its TTL → Node deleted
//! garbagecollection: instance without a Node → terminated; Node without an instance → deleted
//! Node deleted → termination: cordon → evict pods → terminate instance → finalizer removed
//! ```

pub mod deprovisioning;
pub mod garbagecollection;
pub mod leader;
pub mod provisioning;
pub mod termination;
