//! Schema fragments the derived CRD schemas cannot express by themselves.

use schemars::gen::SchemaGenerator;
use schemars::schema::{InstanceType, Schema, SchemaObject};

/// An object whose contents the API server keeps as they are (`x-kubernetes-preserve-unknown-fields`).
/// Used for the inline `spec.provider`, which the webhook decodes strictly instead.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    let mut schema = SchemaObject {
        instance_type: Some(InstanceType::Object.into()),
        ..Default::default()
    };
    schema
        .extensions
        .insert("x-kubernetes-preserve-unknown-fields".into(), serde_json::Value::Bool(true));
    Schema::Object(schema)
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
    let schema = serde_json::json!({"type": "object", "nullable": true, "additionalProperties": value});
    serde_json::from_value(schema).expect("a valid schema")
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
