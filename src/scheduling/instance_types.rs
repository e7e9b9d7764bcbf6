//! Instance types as the simulation sees them: labels (as requirements), capacity, overhead and
//! priced offerings per zone and capacity type, plus the queries scheduling needs (allocatable,
//! cheapest matching offering, price order). Plain data: the cloud provider builds them, nothing
//! here knows about AWS APIs. No I/O here.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::apis::v1alpha5::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_CATEGORY_LABEL, INSTANCE_FAMILY_LABEL, INSTANCE_GENERATION_LABEL, INSTANCE_TYPE_LABEL,
    OS_LABEL, REGION_LABEL, ZONE_LABEL,
};

use super::capacity::{self, InstanceFacts, NodeSettings, Overhead};
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;

/// `karpenter.k8s.aws/instance-size`.
pub const INSTANCE_SIZE_LABEL: &str = "karpenter.k8s.aws/instance-size";
/// `karpenter.k8s.aws/instance-cpu`.
pub const INSTANCE_CPU_LABEL: &str = "karpenter.k8s.aws/instance-cpu";
/// `karpenter.k8s.aws/instance-memory` (MiB).
pub const INSTANCE_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-memory";
/// `karpenter.k8s.aws/instance-pods`.
pub const INSTANCE_PODS_LABEL: &str = "karpenter.k8s.aws/instance-pods";
/// `karpenter.k8s.aws/instance-hypervisor`.
pub const INSTANCE_HYPERVISOR_LABEL: &str = "karpenter.k8s.aws/instance-hypervisor";
/// `karpenter.k8s.aws/instance-encryption-in-transit-supported`.
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL: &str = "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// `karpenter.k8s.aws/instance-local-nvme` (GB).
pub const INSTANCE_LOCAL_NVME_LABEL: &str = "karpenter.k8s.aws/instance-local-nvme";
/// `karpenter.k8s.aws/instance-network-bandwidth` (Mbps).
pub const INSTANCE_NETWORK_BANDWIDTH_LABEL: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// `karpenter.k8s.aws/instance-gpu-name`.
pub const INSTANCE_GPU_NAME_LABEL: &str = "karpenter.k8s.aws/instance-gpu-name";
/// `karpenter.k8s.aws/instance-gpu-manufacturer`.
pub const INSTANCE_GPU_MANUFACTURER_LABEL: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// `karpenter.k8s.aws/instance-gpu-count`.
pub const INSTANCE_GPU_COUNT_LABEL: &str = "karpenter.k8s.aws/instance-gpu-count";
/// `karpenter.k8s.aws/instance-gpu-memory` (MiB).
pub const INSTANCE_GPU_MEMORY_LABEL: &str = "karpenter.k8s.aws/instance-gpu-memory";

/// Where and how an instance type can be bought, and for how much.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    /// Availability zone (`ap-northeast-2a`).
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// USD per hour.
    pub price: f64,
    /// False when the offering recently failed with insufficient capacity or has no known price.
    pub available: bool,
}

/// A kind of machine the cloud can launch.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    /// `m5.xlarge`.
    pub name: String,
    /// The labels a node of this type carries, as requirements (instance type, arch, os, zones and
    /// capacity types of its available offerings, `karpenter.k8s.aws/instance-*`).
    pub requirements: Requirements,
    /// Everything the node has (cpu, memory, pods, ephemeral-storage, GPUs...).
    pub capacity: Resources,
    /// Reserved by the kubelet and the OS, and the eviction threshold.
    pub overhead: Overhead,
    /// Every zone × capacity type it is sold in.
    pub offerings: Vec<Offering>,
}

impl InstanceType {
    /// An instance type from EC2's facts: capacity and overhead by the formulas of `capacity`,
    /// labels parsed from the name and facts. `region` adds `topology.kubernetes.io/region`.
    pub fn from_facts(facts: &InstanceFacts, offerings: Vec<Offering>, settings: &NodeSettings, region: Option<&str>) -> Self {
        let capacity = capacity::capacity(facts, settings);
        let overhead = capacity::overhead(facts, settings);
        let mut it = InstanceType {
            name: facts.name.clone(),
            requirements: Requirements::new(),
            capacity,
            overhead,
            offerings,
        };
        it.requirements = it.labels_from_facts(facts, region);
        it
    }

