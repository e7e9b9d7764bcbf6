use super::*;
use crate::apis::v1alpha5::labels::INITIALIZED_LABEL;
use serde_json::json;

const NOMINATION: i64 = 20;

fn at(seconds: i64) -> Timestamp {
    "2023-06-01T12:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_secs(seconds)
}

fn node(name: &str, created: i64) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {PROVISIONER_NAME_LABEL: "default", INITIALIZED_LABEL: "true"}, "creationTimestamp": at(created).to_string()},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn annotated(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    n
}

fn pod(name: &str, extra: serde_json::Value) -> Arc<Pod> {
    let mut value = json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": []}, "status": {"phase": "Running"}});
    if let (Some(v), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        for (k, e) in extra {
            let entry = v.entry(k.clone()).or_insert(json!({}));
            if let (Some(o), Some(e)) = (entry.as_object_mut(), e.as_object()) {
                o.extend(e.clone());
            }
        }
    }
    Arc::new(serde_json::from_value(value).unwrap())
}

fn decide(n: &Node, pods: &[Arc<Pod>], ttl: Option<i64>, now: i64) -> Emptiness {
    emptiness(n, pods, ttl, SignedDuration::from_secs(NOMINATION), at(now))
}

#[test]
fn a_replacement_deleted_before_it_is_ready_ends_the_wait_at_once() {
    let not_ready: Node = serde_json::from_value(json!({"metadata": {"name": "r2"}})).unwrap();
    let ready = node("r1", 0);
    let is_ready = |n: &Node| n.metadata.name.as_deref() == Some("r1");
    let mut seen = [false, false];
    // Not in the view yet (just created): wait.
    assert_eq!(replacements(&[Some(&ready), None], &mut seen, is_ready), Replacements::Waiting);
    assert_eq!(
        replacements(&[Some(&ready), Some(&not_ready)], &mut seen, is_ready),
        Replacements::Waiting
    );
    // Seen, then gone from the view: it will never be ready.
    assert_eq!(replacements(&[Some(&ready), None], &mut seen, is_ready), Replacements::Gone(1));
    // Being deleted counts as gone too.
    let mut deleting = not_ready.clone();
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(5)));
    assert_eq!(
        replacements(&[Some(&ready), Some(&deleting)], &mut [false, false], is_ready),
        Replacements::Gone(1)
    );
    assert_eq!(replacements(&[Some(&ready)], &mut [false], is_ready), Replacements::Done);
}

#[test]
fn marks_an_empty_node_then_deletes_it_once_empty_for_the_ttl() {
    let n = node("n1", 0);
    assert_eq!(decide(&n, &[], Some(30), 100), Emptiness::Mark);
    let marked = annotated(n, EMPTINESS_TIMESTAMP_ANNOTATION, &emptiness_timestamp(at(100)));
    assert_eq!(decide(&marked, &[], Some(30), 110), Emptiness::Wait { until: at(130) });
    assert_eq!(decide(&marked, &[], Some(30), 130), Emptiness::Delete);
}

#[test]
fn daemonset_mirror_and_terminal_pods_leave_a_node_empty() {
    let pods = [
        pod(
            "ds",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}}),
        ),
        pod("static", json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})),
        pod("job", json!({"status": {"phase": "Succeeded"}})),
    ];
    assert_eq!(decide(&node("n1", 0), &pods, Some(30), 100), Emptiness::Mark);
}

#[test]
fn a_pod_that_arrives_removes_the_timestamp() {
    let marked = annotated(node("n1", 0), EMPTINESS_TIMESTAMP_ANNOTATION, &emptiness_timestamp(at(100)));
    assert_eq!(decide(&marked, &[pod("web", json!({}))], Some(30), 200), Emptiness::Unmark);
    assert_eq!(decide(&node("n1", 0), &[pod("web", json!({}))], Some(30), 200), Emptiness::Occupied);
}

#[test]
fn a_terminating_pod_still_occupies_its_node() {
    let leaving = pod("web", json!({"metadata": {"deletionTimestamp": at(90).to_string()}}));
    assert_eq!(decide(&node("n1", 0), &[leaving], Some(30), 100), Emptiness::Occupied);
}

#[test]
fn a_do_not_evict_pod_keeps_the_node_from_being_empty() {
    let pinned = pod("pinned", json!({"metadata": {"annotations": {DO_NOT_EVICT_ANNOTATION: "true"}}}));
    assert_eq!(decide(&node("n1", 0), &[pinned], Some(0), 100), Emptiness::Occupied);
}

#[test]
fn ttl_zero_deletes_an_empty_node_at_once() {
    assert_eq!(decide(&node("n1", 0), &[], Some(0), 100), Emptiness::Delete);
}

