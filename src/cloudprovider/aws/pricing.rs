//! Prices of offerings, in USD per hour.
//!
//! * On-demand: the price-overrides file when it names the type, else a resource-based
//!   estimate (below). The AWS Pricing API is not called: it needs a client for another
//!   endpoint and region (us-east-1 / ap-south-1), is not emulated in our tests, and the
//!   estimate keeps the ranking right for what launches compare (same-zone alternatives).
//!   The provider logs one warning when any price is estimated.
//! * Spot: the overrides file's `spot` when given, else the newest DescribeSpotPriceHistory
//!   entry for the type and zone (`Linux/UNIX`), else `SPOT_FRACTION` of on-demand.
//!
//! The estimate is linear in the resources, with rates by family class fitted to us-east-1
//! on-demand prices of the 5th generation (m5.large 0.096, c5.large 0.085, r5.large 0.126,
//! t3.large 0.0832, i3.large 0.156, g4dn.xlarge 0.526):
//!
//! | class (category) | per vCPU | per GiB | note |
//! | --- | --- | --- | --- |
//! | compute (`c`) | 0.0340 | 0.00425 | |
//! | memory (`r`, `x`, `z`, `u`) | 0.0252 | 0.0047 | |
//! | burstable (`t`) | 0.0269 | 0.00349 | 85 % of general purpose |
//! | everything else | 0.0316 | 0.0041 | general purpose |
//!
//! plus 0.35 per GPU, 0.25 per other accelerator and 0.00006 per GB of local NVMe; arm64
//! (Graviton) types cost 80 %. Only the file parse, the estimate and the spot choice are here
//! and pure; `describe_spot_prices` and `load_overrides` are the edges.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use aws_sdk_ec2::Client;
use serde::Deserialize;

use super::errors;
use crate::cloudprovider::{Error, InstanceTypeInfo};

/// Spot price as a fraction of on-demand when EC2 reports none.
pub const SPOT_FRACTION: f64 = 0.35;

/// Prices from the overrides file, by instance type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceOverrides(pub HashMap<String, OverridePrice>);

/// One type's prices in the overrides file: `t3.large: 0.104` or
/// `t3.large: {onDemand: 0.104, spot: 0.0312}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OverridePrice {
    /// On-demand USD per hour.
    OnDemand(f64),
    /// Both prices.
    #[serde(rename_all = "camelCase")]
    Both {
        /// On-demand USD per hour.
        on_demand: f64,
        /// Spot USD per hour.
        #[serde(default)]
        spot: Option<f64>,
    },
}

impl OverridePrice {
    fn on_demand(&self) -> f64 {
        match self {
            OverridePrice::OnDemand(p) | OverridePrice::Both { on_demand: p, .. } => *p,
        }
    }

    fn spot(&self) -> Option<f64> {
        match self {
            OverridePrice::OnDemand(_) => None,
            OverridePrice::Both { spot, .. } => *spot,
        }
    }
}

/// Parses an overrides file (YAML, or JSON which YAML reads too).
pub fn parse_overrides(text: &str) -> Result<PriceOverrides, String> {
    let map: HashMap<String, OverridePrice> = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    if let Some((name, _)) = map.iter().find(|(_, p)| !(p.on_demand() > 0.0 && p.spot().is_none_or(|s| s > 0.0))) {
        return Err(format!("price of {name} must be greater than 0"));
    }
    Ok(PriceOverrides(map))
}

/// Reads and parses the overrides file.
pub fn load_overrides(path: &Path) -> Result<PriceOverrides, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::InvalidConfiguration(format!("reading price overrides {}: {e}", path.display())))?;
    parse_overrides(&text).map_err(|e| Error::InvalidConfiguration(format!("price overrides {}: {e}", path.display())))
}

/// Estimated on-demand USD per hour of a type from its resources (see the module doc).
pub fn estimate_on_demand(it: &InstanceTypeInfo) -> f64 {
    let (per_vcpu, per_gib) = match it.category.as_str() {
        "c" => (0.0340, 0.00425),
        "r" | "x" | "z" | "u" => (0.0252, 0.0047),
        "t" => (0.0269, 0.00349),
        _ => (0.0316, 0.0041),
    };
    let base = it.vcpu as f64 * per_vcpu + it.memory_mib as f64 / 1024.0 * per_gib;
    let base = if it.architecture == "arm64" { base * 0.8 } else { base };
    let extras = it.gpu_count() as f64 * 0.35
        + it.accelerators.iter().map(|a| a.count).sum::<i64>() as f64 * 0.25
        + it.local_nvme_gb.unwrap_or(0) as f64 * 0.00006;
    round_price(base + extras)
}

fn round_price(p: f64) -> f64 {
    (p * 1e6).round() / 1e6
}

/// Where prices come from for one catalogue load.
#[derive(Clone, Debug, Default)]
pub struct Pricing {
    overrides: Option<PriceOverrides>,
    spot_history: BTreeMap<(String, String), f64>,
}

impl Pricing {
    /// Prices from the overrides file (if any) and the spot history by (type, zone).
    pub fn new(overrides: Option<PriceOverrides>, spot_history: BTreeMap<(String, String), f64>) -> Self {
        Pricing { overrides, spot_history }
    }

    fn overridden(&self, name: &str) -> Option<&OverridePrice> {
        self.overrides.as_ref().and_then(|o| o.0.get(name))
    }

    /// Whether the on-demand price of `it` is an estimate.
    pub fn is_estimated(&self, it: &InstanceTypeInfo) -> bool {
        self.overridden(&it.name).is_none()
    }

    /// On-demand USD per hour.
    pub fn on_demand(&self, it: &InstanceTypeInfo) -> f64 {
        self.overridden(&it.name)
            .map(OverridePrice::on_demand)
            .unwrap_or_else(|| estimate_on_demand(it))
    }

