use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

use super::*;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).unwrap()
}

/// A node as karpenter-rs launches it: labels, allocatable, Ready, the price annotation.
fn node(name: &str, instance_type: &str, zone: &str, age_seconds: i64, price: Option<f64>) -> serde_json::Value {
    let created = now() - k8s_openapi::chrono::Duration::seconds(age_seconds);
    let mut annotations = serde_json::Map::new();
    if let Some(price) = price {
        annotations.insert("karpenter-rs.io/price-per-hour".into(), json!(price.to_string()));
        annotations.insert("karpenter-rs.io/priced-capacity-type".into(), json!("on-demand"));
        annotations.insert("karpenter-rs.io/priced-zone".into(), json!(zone));
    }
    json!({
        "metadata": {
            "name": name,
            "creationTimestamp": created.to_rfc3339(),
            "labels": {
                "karpenter.sh/provisioner-name": "service",
                "node.kubernetes.io/instance-type": instance_type,
                "karpenter.sh/capacity-type": "on-demand",
                "topology.kubernetes.io/zone": zone,
            },
            "annotations": annotations,
        },
        "status": {
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "35"},
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    })
}

fn to_node(v: serde_json::Value) -> Node {
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, node: Option<&str>, phase: &str, cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": phase},
    }))
    .unwrap()
}

fn options(sort: SortBy) -> (Vec<String>, SortBy) {
    (vec!["cpu".to_string(), "memory".to_string()], sort)
}

fn view_of(nodes: &[Node], pods: &[Pod], sort: SortBy) -> View {
    let (resources, sort) = options(sort);
    let nodes: Vec<&Node> = nodes.iter().collect();
    let pods: Vec<&Pod> = pods.iter().collect();
    let options = ViewOptions {
        resources: &resources,
        sort,
        selector: "karpenter.sh/provisioner-name",
    };
    view(&nodes, &pods, &options, now(), &NoPrices)
}

fn fixture() -> (Vec<Node>, Vec<Pod>) {
    let nodes = vec![
        to_node(node(
            "ip-10-0-1-20.ap-northeast-2.compute.internal",
            "t3.large",
            "ap-northeast-2a",
            300,
            Some(0.104),
        )),
        to_node(node(
            "ip-10-0-3-41.ap-northeast-2.compute.internal",
            "t3.xlarge",
            "ap-northeast-2c",
            40,
            Some(0.208),
        )),
    ];
    let pods = vec![
        pod(
            "nginx-1",
            Some("ip-10-0-1-20.ap-northeast-2.compute.internal"),
            "Running",
            "500m",
            "1Gi",
        ),
        pod(
            "nginx-2",
            Some("ip-10-0-1-20.ap-northeast-2.compute.internal"),
            "Running",
            "500m",
            "1Gi",
        ),
        pod(
            "nginx-3",
            Some("ip-10-0-3-41.ap-northeast-2.compute.internal"),
            "Pending",
            "1",
            "2Gi",
        ),
        pod(
            "done",
            Some("ip-10-0-3-41.ap-northeast-2.compute.internal"),
            "Succeeded",
            "4",
            "4Gi",
        ),
        pod("waiting", None, "Pending", "100m", "128Mi"),
    ];
    (nodes, pods)
}

#[test]
fn rows_hold_each_nodes_type_price_pods_and_requests() {
    let (nodes, pods) = fixture();
    let v = view_of(&nodes, &pods, SortBy::Creation);
    assert_eq!(v.rows.len(), 2);
    let first = &v.rows[0];
    assert_eq!(first.name, "ip-10-0-1-20.ap-northeast-2.compute.internal", "oldest first");
    assert_eq!(first.instance_type, "t3.large");
    assert_eq!(first.capacity_type, "on-demand");
    assert_eq!(first.zone, "ap-northeast-2a");
    assert_eq!(
        first.price,
        Some(Price {
            usd_per_hour: 0.104,
            estimated: false
        })
    );
    assert_eq!((first.pods, first.max_pods), (2, 35));
    assert_eq!(
        first.usage[0],
        Usage {
            resource: "cpu".into(),
            requested: 1000,
            allocatable: 1930
        }
    );
    assert_eq!(first.usage[1].requested, 2 << 30);
    assert_eq!(first.age_seconds, 300);
    // The finished pod neither counts nor requests.
    assert_eq!(v.rows[1].pods, 1);
    assert_eq!(v.rows[1].usage[0].requested, 1000);

    let t = &v.totals;
    assert_eq!(t.nodes, 2);
    assert!((t.usd_per_hour - 0.312).abs() < 1e-9);
    assert_eq!((t.pods_running, t.pods_bound, t.pods_pending), (2, 3, 1));
    assert_eq!(
        t.usage[0],
        Usage {
            resource: "cpu".into(),
            requested: 2000,
            allocatable: 3860
        }
    );
}

