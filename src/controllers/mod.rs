//! The controllers of karpenter-rs. Pure decisions live beside the I/O that acts on them, in
//! files of their own, so they can be tested and benchmarked directly.
//!
//! ```text
//! pending pod (PodScheduled=False/Unschedulable) → scheduling::pods::is_provisionable
//!   → batcher (idle 1 s / max 10 s) → snapshot (nodes before pods) → scheduling::simulate
//!   → cloud provider create → provisioning::node::node_for → Node created, its plan recorded
//!   (state::Plans) → node ready for its pods → binding binds them
//! lifecycle (every 2 s): node ready, untainted, advertising what it should → labelled
//!   initialized; not Ready within the registration TTL → Node deleted
//! status (every 10 s): Provisioner status.resources, usage and node gauges
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
//! goes through `node_ops`. Every time a controller decides by is read from one `clock::Clock`
//! (`Shared::clock`), so tests can move time on with a `FakeClock`.
//! Dependencies point one way: deprovisioning, interruption and binding hold provisioning's narrow
//! `Provisioning` interface (its snapshot, launch path, trigger); nothing in provisioning,
//! termination or garbage collection imports deprovisioning, binding or status.

pub mod binding;
pub mod clock;
pub mod deprovisioning;
pub mod events;
pub mod garbagecollection;
pub mod interruption;
pub mod leader;
pub mod lifecycle;
pub mod node_ops;
pub mod provisioning;
pub mod state;
pub mod status;
pub mod supervisor;
pub mod term;
pub mod termination;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use kube::runtime::events::Recorder;

use crate::cloudprovider::queue::Queue;
use crate::cloudprovider::CloudProvider;
use crate::metrics::Metrics;
use clock::{Clock, SystemClock};
use supervisor::{deadline, supervise};

/// What every controller shares, made once by the wiring: one client, one cloud, one metrics
/// registry (with the liveness `/healthz` reads), one event recorder, one view of the cluster and
/// one clock.
#[derive(Clone)]
pub struct Shared {
    /// The controllers' Kubernetes client.
    pub client: kube::Client,
    /// The cloud.
    pub cloud: Arc<dyn CloudProvider>,
    /// The process's metrics and the controllers' liveness.
    pub metrics: Metrics,
    /// Every controller's events, as `karpenter-rs`.
    pub recorder: Recorder,
    /// The one view of the cluster (one watch per kind in the process).
    pub state: Arc<state::Cluster>,
    /// Where `run_all` puts what answers `/explain` on the metrics port while it runs.
    pub explain: term::TermSlot,
    /// Where every controller, and the view once `run_all` hands it over, reads the time it
    /// decides by (Karpenter's `clock.Clock`): the real clock unless a test puts a `FakeClock`
    /// here.
    pub clock: Arc<dyn Clock>,
}

