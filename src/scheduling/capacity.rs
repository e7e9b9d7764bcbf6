//! How much an EC2 instance type offers a Kubernetes node, from the raw facts EC2 publishes
//! (vCPUs, MiB of memory, ENIs and IPv4 addresses per ENI, accelerators) and the node settings
//! (VM memory overhead, max pods, kubelet reservations, eviction thresholds). The formulas are
//! Karpenter's AWS provider's (`pkg/providers/instancetype/types.go`, v0.27), number for number.
//! No I/O here: the cloud provider fetches the facts and calls in.

use std::collections::BTreeMap;

use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha5::KubeletConfiguration;

use super::resources::{to_units, Resources, AMD_GPU, AWS_NEURON, CPU, EPHEMERAL_STORAGE, HABANA_GAUDI, MEMORY, NVIDIA_GPU, PODS, POD_ENI};

/// Share of an instance's memory the hypervisor and OS take (`aws.vmMemoryOverheadPercent`).
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// Root volume size when the node template's block-device mappings do not say (20Gi, every
/// family's default).
pub const DEFAULT_EPHEMERAL_STORAGE_BYTES: i64 = 20 << 30;
/// Pods per node when ENI-limited pod density is off.
pub const DEFAULT_MAX_PODS: i64 = 110;
/// Memory the kubelet keeps free before evicting pods, unless `memory.available` says otherwise.
pub const DEFAULT_EVICTION_MEMORY_BYTES: i64 = 100 << 20;
/// Root-volume space the kubelet keeps free before evicting pods, unless `nodefs.available` says
/// otherwise (`aws@v0.31.0:pkg/providers/instancetype/types.go` `evictionThreshold`).
pub const DEFAULT_EVICTION_NODEFS: &str = "10%";
const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// What EC2 says about an instance type (DescribeInstanceTypes), reduced to what scheduling uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceFacts {
    /// `m5.xlarge`.
    pub name: String,
    /// `VCpuInfo.DefaultVCpus`.
    pub vcpus: i64,
    /// `MemoryInfo.SizeInMiB`.
    pub memory_mib: i64,
    /// Kubernetes architecture: `amd64` or `arm64`.
    pub architecture: String,
    /// `NetworkInfo.MaximumNetworkInterfaces`.
    pub max_enis: i64,
    /// `NetworkInfo.Ipv4AddressesPerInterface`.
    pub ipv4_per_eni: i64,
    /// GPUs, one entry per kind.
    pub gpus: Vec<GpuFacts>,
    /// AWS Inferentia/Trainium devices.
    pub neuron_devices: i64,
    /// Branch network interfaces of a trunking-compatible type (security groups for pods), 0 for
    /// the others: the VPC resource controller's table, `cloudprovider::aws::branch_interfaces`.
    pub branch_interfaces: i64,
    /// `nitro`, `xen`, or empty for bare metal.
    pub hypervisor: String,
    /// Whether the type is a bare-metal (`metal`) size.
    pub bare_metal: bool,
    /// Local NVMe storage in GB (0: none).
    pub local_nvme_gb: i64,
    /// Baseline network bandwidth in Mbps, where known.
    pub network_bandwidth_mbps: Option<i64>,
    /// `NetworkInfo.EncryptionInTransitSupported`.
    pub encryption_in_transit: bool,
}

/// One kind of GPU on an instance type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuFacts {
    /// `T4`, `V100`, `A10G`, ...
    pub name: String,
    /// `NVIDIA`, `AMD`, `Habana`.
    pub manufacturer: String,
    /// How many.
    pub count: i64,
    /// Memory per GPU in MiB.
    pub memory_mib: i64,
}

/// Which AMI family the node boots: it decides a few overhead rules here, and the AMI, user
/// data and block devices at launch (`cloudprovider`). A template naming none gets the
/// Kubernetes version's default (`cloudprovider::default_ami_family`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub enum AmiFamily {
    /// Amazon Linux 2: the EKS bootstrap script.
    #[default]
    Al2,
    /// Amazon Linux 2023: nodeadm's `NodeConfig`; overhead rules as AL2's.
    Al2023,
    /// Bottlerocket: real max-pods for memory overhead, no podsPerCore, no soft eviction.
    Bottlerocket,
    /// Ubuntu.
    Ubuntu,
    /// A user-supplied AMI.
    Custom,
}

