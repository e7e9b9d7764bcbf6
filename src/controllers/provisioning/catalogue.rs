//! Translations between the cloud provider's view and the scheduling simulation's view: EC2
//! facts → instance types with capacity and overhead, a planned node → a launch request, a
//! launched instance → what its Node carries. Pure; no I/O here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::node::LaunchedInstance;
use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, ZONE_LABEL};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::{Instance, InstanceOption, InstanceTypeInfo, LaunchRequest, NodeTemplate};
use crate::scheduling::instance_types::offering_allowed;
use crate::scheduling::{InstanceType, NodeRequest, NodeSettings, Resources};

/// The instance types a Provisioner may launch, with capacity and overhead computed for the
/// global node settings, its kubelet settings and AMI family. Only offerings in `zones` (where its subnets are) are kept:
/// a node planned anywhere else could not be launched.
pub fn instance_types(
    catalogue: &[InstanceTypeInfo],
    provisioner: &Provisioner,
    template: &NodeTemplate,
    zones: &BTreeSet<String>,
    region: &str,
    global: &NodeSettings,
) -> Vec<Arc<InstanceType>> {
    let mut settings = global.clone().with_kubelet(provisioner.spec.kubelet_configuration.as_ref());
    settings.ami_family = template.ami_family;
    catalogue
        .iter()
        .map(|info| {
            let offerings = info.offerings.iter().filter(|o| zones.contains(&o.zone)).cloned().collect();
            Arc::new(InstanceType::from_facts(&info.facts, offerings, &settings, Some(region)))
        })
        .collect()
}

/// What to ask the cloud for: every available offering of the planned node's instance types that
/// its requirements allow, cheapest first (spot above `spot_max_price` left out).
pub fn launch_request(
    request: &NodeRequest,
    provisioner: &Provisioner,
    template: NodeTemplate,
    spot_max_price: Option<f64>,
) -> LaunchRequest {
    let mut options: Vec<InstanceOption> = request
        .instance_type_options
        .iter()
        .flat_map(|it| {
            it.offerings
                .iter()
                .filter(|o| o.available && offering_allowed(o, &request.requirements))
                .filter(|o| o.capacity_type != "spot" || spot_max_price.is_none_or(|max| o.price <= max))
                .map(|o| InstanceOption {
                    instance_type: it.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                    price: o.price,
                })
        })
        .collect();
    options.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(&b.instance_type))
            .then_with(|| a.zone.cmp(&b.zone))
    });
    LaunchRequest {
        provisioner_name: request.provisioner.clone(),
        node_name: None,
        template,
        instance_options: options,
        labels: request.labels.clone(),
        taints: request.taints.clone(),
        startup_taints: request.startup_taints.clone(),
        kubelet: provisioner.spec.kubelet_configuration.clone().unwrap_or_default(),
        spot_max_price,
    }
}

/// The launched instance as its Node will describe it.
pub fn launched(instance: &Instance, instance_type: Option<&InstanceType>, region: &str) -> LaunchedInstance {
    let mut labels = instance_type.map(|it| it.requirements.labels()).unwrap_or_default();
    // The instance's own zone and capacity type replace whatever the type offers.
    labels.remove(ZONE_LABEL);
    labels.remove(CAPACITY_TYPE_LABEL);
    LaunchedInstance {
        id: instance.id.clone(),
        zone: instance.zone.clone(),
        region: region.to_string(),
        capacity_type: instance.capacity_type.clone(),
        private_dns_name: instance.private_dns_name.clone(),
        instance_type_labels: labels,
    }
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
