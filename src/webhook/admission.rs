//! AdmissionReview in, AdmissionReview out: reads the review, dispatches on the object's group and
//! kind, runs the pure rules of `apis`, and builds the response (denial with every field error,
//! JSON patch of defaults, warnings). No I/O here: the HTTP layer hands in bytes.

use json_patch::Patch;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Status, TypeMeta};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::apis::decode::decode;
use crate::apis::field_error::{FieldErrors, Path};
use crate::apis::v1alpha1::{self, AwsNodeTemplate};
use crate::apis::v1alpha5::{self, Provisioner};
use crate::apis::ApiSettings;
use crate::metrics::result;

/// The AdmissionReview version karpenter-rs speaks.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

/// Which webhook was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /mutate`: defaults, as a JSON patch.
    Mutate,
    /// `POST /validate`: rules, as allowed or denied.
    Validate,
}

impl Endpoint {
    /// The HTTP path.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Mutate => "/mutate",
            Endpoint::Validate => "/validate",
        }
    }
}

/// The kinds karpenter-rs serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// karpenter.sh/v1alpha5 Provisioner.
    Provisioner,
    /// karpenter.k8s.aws/v1alpha1 AWSNodeTemplate.
    AwsNodeTemplate,
}

impl Kind {
    fn from_gvk(group: &str, version: &str, kind: &str) -> Option<Kind> {
        match (group, version, kind) {
            ("karpenter.sh", "v1alpha5", "Provisioner") => Some(Kind::Provisioner),
            ("karpenter.k8s.aws", "v1alpha1", "AWSNodeTemplate") => Some(Kind::AwsNodeTemplate),
            _ => None,
        }
    }

    /// The kind as users write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Provisioner => "Provisioner",
            Kind::AwsNodeTemplate => "AWSNodeTemplate",
        }
    }
}

/// The answer to one admission request, and what the metrics and logs need to know about it.
#[derive(Debug)]
pub struct Outcome {
    /// The response body.
    pub review: Value,
    /// HTTP status: 200 for every review with a uid; 400 when no uid could be read.
    pub http_status: u16,
    /// Kind label (`Provisioner`, `AWSNodeTemplate`, or `unknown`).
    pub kind: &'static str,
    /// Operation label (`CREATE`, `UPDATE`, ..., or `unknown`).
    pub operation: &'static str,
    /// Result label, one of `metrics::result`.
    pub result: &'static str,
    /// Object name, for logs.
    pub name: String,
    /// Denial or invalid reason, for logs.
    pub reason: Option<String>,
}

/// Answers one AdmissionReview body. Never panics on any input.
pub fn review(endpoint: Endpoint, body: &[u8], settings: &ApiSettings) -> Outcome {
    let raw: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return invalid(None, format!("request body is not JSON: {e}")),
    };
    let uid = raw.pointer("/request/uid").and_then(Value::as_str).map(str::to_string);
    let Some(uid) = uid.filter(|u| !u.is_empty()) else {
        return invalid(None, "not an AdmissionReview: request.uid is missing".to_string());
    };
    let api_version = raw.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = raw.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version != ADMISSION_API_VERSION || kind != "AdmissionReview" {
        return invalid(
            Some(uid),
            format!("expected kind AdmissionReview of {ADMISSION_API_VERSION}, got kind {kind:?} of {api_version:?}; configure admissionReviewVersions: [v1]"),
        );
    }
    let request: AdmissionRequest<DynamicObject> = match serde_json::from_value::<AdmissionReview<DynamicObject>>(raw.clone())
        .map_err(|e| e.to_string())
        .and_then(|r| r.try_into().map_err(|_| "request is missing".to_string()))
    {
        Ok(r) => r,
        Err(e) => return invalid(Some(uid), format!("malformed AdmissionReview: {e}")),
    };
    let operation = operation_label(&request.operation);
    let name = request.name.clone();
    let response = AdmissionResponse::from(&request);
    let gvk = &request.kind;
    let Some(kind) = Kind::from_gvk(&gvk.group, &gvk.version, &gvk.kind) else {
        let message = format!(
            "karpenter-rs does not serve {}/{}, Kind={}; it serves Provisioner (karpenter.sh/v1alpha5) and AWSNodeTemplate (karpenter.k8s.aws/v1alpha1)",
            gvk.group, gvk.version, gvk.kind
        );
        return finish(deny(response, &message), "unknown", operation, name, Some(message));
    };
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return finish(response, kind.as_str(), operation, name, None);
    }
    let Some(object) = raw.pointer("/request/object").filter(|o| o.is_object()) else {
        let message = format!("{} request carries no object", operation);
        return finish(deny(response, &message), kind.as_str(), operation, name, Some(message));
    };
    let name = object.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string).unwrap_or(name);
    let decision = match (endpoint, kind) {
        (Endpoint::Mutate, Kind::Provisioner) => mutate::<Provisioner>(object, |p| v1alpha5::defaults::set_defaults(&mut p.spec, settings)),
        (Endpoint::Mutate, Kind::AwsNodeTemplate) => {
            mutate::<AwsNodeTemplate>(object, |t| v1alpha1::defaults::set_defaults(&mut t.spec, &settings.cluster_name))
        }
        (Endpoint::Validate, Kind::Provisioner) => decode_object::<Provisioner>(object).and_then(|p| {
            v1alpha5::validation::validate(&p, settings)?;
            Ok(Decision::Allow { warnings: v1alpha5::validation::warnings(&p.spec) })
        }),
        (Endpoint::Validate, Kind::AwsNodeTemplate) => decode_object::<AwsNodeTemplate>(object).and_then(|t| {
            v1alpha1::validation::validate(&t)?;
            Ok(Decision::Allow { warnings: Vec::new() })
        }),
    };
    match decision {
        Ok(Decision::Allow { warnings }) => {
            let mut response = response;
            if !warnings.is_empty() {
                response.warnings = Some(warnings);
            }
            finish(response, kind.as_str(), operation, name, None)
        }
        Ok(Decision::Patch(patch)) => match response.with_patch(patch) {
            Ok(r) => {
                let mut outcome = finish(r, kind.as_str(), operation, name, None);
                outcome.result = result::PATCHED;
                outcome
            }
            Err(e) => {
                let message = format!("encoding the defaults patch: {e}");
                finish(deny(AdmissionResponse::from(&request), &message), kind.as_str(), operation, name, Some(message))
            }
        },
        Err(errors) => {
            let message = format!("{} {:?} is invalid: {}", kind.as_str(), name, errors);
            finish(deny(response, &message), kind.as_str(), operation, name, Some(message))
        }
    }
}

