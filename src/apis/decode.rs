//! Strict decoding of JSON into API types: a value that does not fit becomes one `FieldError`
//! naming the field path and the offending key or value, with a "did you mean" hint for
//! misspelled keys. The types themselves decode tolerantly (unknown keys are ignored), so that
//! an object stored under another CRD (Karpenter's own, which accepts more fields) never stops
//! a controller's watch; the strictness the webhook and the CLIs give users lives here. No I/O.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::field_error::{FieldError, Path, Raw};
use super::objects_only::ObjectsOnly;

/// A step into a JSON value: an object key or an array index.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Decodes `value` into `T`, reporting the first problem under `root` (e.g. `spec.provider`):
/// a value of the wrong type, a missing field, or a key `T` does not know (outside the
/// object's `metadata` and `status`, which the API server owns).
pub fn decode<T: DeserializeOwned + JsonSchema>(value: &serde_json::Value, root: &Path) -> Result<T, FieldError> {
    let mut unknown: Option<Vec<Step>> = None;
    let mut track = serde_path_to_error::Track::new();
    let typed = serde_ignored::deserialize(serde_path_to_error::Deserializer::new(ObjectsOnly(value), &mut track), |ignored| {
        let steps = steps(&ignored);
        if unknown.is_none() && reportable(&steps) {
            unknown = Some(steps);
        }
    });
    match typed {
        Err(err) => {
            let inner = err.to_string();
            let mut path = root.clone();
            let mut offending = Some(value);
            for segment in track.path().iter() {
                path = match segment {
                    serde_path_to_error::Segment::Seq { index } => {
                        offending = offending.and_then(|v| v.get(*index));
                        path.index(*index)
                    }
                    serde_path_to_error::Segment::Map { key } => {
                        offending = offending.and_then(|v| v.get(key));
                        path.child(key)
                    }
                    serde_path_to_error::Segment::Enum { variant } => path.child(variant),
                    serde_path_to_error::Segment::Unknown => path,
                };
            }
            Err(describe(path, strip_position(&inner), offending))
        }
        Ok(_) if unknown.is_some() => {
            let steps = unknown.unwrap_or_default();
            let (field, parents) = match steps.split_last() {
                Some((Step::Key(field), parents)) => (field.clone(), parents),
                _ => (String::new(), &steps[..]),
            };
            let mut path = root.clone();
            for step in parents {
                path = match step {
                    Step::Key(k) => path.child(k),
                    Step::Index(i) => path.index(*i),
                };
            }
            let schema = schemars::schema_for!(T);
            let known = known_fields(&schema, parents);
            let known: Vec<&str> = known.iter().map(String::as_str).collect();
            Err(unknown_field(path.child(&field), &field, &known))
        }
        Ok(t) => Ok(t),
    }
}

/// `T` read from JSON text when it fits exactly (no wrong type, no unknown key outside
/// `metadata` and `status`): the fast path of the webhook; `None` sends the caller to `decode`
/// for the error.
pub fn from_str_exact<T: DeserializeOwned>(json: &str) -> Option<T> {
    let mut de = serde_json::Deserializer::from_str(json);
    let typed: T = deserialize_exact(&mut de).ok()?;
    de.end().ok()?;
    Some(typed)
}

/// `T` read from any deserializer when it fits exactly, as `from_str_exact`: a key the types
/// ignore and the user must not write is an error (without its path: `decode` names it).
pub fn deserialize_exact<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(deserializer: D) -> Result<T, D::Error> {
    let mut exact = true;
    let typed = serde_ignored::deserialize(ObjectsOnly(deserializer), |ignored| exact &= !reportable(&steps(&ignored)))?;
    if exact {
        Ok(typed)
    } else {
        Err(serde::de::Error::custom("unknown field"))
    }
}

/// Whether an ignored key is the user's mistake: anything outside `metadata` and `status`, which
/// the API server and the controllers own (a newer server's fields there are no error), and
/// other than an object's `apiVersion` and `kind`, which the generated root types read past.
fn reportable(steps: &[Step]) -> bool {
    match steps {
        [Step::Key(k)] => k != "apiVersion" && k != "kind",
        [Step::Key(k), _, ..] => k != "metadata" && k != "status",
        _ => true,
    }
}

