//! AdmissionReview in, AdmissionReview out: reads the review, dispatches on the object's group and
//! kind, runs the pure rules of `apis`, and builds the response (denial with every field error,
//! JSON patch of defaults, warnings). No I/O here: the HTTP layer hands in bytes.
//!
//! The body is read in one pass into a small envelope that keeps the object as raw JSON, and the
//! object is decoded straight into the API type; only a request that fails somewhere is read a
//! second time, to name the field at fault.

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::apis::decode::decode;
use crate::apis::field_error::{FieldError, FieldErrors, Path};
use crate::apis::v1alpha1::{self, AwsNodeTemplate};
use crate::apis::v1alpha5::{self, Provisioner};
use crate::apis::ApiSettings;
use crate::metrics::result;

/// The AdmissionReview version karpenter-rs speaks.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
const REVIEW_KIND: &str = "AdmissionReview";

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
    fn from_gvk(gvk: &GroupVersionKind<'_>) -> Option<Kind> {
        match (&*gvk.group, &*gvk.version, &*gvk.kind) {
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
    /// The response body (an AdmissionReview), serialized.
    pub body: Vec<u8>,
    /// HTTP status: 200 for every review with a uid; 400 when no uid could be read.
    pub http_status: u16,
    /// Kind label (`Provisioner`, `AWSNodeTemplate`, or `unknown`).
    pub kind: &'static str,
    /// Operation label (`CREATE`, `UPDATE`, `DELETE`, `CONNECT`, or `unknown`).
    pub operation: &'static str,
    /// Result label, one of `metrics::result`.
    pub result: &'static str,
    /// Object name, for logs.
    pub name: String,
    /// Denial or invalid reason, for logs.
    pub reason: Option<String>,
}

// --- what is read ------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    #[serde(default, borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    uid: String,
    #[serde(borrow)]
    kind: GroupVersionKind<'a>,
    #[serde(borrow)]
    operation: Cow<'a, str>,
    /// Absent or null for objects with a generated name.
    #[serde(default)]
    name: Option<String>,
    #[serde(default, borrow)]
    object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct GroupVersionKind<'a> {
    #[serde(default, borrow)]
    group: Cow<'a, str>,
    #[serde(borrow)]
    version: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
}

// --- what is written ---------------------------------------------------------------------------

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: Response<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct Status<'a> {
    status: &'static str,
    code: u16,
    reason: &'static str,
    message: &'a str,
}

/// What the rules decided.
enum Decision {
    Allow {
        warnings: Vec<String>,
    },
    /// A JSON patch, encoded.
    Patch(Vec<u8>),
    Deny(String),
}

