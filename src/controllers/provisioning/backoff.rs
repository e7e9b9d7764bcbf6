//! Runaway protection: capacity launched for pods that then do not stay (evicted by a taint the
//! new node gets, rejected by its kubelet, deleted before they ran) must not be launched again
//! and again at the pace of the batcher. Two bounds, both pure and driven by the time passed in:
//!
//! - **Per owner** (the pod's controller, e.g. its ReplicaSet; the pod itself when it has
//!   none): when a pod we launched a node for is lost before it has run for `STABLE_RUN`, the
//!   owner's next launch waits `BASE_DELAY × 2^(losses − 1)`, at most `MAX_DELAY`. A pod of the
//!   owner that runs for `STABLE_RUN` resets it. A pod is lost when it failed, was disrupted
//!   (deleted with the `DisruptionTarget` condition Kubernetes sets when the taint manager, an
//!   eviction or preemption deletes it) or vanished unseen, or is still unbound `NODE_GRACE`
//!   after the node launched for it became Ready while the node cannot take it (a taint or
//!   labels it got, too little allocatable), or that node is gone. A pod its owner or a user
//!   deleted (a scale-down, a rollout) is no loss: it is only no longer watched. Neither is a
//!   pod still unbound `CONTESTED_GRACE` after its node became Ready when the node could take
//!   it: other pods took its room, or its place in a topology spread (kube-scheduler binds any
//!   pending pod to any ready node with room); the capacity was used, and the pod is placed
//!   anew by the next pass. Until then the pod waits for its node: nothing more is launched
//!   for it.
//! - Held pods still count in the simulation, so they land on existing nodes with room; only
//!   new capacity for them waits.
//! - **Per Provisioner**: at most `max_per_minute` launches in any minute (a token bucket that
//!   refills continuously), whatever the pods.
//!
//! Karpenter has neither (users reported the incidents on its issue tracker); karpenter-rs adds
//! both, a deliberate difference, for the reason above.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::scheduling::binding as rules;
use crate::scheduling::nodes::is_ready_for_pods;

/// The first delay after a lost pod.
pub const BASE_DELAY: Duration = Duration::from_secs(10);
/// The longest delay.
pub const MAX_DELAY: Duration = Duration::from_secs(5 * 60);
/// How long a pod must have been Ready for its owner to count as placed for good.
pub const STABLE_RUN: Duration = Duration::from_secs(60);
/// How long a pod we launched for is watched for loss.
const WATCH_FOR: Duration = Duration::from_secs(15 * 60);
/// How long a pod may stay unbound after the node launched for it is Ready.
pub const NODE_GRACE: Duration = Duration::from_secs(30);
/// How long a pod may stay unbound after the node launched for it is Ready when that node could
/// take it: kube-scheduler binds within a second or two of a node turning Ready, so a pod still
/// pending after this lost its room to others.
pub const CONTESTED_GRACE: Duration = Duration::from_secs(5);

/// The wait before retrying after the first failed provisioning pass (`pass_retry_delay`).
pub const PASS_RETRY_BASE: Duration = Duration::from_secs(1);
/// The longest wait before retrying after failed provisioning passes (`pass_retry_delay`).
pub const PASS_RETRY_MAX: Duration = Duration::from_secs(30);

/// The wait before retrying after `consecutive` failed provisioning passes in a row (1 for the
/// first): 1 s doubling to at most 30 s. A pass that fails (an outage of the API server or of
/// EC2) is tried again, but never in a loop.
pub fn pass_retry_delay(consecutive: u32) -> Duration {
    doubling(PASS_RETRY_BASE, PASS_RETRY_MAX, consecutive.max(1))
}

/// `first × 2^(nth − 1)`, at most `cap` (`nth` counts from 1).
fn doubling(first: Duration, cap: Duration, nth: u32) -> Duration {
    first.saturating_mul(2u32.saturating_pow(nth.saturating_sub(1).min(16))).min(cap)
}

