//! The instance-type catalogue `simulate` runs against without AWS: a snapshot file of EC2
//! instance types (vCPUs, memory, architecture, network interfaces, GPUs and accelerators) with,
//! per region, the zones each is offered in and its on-demand price. The shipped one
//! (`catalogue.json`, compiled into the binary) is written by `refresh-catalogue.py` from the EC2
//! data bundled with moto, priced by karpenter-rs's own estimate (`aws::pricing`): no AWS price
//! in it is real. `--catalogue FILE` reads a file of the same shape. Pure: text in, catalogue out.
//!
//! The shape (JSON):
//!
//! ```text
//! { "taken": "2026-12-01", "source": "...", "pricesEstimated": true,
//!   "types": [ { "name": "t3.large", "vcpus": 2, "memoryMiB": 8192, "arch": "amd64",
//!                "maxENIs": 3, "ipv4PerENI": 12, "hypervisor": "nitro", "bandwidthMbps": 512,
//!                "capacityTypes": ["on-demand", "spot"],
//!                // optional: "gpus": [{name, manufacturer, count, memoryMiB}],
//!                // "accelerators": [{name, manufacturer, count}], "metal", "nvmeGB",
//!                // "encryptionInTransit"
//!              } ],
//!   "regions": { "ap-northeast-2": { "zones": { "t3.large": ["ap-northeast-2a", ...] },
//!                                    "onDemand": { "t3.large": 0.0832 } } } }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Deserialize;

use crate::cloudprovider::aws::branch_interfaces::branch_interfaces;
use crate::cloudprovider::aws::instance_types::{parse_name, with_offerings};
use crate::cloudprovider::aws::pricing::{PriceOverrides, Pricing};
use crate::cloudprovider::{AcceleratorInfo, GpuInfo, InstanceTypeInfo};
use crate::scheduling::InstanceFacts;

/// The snapshot shipped in the binary.
pub const SHIPPED: &str = include_str!("catalogue.json");

