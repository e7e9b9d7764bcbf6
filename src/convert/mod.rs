//! `karpenter-rs convert`: v1alpha5 Provisioners and v1alpha1 AWSNodeTemplates → Karpenter v1
//! `NodePool` (karpenter.sh/v1) and `EC2NodeClass` (karpenter.k8s.aws/v1) YAML, with a comment
//! wherever a setting has no v1 equivalent or the conversion had to choose.
//!
//! Every input object goes through the webhook's own path first: strict decoding, karpenter-rs's
//! defaults, validation. So an invalid object fails with the webhook's message, and the output
//! shows what the cluster ran (defaulted requirements and TTLs, discovery selectors, launch-time
//! metadata options) rather than only what was typed. Pure: text in, text out; reading files,
//! directories and stdin is in `cli`.
//!
//! v1 keeps kubelet settings in the EC2NodeClass instead of the NodePool, so a Provisioner's
//! `kubeletConfiguration` goes into the EC2NodeClass its `providerRef` names. The first
//! Provisioner (in input order) that references a template decides that class's kubelet
//! settings; another one with different settings gets a copy of the class of its own.
//!
//! Reading and admitting the input is in `read`; which classes are written and which one each
//! NodePool references is in `class_plan`; the two kinds of output object are in `nodepool` and
//! `ec2nodeclass`.

mod class_plan;
pub mod cli;
mod ec2nodeclass;
mod nodepool;
mod read;
pub mod yaml;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::apis::field_error::FieldErrors;
use crate::apis::v1alpha5::KubeletConfiguration;
use crate::apis::ApiSettings;
use crate::cloudprovider::KubernetesVersion;
use class_plan::{plan_class, template_class};
use read::{check_unique, name_of, Input, InputTemplate, Reader};
use yaml::Document;

pub use nodepool::{v1_label_restriction, V1_AWS_WELL_KNOWN_LABELS};

/// What the conversion needs to know of the cluster the objects ran on.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The cluster name and TTL defaults karpenter-rs ran with (its defaulting depends on them).
    pub api: ApiSettings,
    /// The cluster's Kubernetes version, which decides the AMI family of templates that name
    /// none (AL2 up to 1.32, AL2023 from 1.33) and Ubuntu's SSM parameters.
    pub kubernetes_version: Option<KubernetesVersion>,
    /// The instance profile karpenter-rs gave nodes whose template names none.
    pub default_instance_profile: Option<String>,
}

/// One input: a file name (or `-` for stdin) and its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// Shown in messages.
    pub name: String,
    /// YAML or JSON, one or more documents.
    pub text: String,
}

/// The converted objects and what was left alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversion {
    /// The v1 objects as one multi-document YAML stream.
    pub yaml: String,
    /// The v1 objects with their comments, in output order.
    pub documents: Vec<Document>,
    /// Documents of other kinds that were skipped, one line each.
    pub skipped: Vec<String>,
}

/// How `convert` writes the v1 objects (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A multi-document YAML stream, with comments next to the fields they are about.
    Yaml,
    /// One JSON `List` of the objects; the comments go to stderr, one line each, with the object
    /// and field they are about.
    Json,
}

impl Conversion {
    /// The text for stdout in `output`'s format, and the notes that format cannot carry (every
    /// comment, for JSON; none for YAML, which keeps them in place).
    pub fn render(&self, output: Output) -> (String, Vec<String>) {
        match output {
            Output::Yaml => (self.yaml.clone(), Vec::new()),
            Output::Json => (
                yaml::render_json_list(&self.documents),
                self.documents.iter().flat_map(yaml::notes).collect(),
            ),
        }
    }
}

/// Why an input could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A document is not YAML (or has keys JSON cannot hold).
    #[error("{at}: not valid YAML: {message}")]
    Yaml {
        /// File and document.
        at: String,
        /// The parser's message.
        message: String,
    },
    /// A Provisioner or AWSNodeTemplate of an API version this tool does not read.
    #[error("{at}: {api_version} {kind} is not converted: give karpenter.sh/v1alpha5 Provisioners and karpenter.k8s.aws/v1alpha1 AWSNodeTemplates")]
    Version {
        /// File and document.
        at: String,
        /// The document's apiVersion.
        api_version: String,
        /// The document's kind.
        kind: String,
    },
    /// An object the webhook would deny.
    #[error("{at}: {kind} {name:?} is invalid: {errors}")]
    Invalid {
        /// File and document.
        at: String,
        /// Provisioner or AWSNodeTemplate.
        kind: &'static str,
        /// metadata.name.
        name: String,
        /// The webhook's field errors.
        errors: FieldErrors,
    },
    /// A valid object that uses something Karpenter v1 cannot express.
    #[error("{at}: {kind} {name:?} has no Karpenter v1 equivalent: {errors}")]
    NoEquivalent {
        /// File and document.
        at: String,
        /// Provisioner or AWSNodeTemplate.
        kind: &'static str,
        /// metadata.name.
        name: String,
        /// What cannot be converted, by field.
        errors: FieldErrors,
    },
    /// Two objects of one kind with the same name.
    #[error("{at}: {kind} {name:?} appears twice (also at {first})")]
    Duplicate {
        /// File and document of the second one.
        at: String,
        /// Provisioner or AWSNodeTemplate.
        kind: &'static str,
        /// metadata.name.
        name: String,
        /// File and document of the first one.
        first: String,
    },
    /// Nothing to convert.
    #[error("the input holds no karpenter.sh/v1alpha5 Provisioner and no karpenter.k8s.aws/v1alpha1 AWSNodeTemplate")]
    Empty,
}