/// Whether `pod` failed or was disrupted: the `DisruptionTarget` condition (status True) that
/// Kubernetes sets on a pod the taint manager, an eviction or preemption deletes, and that a
/// delete by its owner or a user (a scale-down, a rollout) does not get.
pub fn disrupted(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Failed")
        || status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "DisruptionTarget" && c.status == "True"))
}

/// Who a pod belongs to for back-off: its controller owner's uid, else its own uid.
pub fn owner_key(pod: &Pod) -> String {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .or_else(|| pod.metadata.owner_references.iter().flatten().next())
        .map(|o| o.uid.clone())
        .or_else(|| pod.metadata.uid.clone())
        .unwrap_or_default()
}

#[derive(Clone, Debug, Default)]
struct Owner {
    /// Pods lost since the owner last had one run for `STABLE_RUN`.
    losses: u32,
    /// The owner's last launch.
    last_launch: Option<Instant>,
}

#[derive(Clone, Debug)]
struct Watched {
    owner: String,
    since: Instant,
    /// The node launched for it.
    node: String,
    /// When that node was first seen Ready.
    node_ready: Option<Instant>,
    /// The node it was bound to when capacity was launched for it: a node being deleted, whose
    /// pods are placed again. Being there does not count as placed.
    origin: Option<String>,
    /// Seen bound to a node (other than `origin`) since the launch.
    bound: bool,
}

/// Launch history per owner and the pods being watched for loss.
#[derive(Debug, Default)]
pub struct LaunchBackoff {
    owners: HashMap<String, Owner>,
    /// Pod uid → what it is watched for.
    watched: HashMap<String, Watched>,
}

impl LaunchBackoff {
    /// Records that `node` was launched at `now` for `pods`, each with the node it is bound to
    /// now (when it is on a node being deleted).
    pub fn launched<'a>(&mut self, node: &str, pods: impl IntoIterator<Item = (&'a Pod, Option<String>)>, now: Instant) {
        for (pod, origin) in pods {
            let owner = owner_key(pod);
            self.owners.entry(owner.clone()).or_default().last_launch = Some(now);
            if let Some(uid) = pod.metadata.uid.clone() {
                self.watched.insert(
                    uid,
                    Watched {
                        owner,
                        since: now,
                        node: node.to_string(),
                        node_ready: None,
                        origin,
                        bound: false,
                    },
                );
            }
        }
    }

    /// Looks at every pod of the cluster (`all`, by uid) and every node (`nodes`, by name) at
    /// `now` (`wall` is the same moment by the wall clock, for the pods' condition times): a
    /// watched pod that is lost (see the module) is a loss for its owner; one Ready for
    /// `STABLE_RUN` resets its owner; one whose room others took is no longer watched.
    pub fn observe(&mut self, all: &HashMap<String, &Pod>, nodes: &HashMap<String, &Node>, now: Instant, wall: Timestamp) {
        let mut done = Vec::new();
        for (uid, watched) in &mut self.watched {
            let lost = match all.get(uid) {
                None => true,
                Some(pod) => {
                    let on = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty());
                    let bound = on.is_some_and(|n| Some(n) != watched.origin.as_deref());
                    if bound && ready_for(pod, wall).is_some_and(|d| d >= STABLE_RUN) {
                        self.owners.entry(watched.owner.clone()).or_default().losses = 0;
                        done.push(uid.clone());
                        continue;
                    }
                    let failed = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
                    let pending_again = watched.bound && !bound;
                    watched.bound |= bound;
                    let node = nodes.get(&watched.node);
                    if watched.node_ready.is_none() && node.is_some_and(|n| is_ready_for_pods(n, &[], &Default::default())) {
                        watched.node_ready = Some(now);
                    }
                    if pod.metadata.deletion_timestamp.is_some() && !disrupted(pod) {
                        // Deleted by its owner or a user: neither placed nor lost.
                        done.push(uid.clone());
                        continue;
                    }
                    let ready_for = watched.node_ready.map(|t| now.duration_since(t));
                    if on.is_none()
                        && !watched.bound
                        && ready_for.is_some_and(|d| d >= CONTESTED_GRACE)
                        && node.is_some_and(|n| rules::could_take(n, pod))
                    {
                        // Its node could take it, and others took the room: no loss.
                        done.push(uid.clone());
                        continue;
                    }
                    let stranded = !watched.bound && (node.is_none() || ready_for.is_some_and(|d| d >= NODE_GRACE));
                    failed || pending_again || stranded || pod.metadata.deletion_timestamp.is_some()
                }
            };
            if lost {
                let owner = self.owners.entry(watched.owner.clone()).or_default();
                owner.losses = owner.losses.saturating_add(1);
                done.push(uid.clone());
            } else if now.duration_since(watched.since) > WATCH_FOR {
                done.push(uid.clone());
            }
        }
        for uid in done {
            self.watched.remove(&uid);
        }
        // Owners with nothing left to remember.
        self.owners.retain(|_, o| {
            o.last_launch
                .is_some_and(|t| now.saturating_duration_since(t) < MAX_DELAY + WATCH_FOR)
        });
    }

    /// The pod watch saw `pod` being deleted (its last state, which a pass may never see): a
    /// loss for its owner if it was disrupted or failed, else (a scale-down, a rollout, a user's
    /// delete) it is only no longer watched.
    pub fn deleting(&mut self, pod: &Pod) {
        if pod.metadata.deletion_timestamp.is_none() {
            return;
        }
        let Some(watched) = pod.metadata.uid.as_ref().and_then(|uid| self.watched.remove(uid)) else {
            return;
        };
        if disrupted(pod) {
            let owner = self.owners.entry(watched.owner).or_default();
            owner.losses = owner.losses.saturating_add(1);
        }
    }

    /// The room planned for the pod on the node launched for it went to other pods (the
    /// scheduler binds any pending pod to a ready node with room): the pod no longer waits for
    /// that node, and it is no loss for its owner (the capacity was used).
    pub fn seat_taken(&mut self, uid: &str) {
        self.watched.remove(uid);
    }

    /// When new capacity may next be launched for `pod`, if that is after `now`: it is waiting
    /// for the node launched for it, or its owner is backing off.
    pub fn blocked_until(&self, pod: &Pod, now: Instant) -> Option<Instant> {
        if let Some(watched) = pod.metadata.uid.as_ref().and_then(|uid| self.watched.get(uid)) {
            if !watched.bound {
                return Some(
                    watched
                        .node_ready
                        .map_or(now + NODE_GRACE, |t| t + NODE_GRACE)
                        .max(now + Duration::from_millis(1)),
                );
            }
        }
        let owner = self.owners.get(&owner_key(pod))?;
        let until = owner.last_launch? + delay(owner.losses)?;
        (until > now).then_some(until)
    }
}

