//! The controllers of karpenter-rs. Pure decisions live beside the I/O that acts on them, in
//! files of their own, so they can be tested and benchmarked directly.
//!
//! ```text
//! pending pod (PodScheduled=False/Unschedulable) → provisioning::pods::is_provisionable
//!   → batcher (idle 1 s / max 10 s) → snapshot (nodes before pods) → scheduling::simulate
//!   → cloud provider create → provisioning::node::node_for → Node created
//!   → node Ready → provisioning::bind
//! ```

pub mod leader;
pub mod provisioning;
