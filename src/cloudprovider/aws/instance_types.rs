//! The instance-type catalogue: DescribeInstanceTypes (hvm, x86_64/arm64) and
//! DescribeInstanceTypeOfferings per availability zone, turned into `InstanceTypeInfo` with
//! per-zone offerings and prices. The conversion and the name parsing are pure; only `fetch`
//! talks to EC2. Caching and the unavailable-offerings overlay are in `aws/mod.rs`.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{Filter, LocationType};
use aws_sdk_ec2::Client;

use super::errors;
use super::pricing::Pricing;
use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};
use crate::cloudprovider::{AcceleratorInfo, Error, GpuInfo, InstanceTypeInfo, OfferingInfo};
use crate::scheduling::InstanceFacts;

/// Category, family, generation and size of an instance type name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameParts {
    /// `m` of `m5d.large`, `u` of `u-6tb1.metal`.
    pub category: String,
    /// `m5d` of `m5d.large`.
    pub family: String,
    /// `5` of `m5d.large`.
    pub generation: Option<i64>,
    /// `large` of `m5d.large`.
    pub size: String,
}

/// Splits a name as Karpenter does (`(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.`).
pub fn parse_name(name: &str) -> NameParts {
    let (family, size) = name.split_once('.').unwrap_or((name, ""));
    let category: String = family.chars().take_while(|c| c.is_ascii_lowercase()).collect();
    let mut rest = &family[category.len()..];
    // High-memory `u-6tb1`: skip the `-<n>tb` part before the generation.
    if let Some(tb) = rest.strip_prefix('-') {
        let digits = tb.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tb[digits..].starts_with("tb") {
            rest = &tb[digits + 2..];
        }
    }
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    NameParts {
        category,
        family: family.to_string(),
        generation: digits.parse().ok(),
        size: size.to_string(),
    }
}

