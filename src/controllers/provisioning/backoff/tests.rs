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
