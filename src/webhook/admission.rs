//! AdmissionReview in, AdmissionReview out: reads the review, dispatches on the object's group and
//! kind, runs the pure rules of `apis`, and builds the response (denial with every field error,
//! JSON patch of defaults, warnings). No I/O here: the HTTP layer hands in bytes.
//!
//! The body is read in one pass: the review's few fields, and the object decoded straight into
//! its API type (the request names its kind first). A request that fails anywhere in that pass is
//! read again with the object kept as raw JSON, then decoded on its own, and, when that fails
//! too, read as a JSON tree to name the field and value at fault.

use std::borrow::Cow;
use std::marker::PhantomData;

use base64::Engine;
use kube::Resource;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use schemars::JsonSchema;
use crate::apis::decode::{decode, deserialize_exact, from_str_exact};
use crate::apis::field_error::{FieldError, FieldErrors, Path};
use crate::apis::v1alpha1::{self, AwsNodeTemplate};
use crate::apis::v1alpha5::{self, Provisioner};
use crate::apis::ApiSettings;
use crate::metrics::result;

use super::spec_patch::{self, Fields};

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

/// An AdmissionReview as read. With `TYPED`, an object of a kind served is decoded into its API
/// type in the same pass, when the request names its kind before the object (the API server
/// always does); otherwise, and when that decoding fails, the object is kept as raw JSON.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a, const TYPED: bool> {
    #[serde(default, borrow)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    request: Option<ReadRequest<'a, TYPED>>,
}

struct Request<'a> {
    uid: String,
    kind: GroupVersionKind<'a>,
    operation: Cow<'a, str>,
    /// Absent or null for objects with a generated name.
    name: Option<String>,
    object: Option<Object<'a>>,
}

/// The object under review: decoded already, or raw JSON still to decode.
enum Object<'a> {
    Raw(&'a RawValue),
    Decoded(Decoded),
}

/// An object of a kind served, decoded.
enum Decoded {
    Provisioner(Box<Provisioner>),
    AwsNodeTemplate(Box<AwsNodeTemplate>),
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

#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// Reads a `Request` field by field, like a derived `Deserialize` would (unknown fields ignored,
/// duplicates and missing required fields refused), except for the object (see `Envelope`).
struct ReadRequest<'a, const TYPED: bool>(Request<'a>);

impl<'de: 'a, 'a, const TYPED: bool> Deserialize<'de> for ReadRequest<'a, TYPED> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        const FIELDS: &[&str] = &["uid", "kind", "operation", "name", "object"];
        deserializer.deserialize_struct("AdmissionRequest", FIELDS, RequestVisitor::<TYPED>(PhantomData))
    }
}

struct RequestVisitor<'a, const TYPED: bool>(PhantomData<&'a ()>);

impl<'de: 'a, 'a, const TYPED: bool> Visitor<'de> for RequestVisitor<'a, TYPED> {
    type Value = ReadRequest<'a, TYPED>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an AdmissionRequest")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
            match slot.replace(value) {
                Some(_) => Err(E::duplicate_field(name)),
                None => Ok(()),
            }
        }
        let (mut uid, mut kind, mut operation, mut name, mut object) = (None, None, None, None, None);
        while let Some(field) = map.next_key::<RequestField>()? {
            match field {
                RequestField::Uid => once(&mut uid, "uid", map.next_value::<String>()?)?,
                RequestField::Kind => once(&mut kind, "kind", map.next_value::<GroupVersionKind<'a>>()?)?,
                RequestField::Operation => once(&mut operation, "operation", map.next_value::<Text<'a>>()?.0)?,
                RequestField::Name => once(&mut name, "name", map.next_value::<Option<String>>()?)?,
                RequestField::Object => {
                    let value = match kind.as_ref().and_then(Kind::from_gvk).filter(|_| TYPED) {
                        Some(Kind::Provisioner) => map
                            .next_value::<Option<ObjectOnly<Provisioner>>>()?
                            .map(|p| Object::Decoded(Decoded::Provisioner(Box::new(p.0)))),
                        Some(Kind::AwsNodeTemplate) => map
                            .next_value::<Option<ObjectOnly<AwsNodeTemplate>>>()?
                            .map(|t| Object::Decoded(Decoded::AwsNodeTemplate(Box::new(t.0)))),
                        None => map.next_value::<Option<&'a RawValue>>()?.map(Object::Raw),
                    };
                    once(&mut object, "object", value)?
                }
                RequestField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ReadRequest(Request {
            uid: uid.ok_or_else(|| de::Error::missing_field("uid"))?,
            kind: kind.ok_or_else(|| de::Error::missing_field("kind"))?,
            operation: operation.ok_or_else(|| de::Error::missing_field("operation"))?,
            name: name.flatten(),
            object: object.flatten(),
        }))
    }
}

enum RequestField {
    Uid,
    Kind,
    Operation,
    Name,
    Object,
    Other,
}

impl<'de> Deserialize<'de> for RequestField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = RequestField;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RequestField, E> {
                Ok(match v {
                    "uid" => RequestField::Uid,
                    "kind" => RequestField::Kind,
                    "operation" => RequestField::Operation,
                    "name" => RequestField::Name,
                    "object" => RequestField::Object,
                    _ => RequestField::Other,
                })
            }
        }
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