/// The steps of a key serde ignored, from the root.
fn steps(path: &serde_ignored::Path<'_>) -> Vec<Step> {
    use serde_ignored::Path as P;
    match path {
        P::Root => Vec::new(),
        P::Seq { parent, index } => {
            let mut s = steps(parent);
            s.push(Step::Index(*index));
            s
        }
        P::Map { parent, key } => {
            let mut s = steps(parent);
            s.push(Step::Key(key.clone()));
            s
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => steps(parent),
    }
}

/// The property names of the object schema reached by `steps` from the root of `schema` (empty
/// when the schema does not say).
fn known_fields(schema: &schemars::Schema, steps: &[Step]) -> Vec<String> {
    let root = schema.as_value();
    let mut at = Some(resolve(root, root));
    for step in steps {
        at = at.and_then(|object| {
            let next = match step {
                Step::Key(k) => object
                    .get("properties")
                    .and_then(|p| p.get(k))
                    .or_else(|| object.get("additionalProperties")),
                Step::Index(_) => match object.get("items")? {
                    Value::Array(items) => items.first(),
                    item => Some(item),
                },
            }?;
            // `true`/`false` schemas say nothing about properties.
            next.is_object().then(|| resolve(root, next))
        });
    }
    at.and_then(|o| o.get("properties"))
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// Keywords that make a schema an object schema of its own.
const OBJECT_KEYWORDS: [&str; 7] = [
    "properties",
    "additionalProperties",
    "required",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
];

/// Keywords whose values are lists of subschemas.
const SUBSCHEMA_LISTS: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// `object` with references (`#/$defs/...`) and `allOf`/`anyOf`/`oneOf` wrappers (how an
/// `Option` of a struct is written) followed to the schema that holds its properties.
fn resolve<'a>(root: &'a Value, object: &'a Value) -> &'a Value {
    let has_object_keywords = |v: &Value| OBJECT_KEYWORDS.iter().any(|k| v.get(k).is_some());
    let mut at = object;
    for _ in 0..16 {
        if let Some(pointer) = at.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix('#')) {
            match root.pointer(pointer) {
                Some(target) if target.is_object() => {
                    at = target;
                    continue;
                }
                _ => return at,
            }
        }
        let wrapped = SUBSCHEMA_LISTS
            .iter()
            .filter_map(|k| at.get(k).and_then(Value::as_array))
            .flatten()
            .find(|sub| sub.get("$ref").is_some() || has_object_keywords(sub) || SUBSCHEMA_LISTS.iter().any(|k| sub.get(k).is_some()));
        match wrapped {
            Some(sub) if !has_object_keywords(at) => at = sub,
            _ => return at,
        }
    }
    at
}

/// serde_json's message without its ` at line 1 column 5` suffix (a `Value` has no lines).
fn strip_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    }
}

/// An unknown key `field` at `path`, with a hint when one of `known` is close to it.
fn unknown_field(path: Path, field: &str, known: &[&str]) -> FieldError {
    let mut reason = "unknown field".to_string();
    if let Some(hint) = did_you_mean(field, known) {
        reason.push_str(&format!(", did you mean {hint:?}?"));
    } else if !known.is_empty() {
        reason.push_str(&format!("; known fields are {}", known.join(", ")));
    }
    FieldError::forbidden(path, reason)
}

/// Turns serde's message into a field error: unknown keys become "unknown field" with a hint,
/// type mismatches keep serde's wording ("invalid type: floating point `0.067`, expected a string").
fn describe(path: Path, message: &str, offending: Option<&serde_json::Value>) -> FieldError {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        // A type that still denies unknown fields: serde reports the key at its parent's path.
        let (field, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let field_path = if path.as_str().ends_with(&format!(".{field}")) {
            path
        } else {
            path.child(field)
        };
        return unknown_field(field_path, field, &known);
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        return FieldError::required(path.child(field), "missing required field");
    }
    let shown = offending.map(|v| v.to_string()).unwrap_or_else(|| "?".to_string());
    FieldError::invalid(path, Raw(shown), message.to_string())
}

