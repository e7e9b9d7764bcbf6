//! Which AMI a node boots: the family's public SSM parameter for the cluster's Kubernetes version
//! (per architecture, with the accelerated variant for NVIDIA/Neuron types), or the newest image
//! an `amiSelector` matches. Parameter names and selector filters are pure; `resolve_*` call
//! SSM / EC2.

use std::collections::BTreeMap;

use aws_sdk_ec2::Client as Ec2;
use aws_sdk_ssm::Client as Ssm;

use super::errors;
use super::instance_types::kubernetes_architecture;
use super::subnets::{describe_selector, selector_filters, split_comma, to_sdk_filters};
use crate::cloudprovider::{AmiFamily, Error, KubernetesVersion};

/// What an instance type needs from its AMI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AmiNeed {
    /// `amd64` or `arm64`.
    pub architecture: &'static str,
    /// The accelerator whose drivers the AMI must carry.
    pub accelerator: Accelerator,
}

/// Accelerators that need their own AMI variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Accelerator {
    /// Neither: the standard AMI.
    None,
    /// NVIDIA GPUs.
    Nvidia,
    /// AWS Neuron devices (Inferentia, Trainium).
    Neuron,
}

impl AmiNeed {
    /// Whether the type needs an accelerated variant (AL2's `-gpu`, Bottlerocket's `-nvidia`).
    pub fn accelerated(&self) -> bool {
        self.accelerator != Accelerator::None
    }
}

/// A resolved image.
#[derive(Clone, Debug, PartialEq)]
pub struct Ami {
    /// `ami-...`.
    pub id: String,
    /// Image name, when known.
    pub name: Option<String>,
    /// `amd64` or `arm64`.
    pub architecture: String,
}

/// The SSM parameter holding the family's AMI id, or `None` for Custom.
pub fn ssm_parameter(family: AmiFamily, kubernetes_version: KubernetesVersion, need: AmiNeed) -> Option<String> {
    let arm = need.architecture == "arm64";
    match family {
        AmiFamily::Al2 => {
            let variant = match (arm, need.accelerated()) {
                (true, _) => "amazon-linux-2-arm64",
                (false, true) => "amazon-linux-2-gpu",
                (false, false) => "amazon-linux-2",
            };
            Some(format!(
                "/aws/service/eks/optimized-ami/{kubernetes_version}/{variant}/recommended/image_id"
            ))
        }
        // aws@v0.34.0:pkg/providers/amifamily/al2023.go: standard, nvidia and neuron variants.
        AmiFamily::Al2023 => {
            let arch = if arm { "arm64" } else { "x86_64" };
            let variant = match need.accelerator {
                Accelerator::None => "standard",
                Accelerator::Nvidia => "nvidia",
                Accelerator::Neuron => "neuron",
            };
            Some(format!(
                "/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"
            ))
        }
        AmiFamily::Bottlerocket => {
            let nvidia = if need.accelerated() { "-nvidia" } else { "" };
            let arch = if arm { "arm64" } else { "x86_64" };
            Some(format!(
                "/aws/service/bottlerocket/aws-k8s-{kubernetes_version}{nvidia}/{arch}/latest/image_id"
            ))
        }
        AmiFamily::Ubuntu => Some(format!(
            "/aws/service/canonical/ubuntu/eks/20.04/{kubernetes_version}/stable/current/{}/hvm/ebs-gp2/ami-id",
            need.architecture
        )),
        AmiFamily::Custom => None,
    }
}

