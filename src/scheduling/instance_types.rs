//! Instance types as the simulation sees them: labels (as requirements), capacity, overhead and
//! priced offerings per zone and capacity type, plus the queries scheduling needs (allocatable,
//! cheapest matching offering, price order). Plain data: the cloud provider builds them, nothing
//! here knows about AWS APIs. No I/O here.

use std::collections::BTreeMap;
use std::cmp::Ordering;
use std::sync::Arc;

use crate::apis::v1alpha5::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_ACCELERATOR_LABELS, INSTANCE_CATEGORY_LABEL, INSTANCE_CPU_LABEL,
    INSTANCE_ENCRYPTION_IN_TRANSIT_LABEL, INSTANCE_FAMILY_LABEL, INSTANCE_GENERATION_LABEL, INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_GPU_MANUFACTURER_LABEL, INSTANCE_GPU_MEMORY_LABEL, INSTANCE_GPU_NAME_LABEL, INSTANCE_HYPERVISOR_LABEL,
    INSTANCE_LOCAL_NVME_LABEL, INSTANCE_MEMORY_LABEL, INSTANCE_NETWORK_BANDWIDTH_LABEL, INSTANCE_PODS_LABEL,
    INSTANCE_SIZE_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL, REGION_LABEL, ZONE_LABEL,
};

use super::capacity::{self, InstanceFacts, NodeSettings, Overhead};
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;


/// Keys of hardware an instance type may lack: `DoesNotExist` on a type without it, so that a
/// requirement on the hardware (`instance-local-nvme Gt 100`, `instance-gpu-name In [t4]`)
/// excludes that type instead of being met by a key the type never defined (Karpenter's
/// `computeRequirements`, aws@v0.27.0:pkg/providers/instancetype/types.go).
pub const HARDWARE_LABELS: [&str; 6] = [
    INSTANCE_LOCAL_NVME_LABEL,
    INSTANCE_NETWORK_BANDWIDTH_LABEL,
    INSTANCE_GPU_NAME_LABEL,
    INSTANCE_GPU_MANUFACTURER_LABEL,
    INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_GPU_MEMORY_LABEL,
];

