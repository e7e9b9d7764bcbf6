use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

use super::*;

mod why;

fn now() -> Timestamp {
    "2026-12-02T12:00:00Z".parse::<Timestamp>().unwrap()
}

/// A node as karpenter-rs launches it: labels, allocatable, Ready, the price annotation.
fn node(name: &str, instance_type: &str, zone: &str, age_seconds: i64, price: Option<f64>) -> serde_json::Value {
    let created = now() - jiff::SignedDuration::from_secs(age_seconds);
    let mut annotations = serde_json::Map::new();
    if let Some(price) = price {
        annotations.insert("karpenter-rs.io/price-per-hour".into(), json!(price.to_string()));
        annotations.insert("karpenter-rs.io/priced-capacity-type".into(), json!("on-demand"));
        annotations.insert("karpenter-rs.io/priced-zone".into(), json!(zone));
    }
    json!({
        "metadata": {
            "name": name,
            "creationTimestamp": created.to_string(),
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

/// The view of one node and no pods, every node selected, unannotated nodes priced by `prices`.
fn priced(node: &Node, prices: &dyn PriceBook) -> View {
    let resources = vec!["cpu".to_string(), "memory".to_string()];
    let options = ViewOptions {
        resources: &resources,
        sort: Sort::by(SortBy::Creation),
        selector: "",
        extra_labels: &[],
    };
    view(&[node], &[], &options, now(), prices)
}

fn view_of(nodes: &[Node], pods: &[Pod], sort: SortBy) -> View {
    view_sorted(nodes, pods, Sort::by(sort), &[])
}

fn view_sorted(nodes: &[Node], pods: &[Pod], sort: Sort, extra_labels: &[String]) -> View {
    let resources = vec!["cpu".to_string(), "memory".to_string()];
    let nodes: Vec<&Node> = nodes.iter().collect();
    let pods: Vec<&Pod> = pods.iter().collect();
    let options = ViewOptions {
        resources: &resources,
        sort,
        selector: "karpenter.sh/provisioner-name",
        extra_labels,
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
    v["metadata"]["deletionTimestamp"] = json!(now().to_string());
    let view = view_of(&[to_node(v)], &[], SortBy::Creation);
    assert_eq!(view.rows[0].status.text(), "NotReady,Cordoned,Deleting");
    let mut unknown = node("m", "t3.large", "ap-northeast-2a", 10, None);
    unknown["status"]["conditions"] = json!([]);
    assert_eq!(view_of(&[to_node(unknown)], &[], SortBy::Creation).rows[0].status.text(), "Unknown");
}

#[test]
fn a_node_without_the_annotation_is_priced_from_the_catalogue_as_an_estimate() {
    let n = to_node(node("karpenters", "t3.large", "ap-northeast-2a", 10, None));
    let v = priced(&n, &SnapshotPrices::default());
    let price = v.rows[0].price.expect("t3.large is in the shipped snapshot for ap-northeast-2");
    assert!(price.estimated);
    assert!(price.usd_per_hour > 0.05 && price.usd_per_hour < 0.2, "{price:?}");
    assert_eq!(v.totals.estimated, 1);
    // Without a catalogue price it has none, and the totals say so.
    let v = priced(&n, &NoPrices);
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
        lines[3].starts_with("pods    2 running, 3 bound to these nodes, 1 pending    sort: creation (s)  select: ↑↓  explain: Enter  quit: q"),
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
            sort: Sort::by(SortBy::Creation),
            selector: "",
            extra_labels: &[],
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

#[test]
fn sort_flag_takes_a_key_a_label_and_a_direction() {
    let zone = || SortBy::Label("topology.kubernetes.io/zone".into());
    for (value, by, descending) in [
        ("creation", SortBy::Creation, false),
        ("price", SortBy::Price, true),
        ("price=asc", SortBy::Price, false),
        ("creation=dsc", SortBy::Creation, true),
        ("topology.kubernetes.io/zone=desc", zone(), true),
        ("topology.kubernetes.io/zone", zone(), false),
    ] {
        assert_eq!(Sort::parse(value), Ok(Sort { by, descending }), "{value}");
    }
    assert_eq!(Sort::parse("nodeType").map(|s| s.text()), Ok("nodeType".to_string()));
    assert_eq!(Sort::parse("usage=asc").map(|s| s.text()), Ok("usage=asc".to_string()));
    for bad in ["", "=asc", "price=up", "not a label", "-bad/x", "a/b/c"] {
        let error = Sort::parse(bad).expect_err(bad);
        assert!(error.contains("label key") || error.contains("direction"), "{bad}: {error}");
    }
    assert_eq!(Sort::by(SortBy::Label("x".into())).next(), Sort::by(SortBy::Creation));
    assert_eq!(Sort::parse("name=dsc").unwrap().next(), Sort::by(SortBy::Creation));
}

/// Three nodes with a `team` label on two of them, `rank` values that sort differently as text
/// and as numbers.
fn labelled_nodes() -> Vec<Node> {
    [("node-10", Some("b"), "10"), ("node-9", None, "9"), ("node-2", Some("a"), "100")]
        .into_iter()
        .enumerate()
        .map(|(i, (name, team, rank))| {
            let mut n = node(name, "t3.large", "ap-northeast-2a", 100 - i as i64, None);
            if let Some(team) = team {
                n["metadata"]["labels"]["team"] = json!(team);
            }
            n["metadata"]["labels"]["rank"] = json!(rank);
            to_node(n)
        })
        .collect()
}

#[test]
fn sorting_by_a_label_puts_nodes_without_it_last_and_compares_numbers_as_numbers() {
    let nodes = labelled_nodes();
    let names = |sort: &str| {
        view_sorted(&nodes, &[], Sort::parse(sort).unwrap(), &[])
            .rows
            .iter()
            .map(|r| r.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names("team"), ["node-2", "node-10", "node-9"]);
    assert_eq!(
        names("team=dsc"),
        ["node-10", "node-2", "node-9"],
        "without the label: last either way"
    );
    assert_eq!(names("rank"), ["node-9", "node-10", "node-2"], "9 < 10 < 100");
    assert_eq!(names("missing"), ["node-2", "node-9", "node-10"], "by name when no node has it");
    assert_eq!(names("name"), ["node-2", "node-9", "node-10"]);
    assert_eq!(names("name=dsc"), ["node-10", "node-9", "node-2"]);
    assert_eq!(names("creation"), ["node-10", "node-9", "node-2"], "oldest first");
    assert_eq!(names("creation=dsc"), ["node-2", "node-9", "node-10"], "newest first");
    assert_eq!(natural_cmp("ip-10-0-1-9", "ip-10-0-1-10"), std::cmp::Ordering::Less);
    assert_eq!(
        natural_cmp("a01", "a1"),
        std::cmp::Ordering::Greater,
        "equal numbers: shorter text first"
    );
    assert_eq!(natural_cmp("é2", "é10"), std::cmp::Ordering::Less);
}

#[test]
fn extra_labels_are_columns_with_each_nodes_value() {
    let nodes = labelled_nodes();
    let extra = ["team".to_string(), "topology.kubernetes.io/zone".to_string()];
    let v = view_sorted(&nodes, &[], Sort::by(SortBy::Name), &extra);
    assert_eq!(v.rows[0].extra, [Some("a".to_string()), Some("ap-northeast-2a".to_string())]);
    assert_eq!(v.rows[1].extra, [None, Some("ap-northeast-2a".to_string())]);
    let text = render_text(&v, 170);
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("NAME")).expect(&text);
    let title = lines[header];
    let (team, zone, age) = (
        title.find(" team ").expect(&text) + 1,
        title.find(" topology.kubernetes.io/zone ").expect(&text) + 1,
        title.find(" AGE").expect(&text) + 1,
    );
    assert!(title.find("MEMORY").unwrap() < team && team < zone && zone < age, "{text}");
    let cell = |line: &str, at: usize| line[at..].split_whitespace().next().unwrap_or("").to_string();
    let at = |line: &str, column: usize| cell(line, line.char_indices().nth(column).map(|(i, _)| i).unwrap());
    let team_column = title[..team].chars().count();
    let zone_column = title[..zone].chars().count();
    assert_eq!(at(lines[header + 1], team_column), "a", "{text}");
    assert_eq!(at(lines[header + 2], team_column), "-", "a node without the label: {text}");
    assert_eq!(at(lines[header + 2], zone_column), "ap-northeast-2a", "{text}");
    assert_eq!(parse_label_key("team"), Ok("team".to_string()));
    assert!(parse_label_key("bad key").unwrap_err().contains("\"bad key\""));
}

#[test]
fn the_header_says_where_prices_come_from() {
    let (nodes, pods) = fixture();
    let text = render_text(&view_of(&nodes, &pods, SortBy::Creation), 150);
    assert!(
        text.lines()
            .nth(4)
            .unwrap()
            .starts_with("prices  the nodes' price annotations, else none"),
        "{text}"
    );
    let n = to_node(node("n", "t3.large", "ap-northeast-2a", 10, None));
    let fallback = Fallback {
        reason: "live prices failed: ec2:DescribeInstanceTypes failed".to_string(),
        snapshot: SnapshotPrices::default(),
    };
    let v = priced(&n, &fallback);
    assert!(v.rows[0].price.unwrap().estimated);
    let text = render_text(&v, 200);
    assert!(
        text.contains("prices  the nodes' price annotations, else the built-in snapshot (estimates, ~) (live prices failed: ec2:DescribeInstanceTypes failed)"),
        "{text}"
    );
    assert!(text.contains("~$0."), "{text}");
}

/// An instance type of the live catalogue with one offering per capacity type in `zone`.
fn live_type(name: &str, zone: &str, on_demand: f64, spot: f64) -> crate::cloudprovider::InstanceTypeInfo {
    use crate::scheduling::{InstanceFacts, Offering};
    let offering = |capacity_type: &str, price: f64| Offering {
        zone: zone.to_string(),
        capacity_type: capacity_type.to_string(),
        price,
        available: true,
    };
    crate::cloudprovider::InstanceTypeInfo {
        facts: InstanceFacts {
            name: name.to_string(),
            ..InstanceFacts::default()
        },
        accelerators: Vec::new(),
        category: String::new(),
        family: String::new(),
        generation: None,
        size: String::new(),
        capacity_types: vec!["on-demand".into(), "spot".into()],
        offerings: vec![offering("on-demand", on_demand), offering("spot", spot)],
    }
}

#[test]
fn live_prices_are_marked_estimated_only_where_karpenter_rs_estimated_them() {
    use crate::cloudprovider::aws::pricing::{parse_overrides, Pricing};
    let zone = "ap-northeast-2a";
    let types = [live_type("t3.large", zone, 0.104, 0.031), live_type("m5.large", zone, 0.118, 0.05)];
    // t3.large has an override (on-demand only) and a spot price history entry; m5.large neither.
    let overrides = parse_overrides("t3.large: 0.104\n").unwrap();
    let history = [(("t3.large".to_string(), zone.to_string()), 0.031)].into_iter().collect();
    let pricing = Pricing::new(Some(overrides), Default::default(), history);
    let live = LivePrices::new("ap-northeast-2", &types, &pricing);
    assert_eq!(live.region(), "ap-northeast-2");
    assert_eq!(live.counts(), (4, 2));
    let price = |t: &str, c: &str, z: &str, r: &str| live.price(r, t, c, z);
    let exact = |usd_per_hour| {
        Some(Price {
            usd_per_hour,
            estimated: false,
        })
    };
    assert_eq!(price("t3.large", "on-demand", zone, "ap-northeast-2"), exact(0.104));
    assert_eq!(price("t3.large", "spot", zone, "ap-northeast-2"), exact(0.031));
    assert!(price("m5.large", "on-demand", zone, "ap-northeast-2").unwrap().estimated);
    assert!(price("m5.large", "spot", zone, "ap-northeast-2").unwrap().estimated);
    // Another region, or a type the live catalogue lacks: the snapshot's estimate.
    let other = price("t3.large", "on-demand", "us-east-1a", "us-east-1").expect("the snapshot has us-east-1");
    assert!(other.estimated);
    assert!(live.source().contains("live from EC2 and the Pricing API in ap-northeast-2"));

    let n = to_node(node("n", "t3.large", zone, 10, None));
    assert_eq!(prices::region_of_nodes([&n]), Some("ap-northeast-2".to_string()));
    let v = priced(&n, &live);
    assert_eq!(v.rows[0].price, exact(0.104));
    assert_eq!(v.totals.estimated, 0);
    let text = render_text(&v, 220);
    assert!(text.contains(" $0.1040 "), "no ~ before a live price: {text}");
    assert!(text.contains("else live from EC2 and the Pricing API in ap-northeast-2"), "{text}");
}

#[test]
fn truncate_cuts_with_an_ellipsis() {
    assert_eq!(truncate("consolidation", 20), "consolidation");
    assert_eq!(truncate("consolidation", 6), "conso…");
    assert_eq!(truncate("consolidation", 0), "");
    assert_eq!(truncate("éé", 2), "éé");
}
