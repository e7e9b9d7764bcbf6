use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::proto::MetricType;

use super::*;

#[derive(Debug)]
enum Error {
    NotFound,
}

impl ErrorKind for Error {
    fn kind(&self) -> &'static str {
        "not_found"
    }
}

#[test]
fn a_summary_reports_karpenters_quantiles_of_the_last_ten_minutes_and_counts_everything() {
    let summary = SummaryVec::new("test_seconds", "help", &["provisioner"]);
    let start = Instant::now();
    for v in 1..=100 {
        summary.observe_at(&["a"], v as f64, start);
    }
    summary.observe_at(&["b"], 7.0, start);
    let family = summary.collect_at(start + Duration::from_secs(1));
    assert_eq!(family.get_field_type(), MetricType::SUMMARY);
    let a = &family.get_metric()[0];
    assert_eq!(a.get_label()[0].value(), "a");
    let s = a.get_summary();
    assert_eq!((s.sample_count(), s.sample_sum()), (100, 5050.0));
    let quantiles: Vec<(f64, f64)> = s.get_quantile().iter().map(|q| (q.quantile(), q.value())).collect();
    assert_eq!(quantiles, [(0.0, 1.0), (0.5, 50.0), (0.9, 90.0), (0.99, 99.0), (1.0, 100.0)]);

    // Eleven minutes on: the quantiles forget, the count and sum do not.
    summary.observe_at(&["a"], 500.0, start + Duration::from_secs(11 * 60));
    let later = summary.collect_at(start + Duration::from_secs(11 * 60));
    let s = later.get_metric()[0].get_summary();
    assert_eq!(s.sample_count(), 101);
    assert!(s.get_quantile().iter().all(|q| q.value() == 500.0));
    let b = later.get_metric()[1].get_summary();
    assert!(b.get_quantile().iter().all(|q| q.value().is_nan()), "no recent observation: NaN");

    summary.remove(&["b"]);
    assert_eq!(summary.sample_count(&["b"]), 0);
    assert_eq!(summary.collect_at(start).get_metric().len(), 1);
}

#[test]
fn pod_states_render_as_prometheus_encodes_the_same_gauge_and_only_with_pods() {
    use std::borrow::Cow;
    let metrics = Metrics::new();
    assert!(!metrics.render().contains("karpenter_pods_state"), "no source yet");
    let pods: Vec<PodStateLabels<'static>> = vec![
        [
            "web-1",
            "shop",
            "ReplicaSet/web-7d",
            "n1",
            "service",
            "ap-northeast-2a",
            "amd64",
            "on-demand",
            "t3.large",
            "Running",
        ]
        .map(Cow::Borrowed),
        ["odd\"na\\me\n", "shop", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "Pending"].map(Cow::Borrowed),
    ];
    let shown = Arc::new(Mutex::new(Vec::new()));
    let source = shown.clone();
    metrics.pods_state.set_source(move |sink| {
        for labels in source.lock().unwrap().iter() {
            sink(labels);
        }
    });
    assert!(!metrics.render().contains("karpenter_pods_state"), "no family without pods");
    *shown.lock().unwrap() = pods.clone();
    let mut ours = String::new();
    metrics.pods_state.render(&mut ours);

    let registry = Registry::new();
    let gauge = GaugeVec::new(Opts::new(PodStates::NAME, PodStates::HELP), &POD_STATE_LABELS).unwrap();
    registry.register(Box::new(gauge.clone())).unwrap();
    for labels in &pods {
        let values: Vec<&str> = labels.iter().map(|v| v.as_ref()).collect();
        gauge.with_label_values(&values).set(1.0);
    }
    let encoded = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).unwrap();
    let lines = |text: &str| {
        let mut l: Vec<String> = text.lines().map(String::from).collect();
        l.sort();
        l
    };
    assert_eq!(lines(&ours), lines(&encoded));
    assert!(metrics.render().contains(&ours));
}