/// A name EC2 reports (`NVIDIA`, `RTX PRO 4500`) as a label value: lower case, spaces as dashes
/// (Karpenter's `lowerKabobCase`); any other character a label value may not hold becomes a
/// dash too, and ends that are not alphanumeric are trimmed.
pub fn label_value(name: &str) -> String {
    let kabob: String = name
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c.to_ascii_lowercase() } else { '-' })
        .collect();
    let trimmed = kabob.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    trimmed.chars().take(63).collect::<String>().trim_end_matches(|c: char| !c.is_ascii_alphanumeric()).to_string()
}

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
        let mut hardware: BTreeMap<&str, String> = BTreeMap::new();
        if facts.local_nvme_gb > 0 {
            hardware.insert(INSTANCE_LOCAL_NVME_LABEL, facts.local_nvme_gb.to_string());
        }
        if let Some(bw) = facts.network_bandwidth_mbps {
            hardware.insert(INSTANCE_NETWORK_BANDWIDTH_LABEL, bw.to_string());
        }
        if let [gpu] = facts.gpus.as_slice() {
            hardware.insert(INSTANCE_GPU_NAME_LABEL, label_value(&gpu.name));
            hardware.insert(INSTANCE_GPU_MANUFACTURER_LABEL, label_value(&gpu.manufacturer));
            hardware.insert(INSTANCE_GPU_COUNT_LABEL, gpu.count.to_string());
            hardware.insert(INSTANCE_GPU_MEMORY_LABEL, gpu.memory_mib.to_string());
        }
        for key in HARDWARE_LABELS {
            let requirement = match hardware.remove(key).filter(|v| !v.is_empty()) {
                Some(value) => one(value),
                None => Requirement::does_not_exist(),
            };
            r.add(key, requirement);
        }
        // Accelerators (Inferentia, Trainium) are not in the facts: a type with Neuron devices
        // leaves the keys undefined (any requirement on them is met), every other type has none.
        if facts.neuron_devices == 0 {
            for key in INSTANCE_ACCELERATOR_LABELS {
                r.add(key, Requirement::does_not_exist());
            }
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
    // Karpenter's `(^[a-z]+)(\-[0-9]+tb)?([0-9]+)`: the high-memory `u-6tb1` is category `u`,
    // generation 1 (a category `u-` would be a label value the API server refuses).
    let category: String = family.chars().take_while(char::is_ascii_lowercase).collect();
    let mut rest = &family[category.len()..];
    if let Some(after) = rest.strip_prefix('-') {
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && after[digits..].starts_with("tb") {
            rest = &after[digits + 2..];
        }
    }
    let generation: String = rest.chars().take_while(char::is_ascii_digit).collect();
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
        assert_eq!(parse_family("u-6tb1"), Some(("u".into(), "1".into())));
        assert_eq!(parse_family("u7i-12tb"), Some(("u".into(), "7".into())));
    }

    #[test]
    fn requirements_on_hardware_exclude_types_without_it() {
        let gt = |key: &str, n: i64| Requirements::new().with(key, Requirement::from_operator("Gt", &[n.to_string()]));
        let gpu_name = |name: &str| Requirements::new().with(INSTANCE_GPU_NAME_LABEL, Requirement::in_values([name]));
        let (c5, g4dn) = (instance_type("c5.large"), instance_type("g4dn.xlarge"));
        assert!(!c5.requirements.is_compatible(&gt(INSTANCE_LOCAL_NVME_LABEL, 100)), "no NVMe");
        assert!(c5.requirements.compatible(&gt(INSTANCE_LOCAL_NVME_LABEL, 100)).is_err());
        assert!(!c5.requirements.is_compatible(&gpu_name("t4")), "no GPU");
        assert!(g4dn.requirements.is_compatible(&gpu_name("t4")));
        assert!(!g4dn.requirements.is_compatible(&gpu_name("v100")));
        assert!(!c5.requirements.is_compatible(&gt(INSTANCE_NETWORK_BANDWIDTH_LABEL, 1000)), "no bandwidth figure");
        let accelerator = Requirements::new().with(INSTANCE_ACCELERATOR_LABELS[0], Requirement::in_values(["inferentia"]));
        assert!(!c5.requirements.is_compatible(&accelerator), "no accelerator");
        // Excluding hardware a type lacks is met.
        let no_gpu = Requirements::new().with(INSTANCE_GPU_COUNT_LABEL, Requirement::does_not_exist());
        assert!(c5.requirements.is_compatible(&no_gpu));
        assert!(!g4dn.requirements.is_compatible(&no_gpu));
        // And a node of a type without the hardware gets no label for it.
        assert!(c5.requirements.node_labels().keys().all(|k| !HARDWARE_LABELS.contains(&k.as_str())), "{:?}", c5.requirements.node_labels());
    }

    #[test]
    fn hardware_names_become_label_values_the_api_server_accepts() {
        assert_eq!(label_value("T4"), "t4");
        assert_eq!(label_value("NVIDIA"), "nvidia");
        assert_eq!(label_value("RTX PRO 4500"), "rtx-pro-4500");
        assert_eq!(label_value(" Radeon Pro V520 "), "radeon-pro-v520");
        assert_eq!(label_value("A10G/24GB (x)"), "a10g-24gb--x");
        assert_eq!(label_value(&"x".repeat(70)).len(), 63);
        assert_eq!(label_value("-"), "");
        let mut facts = crate::scheduling::testing::facts("g4dn.xlarge");
        facts.gpus[0].name = "RTX PRO 4500".into();
        let it = InstanceType::from_facts(&facts, vec![], &NodeSettings::default(), None);
        assert!(it.requirements.allows(INSTANCE_GPU_NAME_LABEL, "rtx-pro-4500"), "{}", it.requirements);
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