/// `T` read only from a JSON object (a derived struct would also take an array of its fields in
/// order, which no API object is) and exactly: the types ignore keys they do not know, which the
/// webhook refuses (`decode` names them when the object is read again).
struct ObjectOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                deserialize_exact(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(ObjectVisitor(PhantomData)).map(ObjectOnly)
    }
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
    // One pass decodes the object too; when anything in it fails, the review is read again with
    // the object kept raw, so that the failure is answered as it is (a field error, a kind not
    // served, an operation that needs no object).
    let read = serde_json::from_slice::<Envelope<'_, true>>(body)
        .map(|e| (e.api_version, e.kind, e.request.map(|r| r.0)))
        .or_else(|_| serde_json::from_slice::<Envelope<'_, false>>(body).map(|e| (e.api_version, e.kind, e.request.map(|r| r.0))));
    let Ok((api_version, review_kind, request)) = read else {
        return unreadable(body);
    };
    let Some(request) = request else {
        return invalid(
            None,
            "not an AdmissionReview: request.uid is missing (there is no request)".to_string(),
        );
    };
    if request.uid.is_empty() {
        return invalid(None, "not an AdmissionReview: request.uid is empty".to_string());
    }
    let (api_version, review_kind) = (api_version.unwrap_or_default(), review_kind.unwrap_or_default());
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
    let object = match request.object {
        Some(Object::Raw(raw)) if !raw.get().starts_with('{') => None,
        object => object,
    };
    let Some(object) = object else {
        return respond(
            outcome,
            &request.uid,
            Decision::Deny(format!("{operation} request carries no object")),
        );
    };
    let decision = match (endpoint, object.decode(kind)) {
        (_, Err(errors)) => Err(errors),
        (Endpoint::Mutate, Ok(Decoded::Provisioner(mut p))) => mutate(
            &mut *p,
            &mut outcome.name,
            |p| &mut p.spec,
            |spec| v1alpha5::defaults::set_defaults(spec, settings),
        ),
        (Endpoint::Mutate, Ok(Decoded::AwsNodeTemplate(mut t))) => mutate(
            &mut *t,
            &mut outcome.name,
            |t| &mut t.spec,
            |spec| v1alpha1::defaults::set_defaults(spec, &settings.cluster_name),
        ),
        (Endpoint::Validate, Ok(Decoded::Provisioner(p))) => {
            outcome.name = p.metadata.name.clone().unwrap_or_default();
            v1alpha5::validation::validate(&p, settings).map(|()| Decision::Allow {
                warnings: v1alpha5::validation::warnings(&p.spec),
            })
        }
        (Endpoint::Validate, Ok(Decoded::AwsNodeTemplate(t))) => {
            outcome.name = t.metadata.name.clone().unwrap_or_default();
            v1alpha1::validation::validate(&t).map(|()| Decision::Allow { warnings: Vec::new() })
        }
    };
    let decision = decision.unwrap_or_else(|errors| Decision::Deny(format!("{} {:?} is invalid: {}", kind.as_str(), outcome.name, errors)));
    respond(outcome, &request.uid, decision)
}

impl Object<'_> {
    /// The object decoded as `kind`, if it is not already.
    fn decode(self, kind: Kind) -> Result<Decoded, FieldErrors> {
        match (self, kind) {
            (Object::Decoded(decoded), _) => Ok(decoded),
            (Object::Raw(raw), Kind::Provisioner) => decode_object(raw).map(|p| Decoded::Provisioner(Box::new(p))),
            (Object::Raw(raw), Kind::AwsNodeTemplate) => decode_object(raw).map(|t| Decoded::AwsNodeTemplate(Box::new(t))),
        }
    }
}

/// Decodes the object; on failure reads it again as JSON to name the field and value at fault.
/// An object JSON cannot be read into a tree (nested past serde_json's 128 levels) is refused at
/// the deepest field the typed read reached.
fn decode_object<T: DeserializeOwned + JsonSchema>(object: &RawValue) -> Result<T, FieldErrors> {
    from_str_exact(object.get()).ok_or(()).or_else(|_| match serde_json::from_str::<Value>(object.get()) {
        Ok(value) => decode::<T>(&value, &Path::default()).map_err(FieldErrors::from),
        Err(e) => {
            let mut de = serde_json::Deserializer::from_str(object.get());
            let at = match serde_path_to_error::deserialize::<_, T>(&mut de) {
                Err(typed) => typed.path().to_string(),
                Ok(_) => String::new(),
            };
            // `?` stands for a map key the typed read was reading: the field at fault is its map.
            let at = at.split(".?").next().unwrap_or_default().to_string();
            let at = if at.is_empty() || at == "." || at == "?" { "object".to_string() } else { at };
            let message = e.to_string();
            let reason = if message.starts_with("recursion limit exceeded") {
                format!("nested too deeply to read ({e}; JSON is read to 128 levels)")
            } else {
                // Text the envelope's reader skipped over but no JSON reader accepts, such as a
                // lone UTF-16 surrogate escape (`"\ud800"`).
                format!("not valid JSON: {}", message.rfind(" at line ").map_or(message.as_str(), |i| &message[..i]))
            };
            Err(FieldErrors::from(FieldError::forbidden(Path::new(&at), reason)))
        }
    })
}