impl AmiFamily {
    /// From `spec.amiFamily`; an unsupported family is an error naming it.
    pub fn parse(value: &str) -> Result<AmiFamily, String> {
        match value {
            "AL2" => Ok(AmiFamily::Al2),
            "AL2023" => Ok(AmiFamily::Al2023),
            "Bottlerocket" => Ok(AmiFamily::Bottlerocket),
            "Ubuntu" => Ok(AmiFamily::Ubuntu),
            "Custom" => Ok(AmiFamily::Custom),
            other => Err(format!(
                "amiFamily {other:?} is not supported by karpenter-rs (AL2, AL2023, Bottlerocket, Ubuntu or Custom)"
            )),
        }
    }

    /// The block device whose volume holds the kubelet's ephemeral storage; `None` for Custom,
    /// whose last block-device mapping counts (`aws@v0.27.0:pkg/providers/amifamily/*.go`
    /// `EphemeralBlockDevice`).
    pub fn ephemeral_device(self) -> Option<&'static str> {
        match self {
            AmiFamily::Al2 | AmiFamily::Al2023 => Some("/dev/xvda"),
            AmiFamily::Bottlerocket => Some("/dev/xvdb"),
            AmiFamily::Ubuntu => Some("/dev/sda1"),
            AmiFamily::Custom => None,
        }
    }

    fn uses_eni_limited_memory_overhead(self) -> bool {
        self != AmiFamily::Bottlerocket
    }

    fn pods_per_core_enabled(self) -> bool {
        self != AmiFamily::Bottlerocket
    }

    fn eviction_soft_enabled(self) -> bool {
        self != AmiFamily::Bottlerocket
    }
}

impl std::fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AmiFamily::Al2 => "AL2",
            AmiFamily::Al2023 => "AL2023",
            AmiFamily::Bottlerocket => "Bottlerocket",
            AmiFamily::Ubuntu => "Ubuntu",
            AmiFamily::Custom => "Custom",
        })
    }
}

/// Settings that change what a node offers: the global ones and the Provisioner's kubelet
/// configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSettings {
    /// `aws.vmMemoryOverheadPercent`.
    pub vm_memory_overhead_percent: f64,
    /// `aws.enableENILimitedPodDensity`.
    pub eni_limited_pod_density: bool,
    /// `aws.reservedENIs`: network interfaces left out of the ENI-limited pod count.
    pub reserved_enis: i64,
    /// `aws.enablePodENI`: trunking-compatible types offer `vpc.amazonaws.com/pod-eni`, one per
    /// branch network interface (security groups for pods).
    pub enable_pod_eni: bool,
    /// The node template's AMI family.
    pub ami_family: AmiFamily,
    /// Root volume size in bytes, from the block-device mappings (None: 20Gi).
    pub ephemeral_storage_bytes: Option<i64>,
    /// `kubeletConfiguration.maxPods`.
    pub max_pods: Option<i64>,
    /// `kubeletConfiguration.podsPerCore`.
    pub pods_per_core: Option<i64>,
    /// `kubeletConfiguration.kubeReserved`: each key present replaces the computed amount.
    pub kube_reserved: BTreeMap<String, i64>,
    /// `kubeletConfiguration.systemReserved`: each key present replaces the default.
    pub system_reserved: BTreeMap<String, i64>,
    /// `kubeletConfiguration.evictionHard`.
    pub eviction_hard: BTreeMap<String, String>,
    /// `kubeletConfiguration.evictionSoft`.
    pub eviction_soft: BTreeMap<String, String>,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            eni_limited_pod_density: true,
            reserved_enis: 0,
            enable_pod_eni: false,
            ami_family: AmiFamily::Al2,
            ephemeral_storage_bytes: None,
            max_pods: None,
            pods_per_core: None,
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            eviction_hard: BTreeMap::new(),
            eviction_soft: BTreeMap::new(),
        }
    }
}

impl NodeSettings {
    /// Default global settings with a Provisioner's kubelet configuration applied. Unparsable
    /// reservation quantities are skipped (admission rejects them).
    pub fn from_kubelet(kubelet: Option<&KubeletConfiguration>) -> Self {
        NodeSettings::default().with_kubelet(kubelet)
    }

