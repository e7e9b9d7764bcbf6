//! Whether Karpenter itself still runs in the cluster. Two autoscalers acting on the same
//! Provisioners launch for the same pending pods and remove each other's nodes, so `run` does not
//! start its controllers while it finds one (unless `--allow-coexistence` is set, for a staged
//! migration with separate Provisioners) and looks again with its back-off, naming what it found
//! and how to proceed.
//!
//! What Karpenter v0.27–v0.31 leaves in a cluster while it runs, each read by name:
//! - its leader Lease `karpenter-leader-election` in the system namespace, renewed every few
//!   seconds: running when its resourceVersion changes while we watch it for `LEASE_WATCH`
//!   (no clock is compared with its renewTime);
//! - its Deployment `karpenter` in the system namespace with a ready replica, unless it is ours
//!   (`app.kubernetes.io/name: karpenter-rs`, or a `karpenter-rs` image);
//! - the webhook configurations only Karpenter registers (`validation.webhook.config.karpenter.sh`,
//!   `validation.webhook.karpenter.k8s.aws`, `defaulting.webhook.karpenter.k8s.aws`; the two
//!   `*.webhook.karpenter.sh` ones are ours too).
//!
//! An object this replica may not read (an older chart's RBAC) counts as absent.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client, ResourceExt};

use crate::apis::keys::APP_NAME_LABEL;

/// Karpenter's leader Lease.
pub const KARPENTER_LEASE: &str = "karpenter-leader-election";
/// Karpenter's Deployment (its chart's default release name).
pub const KARPENTER_DEPLOYMENT: &str = "karpenter";
/// Validating webhook configurations only Karpenter registers.
pub const KARPENTER_VALIDATING_WEBHOOKS: &[&str] = &["validation.webhook.config.karpenter.sh", "validation.webhook.karpenter.k8s.aws"];
/// Mutating webhook configurations only Karpenter registers.
pub const KARPENTER_MUTATING_WEBHOOKS: &[&str] = &["defaulting.webhook.karpenter.k8s.aws"];
/// How long Karpenter's Lease is watched for a renewal (it renews every 2 s).
pub const LEASE_WATCH: Duration = Duration::from_secs(6);

/// Absent, or not ours to read (403): both count as nothing found.
async fn get<K>(api: &Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(None),
        other => other,
    }
}

/// Whether a Deployment is karpenter-rs's own.
fn is_ours(deployment: &Deployment) -> bool {
    deployment.labels().get(APP_NAME_LABEL).map(String::as_str) == Some("karpenter-rs")
        || deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref()).is_some_and(|p| {
            p.containers
                .iter()
                .any(|c| c.image.as_deref().is_some_and(|i| i.contains("karpenter-rs")))
        })
}

/// What shows that Karpenter runs, one line each; empty when nothing does.
pub async fn find_karpenter(client: &Client, namespace: &str) -> Result<Vec<String>, kube::Error> {
    let mut found = Vec::new();
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    if let Some(first) = get(&leases, KARPENTER_LEASE).await? {
        tokio::time::sleep(LEASE_WATCH).await;
        if let Some(again) = get(&leases, KARPENTER_LEASE).await? {
            if again.resource_version() != first.resource_version() {
                let holder = again.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                found.push(format!("Lease {namespace}/{KARPENTER_LEASE} renewed by {holder:?}"));
            }
        }
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    if let Some(d) = get(&deployments, KARPENTER_DEPLOYMENT).await?.filter(|d| !is_ours(d)) {
        let ready = d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready > 0 {
            found.push(format!("Deployment {namespace}/{KARPENTER_DEPLOYMENT} with {ready} ready replicas"));
        }
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for name in KARPENTER_VALIDATING_WEBHOOKS {
        if get(&validating, name).await?.is_some() {
            found.push(format!("ValidatingWebhookConfiguration {name}"));
        }
    }
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for name in KARPENTER_MUTATING_WEBHOOKS {
        if get(&mutating, name).await?.is_some() {
            found.push(format!("MutatingWebhookConfiguration {name}"));
        }
    }
    Ok(found)
}

/// The error `run` gives while Karpenter runs: what was found and how to proceed.
pub fn refusal(found: &[String]) -> String {
    format!(
        "Karpenter is running in this cluster ({}): two autoscalers would launch for the same pods and remove each other's nodes, \
         so the controllers do not start. Uninstall Karpenter (e.g. `helm uninstall karpenter -n karpenter`; its webhook \
         configurations go with it), or, for a staged migration with separate Provisioners, start karpenter-rs with \
         --allow-coexistence (ALLOW_COEXISTENCE=true)",
        found.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn our_own_deployment_is_not_karpenter() {
        let deployment = |labels: serde_json::Value, image: &str| -> Deployment {
            serde_json::from_value(json!({
                "metadata": {"name": "karpenter", "labels": labels},
                "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "controller", "image": image}]}}}
            }))
            .unwrap()
        };
        assert!(is_ours(&deployment(json!({"app.kubernetes.io/name": "karpenter-rs"}), "x")));
        assert!(is_ours(&deployment(json!({}), "ghcr.io/example/karpenter-rs:0.1.0")));
        assert!(!is_ours(&deployment(
            json!({"app.kubernetes.io/name": "karpenter"}),
            "public.ecr.aws/karpenter/controller:v0.31.0"
        )));
        let why = refusal(&["Lease karpenter/karpenter-leader-election renewed by \"k-1\"".to_string()]);
        assert!(
            why.contains("karpenter-leader-election") && why.contains("--allow-coexistence"),
            "{why}"
        );
    }
}
