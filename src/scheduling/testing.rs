//! Builders for the scheduling tests: pods, provisioners, taints, a small priced catalogue of real
//! instance types (ap-northeast-2) and existing nodes. Test-only; no I/O here.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PodSpec, PreferredSchedulingTerm, ResourceRequirements, Taint, Toleration, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};

use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL};
use crate::apis::v1alpha5::{Limits, Provisioner, ProvisionerSpec};

use super::capacity::{GpuFacts, InstanceFacts, NodeSettings};
use super::instance_types::{InstanceType, Offering};
use super::nodes::ExistingNode;
use super::resources::Resources;

/// The zones of the test catalogue.
pub const ZONES: [&str; 3] = ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"];

/// Builds a pod.
#[derive(Clone, Debug)]
pub struct PodBuilder(Pod);

/// A pod named `name` in `default`, one container, no requests.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder(Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".to_string()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".to_string(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    })
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

fn terms(exprs: &[(&str, &str, &[&str])]) -> Vec<NodeSelectorRequirement> {
    exprs
        .iter()
        .map(|(k, op, vals)| NodeSelectorRequirement {
            key: k.to_string(),
            operator: op.to_string(),
            values: Some(vals.iter().map(|v| v.to_string()).collect()),
        })
        .collect()
}

fn selector(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        match_expressions: None,
    }
}

fn affinity_term(key: &str, labels: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.to_string(),
        label_selector: Some(selector(labels)),
        ..Default::default()
    }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.as_mut().expect("builder pods have a spec")
    }

    fn request(mut self, name: &str, amount: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_string(), q(amount));
        self
    }

    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Affinity::default)
    }

    fn node_affinity(&mut self) -> &mut NodeAffinity {
        self.affinity().node_affinity.get_or_insert_with(NodeAffinity::default)
    }

    /// Namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.0.metadata.namespace = Some(ns.to_string());
        self
    }

    /// CPU request of the first container.
    pub fn cpu(self, amount: &str) -> Self {
        self.request("cpu", amount)
    }

    /// Memory request of the first container.
    pub fn memory(self, amount: &str) -> Self {
        self.request("memory", amount)
    }

    /// `ephemeral-storage` request of the first container.
    pub fn ephemeral_storage(self, amount: &str) -> Self {
        self.request("ephemeral-storage", amount)
    }

    /// `nvidia.com/gpu` request (and limit) of the first container.
    pub fn gpu(self, count: i64) -> Self {
        self.request("nvidia.com/gpu", &count.to_string())
    }

    /// Another container requesting `amount` cpu.
    pub fn container_cpu(mut self, amount: &str) -> Self {
        self.spec().containers.push(Container {
            name: "second".to_string(),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), q(amount))].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }

    /// An init container requesting `amount` cpu.
    pub fn init_cpu(mut self, amount: &str) -> Self {
        self.spec().init_containers.get_or_insert_with(Vec::new).push(Container {
            name: "init".to_string(),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), q(amount))].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }

    /// A native sidecar: an init container with `restartPolicy: Always` requesting `amount` cpu.
    pub fn sidecar_cpu(mut self, amount: &str) -> Self {
        let init = self.spec().init_containers.get_or_insert_with(Vec::new);
        init.push(Container {
            name: format!("sidecar-{}", init.len()),
            restart_policy: Some("Always".to_string()),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), q(amount))].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }

    /// A cpu limit (and no request) on the first container.
    pub fn limit_cpu(mut self, amount: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .limits
            .get_or_insert_with(BTreeMap::new)
            .insert("cpu".to_string(), q(amount));
        self
    }

    /// `spec.overhead.cpu`.
    pub fn overhead_cpu(mut self, amount: &str) -> Self {
        self.spec().overhead = Some([("cpu".to_string(), q(amount))].into());
        self
    }

    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
        self
    }

    /// A nodeSelector entry.
    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
        self
    }

    /// A toleration `key=value:effect` (operator Equal).
    pub fn tolerate(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(toleration(key, "Equal", value, effect));
        self
    }

    /// Another OR-ed required node-affinity term.
    pub fn required_term(mut self, exprs: &[(&str, &str, &[&str])]) -> Self {
        let na = self.node_affinity();
        na.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(NodeSelector::default)
            .node_selector_terms
            .push(NodeSelectorTerm {
                match_expressions: Some(terms(exprs)),
                match_fields: None,
            });
        self
    }

    /// A preferred node-affinity term.
    pub fn preferred_term(mut self, weight: i32, exprs: &[(&str, &str, &[&str])]) -> Self {
        let na = self.node_affinity();
        na.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm {
                weight,
                preference: NodeSelectorTerm {
                    match_expressions: Some(terms(exprs)),
                    match_fields: None,
                },
            });
        self
    }

    /// A topology spread constraint selecting `labels`.
    pub fn spread(mut self, key: &str, max_skew: i32, when: &str, labels: &[(&str, &str)]) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(TopologySpreadConstraint {
                topology_key: key.to_string(),
                max_skew,
                when_unsatisfiable: when.to_string(),
                label_selector: Some(selector(labels)),
                ..Default::default()
            });
        self
    }

    /// Required pod anti-affinity to pods with `labels` over `key`.
    pub fn anti_affinity(mut self, key: &str, labels: &[(&str, &str)]) -> Self {
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(affinity_term(key, labels));
        self
    }

    /// Preferred pod anti-affinity.
    pub fn preferred_anti_affinity(mut self, weight: i32, key: &str, labels: &[(&str, &str)]) -> Self {
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: affinity_term(key, labels),
            });
        self
    }

    /// Required pod affinity to pods with `labels` over `key`.
    pub fn pod_affinity(mut self, key: &str, labels: &[(&str, &str)]) -> Self {
        self.affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(affinity_term(key, labels));
        self
    }

    /// Required pod affinity over `key` to pods with `labels` in the namespaces whose labels
    /// match `namespace_labels` (a `namespaceSelector`).
    pub fn pod_affinity_in_namespaces(mut self, key: &str, labels: &[(&str, &str)], namespace_labels: &[(&str, &str)]) -> Self {
        let mut term = affinity_term(key, labels);
        term.namespace_selector = Some(selector(namespace_labels));
        self.affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    /// A TCP host port on the first container.
    pub fn host_port(mut self, port: i32) -> Self {
        self.spec().containers[0].ports.get_or_insert_with(Vec::new).push(ContainerPort {
            container_port: port,
            host_port: Some(port),
            ..Default::default()
        });
        self
    }

    /// `metadata.creationTimestamp`, seconds after the epoch.
    pub fn created(mut self, secs: i64) -> Self {
        let t = jiff::Timestamp::from_second(secs).expect("valid test timestamp");
        self.0.metadata.creation_timestamp = Some(Time(t));
        self
    }

    /// Owned by the DaemonSet `name`.
    pub fn daemonset(mut self, name: &str) -> Self {
        self.0.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".to_string(),
            kind: "DaemonSet".to_string(),
            name: name.to_string(),
            uid: format!("ds-{name}"),
            ..Default::default()
        }]);
        self
    }

    /// The pod.
    pub fn build(self) -> Pod {
        self.0
    }
}

