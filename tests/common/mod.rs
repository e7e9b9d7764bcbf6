//! Shared support for the HTTPS tests: a real webhook server on 127.0.0.1 with freshly generated
//! certificates, a TLS client that trusts their CA, and AdmissionReview builders.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use karpenter_rs::apis::ApiSettings;
use karpenter_rs::certs::{self, Ca};
use karpenter_rs::metrics::Metrics;
use karpenter_rs::webhook::{self, Webhook, WebhookConfig};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A webhook server running for one test.
pub struct Server {
    pub webhook: Webhook,
    pub url: String,
    pub ca: Ca,
    pub cert_dir: tempfile::TempDir,
    pub client: reqwest::Client,
    pub metrics: Metrics,
    pub shutdown: CancellationToken,
}

impl Server {
    /// Starts the webhook for cluster `cluster_name` with the shipped defaults.
    pub async fn start(cluster_name: &str) -> Server {
        Self::start_with(ApiSettings::new(cluster_name), Duration::from_secs(10)).await
    }

    /// Starts the webhook with explicit settings and client timeout; certificates are checked
    /// for changes every 100 ms.
    pub async fn start_with(settings: ApiSettings, client_timeout: Duration) -> Server {
        let cert_dir = tempfile::tempdir().expect("temp dir");
        let ca = Ca::generate("test CA", Duration::from_secs(3600)).expect("CA");
        let serving = ca
            .issue(&certs::serving_names(&[]), Duration::from_secs(3600))
            .expect("serving cert");
        certs::write(cert_dir.path(), &ca, &serving).expect("write certs");
        let config = WebhookConfig {
            cert_dir: cert_dir.path().to_path_buf(),
            cert_reload_interval: Duration::from_millis(100),
            client_timeout,
            idle_timeout: Duration::from_secs(90),
            shutdown_grace: Duration::from_secs(5),
            settings,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let metrics = Metrics::new();
        let shutdown = CancellationToken::new();
        let webhook = webhook::start(listener, config, metrics.clone(), shutdown.clone()).expect("webhook starts");
        let url = format!("https://127.0.0.1:{}", webhook.local_addr.port());
        let client = client_trusting(&ca.cert_pem());
        Server {
            webhook,
            url,
            ca,
            cert_dir,
            client,
            metrics,
            shutdown,
        }
    }

    /// POSTs a body to `path` and returns the status and the body as JSON (or as a string value).
    pub async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{}", self.url, path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request reaches the webhook");
        let status = response.status().as_u16();
        let text = response.text().await.expect("response body");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Sends an AdmissionReview and returns its `response`, checking the envelope on the way.
    pub async fn review(&self, path: &str, review: &Value) -> Value {
        let (status, body) = self.post(path, serde_json::to_vec(review).unwrap()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{body}");
        assert_eq!(body["kind"], "AdmissionReview", "{body}");
        let response = body["response"].clone();
        assert_eq!(response["uid"], review["request"]["uid"], "uid is echoed: {body}");
        response
    }

    pub fn cert_path(&self) -> PathBuf {
        self.cert_dir.path().join(certs::CERT_FILE)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// An HTTPS client that trusts only `ca_pem`.
pub fn client_trusting(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA pem"))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The group, version and kind of an object's apiVersion/kind.
fn gvk(object: &Value) -> Value {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    json!({"group": group, "version": version, "kind": object["kind"]})
}

/// An AdmissionReview for `operation` on `object` (and `old` for UPDATE).
pub fn admission_review(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let kind = gvk(object);
    let plural = match object["kind"].as_str() {
        Some("Provisioner") => "provisioners",
        Some("AWSNodeTemplate") => "awsnodetemplates",
        _ => "things",
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{}", rand_suffix()),
            "kind": kind,
            "resource": {"group": kind["group"], "version": kind["version"], "resource": plural},
            "requestKind": kind,
            "requestResource": {"group": kind["group"], "version": kind["version"], "resource": plural},
            "name": object["metadata"]["name"],
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A YAML manifest under tests/fixtures, as JSON.
pub fn fixture(path: &str) -> Value {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", full.display()))
}

/// Applies the base64 JSON patch of a mutating response to `object`.
pub fn apply_patch(object: &Value, response: &Value) -> Value {
    let mut patched = object.clone();
    if let Some(patch) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64_decode(patch);
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch is a JSON patch");
        json_patch::patch(&mut patched, &patch).expect("patch applies to the object sent");
    }
    patched
}

/// Decodes standard base64 (the encoding of `patch` in AdmissionResponse).
pub fn base64_decode(input: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(input).expect("patch is base64")
}
