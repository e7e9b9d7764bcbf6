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
pub mod supervisor;
pub mod termination;

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use supervisor::{deadline, supervise};

/// The controllers of one process, built once from the shared cluster view; `run` is the one
/// place they are started (the binary and the tests both use it). Provisioning always runs; the
/// others run when given.
pub struct Controllers {
    /// The shared view of the cluster.
    pub state: Arc<state::Cluster>,
    /// The process's metrics (and the controllers' liveness, for `/healthz`).
    pub metrics: Metrics,
    /// Provisioning (with binding, node lifecycle and the metric scraper).
    pub provisioning: Arc<provisioning::Context>,
    /// Termination of deleting nodes.
    pub termination: Option<Arc<termination::Context>>,
    /// Emptiness, expiration and consolidation.
    pub deprovisioning: Option<Arc<deprovisioning::Context>>,
    /// Garbage collection of instances and nodes.
    pub garbage_collection: Option<Arc<garbagecollection::Context>>,
    /// Interruption handling.
    pub interruption: Option<Arc<interruption::Context>>,
}

impl Controllers {
    /// Runs every controller under `supervisor::supervise` until `shutdown`; passes run only
    /// while `leading` is true. A controller that panics is started again; the others go on.
    ///
    /// The loops share one task: a loop spawned as a task of its own could wait behind a busy
    /// worker indefinitely (the runtime's LIFO slot is not stolen by idle workers), which the
    /// end-to-end suites saw as node lifecycle and deprovisioning never ticking. A panic is
    /// caught per controller all the same (`supervise` polls each under `catch_unwind`).
    pub async fn run(self, leading: watch::Receiver<bool>, shutdown: CancellationToken) {
        let Controllers {
            state,
            metrics,
            provisioning,
            termination,
            deprovisioning,
            garbage_collection,
            interruption,
        } = self;
        let termination = async {
            if let Some(ctx) = &termination {
                supervise("termination", deadline::TERMINATION, metrics.clone(), shutdown.clone(), || {
                    termination::run(ctx.clone(), state.clone(), leading.clone(), shutdown.clone())
                })
                .await
            }
        };
        let garbage_collection = async {
            if let Some(ctx) = &garbage_collection {
                supervise("garbagecollection", deadline::GARBAGE_COLLECTION, metrics.clone(), shutdown.clone(), || {
                    garbagecollection::run(ctx.clone(), leading.clone(), shutdown.clone())
                })
                .await
            }
        };
        let deprovisioning = async {
            if let Some(ctx) = &deprovisioning {
                supervise("deprovisioning", deadline::DEPROVISIONING, metrics.clone(), shutdown.clone(), || {
                    deprovisioning::run(ctx.clone(), leading.clone(), shutdown.clone())
                })
                .await
            }
        };
        let interruption = async {
            if let Some(ctx) = &interruption {
                supervise("interruption", deadline::INTERRUPTION, metrics.clone(), shutdown.clone(), || {
                    interruption::run(ctx.clone(), leading.clone(), shutdown.clone())
                })
                .await
            }
        };
        let provisioning = supervise("provisioning", deadline::PROVISIONING, metrics.clone(), shutdown.clone(), || {
            provisioning::run(provisioning.clone(), leading.clone(), shutdown.clone())
        });
        tokio::join!(termination, garbage_collection, deprovisioning, interruption, provisioning);
    }
}