    /// Spot USD per hour in `zone`, given the type's on-demand price.
    pub fn spot(&self, it: &InstanceTypeInfo, zone: &str, on_demand: f64) -> f64 {
        self.overridden(&it.name)
            .and_then(OverridePrice::spot)
            .or_else(|| self.spot_history.get(&(it.name.clone(), zone.to_string())).copied())
            .unwrap_or_else(|| round_price(on_demand * SPOT_FRACTION))
    }
}

/// The current Linux spot price of every (type, zone) EC2 reports.
pub async fn describe_spot_prices(ec2: &Client) -> Result<BTreeMap<(String, String), f64>, Error> {
    let mut newest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
    let mut pages = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .product_descriptions("Linux/UNIX (Amazon VPC)")
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("ec2:DescribeSpotPriceHistory", e))?;
        for entry in page.spot_price_history() {
            let (Some(t), Some(zone), Some(price)) = (entry.instance_type(), entry.availability_zone(), entry.spot_price()) else {
                continue;
            };
            let Ok(price) = price.parse::<f64>() else { continue };
            let at = entry.timestamp().map(|t| t.secs()).unwrap_or(0);
            let key = (t.as_str().to_string(), zone.to_string());
            if newest.get(&key).is_none_or(|(seen, _)| at >= *seen) {
                newest.insert(key, (at, price));
            }
        }
    }
    Ok(newest.into_iter().map(|(k, (_, p))| (k, p)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::GpuInfo;

    fn instance_type(name: &str, arch: &str, vcpu: i64, memory_gib: i64) -> InstanceTypeInfo {
        let parts = super::super::instance_types::parse_name(name);
        InstanceTypeInfo {
            name: name.into(),
            architecture: arch.into(),
            vcpu,
            memory_mib: memory_gib * 1024,
            max_enis: 3,
            ipv4_per_eni: 12,
            gpus: vec![],
            accelerators: vec![],
            hypervisor: "nitro".into(),
            encryption_in_transit: false,
            local_nvme_gb: None,
            network_bandwidth_mbps: None,
            bare_metal: false,
            category: parts.category,
            family: parts.family,
            generation: parts.generation,
            size: parts.size,
            capacity_types: vec!["on-demand".into(), "spot".into()],
            offerings: vec![],
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() / b < 0.05
    }

    #[test]
    fn estimates_on_demand_prices_near_list_prices() {
        assert!(close(estimate_on_demand(&instance_type("m5.large", "amd64", 2, 8)), 0.096));
        assert!(close(estimate_on_demand(&instance_type("c5.large", "amd64", 2, 4)), 0.085));
        assert!(close(estimate_on_demand(&instance_type("r5.large", "amd64", 2, 16)), 0.126));
        assert!(close(estimate_on_demand(&instance_type("t3.large", "amd64", 2, 8)), 0.0832));
        assert!(close(estimate_on_demand(&instance_type("m6g.large", "arm64", 2, 8)), 0.077));
        let mut g4dn = instance_type("g4dn.xlarge", "amd64", 4, 16);
        g4dn.gpus = vec![GpuInfo {
            name: "t4".into(),
            manufacturer: "nvidia".into(),
            count: 1,
            memory_mib: 16384,
        }];
        g4dn.local_nvme_gb = Some(125);
        assert!(close(estimate_on_demand(&g4dn), 0.526), "{}", estimate_on_demand(&g4dn));
    }

    #[test]
    fn ranks_the_first_write_up_types_by_size() {
        let large = estimate_on_demand(&instance_type("t3.large", "amd64", 2, 8));
        let xlarge = estimate_on_demand(&instance_type("t3.xlarge", "amd64", 4, 16));
        assert!(large < xlarge);
        assert!(close(xlarge, 2.0 * large));
    }

    #[test]
    fn reads_overrides_in_yaml_and_json_with_optional_spot() {
        let yaml = parse_overrides("t3.large: 0.104\nt3.xlarge: {onDemand: 0.208, spot: 0.0624}\n").unwrap();
        let json = parse_overrides(r#"{"t3.large": 0.104, "t3.xlarge": {"onDemand": 0.208, "spot": 0.0624}}"#).unwrap();
        assert_eq!(yaml, json);
        let pricing = Pricing::new(Some(yaml), BTreeMap::new());
        let large = instance_type("t3.large", "amd64", 2, 8);
        let xlarge = instance_type("t3.xlarge", "amd64", 4, 16);
        assert_eq!(pricing.on_demand(&large), 0.104);
        assert!(!pricing.is_estimated(&large));
        assert_eq!(pricing.spot(&xlarge, "ap-northeast-2a", 0.208), 0.0624);
        assert!(pricing.is_estimated(&instance_type("m5.large", "amd64", 2, 8)));
    }

    #[test]
    fn rejects_overrides_that_are_not_positive_prices() {
        assert!(parse_overrides("t3.large: 0").unwrap_err().contains("t3.large"));
        assert!(parse_overrides("t3.large: cheap").is_err());
        assert!(parse_overrides("- t3.large").is_err());
    }

    #[test]
    fn prefers_spot_history_over_the_fraction_of_on_demand() {
        let history = BTreeMap::from([(("t3.large".to_string(), "ap-northeast-2a".to_string()), 0.0312)]);
        let pricing = Pricing::new(None, history);
        let it = instance_type("t3.large", "amd64", 2, 8);
        assert_eq!(pricing.spot(&it, "ap-northeast-2a", 0.104), 0.0312);
        assert_eq!(pricing.spot(&it, "ap-northeast-2c", 0.1), 0.035);
    }
}
