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