#[test]
fn instance_type_gauges_hold_one_on_demand_price_per_type_and_spot_per_zone_and_follow_the_catalogue() {
    use crate::cloudprovider::{InstanceTypeInfo, OfferingInfo};
    let offering = |zone: &str, capacity_type: &str, price: f64| OfferingInfo {
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price,
        available: true,
    };
    let info = |name: &str, offerings: Vec<OfferingInfo>| InstanceTypeInfo {
        capacity_types: vec!["on-demand".into(), "spot".into()],
        offerings,
        ..crate::cloudprovider::catalogue::test_info(name, 0.0)
    };
    let metrics = Metrics::new();
    assert!(!metrics.render().contains("instance_type_cpu_cores"), "no catalogue yet");
    let catalogue = vec![info(
        "t3.large",
        vec![
            offering("ap-northeast-2a", "on-demand", 0.104),
            offering("ap-northeast-2c", "on-demand", 0.104),
            offering("ap-northeast-2a", "spot", 0.031),
            offering("ap-northeast-2c", "spot", 0.035),
            offering("ap-northeast-2b", "spot", f64::NAN),
        ],
    )];
    metrics.set_instance_types(Arc::new(catalogue), "ap-northeast-2");
    let text = metrics.render();
    let price = |labels: &str| {
        let prefix = format!("karpenter_cloudprovider_instance_type_price_estimate{{{labels}}} ");
        text.lines().filter_map(|l| l.strip_prefix(&prefix)).collect::<Vec<_>>()
    };
    assert!(
        text.contains("# TYPE karpenter_cloudprovider_instance_type_price_estimate gauge"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_cloudprovider_instance_type_cpu_cores{instance_type=\"t3.large\"} 2\n"),
        "{text}"
    );
    let region = r#"instance_type="t3.large",region="ap-northeast-2""#;
    assert_eq!(price(&format!(r#"capacity_type="on-demand",{region},zone="""#)), ["0.104"]);
    assert_eq!(
        price(&format!(r#"capacity_type="spot",{region},zone="ap-northeast-2a""#)),
        ["0.031"]
    );
    assert_eq!(
        price(&format!(r#"capacity_type="spot",{region},zone="ap-northeast-2c""#)),
        ["0.035"]
    );
    assert_eq!(
        text.matches("karpenter_cloudprovider_instance_type_price_estimate{").count(),
        3,
        "no unpriced offering: {text}"
    );
    metrics.set_instance_types(Arc::new(vec![info("m5.large", vec![])]), "ap-northeast-2");
    let text = metrics.render();
    assert!(
        !text.contains("t3.large"),
        "a type gone from the catalogue goes from the gauges: {text}"
    );
    assert!(
        text.contains("karpenter_cloudprovider_instance_type_cpu_cores{instance_type=\"m5.large\"} 2\n"),
        "{text}"
    );
}

#[test]
fn summaries_render_in_the_text_format_and_an_unlabelled_one_from_the_start() {
    let metrics = Metrics::new();
    let text = metrics.render();
    assert!(text.contains("# TYPE karpenter_pods_startup_time_seconds summary"), "{text}");
    assert!(text.contains("karpenter_pods_startup_time_seconds_count 0"), "{text}");
    metrics.termination_time.observe(&["service"], 12.5);
    let text = metrics.render();
    assert!(
        text.contains("karpenter_nodes_termination_time_seconds{provisioner=\"service\",quantile=\"0.5\"} 12.5"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_nodes_termination_time_seconds_count{provisioner=\"service\"} 1"),
        "{text}"
    );
}

#[test]
fn a_gauge_family_replaced_as_a_whole_loses_the_series_not_given_again() {
    let gauge = GaugeVec::new(Opts::new("test_gauge", "help"), &["node"]).unwrap();
    let mut series = GaugeSeries::new(gauge.clone());
    series.replace_all([(vec!["a".to_string()], 1.0), (vec!["b".to_string()], 2.0)]);
    series.replace_all([(vec!["b".to_string()], 3.0)]);
    let left: Vec<(String, f64)> = gauge
        .collect()
        .iter()
        .flat_map(|f| {
            f.get_metric()
                .iter()
                .map(|m| (m.get_label()[0].value().to_string(), m.get_gauge().value()))
        })
        .collect();
    assert_eq!(left, [("b".to_string(), 3.0)]);
}

#[test]
fn node_gauges_are_labelled_as_karpenters() {
    let names = node_label_names();
    for wanted in [
        "resource_type",
        "node_name",
        "provisioner",
        "phase",
        "zone",
        "arch",
        "capacity_type",
        "instance_type",
    ] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} in {names:?}");
    }
    assert!(names.iter().any(|n| n == "provisioner_name"));
    assert!(names.iter().any(|n| n == "instance_gpu_count"));
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "no label twice");
}

#[tokio::test]
async fn a_cloud_call_is_timed_and_its_error_counted_by_kind() {
    let metrics = Metrics::new();
    let ok: Result<u32, Error> = metrics.cloud_call("list", async { Ok(1) }).await;
    assert_eq!(ok.unwrap(), 1);
    let failed: Result<(), Error> = metrics.cloud_call("get", async { Err(Error::NotFound) }).await;
    let kind = failed.unwrap_err().kind();
    assert_eq!(metrics.cloudprovider_duration.with_label_values(&["list"]).get_sample_count(), 1);
    assert_eq!(metrics.cloudprovider_duration.with_label_values(&["get"]).get_sample_count(), 1);
    assert_eq!(metrics.cloudprovider_errors.with_label_values(&["list", kind]).get(), 0);
    assert_eq!(metrics.cloudprovider_errors.with_label_values(&["get", kind]).get(), 1);
}