/// A taint from `key=value:Effect` or `key:Effect`.
pub fn taint(s: &str) -> Taint {
    let (kv, effect) = s.rsplit_once(':').expect("taint has an effect");
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    }
}

/// A toleration; empty strings leave the field unset.
pub fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Toleration {
        key: opt(key),
        operator: opt(operator),
        value: opt(value),
        effect: opt(effect),
        toleration_seconds: None,
    }
}

/// Builds a Provisioner.
#[derive(Clone, Debug)]
pub struct ProvisionerBuilder(Provisioner);

/// A Provisioner with no requirements, labels or taints.
pub fn provisioner(name: &str) -> ProvisionerBuilder {
    ProvisionerBuilder(Provisioner::new(name, ProvisionerSpec::default()))
}

/// The first write-up's `service` Provisioner: its taint, label, and instance-type, zone and
/// capacity-type requirements.
pub fn service() -> Provisioner {
    provisioner("service")
        .taint("service=true:NoSchedule")
        .label("nodeType", "service-2023")
        .requirement(INSTANCE_TYPE_LABEL, "In", &["t3.large", "t3.xlarge"])
        .requirement(ZONE_LABEL, "In", &["ap-northeast-2a", "ap-northeast-2c"])
        .requirement(CAPACITY_TYPE_LABEL, "In", &["on-demand"])
        .build()
}

impl ProvisionerBuilder {
    /// A taint (`key=value:Effect`).
    pub fn taint(mut self, s: &str) -> Self {
        self.0.spec.taints.get_or_insert_with(Vec::new).push(taint(s));
        self
    }

