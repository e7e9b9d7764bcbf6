//! With the webhook unreachable, the shipped `failurePolicy: Fail` refuses Provisioner writes
//! with a clear error instead of storing unvalidated specs; once the webhook is back, the same
//! apply works. Its own test binary, because it takes the shared webhook down.

mod support;

use serde_json::json;
use support::{cluster, fixture, kubectl, kubectl_ok, unique, AdmissionWebhook};

#[test]
fn apply_fails_closed_while_the_webhook_is_down_and_works_when_it_is_back() {
    let cluster = cluster();
    let webhook = AdmissionWebhook::start(cluster);
    let name = unique("outage");
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    provisioner["metadata"]["name"] = json!(name);
    let manifest = provisioner.to_string();

    webhook.stop();
    let out = kubectl(cluster, &["apply", "-f", "-"], Some(&manifest));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "applied with the webhook down: {stderr}");
    assert!(
        stderr.contains("failed calling webhook") && stderr.contains("defaulting.webhook.karpenter.sh"),
        "{stderr}"
    );
    assert!(
        kubectl(cluster, &["get", "provisioner", &name], None).status.code() != Some(0),
        "nothing was stored"
    );

    webhook.resume();
    let out = kubectl(cluster, &["apply", "-f", "-"], Some(&manifest));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    kubectl_ok(cluster, &["delete", "provisioner", &name, "--wait=false"], None);
}
