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

use super::binding::rules;

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
                    if watched.node_ready.is_none() && node.is_some_and(|n| rules::is_ready_for_pods(n, &[], &Default::default())) {
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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn failed_passes_are_retried_ever_more_slowly_up_to_half_a_minute() {
        let waits: Vec<u64> = (1..=8).map(|n| pass_retry_delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(pass_retry_delay(0), Duration::from_secs(1));
        assert_eq!(pass_retry_delay(u32::MAX), Duration::from_secs(30));
    }

    fn pod(uid: &str, owner: &str, node: Option<&str>, ready_since: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": true}]},
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": ready_since.map(|t| vec![json!({"type": "Ready", "status": "True", "lastTransitionTime": t})])},
        }))
        .unwrap()
    }

    fn by_uid(pods: &[Pod]) -> HashMap<String, &Pod> {
        pods.iter().map(|p| (p.metadata.uid.clone().unwrap(), p)).collect()
    }

    /// A node, Ready or not, and with a taint the tests' pods do not tolerate (it cannot take
    /// them) or without (it could).
    fn node(name: &str, ready: bool, tainted: bool) -> Node {
        let taints = if tainted {
            json!([{"key": "evicts", "effect": "NoExecute"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"}},
        }))
        .unwrap()
    }

    /// Ready nodes that cannot take the tests' pods.
    fn ready(names: &[&str]) -> Vec<Node> {
        names.iter().map(|n| node(n, true, true)).collect()
    }

    fn by_name(nodes: &[Node]) -> HashMap<String, &Node> {
        nodes.iter().map(|n| (n.metadata.name.clone().unwrap(), n)).collect()
    }

    #[test]
    fn delays_double_from_ten_seconds_to_five_minutes() {
        let got: Vec<Option<u64>> = (0..8).map(|n| delay(n).map(|d| d.as_secs())).collect();
        assert_eq!(got, [None, Some(10), Some(20), Some(40), Some(80), Some(160), Some(300), Some(300)]);
        assert_eq!(delay(u32::MAX), Some(MAX_DELAY));
    }

    #[test]
    fn an_owner_whose_pods_keep_getting_lost_backs_off_and_a_stable_pod_resets_it() {
        let wall = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let t0 = Instant::now();
        let mut b = LaunchBackoff::default();
        // First launch: no back-off before it, none after it until a pod is lost.
        let first = pod("p1", "rs", None, None);
        assert_eq!(b.blocked_until(&first, t0), None);
        b.launched("n1", [(&first, None)], t0);
        assert_eq!(
            b.blocked_until(&pod("other-pod", "rs", None, None), t0),
            None,
            "launching is not losing"
        );
        // Bound, then evicted: gone; the ReplicaSet's new pod waits 10 s after the launch.
        let bound = [pod("p1", "rs", Some("n1"), None)];
        b.observe(&by_uid(&bound), &by_name(&ready(&["n1"])), t0 + Duration::from_secs(3), wall);
        b.observe(&by_uid(&[]), &by_name(&ready(&["n1"])), t0 + Duration::from_secs(5), wall);
        let second = pod("p2", "rs", None, None);
        assert_eq!(b.blocked_until(&second, t0 + Duration::from_secs(5)), Some(t0 + BASE_DELAY));
        assert_eq!(b.blocked_until(&second, t0 + BASE_DELAY), None);
        // A pod of another owner is not held back.
        assert_eq!(b.blocked_until(&pod("q", "other", None, None), t0 + Duration::from_secs(5)), None);
        // Launched again at 10 s, pending again after it was bound: 20 s after that launch.
        let t1 = t0 + BASE_DELAY;
        b.launched("n2", [(&second, None)], t1);
        b.observe(
            &by_uid(&[pod("p2", "rs", Some("n2"), None)]),
            &by_name(&ready(&["n2"])),
            t1 + Duration::from_secs(2),
            wall,
        );
        b.observe(
            &by_uid(&[pod("p2", "rs", None, None)]),
            &by_name(&ready(&["n2"])),
            t1 + Duration::from_secs(4),
            wall,
        );
        assert_eq!(
            b.blocked_until(&second, t1 + Duration::from_secs(4)),
            Some(t1 + Duration::from_secs(20))
        );
        // The third launch's pod runs for a minute: the owner is reset.
        let t2 = t1 + Duration::from_secs(20);
        let third = pod("p3", "rs", None, None);
        b.launched("n3", [(&third, None)], t2);
        let running = [pod("p3", "rs", Some("n3"), Some("2026-12-01T09:58:00Z"))];
        b.observe(&by_uid(&running), &by_name(&ready(&["n3"])), t2 + Duration::from_secs(61), wall);
        assert_eq!(b.blocked_until(&pod("p4", "rs", None, None), t2 + Duration::from_secs(61)), None);
    }

    fn deleting(mut pod: Pod, disruption: Option<&str>) -> Pod {
        pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
        if let Some(reason) = disruption {
            pod.status.get_or_insert_with(Default::default).conditions = Some(vec![serde_json::from_value(
                json!({"type": "DisruptionTarget", "status": "True", "reason": reason}),
            )
            .unwrap()]);
        }
        pod
    }

    #[test]
    fn a_scale_down_is_no_loss_but_a_disruption_is() {
        let wall = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(5);
        // Scaled down (deleted by its ReplicaSet, seen by the pod watch and by a pass): no wait.
        let mut b = LaunchBackoff::default();
        b.launched("n1", [(&pod("p1", "rs", None, None), None)], t0);
        b.deleting(&deleting(pod("p1", "rs", Some("n1"), None), None));
        assert_eq!(b.blocked_until(&pod("p2", "rs", None, None), later), None);
        let mut b = LaunchBackoff::default();
        b.launched("n1", [(&pod("p1", "rs", None, None), None)], t0);
        let scaled_down = [deleting(pod("p1", "rs", Some("n1"), None), None)];
        b.observe(&by_uid(&scaled_down), &by_name(&ready(&["n1"])), later, wall);
        assert_eq!(b.blocked_until(&pod("p2", "rs", None, None), later), None);
        // Deleted by the taint manager, or failed: the owner waits.
        for lost in [
            deleting(pod("p1", "rs", Some("n1"), None), Some("DeletionByTaintManager")),
            deleting(pod("p1", "rs", Some("n1"), None), Some("EvictionByEvictionAPI")),
        ] {
            let mut b = LaunchBackoff::default();
            b.launched("n1", [(&pod("p1", "rs", None, None), None)], t0);
            b.deleting(&lost);
            assert_eq!(b.blocked_until(&pod("p2", "rs", None, None), later), Some(t0 + BASE_DELAY));
            let mut b = LaunchBackoff::default();
            b.launched("n1", [(&pod("p1", "rs", None, None), None)], t0);
            b.observe(&by_uid(std::slice::from_ref(&lost)), &by_name(&ready(&["n1"])), later, wall);
            assert_eq!(b.blocked_until(&pod("p2", "rs", None, None), later), Some(t0 + BASE_DELAY));
        }
        let mut failed = pod("p1", "rs", Some("n1"), None);
        failed.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
        assert!(disrupted(&failed));
        assert!(!disrupted(&pod("p1", "rs", Some("n1"), None)));
    }

    #[test]
    fn a_pod_whose_seat_others_took_waits_no_longer_and_costs_its_owner_nothing() {
        let wall = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let t0 = Instant::now();
        let mut b = LaunchBackoff::default();
        let p = pod("p1", "rs", None, None);
        b.launched("n1", [(&p, None)], t0);
        let pending = [p.clone()];
        b.observe(&by_uid(&pending), &by_name(&ready(&["n1"])), t0 + Duration::from_secs(2), wall);
        assert!(b.blocked_until(&p, t0 + Duration::from_secs(2)).is_some(), "waits for its node");
        b.seat_taken("p1");
        assert_eq!(b.blocked_until(&p, t0 + Duration::from_secs(2)), None);
        // Not a loss: well past the grace, the owner's next pod is not held back either.
        let later = t0 + NODE_GRACE + Duration::from_secs(5);
        b.observe(&by_uid(&pending), &by_name(&ready(&["n1"])), later, wall);
        assert_eq!(b.blocked_until(&pod("p2", "rs", None, None), later), None);
        assert_eq!(b.blocked_until(&p, later), None);
    }

    #[test]
    fn a_pod_its_ready_node_could_take_is_released_after_a_few_seconds_at_no_cost() {
        // A zonal-spread pod: the scheduler filled the node launched for it with other pods, or
        // put the pod's siblings where its zone is now one too many. The node could take it.
        let wall = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let t0 = Instant::now();
        let mut b = LaunchBackoff::default();
        let p = pod("p1", "rs", None, None);
        b.launched("n1", [(&p, None)], t0);
        let pending = [p.clone()];
        let open = [node("n1", true, false)];
        b.observe(&by_uid(&pending), &by_name(&open), t0 + Duration::from_secs(10), wall);
        assert!(
            b.blocked_until(&p, t0 + Duration::from_secs(12)).is_some(),
            "the scheduler gets a few seconds"
        );
        let after = t0 + Duration::from_secs(10) + CONTESTED_GRACE;
        b.observe(&by_uid(&pending), &by_name(&open), after, wall);
        assert_eq!(b.blocked_until(&p, after), None, "placed anew by the next pass");
        assert_eq!(b.blocked_until(&pod("p2", "rs", None, None), after), None, "no loss for the owner");
        assert!(b.owners.get(&owner_key(&p)).is_none_or(|o| o.losses == 0));
        // The same while the node refuses the pod: it waits out the whole grace, and is lost.
        let mut b = LaunchBackoff::default();
        b.launched("n1", [(&p, None)], t0);
        let tainted = [node("n1", true, true)];
        b.observe(&by_uid(&pending), &by_name(&tainted), t0 + Duration::from_secs(10), wall);
        b.observe(&by_uid(&pending), &by_name(&tainted), after, wall);
        assert!(b.blocked_until(&p, after).is_some());
        b.observe(
            &by_uid(&pending),
            &by_name(&tainted),
            t0 + Duration::from_secs(10) + NODE_GRACE,
            wall,
        );
        assert_eq!(b.owners[&owner_key(&p)].losses, 1);
    }

    #[test]
    fn a_pod_waits_for_its_node_and_is_lost_when_that_node_cannot_take_it() {
        let wall = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let t0 = Instant::now();
        let mut b = LaunchBackoff::default();
        let p = pod("p1", "rs", None, None);
        b.launched("n1", [(&p, None)], t0);
        let pending = [p.clone()];
        // The node is launching: the pod waits for it, nothing more is launched for it.
        b.observe(
            &by_uid(&pending),
            &by_name(&[node("n1", false, true)]),
            t0 + Duration::from_secs(5),
            wall,
        );
        assert_eq!(
            b.blocked_until(&p, t0 + Duration::from_secs(5)),
            Some(t0 + Duration::from_secs(5) + NODE_GRACE)
        );
        // Ready at 10 s; the pod is still unbound 30 s later (a taint the node got evicts it):
        // lost, and the owner backs off from the launch.
        b.observe(&by_uid(&pending), &by_name(&ready(&["n1"])), t0 + Duration::from_secs(10), wall);
        assert_eq!(
            b.blocked_until(&p, t0 + Duration::from_secs(20)),
            Some(t0 + Duration::from_secs(40))
        );
        b.observe(&by_uid(&pending), &by_name(&ready(&["n1"])), t0 + Duration::from_secs(40), wall);
        assert_eq!(
            b.blocked_until(&p, t0 + Duration::from_secs(40)),
            None,
            "10 s after the launch have passed"
        );
        assert_eq!(b.owners[&owner_key(&p)].losses, 1);
        // Its node vanished before it was bound (deleted for failing to register): lost too.
        let q = pod("q1", "rs2", None, None);
        b.launched("n2", [(&q, None)], t0);
        b.observe(
            &by_uid(std::slice::from_ref(&q)),
            &HashMap::new(),
            t0 + Duration::from_secs(50),
            wall,
        );
        assert_eq!(b.owners[&owner_key(&q)].losses, 1);
    }

    #[test]
    fn a_pod_still_on_the_deleting_node_it_is_placed_again_from_is_not_placed() {
        // A pod a PodDisruptionBudget keeps on a node being deleted: capacity is launched for it,
        // it stays where it is (Ready for long), and the new node cannot get it.
        let wall = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let t0 = Instant::now();
        let mut b = LaunchBackoff::default();
        let stuck = pod("web", "rs", Some("old"), Some("2026-12-01T08:00:00Z"));
        b.launched("new", [(&stuck, Some("old".to_string()))], t0);
        let nodes = ready(&["old", "new"]);
        let nodes = by_name(&nodes);
        b.observe(&by_uid(std::slice::from_ref(&stuck)), &nodes, t0 + Duration::from_secs(5), wall);
        assert!(
            b.blocked_until(&stuck, t0 + Duration::from_secs(5)).is_some(),
            "waits for the new node"
        );
        b.observe(&by_uid(std::slice::from_ref(&stuck)), &nodes, t0 + Duration::from_secs(40), wall);
        assert_eq!(
            b.owners[&owner_key(&stuck)].losses,
            1,
            "not placed: a loss, so the next launch backs off"
        );
    }

    #[test]
    fn a_pod_that_runs_is_not_a_loss_and_watching_ends() {
        let wall = "2026-12-01T10:00:00Z".parse::<Timestamp>().unwrap();
        let t0 = Instant::now();
        let mut b = LaunchBackoff::default();
        let p = pod("p1", "rs", None, None);
        b.launched("n1", [(&p, None)], t0);
        let running = [pod("p1", "rs", Some("n1"), Some("2026-12-01T09:59:30Z"))];
        for s in 1..20 {
            b.observe(&by_uid(&running), &by_name(&ready(&["n1"])), t0 + Duration::from_secs(s), wall);
        }
        assert_eq!(b.blocked_until(&p, t0 + Duration::from_secs(20)), None);
        b.observe(
            &by_uid(&running),
            &by_name(&ready(&["n1"])),
            t0 + WATCH_FOR + Duration::from_secs(1),
            wall,
        );
        assert!(b.watched.is_empty());
        // Deleted much later: not watched any more, not a loss.
        b.observe(
            &by_uid(&[]),
            &by_name(&ready(&["n1"])),
            t0 + WATCH_FOR + Duration::from_secs(2),
            wall,
        );
        assert_eq!(b.blocked_until(&p, t0 + WATCH_FOR + Duration::from_secs(2)), None);
    }

    #[test]
    fn launch_rate_is_bounded_per_provisioner_and_refills() {
        let t0 = Instant::now();
        let mut rate = LaunchRate::new(3);
        assert!((0..3).all(|_| rate.take("a", t0)));
        assert!(!rate.take("a", t0), "the minute's three are used");
        assert!(rate.take("b", t0), "another Provisioner has its own");
        assert!(!rate.take("a", t0 + Duration::from_secs(19)));
        assert!(rate.take("a", t0 + Duration::from_secs(20)), "one token per 20 s");
        assert!(!LaunchRate::new(0).take("a", t0));
    }
}