    fn labels_from_facts(&self, facts: &InstanceFacts, region: Option<&str>) -> Requirements {
        let one = |v: String| Requirement::in_values([v]);
        let mut r = Requirements::new()
            .with(INSTANCE_TYPE_LABEL, one(facts.name.clone()))
            .with(ARCH_LABEL, one(facts.architecture.clone()))
            .with(OS_LABEL, one("linux".to_string()))
            .with(INSTANCE_CPU_LABEL, one(facts.vcpus.to_string()))
            .with(INSTANCE_MEMORY_LABEL, one(facts.memory_mib.to_string()))
            .with(INSTANCE_PODS_LABEL, one(self.capacity.pods.to_string()))
            .with(INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL, one(facts.encryption_in_transit.to_string()));
        r.add(
            ZONE_LABEL,
            Requirement::in_values(self.available_offerings().map(|o| o.zone.clone())),
        );
        r.add(
            CAPACITY_TYPE_LABEL,
            Requirement::in_values(self.available_offerings().map(|o| o.capacity_type.clone())),
        );
        if let Some(region) = region {
            r.add(REGION_LABEL, one(region.to_string()));
        }
        if !facts.hypervisor.is_empty() {
            r.add(INSTANCE_HYPERVISOR_LABEL, one(facts.hypervisor.clone()));
        }
        if let Some((family, size)) = facts.name.split_once('.') {
            r.add(INSTANCE_FAMILY_LABEL, one(family.to_string()));
            r.add(INSTANCE_SIZE_LABEL, one(size.to_string()));
            if let Some((category, generation)) = parse_family(family) {
                r.add(INSTANCE_CATEGORY_LABEL, one(category));
                r.add(INSTANCE_GENERATION_LABEL, one(generation));
            }
        }
        if facts.local_nvme_gb > 0 {
            r.add(INSTANCE_LOCAL_NVME_LABEL, one(facts.local_nvme_gb.to_string()));
        }
        if let Some(bw) = facts.network_bandwidth_mbps {
            r.add(INSTANCE_NETWORK_BANDWIDTH_LABEL, one(bw.to_string()));
        }
        if let [gpu] = facts.gpus.as_slice() {
            r.add(INSTANCE_GPU_NAME_LABEL, one(gpu.name.to_lowercase()));
            r.add(INSTANCE_GPU_MANUFACTURER_LABEL, one(gpu.manufacturer.to_lowercase()));
            r.add(INSTANCE_GPU_COUNT_LABEL, one(gpu.count.to_string()));
            r.add(INSTANCE_GPU_MEMORY_LABEL, one(gpu.memory_mib.to_string()));
        }
        r
    }

    /// What pods may use: capacity − kube-reserved − system-reserved − eviction threshold, never
    /// below zero.
    pub fn allocatable(&self) -> Resources {
        self.capacity.minus(&self.overhead.total()).clamp_non_negative()
    }

    /// Offerings that can be launched now.
    pub fn available_offerings(&self) -> impl Iterator<Item = &Offering> {
        self.offerings.iter().filter(|o| o.available)
    }

    /// The cheapest available offering anywhere.
    pub fn cheapest(&self) -> Option<&Offering> {
        self.available_offerings().min_by(|a, b| by_price(a, b))
    }

    /// The cheapest available offering whose zone and capacity type `requirements` allow.
    pub fn cheapest_matching(&self, requirements: &Requirements) -> Option<&Offering> {
        self.available_offerings()
            .filter(|o| offering_allowed(o, requirements))
            .min_by(|a, b| by_price(a, b))
    }

    /// Whether some available offering satisfies `requirements`.
    pub fn has_matching_offering(&self, requirements: &Requirements) -> bool {
        self.available_offerings().any(|o| offering_allowed(o, requirements))
    }
}

/// Whether `requirements` allow the offering's zone and capacity type.
pub fn offering_allowed(o: &Offering, requirements: &Requirements) -> bool {
    requirements.allows(ZONE_LABEL, &o.zone) && requirements.allows(CAPACITY_TYPE_LABEL, &o.capacity_type)
}

