//! The benchmarks' shared fixture: the synthetic catalogue, the bench Provisioner, the pod
//! generator and the cost lower bound, as documented at the top of `scheduling.rs`.

#![allow(dead_code)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_rs::apis::v1alpha5::Provisioner;
use karpenter_rs::scheduling::{
    GpuFacts, InstanceFacts, InstanceType, NodeSettings, Offering, ProvisionerInput, Resources, SimulationInput,
};
use serde_json::json;

pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
pub const CPUS: [&str; 5] = ["100m", "250m", "500m", "1", "1.5"];
pub const MEMORIES: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];
pub const SIZES: [(&str, i64, i64, i64); 10] = [
    // (size, vCPUs, ENIs, IPv4 per ENI)
    ("medium", 1, 2, 4),
    ("large", 2, 3, 10),
    ("xlarge", 4, 4, 15),
    ("2xlarge", 8, 4, 15),
    ("4xlarge", 16, 8, 30),
    ("8xlarge", 32, 8, 30),
    ("12xlarge", 48, 8, 30),
    ("16xlarge", 64, 15, 50),
    ("24xlarge", 96, 15, 50),
    ("32xlarge", 128, 15, 50),
];
pub const SIZE_48XL: (&str, i64, i64, i64) = ("48xlarge", 192, 15, 50);

/// splitmix64: a tiny deterministic generator, so the bench needs no extra dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// (family, memory GiB per vCPU, price factor, arch, GPUs per 4 vCPUs, extra sizes)
pub fn families() -> Vec<(&'static str, i64, f64, &'static str, i64, bool)> {
    let mut out = Vec::new();
    for (f, big) in [("t3", false), ("t3a", false)] {
        out.push((f, 4, if f == "t3a" { 0.87 * 0.9 } else { 0.87 }, "amd64", 0, big));
    }
    let x86 = [
        "c5", "c5a", "c5ad", "c5d", "c5n", "c6a", "c6i", "c6id", "c6in", "c7a", "c7i", "m5", "m5a", "m5ad", "m5d", "m5dn", "m5n", "m6a",
        "m6i", "m6id", "m6idn", "m6in", "m7a", "m7i", "r5", "r5a", "r5ad", "r5b", "r5d", "r5dn", "r5n", "r6a", "r6i", "r6id", "r6idn",
        "r6in", "r7a", "r7i",
    ];
    for f in x86 {
        let category = &f[..1];
        let gen = &f[1..2];
        let suffix = &f[2..];
        let mut factor = match category {
            "c" => 1.08,
            "r" => 0.96,
            _ => 1.0,
        };
        if suffix.contains('a') {
            factor *= 0.9;
        }
        if suffix.contains('d') {
            factor *= 1.15;
        }
        if suffix.contains('n') || suffix.contains('b') {
            factor *= 1.25;
        }
        if gen == "7" {
            factor *= 1.05;
        }
        let mem = match category {
            "c" => 2,
            "r" => 8,
            _ => 4,
        };
        out.push((f, mem, factor, "amd64", 0, gen != "5"));
    }
    for f in ["c6g", "c6gd", "c7g", "m6g", "m6gd", "m7g", "r6g", "r6gd", "r7g"] {
        let mem = match &f[..1] {
            "c" => 2,
            "r" => 8,
            _ => 4,
        };
        out.push((f, mem, 0.8, "arm64", 0, false));
    }
    out.push(("g4dn", 4, 1.0, "amd64", 1, false));
    out.push(("g5", 4, 1.1, "amd64", 1, false));
    out
}

