//! `karpenter-rs simulate`: what would karpenter-rs launch for these manifests? Provisioners and
//! AWSNodeTemplates are admitted as the webhook admits them (`manifests`), workloads become
//! pending pods, the catalogue comes from a snapshot (`catalogue`), and the controller's own
//! pieces do the rest: `cloudprovider::catalogue::instance_types` for each
//! Provisioner's instance types, `scheduling::simulate` for the plan, `launch_request` for what a
//! launch would offer EC2. The result is a `report::Report`. Pure: the CLI reads the files and
//! prints the report; nothing here touches the network, the clock or the file system.
//!
//! What cannot be known offline: the subnets and security groups a template selects. Each
//! Provisioner's instance types are offered in every zone of the region, so its nodes land in
//! the zones its zone requirement allows (all of them without one), as the report's notes say.

pub mod args;
pub mod catalogue;
pub mod cli;
pub mod manifests;
pub mod report;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::apis::v1alpha1::AwsProvider;
use crate::apis::v1alpha5::labels::{INSTANCE_TYPE_LABEL, ZONE_LABEL};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::catalogue::{instance_types, launch_request};
use crate::cloudprovider::{self, KubernetesVersion, NodeTemplate};
use crate::controllers::provisioning::pods::daemonset_overhead_pods;
use crate::scheduling::{self, ExistingNode, NodeSettings, PodKey, ProvisionerInput, SimulationInput};
use catalogue::{region_of_zone, Catalogue};
use manifests::{pods_by_node, Manifests};
use report::{CatalogueSummary, LaunchOption, NewNode, Placement, Report, Total, Unplaced, HOURS_PER_MONTH};

/// Region simulated when neither `--region` nor a Provisioner's zones say.
pub const DEFAULT_REGION: &str = "ap-northeast-2";

/// What went wrong reading the input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An object could not be read, or the webhook would deny it.
    #[error("{file} (document {document}): {message}")]
    Invalid {
        /// The file (`-` for stdin).
        file: String,
        /// 1-based document number in it.
        document: usize,
        /// What is wrong: for a Provisioner or AWSNodeTemplate, the webhook's denial message.
        message: String,
    },
}

/// How the simulated cluster is set up.
#[derive(Clone, Debug)]
pub struct Options {
    /// The cluster's name (default selectors, `spec.provider.clusterName`).
    pub cluster_name: String,
    /// The Kubernetes version whose AMI family a template without one gets.
    pub kubernetes_version: KubernetesVersion,
    /// Global node settings (memory overhead, ENI-limited pod density...).
    pub node_settings: NodeSettings,
    /// `snapshot`, `file` or `live`, for the report.
    pub catalogue_kind: String,
}

/// The region the Provisioners' zone requirements imply: the region of the first zone any of
/// them names (with `In`), if any.
pub fn implied_region(provisioners: &[Provisioner]) -> Option<String> {
    provisioners
        .iter()
        .flat_map(|p| p.spec.requirements.iter().flatten())
        .filter(|r| r.key == ZONE_LABEL && r.operator == "In")
        .flat_map(|r| r.values.iter().flatten())
        .find_map(|zone| region_of_zone(zone))
        .map(str::to_string)
}