/// DescribeImages inputs of an `amiSelector`: owners and filters. `aws::owners` and `aws::name`
/// become the owners and the name filter; ids (`aws-ids`/`aws::ids`) drop the default owners
/// `self,amazon`; other keys are tags.
pub fn image_query(selector: &BTreeMap<String, String>) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    let mut owners = Vec::new();
    let mut by_id = false;
    let mut rest = BTreeMap::new();
    let mut filters = Vec::new();
    for (key, value) in selector {
        match key.as_str() {
            "aws::owners" => owners = split_comma(value),
            "aws::name" => filters.push(("name".to_string(), split_comma(value))),
            "aws-ids" | "aws::ids" => {
                by_id = true;
                rest.insert(key.clone(), value.clone());
            }
            _ => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    filters.extend(selector_filters(&rest, "image-id"));
    if owners.is_empty() && !by_id {
        owners = vec!["self".to_string(), "amazon".to_string()];
    }
    (owners, filters)
}

/// The AMI id the family's SSM parameter names for `need`. A parameter that does not exist is a
/// configuration error naming it, the family and the version (no AMI is published for them).
pub async fn resolve_from_ssm(ssm: &Ssm, family: AmiFamily, kubernetes_version: KubernetesVersion, need: AmiNeed) -> Result<Ami, Error> {
    let Some(name) = ssm_parameter(family, kubernetes_version, need) else {
        return Err(Error::InvalidConfiguration(format!("amiFamily {family} needs an amiSelector")));
    };
    let out = ssm.get_parameter().name(&name).send().await.map_err(|e| {
        if e.as_service_error().is_some_and(|s| s.is_parameter_not_found()) {
            Error::InvalidConfiguration(missing_parameter(family, kubernetes_version, need, &name))
        } else {
            errors::api("ssm:GetParameter", e)
        }
    })?;
    let id = out.parameter().and_then(|p| p.value()).unwrap_or_default().to_string();
    if id.is_empty() {
        return Err(Error::InvalidConfiguration(format!("SSM parameter {name} is empty")));
    }
    Ok(Ami {
        id,
        name: None,
        architecture: need.architecture.to_string(),
    })
}

/// What a missing SSM parameter means to the person who wrote the template.
pub fn missing_parameter(family: AmiFamily, kubernetes_version: KubernetesVersion, need: AmiNeed, name: &str) -> String {
    format!(
        "no amiFamily {family} AMI for Kubernetes {kubernetes_version} on {}: SSM parameter {name} does not exist (name another amiFamily, or an amiSelector)",
        need.architecture
    )
}

/// The newest available image of each architecture the selector matches.
pub async fn resolve_from_selector(ec2: &Ec2, selector: &BTreeMap<String, String>) -> Result<Vec<Ami>, Error> {
    let (owners, filters) = image_query(selector);
    let out = ec2
        .describe_images()
        .set_owners((!owners.is_empty()).then_some(owners))
        .set_filters(Some(to_sdk_filters(filters)))
        .send()
        .await
        .map_err(|e| errors::api("ec2:DescribeImages", e))?;
    let mut newest: BTreeMap<String, (String, Ami)> = BTreeMap::new();
    for image in out.images() {
        if image.state().is_some_and(|s| s.as_str() != "available") {
            continue;
        }
        let (Some(id), Some(arch)) = (
            image.image_id(),
            image.architecture().and_then(|a| kubernetes_architecture(a.as_str())),
        ) else {
            continue;
        };
        let created = image.creation_date().unwrap_or_default().to_string();
        let ami = Ami {
            id: id.to_string(),
            name: image.name().map(str::to_string),
            architecture: arch.to_string(),
        };
        if newest.get(arch).is_none_or(|(seen, old)| (&created, &ami.id) > (seen, &old.id)) {
            newest.insert(arch.to_string(), (created, ami));
        }
    }
    if newest.is_empty() {
        return Err(Error::InvalidConfiguration(format!(
            "no amd64 or arm64 image matches amiSelector {}",
            describe_selector(selector)
        )));
    }
    Ok(newest.into_values().map(|(_, ami)| ami).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMD: AmiNeed = AmiNeed {
        architecture: "amd64",
        accelerator: Accelerator::None,
    };
    const ARM: AmiNeed = AmiNeed {
        architecture: "arm64",
        accelerator: Accelerator::None,
    };
    const GPU: AmiNeed = AmiNeed {
        architecture: "amd64",
        accelerator: Accelerator::Nvidia,
    };
    const NEURON: AmiNeed = AmiNeed {
        architecture: "amd64",
        accelerator: Accelerator::Neuron,
    };
    const V1_29: KubernetesVersion = KubernetesVersion { major: 1, minor: 29 };
    const V1_33: KubernetesVersion = KubernetesVersion { major: 1, minor: 33 };

    #[test]
    fn names_the_al2_parameters_per_architecture_and_gpu() {
        assert_eq!(
            ssm_parameter(AmiFamily::Al2, V1_33, AMD).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2/recommended/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Al2, V1_33, ARM).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2-arm64/recommended/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Al2, V1_33, GPU).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2-gpu/recommended/image_id"
        );
    }

    #[test]
    fn names_the_al2023_parameters_per_architecture_and_variant() {
        assert_eq!(
            ssm_parameter(AmiFamily::Al2023, V1_33, AMD).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Al2023, V1_33, ARM).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Al2023, V1_33, GPU).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Al2023, V1_33, NEURON).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/neuron/recommended/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Al2, V1_33, NEURON).unwrap(),
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2-gpu/recommended/image_id"
        );
    }

    #[test]
    fn names_the_bottlerocket_and_ubuntu_parameters() {
        assert_eq!(
            ssm_parameter(AmiFamily::Bottlerocket, V1_33, AMD).unwrap(),
            "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/latest/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Bottlerocket, V1_33, ARM).unwrap(),
            "/aws/service/bottlerocket/aws-k8s-1.33/arm64/latest/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Bottlerocket, V1_33, GPU).unwrap(),
            "/aws/service/bottlerocket/aws-k8s-1.33-nvidia/x86_64/latest/image_id"
        );
        assert_eq!(
            ssm_parameter(AmiFamily::Ubuntu, V1_29, ARM).unwrap(),
            "/aws/service/canonical/ubuntu/eks/20.04/1.29/stable/current/arm64/hvm/ebs-gp2/ami-id"
        );
        assert_eq!(ssm_parameter(AmiFamily::Custom, V1_33, AMD), None);
    }

    #[test]
    fn builds_image_queries_from_ami_selectors() {
        let sel =
            |pairs: &[(&str, &str)]| -> BTreeMap<String, String> { pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
        let (owners, filters) = image_query(&sel(&[("aws-ids", "ami-1,ami-2")]));
        assert!(owners.is_empty());
        assert_eq!(
            filters,
            vec![("image-id".to_string(), vec!["ami-1".to_string(), "ami-2".to_string()])]
        );
        let (owners, filters) = image_query(&sel(&[("aws::name", "amazon-eks-node-*"), ("team", "a")]));
        assert_eq!(owners, vec!["self", "amazon"]);
        assert_eq!(
            filters,
            vec![
                ("name".to_string(), vec!["amazon-eks-node-*".to_string()]),
                ("tag:team".to_string(), vec!["a".to_string()]),
            ]
        );
        let (owners, _) = image_query(&sel(&[("aws::owners", "123456789012"), ("team", "*")]));
        assert_eq!(owners, vec!["123456789012"]);
    }
}