#[test]
fn leaves_nodes_without_ttl_deleting_unready_foreign_or_just_launched_alone() {
    assert_eq!(decide(&node("n1", 0), &[], None, 100), Emptiness::Ignore);
    let mut deleting = node("n1", 0);
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(50)));
    assert_eq!(decide(&deleting, &[], Some(30), 100), Emptiness::Ignore);
    let mut unready = node("n1", 0);
    unready.status = None;
    assert_eq!(decide(&unready, &[], Some(30), 100), Emptiness::Ignore);
    let mut foreign = node("n1", 0);
    foreign.metadata.labels = None;
    assert_eq!(decide(&foreign, &[], Some(30), 100), Emptiness::Ignore);
    assert_eq!(decide(&node("n1", 90), &[], Some(0), 100), Emptiness::Ignore, "launched 10 s ago");
}

#[test]
fn a_node_that_never_initialised_is_never_empty() {
    // Launched a minute ago, its kubelet never came up: in flight, not empty.
    let mut launched = node("n1", 0);
    launched.metadata.labels = Some([(PROVISIONER_NAME_LABEL.to_string(), "default".to_string())].into());
    launched.status = None;
    assert_eq!(decide(&launched, &[], Some(0), 60), Emptiness::Ignore);
    assert_eq!(decide(&launched, &[], Some(30), 600), Emptiness::Ignore);
    // Ready, but not yet labelled initialised (a startup taint is left, say).
    launched.status = node("n1", 0).status;
    assert_eq!(decide(&launched, &[], Some(0), 600), Emptiness::Ignore);
}

#[test]
fn an_unreadable_timestamp_counts_as_expired() {
    let marked = annotated(node("n1", 0), EMPTINESS_TIMESTAMP_ANNOTATION, "yesterday");
    assert_eq!(decide(&marked, &[], Some(30), 100), Emptiness::Delete);
}

#[test]
fn node_selectors_select_by_existence_equality_and_inequality() {
    let labels: std::collections::BTreeMap<String, String> = [("karpenter.sh/provisioner-name", "a"), ("suite", "x")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    assert!(selects("", &labels));
    assert!(selects("karpenter.sh/provisioner-name", &labels));
    assert!(selects("karpenter.sh/provisioner-name,suite=x", &labels));
    assert!(selects("suite==x, !other", &labels));
    assert!(!selects("suite=y", &labels));
    assert!(!selects("suite!=x", &labels));
    assert!(!selects("!suite", &labels));
    assert!(!selects("missing", &labels));
}

#[test]
fn formats_the_timestamp_as_rfc3339_utc_seconds() {
    assert_eq!(emptiness_timestamp(at(0)), "2023-06-01T12:00:00Z");
}

fn candidate<'a>(n: &'a Node, pods: &'a [Arc<Pod>], ttl: Option<i64>) -> Candidate<'a> {
    Candidate {
        node: n,
        pods,
        ttl_seconds_until_expired: ttl,
    }
}

#[test]
fn expires_the_node_that_expired_first_and_only_one() {
    let (old, older, young) = (node("old", 10), node("older", 0), node("young", 500));
    let outcome = expiration(
        &[
            candidate(&old, &[], Some(100)),
            candidate(&older, &[], Some(100)),
            candidate(&young, &[], Some(100)),
        ],
        &[],
        at(200),
    );
    assert_eq!(
        outcome,
        Expiration {
            expire: Some("older".into()),
            blocked: vec![]
        }
    );
}

#[test]
fn does_not_expire_before_the_ttl_or_without_one() {
    let n = node("n1", 0);
    assert_eq!(expiration(&[candidate(&n, &[], Some(100))], &[], at(100)).expire, None);
    assert_eq!(expiration(&[candidate(&n, &[], None)], &[], at(100_000)).expire, None);
}

#[test]
fn a_ttl_past_the_end_of_the_calendar_never_runs_out_and_never_panics() {
    // Provisioners that bypassed the webhook's bound (it refuses more than 100 years).
    let n = node("n1", 0);
    for ttl in [9_000_000_000_000, i64::MAX / 1000 + 1, i64::MAX] {
        assert_eq!(expires_at(&n, Some(ttl)), None, "{ttl}");
        assert_eq!(expiration(&[candidate(&n, &[], Some(ttl))], &[], at(100)).expire, None);
        let marked = annotated(n.clone(), EMPTINESS_TIMESTAMP_ANNOTATION, &emptiness_timestamp(at(100)));
        assert_eq!(decide(&marked, &[], Some(ttl), 200), Emptiness::Ignore, "{ttl}");
    }
    assert_eq!(expires_at(&n, Some(3_153_600_000)), Some(at(3_153_600_000)));
}

#[test]
fn a_do_not_evict_pod_blocks_expiration_of_its_node_only() {
    let (a, b) = (node("a", 0), node("b", 10));
    let pinned = [pod(
        "pinned",
        json!({"metadata": {"annotations": {DO_NOT_EVICT_ANNOTATION: "true"}}}),
    )];
    let outcome = expiration(&[candidate(&a, &pinned, Some(100)), candidate(&b, &[], Some(100))], &[], at(200));
    assert_eq!(outcome.expire.as_deref(), Some("b"));
    assert_eq!(outcome.blocked, vec![("a".to_string(), "do-not-evict pod ns/pinned".to_string())]);
    let alias = [pod("p", json!({"metadata": {"annotations": {DO_NOT_DISRUPT_ANNOTATION: "true"}}}))];
    assert!(do_not_evict(&alias).is_some(), "Karpenter v0.31's alias");
    let not_true = [pod("p", json!({"metadata": {"annotations": {DO_NOT_EVICT_ANNOTATION: "false"}}}))];
    assert_eq!(
        expiration(&[candidate(&a, &not_true, Some(100))], &[], at(200)).expire.as_deref(),
        Some("a")
    );
}

fn deleted(mut n: Node, since: i64) -> Node {
    n.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(since)));
    n
}