/// The synthetic catalogue described in the module documentation.
pub fn catalogue() -> Vec<Arc<InstanceType>> {
    let mut out = Vec::new();
    for (family, mem_per_cpu, factor, arch, gpus_per_4, big) in families() {
        let sizes: Vec<(&str, i64, i64, i64)> = if family.starts_with('t') {
            SIZES[1..4].to_vec()
        } else {
            let mut s: Vec<_> = SIZES[1..9].to_vec();
            if big {
                s.push(SIZES[9]);
                s.push(SIZE_48XL);
            }
            s
        };
        for (size, vcpus, enis, ips) in sizes {
            let name = format!("{family}.{size}");
            let memory_gib = vcpus * mem_per_cpu;
            let gpus = (gpus_per_4 * vcpus / 4).min(4 * gpus_per_4);
            let price = (vcpus as f64 * 0.0304 + memory_gib as f64 * 0.0044) * factor + gpus as f64 * 0.40;
            let facts = InstanceFacts {
                name: name.clone(),
                vcpus,
                memory_mib: memory_gib * 1024,
                architecture: arch.to_string(),
                max_enis: enis,
                ipv4_per_eni: ips,
                gpus: if gpus > 0 {
                    vec![GpuFacts {
                        name: "A10G".into(),
                        manufacturer: "NVIDIA".into(),
                        count: gpus,
                        memory_mib: 24576,
                    }]
                } else {
                    Vec::new()
                },
                hypervisor: "nitro".into(),
                ..Default::default()
            };
            let offerings = ZONES
                .iter()
                .flat_map(|z| {
                    [("on-demand", price), ("spot", price * 0.35)].map(|(ct, p)| Offering {
                        zone: z.to_string(),
                        capacity_type: ct.to_string(),
                        price: p,
                        available: true,
                    })
                })
                .collect();
            out.push(Arc::new(InstanceType::from_facts(
                &facts,
                offerings,
                &NodeSettings::default(),
                Some("us-east-1"),
            )));
        }
    }
    out
}

pub fn provisioner() -> Provisioner {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {"requirements": [
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
            {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]}
        ]}
    }))
    .expect("bench provisioner decodes")
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    Plain,
    ZonalSpread,
    HostnameAntiAffinity,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::ZonalSpread => "zonal-spread",
            Variant::HostnameAntiAffinity => "hostname-anti-affinity",
        }
    }
}

pub fn pods(n: usize, variant: Variant) -> Vec<Pod> {
    let mut rng = Rng(0x5EED_2023);
    (0..n)
        .map(|i| {
            let requests = [
                ("cpu".to_string(), Quantity(rng.pick(&CPUS).to_string())),
                ("memory".to_string(), Quantity(rng.pick(&MEMORIES).to_string())),
            ];
            let mut pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("pod-{i:05}"), "namespace": "bench", "uid": format!("uid-{i:05}"),
                             "labels": {"app": "bench"}},
                "spec": {"containers": []}
            }))
            .expect("bench pod decodes");
            let mut spec = PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(requests.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            };
            match variant {
                Variant::Plain => {}
                Variant::ZonalSpread => {
                    spec = serde_json::from_value(json!({
                        "containers": spec.containers,
                        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "bench"}}}]
                    }))
                    .expect("spread spec decodes");
                }
                Variant::HostnameAntiAffinity => {
                    spec = serde_json::from_value(json!({
                        "containers": spec.containers,
                        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "bench"}}}]}}
                    }))
                    .expect("anti-affinity spec decodes");
                }
            }
            pod.spec = Some(spec);
            pod
        })
        .collect()
}

pub fn input(n: usize, variant: Variant, types: &[Arc<InstanceType>]) -> SimulationInput {
    SimulationInput {
        pods: pods(n, variant).into_iter().map(Arc::new).collect(),
        provisioners: vec![ProvisionerInput {
            provisioner: provisioner(),
            instance_types: types.to_vec(),
        }],
        ..Default::default()
    }
}

/// Instance types the bench Provisioner allows (same rules as its requirements).
pub fn allowed(types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
    let label = |it: &InstanceType, key: &str| {
        it.requirements
            .get(key)
            .and_then(|r| r.any())
            .map(str::to_string)
            .unwrap_or_default()
    };
    types
        .iter()
        .filter(|it| {
            label(it, "kubernetes.io/arch") == "amd64"
                && ["c", "m", "r"].contains(&label(it, "karpenter.k8s.aws/instance-category").as_str())
                && label(it, "karpenter.k8s.aws/instance-generation").parse::<i64>().unwrap_or(0) > 2
        })
        .cloned()
        .collect()
}

