use super::*;
use crate::apis::keys::LAST_APPLIED_ANNOTATION;
use crate::controllers::clock::FakeClock;
use kube::runtime::watcher;

/// Several tasks waiting for the view at once are all woken when the first lists are in
/// (kube's own wait wakes only the last of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_waiting_for_the_view_is_woken() {
    let (nodes, mut nodes_writer) = reflector::store::<Node>();
    let (pods, mut pods_writer) = reflector::store::<Pod>();
    let synced = Synced::follow(vec![first_list(&nodes), first_list(&pods)]);
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let synced = synced.clone();
            tokio::spawn(async move { synced.wait().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    nodes_writer.apply_watcher_event(&watcher::Event::InitDone);
    pods_writer.apply_watcher_event(&watcher::Event::InitDone);
    for waiter in waiters {
        let woken = tokio::time::timeout(Duration::from_secs(10), waiter).await;
        assert!(matches!(woken, Ok(Ok(Ok(())))), "{woken:?}");
    }
}

fn stored(conditions: serde_json::Value) -> kube::api::DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
        "metadata": {"name": "p", "generation": 3},
        "spec": {},
        "status": {"conditions": conditions},
    }))
    .unwrap()
}

/// An unreadable object is marked with the field and why, once; a fixed one is marked
/// readable; one that was always fine is never written; other conditions stay.
#[test]
fn the_validation_condition_follows_whether_the_object_can_be_read() {
    let t0: jiff::Timestamp = "2026-12-05T10:00:00Z".parse().unwrap();
    let t1 = t0 + jiff::SignedDuration::from_mins(5);
    let other =
        serde_json::json!({"type": "Other", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    assert_eq!(
        validation_conditions(&stored(serde_json::json!([other.clone()])), None, t0),
        None,
        "always fine: no write"
    );

    let marked = validation_conditions(&stored(serde_json::json!([other.clone()])), Some("spec.weight: invalid type"), t0).unwrap();
    assert_eq!(marked.len(), 2);
    assert_eq!(marked[0], other, "other conditions are kept");
    let condition = &marked[1];
    assert_eq!(condition["type"], "ValidationSucceeded");
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "InvalidObject");
    assert!(
        condition["message"].as_str().unwrap().contains("spec.weight: invalid type"),
        "{condition}"
    );
    assert_eq!(condition["lastTransitionTime"], "2026-12-05T10:00:00Z");
    assert_eq!(condition["observedGeneration"], 3);

    let again = stored(serde_json::Value::Array(marked.clone()));
    assert_eq!(
        validation_conditions(&again, Some("spec.weight: invalid type"), t1),
        None,
        "the same problem: no write (no loop on our own patch)"
    );
    let other_problem = validation_conditions(&again, Some("spec.limits: invalid type"), t1).unwrap();
    assert_eq!(
        other_problem[1]["lastTransitionTime"], "2026-12-05T10:00:00Z",
        "still False: the transition time stays"
    );

    let fixed = validation_conditions(&again, None, t1).unwrap();
    assert_eq!(fixed[1]["status"], "True");
    assert_eq!(fixed[1]["reason"], "Valid");
    assert_eq!(fixed[1]["lastTransitionTime"], "2026-12-05T10:05:00Z");
    assert_eq!(
        validation_conditions(&stored(serde_json::Value::Array(fixed)), None, t1),
        None,
        "readable and marked so: no write"
    );
}

/// A store whose writer is gone before its first list makes the view report closed.
#[tokio::test]
async fn a_writer_dropped_before_its_first_list_closes_the_view() {
    let (nodes, nodes_writer) = reflector::store::<Node>();
    let synced = Synced::follow(vec![first_list(&nodes)]);
    drop(nodes_writer);
    assert!(tokio::time::timeout(Duration::from_secs(10), synced.wait()).await.unwrap().is_err());
}

/// A new term's hook replaces the last term's of the same controller: pod changes reach only
/// the current one, and every controller's current one.
#[test]
fn the_latest_pod_hook_of_each_controller_is_the_one_called() {
    use std::sync::atomic::AtomicU32;
    let hooks = PodHooks::default();
    hooks.call(&Pod::default());
    let (first, second, other) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let counter = |c: &Arc<AtomicU32>| {
        let c = c.clone();
        Box::new(move |_: &Pod| {
            c.fetch_add(1, Ordering::Relaxed);
        }) as PodHook
    };
    hooks.set("provisioning", counter(&first));
    hooks.call(&Pod::default());
    hooks.set("provisioning", counter(&second));
    hooks.set("status", counter(&other));
    hooks.call(&Pod::default());
    hooks.call(&Pod::default());
    let count = |c: &Arc<AtomicU32>| c.load(Ordering::Relaxed);
    assert_eq!((count(&first), count(&second), count(&other)), (1, 2, 2));
}

#[test]
fn an_object_that_does_not_decode_is_left_out_named_and_the_others_go_on() {
    let raw = |value: serde_json::Value| -> kube::api::DynamicObject { serde_json::from_value(value).unwrap() };
    let good = raw(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
        "metadata": {"name": "good"}, "spec": {"ttlSecondsAfterEmpty": 30, "futureField": true}
    }));
    // What Karpenter's CRD could hold and ours cannot read: a weight that is not a number.
    let bad = raw(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
        "metadata": {"name": "bad"}, "spec": {"weight": "heavy"}
    }));
    let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::InitApply(good.clone()));
    assert!(matches!(event, Some(watcher::Event::InitApply(p)) if p.spec.ttl_seconds_after_empty == Some(30)));
    assert!(unusable.is_none());
    let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::InitApply(bad.clone()));
    assert!(event.is_none(), "left out of the list");
    let (object, why) = unusable.expect("named");
    assert_eq!(object.metadata.name.as_deref(), Some("bad"));
    assert!(why.starts_with("spec.weight: invalid type"), "{why}");
    // An update that breaks a good object takes it out of the store; deleting it works too.
    let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::Apply(bad.clone()));
    assert!(matches!(event, Some(watcher::Event::Delete(p)) if p.metadata.name.as_deref() == Some("bad")));
    assert!(unusable.is_some());
    let (event, unusable) = tolerant_event::<Provisioner>(watcher::Event::Delete(bad));
    assert!(matches!(event, Some(watcher::Event::Delete(p)) if p.metadata.name.as_deref() == Some("bad")));
    assert!(unusable.is_none());
    assert!(matches!(
        tolerant_event::<Provisioner>(watcher::Event::Init).0,
        Some(watcher::Event::Init)
    ));
    assert!(matches!(
        tolerant_event::<Provisioner>(watcher::Event::InitDone).0,
        Some(watcher::Event::InitDone)
    ));
    // A store fed these holds the good object only.
    let (reader, mut writer) = reflector::store::<Provisioner>();
    for event in [watcher::Event::Init, watcher::Event::InitApply(good), watcher::Event::InitDone] {
        if let (Some(event), _) = tolerant_event::<Provisioner>(event) {
            writer.apply_watcher_event(&event);
        }
    }
    let names: Vec<String> = reader.state().iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert_eq!(names, ["good"]);
}