enum Decision {
    Allow { warnings: Vec<String> },
    Patch(Patch),
}

fn decode_object<T: DeserializeOwned>(object: &Value) -> Result<T, FieldErrors> {
    decode::<T>(object, &Path::default()).map_err(FieldErrors::from)
}

/// Decodes, applies `set_defaults`, and answers with the difference as a JSON patch (or a plain
/// allow when nothing changed). The patch is computed between the decoded object re-encoded and
/// the defaulted one, so it carries only the defaults, never re-encoding noise.
fn mutate<T: DeserializeOwned + Serialize + Clone>(object: &Value, set_defaults: impl FnOnce(&mut T)) -> Result<Decision, FieldErrors> {
    let original: T = decode_object(object)?;
    let mut defaulted = original.clone();
    set_defaults(&mut defaulted);
    let before = serde_json::to_value(&original).expect("API types always serialize");
    let after = serde_json::to_value(&defaulted).expect("API types always serialize");
    let patch = json_patch::diff(&before, &after);
    if patch.0.is_empty() {
        Ok(Decision::Allow { warnings: Vec::new() })
    } else {
        Ok(Decision::Patch(patch))
    }
}

fn deny(mut response: AdmissionResponse, message: &str) -> AdmissionResponse {
    response = response.deny(message);
    response.result = Status::failure(message, "BadRequest").with_code(400);
    response
}

fn operation_label(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn v1_types() -> TypeMeta {
    TypeMeta { api_version: ADMISSION_API_VERSION.to_string(), kind: "AdmissionReview".to_string() }
}

fn finish(mut response: AdmissionResponse, kind: &'static str, operation: &'static str, name: String, reason: Option<String>) -> Outcome {
    response.types = v1_types();
    let allowed = response.allowed;
    let mut review = serde_json::to_value(response.into_review()).expect("AdmissionReview always serializes");
    encode_patch(&mut review);
    Outcome {
        review,
        http_status: 200,
        kind,
        operation,
        result: if allowed { result::ALLOWED } else { result::DENIED },
        name,
        reason,
    }
}

/// The API server expects `patch` as a base64 string (Go's encoding of []byte); kube's type
/// serializes the bytes as a list of numbers.
fn encode_patch(review: &mut Value) {
    use base64::Engine;
    let Some(patch) = review.pointer_mut("/response/patch") else { return };
    if let Some(bytes) = patch.as_array().map(|a| a.iter().filter_map(|b| b.as_u64().map(|b| b as u8)).collect::<Vec<u8>>()) {
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
}

/// The review could not be read. With a uid, an AdmissionReview the API server can match;
/// without one, HTTP 400 with the same body for a human or a test to read.
fn invalid(uid: Option<String>, message: String) -> Outcome {
    let mut response = AdmissionResponse::invalid(&message);
    response.result = Status::failure(&message, "BadRequest").with_code(400);
    let http_status = if uid.is_some() { 200 } else { 400 };
    response.uid = uid.unwrap_or_default();
    let mut outcome = finish(response, "unknown", "unknown", String::new(), Some(message));
    outcome.http_status = http_status;
    outcome.result = result::INVALID;
    outcome
}