/// Simulates one provisioning pass over `manifests` with `catalogue`'s instance types.
pub fn simulate(manifests: &Manifests, catalogue: &Catalogue, options: &Options) -> Report {
    let mut warnings = manifests.warnings.clone();
    let mut templates: HashMap<String, (NodeTemplate, Option<f64>)> = HashMap::new();
    let mut provisioners = Vec::new();
    for p in &manifests.provisioners {
        match node_template(p, manifests, options) {
            Ok(template) => {
                let types = instance_types(
                    &catalogue.types,
                    p,
                    &template.0,
                    &catalogue.zones,
                    &catalogue.region,
                    &options.node_settings,
                );
                templates.insert(p.name_any(), template);
                provisioners.push(ProvisionerInput {
                    provisioner: p.clone(),
                    instance_types: types,
                });
            }
            Err(reason) => warnings.push(format!("Provisioner {:?} cannot launch nodes: {reason}", p.name_any())),
        }
    }
    for zone in zones_outside(&manifests.provisioners, catalogue) {
        warnings.push(format!(
            "zone {zone} is not one of region {}'s zones in the catalogue",
            catalogue.region
        ));
    }

    let bound: Vec<Arc<Pod>> = manifests.bound.iter().cloned().map(Arc::new).collect();
    let daemonsets: Vec<Arc<DaemonSet>> = manifests.daemonsets.iter().cloned().map(Arc::new).collect();
    let input = SimulationInput {
        pods: manifests.pending.iter().cloned().map(Arc::new).collect(),
        nodes: existing_nodes(manifests, &provisioners, &mut warnings),
        daemonset_pods: daemonset_overhead_pods(&daemonsets, &bound),
        provisioners,
        namespace_labels: BTreeMap::new(),
    };
    let plan = scheduling::simulate(&input);

    let mut nodes = Vec::new();
    let mut new_node_of: HashMap<&PodKey, usize> = HashMap::new();
    for (i, request) in plan.new_nodes.iter().enumerate() {
        for key in &request.pods {
            new_node_of.insert(key, i + 1);
        }
        let provisioner = manifests.provisioners.iter().find(|p| p.name_any() == request.provisioner);
        let (Some(provisioner), Some((template, spot_max))) = (provisioner, templates.get(&request.provisioner)) else {
            continue;
        };
        let options = launch_request(request, provisioner, template.clone(), *spot_max).instance_options;
        let mut types: Vec<String> = Vec::new();
        for o in &options {
            if !types.contains(&o.instance_type) {
                types.push(o.instance_type.clone());
            }
        }
        let zones: BTreeSet<String> = options.iter().map(|o| o.zone.clone()).collect();
        let capacity_types: BTreeSet<String> = options.iter().map(|o| o.capacity_type.clone()).collect();
        nodes.push(NewNode {
            index: i + 1,
            provisioner: request.provisioner.clone(),
            instance_types: types,
            zones: zones.into_iter().collect(),
            capacity_types: capacity_types.into_iter().collect(),
            cheapest: options.first().map(|o| LaunchOption {
                instance_type: o.instance_type.clone(),
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                price_per_hour: o.price,
            }),
            pods: request.pods.iter().map(ToString::to_string).collect(),
        });
    }
    // Folded from +0.0: the sum of no floats is -0.0, printed "$-0.0000".
    let per_hour: f64 = nodes
        .iter()
        .filter_map(|n| n.cheapest.as_ref())
        .map(|o| o.price_per_hour)
        .fold(0.0, |a, b| a + b);
    let existing_of: HashMap<&PodKey, &str> = plan.existing_assignments.iter().map(|(k, n)| (k, n.as_str())).collect();
    let unplaced: HashMap<&PodKey, &str> = plan
        .unschedulable
        .iter()
        .chain(&plan.ignored)
        .map(|(k, r)| (k, r.as_str()))
        .collect();
    let pods = manifests
        .pending
        .iter()
        .map(|pod| {
            let key = PodKey::of(pod);
            Placement {
                pod: key.to_string(),
                new_node: new_node_of.get(&key).copied(),
                existing_node: existing_of.get(&key).map(|n| n.to_string()),
                unplaced: unplaced.get(&key).map(|r| r.to_string()),
            }
        })
        .collect();
    let unplaced_list = |list: &[(PodKey, String)]| {
        list.iter()
            .map(|(k, r)| Unplaced {
                pod: k.to_string(),
                reason: r.clone(),
            })
            .collect()
    };
    Report {
        region: catalogue.region.clone(),
        catalogue: CatalogueSummary {
            kind: options.catalogue_kind.clone(),
            source: catalogue.source.clone(),
            taken: catalogue.taken.clone(),
            prices_estimated: catalogue.prices_estimated,
        },
        notes: vec![format!(
            "subnets and security groups are not resolved by simulate: every Provisioner may launch in every zone of {} ({}) that its zone requirement allows",
            catalogue.region,
            catalogue.zones.iter().cloned().collect::<Vec<_>>().join(", ")
        )],
        warnings,
        total: Total {
            nodes: nodes.len(),
            price_per_hour: round(per_hour),
            price_per_month: round(per_hour * HOURS_PER_MONTH),
        },
        nodes,
        pods,
        unschedulable: unplaced_list(&plan.unschedulable),
        ignored: unplaced_list(&plan.ignored),
    }
}