/// The wait after `losses` lost pods: none for 0, then 10 s, 20 s, 40 s, ... up to 5 minutes.
pub fn delay(losses: u32) -> Option<Duration> {
    (losses > 0).then(|| doubling(BASE_DELAY, MAX_DELAY, losses))
}

/// How long the pod has been Ready, from its Ready condition.
fn ready_for(pod: &Pod, now: Timestamp) -> Option<Duration> {
    let ready = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Duration::try_from(now.duration_since(ready.last_transition_time.as_ref()?.0)).ok()
}

/// At most `per_minute` launches in any minute per Provisioner: a bucket of `per_minute`
/// tokens refilled continuously.
#[derive(Debug)]
pub struct LaunchRate {
    per_minute: u32,
    buckets: HashMap<String, (f64, Instant)>,
}

impl LaunchRate {
    /// A limit of `per_minute` launches per Provisioner (0: no launches at all).
    pub fn new(per_minute: u32) -> Self {
        LaunchRate {
            per_minute,
            buckets: HashMap::new(),
        }
    }

    /// Takes one launch for `provisioner` at `now`; false when its minute's worth is used up.
    pub fn take(&mut self, provisioner: &str, now: Instant) -> bool {
        let capacity = f64::from(self.per_minute);
        let (tokens, at) = self.buckets.entry(provisioner.to_string()).or_insert((capacity, now));
        let refill = now.saturating_duration_since(*at).as_secs_f64() * capacity / 60.0;
        *tokens = (*tokens + refill).min(capacity);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests;
