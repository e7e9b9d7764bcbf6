//! What the `karpenter_nodes_*` gauges and `karpenter_rs_node_price_per_hour` say of one node,
//! from the Node and the pods bound to it (Karpenter's node scraper,
//! `core@v0.31.0:pkg/controllers/metrics/node/controller.go`), and the node's price from its
//! annotations. Pure; the status loop sets the gauges.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::apis::v1alpha5::labels::{
    CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, PRICE_ANNOTATION, PRICE_CAPACITY_TYPE_ANNOTATION, PRICE_ZONE_ANNOTATION,
    PROVISIONER_NAME_LABEL, WELL_KNOWN_LABELS, ZONE_LABEL,
};
use crate::scheduling::pods::{is_daemonset_pod, is_terminal};
use crate::scheduling::resources::{pod_limits, pod_requests, resource_list_lenient, CPU};
use crate::scheduling::Resources;

/// One series: label values in the gauge's label order, and its value.
pub type Series = (Vec<String>, f64);

/// The series of the six `karpenter_nodes_*` resource gauges of one node.
#[derive(Debug, Default, PartialEq)]
pub struct NodeGauges {
    /// `karpenter_nodes_allocatable`.
    pub allocatable: Vec<Series>,
    /// `karpenter_nodes_total_pod_requests`.
    pub pod_requests: Vec<Series>,
    /// `karpenter_nodes_total_pod_limits`.
    pub pod_limits: Vec<Series>,
    /// `karpenter_nodes_total_daemon_requests`.
    pub daemon_requests: Vec<Series>,
    /// `karpenter_nodes_total_daemon_limits`.
    pub daemon_limits: Vec<Series>,
    /// `karpenter_nodes_system_overhead`.
    pub system_overhead: Vec<Series>,
}

impl NodeGauges {
    /// allocatable, pod requests, pod limits, daemon requests, daemon limits, system overhead.
    pub fn into_array(self) -> [Vec<Series>; 6] {
        [
            self.allocatable,
            self.pod_requests,
            self.pod_limits,
            self.daemon_requests,
            self.daemon_limits,
            self.system_overhead,
        ]
    }
}

/// The gauges of `node` with `pods` (those bound to it; finished ones are left out here). Every
/// gauge has a series for each resource the node reports or its pods ask for, zero included, so
/// that sums over nodes need no `or` for a node without DaemonSet pods or without any pods.
pub fn node_gauges(node: &Node, pods: &[&Pod]) -> NodeGauges {
    let status = node.status.as_ref();
    let allocatable = status
        .and_then(|s| s.allocatable.as_ref())
        .map(resource_list_lenient)
        .unwrap_or_default();
    let capacity = status
        .and_then(|s| s.capacity.as_ref())
        .map(resource_list_lenient)
        .unwrap_or_default();
    let (mut pod_req, mut pod_lim, mut daemon_req, mut daemon_lim) = Default::default();
    for pod in pods.iter().filter(|p| !is_terminal(p)) {
        let (requests, limits): (&mut Resources, &mut Resources) = if is_daemonset_pod(pod) {
            (&mut daemon_req, &mut daemon_lim)
        } else {
            (&mut pod_req, &mut pod_lim)
        };
        requests.add(&pod_requests(pod));
        limits.add(&pod_limits(pod));
    }
    let overhead = capacity.minus(&allocatable).clamp_non_negative();
    let mut resources: BTreeSet<String> = BTreeSet::new();
    for r in [&allocatable, &capacity, &pod_req, &pod_lim, &daemon_req, &daemon_lim] {
        resources.extend(r.entries().map(|(name, _)| name.to_string()));
    }
    let base = node_label_values(node);
    let series = |amounts: &Resources| -> Vec<Series> {
        resources
            .iter()
            .map(|name| {
                let mut labels = Vec::with_capacity(base.len() + 1);
                labels.push(resource_type(name));
                labels.extend(base.iter().cloned());
                (labels, amount(name, amounts.get(name)))
            })
            .collect()
    };
    NodeGauges {
        allocatable: series(&allocatable),
        pod_requests: series(&pod_req),
        pod_limits: series(&pod_lim),
        daemon_requests: series(&daemon_req),
        daemon_limits: series(&daemon_lim),
        system_overhead: series(&overhead),
    }
}