pub fn on_demand_price(it: &InstanceType) -> f64 {
    it.offerings
        .iter()
        .filter(|o| o.capacity_type == "on-demand")
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min)
}

pub fn lower_bound(total: &Resources, allowed: &[Arc<InstanceType>]) -> f64 {
    let per_cpu = allowed
        .iter()
        .map(|it| on_demand_price(it) / (it.capacity.cpu_millis as f64 / 1000.0))
        .fold(f64::INFINITY, f64::min);
    let per_gib = allowed
        .iter()
        .map(|it| on_demand_price(it) / (it.capacity.memory_bytes as f64 / (1u64 << 30) as f64))
        .fold(f64::INFINITY, f64::min);
    let cpu = total.cpu_millis as f64 / 1000.0 * per_cpu;
    let mem = total.memory_bytes as f64 / (1u64 << 30) as f64 * per_gib;
    cpu.max(mem)
}

/// Karpenter's `fake.InstanceTypes(total)` (sigs.k8s.io/karpenter `pkg/cloudprovider/fake`) as our
/// instance types: `fake-it-<i>` with i+1 vCPUs, 2(i+1) GiB and 10(i+1) pods; amd64; linux,
/// windows and darwin; offerings spot in test-zone-1/2 and on-demand in test-zone-1/2/3, all at
/// 0.1 × vCPUs + 0.1 × memory bytes / 1e9; kube-reserved 100m cpu and 10Mi memory; and fake's
/// labels `size` (large above 4 vCPUs and 8Gi, else small), `special` (optional on large types,
/// else DoesNotExist) and `integer` (the vCPU count).
pub fn fake_instance_types(total: usize) -> Vec<Arc<InstanceType>> {
    use karpenter_rs::scheduling::{Overhead, Requirement, Requirements};
    (0..total as i64)
        .map(|i| {
            let cpus = i + 1;
            let memory_bytes = (2 * cpus) << 30;
            let name = format!("fake-it-{i}");
            let price = 0.1 * cpus as f64 + 0.1 * memory_bytes as f64 / 1e9;
            let offerings = [
                ("spot", "test-zone-1"),
                ("spot", "test-zone-2"),
                ("on-demand", "test-zone-1"),
                ("on-demand", "test-zone-2"),
                ("on-demand", "test-zone-3"),
            ]
            .map(|(ct, zone)| Offering {
                zone: zone.to_string(),
                capacity_type: ct.to_string(),
                price,
                available: true,
            })
            .to_vec();
            let large = cpus > 4 && memory_bytes > 8 << 30;
            let requirements = Requirements::new()
                .with("node.kubernetes.io/instance-type", Requirement::in_values([name.clone()]))
                .with("kubernetes.io/arch", Requirement::in_values(["amd64"]))
                .with("kubernetes.io/os", Requirement::in_values(["darwin", "linux", "windows"]))
                .with(
                    "topology.kubernetes.io/zone",
                    Requirement::in_values(["test-zone-1", "test-zone-2", "test-zone-3"]),
                )
                .with("karpenter.sh/capacity-type", Requirement::in_values(["on-demand", "spot"]))
                .with("size", Requirement::in_values([if large { "large" } else { "small" }]))
                .with(
                    "special",
                    if large {
                        Requirement::in_values(["optional"])
                    } else {
                        Requirement::does_not_exist()
                    },
                )
                .with("integer", Requirement::in_values([cpus.to_string()]));
            Arc::new(InstanceType {
                name,
                requirements,
                capacity: Resources {
                    cpu_millis: cpus * 1000,
                    memory_bytes,
                    pods: cpus * 10,
                    ..Resources::zero()
                },
                overhead: Overhead {
                    kube_reserved: Resources {
                        cpu_millis: 100,
                        memory_bytes: 10 << 20,
                        ..Resources::zero()
                    },
                    system_reserved: Resources::zero(),
                    eviction_threshold: Resources::zero(),
                },
                offerings,
            })
        })
        .collect()
}