    /// These (global) settings with a Provisioner's kubelet configuration applied.
    pub fn with_kubelet(self, kubelet: Option<&KubeletConfiguration>) -> Self {
        let mut s = self;
        let Some(k) = kubelet else {
            return s;
        };
        let amounts = |list: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            list.iter()
                .flatten()
                .filter_map(|(name, q)| parse_quantity(&q.0).map(|v| (name.clone(), to_units(name, v))))
                .collect::<BTreeMap<_, _>>()
        };
        s.max_pods = k.max_pods.map(i64::from);
        s.pods_per_core = k.pods_per_core.map(i64::from);
        s.kube_reserved = amounts(&k.kube_reserved);
        s.system_reserved = amounts(&k.system_reserved);
        s.eviction_hard = k.eviction_hard.clone().unwrap_or_default();
        s.eviction_soft = k.eviction_soft.clone().unwrap_or_default();
        s
    }
}

/// Pods an instance's ENIs can address: `maxENIs × (IPv4PerENI − 1) + 2`.
pub fn eni_limited_pods(max_enis: i64, ipv4_per_eni: i64) -> i64 {
    max_enis * (ipv4_per_eni - 1) + 2
}

/// The ENI-limited pod count with `aws.reservedENIs` left out of the interfaces (never fewer
/// than none) (`aws@v0.31.0:pkg/providers/instancetype/types.go` `ENILimitedPods`).
fn eni_limited_pods_of(facts: &InstanceFacts, settings: &NodeSettings) -> i64 {
    eni_limited_pods((facts.max_enis - settings.reserved_enis).max(0), facts.ipv4_per_eni)
}

/// Memory a Graviton (arm64) instance's kernel sets aside for its contiguous memory allocator,
/// which the kubelet never reports (Karpenter v0.28+, `aws/karpenter-provider-aws#3940`).
pub const GRAVITON_CMA_MIB: i64 = 64;

/// Memory capacity in MiB: `M − ⌈M × overhead⌉` where `M` is `SizeInMiB`, less the 64 MiB of
/// contiguous-allocator memory on arm64 (Graviton) types.
pub fn memory_capacity_mib(facts: &InstanceFacts, vm_memory_overhead_percent: f64) -> i64 {
    let memory_mib = if facts.architecture == "arm64" {
        facts.memory_mib - GRAVITON_CMA_MIB
    } else {
        facts.memory_mib
    };
    memory_mib - (memory_mib as f64 * vm_memory_overhead_percent).ceil() as i64
}

/// The `pods` capacity: maxPods if set, else 110 without ENI-limited density, else the ENI limit;
/// then at most `podsPerCore × vCPUs` when podsPerCore is set (not on Bottlerocket).
pub fn max_pods(facts: &InstanceFacts, settings: &NodeSettings) -> i64 {
    let mut count = match settings.max_pods {
        Some(n) => n,
        None if !settings.eni_limited_pod_density => DEFAULT_MAX_PODS,
        None => eni_limited_pods_of(facts, settings),
    };
    if let Some(ppc) = settings.pods_per_core.filter(|p| *p > 0) {
        if settings.ami_family.pods_per_core_enabled() {
            count = count.min(ppc * facts.vcpus);
        }
    }
    count
}

/// kube-reserved CPU in millicores: 6% of the first core, 1% of the second, 0.5% of cores 3–4 and
/// 0.25% of the rest, each tier truncated to whole millicores.
pub fn kube_reserved_cpu_millis(cpu_millis: i64) -> i64 {
    const TIERS: [(i64, i64, f64); 4] = [(0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025)];
    TIERS
        .iter()
        .filter(|(start, _, _)| cpu_millis >= *start)
        .map(|(start, end, pct)| {
            let span = if cpu_millis < *end { cpu_millis - start } else { end - start };
            (span as f64 * pct) as i64
        })
        .sum()
}

/// kube-reserved memory in MiB: `11 × pods + 255`.
pub fn kube_reserved_memory_mib(pods: i64) -> i64 {
    11 * pods + 255
}

/// An eviction signal's amount: a percentage of `capacity` (rounded up; `100%` disables it, so 0)
/// or an absolute quantity. None when unparsable.
pub fn eviction_signal_bytes(capacity_bytes: i64, signal: &str) -> Option<i64> {
    match signal.strip_suffix('%') {
        Some(pct) => {
            let p: f64 = pct.trim().parse().ok()?;
            let p = if p == 100.0 { 0.0 } else { p };
            Some((capacity_bytes as f64 / 100.0 * p).ceil() as i64)
        }
        None => parse_quantity(signal).map(|v| v.ceil() as i64),
    }
}