#[test]
fn sorting_by_price_usage_and_name() {
    let (nodes, pods) = fixture();
    let names = |sort| {
        view_of(&nodes, &pods, sort)
            .rows
            .iter()
            .map(|r| r.instance_type.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(SortBy::Creation), ["t3.large", "t3.xlarge"]);
    assert_eq!(names(SortBy::Price), ["t3.xlarge", "t3.large"], "dearest first");
    // t3.large: 1000m of 1930m and 2Gi of 7Gi; t3.xlarge: 1000m and 2Gi of the same.
    assert_eq!(names(SortBy::Usage), ["t3.large", "t3.xlarge"], "ties broken by name");
    let mut more = pods.clone();
    more.push(pod(
        "big",
        Some("ip-10-0-3-41.ap-northeast-2.compute.internal"),
        "Running",
        "800m",
        "1Gi",
    ));
    let v = view_of(&nodes, &more, SortBy::Usage);
    assert_eq!(v.rows[0].instance_type, "t3.xlarge", "most requested first");
    assert_eq!(SortBy::Creation.next().next().next().next(), SortBy::Creation);
}

#[test]
fn status_shows_not_ready_cordoned_and_deleting() {
    let mut v = node("n", "t3.large", "ap-northeast-2a", 10, None);
    v["status"]["conditions"][0]["status"] = json!("False");
    v["spec"] = json!({"unschedulable": true});
    v["metadata"]["deletionTimestamp"] = json!(now().to_rfc3339());
    let view = view_of(&[to_node(v)], &[], SortBy::Creation);
    assert_eq!(view.rows[0].status.text(), "NotReady,Cordoned,Deleting");
    let mut unknown = node("m", "t3.large", "ap-northeast-2a", 10, None);
    unknown["status"]["conditions"] = json!([]);
    assert_eq!(view_of(&[to_node(unknown)], &[], SortBy::Creation).rows[0].status.text(), "Unknown");
}

#[test]
fn a_node_without_the_annotation_is_priced_from_the_catalogue_as_an_estimate() {
    let n = to_node(node("karpenters", "t3.large", "ap-northeast-2a", 10, None));
    let (resources, sort) = options(SortBy::Creation);
    let options = ViewOptions {
        resources: &resources,
        sort,
        selector: "",
    };
    let v = view(&[&n], &[], &options, now(), &SnapshotPrices::default());
    let price = v.rows[0].price.expect("t3.large is in the shipped snapshot for ap-northeast-2");
    assert!(price.estimated);
    assert!(price.usd_per_hour > 0.05 && price.usd_per_hour < 0.2, "{price:?}");
    assert_eq!(v.totals.estimated, 1);
    // Without a catalogue price it has none, and the totals say so.
    let v = view(&[&n], &[], &options, now(), &NoPrices);
    assert_eq!(v.rows[0].price, None);
    assert_eq!(v.totals.unpriced, 1);
    assert!(render_text(&v, 150).contains("(1 without a price)"));
}

#[test]
fn rendered_frame_has_the_header_bars_and_one_line_per_node() {
    let (nodes, pods) = fixture();
    let text = render_text(&view_of(&nodes, &pods, SortBy::Creation), 150);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("karpenter-rs nodes  2 nodes (-l karpenter.sh/provisioner-name)  $0.3120/hour · $227.76/month"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("cpu     ██████████░░░░░░░░░░  52%  2.0/3.9 requested"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("memory  ██████░░░░░░░░░░░░░░  29%  4.0Gi/14.0Gi requested"),
        "{text}"
    );
    assert!(
        lines[3].starts_with("pods    2 running, 3 bound to these nodes, 1 pending    sort: creation (s)  quit: q"),
        "{text}"
    );
    let header = lines.iter().position(|l| l.starts_with("NAME")).expect(&text);
    assert!(
        lines[header].contains("TYPE")
            && lines[header].contains("$/HOUR")
            && lines[header].contains("CPU")
            && lines[header].contains("MEMORY")
            && lines[header].contains("STATUS"),
        "{text}"
    );
    let row = lines[header + 1];
    for part in [
        "ip-10-0-1-20.ap-northeast-2.compute.internal",
        "t3.large",
        "on-demand",
        "ap-northeast-2a",
        "$0.1040",
        "2/35",
        "█████░░░░░  52%",
        "███░░░░░░░  29%",
        "5m",
        "Ready",
    ] {
        assert!(row.contains(part), "{part:?} missing from {row:?}\n{text}");
    }
    assert!(
        lines[header + 2].contains("t3.xlarge") && lines[header + 2].contains("40s"),
        "{text}"
    );
    assert_eq!(lines.len(), header + 3, "{text}");
}

#[test]
fn other_resources_and_an_empty_cluster_render() {
    let v = {
        let resources = vec!["cpu".to_string(), "nvidia.com/gpu".to_string()];
        let options = ViewOptions {
            resources: &resources,
            sort: SortBy::Creation,
            selector: "",
        };
        view(&[], &[], &options, now(), &NoPrices)
    };
    let text = render_text(&v, 120);
    assert!(
        text.starts_with("karpenter-rs nodes  0 nodes (every node)  $0.0000/hour · $0.00/month"),
        "{text}"
    );
    assert!(text.contains("nvidia.com/gpu"), "{text}");
    assert!(text.contains("NVIDIA.COM/GPU"), "{text}");
    let mut with_error = v.clone();
    with_error.error = Some("nodes: connection refused".into());
    assert!(render_text(&with_error, 120).contains("watch: nodes: connection refused"));
}

#[test]
fn ages_and_bars() {
    assert_eq!(age(5), "5s");
    assert_eq!(age(119), "119s");
    assert_eq!(age(300), "5m");
    assert_eq!(age(3 * 3600), "3h");
    assert_eq!(age(5 * 86400), "5d");
    assert_eq!(bar(0.5, 10), "█████░░░░░");
    assert_eq!(bar(1.7, 4), "████");
    assert_eq!(bar(-1.0, 4), "░░░░");
    assert_eq!(bar(f64::NAN, 4), "░░░░");
}