#[test]
fn waits_only_for_deletions_of_its_own_commands_and_only_until_the_timeout() {
    let ours = deleted(annotated(node("ours", 0), VOLUNTARY_DISRUPTION_ANNOTATION, "expired"), 150);
    let theirs = deleted(node("theirs", 0), 100);
    let stuck = deleted(annotated(node("stuck", 0), VOLUNTARY_DISRUPTION_ANNOTATION, "expired"), 0);
    let live = node("live", 0);
    let timeout = SignedDuration::from_secs(120);
    assert_eq!(
        deletions([&ours, &theirs, &stuck, &live], timeout, at(200)),
        Deletions {
            awaited: vec!["ours".into()],
            overdue: vec!["stuck".into()],
        }
    );
    // Past the timeout the pass stops waiting for ours too.
    assert_eq!(
        deletions([&ours], timeout, at(270)),
        Deletions {
            awaited: vec![],
            overdue: vec!["ours".into()],
        }
    );
    assert_eq!(deletions([&theirs, &live], timeout, at(200)), Deletions::default());
    assert_eq!(deletions([&stuck], SignedDuration::MAX, at(1_000_000)).awaited, ["stuck"]);
}

#[test]
fn expiration_skips_a_node_someone_else_is_deleting_and_picks_the_next() {
    let (a, b) = (node("a", 0), deleted(node("b", 0), 150));
    assert_eq!(
        expiration(&[candidate(&a, &[], Some(100)), candidate(&b, &[], Some(50))], &[], at(200))
            .expire
            .as_deref(),
        Some("a")
    );
}

fn pdb(name: &str, selector: serde_json::Value, allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"minAvailable": 1, "selector": selector},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    }))
    .unwrap()
}

#[test]
fn a_pdb_allowing_no_disruption_blocks_expiration_of_the_nodes_it_covers() {
    let (a, b) = (node("a", 0), node("b", 10));
    let web = [pod("web-1", json!({"metadata": {"labels": {"app": "web"}}}))];
    let db = [pod("db-1", json!({"metadata": {"labels": {"app": "db"}}}))];
    let pdbs = [pdb("web", json!({"matchLabels": {"app": "web"}}), 0)];
    let outcome = expiration(&[candidate(&a, &web, Some(100)), candidate(&b, &db, Some(100))], &pdbs, at(200));
    assert_eq!(outcome.expire.as_deref(), Some("b"));
    assert_eq!(
        outcome.blocked,
        vec![(
            "a".to_string(),
            "PodDisruptionBudget ns/web allows no disruption of pod ns/web-1".to_string()
        )]
    );
    let allowing = [pdb("web", json!({"matchLabels": {"app": "web"}}), 1)];
    assert_eq!(
        expiration(&[candidate(&a, &web, Some(100))], &allowing, at(200)).expire.as_deref(),
        Some("a")
    );
}

#[test]
fn a_pdb_counts_only_for_live_pods_it_selects_in_its_namespace() {
    let pdbs = [pdb("web", json!({"matchLabels": {"app": "web"}}), 0)];
    let elsewhere = pod("web-1", json!({"metadata": {"namespace": "other", "labels": {"app": "web"}}}));
    let finished = pod(
        "web-2",
        json!({"metadata": {"labels": {"app": "web"}}, "status": {"phase": "Succeeded"}}),
    );
    let unlabelled = pod("web-3", json!({}));
    assert_eq!(blocking_pdb(&[elsewhere, finished, unlabelled], &pdbs), None);
    let everything = [pdb("all", json!({}), 0)];
    assert_eq!(
        blocking_pdb(&[pod("x", json!({}))], &everything),
        Some(("ns/all".to_string(), "ns/x".to_string()))
    );
}
