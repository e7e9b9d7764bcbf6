//! Where `nodes` finds the price of a node that carries no price annotation: the catalogue
//! snapshot shipped in the binary (`simulate`'s), or the live catalogue read from EC2 and the
//! Pricing API as `run` reads it (`--live-prices`), which falls back to the snapshot for what it
//! does not know. Pure: the live catalogue is read in `live`.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;

use super::Price;
use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_SPOT, REGION_LABEL, ZONE_LABEL};
use crate::cloudprovider::aws::pricing::Pricing;
use crate::cloudprovider::InstanceTypeInfo;

/// Prices of instance types nobody annotated.
pub trait PriceBook {
    /// The price of an offering, if known, and whether it is an estimate.
    fn price(&self, region: &str, instance_type: &str, capacity_type: &str, zone: &str) -> Option<Price>;
    /// Where the prices come from, for the header.
    fn source(&self) -> String;
}

/// No prices beyond the annotations.
pub struct NoPrices;

impl PriceBook for NoPrices {
    fn price(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Price> {
        None
    }

    fn source(&self) -> String {
        "none".to_string()
    }
}

/// Prices from the catalogue snapshot shipped in the binary (`simulate`'s), built per region on
/// first use. They are karpenter-rs's estimates, not AWS prices: every one is marked estimated.
#[derive(Default)]
pub struct SnapshotPrices {
    regions: std::sync::Mutex<HashMap<String, RegionPrices>>,
}

/// One region's prices: `(instance type, capacity type, zone)` → USD/h.
type RegionPrices = HashMap<(String, String, String), f64>;

impl PriceBook for SnapshotPrices {
    fn price(&self, region: &str, instance_type: &str, capacity_type: &str, zone: &str) -> Option<Price> {
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        let book = regions.entry(region.to_string()).or_insert_with(|| snapshot_book(region));
        book.get(&(instance_type.to_string(), capacity_type.to_string(), zone.to_string()))
            .map(|&usd_per_hour| Price {
                usd_per_hour,
                estimated: true,
            })
    }

    fn source(&self) -> String {
        "the built-in snapshot (estimates, ~)".to_string()
    }
}

fn snapshot_book(region: &str) -> RegionPrices {
    let Ok(snapshot) = crate::simulate::catalogue::Snapshot::parse(crate::simulate::catalogue::SHIPPED) else {
        return HashMap::new();
    };
    let Ok(catalogue) = snapshot.catalogue(region, None) else {
        return HashMap::new();
    };
    let mut book = HashMap::new();
    for t in &catalogue.types {
        for o in &t.offerings {
            if o.price.is_finite() && o.price > 0.0 {
                book.insert((t.facts.name.clone(), o.capacity_type.clone(), o.zone.clone()), o.price);
            }
        }
    }
    book
}

/// One region's prices as the cloud provider read them (EC2's offerings and spot price history,
/// the Pricing API, the price overrides), with the snapshot for other regions and unknown types.
pub struct LivePrices {
    region: String,
    offerings: HashMap<(String, String, String), Price>,
    fallback: SnapshotPrices,
}

impl LivePrices {
    /// The prices of `types`, the catalogue of `region`; a price is an estimate where `pricing`
    /// says karpenter-rs estimated it (no Pricing API or override price for on-demand, no spot
    /// price history or override for spot).
    pub fn new(region: &str, types: &[InstanceTypeInfo], pricing: &Pricing) -> LivePrices {
        let mut offerings = HashMap::new();
        for t in types {
            for o in &t.offerings {
                if !(o.price.is_finite() && o.price > 0.0) {
                    continue;
                }
                let estimated = if o.capacity_type == CAPACITY_TYPE_SPOT {
                    pricing.is_spot_estimated(t, &o.zone)
                } else {
                    pricing.is_estimated(t)
                };
                offerings.insert(
                    (t.facts.name.clone(), o.capacity_type.clone(), o.zone.clone()),
                    Price {
                        usd_per_hour: o.price,
                        estimated,
                    },
                );
            }
        }
        LivePrices {
            region: region.to_string(),
            offerings,
            fallback: SnapshotPrices::default(),
        }
    }

    /// The region the prices are of.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// How many offerings are priced, and how many of those are estimates.
    pub fn counts(&self) -> (usize, usize) {
        (self.offerings.len(), self.offerings.values().filter(|p| p.estimated).count())
    }
}

impl PriceBook for LivePrices {
    fn price(&self, region: &str, instance_type: &str, capacity_type: &str, zone: &str) -> Option<Price> {
        if region == self.region {
            if let Some(price) = self
                .offerings
                .get(&(instance_type.to_string(), capacity_type.to_string(), zone.to_string()))
            {
                return Some(*price);
            }
        }
        self.fallback.price(region, instance_type, capacity_type, zone)
    }

    fn source(&self) -> String {
        format!(
            "live from EC2 and the Pricing API in {} (~: karpenter-rs's estimate where AWS gave none), else the built-in snapshot (~)",
            self.region
        )
    }
}

/// The region of the first of `nodes` that names one (its region label, else its zone's).
pub fn region_of_nodes<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Option<String> {
    nodes.into_iter().find_map(|n| {
        let labels = n.metadata.labels.as_ref()?;
        labels.get(REGION_LABEL).cloned().or_else(|| {
            labels
                .get(ZONE_LABEL)
                .and_then(|z| crate::simulate::catalogue::region_of_zone(z))
                .map(str::to_string)
        })
    })
}

/// The snapshot's prices while live prices are loading or after they failed, saying why.
pub struct Fallback {
    /// Why the live prices are not used (`loading live prices`, or the error).
    pub reason: String,
    /// The snapshot.
    pub snapshot: SnapshotPrices,
}

impl PriceBook for Fallback {
    fn price(&self, region: &str, instance_type: &str, capacity_type: &str, zone: &str) -> Option<Price> {
        self.snapshot.price(region, instance_type, capacity_type, zone)
    }

    fn source(&self) -> String {
        format!("{} ({})", self.snapshot.source(), self.reason)
    }
}
