//! The AMI part of an EC2NodeClass: a family becomes an `alias` term (or, for Ubuntu, the SSM
//! parameters karpenter-rs read), an `amiSelector` becomes selector terms with `amiFamily` beside
//! them, and a template without a family gets the one karpenter-rs defaulted to for the cluster's
//! Kubernetes version.

use std::collections::BTreeMap;

use super::{selector_terms, too_many_terms, MAX_TERMS};
use crate::apis::field_error::{FieldError, Path};
use crate::apis::v1alpha1::validation::ID_FILTER_KEYS;
use crate::apis::v1alpha1::BlockDeviceMapping;
use crate::cloudprovider::aws::ami::{ssm_parameter, Accelerator, AmiNeed};
use crate::cloudprovider::aws::launch_template::default_block_devices;
use crate::cloudprovider::aws::subnets::split_comma;
use crate::cloudprovider::{default_ami_family, AmiFamily};
use crate::convert::yaml::{Item, MapBuilder, Node};
use crate::convert::Settings;

/// The AMI part of a class: `amiFamily` when v1 needs it, the terms, and Ubuntu's root device.
pub(super) struct Ami {
    pub(super) family: Option<String>,
    pub(super) family_notes: Vec<String>,
    pub(super) terms: Node,
    pub(super) notes: Vec<String>,
    pub(super) block_devices: Option<Vec<BlockDeviceMapping>>,
}

/// The AMI part of the class for `spec.amiFamily` and `spec.amiSelector`: an `alias` term for a
/// family's newest AMI, or the selector's AMIs as terms with `amiFamily` beside them.
pub(super) fn ami(
    family: Option<&str>,
    selector: Option<&BTreeMap<String, String>>,
    path: &Path,
    settings: &Settings,
) -> Result<Ami, FieldError> {
    let mut family_notes = Vec::new();
    let family = match family {
        Some(f) => f.to_string(),
        None => {
            let (default, note) = match settings.kubernetes_version {
                Some(v) => (
                    default_ami_family(v),
                    format!("amiFamily was not set: karpenter-rs uses AL2 up to Kubernetes 1.32 and AL2023 from 1.33 on; --kubernetes-version {v} gives this."),
                ),
                None => (
                    AmiFamily::Al2,
                    "amiFamily was not set: karpenter-rs uses AL2 up to Kubernetes 1.32 and AL2023 from 1.33 on. This assumes AL2: convert with --kubernetes-version to pick by your cluster's version.".to_string(),
                ),
            };
            family_notes.push(note);
            match default {
                AmiFamily::Al2023 => "AL2023",
                _ => "AL2",
            }
            .to_string()
        }
    };
    let (v1_family, ubuntu_note) = if family == "Ubuntu" {
        (
            "AL2".to_string(),
            Some(
                "amiFamily Ubuntu has no Karpenter v1 equivalent: v1 boots Ubuntu's EKS AMIs as amiFamily AL2 (the same bootstrap script)."
                    .to_string(),
            ),
        )
    } else {
        (family.clone(), None)
    };
    if let Some(selector) = selector {
        // Explicit AMIs: v1 needs amiFamily beside non-alias terms.
        let mut rest = selector.clone();
        let names = rest.remove("aws::name").map(|v| split_comma(&v)).unwrap_or_default();
        let owners = rest.remove("aws::owners").map(|v| split_comma(&v));
        let by_id = selector.keys().any(|k| ID_FILTER_KEYS.contains(&k.as_str()));
        let (terms, mut notes) = if by_id {
            selector_terms(selector, &path.child("amiSelector"), &[])?
        } else {
            // karpenter-rs searched images owned by self and amazon unless told otherwise.
            let owners = owners.unwrap_or_else(|| vec!["self".to_string(), "amazon".to_string()]);
            let mut notes = Vec::new();
            let names: Vec<Option<String>> = if !names.is_empty() {
                names.into_iter().map(Some).collect()
            } else if rest.is_empty() {
                // v1 wants more than an owner in a term; any name is what an owner alone meant.
                notes.push("amiSelector named only owners: name \"*\" keeps it matching every image they own".to_string());
                vec![Some("*".to_string())]
            } else {
                vec![None]
            };
            let mut items = Vec::new();
            for name in &names {
                for owner in &owners {
                    let mut extra = Vec::new();
                    if let Some(name) = name {
                        extra.push(("name", name.clone()));
                    }
                    extra.push(("owner", owner.clone()));
                    let (node, n) = selector_terms(&rest, &path.child("amiSelector"), &extra)?;
                    if let Node::Seq(terms) = node {
                        items.extend(terms);
                    }
                    for note in n {
                        if !notes.contains(&note) {
                            notes.push(note);
                        }
                    }
                }
            }
            if items.len() > MAX_TERMS {
                return Err(too_many_terms(&path.child("amiSelector"), items.len()));
            }
            notes.push("from amiSelector: aws::name and aws::owners became each term's name and owner (karpenter-rs searched owners self and amazon when none were given)".to_string());
            (Node::Seq(items), notes)
        };
        // Ubuntu's root device is not AL2's: keep the one karpenter-rs gave it.
        let block_devices = ubuntu_note.is_some().then(|| default_block_devices(AmiFamily::Ubuntu));
        family_notes.extend(ubuntu_note);
        notes.dedup();
        return Ok(Ami {
            family: Some(v1_family),
            family_notes,
            terms,
            notes,
            block_devices,
        });
    }
    let alias = match family.as_str() {
        "AL2" => "al2",
        "AL2023" => "al2023",
        "Bottlerocket" => "bottlerocket",
        "Windows2019" => "windows2019",
        "Windows2022" => "windows2022",
        "Ubuntu" => return ubuntu(path, settings, family_notes.into_iter().chain(ubuntu_note).collect()),
        _ => {
            return Err(FieldError::required(
                path.child("amiFamily"),
                format!("amiFamily {family} names no AMIs of its own, and Karpenter v1 needs amiSelectorTerms: select the AMIs with amiSelector and convert again"),
            ))
        }
    };
    let mut term = MapBuilder::new();
    term.field("alias", Node::str(format!("{alias}@latest")));
    let mut notes = family_notes;
    notes.push(format!(
        "amiFamily {family}: karpenter-rs booted the family's newest EKS AMI, as @latest does.{}",
        match family.as_str() {
            "Windows2019" | "Windows2022" => "",
            "Bottlerocket" => " Pin a release (bottlerocket@v1.20.0) to roll new AMIs out yourself.",
            _ => " Pin a release (e.g. al2023@v20240807) to roll new AMIs out yourself.",
        }
    ));
    Ok(Ami {
        family: None,
        family_notes: Vec::new(),
        terms: Node::Seq(vec![Item::plain(term.build())]),
        notes,
        block_devices: None,
    })
}

