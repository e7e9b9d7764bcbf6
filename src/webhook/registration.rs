//! The MutatingWebhookConfiguration and ValidatingWebhookConfiguration that make the API server
//! call karpenter-rs for both kinds: one definition, used by `karpenter-rs webhook-config`, the
//! local cluster scripts and the tests, so what is tested is what ships.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use crate::apis::keys::APP_NAME_LABEL;

/// Name of the MutatingWebhookConfiguration.
pub const MUTATING_CONFIGURATION: &str = "karpenter-rs-defaulting";
/// Name of the ValidatingWebhookConfiguration.
pub const VALIDATING_CONFIGURATION: &str = "karpenter-rs-validation";
/// Webhook name shown by kubectl when a request is denied (`admission webhook "…" denied the request`).
pub const DEFAULTING_WEBHOOK: &str = "defaulting.webhook.karpenter.sh";
/// Webhook name shown by kubectl when a request is denied.
pub const VALIDATION_WEBHOOK: &str = "validation.webhook.karpenter.sh";
/// A write must not go through unvalidated: a spec that skipped validation could launch nodes
/// nobody meant, so the API server refuses writes while the webhook is unreachable.
pub const FAILURE_POLICY: &str = "Fail";
/// The webhook answers in well under a millisecond; 10 s covers a slow network without holding
/// `kubectl apply` for the API server's 30 s maximum.
pub const TIMEOUT_SECONDS: i32 = 10;

/// Where the API server reaches the webhook.
#[derive(Clone, Debug)]
pub enum Target {
    /// A URL such as `https://127.0.0.1:8443` (out-of-cluster, local clusters).
    Url(String),
    /// An in-cluster Service.
    Service {
        /// Namespace of the Service.
        namespace: String,
        /// Name of the Service.
        name: String,
        /// Port of the Service (443 → 8443 in the shipped manifests).
        port: i32,
    },
}

/// Both configurations for `target`, trusting `ca_bundle_pem` for the serving certificate.
pub fn configurations(target: &Target, ca_bundle_pem: &[u8]) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let mutating = MutatingWebhookConfiguration {
        metadata: metadata(MUTATING_CONFIGURATION),
        webhooks: Some(vec![MutatingWebhook {
            name: DEFAULTING_WEBHOOK.into(),
            client_config: client_config(target, "/mutate", ca_bundle_pem),
            rules: Some(rules()),
            failure_policy: Some(FAILURE_POLICY.into()),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            timeout_seconds: Some(TIMEOUT_SECONDS),
            match_policy: Some("Equivalent".into()),
            reinvocation_policy: Some("IfNeeded".into()),
            ..Default::default()
        }]),
    };
    let validating = ValidatingWebhookConfiguration {
        metadata: metadata(VALIDATING_CONFIGURATION),
        webhooks: Some(vec![ValidatingWebhook {
            name: VALIDATION_WEBHOOK.into(),
            client_config: client_config(target, "/validate", ca_bundle_pem),
            rules: Some(rules()),
            failure_policy: Some(FAILURE_POLICY.into()),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            timeout_seconds: Some(TIMEOUT_SECONDS),
            match_policy: Some("Equivalent".into()),
            ..Default::default()
        }]),
    };
    (mutating, validating)
}

/// Both configurations as one multi-document YAML stream.
pub fn to_yaml(target: &Target, ca_bundle_pem: &[u8]) -> String {
    let (mutating, validating) = configurations(target, ca_bundle_pem);
    let with_type = |kind: &str, value: serde_json::Value| {
        let mut object = serde_json::Map::new();
        object.insert("apiVersion".into(), "admissionregistration.k8s.io/v1".into());
        object.insert("kind".into(), kind.into());
        object.extend(value.as_object().expect("a configuration is an object").clone());
        serde_yaml_ng::to_string(&object).expect("a configuration serializes to YAML")
    };
    let m = with_type("MutatingWebhookConfiguration", serde_json::to_value(&mutating).expect("serializes"));
    let v = with_type(
        "ValidatingWebhookConfiguration",
        serde_json::to_value(&validating).expect("serializes"),
    );
    format!("{m}---\n{v}")
}

fn metadata(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([(APP_NAME_LABEL.to_string(), "karpenter-rs".to_string())])),
        ..Default::default()
    }
}

fn client_config(target: &Target, path: &str, ca_bundle_pem: &[u8]) -> WebhookClientConfig {
    let ca_bundle = Some(ByteString(ca_bundle_pem.to_vec()));
    match target {
        Target::Url(base) => WebhookClientConfig {
            url: Some(format!("{}{path}", base.trim_end_matches('/'))),
            ca_bundle,
            service: None,
        },
        Target::Service { namespace, name, port } => WebhookClientConfig {
            url: None,
            ca_bundle,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.into()),
                port: Some(*port),
            }),
        },
    }
}

/// CREATE and UPDATE of both kinds, cluster-scoped.
fn rules() -> Vec<RuleWithOperations> {
    [
        ("karpenter.sh", "v1alpha5", "provisioners"),
        ("karpenter.k8s.aws", "v1alpha1", "awsnodetemplates"),
    ]
    .into_iter()
    .map(|(group, version, resource)| RuleWithOperations {
        api_groups: Some(vec![group.into()]),
        api_versions: Some(vec![version.into()]),
        resources: Some(vec![resource.into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        scope: Some("Cluster".into()),
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_target_points_each_webhook_at_its_path() {
        let (m, v) = configurations(&Target::Url("https://127.0.0.1:8443/".into()), b"PEM");
        let mw = &m.webhooks.unwrap()[0];
        let vw = &v.webhooks.unwrap()[0];
        assert_eq!(mw.client_config.url.as_deref(), Some("https://127.0.0.1:8443/mutate"));
        assert_eq!(vw.client_config.url.as_deref(), Some("https://127.0.0.1:8443/validate"));
        assert_eq!(vw.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(vw.side_effects, "None");
        assert_eq!(vw.admission_review_versions, ["v1"]);
        assert_eq!(vw.rules.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn yaml_carries_kinds_and_base64_ca_bundle() {
        let yaml = to_yaml(
            &Target::Service {
                namespace: "karpenter".into(),
                name: "karpenter-rs".into(),
                port: 443,
            },
            b"PEM",
        );
        assert!(yaml.contains("kind: MutatingWebhookConfiguration"));
        assert!(yaml.contains("kind: ValidatingWebhookConfiguration"));
        assert!(yaml.contains("caBundle: UEVN"), "{yaml}");
        assert!(yaml.contains("path: /validate"));
    }
}