/// Everything the node has before reservations.
pub fn capacity(facts: &InstanceFacts, settings: &NodeSettings) -> Resources {
    let mut r = Resources::zero()
        .with(CPU, facts.vcpus * 1000)
        .with(MEMORY, memory_capacity_mib(facts, settings.vm_memory_overhead_percent) * MIB)
        .with(PODS, max_pods(facts, settings))
        .with(
            EPHEMERAL_STORAGE,
            settings.ephemeral_storage_bytes.unwrap_or(DEFAULT_EPHEMERAL_STORAGE_BYTES),
        )
        .with(AWS_NEURON, facts.neuron_devices)
        // `aws@v0.27.0:pkg/providers/instancetype/types.go` `awsPodENI`.
        .with(POD_ENI, if settings.enable_pod_eni { facts.branch_interfaces } else { 0 });
    for gpu in &facts.gpus {
        let name = match gpu.manufacturer.to_ascii_lowercase().as_str() {
            "nvidia" => NVIDIA_GPU,
            "amd" => AMD_GPU,
            "habana" => HABANA_GAUDI,
            _ => continue,
        };
        let sum = r.get(name) + gpu.count;
        r.set(name, sum);
    }
    r
}

/// What the kubelet and the OS keep for themselves, and the eviction threshold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overhead {
    /// For Kubernetes daemons (kubelet, container runtime).
    pub kube_reserved: Resources,
    /// For OS daemons.
    pub system_reserved: Resources,
    /// Kept free before the kubelet evicts pods.
    pub eviction_threshold: Resources,
}

impl Overhead {
    /// The three added up.
    pub fn total(&self) -> Resources {
        self.kube_reserved.plus(&self.system_reserved).plus(&self.eviction_threshold)
    }
}

/// The reservations and eviction threshold of a node of this type.
pub fn overhead(facts: &InstanceFacts, settings: &NodeSettings) -> Overhead {
    let eni_pods = eni_limited_pods_of(facts, settings);
    let memory_pods = if settings.ami_family.uses_eni_limited_memory_overhead() {
        eni_pods
    } else {
        max_pods(facts, settings)
    };
    let mut kube_reserved = Resources::zero()
        .with(CPU, kube_reserved_cpu_millis(facts.vcpus * 1000))
        .with(MEMORY, kube_reserved_memory_mib(memory_pods) * MIB)
        .with(EPHEMERAL_STORAGE, GIB);
    for (name, amount) in &settings.kube_reserved {
        kube_reserved.set(name, *amount);
    }
    let mut system_reserved = Resources::zero()
        .with(CPU, 100)
        .with(MEMORY, 100 * MIB)
        .with(EPHEMERAL_STORAGE, GIB);
    for (name, amount) in &settings.system_reserved {
        system_reserved.set(name, *amount);
    }
    let memory = memory_capacity_mib(facts, settings.vm_memory_overhead_percent) * MIB;
    let storage = settings.ephemeral_storage_bytes.unwrap_or(DEFAULT_EPHEMERAL_STORAGE_BYTES);
    let mut signals = vec![&settings.eviction_hard];
    if settings.ami_family.eviction_soft_enabled() {
        signals.push(&settings.eviction_soft);
    }
    let mut eviction_threshold = Resources::zero().with(MEMORY, DEFAULT_EVICTION_MEMORY_BYTES);
    let mut overridden = Resources::zero();
    let mut memory_overridden = false;
    let mut storage_overridden = false;
    for map in signals {
        if let Some(v) = map.get("memory.available").and_then(|s| eviction_signal_bytes(memory, s)) {
            overridden.memory_bytes = overridden.memory_bytes.max(v);
            memory_overridden = true;
        }
        if let Some(v) = map.get("nodefs.available").and_then(|s| eviction_signal_bytes(storage, s)) {
            overridden.ephemeral_storage_bytes = overridden.ephemeral_storage_bytes.max(v);
            storage_overridden = true;
        }
    }
    if memory_overridden {
        eviction_threshold.memory_bytes = overridden.memory_bytes;
    }
    eviction_threshold.ephemeral_storage_bytes = if storage_overridden {
        overridden.ephemeral_storage_bytes
    } else {
        eviction_signal_bytes(storage, DEFAULT_EVICTION_NODEFS).unwrap_or_default()
    };
    Overhead {
        kube_reserved,
        system_reserved,
        eviction_threshold,
    }
}

#[cfg(test)]
mod tests;