#[test]
fn the_view_settles_a_while_after_the_last_watch_failure() {
    let now = Instant::now();
    assert_eq!(staleness(None, now), None);
    let why = staleness(Some(("Node", now - Duration::from_secs(3))), now).unwrap();
    assert!(why.contains("Node watch failed 3s ago"), "{why}");
    assert!(staleness(Some(("Pod", now - SETTLE_AFTER_WATCH_ERROR + Duration::from_millis(1))), now).is_some());
    assert_eq!(staleness(Some(("Pod", now - SETTLE_AFTER_WATCH_ERROR)), now), None);
    // A reconnecting watch retries at most 6 s apart, well inside the window.
    let mut backoff = watch_backoff();
    let delays: Vec<Duration> = (0..20).filter_map(|_| backoff.next()).collect();
    assert_eq!(delays.len(), 20);
    assert!(delays.iter().all(|d| *d <= Duration::from_secs(6)), "{delays:?}");
    assert!(delays.iter().all(|d| *d < SETTLE_AFTER_WATCH_ERROR));
}

#[test]
fn cached_objects_drop_managed_fields_and_the_last_applied_copy_only() {
    let mut pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "web",
            "annotations": {LAST_APPLIED_ANNOTATION: "{\"big\": true}", "team": "a"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
        },
        "spec": {"containers": [{"name": "app"}], "nodeName": "n1"}
    }))
    .unwrap();
    slim(&mut pod);
    assert_eq!(pod.metadata.managed_fields, None);
    assert_eq!(
        pod.metadata.annotations,
        Some(std::collections::BTreeMap::from([("team".to_string(), "a".to_string())]))
    );
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
}

/// A node of the given name and nothing else.
fn named(name: &str) -> Arc<Node> {
    Arc::new(Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The view's clock, not the system's, decides when a nomination lapses: a fake clock moved
/// past the period ends it at once, and one held still keeps it however long the test takes.
#[test]
fn a_nomination_lapses_when_the_views_clock_passes_its_period() {
    let clock = Arc::new(FakeClock::new("2026-12-06T10:00:00Z".parse().unwrap(), Instant::now()));
    let view = Cluster::detached();
    view.set_clock(clock.clone());
    let nodes = [named("a"), named("b")];
    let nominated = |view: &Cluster| -> Vec<bool> { view.view_of(&nodes, &[]).iter().map(|n| n.nominated).collect() };

    view.nominate("a", Duration::from_secs(20));
    assert_eq!(nominated(&view), [true, false]);
    clock.advance(Duration::from_secs(19));
    assert_eq!(nominated(&view), [true, false], "within the period");
    clock.advance(Duration::from_secs(2));
    assert_eq!(nominated(&view), [false, false], "past the period");
}

/// The view's clock decides when it has settled after a watch failure.
#[test]
fn the_view_settles_when_its_clock_passes_the_settling_time() {
    let clock = Arc::new(FakeClock::new("2026-12-06T10:00:00Z".parse().unwrap(), Instant::now()));
    let view = Cluster::detached();
    view.set_clock(clock.clone());
    *view.last_watch_error.lock().unwrap() = Some(WatchError {
        kind: "Pod".into(),
        at: clock.instant(),
    });
    assert!(view.stale().is_some_and(|why| why.contains("Pod")));
    clock.advance(SETTLE_AFTER_WATCH_ERROR - Duration::from_secs(1));
    assert!(view.stale().is_some(), "still within the settling time");
    clock.advance(Duration::from_secs(1));
    assert_eq!(view.stale(), None);
}
