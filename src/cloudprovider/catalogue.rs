//! Translations between the cloud provider's view and the scheduling simulation's view: EC2
//! facts → instance types with capacity and overhead, a planned node → a launch request and
//! its instance options. Pure; no I/O here. Provisioning, consolidation and `simulate` all use
//! it (a launched instance → what its Node carries is provisioning's `node::launched`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::aws::instance::MAX_INSTANCE_TYPES;
use crate::cloudprovider::{InstanceOption, InstanceTypeInfo, LaunchRequest, NodeTemplate};
use crate::apis::v1alpha5::labels::INSTANCE_SIZE_LABEL;
use crate::scheduling::instance_types::offering_allowed;
use crate::scheduling::resources::{AMD_GPU, AWS_NEURON, HABANA_GAUDI, NVIDIA_GPU};
use crate::scheduling::{provisioner_requirements, InstanceType, NodeRequest, NodeSettings, Resources};

/// The instance types a Provisioner may launch, with capacity and overhead computed for the
/// global node settings, its kubelet settings, AMI family and root volume: only those whose
/// labels overlap what its nodes must carry (`provisioner_requirements`; the simulation drops
/// the others), and of those only the offerings in `zones` (where its subnets are): a node
/// planned anywhere else could not be launched.
pub fn instance_types(
    catalogue: &[InstanceTypeInfo],
    provisioner: &Provisioner,
    template: &NodeTemplate,
    zones: &BTreeSet<String>,
    region: &str,
    global: &NodeSettings,
) -> Vec<Arc<InstanceType>> {
    allowed(catalogue, provisioner, &settings_for(provisioner, template, global), zones, region)
}

/// `instance_types` with the node settings already computed.
fn allowed(
    catalogue: &[InstanceTypeInfo],
    provisioner: &Provisioner,
    settings: &NodeSettings,
    zones: &BTreeSet<String>,
    region: &str,
) -> Vec<Arc<InstanceType>> {
    let requirements = provisioner_requirements(provisioner);
    catalogue
        .iter()
        .map(|info| translate(info, settings, zones, region))
        .filter(|it| it.requirements.overlaps(&requirements))
        .map(Arc::new)
        .collect()
}

/// The node settings `provisioner`'s nodes are computed with.
fn settings_for(provisioner: &Provisioner, template: &NodeTemplate, global: &NodeSettings) -> NodeSettings {
    let mut settings = global.clone().with_kubelet(provisioner.spec.kubelet_configuration.as_ref());
    settings.ami_family = template.ami_family;
    settings.ephemeral_storage_bytes = Some(template.ephemeral_storage_bytes());
    settings
}

/// One catalogue entry as an instance type, with its offerings in `zones`.
fn translate(info: &InstanceTypeInfo, settings: &NodeSettings, zones: &BTreeSet<String>, region: &str) -> InstanceType {
    let offerings = info.offerings.iter().filter(|o| zones.contains(&o.zone)).cloned().collect();
    InstanceType::from_facts(&info.facts, offerings, settings, Some(region))
}

/// The instance types of every Provisioner, built once per catalogue and kept until the catalogue
/// (a refresh, prices, offerings marked unavailable) or what the Provisioner's types are computed
/// from (requirements, labels, kubelet settings, AMI family, root volume, zones) changes. Every
/// pass and every deprovisioning simulation then shares one set of `Arc`s, instead of
/// translating ~1,400 EC2 types again each time and holding a copy per simulation. Only the
/// types a Provisioner's requirements allow are kept (a dozen for a Provisioner that lists its
/// types, instead of ~1,400 of about 10 KiB each); a node of any other type (launched before the
/// requirements changed) is looked up with `instance_type`, translated when asked.
#[derive(Clone, Default)]
pub struct TypeCache {
    /// Shared with the instance-type gauges, which write it out at scrape time.
    catalogue: Arc<Vec<InstanceTypeInfo>>,
    by_provisioner: std::collections::HashMap<String, Built>,
}

/// One Provisioner's types, and what they were computed from.
#[derive(Clone)]
struct Built {
    inputs: TypeInputs,
    settings: NodeSettings,
    region: String,
    allowed: Vec<Arc<InstanceType>>,
}