/// The values of `metrics::node_price_label_names()` for `node`: its name, Provisioner, phase
/// and well-known labels (empty when absent, as Karpenter reports them).
pub fn node_label_values(node: &Node) -> Vec<String> {
    let labels = node.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).cloned().unwrap_or_default();
    let mut values = vec![
        node.metadata.name.clone().unwrap_or_default(),
        label(PROVISIONER_NAME_LABEL),
        node.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default(),
    ];
    values.extend(WELL_KNOWN_LABELS.iter().map(|key| label(key)));
    values
}

/// The node's price series: USD per hour from its price annotation (set at launch), else
/// `catalogue_price(instance type, capacity type, zone)` from its labels; none when neither is
/// known.
pub fn node_price(node: &Node, mut catalogue_price: impl FnMut(&str, &str, &str) -> Option<f64>) -> Option<Series> {
    let price = launch_price(node).map(|p| p.usd_per_hour).or_else(|| {
        let labels = node.metadata.labels.as_ref()?;
        catalogue_price(
            labels.get(INSTANCE_TYPE_LABEL)?,
            labels.get(CAPACITY_TYPE_LABEL)?,
            labels.get(ZONE_LABEL)?,
        )
    })?;
    Some((node_label_values(node), price))
}

/// What a node's price annotations say: the offering's price per hour at launch and what it was
/// priced for.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPrice {
    /// USD per hour.
    pub usd_per_hour: f64,
    /// `on-demand` or `spot` (empty when the annotation is missing).
    pub capacity_type: String,
    /// The zone (empty when the annotation is missing).
    pub zone: String,
}

/// The node's `PRICE_ANNOTATION` (and the capacity type and zone beside it); none when absent or
/// not a finite, non-negative number.
pub fn launch_price(node: &Node) -> Option<LaunchPrice> {
    let annotations = node.metadata.annotations.as_ref()?;
    let usd_per_hour: f64 = annotations.get(PRICE_ANNOTATION)?.trim().parse().ok()?;
    if !usd_per_hour.is_finite() || usd_per_hour < 0.0 {
        return None;
    }
    let text = |key: &str| annotations.get(key).cloned().unwrap_or_default();
    Some(LaunchPrice {
        usd_per_hour,
        capacity_type: text(PRICE_CAPACITY_TYPE_ANNOTATION),
        zone: text(PRICE_ZONE_ANNOTATION),
    })
}