impl Shared {
    /// The shared parts, the recorder made from `client`, on the real clock.
    pub fn new(client: kube::Client, cloud: Arc<dyn CloudProvider>, metrics: Metrics, state: Arc<state::Cluster>) -> Shared {
        Shared {
            recorder: events::recorder(&client),
            client,
            cloud,
            metrics,
            state,
            explain: Default::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

/// Each controller's settings. Provisioning always runs; a controller given `None` does not.
pub struct Settings {
    /// Provisioning; binding (`bind_pods`) and node lifecycle (`registration_ttl`) take theirs
    /// from it, and status needs none.
    pub provisioning: provisioning::ProvisioningConfig,
    /// Termination of deleting nodes.
    pub termination: Option<termination::TerminationConfig>,
    /// Emptiness, expiration, drift and consolidation.
    pub deprovisioning: Option<deprovisioning::DeprovisioningConfig>,
    /// Garbage collection of instances and nodes.
    pub garbage_collection: Option<garbagecollection::GarbageCollectionConfig>,
    /// Interruption handling, with the queue it reads.
    pub interruption: Option<(interruption::InterruptionConfig, Arc<dyn Queue>)>,
}

/// The one wiring of the controllers (Karpenter's `NewControllers`), used by the binary and the
/// tests alike: builds each controller from `shared` and its settings, then runs each as a task
/// of its own under `supervisor::supervise` until `shutdown`; passes run only while `leading` is
/// true. A controller that panics is started again; the others go on. A controller busy in a
/// long pass holds up no other: their CPU-bound work (the simulation, the consolidation search,
/// the catalogue translation) runs on the blocking pool (`crate::cpu::run`), never on a runtime worker.
/// Other controllers reach provisioning through its narrow `Provisioning`
/// interface. Dropping the returned future aborts every controller (a lost lease ends a term
/// this way).
pub async fn run_all(shared: Shared, settings: Settings, leading: watch::Receiver<bool>, shutdown: CancellationToken) -> Stopped {
    let (bind_pods, registration_ttl) = (settings.provisioning.bind_pods, settings.provisioning.registration_ttl);
    let provisioning = provisioning::Context::new(&shared, settings.provisioning);
    let provisioner: Arc<dyn provisioning::Provisioning> = provisioning.clone();
    let Shared { state, metrics, .. } = shared.clone();
    // The view times nominations and staleness on the controllers' clock.
    state.set_clock(shared.clock.clone());
    // `/explain` answers from this term's provisioning snapshot while it runs (and leads).
    shared.explain.set(Some(term::Term {
        state: state.clone(),
        provisioning: provisioner.clone(),
        nomination: settings
            .deprovisioning
            .as_ref()
            .map_or(deprovisioning::DEFAULT_NOMINATION, |d| d.nomination),
        drift_enabled: settings.deprovisioning.as_ref().is_some_and(|d| d.drift_enabled),
        leading: leading.clone(),
    }));
    let _cleared = ClearOnDrop(shared.explain.clone());
    let mut tasks = Tasks::default();
    if let Some(config) = settings.termination {
        let ctx = termination::Context::new(&shared, config);
        let (leading, stop) = (leading.clone(), shutdown.clone());
        tasks.spawn("termination", deadline::TERMINATION, &metrics, &shutdown, move || {
            termination::run(ctx.clone(), leading.clone(), stop.clone())
        });
    }
    if let Some(config) = settings.garbage_collection {
        let ctx = garbagecollection::Context::new(&shared, config);
        let (leading, stop) = (leading.clone(), shutdown.clone());
        tasks.spawn("garbagecollection", deadline::GARBAGE_COLLECTION, &metrics, &shutdown, move || {
            garbagecollection::run(ctx.clone(), leading.clone(), stop.clone())
        });
    }
    if let Some(config) = settings.deprovisioning {
        let ctx = deprovisioning::Context::new(&shared, config, provisioner.clone());
        let (leading, stop) = (leading.clone(), shutdown.clone());
        tasks.spawn("deprovisioning", deadline::DEPROVISIONING, &metrics, &shutdown, move || {
            deprovisioning::run(ctx.clone(), leading.clone(), stop.clone())
        });
    }
    if let Some((config, queue)) = settings.interruption {
        let ctx = interruption::Context::new(&shared, queue, config, provisioner.clone());
        let (leading, stop) = (leading.clone(), shutdown.clone());
        tasks.spawn("interruption", deadline::INTERRUPTION, &metrics, &shutdown, move || {
            interruption::run(ctx.clone(), leading.clone(), stop.clone())
        });
    }
    {
        let ctx = binding::Context::new(&shared, provisioner.clone(), bind_pods);
        let (leading, stop) = (leading.clone(), shutdown.clone());
        tasks.spawn("binder", deadline::BINDER, &metrics, &shutdown, move || {
            binding::run(ctx.clone(), leading.clone(), stop.clone())
        });
    }
    {
        let ctx = lifecycle::Context::new(&shared, registration_ttl);
        let (leading, stop) = (leading.clone(), shutdown.clone());
        tasks.spawn("nodelifecycle", deadline::NODE_LIFECYCLE, &metrics, &shutdown, move || {
            lifecycle::run(ctx.clone(), leading.clone(), stop.clone())
        });
    }
    {
        let ctx = status::Context::new(&shared);
        let (leading, stop) = (leading.clone(), shutdown.clone());
        tasks.spawn("status", deadline::STATUS, &metrics, &shutdown, move || {
            status::run(ctx.clone(), leading.clone(), stop.clone())
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

/// Clears the explain slot when `run_all` ends or is dropped (a term that ends answers no more).
struct ClearOnDrop(term::TermSlot);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.set(None);
    }
}

/// How long the controllers have after shutdown to stop: a pass in blocking work (a
/// consolidation search) cannot be stopped at an await, and the process must still exit well
/// within its termination grace period.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How `run_all` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every controller returned: nothing of this process acts any more.
    Cleanly,
    /// These controllers were still in a pass `STOP_GRACE` after shutdown and were left behind
    /// (aborted at their next await): one of them may still write, so the leader Lease must not
    /// be released, only left to expire.
    Abandoned(Vec<&'static str>),
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