/// Every problem of one run, one per line.
#[derive(Debug)]
pub struct ConvertErrors(pub Vec<ConvertError>);

impl fmt::Display for ConvertErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConvertErrors {}

/// Converts every Provisioner and AWSNodeTemplate in `sources`; other kinds are skipped. Every
/// problem is reported at once; nothing is written when there is one.
pub fn convert(sources: &[Source], settings: &Settings) -> Result<Conversion, ConvertErrors> {
    let mut reader = Reader {
        settings,
        inputs: Vec::new(),
        skipped: Vec::new(),
        errors: Vec::new(),
    };
    for source in sources {
        reader.source(source);
    }
    let Reader {
        inputs,
        skipped,
        mut errors,
        ..
    } = reader;
    check_unique(&inputs, &mut errors);
    if !errors.is_empty() {
        return Err(ConvertErrors(errors));
    }
    if inputs.is_empty() {
        return Err(ConvertErrors(vec![ConvertError::Empty]));
    }
    let documents = convert_inputs(&inputs, settings)?;
    Ok(Conversion {
        yaml: yaml::render_stream(&documents),
        documents,
        skipped,
    })
}

fn convert_inputs(inputs: &[Input], settings: &Settings) -> Result<Vec<Document>, ConvertErrors> {
    let templates: BTreeMap<String, &InputTemplate> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::Template(t) => Some((name_of(&t.object.metadata), t.as_ref())),
            Input::Provisioner(_) => None,
        })
        .collect();
    // The kubelet settings of each template's class: those of its first Provisioner.
    let mut class_kubelet: BTreeMap<String, Option<&KubeletConfiguration>> = BTreeMap::new();
    for input in inputs {
        if let Input::Provisioner(p) = input {
            if let Some(reference) = &p.object.spec.provider_ref {
                if templates.contains_key(&reference.name) {
                    class_kubelet
                        .entry(reference.name.clone())
                        .or_insert(p.object.spec.kubelet_configuration.as_ref());
                }
            }
        }
    }
    let mut taken: BTreeSet<String> = templates.keys().cloned().collect();
    let mut documents = Vec::new();
    let mut errors = Vec::new();
    for input in inputs {
        match input {
            Input::Template(t) => {
                let name = name_of(&t.object.metadata);
                let kubelet = class_kubelet.get(&name).copied().flatten();
                let header = vec![format!(
                    "EC2NodeClass {name:?}, converted from AWSNodeTemplate {name:?} (karpenter.k8s.aws/v1alpha1) by karpenter-rs convert."
                )];
                let plan = template_class(t, name.clone(), kubelet, header, settings);
                match ec2nodeclass::convert(&plan, settings) {
                    Ok(d) => documents.push(d),
                    Err(e) => errors.push(no_equivalent(&t.at, "AWSNodeTemplate", &name, e)),
                }
            }
            Input::Provisioner(p) => {
                let name = name_of(&p.object.metadata);
                let (class_ref, plan) = plan_class(p, &templates, &class_kubelet, &mut taken, settings);
                let plan = match plan.map(|plan| ec2nodeclass::convert(&plan, settings)).transpose() {
                    Ok(plan) => plan,
                    Err(e) => {
                        errors.push(no_equivalent(&p.at, "Provisioner", &name, e));
                        continue;
                    }
                };
                documents.push(nodepool::convert(&p.object, &p.typed, &class_ref));
                documents.extend(plan);
            }
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(ConvertErrors(errors))
    }
}

fn no_equivalent(at: &str, kind: &'static str, name: &str, errors: FieldErrors) -> ConvertError {
    ConvertError::NoEquivalent {
        at: at.to_string(),
        kind,
        name: name.to_string(),
        errors: match errors.clone().into_result() {
            Err(sorted) => sorted,
            Ok(()) => errors,
        },
    }
}

/// `30s`, `1m30s`, `336h`: a v1 duration for a number of seconds.
pub fn duration(seconds: i64) -> String {
    if seconds == 0 {
        return "0s".to_string();
    }
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    let mut out = String::new();
    for (value, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if value > 0 {
            out.push_str(&format!("{value}{unit}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