/// What `instance_types` computes a Provisioner's types from, besides the catalogue.
#[derive(Clone, PartialEq)]
struct TypeInputs {
    requirements: Option<Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>>,
    labels: Option<BTreeMap<String, String>>,
    kubelet: Option<crate::apis::v1alpha5::KubeletConfiguration>,
    ami_family: crate::scheduling::AmiFamily,
    ephemeral_storage_bytes: i64,
    zones: BTreeSet<String>,
}

impl TypeCache {
    /// The catalogue as the cloud gives it now; every Provisioner's types are built again when
    /// it differs from the last one. True when it did.
    pub fn set_catalogue(&mut self, catalogue: Vec<InstanceTypeInfo>) -> bool {
        if *self.catalogue == catalogue {
            return false;
        }
        self.catalogue = Arc::new(catalogue);
        self.by_provisioner.clear();
        true
    }

    /// The catalogue last set.
    pub fn catalogue(&self) -> &[InstanceTypeInfo] {
        &self.catalogue
    }

    /// The catalogue last set, shared.
    pub fn shared_catalogue(&self) -> Arc<Vec<InstanceTypeInfo>> {
        self.catalogue.clone()
    }

    /// `instance_types(catalogue, provisioner, template, zones, region, global)` over the
    /// catalogue last set, from the cache when nothing it depends on changed (`region` and
    /// `global` are the process's own).
    pub fn instance_types(
        &mut self,
        provisioner: &Provisioner,
        template: &NodeTemplate,
        zones: &BTreeSet<String>,
        region: &str,
        global: &NodeSettings,
    ) -> Vec<Arc<InstanceType>> {
        let inputs = TypeInputs {
            requirements: provisioner.spec.requirements.clone(),
            labels: provisioner.spec.labels.clone(),
            kubelet: provisioner.spec.kubelet_configuration.clone(),
            ami_family: template.ami_family,
            ephemeral_storage_bytes: template.ephemeral_storage_bytes(),
            zones: zones.clone(),
        };
        let name = provisioner.metadata.name.clone().unwrap_or_default();
        match self.by_provisioner.get(&name) {
            Some(built) if built.inputs == inputs => built.allowed.clone(),
            _ => {
                let settings = settings_for(provisioner, template, global);
                let types = allowed(&self.catalogue, provisioner, &settings, zones, region);
                let built = Built {
                    inputs,
                    settings,
                    region: region.to_string(),
                    allowed: types.clone(),
                };
                self.by_provisioner.insert(name, built);
                types
            }
        }
    }

    /// The catalogue's type `name` as `provisioner`'s nodes get it (capacity, overhead, offerings
    /// in its zones), as of its last `instance_types`, whether or not its requirements allow
    /// that type now: the shared one when they do, else translated now.
    pub fn instance_type(&self, provisioner: &str, name: &str) -> Option<Arc<InstanceType>> {
        let built = self.by_provisioner.get(provisioner)?;
        if let Some(it) = built.allowed.iter().find(|it| it.name == name) {
            return Some(it.clone());
        }
        let info = self.catalogue.iter().find(|info| info.facts.name == name)?;
        Some(Arc::new(translate(info, &built.settings, &built.inputs.zones, &built.region)))
    }

    /// Forgets Provisioners that are gone.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.by_provisioner.retain(|name, _| keep(name));
    }
}

/// What to ask the cloud for: the offerings of the planned node's instance types that its
/// requirements allow and that are available (spot above `spot_max_price` left out), after the
/// AWS provider's launch filters (`launch_options`), cheapest first.
pub fn launch_request(
    request: &NodeRequest,
    provisioner: &Provisioner,
    template: NodeTemplate,
    spot_max_price: Option<f64>,
) -> LaunchRequest {
    let candidates: Vec<(&InstanceType, Vec<InstanceOption>)> = request
        .instance_type_options
        .iter()
        .map(|it| {
            let options = it
                .offerings
                .iter()
                .filter(|o| o.available && offering_allowed(o, &request.requirements))
                .filter(|o| o.capacity_type != CAPACITY_TYPE_SPOT || spot_max_price.is_none_or(|max| o.price <= max))
                .map(|o| InstanceOption::of(&it.name, o))
                .collect();
            (it.as_ref(), options)
        })
        .collect();
    LaunchRequest {
        provisioner_name: request.provisioner.clone(),
        node_name: None,
        template,
        instance_options: launch_options(candidates),
        labels: request.labels.clone(),
        taints: request.taints.clone(),
        startup_taints: request.startup_taints.clone(),
        kubelet: provisioner.spec.kubelet_configuration.clone().unwrap_or_default(),
        max_pods: request.instance_type_options.iter().map(|it| (it.name.clone(), it.capacity.pods)).collect(),
        spot_max_price,
        identity: None,
    }
}