/// `ephemeral-storage` → `ephemeral_storage`, as Karpenter names `resource_type`.
fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// CPU in cores, everything else in its base unit.
fn amount(name: &str, units: i64) -> f64 {
    if name == CPU {
        units as f64 / 1000.0
    } else {
        units as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{node_label_names, node_price_label_names};
    use serde_json::json;

    fn node() -> Node {
        serde_json::from_value(json!({
            "metadata": {
                "name": "ip-10-0-1-23.ap-northeast-2.compute.internal",
                "labels": {
                    "karpenter.sh/provisioner-name": "service",
                    "topology.kubernetes.io/zone": "ap-northeast-2a",
                    "kubernetes.io/arch": "amd64",
                    "karpenter.sh/capacity-type": "on-demand",
                    "node.kubernetes.io/instance-type": "t3.large",
                },
            },
            "status": {
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "35"},
                "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "35"},
            },
        }))
        .unwrap()
    }

    fn pod(name: &str, cpu: &str, daemon: bool, phase: &str) -> Pod {
        let owner = if daemon {
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "ownerReferences": owner},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {
                "requests": {"cpu": cpu, "memory": "256Mi"},
                "limits": {"memory": "512Mi"},
            }}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    /// The value of `gauge`'s series for `resource`, and its labels by name.
    fn value(gauge: &[Series], resource: &str) -> f64 {
        gauge.iter().find(|(labels, _)| labels[0] == resource).map(|(_, v)| *v).unwrap()
    }

    #[test]
    fn a_node_reports_allocatable_overhead_and_its_pods_and_daemons_apart() {
        let (web, daemon, done) = (
            pod("web", "500m", false, "Running"),
            pod("agent", "100m", true, "Running"),
            pod("job", "1", false, "Succeeded"),
        );
        let g = node_gauges(&node(), &[&web, &daemon, &done]);
        assert_eq!(value(&g.allocatable, "cpu"), 1.93);
        assert_eq!(value(&g.allocatable, "memory"), 7.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(value(&g.system_overhead, "cpu"), 0.07);
        assert_eq!(value(&g.system_overhead, "memory"), 1024.0 * 1024.0 * 1024.0);
        assert_eq!(value(&g.system_overhead, "pods"), 0.0);
        assert_eq!(value(&g.pod_requests, "cpu"), 0.5, "the finished pod counts for nothing");
        assert_eq!(value(&g.pod_requests, "pods"), 1.0);
        assert_eq!(value(&g.daemon_requests, "cpu"), 0.1);
        assert_eq!(value(&g.pod_limits, "memory"), 512.0 * 1024.0 * 1024.0);
        assert_eq!(value(&g.pod_limits, "cpu"), 0.0, "no cpu limit: a zero series, not none");
        assert_eq!(value(&g.daemon_limits, "memory"), 512.0 * 1024.0 * 1024.0);
    }

    #[test]
    fn series_carry_karpenters_label_names_and_the_nodes_labels() {
        let g = node_gauges(&node(), &[]);
        let names = node_label_names();
        for (labels, _) in g.allocatable.iter().chain(&g.pod_requests).chain(&g.daemon_requests) {
            assert_eq!(labels.len(), names.len());
            let by_name = |n: &str| labels[names.iter().position(|x| x == n).unwrap()].as_str();
            assert_eq!(by_name("node_name"), "ip-10-0-1-23.ap-northeast-2.compute.internal");
            assert_eq!(by_name("provisioner"), "service");
            assert_eq!(by_name("provisioner_name"), "service");
            assert_eq!(by_name("zone"), "ap-northeast-2a");
            assert_eq!(by_name("arch"), "amd64");
            assert_eq!(by_name("capacity_type"), "on-demand");
            assert_eq!(by_name("instance_type"), "t3.large");
            assert_eq!(by_name("region"), "", "an absent label is empty, as in Karpenter");
            assert_eq!(by_name("phase"), "");
        }
        let resources: Vec<&str> = g.pod_requests.iter().map(|(l, _)| l[0].as_str()).collect();
        assert_eq!(
            resources,
            ["cpu", "memory", "pods"],
            "every resource of the node, even with no pods"
        );
        assert!(g.pod_requests.iter().all(|(_, v)| *v == 0.0));
    }

    #[test]
    fn resource_names_are_snake_case() {
        let mut n = node();
        let status = n.status.as_mut().unwrap();
        for list in [status.capacity.as_mut().unwrap(), status.allocatable.as_mut().unwrap()] {
            list.insert(
                "ephemeral-storage".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("20Gi".into()),
            );
        }
        let g = node_gauges(&n, &[]);
        assert!(g
            .allocatable
            .iter()
            .any(|(l, v)| l[0] == "ephemeral_storage" && *v == 20.0 * 1024f64.powi(3)));
    }

    #[test]
    fn the_price_comes_from_the_annotation_else_from_the_catalogue() {
        let lookups = std::cell::Cell::new(0);
        let catalogue = |t: &str, c: &str, z: &str| {
            lookups.set(lookups.get() + 1);
            (t == "t3.large" && c == "on-demand" && z == "ap-northeast-2a").then_some(0.104)
        };
        let (labels, price) = node_price(&node(), catalogue).unwrap();
        assert_eq!(price, 0.104);
        assert_eq!(labels.len(), node_price_label_names().len());
        assert_eq!(labels[0], "ip-10-0-1-23.ap-northeast-2.compute.internal");

        let mut annotated = node();
        annotated.metadata.annotations = Some(
            [
                (PRICE_ANNOTATION.to_string(), "0.0832".to_string()),
                (PRICE_CAPACITY_TYPE_ANNOTATION.to_string(), "on-demand".to_string()),
                (PRICE_ZONE_ANNOTATION.to_string(), "ap-northeast-2a".to_string()),
            ]
            .into(),
        );
        lookups.set(0);
        assert_eq!(node_price(&annotated, catalogue).unwrap().1, 0.0832);
        assert_eq!(lookups.get(), 0, "an annotated node needs no catalogue");
        assert_eq!(
            launch_price(&annotated),
            Some(LaunchPrice {
                usd_per_hour: 0.0832,
                capacity_type: "on-demand".into(),
                zone: "ap-northeast-2a".into()
            })
        );

        for bad in ["", "cheap", "-1", "NaN", "inf"] {
            let mut n = annotated.clone();
            n.metadata.annotations.as_mut().unwrap().insert(PRICE_ANNOTATION.into(), bad.into());
            assert_eq!(launch_price(&n), None, "{bad:?}");
            assert_eq!(node_price(&n, catalogue).unwrap().1, 0.104, "{bad:?} falls back to the catalogue");
        }
        let mut unknown = node();
        unknown.metadata.labels.as_mut().unwrap().remove(INSTANCE_TYPE_LABEL);
        assert_eq!(node_price(&unknown, catalogue), None);
    }
}
