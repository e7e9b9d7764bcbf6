//! The manifests `simulate` reads: multi-document YAML or JSON (and `kind: List`) → Provisioners
//! and AWSNodeTemplates through the webhook's own defaulting and validation, workloads expanded
//! into pending pods, DaemonSets, and existing Nodes with the pods bound to them. Pure: the CLI
//! hands in each file's name and text.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::Error;
use crate::apis::decode::decode;
use crate::apis::field_error::{FieldErrors, Path};
use crate::apis::v1alpha1::{self, AwsNodeTemplate};
use crate::apis::v1alpha5::{self, Provisioner};
use crate::apis::ApiSettings;

/// One input file: the name it is reported under (`-` for stdin) and its text.
#[derive(Clone, Debug)]
pub struct Source {
    /// File name as given on the command line.
    pub name: String,
    /// Its content.
    pub text: String,
}

/// Everything read from the files, ready to simulate.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    /// Provisioners, defaulted and validated as the webhook admits them.
    pub provisioners: Vec<Provisioner>,
    /// AWSNodeTemplates, defaulted and validated as the webhook admits them.
    pub templates: Vec<AwsNodeTemplate>,
    /// Pending pods: bare Pods without `spec.nodeName` and every replica of the workloads.
    pub pending: Vec<Pod>,
    /// DaemonSets: their pods are overhead of every new node they would run on.
    pub daemonsets: Vec<DaemonSet>,
    /// Existing Nodes.
    pub nodes: Vec<Node>,
    /// Pods bound to a node (`spec.nodeName`).
    pub bound: Vec<Pod>,
    /// Objects read but not simulated, and admission warnings.
    pub warnings: Vec<String>,
}

/// The object header every document has.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

impl Manifests {
    /// Reads every document of every source, in order. The first invalid object is the error:
    /// a Provisioner or AWSNodeTemplate with the webhook's denial message, any other object
    /// with the field that could not be read.
    pub fn read(sources: &[Source], settings: &ApiSettings) -> Result<Manifests, Error> {
        let mut manifests = Manifests::default();
        for source in sources {
            for (index, document) in documents(source)?.into_iter().enumerate() {
                let at = Location {
                    file: &source.name,
                    document: index + 1,
                };
                manifests.add(&at, document, settings)?;
            }
        }
        Ok(manifests)
    }

    fn add(&mut self, at: &Location<'_>, object: Value, settings: &ApiSettings) -> Result<(), Error> {
        let header: Header = serde_json::from_value(object.clone()).map_err(|e| at.error(format!("not a Kubernetes object: {e}")))?;
        let group = header.api_version.split_once('/').map_or("", |(g, _)| g);
        match (group, header.kind.as_str()) {
            (_, "List") | (_, "") if object.get("items").is_some() => {
                let items = object.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
                for item in items {
                    self.add(at, item, settings)?;
                }
            }
            ("karpenter.sh", "Provisioner") => {
                let (provisioner, warnings) = admit_provisioner(&object, settings).map_err(|message| at.error(message))?;
                self.warnings.extend(warnings);
                self.provisioners.push(provisioner);
            }
            ("karpenter.k8s.aws", "AWSNodeTemplate") => {
                let template = admit_template(&object, settings).map_err(|message| at.error(message))?;
                self.templates.push(template);
            }
            ("apps", "Deployment") => {
                let d: Deployment = read_object(at, &object)?;
                let spec = d.spec.as_ref();
                let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
                self.replicas(&d.metadata, spec.map(|s| &s.template), replicas, "Deployment");
            }
            ("apps", "StatefulSet") => {
                let s: StatefulSet = read_object(at, &object)?;
                let spec = s.spec.as_ref();
                let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
                self.replicas(&s.metadata, spec.map(|s| &s.template), replicas, "StatefulSet");
            }
            ("apps", "ReplicaSet") => {
                let r: ReplicaSet = read_object(at, &object)?;
                let spec = r.spec.as_ref();
                let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
                self.replicas(&r.metadata, spec.and_then(|s| s.template.as_ref()), replicas, "ReplicaSet");
            }
            ("batch", "Job") => {
                let j: Job = read_object(at, &object)?;
                let spec = j.spec.as_ref();
                // The Job controller runs `parallelism` pods at once, never more than there are
                // completions left.
                let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
                let active = match spec.and_then(|s| s.completions) {
                    Some(completions) => parallelism.min(completions),
                    None => parallelism,
                };
                self.replicas(&j.metadata, spec.map(|s| &s.template), active, "Job");
            }
            ("apps", "DaemonSet") => {
                let ds: DaemonSet = read_object(at, &object)?;
                self.daemonsets.push(ds);
            }
            ("", "Pod") => {
                let mut pod: Pod = read_object(at, &object)?;
                if pod.metadata.namespace.is_none() {
                    pod.metadata.namespace = Some("default".into());
                }
                let bound = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| !n.is_empty());
                if crate::scheduling::pods::is_terminal(&pod) {
                    self.warnings
                        .push(format!("{at}: Pod {} is finished; ignored", object_name(&pod.metadata)));
                } else if bound {
                    self.bound.push(pod);
                } else {
                    self.pending.push(pod);
                }
            }
            ("", "Node") => {
                let node: Node = read_object(at, &object)?;
                self.nodes.push(node);
            }
            (_, kind) => {
                let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                let kind = if kind.is_empty() { "an object without kind" } else { kind };
                self.warnings
                    .push(format!("{at}: {kind} {name:?} ({}) is not simulated; ignored", header.api_version));
            }
        }
        Ok(())
    }

    /// `count` pending pods from `template`, named `<owner>-<i>`, in the owner's namespace.
    fn replicas(
        &mut self,
        owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        template: Option<&PodTemplateSpec>,
        count: i32,
        kind: &str,
    ) {
        let owner_name = owner.name.clone().unwrap_or_default();
        let namespace = owner.namespace.clone().unwrap_or_else(|| "default".to_string());
        let Some(template) = template else {
            self.warnings
                .push(format!("{kind} {namespace}/{owner_name} has no pod template; no pods"));
            return;
        };
        for i in 0..count.max(0) {
            let mut metadata = template.metadata.clone().unwrap_or_default();
            let name = format!("{owner_name}-{i}");
            metadata.uid = Some(format!("{namespace}/{name}"));
            metadata.name = Some(name);
            metadata.namespace = Some(namespace.clone());
            self.pending.push(Pod {
                metadata,
                spec: template.spec.clone(),
                status: None,
            });
        }
    }
}