    /// A startup taint.
    pub fn startup_taint(mut self, s: &str) -> Self {
        self.0.spec.startup_taints.get_or_insert_with(Vec::new).push(taint(s));
        self
    }

    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0
            .spec
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
        self
    }

    /// A requirement.
    pub fn requirement(mut self, key: &str, op: &str, values: &[&str]) -> Self {
        self.0
            .spec
            .requirements
            .get_or_insert_with(Vec::new)
            .extend(terms(&[(key, op, values)]));
        self
    }

    /// A limit (`cpu`, `16`).
    pub fn limit(mut self, resource: &str, amount: &str) -> Self {
        self.0
            .spec
            .limits
            .get_or_insert_with(Limits::default)
            .resources
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_string(), q(amount));
        self
    }

    /// `spec.weight`.
    pub fn weight(mut self, w: i32) -> Self {
        self.0.spec.weight = Some(w);
        self
    }

    /// `spec.provider.spotPrice`.
    pub fn spot_price(mut self, price: &str) -> Self {
        self.0.spec.provider = Some(serde_json::json!({ "spotPrice": price }));
        self
    }

    /// The Provisioner.
    pub fn build(self) -> Provisioner {
        self.0
    }
}

/// (name, vCPUs, MiB, ENIs, IPv4 per ENI, on-demand USD/h, GPUs).
const CATALOGUE: &[(&str, i64, i64, i64, i64, f64, i64)] = &[
    ("t3.large", 2, 8192, 3, 12, 0.104, 0),
    ("t3.xlarge", 4, 16384, 4, 15, 0.208, 0),
    ("m5.large", 2, 8192, 3, 10, 0.118, 0),
    ("m5.xlarge", 4, 16384, 4, 15, 0.236, 0),
    ("m5.2xlarge", 8, 32768, 4, 15, 0.472, 0),
    ("c5.large", 2, 4096, 3, 10, 0.096, 0),
    ("c5.xlarge", 4, 8192, 4, 15, 0.192, 0),
    ("r5.large", 2, 16384, 3, 10, 0.152, 0),
    ("g4dn.xlarge", 4, 16384, 3, 10, 0.647, 1),
    ("p3.2xlarge", 8, 62464, 4, 15, 4.234, 1),
];

/// EC2 facts of a type in the test catalogue.
pub fn facts(name: &str) -> InstanceFacts {
    let (n, vcpus, mib, enis, ips, _, gpus) = *CATALOGUE
        .iter()
        .find(|c| c.0 == name)
        .unwrap_or_else(|| panic!("{name} is not in the test catalogue"));
    InstanceFacts {
        name: n.to_string(),
        vcpus,
        memory_mib: mib,
        architecture: "amd64".to_string(),
        max_enis: enis,
        ipv4_per_eni: ips,
        gpus: if gpus > 0 {
            vec![GpuFacts {
                name: if n.starts_with("g4dn") { "T4" } else { "V100" }.to_string(),
                manufacturer: "NVIDIA".to_string(),
                count: gpus,
                memory_mib: 16384,
            }]
        } else {
            Vec::new()
        },
        hypervisor: "nitro".to_string(),
        ..Default::default()
    }
}

/// A type of the test catalogue, sold on-demand and spot (30% of on-demand, c5 35%) in every zone.
pub fn instance_type(name: &str) -> InstanceType {
    instance_type_with(name, &NodeSettings::default())
}

/// `instance_type` with its capacity and overhead computed under `settings` (e.g. a
/// Provisioner's kubelet configuration).
pub fn instance_type_with(name: &str, settings: &NodeSettings) -> InstanceType {
    let od = CATALOGUE.iter().find(|c| c.0 == name).expect("in catalogue").5;
    let spot = if name.starts_with("c5") { od * 0.35 } else { od * 0.30 };
    let offerings = ZONES
        .iter()
        .flat_map(|z| {
            [("on-demand", od), ("spot", spot)].map(|(ct, price)| Offering {
                zone: z.to_string(),
                capacity_type: ct.to_string(),
                price,
                available: true,
            })
        })
        .collect();
    InstanceType::from_facts(&facts(name), offerings, settings, Some("ap-northeast-2"))
}

/// The whole test catalogue.
pub fn catalogue() -> Vec<Arc<InstanceType>> {
    CATALOGUE.iter().map(|c| Arc::new(instance_type(c.0))).collect()
}

/// An initialised node with `allocatable` = `capacity` = (cpu, memory, pods), no pods.
pub fn node(name: &str, cpu: &str, memory: &str, pods: i64) -> ExistingNode {
    let res = Resources::from_quantities(&[("cpu".to_string(), q(cpu)), ("memory".to_string(), q(memory))].into())
        .expect("test quantities parse")
        .with("pods", pods);
    ExistingNode {
        name: name.to_string(),
        labels: [("kubernetes.io/hostname".to_string(), name.to_string())].into(),
        allocatable: res.clone(),
        capacity: res,
        initialized: true,
        ..Default::default()
    }
}