/// Kubernetes architecture of an EC2 one (`x86_64` → `amd64`), for the two Karpenter launches.
pub fn kubernetes_architecture(ec2: &str) -> Option<&'static str> {
    match ec2 {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

/// The facts of one described type, without offerings; `None` for types Karpenter never launches
/// (no x86_64/arm64, no hvm).
pub fn convert(it: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<InstanceTypeInfo> {
    let name = it.instance_type()?.as_str().to_string();
    if !it.supported_virtualization_types().iter().any(|v| v.as_str() == "hvm") {
        return None;
    }
    let architecture = it
        .processor_info()?
        .supported_architectures()
        .iter()
        .find_map(|a| kubernetes_architecture(a.as_str()))?
        .to_string();
    let network = it.network_info();
    let default_card = network.and_then(|n| {
        let index = n.default_network_card_index().unwrap_or(0);
        n.network_cards().iter().find(|c| c.network_card_index().unwrap_or(0) == index)
    });
    let max_enis = default_card
        .and_then(|c| c.maximum_network_interfaces())
        .or_else(|| network.and_then(|n| n.maximum_network_interfaces()))
        .unwrap_or(0);
    let gpus = it
        .gpu_info()
        .map(|g| {
            g.gpus()
                .iter()
                .map(|d| GpuInfo {
                    name: d.name().unwrap_or_default().to_lowercase(),
                    manufacturer: d.manufacturer().unwrap_or_default().to_lowercase(),
                    count: d.count().unwrap_or(0).into(),
                    memory_mib: d.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0).into(),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut accelerators: Vec<AcceleratorInfo> = it
        .inference_accelerator_info()
        .map(|a| {
            a.accelerators()
                .iter()
                .map(|d| AcceleratorInfo {
                    name: d.name().unwrap_or_default().to_lowercase(),
                    manufacturer: d.manufacturer().unwrap_or_default().to_lowercase(),
                    count: d.count().unwrap_or(0).into(),
                })
                .collect()
        })
        .unwrap_or_default();
    if let Some(neuron) = it.neuron_info() {
        accelerators.extend(neuron.neuron_devices().iter().map(|d| AcceleratorInfo {
            name: d.name().unwrap_or_default().to_lowercase(),
            manufacturer: "aws".to_string(),
            count: d.count().unwrap_or(0).into(),
        }));
    }
    let storage = it.instance_storage_info();
    let local_nvme_gb = storage
        .filter(|s| s.nvme_support().is_some_and(|n| n.as_str() != "unsupported"))
        .and_then(|s| s.total_size_in_gb());
    let parts = parse_name(&name);
    let neuron_devices = accelerators
        .iter()
        .filter(|a| a.manufacturer.eq_ignore_ascii_case("aws"))
        .map(|a| a.count)
        .sum();
    Some(InstanceTypeInfo {
        facts: InstanceFacts {
            architecture,
            vcpus: it.v_cpu_info().and_then(|v| v.default_v_cpus()).unwrap_or(0).into(),
            memory_mib: it.memory_info().and_then(|m| m.size_in_mib()).unwrap_or(0),
            max_enis: max_enis.into(),
            ipv4_per_eni: network.and_then(|n| n.ipv4_addresses_per_interface()).unwrap_or(0).into(),
            gpus,
            neuron_devices,
            branch_interfaces: super::branch_interfaces::branch_interfaces(&name),
            hypervisor: it.hypervisor().map(|h| h.as_str().to_string()).unwrap_or_default(),
            encryption_in_transit: network.and_then(|n| n.encryption_in_transit_supported()).unwrap_or(false),
            local_nvme_gb: local_nvme_gb.unwrap_or(0),
            network_bandwidth_mbps: default_card
                .and_then(|c| c.baseline_bandwidth_in_gbps())
                .map(|gbps| (gbps * 1000.0).round() as i64),
            bare_metal: it.bare_metal().unwrap_or(false),
            name,
        },
        accelerators,
        category: parts.category,
        family: parts.family,
        generation: parts.generation,
        size: parts.size,
        capacity_types: it
            .supported_usage_classes()
            .iter()
            .map(|u| u.as_str())
            .filter(|u| *u == CAPACITY_TYPE_ON_DEMAND || *u == CAPACITY_TYPE_SPOT)
            .map(str::to_string)
            .collect(),
        offerings: Vec::new(),
    })
}

/// Fills in the offerings of every type: each zone it is offered in × each capacity type it is
/// sold as, priced by `pricing`. All are available; the caller overlays capacity failures.
pub fn with_offerings(
    mut types: Vec<InstanceTypeInfo>,
    zones_by_type: &BTreeMap<String, BTreeSet<String>>,
    pricing: &Pricing,
) -> Vec<InstanceTypeInfo> {
    for it in &mut types {
        let Some(zones) = zones_by_type.get(&it.facts.name) else { continue };
        let on_demand = pricing.on_demand(it);
        for zone in zones {
            for capacity_type in &it.capacity_types {
                let price = if capacity_type == CAPACITY_TYPE_SPOT {
                    pricing.spot(it, zone, on_demand)
                } else {
                    on_demand
                };
                it.offerings.push(OfferingInfo {
                    zone: zone.clone(),
                    capacity_type: capacity_type.clone(),
                    price,
                    available: true,
                });
            }
        }
    }
    types.sort_by(|a, b| a.facts.name.cmp(&b.facts.name));
    types
}

/// Every instance type of the region Karpenter could launch (hvm, x86_64 or arm64).
pub async fn describe_instance_types(ec2: &Client) -> Result<Vec<InstanceTypeInfo>, Error> {
    let mut out = Vec::new();
    let mut pages = ec2
        .describe_instance_types()
        .filters(Filter::builder().name("supported-virtualization-type").values("hvm").build())
        .filters(
            Filter::builder()
                .name("processor-info.supported-architecture")
                .values("x86_64")
                .values("arm64")
                .build(),
        )
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("ec2:DescribeInstanceTypes", e))?;
        out.extend(page.instance_types().iter().filter_map(convert));
    }
    Ok(out)
}

/// Instance type → the availability zones it is offered in.
pub async fn describe_offerings(ec2: &Client) -> Result<BTreeMap<String, BTreeSet<String>>, Error> {
    let mut zones_by_type: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("ec2:DescribeInstanceTypeOfferings", e))?;
        for o in page.instance_type_offerings() {
            if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                zones_by_type.entry(t.as_str().to_string()).or_default().insert(zone.to_string());
            }
        }
    }
    Ok(zones_by_type)
}