/// Where an object was read, for messages: `file.yaml (document 2)`.
struct Location<'a> {
    file: &'a str,
    document: usize,
}

impl Location<'_> {
    fn error(&self, message: String) -> Error {
        Error::Invalid {
            file: self.file.to_string(),
            document: self.document,
            message,
        }
    }
}

impl std::fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (document {})", self.file, self.document)
    }
}

/// The documents of a YAML (or JSON) stream; empty documents are skipped.
fn documents(source: &Source) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(&source.text).enumerate() {
        let value = Value::deserialize(document).map_err(|e| Error::Invalid {
            file: source.name.clone(),
            document: index + 1,
            message: format!("not YAML or JSON: {e}"),
        })?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

fn object_name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Reads a Kubernetes object, naming the field at fault when it cannot.
fn read_object<T: DeserializeOwned + schemars::JsonSchema>(at: &Location<'_>, object: &Value) -> Result<T, Error> {
    decode_like_the_webhook(object).map_err(|errors| {
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        at.error(format!("{kind} {name:?} is invalid: {errors}"))
    })
}

/// Decodes as the webhook does: the first problem, with its field path and value.
fn decode_like_the_webhook<T: DeserializeOwned + schemars::JsonSchema>(object: &Value) -> Result<T, FieldErrors> {
    decode::<T>(object, &Path::default()).map_err(FieldErrors::from)
}

/// The webhook's denial message for an object of `kind` named `name`.
fn denial(kind: &str, name: &str, errors: &FieldErrors) -> String {
    format!("{kind} {name:?} is invalid: {errors}")
}

/// A Provisioner as the webhook admits it: decoded, defaulted (`POST /mutate`), validated
/// (`POST /validate`); the admission warnings beside it. An error is the webhook's denial.
pub fn admit_provisioner(object: &Value, settings: &ApiSettings) -> Result<(Provisioner, Vec<String>), String> {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let mut provisioner: Provisioner = decode_like_the_webhook(object).map_err(|e| denial("Provisioner", name, &e))?;
    v1alpha5::defaults::set_defaults(&mut provisioner.spec, settings);
    v1alpha5::validation::validate(&provisioner, settings).map_err(|e| denial("Provisioner", name, &e))?;
    let warnings = v1alpha5::validation::warnings(&provisioner.spec)
        .into_iter()
        .map(|w| format!("Provisioner {name:?}: {w}"))
        .collect();
    Ok((provisioner, warnings))
}

/// An AWSNodeTemplate as the webhook admits it; an error is the webhook's denial.
pub fn admit_template(object: &Value, settings: &ApiSettings) -> Result<AwsNodeTemplate, String> {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let mut template: AwsNodeTemplate = decode_like_the_webhook(object).map_err(|e| denial("AWSNodeTemplate", name, &e))?;
    v1alpha1::defaults::set_defaults(&mut template.spec, &settings.cluster_name);
    v1alpha1::validation::validate(&template).map_err(|e| denial("AWSNodeTemplate", name, &e))?;
    Ok(template)
}

/// The cluster name of the first inline `spec.provider.clusterName` among the Provisioners in
/// `sources`, for `--cluster-name` left empty (so such a Provisioner is not denied for naming
/// another cluster than the simulated one).
pub fn provider_cluster_name(sources: &[Source]) -> Option<String> {
    sources
        .iter()
        .filter_map(|s| documents(s).ok())
        .flatten()
        .flat_map(|d| match d.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None => vec![d],
        })
        .filter(|d| d.get("kind").and_then(Value::as_str) == Some("Provisioner"))
        .find_map(|d| d.pointer("/spec/provider/clusterName").and_then(Value::as_str).map(str::to_string))
}

/// Pods of `bound` by the node they are bound to.
pub fn pods_by_node(bound: &[Pod]) -> BTreeMap<String, Vec<Pod>> {
    let mut by_node: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in bound {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            by_node.entry(node).or_default().push(pod.clone());
        }
    }
    by_node
}