/// Ubuntu without an amiSelector: karpenter-rs read Canonical's SSM parameters for the cluster's
/// version; v1 reads the same parameters through `ssmParameter` terms.
fn ubuntu(path: &Path, settings: &Settings, family_notes: Vec<String>) -> Result<Ami, FieldError> {
    let Some(version) = settings.kubernetes_version else {
        return Err(FieldError::required(
            path.child("amiFamily"),
            "amiFamily Ubuntu: karpenter-rs found Ubuntu's AMIs through Canonical's SSM parameters for the cluster's Kubernetes version; give --kubernetes-version to turn them into ssmParameter terms",
        ));
    };
    let terms = ["amd64", "arm64"]
        .into_iter()
        .filter_map(|architecture| {
            ssm_parameter(
                AmiFamily::Ubuntu,
                version,
                AmiNeed {
                    architecture,
                    accelerator: Accelerator::None,
                },
            )
        })
        .map(|parameter| {
            let mut t = MapBuilder::new();
            t.field("ssmParameter", Node::str(parameter));
            Item::plain(t.build())
        })
        .collect();
    Ok(Ami {
        family: Some("AL2".to_string()),
        family_notes,
        terms: Node::Seq(terms),
        notes: vec![format!(
            "the SSM parameters karpenter-rs read Ubuntu's AMIs from, for Kubernetes {version}"
        )],
        block_devices: Some(default_block_devices(AmiFamily::Ubuntu)),
    })
}
