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

pub mod cli;
mod ec2nodeclass;
mod nodepool;
pub mod yaml;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::apis::decode::decode;
use crate::apis::field_error::{FieldErrors, Path};
use crate::apis::v1alpha1::{self, AwsNodeTemplate, AwsNodeTemplateSpec, AwsProvider};
use crate::apis::v1alpha5::{self, KubeletConfiguration, Provisioner, ProvisionerSpec};
use crate::apis::ApiSettings;
use crate::cloudprovider::KubernetesVersion;
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

/// A Provisioner as typed and as karpenter-rs ran it.
struct InputProvisioner {
    at: String,
    /// Decoded, defaulted and validated.
    object: Provisioner,
    /// The spec before defaulting, to say which values are defaults.
    typed: ProvisionerSpec,
}

/// An AWSNodeTemplate as karpenter-rs ran it (decoded, defaulted, validated).
struct InputTemplate {
    at: String,
    object: AwsNodeTemplate,
}

enum Input {
    Provisioner(Box<InputProvisioner>),
    Template(Box<InputTemplate>),
}

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

/// What the documents read so far held.
struct Reader<'s> {
    settings: &'s Settings,
    inputs: Vec<Input>,
    skipped: Vec<String>,
    errors: Vec<ConvertError>,
}

impl Reader<'_> {
    fn source(&mut self, source: &Source) {
        for (i, document) in serde_yaml_ng::Deserializer::from_str(&source.text).enumerate() {
            let at = format!("{}: document {}", source.name, i + 1);
            match Value::deserialize(document) {
                Ok(value) => self.object(value, &at),
                Err(e) => {
                    self.errors.push(ConvertError::Yaml {
                        at,
                        message: e.to_string(),
                    });
                    // The parser cannot go on after a syntax error.
                    return;
                }
            }
        }
    }

    fn object(&mut self, mut value: Value, at: &str) {
        if value.is_null() {
            return;
        }
        let api_version = value["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        // `kubectl get provisioners -o yaml` writes a List.
        if kind.ends_with("List") {
            if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
                for (j, item) in std::mem::take(items).into_iter().enumerate() {
                    self.object(item, &format!("{at}, item {}", j + 1));
                }
                return;
            }
        }
        if let Some(fields) = value.as_object_mut() {
            // Status is what the controller observed; v1 objects start without one.
            fields.remove("status");
        }
        let at = at.to_string();
        let settings = self.settings;
        let api = &settings.api;
        let read = match (api_version.as_str(), kind.as_str()) {
            ("karpenter.sh/v1alpha5", "Provisioner") => read_provisioner(&value, &at, api).map(|p| Input::Provisioner(Box::new(p))),
            ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => read_template(&value, &at, api).map(|t| Input::Template(Box::new(t))),
            (_, "Provisioner" | "AWSNodeTemplate") => Err(ConvertError::Version { at, api_version, kind }),
            _ => {
                let name = value["metadata"]["name"].as_str().unwrap_or_default();
                self.skipped.push(format!(
                    "{at}: skipped {api_version} {kind} {name:?}: not a Provisioner or AWSNodeTemplate"
                ));
                return;
            }
        };
        match read {
            Ok(input) => self.inputs.push(input),
            Err(e) => self.errors.push(e),
        }
    }
}

/// The webhook's path for a Provisioner: decode strictly, default, validate.
fn read_provisioner(value: &Value, at: &str, api: &ApiSettings) -> Result<InputProvisioner, ConvertError> {
    let mut typed = ProvisionerSpec::default();
    let object = admit::<Provisioner>(value, at, "Provisioner", |p| {
        typed = p.spec.clone();
        v1alpha5::defaults::set_defaults(&mut p.spec, api);
        v1alpha5::validation::validate(p, api)
    })?;
    Ok(InputProvisioner {
        at: at.to_string(),
        object,
        typed,
    })
}

/// The webhook's path for an AWSNodeTemplate.
fn read_template(value: &Value, at: &str, api: &ApiSettings) -> Result<InputTemplate, ConvertError> {
    let object = admit::<AwsNodeTemplate>(value, at, "AWSNodeTemplate", |t| {
        v1alpha1::defaults::set_defaults(&mut t.spec, &api.cluster_name);
        v1alpha1::validation::validate(t)
    })?;
    Ok(InputTemplate {
        at: at.to_string(),
        object,
    })
}

/// Decodes `value` strictly, then defaults and validates it with `check`; either failure is the
/// webhook's denial.
fn admit<T: DeserializeOwned + schemars::JsonSchema>(
    value: &Value,
    at: &str,
    kind: &'static str,
    check: impl FnOnce(&mut T) -> Result<(), FieldErrors>,
) -> Result<T, ConvertError> {
    let invalid = |errors: FieldErrors| ConvertError::Invalid {
        at: at.to_string(),
        kind,
        name: value["metadata"]["name"].as_str().unwrap_or_default().to_string(),
        errors,
    };
    let mut object: T = decode(value, &Path::default()).map_err(|e| invalid(e.into()))?;
    check(&mut object).map_err(invalid)?;
    Ok(object)
}

fn check_unique(inputs: &[Input], errors: &mut Vec<ConvertError>) {
    let mut seen: BTreeMap<(&'static str, String), String> = BTreeMap::new();
    for input in inputs {
        let (kind, name, at) = match input {
            Input::Provisioner(p) => ("Provisioner", name_of(&p.object.metadata), &p.at),
            Input::Template(t) => ("AWSNodeTemplate", name_of(&t.object.metadata), &t.at),
        };
        match seen.get(&(kind, name.clone())) {
            Some(first) => errors.push(ConvertError::Duplicate {
                at: at.clone(),
                kind,
                name,
                first: first.clone(),
            }),
            None => {
                seen.insert((kind, name), at.clone());
            }
        }
    }
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

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

/// The EC2NodeClass a Provisioner's NodePool references, and the class to write for it when the
/// Provisioner brings one of its own (an inline provider, or kubelet settings that differ from
/// those of its template's class).
fn plan_class<'a>(
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
fn template_class<'a>(
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