/// The known name closest to `given` when it is close enough to be a typo.
pub fn did_you_mean<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = given.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 3.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::v1alpha1::AwsProvider;
    use serde_json::json;

    #[test]
    fn names_unknown_field_with_hint() {
        let err = decode::<AwsProvider>(&json!({"securityGroupSelecter": {}}), &Path::new("spec.provider")).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.provider.securityGroupSelecter");
        assert!(err.reason.contains("did you mean \"securityGroupSelector\""), "{err}");
    }

    #[test]
    fn names_wrongly_typed_value() {
        let err = decode::<AwsProvider>(&json!({"spotPrice": 0.067}), &Path::new("spec.provider")).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.provider.spotPrice");
        assert!(err.to_string().contains("0.067"), "{err}");
    }

    #[test]
    fn names_nested_fields() {
        let err = decode::<AwsProvider>(
            &json!({"metadataOptions": {"httpPutResponseHopLimit": "2"}}),
            &Path::new("spec.provider"),
        )
        .unwrap_err();
        assert_eq!(err.path.as_str(), "spec.provider.metadataOptions.httpPutResponseHopLimit");
    }

    #[test]
    fn unknown_keys_of_whole_objects_are_named_with_hints_from_the_schema() {
        use crate::apis::v1alpha1::AwsNodeTemplate;
        use crate::apis::v1alpha5::Provisioner;
        let provisioner = json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "p"},
                                 "spec": {"ttlSecondsAfterEmty": 30}});
        let err = decode::<Provisioner>(&provisioner, &Path::default()).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.ttlSecondsAfterEmty");
        assert!(err.reason.contains("did you mean \"ttlSecondsAfterEmpty\""), "{err}");
        let template = json!({"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "t"},
                              "spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSise": "20Gi"}}]}});
        let err = decode::<AwsNodeTemplate>(&template, &Path::default()).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.blockDeviceMappings[0].ebs.volumeSise");
        assert!(err.reason.contains("did you mean \"volumeSize\""), "{err}");
        let err = decode::<Provisioner>(&json!({"metadata": {"name": "p"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule", "efect": "x"}]}}), &Path::default()).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.taints[0].efect");
        assert!(err.reason.contains("did you mean \"effect\""), "{err}");
    }

    #[test]
    fn what_the_server_and_controllers_own_is_never_an_unknown_key() {
        use crate::apis::v1alpha5::Provisioner;
        let p = json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
                       "metadata": {"name": "p", "someNewServerField": 1},
                       "spec": {}, "status": {"lastScaleTime": "2023-06-01T00:00:00Z", "someNewStatusField": [1]}});
        assert!(decode::<Provisioner>(&p, &Path::default()).is_ok());
        assert!(from_str_exact::<Provisioner>(&p.to_string()).is_some());
        let typo = json!({"metadata": {"name": "p"}, "spec": {"wieght": 1}});
        assert!(from_str_exact::<Provisioner>(&typo.to_string()).is_none());
    }

    #[test]
    fn watched_objects_decode_with_fields_another_crd_allows() {
        // Karpenter v0.31's AWSNodeTemplate CRD accepts spec.apiVersion and spec.kind (its spec
        // embeds the inline provider's type fields); a store of such objects must still fill.
        use crate::apis::v1alpha1::AwsNodeTemplate;
        use crate::apis::v1alpha5::Provisioner;
        let template: AwsNodeTemplate = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "t"},
            "spec": {"apiVersion": "extensions.karpenter.sh/v1alpha1", "kind": "AWS",
                     "subnetSelector": {"karpenter.sh/discovery": "c"}, "futureField": {"x": 1}}
        }))
        .expect("tolerant decoding");
        assert_eq!(template.spec.subnet_selector.unwrap()["karpenter.sh/discovery"], "c");
        let provisioner: Provisioner = serde_json::from_value(json!({
            "metadata": {"name": "p"}, "spec": {"ttlSecondsAfterEmpty": 30, "consolidation": {"enabled": false, "policy": "x"}}
        }))
        .expect("tolerant decoding");
        assert_eq!(provisioner.spec.ttl_seconds_after_empty, Some(30));
        // The webhook still refuses what it does not know.
        let err = decode::<AwsNodeTemplate>(&json!({"metadata": {"name": "t"}, "spec": {"futureField": 1}}), &Path::default()).unwrap_err();
        assert_eq!(err.path.as_str(), "spec.futureField");
    }

    #[test]
    fn quantities_stored_as_numbers_decode_as_karpenters_int_or_string_crds_allow() {
        // Objects kept from Karpenter: its CRDs declare quantities int-or-string.
        use crate::apis::v1alpha1::AwsNodeTemplate;
        use crate::apis::v1alpha5::Provisioner;
        let template: AwsNodeTemplate = serde_json::from_value(json!({
            "metadata": {"name": "t"},
            "spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": 100, "volumeType": "gp3"}}]}
        }))
        .expect("a numeric volumeSize decodes");
        let ebs = template.spec.block_device_mappings.unwrap()[0].ebs.clone().unwrap();
        assert_eq!(ebs.volume_size.unwrap().0, "100");
        let provisioner: Provisioner = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"limits": {"resources": {"cpu": 1000}},
                     "kubeletConfiguration": {"kubeReserved": {"cpu": 1}, "systemReserved": {"memory": "100Mi", "pid": 100}}},
            "status": {"resources": {"cpu": 4, "memory": "16Gi"}}
        }))
        .expect("numeric quantities decode");
        let kubelet = provisioner.spec.kubelet_configuration.unwrap();
        assert_eq!(kubelet.kube_reserved.unwrap()["cpu"].0, "1");
        assert_eq!(kubelet.system_reserved.unwrap()["pid"].0, "100");
        assert_eq!(provisioner.status.unwrap().resources.unwrap()["cpu"].0, "4");
        assert!(serde_json::from_value::<AwsNodeTemplate>(json!({
            "metadata": {"name": "t"},
            "spec": {"blockDeviceMappings": [{"ebs": {"volumeSize": [1]}}]}
        }))
        .is_err());
    }

    #[test]
    fn suggests_only_close_names() {
        assert_eq!(did_you_mean("subnetselector", &["subnetSelector", "tags"]), Some("subnetSelector"));
        assert_eq!(did_you_mean("zzzzzzzz", &["subnetSelector", "tags"]), None);
    }
}