/// Answers one AdmissionReview body. Never panics on any input.
pub fn review(endpoint: Endpoint, body: &[u8], settings: &ApiSettings) -> Outcome {
    let envelope = match serde_json::from_slice::<Envelope<'_>>(body) {
        Ok(e) => e,
        Err(_) => return unreadable(body),
    };
    let Some(request) = envelope.request else {
        return invalid(
            None,
            "not an AdmissionReview: request.uid is missing (there is no request)".to_string(),
        );
    };
    if request.uid.is_empty() {
        return invalid(None, "not an AdmissionReview: request.uid is empty".to_string());
    }
    let (api_version, review_kind) = (envelope.api_version.unwrap_or_default(), envelope.kind.unwrap_or_default());
    if api_version != ADMISSION_API_VERSION || review_kind != REVIEW_KIND {
        return invalid(
            Some(&request.uid),
            format!("expected kind AdmissionReview of {ADMISSION_API_VERSION}, got kind {review_kind:?} of {api_version:?}; configure admissionReviewVersions: [v1]"),
        );
    }
    let operation = match &*request.operation {
        "CREATE" => "CREATE",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CONNECT" => "CONNECT",
        other => {
            return invalid(
                Some(&request.uid),
                format!("malformed AdmissionReview: unknown operation {other:?}"),
            )
        }
    };
    let mut outcome = Outcome {
        body: Vec::new(),
        http_status: 200,
        kind: "unknown",
        operation,
        result: result::ALLOWED,
        name: request.name.clone().unwrap_or_default(),
        reason: None,
    };
    let Some(kind) = Kind::from_gvk(&request.kind) else {
        let gvk = &request.kind;
        let message = format!(
            "karpenter-rs does not serve {}/{}, Kind={}; it serves Provisioner (karpenter.sh/v1alpha5) and AWSNodeTemplate (karpenter.k8s.aws/v1alpha1)",
            gvk.group, gvk.version, gvk.kind
        );
        return respond(outcome, &request.uid, Decision::Deny(message));
    };
    outcome.kind = kind.as_str();
    if !matches!(operation, "CREATE" | "UPDATE") {
        return respond(outcome, &request.uid, Decision::Allow { warnings: Vec::new() });
    }
    let Some(object) = request.object.filter(|o| o.get().starts_with('{')) else {
        return respond(
            outcome,
            &request.uid,
            Decision::Deny(format!("{operation} request carries no object")),
        );
    };
    let decision = match (endpoint, kind) {
        (Endpoint::Mutate, Kind::Provisioner) => mutate::<Provisioner, _>(
            object,
            &mut outcome.name,
            |p| &mut p.spec,
            |spec| v1alpha5::defaults::set_defaults(spec, settings),
        ),
        (Endpoint::Mutate, Kind::AwsNodeTemplate) => mutate::<AwsNodeTemplate, _>(
            object,
            &mut outcome.name,
            |t| &mut t.spec,
            |spec| v1alpha1::defaults::set_defaults(spec, &settings.cluster_name),
        ),
        (Endpoint::Validate, Kind::Provisioner) => decode_object::<Provisioner>(object).and_then(|p| {
            outcome.name = p.metadata.name.clone().unwrap_or_default();
            v1alpha5::validation::validate(&p, settings)?;
            Ok(Decision::Allow {
                warnings: v1alpha5::validation::warnings(&p.spec),
            })
        }),
        (Endpoint::Validate, Kind::AwsNodeTemplate) => decode_object::<AwsNodeTemplate>(object).and_then(|t| {
            outcome.name = t.metadata.name.clone().unwrap_or_default();
            v1alpha1::validation::validate(&t)?;
            Ok(Decision::Allow { warnings: Vec::new() })
        }),
    };
    let decision = decision.unwrap_or_else(|errors| Decision::Deny(format!("{} {:?} is invalid: {}", kind.as_str(), outcome.name, errors)));
    respond(outcome, &request.uid, decision)
}

/// Decodes the object; on failure reads it again as JSON to name the field and value at fault.
/// An object JSON cannot be read into a tree (nested past serde_json's 128 levels) is refused at
/// the deepest field the typed read reached.
fn decode_object<T: DeserializeOwned>(object: &RawValue) -> Result<T, FieldErrors> {
    serde_json::from_str(object.get()).or_else(|_| match serde_json::from_str::<Value>(object.get()) {
        Ok(value) => decode::<T>(&value, &Path::default()).map_err(FieldErrors::from),
        Err(e) => {
            let mut de = serde_json::Deserializer::from_str(object.get());
            let at = match serde_path_to_error::deserialize::<_, T>(&mut de) {
                Err(typed) => typed.path().to_string(),
                Ok(_) => String::new(),
            };
            let at = if at.is_empty() || at == "." { "object".to_string() } else { at };
            Err(FieldErrors::from(FieldError::forbidden(
                Path::new(&at),
                format!("nested too deeply to read ({e}; JSON is read to 128 levels)"),
            )))
        }
    })
}

/// Decodes, applies `set_defaults` to the spec (the only part defaults touch), and answers with
/// the difference as a JSON patch under `/spec` (or a plain allow when nothing changed). The
/// patch is computed between the decoded spec re-encoded and the defaulted one, so it carries
/// only the defaults, never re-encoding noise; the rest of the object (metadata with its
/// managed fields, status) is decoded once and never encoded. The spec is encoded to bytes
/// (cheap) before and after; only the top-level fields whose bytes differ become patch
/// operations (`spec_patch`).
fn mutate<T: Resource + DeserializeOwned, S: Serialize>(
    object: &RawValue,
    name: &mut String,
    spec_of: impl FnOnce(&mut T) -> &mut S,
    set_defaults: impl FnOnce(&mut S),
) -> Result<Decision, FieldErrors> {
    let mut decoded: T = decode_object(object)?;
    if let Some(n) = &decoded.meta().name {
        name.clone_from(n);
    }
    let spec = spec_of(&mut decoded);
    let before = serde_json::to_vec(spec).expect("API types always serialize");
    set_defaults(spec);
    let after = serde_json::to_vec(spec).expect("API types always serialize");
    if before == after {
        return Ok(Decision::Allow { warnings: Vec::new() });
    }
    let patch = spec_patch(&before, &after);
    Ok(if patch.is_empty() {
        Decision::Allow { warnings: Vec::new() }
    } else {
        Decision::Patch(patch)
    })
}

