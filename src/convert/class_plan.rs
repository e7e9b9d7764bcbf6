//! Which EC2NodeClass each NodePool references, and which classes to write: one per
//! AWSNodeTemplate with the kubelet settings of its first Provisioner, a copy for a Provisioner
//! whose kubelet settings differ, and one for each inline `spec.provider`.

use std::collections::{BTreeMap, BTreeSet};

use crate::apis::decode::decode;
use crate::apis::field_error::Path;
use crate::apis::v1alpha1::{AwsNodeTemplateSpec, AwsProvider};
use crate::apis::v1alpha5::KubeletConfiguration;

use super::ec2nodeclass;
use super::read::{name_of, InputProvisioner, InputTemplate};
use super::Settings;

/// Where a NodePool's nodes get their EC2NodeClass, and what to say about it.
pub(crate) struct ClassRef {
    /// The EC2NodeClass name.
    pub name: String,
    /// Comment lines above `nodeClassRef`.
    pub notes: Vec<String>,
}

/// An EC2NodeClass to write: from which AWS settings, with which kubelet settings.
pub(crate) struct ClassPlan<'a> {
    /// Its name.
    pub name: String,
    /// Labels and annotations of its metadata.
    pub metadata: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    /// The AWS settings (an inline provider turned into a template spec).
    pub spec: AwsNodeTemplateSpec,
    /// Where those settings were, for error paths: `spec` or `spec.provider`.
    pub path: Path,
    /// Kubelet settings of the Provisioner(s) using it.
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// The cluster its nodes join (the inline provider's `clusterName`, else the configured one).
    pub cluster_name: String,
    /// Comment lines at the top of the document.
    pub header: Vec<String>,
    /// Comment lines above `spec`.
    pub notes: Vec<String>,
}

/// The EC2NodeClass a Provisioner's NodePool references, and the class to write for it when the
/// Provisioner brings one of its own (an inline provider, or kubelet settings that differ from
/// those of its template's class).
pub(super) fn plan_class<'a>(
    p: &'a InputProvisioner,
    templates: &BTreeMap<String, &'a InputTemplate>,
    class_kubelet: &BTreeMap<String, Option<&KubeletConfiguration>>,
    taken: &mut BTreeSet<String>,
    settings: &Settings,
) -> (ClassRef, Option<ClassPlan<'a>>) {
    let name = name_of(&p.object.metadata);
    let spec = &p.object.spec;
    let kubelet = spec.kubelet_configuration.as_ref();
    if let Some(reference) = &spec.provider_ref {
        let template_name = reference.name.clone();
        let Some(template) = templates.get(&template_name).copied() else {
            let mut notes = Vec::new();
            if let Some(k) = kubelet {
                notes.push(format!(
                    "kubeletConfiguration: Karpenter v1 keeps kubelet settings in the EC2NodeClass (spec.kubelet). AWSNodeTemplate {template_name:?} was not in the input, so add them to EC2NodeClass {template_name:?} yourself:"
                ));
                notes.push(ec2nodeclass::commented_kubelet(k));
            }
            return (
                ClassRef {
                    name: template_name,
                    notes,
                },
                None,
            );
        };
        if class_kubelet.get(&template_name).copied().flatten() == kubelet {
            let notes = if kubelet.is_some() {
                vec![format!(
                    "kubeletConfiguration moved to EC2NodeClass {template_name:?} (spec.kubelet): Karpenter v1 keeps kubelet settings there."
                )]
            } else {
                Vec::new()
            };
            return (
                ClassRef {
                    name: template_name,
                    notes,
                },
                None,
            );
        }
        let copy = unique_name(&format!("{template_name}-{name}"), taken);
        let header = vec![
            format!(
                "EC2NodeClass {copy:?}: AWSNodeTemplate {template_name:?} (karpenter.k8s.aws/v1alpha1) with the kubelet settings of Provisioner {name:?}, converted by karpenter-rs convert."
            ),
            format!("Karpenter v1 keeps kubelet settings in the EC2NodeClass, and EC2NodeClass {template_name:?} carries those of another Provisioner."),
        ];
        let plan = template_class(template, copy.clone(), kubelet, header, settings);
        let notes = vec![format!(
            "kubeletConfiguration: Karpenter v1 keeps kubelet settings in the EC2NodeClass; this Provisioner's differ from those in EC2NodeClass {template_name:?}, so it gets the copy {copy:?} below."
        )];
        return (ClassRef { name: copy, notes }, Some(plan));
    }
    // Validation guarantees an inline provider that decodes.
    let raw = spec.provider.clone().unwrap_or_default();
    let provider: AwsProvider = decode(&raw, &Path::new("spec.provider")).unwrap_or_default();
    let class = unique_name(&name, taken);
    let mut notes = Vec::new();
    if let Some(cluster) = &provider.cluster_name {
        notes.push(format!(
            "spec.provider.clusterName: {cluster} has no Karpenter v1 equivalent: v1 takes the cluster name from its own setting (settings.clusterName)."
        ));
    }
    if let Some(price) = &provider.spot_price {
        notes.push(format!(
            "spec.provider.spotPrice: {price:?} has no Karpenter v1 equivalent: v1 has no maximum spot price and launches spot capacity at the current spot price."
        ));
    }
    let cluster_name = provider
        .cluster_name
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| settings.api.cluster_name.clone());
    let plan = ClassPlan {
        name: class.clone(),
        metadata: &p.object.metadata,
        spec: AwsNodeTemplateSpec {
            subnet_selector: provider.subnet_selector,
            security_group_selector: provider.security_group_selector,
            tags: provider.tags,
            ami_family: provider.ami_family,
            instance_profile: provider.instance_profile,
            block_device_mappings: provider.block_device_mappings,
            metadata_options: provider.metadata_options,
            context: provider.context,
            launch_template: provider.launch_template,
            ..Default::default()
        },
        path: Path::new("spec.provider"),
        kubelet,
        cluster_name,
        header: vec![format!(
            "EC2NodeClass {class:?}, converted from the inline spec.provider of Provisioner {name:?} (karpenter.sh/v1alpha5) by karpenter-rs convert."
        )],
        notes,
    };
    let mut ref_notes = vec![format!(
        "spec.provider (inline AWS settings) has no Karpenter v1 equivalent: they are in EC2NodeClass {class:?} below."
    )];
    if kubelet.is_some() {
        ref_notes.push(format!(
            "kubeletConfiguration moved to EC2NodeClass {class:?} (spec.kubelet): Karpenter v1 keeps kubelet settings there."
        ));
    }
    (
        ClassRef {
            name: class,
            notes: ref_notes,
        },
        Some(plan),
    )
}

/// The EC2NodeClass `name` of an AWSNodeTemplate, with `kubelet` settings.
pub(super) fn template_class<'a>(
    template: &'a InputTemplate,
    name: String,
    kubelet: Option<&'a KubeletConfiguration>,
    header: Vec<String>,
    settings: &Settings,
) -> ClassPlan<'a> {
    ClassPlan {
        name,
        metadata: &template.object.metadata,
        spec: template.object.spec.clone(),
        path: Path::new("spec"),
        kubelet,
        cluster_name: settings.api.cluster_name.clone(),
        header,
        notes: Vec::new(),
    }
}

/// `base`, or `base-2`, `base-3`, ... when that name is taken; the result is taken from then on.
fn unique_name(base: &str, taken: &mut BTreeSet<String>) -> String {
    let mut name = base.to_string();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}
