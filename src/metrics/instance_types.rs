//! The `karpenter_cloudprovider_instance_type_*` gauges, written from the catalogue last set at
//! scrape time.

use std::sync::{Arc, Mutex};

use super::scrape::TextGauge;
use super::Metrics;

impl Metrics {
    /// Sets the `karpenter_cloudprovider_instance_type_*` gauges to `catalogue` (types no longer
    /// in it go with the old one): vCPUs and memory per type, and each priced offering's price,
    /// on-demand once per type with `zone=""` (the region's price) and spot per zone, as Karpenter
    /// reports them (`aws@v0.31.0:pkg/providers/pricing/pricing.go`).
    pub fn set_instance_types(&self, catalogue: Arc<Vec<crate::cloudprovider::InstanceTypeInfo>>, region: &str) {
        *self.instance_types.catalogue.lock().unwrap_or_else(|e| e.into_inner()) = Some((catalogue, region.to_string()));
    }
}

/// A catalogue and the region it is of.
type RegionCatalogue = (Arc<Vec<crate::cloudprovider::InstanceTypeInfo>>, String);

/// The instance-type gauges, from the catalogue last set.
#[derive(Clone, Default)]
pub struct InstanceTypeGauges {
    catalogue: Arc<Mutex<Option<RegionCatalogue>>>,
}

impl InstanceTypeGauges {
    /// Appends the three families in the text format (nothing before a catalogue is set).
    pub fn render(&self, out: &mut String) {
        let Some((catalogue, region)) = self.catalogue.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return;
        };
        type Fact = fn(&crate::cloudprovider::InstanceTypeInfo) -> f64;
        let facts: [(&'static str, &'static str, Fact); 2] = [
            (
                "karpenter_cloudprovider_instance_type_cpu_cores",
                "vCPUs of an instance type.",
                |t| t.facts.vcpus as f64,
            ),
            (
                "karpenter_cloudprovider_instance_type_memory_bytes",
                "Memory of an instance type, in bytes.",
                |t| t.facts.memory_mib as f64 * 1024.0 * 1024.0,
            ),
        ];
        for (name, help, fact) in facts {
            let mut family = TextGauge::new(out, name, help, &["instance_type"]);
            for t in catalogue.iter() {
                family.sample(&[&t.facts.name], fact(t));
            }
        }
        let mut price = TextGauge::new(
            out,
            "karpenter_cloudprovider_instance_type_price_estimate",
            "USD per hour used to rank an offering: on-demand per region (zone empty), spot per zone.",
            &["instance_type", "capacity_type", "region", "zone"],
        );
        for t in catalogue.iter() {
            let mut on_demand_done = false;
            for o in t.offerings.iter().filter(|o| o.price.is_finite() && o.price > 0.0) {
                // One on-demand series per type (the region's price), one spot series per zone.
                let zone = if o.capacity_type == "spot" {
                    o.zone.as_str()
                } else if std::mem::replace(&mut on_demand_done, true) {
                    continue;
                } else {
                    ""
                };
                price.sample(&[&t.facts.name, &o.capacity_type, &region, zone], o.price);
            }
        }
    }
}