fn round(price: f64) -> f64 {
    (price * 1e6).round() / 1e6
}

/// The Provisioner's AWS settings, from the AWSNodeTemplate it references or its inline
/// provider, and its spot price cap, as the controller reads them.
fn node_template(p: &Provisioner, manifests: &Manifests, options: &Options) -> Result<(NodeTemplate, Option<f64>), String> {
    let (cluster, version) = (&options.cluster_name, options.kubernetes_version);
    if let Some(reference) = &p.spec.provider_ref {
        let template = manifests
            .templates
            .iter()
            .find(|t| t.name_any() == reference.name)
            .ok_or_else(|| format!("AWSNodeTemplate {:?} (spec.providerRef) is in none of the files", reference.name))?;
        let template = NodeTemplate::from_node_template(&template.spec, cluster, version).map_err(|e| e.to_string())?;
        return Ok((template, None));
    }
    let raw = p.spec.provider.clone().ok_or("neither spec.provider nor spec.providerRef is set")?;
    let provider: AwsProvider = serde_json::from_value(raw).map_err(|e| format!("spec.provider: {e}"))?;
    let template = NodeTemplate::from_provider(&provider, cluster, version).map_err(|e| e.to_string())?;
    Ok((template, cloudprovider::spot_max_price(&provider)))
}

/// Zones the Provisioners require that the catalogue's region does not have.
fn zones_outside(provisioners: &[Provisioner], catalogue: &Catalogue) -> BTreeSet<String> {
    provisioners
        .iter()
        .flat_map(|p| p.spec.requirements.iter().flatten())
        .filter(|r| r.key == ZONE_LABEL && r.operator == "In")
        .flat_map(|r| r.values.iter().flatten())
        .filter(|z| !catalogue.zones.contains(*z))
        .cloned()
        .collect()
}

/// The Nodes read with the pods bound to them. A node of a Provisioner that has not
/// initialised counts what its instance type offers, as the controller counts it.
fn existing_nodes(manifests: &Manifests, provisioners: &[ProvisionerInput], warnings: &mut Vec<String>) -> Vec<ExistingNode> {
    let mut by_node = pods_by_node(&manifests.bound);
    let nodes = manifests
        .nodes
        .iter()
        .map(|node| {
            let mut existing = ExistingNode::from_node(
                node,
                by_node
                    .remove(&node.name_any())
                    .unwrap_or_default()
                    .into_iter()
                    .map(Arc::new)
                    .collect(),
            );
            let owner = existing
                .provisioner()
                .and_then(|name| provisioners.iter().find(|p| p.provisioner.name_any() == name));
            if let Some(owner) = owner {
                existing.startup_taints = owner.provisioner.spec.startup_taints.clone().unwrap_or_default();
                let expected = existing
                    .labels
                    .get(INSTANCE_TYPE_LABEL)
                    .and_then(|name| owner.instance_types.iter().find(|it| it.name == *name))
                    .cloned();
                if let Some(it) = expected {
                    existing.expect(&it);
                }
            }
            existing
        })
        .collect();
    for (node, pods) in by_node {
        warnings.push(format!(
            "{} pod(s) bound to node {node}, which is in none of the files, are not simulated",
            pods.len()
        ));
    }
    nodes
}

#[cfg(test)]
mod tests;
