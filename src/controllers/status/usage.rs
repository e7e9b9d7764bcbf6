//! What a Provisioner uses against its limits: the `status.resources` it reports and the values
//! of the `karpenter_provisioner_usage`, `_limit` and `_usage_pct` gauges. Pure; the status loop
//! in `mod.rs` reads the nodes and writes the results.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha5::Provisioner;
use crate::scheduling::resources::to_units;
use crate::scheduling::Resources;

/// One resource of a Provisioner, in the gauges' units (CPU in cores, others in base units).
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceUsage {
    /// `cpu`, `memory`, `pods`, `nvidia.com/gpu`...
    pub resource: String,
    /// Capacity of its nodes.
    pub usage: f64,
    /// Its limit, if `spec.limits.resources` sets one.
    pub limit: Option<f64>,
}

impl ResourceUsage {
    /// Usage as a percentage of the limit, 0..100 (over 100 when nodes predate a lowered limit).
    pub fn percent(&self) -> Option<f64> {
        self.limit.map(|l| if l > 0.0 { self.usage / l * 100.0 } else { 100.0 })
    }
}

/// `status.resources` for `usage`: the resource list of the Provisioner's nodes' capacity.
pub fn status_resources(usage: &Resources) -> BTreeMap<String, Quantity> {
    usage.to_quantities()
}

/// Every resource the Provisioner uses or limits, in the gauges' units.
pub fn resource_usage(provisioner: &Provisioner, usage: &Resources) -> Vec<ResourceUsage> {
    let gauge_units = |resource: &str, amount: i64| if resource == "cpu" { amount as f64 / 1000.0 } else { amount as f64 };
    let limits: BTreeMap<String, i64> = provisioner
        .spec
        .limits
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|(name, q)| parse_quantity(&q.0).map(|v| (name.clone(), to_units(name, v))))
        .collect();
    let mut names: Vec<String> = usage.entries().map(|(name, _)| name.to_string()).collect();
    names.extend(limits.keys().cloned());
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| ResourceUsage {
            usage: gauge_units(&name, usage.get(&name)),
            limit: limits.get(&name).map(|l| gauge_units(&name, *l)),
            resource: name,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn provisioner(limits: serde_json::Value) -> Provisioner {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
            "metadata": {"name": "service"},
            "spec": {"limits": {"resources": limits}}
        }))
        .unwrap()
    }

    #[test]
    fn reports_capacity_against_limits_in_gauge_units() {
        let usage = Resources::zero()
            .with("cpu", 4000)
            .with("memory", 16 * 1024 * 1024 * 1024)
            .with("pods", 70);
        let report = resource_usage(&provisioner(json!({"cpu": "10", "nvidia.com/gpu": "2"})), &usage);
        let by_name: BTreeMap<&str, &ResourceUsage> = report.iter().map(|r| (r.resource.as_str(), r)).collect();
        assert_eq!(by_name["cpu"].usage, 4.0);
        assert_eq!(by_name["cpu"].limit, Some(10.0));
        assert_eq!(by_name["cpu"].percent(), Some(40.0));
        assert_eq!(by_name["memory"].usage, 17_179_869_184.0);
        assert_eq!(by_name["memory"].limit, None);
        assert_eq!(
            by_name["nvidia.com/gpu"].usage, 0.0,
            "a limited resource is reported even when unused"
        );
        assert_eq!(by_name["nvidia.com/gpu"].percent(), Some(0.0));
        assert_eq!(by_name["pods"].usage, 70.0);
    }

    #[test]
    fn status_lists_the_capacity_as_quantities() {
        let usage = Resources::zero().with("cpu", 2000).with("memory", 8 * 1024 * 1024 * 1024);
        let status = status_resources(&usage);
        assert_eq!(status["cpu"], Quantity("2".into()));
        assert_eq!(status["memory"], Quantity("8Gi".into()));
    }
}