/// The NodePool of Karpenter's scheduling benchmark (`test.NodePool` with only limits set), as a
/// Provisioner: no requirements, limits cpu 10000000 and memory 10000000Gi.
pub fn karpenter_bench_provisioner() -> Provisioner {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
        "metadata": {"name": "default"},
        "spec": {"limits": {"resources": {"cpu": "10000000", "memory": "10000000Gi"}}}
    }))
    .expect("karpenter bench provisioner decodes")
}

/// Karpenter's `makeDiversePods(count)` (scheduling_benchmark_test.go): count/5 each of generic
/// pods, zonal topology spread, hostname topology spread, zonal self-affinity and hostname
/// anti-affinity, the remainder generic. Spread pods get a random `my-label` and, drawn
/// separately, a random `my-label` selector (maxSkew 1, DoNotSchedule); affinity pods select
/// their own random `my-affininity` label (sic, as in Karpenter); anti-affinity pods are all
/// `app: nginx` and repel each other. Values are drawn in Karpenter's order (labels, selector,
/// cpu, memory) from the same sets, with our seeded generator instead of Go's `math/rand`.
pub fn diverse_pods(count: usize, rng: &mut Rng) -> Vec<Pod> {
    const VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
    const CPUS_M: [&str; 5] = ["100m", "250m", "500m", "1000m", "1500m"];
    const MEMORY_MI: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"];
    let each = count / 5;
    let kinds = [
        ("generic", each),
        ("zonal-spread", each),
        ("hostname-spread", each),
        ("zonal-affinity", each),
        ("hostname-anti-affinity", each),
        ("generic", count - 5 * each),
    ];
    let mut out = Vec::with_capacity(count);
    for (kind, n) in kinds {
        for _ in 0..n {
            let i = out.len();
            let mut labels = serde_json::Map::new();
            labels.insert("testing/cluster".into(), json!("unspecified"));
            let mut spec = json!({});
            match kind {
                "generic" => {
                    labels.insert("my-label".into(), json!(rng.pick(&VALUES)));
                }
                "zonal-spread" | "hostname-spread" => {
                    labels.insert("my-label".into(), json!(rng.pick(&VALUES)));
                    let key = if kind == "zonal-spread" {
                        "topology.kubernetes.io/zone"
                    } else {
                        "kubernetes.io/hostname"
                    };
                    spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": key,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"my-label": rng.pick(&VALUES)}}}]);
                }
                "zonal-affinity" => {
                    let value = rng.pick(&VALUES);
                    labels.insert("my-affininity".into(), json!(value));
                    spec["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"my-affininity": value}}}]}});
                }
                _ => {
                    labels.insert("app".into(), json!("nginx"));
                    spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "nginx"}}}]}});
                }
            }
            let cpu = rng.pick(&CPUS_M);
            let memory = rng.pick(&MEMORY_MI);
            spec["containers"] = json!([{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]);
            out.push(
                serde_json::from_value(json!({
                    "metadata": {"name": format!("{kind}-{i:05}"), "namespace": "default", "uid": format!("uid-{i:05}"),
                                 "labels": labels},
                    "spec": spec
                }))
                .expect("diverse pod decodes"),
            );
        }
    }
    out
}

/// The simulation input of Karpenter's scheduling benchmark for `count` pods.
pub fn karpenter_bench_input(count: usize, types: &[Arc<InstanceType>]) -> SimulationInput {
    SimulationInput {
        pods: diverse_pods(count, &mut Rng(42)).into_iter().map(Arc::new).collect(),
        provisioners: vec![ProvisionerInput {
            provisioner: karpenter_bench_provisioner(),
            instance_types: types.to_vec(),
        }],
        ..Default::default()
    }
}
