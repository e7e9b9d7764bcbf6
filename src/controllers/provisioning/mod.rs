//! Provisioning: pods the scheduler cannot place → a batch → a scheduling simulation → EC2
//! instances → Nodes → pods bound once their node is ready.
//!
//! `pods.rs` decides which pods count, `batcher.rs` owns the batching window, `node.rs` builds
//! the Node for a launched instance and `bind.rs` decides when planned pods may be bound.

pub mod batcher;
pub mod bind;
pub mod node;
pub mod pods;
