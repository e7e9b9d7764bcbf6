//! Reading the input: every document of every source, Lists unpacked, through the webhook's
//! own path (strict decoding, karpenter-rs's defaults, validation), so that an invalid object
//! fails with the webhook's message; other kinds are skipped and names must be unique per kind.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::apis::decode::decode;
use crate::apis::field_error::{FieldErrors, Path};
use crate::apis::v1alpha1::{self, AwsNodeTemplate};
use crate::apis::v1alpha5::{self, Provisioner, ProvisionerSpec};
use crate::apis::ApiSettings;

use super::{ConvertError, Settings, Source};

/// A Provisioner as typed and as karpenter-rs ran it.
pub(super) struct InputProvisioner {
    pub(super) at: String,
    /// Decoded, defaulted and validated.
    pub(super) object: Provisioner,
    /// The spec before defaulting, to say which values are defaults.
    pub(super) typed: ProvisionerSpec,
}

/// An AWSNodeTemplate as karpenter-rs ran it (decoded, defaulted, validated).
pub(super) struct InputTemplate {
    pub(super) at: String,
    pub(super) object: AwsNodeTemplate,
}

/// One object of the input, in input order.
pub(super) enum Input {
    Provisioner(Box<InputProvisioner>),
    Template(Box<InputTemplate>),
}

/// What the documents read so far held.
pub(super) struct Reader<'s> {
    pub(super) settings: &'s Settings,
    pub(super) inputs: Vec<Input>,
    pub(super) skipped: Vec<String>,
    pub(super) errors: Vec<ConvertError>,
}

impl Reader<'_> {
    /// Reads every document of `source`.
    pub(super) fn source(&mut self, source: &Source) {
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

/// A `Duplicate` error for each object whose kind and name an earlier one had.
pub(super) fn check_unique(inputs: &[Input], errors: &mut Vec<ConvertError>) {
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

/// `metadata.name`, empty when unset.
pub(super) fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}