/// The JSON patch (as bytes) from one encoded spec to another, with paths under `/spec`. Only
/// the top-level fields whose bytes differ are looked at, and the patch only touches what
/// changed: a field that was absent is added and one that is gone removed, taking the encoded
/// field as it is; an array whose old elements are all still first (defaults append) gets its
/// new elements appended (`/-`), each as encoded; any other change is diffed as JSON trees
/// (`json_patch::diff`), so entries of a field that did not change are never rewritten.
fn spec_patch(before: &[u8], after: &[u8]) -> Vec<u8> {
    type Fields<'a> = BTreeMap<Cow<'a, str>, &'a RawValue>;
    fn fields(bytes: &[u8]) -> Fields<'_> {
        serde_json::from_slice(bytes).expect("an encoded spec is a JSON object")
    }
    fn tree(raw: &RawValue) -> Value {
        serde_json::from_str(raw.get()).expect("an encoded field is JSON")
    }
    fn elements(raw: &RawValue) -> Option<Vec<&RawValue>> {
        serde_json::from_str(raw.get()).ok()
    }
    fn op(op: &str, path: &str, value: Option<&str>) -> String {
        match value {
            Some(v) => format!(r#"{{"op":"{op}","path":{},"value":{v}}}"#, Value::from(path)),
            None => format!(r#"{{"op":"{op}","path":{}}}"#, Value::from(path)),
        }
    }
    let (old, new) = (fields(before), fields(after));
    let mut ops = Vec::new();
    let mut keys: Vec<&Cow<'_, str>> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let path = format!("/spec/{}", key.replace('~', "~0").replace('/', "~1"));
        match (old.get(key), new.get(key)) {
            (None, None) => {}
            (Some(o), Some(n)) if o.get() == n.get() => {}
            (None, Some(n)) => ops.push(op("add", &path, Some(n.get()))),
            (Some(_), None) => ops.push(op("remove", &path, None)),
            (Some(o), Some(n)) => match (elements(o), elements(n)) {
                (Some(o), Some(n)) if n.len() > o.len() && o.iter().zip(&n).all(|(a, b)| a.get() == b.get()) => {
                    for added in &n[o.len()..] {
                        ops.push(op("add", &format!("{path}/-"), Some(added.get())));
                    }
                }
                _ => {
                    let diff = json_patch::diff(&tree(o), &tree(n));
                    for d in diff.0 {
                        let mut d = serde_json::to_value(&d).expect("a JSON patch operation serializes");
                        let inner = d["path"].as_str().unwrap_or_default().to_string();
                        d["path"] = Value::from(format!("{path}{inner}"));
                        ops.push(d.to_string());
                    }
                }
            },
        }
    }
    if ops.is_empty() {
        return Vec::new();
    }
    format!("[{}]", ops.join(",")).into_bytes()
}

/// Writes the AdmissionReview for `decision` into `outcome`.
fn respond(mut outcome: Outcome, uid: &str, decision: Decision) -> Outcome {
    let mut response = Response {
        uid,
        allowed: true,
        status: None,
        patch: None,
        patch_type: None,
        warnings: &[],
    };
    let warnings;
    match &decision {
        Decision::Allow { warnings: w } => {
            warnings = w.clone();
            response.warnings = &warnings;
        }
        Decision::Patch(patch) => {
            response.patch = Some(base64::engine::general_purpose::STANDARD.encode(patch));
            response.patch_type = Some("JSONPatch");
            outcome.result = result::PATCHED;
        }
        Decision::Deny(message) => {
            response.allowed = false;
            response.status = Some(Status {
                status: "Failure",
                code: 400,
                reason: "BadRequest",
                message,
            });
            outcome.result = result::DENIED;
            outcome.reason = Some(message.clone());
        }
    }
    outcome.body = serde_json::to_vec(&ReviewOut {
        api_version: ADMISSION_API_VERSION,
        kind: REVIEW_KIND,
        response,
    })
    .expect("an AdmissionReview always serializes");
    outcome
}

