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

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource};
use tokio_util::sync::CancellationToken;

/// A reflector store of `api` (narrowed by `config`), kept up to date until `shutdown`;
/// `on_apply` sees every object created or changed. A failing watch is retried with back-off and
/// logged at warn with the kind: a forbidden list leaves the store unsynced, and the controllers
/// waiting on it idle, so an operator must see why.
pub(crate) fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    shutdown: &CancellationToken,
    on_apply: impl Fn(&K) + Send + 'static,
) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, config).default_backoff().reflect(writer).applied_objects();
    let shutdown = shutdown.clone();
    let kind = K::kind(&K::DynamicType::default()).to_string();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                next = stream.next() => match next {
                    Some(Ok(object)) => on_apply(&object),
                    Some(Err(e)) => tracing::warn!(kind, error = %e, "watch failed; retrying with back-off"),
                    None => return,
                }
            }
        }
    });
    reader
}