fn by_price(a: &Offering, b: &Offering) -> Ordering {
    a.price
        .total_cmp(&b.price)
        .then_with(|| a.zone.cmp(&b.zone))
        .then_with(|| a.capacity_type.cmp(&b.capacity_type))
}

/// `m5d` → (`m`, `5`), `c6gn` → (`c`, `6`), `inf1` → (`inf`, `1`).
fn parse_family(family: &str) -> Option<(String, String)> {
    let category: String = family.chars().take_while(|c| c.is_ascii_lowercase() || *c == '-').collect();
    let generation: String = family[category.len()..].chars().take_while(char::is_ascii_digit).collect();
    if category.is_empty() || generation.is_empty() {
        return None;
    }
    Some((category, generation))
}

/// Orders instance types by the price of their cheapest offering that `requirements` allow
/// (types with none last), ties by name.
pub fn order_by_price(types: &mut [Arc<InstanceType>], requirements: &Requirements) {
    let price = |it: &InstanceType| it.cheapest_matching(requirements).map_or(f64::INFINITY, |o| o.price);
    let mut keyed: Vec<(f64, Arc<InstanceType>)> = types.iter().map(|it| (price(it), it.clone())).collect();
    keyed.sort_by(|(pa, a), (pb, b)| pa.total_cmp(pb).then_with(|| a.name.cmp(&b.name)));
    for (slot, (_, it)) in types.iter_mut().zip(keyed) {
        *slot = it;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::v1alpha5::labels::CAPACITY_TYPE_ON_DEMAND;
    use crate::scheduling::testing::instance_type;

    #[test]
    fn labels_come_from_the_name_and_facts() {
        let it = instance_type("m5.xlarge");
        let r = &it.requirements;
        for (key, want) in [
            (INSTANCE_CATEGORY_LABEL, "m"),
            (INSTANCE_FAMILY_LABEL, "m5"),
            (INSTANCE_GENERATION_LABEL, "5"),
            (INSTANCE_SIZE_LABEL, "xlarge"),
            (INSTANCE_CPU_LABEL, "4"),
            (INSTANCE_MEMORY_LABEL, "16384"),
            (INSTANCE_PODS_LABEL, "58"),
            (ARCH_LABEL, "amd64"),
            (OS_LABEL, "linux"),
        ] {
            assert!(r.allows(key, want), "{key}={want} in {r}");
        }
        assert_eq!(parse_family("c6gn"), Some(("c".into(), "6".into())));
        assert_eq!(parse_family("inf1"), Some(("inf".into(), "1".into())));
        assert_eq!(parse_family("u-6tb1"), Some(("u-".into(), "6".into())));
    }

    #[test]
    fn cheapest_matching_respects_zone_and_capacity_type() {
        let it = instance_type("t3.large");
        let od = Requirements::new().with(CAPACITY_TYPE_LABEL, Requirement::in_values([CAPACITY_TYPE_ON_DEMAND]));
        let spot_cheapest = it.cheapest().expect("t3.large has offerings");
        assert_eq!(spot_cheapest.capacity_type, "spot");
        let o = it.cheapest_matching(&od).expect("on-demand offering");
        assert_eq!(o.capacity_type, "on-demand");
        let zone_b = od.clone().with(ZONE_LABEL, Requirement::in_values(["ap-northeast-2b"]));
        assert_eq!(it.cheapest_matching(&zone_b).map(|o| o.zone.as_str()), Some("ap-northeast-2b"));
        let nowhere = od.with(ZONE_LABEL, Requirement::in_values(["us-east-1a"]));
        assert!(!it.has_matching_offering(&nowhere));
    }

    #[test]
    fn orders_by_cheapest_matching_offering_then_name() {
        let mut types: Vec<Arc<InstanceType>> = ["m5.xlarge", "t3.xlarge", "t3.large", "c5.large"]
            .into_iter()
            .map(|n| Arc::new(instance_type(n)))
            .collect();
        order_by_price(&mut types, &Requirements::new());
        let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["t3.large", "c5.large", "t3.xlarge", "m5.xlarge"]);
    }
}