/// The body did not fit the envelope: find the uid if there is one, and say what is wrong.
fn unreadable(body: &[u8]) -> Outcome {
    match serde_json::from_slice::<Value>(body) {
        Err(e) => invalid(None, format!("request body is not JSON: {e}")),
        Ok(value) => match value.pointer("/request/uid").and_then(Value::as_str).filter(|u| !u.is_empty()) {
            Some(uid) => {
                // Read again for the path of the field at fault (`request.name: invalid type ...`).
                let mut de = serde_json::Deserializer::from_slice(body);
                let error = match serde_path_to_error::deserialize::<_, Envelope<'_>>(&mut de) {
                    Err(e) => e.to_string(),
                    Ok(_) => "unreadable".to_string(),
                };
                invalid(Some(uid), format!("malformed AdmissionReview: {error}"))
            }
            None => invalid(None, "not an AdmissionReview: request.uid is missing".to_string()),
        },
    }
}

/// The review itself could not be read. With a uid, an AdmissionReview the API server can match;
/// without one, HTTP 400 with the same body for a human or a test to read.
fn invalid(uid: Option<&str>, message: String) -> Outcome {
    let outcome = Outcome {
        body: Vec::new(),
        http_status: if uid.is_some() { 200 } else { 400 },
        kind: "unknown",
        operation: "unknown",
        result: result::INVALID,
        name: String::new(),
        reason: None,
    };
    let mut outcome = respond(outcome, uid.unwrap_or_default(), Decision::Deny(message));
    outcome.result = result::INVALID;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spec_patch` between the encodings of two specs, applied to the object with the first.
    fn patched(before: &Value, after: &Value) -> (Value, Vec<String>) {
        let bytes = |v: &Value| serde_json::to_vec(v).unwrap();
        let encoded = spec_patch(&bytes(before), &bytes(after));
        let patch: json_patch::Patch = serde_json::from_slice(&encoded).unwrap();
        let mut object = serde_json::json!({"metadata": {"name": "p"}, "spec": before});
        json_patch::patch(&mut object, &patch).unwrap();
        let ops: Vec<String> = serde_json::from_slice::<Vec<Value>>(&encoded)
            .unwrap()
            .iter()
            .map(|op| format!("{} {}", op["op"].as_str().unwrap(), op["path"].as_str().unwrap()))
            .collect();
        (object["spec"].clone(), ops)
    }

    #[test]
    fn a_spec_patch_turns_the_old_spec_into_the_new_touching_only_what_changed() {
        let before = serde_json::json!({
            "labels": {"team": "a", "a/b~c": "x"},
            "requirements": [{"key": "zone", "operator": "In", "values": ["a"]}],
            "ttlSecondsAfterEmpty": 30,
            "weight": 1,
            "limits": {"resources": {"cpu": "10"}}
        });
        let after = serde_json::json!({
            "labels": {"team": "a", "a/b~c": "x"},
            "requirements": [{"key": "zone", "operator": "In", "values": ["a"]}, {"key": "os", "operator": "In", "values": ["linux"]}, {"key": "arch", "operator": "In", "values": ["amd64"]}],
            "ttlSecondsAfterEmpty": 60,
            "ttlSecondsUntilExpired": 2592000,
            "limits": {"resources": {"cpu": "10", "memory": "1Ti"}}
        });
        let (spec, ops) = patched(&before, &after);
        assert_eq!(spec, after);
        assert_eq!(
            ops,
            [
                "add /spec/limits/resources/memory",
                "add /spec/requirements/-",
                "add /spec/requirements/-",
                "replace /spec/ttlSecondsAfterEmpty",
                "add /spec/ttlSecondsUntilExpired",
                "remove /spec/weight"
            ]
        );
        // An array whose old entries are not all kept first is diffed entry by entry.
        let reordered = serde_json::json!({"requirements": [{"key": "os", "operator": "In", "values": ["linux"]}, {"key": "zone", "operator": "In", "values": ["a"]}]});
        let (spec, _) = patched(&before, &reordered);
        assert_eq!(spec, reordered);
        // Keys that need escaping in a JSON pointer.
        let escaped = serde_json::json!({"a/b~c": 1});
        let (spec, ops) = patched(&serde_json::json!({}), &escaped);
        assert_eq!(spec, escaped);
        assert_eq!(ops, ["add /spec/a~1b~0c"]);
        // Nothing changed: no patch.
        assert!(spec_patch(b"{\"a\":1}", b"{\"a\":1}").is_empty());
    }
}