/// A catalogue snapshot file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// When it was taken (a date).
    #[serde(default)]
    pub taken: String,
    /// Where its facts and prices come from.
    #[serde(default)]
    pub source: String,
    /// Whether its prices are estimates rather than AWS prices.
    #[serde(default)]
    pub prices_estimated: bool,
    types: Vec<SnapshotType>,
    regions: BTreeMap<String, SnapshotRegion>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotType {
    name: String,
    vcpus: i64,
    #[serde(rename = "memoryMiB")]
    memory_mib: i64,
    arch: String,
    #[serde(rename = "maxENIs")]
    max_enis: i64,
    #[serde(rename = "ipv4PerENI")]
    ipv4_per_eni: i64,
    #[serde(default)]
    gpus: Vec<SnapshotGpu>,
    #[serde(default)]
    accelerators: Vec<SnapshotAccelerator>,
    #[serde(default)]
    hypervisor: String,
    #[serde(default)]
    metal: bool,
    #[serde(default, rename = "nvmeGB")]
    nvme_gb: i64,
    #[serde(default)]
    bandwidth_mbps: Option<i64>,
    #[serde(default)]
    encryption_in_transit: bool,
    capacity_types: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotGpu {
    name: String,
    manufacturer: String,
    count: i64,
    #[serde(default, rename = "memoryMiB")]
    memory_mib: i64,
}

#[derive(Clone, Debug, Deserialize)]
struct SnapshotAccelerator {
    name: String,
    manufacturer: String,
    count: i64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotRegion {
    zones: BTreeMap<String, BTreeSet<String>>,
    #[serde(default)]
    on_demand: BTreeMap<String, f64>,
}

/// One region's catalogue, as the controller's cloud provider would answer it.
#[derive(Clone, Debug)]
pub struct Catalogue {
    /// The region.
    pub region: String,
    /// Every zone some type is offered in.
    pub zones: BTreeSet<String>,
    /// The instance types offered in the region, with offerings and prices.
    pub types: Vec<InstanceTypeInfo>,
    /// Where it comes from, for the report's header.
    pub source: String,
    /// When it was taken, if known.
    pub taken: Option<String>,
    /// Whether the on-demand prices (and the spot prices derived from them) are estimates.
    pub prices_estimated: bool,
}

impl Snapshot {
    /// Parses a snapshot file.
    pub fn parse(text: &str) -> Result<Snapshot, String> {
        serde_json::from_str(text).map_err(|e| format!("not a catalogue snapshot: {e}"))
    }

    /// The regions it covers.
    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.regions.keys().map(String::as_str)
    }

    /// `region`'s catalogue: each type offered there, on-demand in each zone at the snapshot's
    /// price (or the override's), spot at the override's or `SPOT_FRACTION` of on-demand, as
    /// the controller prices types without spot history.
    pub fn catalogue(&self, region: &str, overrides: Option<PriceOverrides>) -> Result<Catalogue, String> {
        let Some(prices) = self.regions.get(region) else {
            return Err(format!(
                "the catalogue has no region {region:?}; it has {}",
                self.regions().collect::<Vec<_>>().join(", ")
            ));
        };
        let types: Vec<InstanceTypeInfo> = self
            .types
            .iter()
            .filter(|t| prices.zones.contains_key(&t.name))
            .map(SnapshotType::info)
            .collect();
        let overridden = overrides.as_ref().is_some_and(|o| !o.0.is_empty());
        let pricing = Pricing::new(overrides, Arc::new(prices.on_demand.clone()), BTreeMap::new());
        let types = with_offerings(types, &prices.zones, &pricing);
        let mut source = self.source.clone();
        if overridden {
            source.push_str("; prices of the types in --price-overrides are the overrides'");
        }
        Ok(Catalogue {
            region: region.to_string(),
            zones: prices.zones.values().flatten().cloned().collect(),
            types,
            source,
            taken: Some(self.taken.clone()).filter(|t| !t.is_empty()),
            prices_estimated: self.prices_estimated,
        })
    }
}

impl SnapshotType {
    fn info(&self) -> InstanceTypeInfo {
        let parts = parse_name(&self.name);
        let accelerators: Vec<AcceleratorInfo> = self
            .accelerators
            .iter()
            .map(|a| AcceleratorInfo {
                name: a.name.clone(),
                manufacturer: a.manufacturer.clone(),
                count: a.count,
            })
            .collect();
        InstanceTypeInfo {
            facts: InstanceFacts {
                name: self.name.clone(),
                vcpus: self.vcpus,
                memory_mib: self.memory_mib,
                architecture: self.arch.clone(),
                max_enis: self.max_enis,
                ipv4_per_eni: self.ipv4_per_eni,
                gpus: self
                    .gpus
                    .iter()
                    .map(|g| GpuInfo {
                        name: g.name.clone(),
                        manufacturer: g.manufacturer.clone(),
                        count: g.count,
                        memory_mib: g.memory_mib,
                    })
                    .collect(),
                neuron_devices: accelerators
                    .iter()
                    .filter(|a| a.manufacturer.eq_ignore_ascii_case("aws"))
                    .map(|a| a.count)
                    .sum(),
                branch_interfaces: branch_interfaces(&self.name),
                hypervisor: self.hypervisor.clone(),
                bare_metal: self.metal,
                local_nvme_gb: self.nvme_gb,
                network_bandwidth_mbps: self.bandwidth_mbps,
                encryption_in_transit: self.encryption_in_transit,
            },
            accelerators,
            category: parts.category,
            family: parts.family,
            generation: parts.generation,
            size: parts.size,
            capacity_types: self.capacity_types.clone(),
            offerings: Vec::new(),
        }
    }
}

/// The region of a zone name: `ap-northeast-2a` → `ap-northeast-2`.
pub fn region_of_zone(zone: &str) -> Option<&str> {
    let region = zone.trim_end_matches(|c: char| c.is_ascii_lowercase());
    (region.len() < zone.len() && region.ends_with(|c: char| c.is_ascii_digit())).then_some(region)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::aws::pricing::{estimate_on_demand, parse_overrides};

    #[test]
    fn the_shipped_snapshot_covers_the_documented_regions_with_estimated_prices() {
        let snapshot = Snapshot::parse(SHIPPED).unwrap();
        assert!(snapshot.prices_estimated && !snapshot.taken.is_empty());
        assert!(snapshot.source.contains("moto"), "{}", snapshot.source);
        for region in ["ap-northeast-2", "us-east-1", "us-west-2", "eu-west-1"] {
            let catalogue = snapshot.catalogue(region, None).unwrap();
            assert!(catalogue.types.len() > 500, "{region}: {}", catalogue.types.len());
            // Every shipped price is karpenter-rs's estimate: refresh-catalogue.py mirrors
            // `estimate_on_demand`, and this fails when the two drift apart.
            for it in &catalogue.types {
                let on_demand = it.offerings.iter().find(|o| o.capacity_type == "on-demand").map(|o| o.price);
                assert_eq!(on_demand, Some(estimate_on_demand(it)), "{region} {}", it.facts.name);
            }
        }
        let seoul = snapshot.catalogue("ap-northeast-2", None).unwrap();
        assert_eq!(
            seoul.zones,
            ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c", "ap-northeast-2d"]
                .map(String::from)
                .into()
        );
        let t3 = seoul.types.iter().find(|t| t.facts.name == "t3.large").unwrap();
        assert_eq!((t3.facts.vcpus, t3.facts.memory_mib, t3.eni_limited_pods()), (2, 8192, 35));
        let g4 = seoul.types.iter().find(|t| t.facts.name == "g4dn.xlarge").unwrap();
        assert_eq!(g4.gpu_count(), 1);
    }

    #[test]
    fn price_overrides_replace_the_snapshot_prices() {
        let snapshot = Snapshot::parse(SHIPPED).unwrap();
        let overrides = parse_overrides("t3.large: {onDemand: 0.104, spot: 0.03}").unwrap();
        let catalogue = snapshot.catalogue("us-east-1", Some(overrides)).unwrap();
        let t3 = catalogue.types.iter().find(|t| t.facts.name == "t3.large").unwrap();
        assert!(t3
            .offerings
            .iter()
            .all(|o| o.price == if o.capacity_type == "spot" { 0.03 } else { 0.104 }));
        assert!(catalogue.source.contains("--price-overrides"));
    }

    #[test]
    fn an_unknown_region_names_the_ones_there_are() {
        let err = Snapshot::parse(SHIPPED).unwrap().catalogue("mars-north-1", None).unwrap_err();
        assert!(err.contains("\"mars-north-1\"") && err.contains("ap-northeast-2"), "{err}");
    }

    #[test]
    fn zones_name_their_region() {
        assert_eq!(region_of_zone("ap-northeast-2a"), Some("ap-northeast-2"));
        assert_eq!(region_of_zone("us-east-1f"), Some("us-east-1"));
        assert_eq!(region_of_zone("apne2-az1"), None);
        assert_eq!(region_of_zone("us-east-1"), None);
    }
}