/// Whether a type is one a launch avoids while others fit: a bare-metal size (`metal`,
/// `metal-48xl`) or one with NVIDIA/AMD GPUs, Neuron or Habana devices
/// (`aws@v0.27.0:pkg/providers/instance/instance.go` `filterExoticInstanceTypes`).
pub fn is_exotic(it: &InstanceType) -> bool {
    let metal = it
        .requirements
        .get(INSTANCE_SIZE_LABEL)
        .and_then(|size| size.any())
        .is_some_and(|size| size == "metal" || size.starts_with("metal-"));
    metal
        || [NVIDIA_GPU, AMD_GPU, AWS_NEURON, HABANA_GAUDI]
            .iter()
            .any(|r| it.capacity.get(r) > 0)
}

/// The AWS provider's launch filters over each instance type's allowed, available options
/// (`aws@v0.27.0:pkg/providers/instance/instance.go` `Create`, `filterInstanceTypes`,
/// `orderInstanceTypesByPrice`); every type given already holds the node's pods:
/// 1. types without an option are dropped;
/// 2. exotic types (`is_exotic`) are dropped unless that would leave none;
/// 3. when both spot and on-demand options are left, types whose cheapest option costs more
///    than the cheapest on-demand option are dropped (no big spot type when a smaller
///    on-demand one is cheaper);
/// 4. the cheapest `MAX_INSTANCE_TYPES` types by their cheapest option (name breaks ties).
///
/// Returns their options by price, then type, then zone.
pub fn launch_options(candidates: Vec<(&InstanceType, Vec<InstanceOption>)>) -> Vec<InstanceOption> {
    let cheapest = |options: &[InstanceOption]| options.iter().map(|o| o.price).fold(f64::INFINITY, f64::min);
    let mut types: Vec<(&InstanceType, Vec<InstanceOption>)> = candidates.into_iter().filter(|(_, o)| !o.is_empty()).collect();
    if types.iter().any(|(it, _)| !is_exotic(it)) {
        types.retain(|(it, _)| !is_exotic(it));
    }
    let all = || types.iter().flat_map(|(_, options)| options.iter());
    let has = |capacity_type: &str| all().any(|o| o.capacity_type == capacity_type);
    if has(CAPACITY_TYPE_SPOT) && has(CAPACITY_TYPE_ON_DEMAND) {
        let cheapest_on_demand = all()
            .filter(|o| o.capacity_type == CAPACITY_TYPE_ON_DEMAND)
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min);
        types.retain(|(_, options)| cheapest(options) <= cheapest_on_demand);
    }
    types.sort_by(|(a, ao), (b, bo)| cheapest(ao).total_cmp(&cheapest(bo)).then_with(|| a.name.cmp(&b.name)));
    types.truncate(MAX_INSTANCE_TYPES);
    let mut options: Vec<InstanceOption> = types.into_iter().flat_map(|(_, options)| options).collect();
    options.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
    });
    options
}

/// The resources a planned node's pods request, by resource name, for the binding check.
pub fn requested(resources: &Resources) -> BTreeMap<String, f64> {
    resources.entries().map(|(k, v)| (k.to_string(), v as f64)).collect()
}

/// The instance id in a Node's `spec.providerID` (`aws:///<zone>/<id>`).
pub fn instance_id(node: &Node) -> Option<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(crate::cloudprovider::instance_id_from_provider_id)
        .map(str::to_string)
}

/// The catalogue entry of a test-catalogue type (`scheduling::testing::facts`), sold on-demand in
/// `ap-northeast-2a` at `price`, for the tests of the modules that read the catalogue.
#[cfg(test)]
pub(crate) fn test_info(name: &str, price: f64) -> InstanceTypeInfo {
    InstanceTypeInfo {
        facts: crate::scheduling::testing::facts(name),
        accelerators: vec![],
        category: String::new(),
        family: String::new(),
        generation: None,
        size: String::new(),
        capacity_types: vec!["on-demand".into()],
        offerings: vec![crate::cloudprovider::OfferingInfo {
            zone: "ap-northeast-2a".into(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
        }],
    }
}

#[cfg(test)]
mod tests;