/// A plain Nitro instance type with on-demand and spot usage classes and no offerings yet, for
/// the tests of this provider.
#[cfg(test)]
pub(crate) fn test_instance_type(name: &str, architecture: &str, vcpus: i64, memory_gib: i64) -> InstanceTypeInfo {
    let parts = parse_name(name);
    InstanceTypeInfo {
        facts: InstanceFacts {
            name: name.into(),
            architecture: architecture.into(),
            vcpus,
            memory_mib: memory_gib * 1024,
            max_enis: 3,
            ipv4_per_eni: 12,
            gpus: vec![],
            neuron_devices: 0,
            branch_interfaces: 0,
            hypervisor: "nitro".into(),
            encryption_in_transit: false,
            local_nvme_gb: 0,
            network_bandwidth_mbps: None,
            bare_metal: false,
        },
        accelerators: vec![],
        category: parts.category,
        family: parts.family,
        generation: parts.generation,
        size: parts.size,
        capacity_types: vec!["on-demand".into(), "spot".into()],
        offerings: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(category: &str, family: &str, generation: Option<i64>, size: &str) -> NameParts {
        NameParts {
            category: category.into(),
            family: family.into(),
            generation,
            size: size.into(),
        }
    }

    #[test]
    fn parses_category_family_generation_and_size_from_names() {
        assert_eq!(parse_name("t3.large"), parts("t", "t3", Some(3), "large"));
        assert_eq!(parse_name("m5d.24xlarge"), parts("m", "m5d", Some(5), "24xlarge"));
        assert_eq!(parse_name("c7gn.metal"), parts("c", "c7gn", Some(7), "metal"));
        assert_eq!(parse_name("inf2.xlarge"), parts("inf", "inf2", Some(2), "xlarge"));
        assert_eq!(parse_name("u-6tb1.metal"), parts("u", "u-6tb1", Some(1), "metal"));
        assert_eq!(parse_name("m7i-flex.large"), parts("m", "m7i-flex", Some(7), "large"));
        assert_eq!(parse_name("mac2-m2pro.metal"), parts("mac", "mac2-m2pro", Some(2), "metal"));
    }

    #[test]
    fn maps_ec2_architectures_to_kubernetes_ones() {
        assert_eq!(kubernetes_architecture("x86_64"), Some("amd64"));
        assert_eq!(kubernetes_architecture("arm64"), Some("arm64"));
        assert_eq!(kubernetes_architecture("i386"), None);
        assert_eq!(kubernetes_architecture("arm64_mac"), None);
    }

    #[test]
    fn converts_a_described_type_with_eni_and_gpu_facts() {
        use aws_sdk_ec2::types::{
            ArchitectureType, GpuDeviceInfo, GpuDeviceMemoryInfo, GpuInfo as Ec2GpuInfo, InstanceType, InstanceTypeHypervisor, MemoryInfo,
            NetworkCardInfo, NetworkInfo, ProcessorInfo, UsageClassType, VCpuInfo, VirtualizationType,
        };
        let described = aws_sdk_ec2::types::InstanceTypeInfo::builder()
            .instance_type(InstanceType::from("g4dn.xlarge"))
            .supported_virtualization_types(VirtualizationType::Hvm)
            .processor_info(ProcessorInfo::builder().supported_architectures(ArchitectureType::X8664).build())
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(4).build())
            .memory_info(MemoryInfo::builder().size_in_mib(16384).build())
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(3)
                    .ipv4_addresses_per_interface(10)
                    .network_cards(
                        NetworkCardInfo::builder()
                            .network_card_index(0)
                            .maximum_network_interfaces(3)
                            .baseline_bandwidth_in_gbps(5.0)
                            .build(),
                    )
                    .build(),
            )
            .gpu_info(
                Ec2GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .name("T4")
                            .manufacturer("NVIDIA")
                            .count(1)
                            .memory_info(GpuDeviceMemoryInfo::builder().size_in_mib(16384).build())
                            .build(),
                    )
                    .build(),
            )
            .hypervisor(InstanceTypeHypervisor::Nitro)
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
            .build();
        let it = convert(&described).expect("an hvm x86_64 type converts");
        assert_eq!(it.facts.name, "g4dn.xlarge");
        assert_eq!(it.facts.architecture, "amd64");
        assert_eq!(
            (it.facts.vcpus, it.facts.memory_mib, it.facts.max_enis, it.facts.ipv4_per_eni),
            (4, 16384, 3, 10)
        );
        assert_eq!(it.eni_limited_pods(), 29);
        assert_eq!(
            it.facts.gpus,
            vec![GpuInfo {
                name: "t4".into(),
                manufacturer: "nvidia".into(),
                count: 1,
                memory_mib: 16384
            }]
        );
        assert!(it.needs_accelerated_ami());
        assert_eq!(it.facts.network_bandwidth_mbps, Some(5000));
        assert_eq!(it.facts.hypervisor, "nitro");
        assert_eq!(it.capacity_types, vec!["on-demand", "spot"]);
        assert_eq!((it.category.as_str(), it.generation, it.size.as_str()), ("g", Some(4), "xlarge"));
    }

    #[test]
    fn prices_every_zone_and_capacity_type_of_a_type() {
        let it = test_instance_type("t3.large", "amd64", 2, 8);
        let zones = BTreeMap::from([(
            "t3.large".to_string(),
            BTreeSet::from(["ap-northeast-2a".to_string(), "ap-northeast-2c".to_string()]),
        )]);
        let pricing = Pricing::new(
            Some(super::super::pricing::parse_overrides("t3.large: 0.104").unwrap()),
            Default::default(),
            BTreeMap::from([(("t3.large".to_string(), "ap-northeast-2a".to_string()), 0.03)]),
        );
        let typed = with_offerings(vec![it], &zones, &pricing);
        let offers: Vec<_> = typed[0]
            .offerings
            .iter()
            .map(|o| (o.zone.as_str(), o.capacity_type.as_str(), o.price))
            .collect();
        assert_eq!(
            offers,
            vec![
                ("ap-northeast-2a", "on-demand", 0.104),
                ("ap-northeast-2a", "spot", 0.03),
                ("ap-northeast-2c", "on-demand", 0.104),
                ("ap-northeast-2c", "spot", 0.0364),
            ]
        );
        assert_eq!(typed[0].cheapest().unwrap().price, 0.03);
    }
}
