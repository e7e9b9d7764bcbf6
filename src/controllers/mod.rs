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
//! in the process), started once by the wiring. `events` is a helper they all use, what kind
//! of pod a pod is they ask `scheduling::pods`, and every write to a Node and every eviction
//! goes through `node_ops`.
//! Dependencies point one way: deprovisioning uses provisioning's snapshot and launch path;
//! nothing in provisioning, termination or garbage collection imports deprovisioning.

pub mod deprovisioning;
pub mod events;
pub mod garbagecollection;
pub mod interruption;
pub mod leader;
pub mod node_ops;
pub mod provisioning;
pub mod state;
pub mod supervisor;
pub mod termination;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
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

/// How long the controllers have after shutdown to stop: a pass in blocking work (a
/// consolidation search) cannot be stopped at an await, and the process must still exit well
/// within its termination grace period.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How `Controllers::run` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every controller returned: nothing of this process acts any more.
    Cleanly,
    /// These controllers were still in a pass `STOP_GRACE` after shutdown and were left behind
    /// (aborted at their next await): one of them may still write, so the leader Lease must not
    /// be released, only left to expire.
    Abandoned(Vec<&'static str>),
}

impl Controllers {
    /// Runs every controller, each a task of its own under `supervisor::supervise`, until
    /// `shutdown`; passes run only while `leading` is true. A controller that panics is started
    /// again; the others go on. A controller busy in a long pass holds up no other: their CPU-bound
    /// work runs in `block_in_place`, which hands the worker's queued tasks to another thread.
    /// (They once shared one task, because spawned loops were seen never to tick; the cause was
    /// kube's `Store::wait_until_ready`, which wakes only the last of several waiting tasks, and
    /// the cluster view's `ready` no longer uses it that way: `state::Synced`.) Dropping the
    /// returned future aborts every controller (a lost lease ends a term this way).
    pub async fn run(self, leading: watch::Receiver<bool>, shutdown: CancellationToken) -> Stopped {
        let Controllers {
            state,
            metrics,
            provisioning,
            termination,
            deprovisioning,
            garbage_collection,
            interruption,
        } = self;
        let mut tasks = Tasks::default();
        if let Some(ctx) = termination {
            let (state, leading, stop) = (state.clone(), leading.clone(), shutdown.clone());
            tasks.spawn("termination", deadline::TERMINATION, &metrics, &shutdown, move || {
                termination::run(ctx.clone(), state.clone(), leading.clone(), stop.clone())
            });
        }
        if let Some(ctx) = garbage_collection {
            let (leading, stop) = (leading.clone(), shutdown.clone());
            tasks.spawn("garbagecollection", deadline::GARBAGE_COLLECTION, &metrics, &shutdown, move || {
                garbagecollection::run(ctx.clone(), leading.clone(), stop.clone())
            });
        }
        if let Some(ctx) = deprovisioning {
            let (leading, stop) = (leading.clone(), shutdown.clone());
            tasks.spawn("deprovisioning", deadline::DEPROVISIONING, &metrics, &shutdown, move || {
                deprovisioning::run(ctx.clone(), leading.clone(), stop.clone())
            });
        }
        if let Some(ctx) = interruption {
            let (leading, stop) = (leading.clone(), shutdown.clone());
            tasks.spawn("interruption", deadline::INTERRUPTION, &metrics, &shutdown, move || {
                interruption::run(ctx.clone(), leading.clone(), stop.clone())
            });
        }
        {
            let (leading, stop) = (leading.clone(), shutdown.clone());
            tasks.spawn("provisioning", deadline::PROVISIONING, &metrics, &shutdown, move || {
                provisioning::run(provisioning.clone(), leading.clone(), stop.clone())
            });
        }
        tasks.until_stopped(&shutdown).await
    }
}

/// The controllers' tasks, by name.
#[derive(Default)]
struct Tasks {
    set: JoinSet<()>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Tasks {
    fn spawn<F, Fut>(&mut self, name: &'static str, deadline: Duration, metrics: &Metrics, shutdown: &CancellationToken, start: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let handle = self.set.spawn(supervise(name, deadline, metrics.clone(), shutdown.clone(), start));
        self.names.insert(handle.id(), name);
    }

    /// Waits for the tasks until `shutdown`, then up to `STOP_GRACE` more for them to return.
    async fn until_stopped(mut self, shutdown: &CancellationToken) -> Stopped {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                ended = self.set.join_next_with_id() => match ended {
                    None => return Stopped::Cleanly,
                    Some(ended) => self.ended(ended),
                },
            }
        }
        let all_returned = tokio::time::timeout(STOP_GRACE, async {
            while let Some(ended) = self.set.join_next_with_id().await {
                self.ended(ended);
            }
        })
        .await;
        match all_returned {
            Ok(()) => Stopped::Cleanly,
            Err(_) => {
                let mut left: Vec<&'static str> = self.names.values().copied().collect();
                left.sort_unstable();
                Stopped::Abandoned(left)
            }
        }
    }

    /// Forgets a task that ended; a panic that escaped its supervisor is carried on.
    fn ended(&mut self, ended: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        match ended {
            Ok((id, ())) => {
                self.names.remove(&id);
            }
            Err(e) => {
                self.names.remove(&e.id());
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }
}
