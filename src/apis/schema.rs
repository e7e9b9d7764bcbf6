//! Schema fragments the derived CRD schemas cannot express by themselves.

use schemars::{json_schema, Schema, SchemaGenerator};

/// An object whose contents the API server keeps as they are (`x-kubernetes-preserve-unknown-fields`).
/// Used for the inline `spec.provider`, which the webhook decodes strictly instead.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// Reads an optional object kept as JSON (see [`preserve_unknown_object`]): anything but an
/// object or null is refused as its schema refuses it, so that the webhook never answers for an
/// array or a string as if it were the object (`spec.provider: []`).
pub fn deserialize_object<'de, D>(deserializer: D) -> Result<Option<serde_json::Value>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    use serde::Deserialize;
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(object @ serde_json::Value::Object(_)) => Ok(Some(object)),
        Some(serde_json::Value::Array(_)) => Err(D::Error::custom(crate::apis::objects_only::ARRAY_FOR_AN_OBJECT)),
        Some(other) => Err(D::Error::custom(format!("invalid type: {other}, expected an object"))),
    }
}

/// The pattern the API server's own resource quantities follow.
const QUANTITY_PATTERN: &str =
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A map of resource quantities, each a string (`"16Gi"`) or a number (`1000`), as Karpenter's
/// CRD accepts them (`x-kubernetes-int-or-string`): its getting-started Provisioner writes
/// `limits: {resources: {cpu: 1000}}`.
pub fn quantity_map(_: &mut SchemaGenerator) -> Schema {
    let value = serde_json::json!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true
    });
    json_schema!({"type": "object", "nullable": true, "additionalProperties": value})
}

/// Declares the quantities of an optional field (`Option<Quantity>` or a map of them) strings
/// (`"16Gi"`), as our CRDs always have: k8s-openapi declares `Quantity` int-or-string since 0.26.
/// The webhook and the controllers still read numbers (Karpenter's CRDs allow them, see
/// [`deserialize_quantity`]); [`quantity_map`] is where ours allow them too.
pub fn quantities_as_strings(schema: &mut Schema) {
    // The field's `None` is lost with a schema that has no type; kube restores it as `nullable`
    // for int-or-string fields only, so it is restored here.
    let optional_quantity = is_int_or_string(schema);
    as_strings(schema);
    if optional_quantity {
        schema.insert("nullable".into(), true.into());
    }
}

fn as_strings(schema: &mut Schema) {
    schemars::transform::transform_subschemas(&mut as_strings, schema);
    if is_int_or_string(schema) {
        schema.remove("x-kubernetes-int-or-string");
        schema.insert("type".into(), "string".into());
    }
}

/// A bare int-or-string schema (k8s-openapi's `Quantity`), not one that spells out its types.
fn is_int_or_string(schema: &Schema) -> bool {
    schema.get("x-kubernetes-int-or-string") == Some(&serde_json::Value::Bool(true))
        && schema.get("type").is_none()
        && schema.get("anyOf").is_none()
}

/// Reads an optional quantity given as a string or a number: Karpenter's CRDs declare
/// quantities int-or-string (`volumeSize: 100`), and an object stored under them must decode.
pub fn deserialize_quantity<'de, D>(deserializer: D) -> Result<Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    use serde::Deserialize;
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(s))),
        Some(serde_json::Value::Number(n)) => Ok(Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(n.to_string()))),
        Some(other) => Err(D::Error::custom(format!("expected a quantity (a string or a number), got {other}"))),
    }
}

/// Reads an optional map of quantities given as strings or numbers (see [`quantity_map`]).
pub fn deserialize_quantity_map<'de, D>(
    deserializer: D,
) -> Result<Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    use serde::Deserialize;
    let raw: Option<std::collections::BTreeMap<String, serde_json::Value>> = Option::deserialize(deserializer)?;
    raw.map(|map| {
        map.into_iter()
            .map(|(name, value)| match value {
                serde_json::Value::String(s) => Ok((name, k8s_openapi::apimachinery::pkg::api::resource::Quantity(s))),
                serde_json::Value::Number(n) => Ok((name, k8s_openapi::apimachinery::pkg::api::resource::Quantity(n.to_string()))),
                other => Err(D::Error::custom(format!(
                    "{name}: expected a quantity (a string or a number), got {other}"
                ))),
            })
            .collect()
    })
    .transpose()
}
