//! Plans under pod topology spread, pod affinity and pod anti-affinity: how many nodes they take
//! and which pods may share one.

use super::*;

#[test]
fn zonal_spread_over_two_zones_gives_two_nodes() {
    let spread = |n: &str| nginx(n).spread(ZONE_LABEL, 1, "DoNotSchedule", &[("app", "nginx-karpenter")]);
    let plan = simulate(&input(vec![service()], vec![spread("a"), spread("b")]));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let zones: Vec<String> = plan
        .new_nodes
        .iter()
        .map(|n| n.labels.get(ZONE_LABEL).cloned().unwrap_or_default())
        .collect();
    assert_eq!(zones, ["ap-northeast-2a", "ap-northeast-2c"]);
}

#[test]
fn hostname_anti_affinity_gives_one_node_per_pod() {
    let pods: Vec<PodBuilder> = (0..5)
        .map(|i| {
            pod(&format!("web-{i}"))
                .label("app", "web")
                .cpu("100m")
                .anti_affinity(HOSTNAME_LABEL, &[("app", "web")])
        })
        .collect();
    let plan = simulate(&input(vec![provisioner("default").build()], pods));
    assert_eq!(plan.new_nodes.len(), 5);
    assert!(plan.new_nodes.iter().all(|n| n.pods.len() == 1));
}

#[test]
fn anti_affinity_groups_of_different_apps_share_nodes() {
    let pods: Vec<PodBuilder> = ["a", "b"]
        .iter()
        .flat_map(|app| {
            (0..3).map(move |i| {
                pod(&format!("{app}{i}"))
                    .label("app", app)
                    .cpu("100m")
                    .anti_affinity(HOSTNAME_LABEL, &[("app", app)])
            })
        })
        .collect();
    let plan = simulate(&input(vec![provisioner("default").build()], pods));
    let apps: Vec<String> = plan
        .new_nodes
        .iter()
        .map(|n| n.pods.iter().map(|p| &p.name[..1]).collect::<Vec<_>>().join(""))
        .collect();
    assert_eq!(apps, ["ab", "ab", "ab"]);
}

#[test]
fn pods_without_anti_affinity_share_nodes_with_those_that_have_it_unless_selected() {
    let plan = simulate(&input(
        vec![provisioner("default").build()],
        vec![
            pod("web").label("app", "web").anti_affinity(HOSTNAME_LABEL, &[("app", "web")]),
            pod("web-2").label("app", "web").cpu("10m"),
            pod("other").label("app", "other").cpu("10m"),
        ],
    ));
    // web-2 is selected by web's required anti-affinity (inverse direction): separate node.
    assert_eq!(plan.new_nodes.len(), 2, "{:?}", plan.new_nodes);
    let with_web = plan
        .new_nodes
        .iter()
        .find(|n| n.pods.iter().any(|p| p.name == "web"))
        .expect("web placed");
    assert!(!with_web.pods.iter().any(|p| p.name == "web-2"));
}

#[test]
fn pod_affinity_follows_existing_pods_into_their_zone() {
    let mut db = node("db-node", "1", "1Gi", 10);
    db.labels.insert(ZONE_LABEL.into(), "ap-northeast-2b".into());
    db.allocatable = Resources::zero();
    db.pods = vec![pod("db-0").label("app", "db").build()].into_iter().map(Arc::new).collect();
    let mut inp = input(
        vec![provisioner("default").build()],
        vec![pod("api").pod_affinity(ZONE_LABEL, &[("app", "db")])],
    );
    inp.nodes = vec![db];
    let plan = simulate(&inp);
    assert_eq!(
        plan.new_nodes[0].labels.get(ZONE_LABEL).map(String::as_str),
        Some("ap-northeast-2b")
    );
}

#[test]
fn pod_affinity_namespace_selector_matches_namespaces_by_their_labels() {
    let db_node = |name: &str, zone: &str, namespace: &str| {
        let mut n = node(name, "1", "1Gi", 10);
        n.labels.insert(ZONE_LABEL.into(), zone.into());
        n.allocatable = Resources::zero();
        n.pods = vec![pod(&format!("db-{namespace}")).namespace(namespace).label("app", "db").build()]
            .into_iter()
            .map(Arc::new)
            .collect();
        n
    };
    let mut inp = input(
        vec![provisioner("default").build()],
        vec![pod("api")
            .namespace("shop")
            .pod_affinity_in_namespaces(ZONE_LABEL, &[("app", "db")], &[("team", "data")])],
    );
    inp.nodes = vec![
        db_node("scratch-node", "ap-northeast-2a", "scratch"),
        db_node("data-node", "ap-northeast-2c", "data"),
    ];
    inp.namespace_labels = [
        ("data".to_string(), [("team".to_string(), "data".to_string())].into()),
        ("scratch".to_string(), [("team".to_string(), "scratch".to_string())].into()),
        ("shop".to_string(), BTreeMap::new()),
    ]
    .into();
    let plan = simulate(&inp);
    assert_eq!(
        plan.new_nodes[0].labels.get(ZONE_LABEL).map(String::as_str),
        Some("ap-northeast-2c"),
        "the zone of the db pod in the namespace labelled team=data"
    );
    // With no namespace labelled team=data, no pod matches and the pod cannot be placed.
    inp.namespace_labels.remove("data");
    let plan = simulate(&inp);
    assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
    assert_eq!(plan.unschedulable.len(), 1);
}

#[test]
fn running_pods_anti_affinity_keeps_selected_pods_out_of_their_zone() {
    let mut n = node("n-a", "1", "1Gi", 10);
    n.labels.insert(ZONE_LABEL.into(), "ap-northeast-2a".into());
    n.allocatable = Resources::zero();
    n.pods = vec![pod("loner").anti_affinity(ZONE_LABEL, &[("app", "web")]).build()]
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut inp = input(
        vec![provisioner("default")
            .requirement(ZONE_LABEL, "In", &["ap-northeast-2a", "ap-northeast-2b"])
            .build()],
        vec![pod("web").label("app", "web")],
    );
    inp.nodes = vec![n];
    let plan = simulate(&inp);
    let zone = plan.new_nodes[0].requirements.get(ZONE_LABEL).map(ToString::to_string);
    assert_eq!(zone.as_deref(), Some("In [ap-northeast-2b]"));
}

#[test]
fn a_pod_in_another_namespace_is_not_repelled() {
    let plan = simulate(&input(
        vec![provisioner("default").build()],
        vec![
            pod("web").label("app", "web").anti_affinity(HOSTNAME_LABEL, &[("app", "web")]),
            pod("web-other-ns").namespace("other").label("app", "web"),
        ],
    ));
    assert_eq!(plan.new_nodes.len(), 1, "{:?}", plan.new_nodes);
}