/// Applies `set_defaults` to the spec (the only part defaults touch) and answers with the
/// difference as a JSON patch under `/spec` (or a plain allow when nothing changed). The patch is
/// computed between the decoded spec and the defaulted one, each encoded field by field
/// (`spec_patch`), so it carries only the defaults, never re-encoding noise; the rest of the
/// object (metadata with its managed fields, status) is never encoded.
fn mutate<T: Resource, S: Serialize>(
    decoded: &mut T,
    name: &mut String,
    spec_of: impl FnOnce(&mut T) -> &mut S,
    set_defaults: impl FnOnce(&mut S),
) -> Result<Decision, FieldErrors> {
    if let Some(n) = &decoded.meta().name {
        name.clone_from(n);
    }
    let spec = spec_of(decoded);
    let before = Fields::of(spec).expect("a spec is a struct and always serializes");
    set_defaults(spec);
    let after = Fields::of(spec).expect("a spec is a struct and always serializes");
    let patch = spec_patch::patch(&before, &after);
    Ok(if patch.is_empty() {
        Decision::Allow { warnings: Vec::new() }
    } else {
        Decision::Patch(patch)
    })
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
    let uid = match serde_json::from_slice::<Value>(body) {
        Ok(value) => value.pointer("/request/uid").and_then(Value::as_str).map(str::to_string),
        // A tree is read to 128 levels: a body nested deeper (its object, say) still has a uid.
        Err(e) => match request_uid(body) {
            Some(uid) => Some(uid),
            None => return invalid(None, format!("request body is not JSON: {e}")),
        },
    };
    match uid.filter(|u| !u.is_empty()) {
        Some(uid) => {
            // Read again for the path of the field at fault (`request.name: invalid type ...`).
            let mut de = serde_json::Deserializer::from_slice(body);
            let error = match serde_path_to_error::deserialize::<_, Envelope<'_, false>>(&mut de) {
                Err(e) => envelope_error(&e.path().to_string(), &e.inner().to_string(), e.inner().is_syntax()),
                Ok(_) => "unreadable".to_string(),
            };
            invalid(Some(&uid), format!("malformed AdmissionReview: {error}"))
        }
        None => invalid(None, "not an AdmissionReview: request.uid is missing".to_string()),
    }
}

/// `path: reason` for an envelope serde could not read: a field given twice is named by its own
/// path (`kind`, `request.uid`), and serde's ` at line 1 column 63` is dropped (a review is one
/// line to the API server, and its author wrote YAML). Text no JSON reader accepts (`syntax`,
/// e.g. a lone UTF-16 surrogate escape in a key, which the raw reader of the uid skips over) is
/// named at the map that holds it, `not valid JSON: ...`: serde's `?` stands for the key it was
/// reading, which the review does not have.
fn envelope_error(path: &str, message: &str, syntax: bool) -> String {
    let message = message.rfind(" at line ").map_or(message, |i| &message[..i]);
    let invalid;
    let (path, message) = if syntax {
        let map = path.split(".?").next().unwrap_or_default();
        invalid = format!("not valid JSON: {message}");
        (if map.is_empty() || map == "?" { "." } else { map }, invalid.as_str())
    } else {
        (path, message)
    };
    let field = message.strip_prefix("duplicate field `").and_then(|r| r.strip_suffix('`'));
    match (path, field) {
        (".", Some(field)) => format!("{field}: {message}"),
        (_, Some(field)) => format!("{path}.{field}: {message}"),
        (".", None) => message.to_string(),
        (_, None) => format!("{path}: {message}"),
    }
}

/// `request.uid` of a JSON body read without a tree: each level's members kept as raw text
/// (skipped without a depth limit), the last of a repeated key as a tree would keep it.
fn request_uid(body: &[u8]) -> Option<String> {
    type Members<'a> = std::collections::BTreeMap<Cow<'a, str>, &'a RawValue>;
    let review: Members<'_> = serde_json::from_slice(body).ok()?;
    let request: Members<'_> = serde_json::from_str(review.get("request")?.get()).ok()?;
    serde_json::from_str(request.get("uid")?.get()).ok()
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
mod tests;
