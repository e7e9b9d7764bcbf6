//! The custom resources karpenter-rs serves and their admission rules, as pure functions:
//! `v1alpha5` (karpenter.sh: Provisioner) and `v1alpha1` (karpenter.k8s.aws: AWSNodeTemplate).
//! No I/O here: the webhook and the controllers call in with plain data.

pub mod decode;
pub mod field_error;
pub mod hash;
pub mod keys;
pub mod names;
pub mod objects_only;
pub mod quantity;
pub mod schema;
pub mod v1alpha1;
pub mod v1alpha5;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use field_error::{FieldError, Path};

/// The settings admission rules depend on, taken from the binary's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiSettings {
    /// The cluster karpenter-rs manages: `spec.provider.clusterName` must match it, and it names
    /// the discovery tag of the selector defaults.
    pub cluster_name: String,
    /// Default `ttlSecondsAfterEmpty`; `None` turns the default off.
    pub default_ttl_seconds_after_empty: Option<i64>,
    /// Default `ttlSecondsUntilExpired`; `None` turns the default off.
    pub default_ttl_seconds_until_expired: Option<i64>,
}

impl ApiSettings {
    /// The defaults karpenter-rs ships: 30 s after empty, 30 days until expired.
    pub fn new(cluster_name: impl Into<String>) -> Self {
        ApiSettings {
            cluster_name: cluster_name.into(),
            default_ttl_seconds_after_empty: Some(DEFAULT_TTL_SECONDS_AFTER_EMPTY),
            default_ttl_seconds_until_expired: Some(DEFAULT_TTL_SECONDS_UNTIL_EXPIRED),
        }
    }
}

/// Shipped default of `ttlSecondsAfterEmpty`.
pub const DEFAULT_TTL_SECONDS_AFTER_EMPTY: i64 = 30;
/// Shipped default of `ttlSecondsUntilExpired` (30 days).
pub const DEFAULT_TTL_SECONDS_UNTIL_EXPIRED: i64 = 2_592_000;

/// Both kinds' names must be DNS-1035 labels (as in Karpenter): they become parts of node names,
/// launch-template names and tags.
pub fn validate_object_name(meta: &ObjectMeta) -> Option<FieldError> {
    let path = Path::new("metadata");
    match (meta.name.as_deref(), meta.generate_name.as_deref()) {
        (Some(name), _) if !name.is_empty() => names::check_dns1035_label(name)
            .err()
            .map(|r| FieldError::invalid(path.child("name"), name, r)),
        (_, Some(prefix)) if !prefix.is_empty() => names::check_dns1035_prefix(prefix)
            .err()
            .map(|r| FieldError::invalid(path.child("generateName"), prefix, r)),
        _ => Some(FieldError::required(path.child("name"), "name the object")),
    }
}
