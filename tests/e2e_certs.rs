//! Self-managed webhook certificates on the real local control plane: two replicas of the real
//! binary (`karpenter-rs webhook` with an empty --cert-dir) share one Secret, fill the caBundle of
//! their webhook configurations and keep `kubectl apply` working when the Secret is deleted and
//! when a short-lived certificate is rotated. The replicas run as a ServiceAccount with only the
//! RBAC rules docs/webhook.md lists for self-managed certificates. Each test has its own namespace, Secret and
//! configurations; the configurations only match objects carrying the test's own label, so other
//! tests running against the same cluster never go through them.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use karpenter_rs::webhook::registration::{self, Target};
use karpenter_rs::webhook::self_signed::{CA_CERT_KEY, SERVER_CERT_KEY};
use serde_json::{json, Value};
use support::process::{http_get, Addresses};
use support::{cluster, fixture, kubectl, kubectl_ok, unique, wait_for, AdmissionWebhook, Cluster, CLUSTER_NAME};

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-rs");
/// Only objects with this label go through the test's configurations.
const SCOPE_LABEL: &str = "karpenter-rs.test/e2e-certs";

/// Provisioner writes also pass the shipped configurations (karpenter-rs-defaulting and
/// -validation, which match every object); like every end-to-end test, serve them from this
/// process so that they do not point at a webhook an earlier test stopped.
fn shipped_webhook() -> &'static AdmissionWebhook {
    static SHIPPED: OnceLock<AdmissionWebhook> = OnceLock::new();
    SHIPPED.get_or_init(|| AdmissionWebhook::start(cluster()))
}

fn setup() -> &'static Cluster {
    shipped_webhook();
    cluster()
}

/// One `karpenter-rs webhook` process in self-managed certificate mode; killed on drop.
struct Replica {
    child: Child,
    /// Where it listens (any free ports, read back from its start line).
    bound: Addresses,
    log: PathBuf,
    _cert_dir: tempfile::TempDir,
}

/// A namespace, a Secret name, two configurations and the replicas that manage them.
struct Scenario {
    cluster: &'static Cluster,
    namespace: String,
    secret: String,
    mutating: String,
    validating: String,
    scope: String,
    replicas: Vec<Replica>,
}

impl Scenario {
    /// A namespace, `replicas` replicas with the given certificate validity and renewal window,
    /// then both configurations (empty caBundle, pointing at the first replica's port): the
    /// replicas fill in the configurations when they appear.
    fn start(cluster: &'static Cluster, replicas: usize, validity: &str, renew_before: &str) -> Scenario {
        let id = unique("certs");
        let mut scenario = Scenario {
            cluster,
            namespace: id.clone(),
            secret: format!("{id}-cert"),
            mutating: format!("{id}-defaulting"),
            validating: format!("{id}-validation"),
            scope: id.clone(),
            replicas: Vec::new(),
        };
        kubectl_ok(cluster, &["create", "namespace", &scenario.namespace], None);
        let kubeconfig = scenario.least_privilege_kubeconfig();
        for index in 0..replicas {
            let replica = scenario.spawn(index, validity, renew_before, &kubeconfig);
            scenario.replicas.push(replica);
        }
        scenario.register(&format!("https://{}", scenario.replicas[0].bound.webhook));
        scenario
    }

    fn register(&self, url: &str) {
        let (mut mutating, mut validating) = registration::configurations(&Target::Url(url.into()), b"");
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([(SCOPE_LABEL.to_string(), self.scope.clone())])),
            ..Default::default()
        };
        mutating.metadata.name = Some(self.mutating.clone());
        for w in mutating.webhooks.iter_mut().flatten() {
            w.object_selector = Some(selector.clone());
            w.client_config.ca_bundle = None;
        }
        validating.metadata.name = Some(self.validating.clone());
        for w in validating.webhooks.iter_mut().flatten() {
            w.object_selector = Some(selector.clone());
            w.client_config.ca_bundle = None;
        }
        for (kind, object) in [
            ("MutatingWebhookConfiguration", serde_json::to_value(&mutating).unwrap()),
            ("ValidatingWebhookConfiguration", serde_json::to_value(&validating).unwrap()),
        ] {
            let mut object = object;
            object["apiVersion"] = json!("admissionregistration.k8s.io/v1");
            object["kind"] = json!(kind);
            kubectl_ok(self.cluster, &["create", "-f", "-"], Some(&object.to_string()));
        }
    }

    /// A kubeconfig for a ServiceAccount holding only what docs/webhook.md says self-managed
    /// certificates need, so the replicas prove those rules enough: in the namespace, `create`
    /// on secrets and `get`, `list`, `watch`, `update` on the one Secret; cluster-wide `get`,
    /// `list`, `watch`, `update` on the two named configurations.
    fn least_privilege_kubeconfig(&self) -> PathBuf {
        let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "karpenter-rs", "namespace": self.namespace}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "karpenter-rs-cert", "namespace": self.namespace},
             "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [self.secret], "verbs": ["get", "list", "watch", "update"]}
             ]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "karpenter-rs-cert", "namespace": self.namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "karpenter-rs-cert"},
             "subjects": [{"kind": "ServiceAccount", "name": "karpenter-rs", "namespace": self.namespace}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": self.namespace},
             "rules": [
                {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
                 "resourceNames": [self.mutating], "verbs": ["get", "list", "watch", "update"]},
                {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
                 "resourceNames": [self.validating], "verbs": ["get", "list", "watch", "update"]}
             ]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": self.namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.namespace},
             "subjects": [{"kind": "ServiceAccount", "name": "karpenter-rs", "namespace": self.namespace}]}
        ]});
        kubectl_ok(self.cluster, &["create", "-f", "-"], Some(&rbac.to_string()));
        let token = kubectl_ok(
            self.cluster,
            &["create", "token", "karpenter-rs", "-n", &self.namespace, "--duration", "1h"],
            None,
        );
        let admin: Value = serde_json::from_str(&kubectl_ok(
            self.cluster,
            &["config", "view", "--minify", "--raw", "-o", "json"],
            None,
        ))
        .unwrap();
        let kubeconfig = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": "karpenter-rs", "user": {"token": token.trim()}}],
            "contexts": [{"name": "karpenter-rs", "context": {"cluster": "local", "user": "karpenter-rs"}}],
            "current-context": "karpenter-rs",
        });
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}.kubeconfig", self.namespace));
        std::fs::write(&path, kubeconfig.to_string()).unwrap();
        // It is really restricted: listing every Secret is refused.
        let out = kubectl(
            self.cluster,
            &["--kubeconfig", path.to_str().unwrap(), "get", "secrets", "-n", &self.namespace],
            None,
        );
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("forbidden"),
            "{out:?}"
        );
        path
    }

    /// Starts replica `index` on any free ports (read back from its start line).
    fn spawn(&self, index: usize, validity: &str, renew_before: &str, kubeconfig: &std::path::Path) -> Replica {
        let cert_dir = tempfile::tempdir().unwrap();
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{index}.log", self.namespace));
        let log_file = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(BIN)
            .arg("webhook")
            .env("KUBECONFIG", kubeconfig)
            .env("CLUSTER_NAME", CLUSTER_NAME)
            .env("BIND_ADDRESS", "127.0.0.1")
            .env("WEBHOOK_PORT", "0")
            .env("METRICS_PORT", "0")
            .env("HEALTH_PROBE_PORT", "0")
            .env("CERT_DIR", cert_dir.path())
            .env("CERT_SECRET", &self.secret)
            .env("SYSTEM_NAMESPACE", &self.namespace)
            .env("WEBHOOK_SERVICE_NAME", "karpenter-rs")
            .env("MUTATING_WEBHOOK_CONFIGURATION", &self.mutating)
            .env("VALIDATING_WEBHOOK_CONFIGURATION", &self.validating)
            .env("CERT_EXTRA_SAN", "127.0.0.1")
            .env("CERT_VALIDITY", validity)
            .env("CERT_RENEW_BEFORE", renew_before)
            .env("LOG_LEVEL", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let bound = support::process::wait_started(&mut child, &log, Duration::from_secs(30));
        Replica {
            child,
            bound,
            log,
            _cert_dir: cert_dir,
        }
    }

    fn wait_ready(&self) {
        for r in &self.replicas {
            wait_for("a replica to become ready", Duration::from_secs(60), || {
                (http_get(r.bound.health, "/readyz").map(|(s, _)| s) == Some(200)).then_some(())
            });
        }
    }

    /// The Secret's resourceVersion and data (decoded), if it exists.
    fn secret(&self) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
        let out = kubectl(
            self.cluster,
            &[
                "get",
                "secret",
                &self.secret,
                "-n",
                &self.namespace,
                "-o",
                "json",
                "--ignore-not-found",
            ],
            None,
        );
        let text = String::from_utf8(out.stdout).unwrap();
        if !out.status.success() || text.trim().is_empty() {
            return None;
        }
        let secret: Value = serde_json::from_str(&text).unwrap();
        let data = secret["data"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), b64(v.as_str().unwrap())))
            .collect();
        Some((secret["metadata"]["resourceVersion"].as_str().unwrap().to_string(), data))
    }

    /// The caBundle of every webhook of both configurations, as lists of DER certificates.
    fn bundles(&self) -> Vec<Vec<Vec<u8>>> {
        let mut bundles = Vec::new();
        for (kind, name) in [
            ("mutatingwebhookconfiguration", &self.mutating),
            ("validatingwebhookconfiguration", &self.validating),
        ] {
            let object: Value = serde_json::from_str(&kubectl_ok(self.cluster, &["get", kind, name, "-o", "json"], None)).unwrap();
            for webhook in object["webhooks"].as_array().unwrap() {
                let pem = webhook["clientConfig"]["caBundle"].as_str().map(b64).unwrap_or_default();
                bundles.push(ders(&pem));
            }
        }
        bundles
    }

    /// Waits until the Secret exists, every replica serves its certificate and every caBundle
    /// starts with its CA; returns (resourceVersion, CA DER, serving certificate DER).
    fn wait_converged(&self, what: &str) -> (String, Vec<u8>, Vec<u8>) {
        wait_for(what, Duration::from_secs(60), || {
            let (rv, data) = self.secret()?;
            let ca = ders(data.get(CA_CERT_KEY)?).into_iter().next()?;
            let cert = ders(data.get(SERVER_CERT_KEY)?).into_iter().next()?;
            let served: Vec<_> = self.replicas.iter().map(|r| peer_certificate(r.bound.webhook)).collect();
            if served.iter().any(|s| s.as_ref() != Some(&cert)) {
                return None;
            }
            if self.bundles().iter().any(|b| b.first() != Some(&ca)) {
                return None;
            }
            Some((rv, ca, cert))
        })
    }

    /// `kubectl apply --dry-run=server` of a Provisioner carrying the scope label (so it goes
    /// through this scenario's webhooks), edited by `edit`; returns (success, output).
    fn apply(&self, edit: impl Fn(&mut Value)) -> (bool, String) {
        let mut provisioner = fixture("first-writeup/provisioner.yaml");
        provisioner["metadata"]["name"] = json!(unique("certs"));
        provisioner["metadata"]["labels"] = json!({ SCOPE_LABEL: self.scope });
        edit(&mut provisioner);
        let apply = || {
            kubectl(
                self.cluster,
                &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
                Some(&provisioner.to_string()),
            )
        };
        let mut out = apply();
        // Another test process running at the same time may have taken over the shipped
        // configurations and exited since; take them back (nothing to do with this test's own).
        if !out.status.success() && !shipped_webhook().is_registered(self.cluster) {
            shipped_webhook().register(self.cluster);
            out = apply();
        }
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    /// Applies a valid Provisioner and checks that the first replica defaulted it.
    fn assert_apply_is_defaulted_by_the_first_replica(&self) {
        let before = mutate_requests(self.replicas[0].bound.metrics);
        let (ok, out) = self.apply(|_| {});
        assert!(ok, "{out}\n{}", self.logs());
        let stored: Value = serde_json::from_str(&out).unwrap();
        let keys: Vec<&str> = stored["spec"]["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].as_str().unwrap())
            .collect();
        assert!(keys.contains(&"kubernetes.io/arch") && keys.contains(&"kubernetes.io/os"), "{out}");
        assert!(
            mutate_requests(self.replicas[0].bound.metrics) > before,
            "the first replica was not called"
        );
    }

    /// Asserts that the Secret's resourceVersion does not change for `window`.
    fn assert_secret_stable(&self, rv: &str, window: Duration) {
        let until = Instant::now() + window;
        while Instant::now() < until {
            let (now, _) = self.secret().expect("the secret exists");
            assert_eq!(now, rv, "the secret was rewritten without a reason\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("--- {}\n{}", r.log.display(), std::fs::read_to_string(&r.log).unwrap_or_default()))
            .collect()
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        let keep_logs = std::thread::panicking();
        for r in &mut self.replicas {
            let _ = r.child.kill();
            let _ = r.child.wait();
            if !keep_logs {
                let _ = std::fs::remove_file(&r.log);
            }
        }
        let _ = kubectl(
            self.cluster,
            &["delete", "mutatingwebhookconfiguration", &self.mutating, "--ignore-not-found"],
            None,
        );
        let _ = kubectl(
            self.cluster,
            &["delete", "validatingwebhookconfiguration", &self.validating, "--ignore-not-found"],
            None,
        );
        for kind in ["clusterrolebinding", "clusterrole"] {
            let _ = kubectl(self.cluster, &["delete", kind, &self.namespace, "--ignore-not-found"], None);
        }
        let _ = kubectl(
            self.cluster,
            &["delete", "namespace", &self.namespace, "--ignore-not-found", "--wait=false"],
            None,
        );
        let _ = std::fs::remove_file(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}.kubeconfig", self.namespace)));
    }
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn ders(pem: &[u8]) -> Vec<Vec<u8>> {
    karpenter_rs::webhook::tls::pem_certificates(pem)
        .unwrap()
        .iter()
        .map(|c| c.as_ref().to_vec())
        .collect()
}

/// AdmissionReviews the replica answered on /mutate, from its metrics.
fn mutate_requests(metrics: SocketAddr) -> f64 {
    let (_, body) = http_get(metrics, "/metrics").expect("metrics answer");
    body.lines()
        .filter(|l| l.starts_with("karpenter_webhook_requests_total{") && l.contains("path=\"/mutate\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The certificate the webhook at `address` presents (DER), or None when the handshake fails.
fn peer_certificate(address: SocketAddr) -> Option<Vec<u8>> {
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    /// Accepts any certificate: the test wants to see it, not to trust it.
    #[derive(Debug)]
    struct ShowAny(Arc<rustls::crypto::CryptoProvider>);
    impl ServerCertVerifier for ShowAny {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ShowAny(provider)))
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut socket = std::net::TcpStream::connect(address).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    while connection.is_handshaking() {
        connection.complete_io(&mut socket).ok()?;
    }
    Some(connection.peer_certificates()?.first()?.as_ref().to_vec())
}

#[test]
fn replicas_share_one_secret_fill_the_ca_bundle_and_recover_when_it_is_deleted() {
    let scenario = Scenario::start(setup(), 2, "7d", "24h");
    scenario.wait_ready();
    let (rv, ca, cert) = scenario.wait_converged("both replicas serving the secret's certificate, its CA in every caBundle");

    scenario.assert_apply_is_defaulted_by_the_first_replica();
    let (ok, out) = scenario.apply(|p| p["spec"]["ttlSecondsAfterEmpty"] = json!(-1));
    assert!(!ok, "{out}");
    assert!(out.contains("spec.ttlSecondsAfterEmpty: invalid value -1"), "{out}");
    // Nothing needs renewal, so nobody writes: no flapping between the replicas.
    scenario.assert_secret_stable(&rv, Duration::from_secs(5));

    kubectl_ok(
        scenario.cluster,
        &["delete", "secret", &scenario.secret, "-n", &scenario.namespace],
        None,
    );
    let (rv, new_ca, new_cert) = scenario.wait_converged("the secret recreated with a new CA, served and in every caBundle");
    assert_ne!(new_ca, ca, "a recreated secret has a new CA");
    assert_ne!(new_cert, cert);
    scenario.assert_apply_is_defaulted_by_the_first_replica();
    scenario.assert_secret_stable(&rv, Duration::from_secs(5));

    // A caBundle reset (as `helm upgrade` of the configurations does) is restored.
    kubectl_ok(
        scenario.cluster,
        &[
            "patch",
            "validatingwebhookconfiguration",
            &scenario.validating,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"}]"#,
        ],
        None,
    );
    let (rv, ca, _) = scenario.wait_converged("the caBundle restored");
    assert_eq!(ca, new_ca, "restoring the caBundle needs no new certificate");
    scenario.assert_secret_stable(&rv, Duration::from_secs(2));

    // A Secret holding garbage is replaced, not served and not a crash.
    kubectl_ok(
        scenario.cluster,
        &[
            "patch",
            "secret",
            &scenario.secret,
            "-n",
            &scenario.namespace,
            "--type=merge",
            "-p",
            r#"{"data": {"server-cert.pem": "bm90IGEgY2VydGlmaWNhdGU="}}"#,
        ],
        None,
    );
    let (_, ca, _) = scenario.wait_converged("a malformed secret regenerated");
    assert_ne!(ca, new_ca);
    scenario.assert_apply_is_defaulted_by_the_first_replica();
}

#[test]
fn a_short_lived_certificate_is_rotated_before_it_expires_and_apply_keeps_working() {
    let scenario = Scenario::start(setup(), 2, "20s", "10s");
    scenario.wait_ready();
    let (_, _, first) = scenario.wait_converged("both replicas serving the first certificate");

    // Each certificate lives 20 s and is replaced 10 s before its end: over 35 s at least two
    // rotations, and apply works throughout.
    let started = Instant::now();
    let mut certificates = vec![first];
    let mut versions = std::collections::BTreeSet::new();
    while started.elapsed() < Duration::from_secs(35) {
        let (ok, out) = scenario.apply(|_| {});
        assert!(ok, "apply failed {:?} into the test: {out}\n{}", started.elapsed(), scenario.logs());
        if let Some((rv, data)) = scenario.secret() {
            versions.insert(rv);
            let cert = ders(&data[SERVER_CERT_KEY]).remove(0);
            if certificates.last() != Some(&cert) {
                certificates.push(cert);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(certificates.len() >= 3, "{} certificates in 35 s", certificates.len());
    // About one write per rotation (≈ every 10 s), not a write loop between the replicas.
    assert!(
        versions.len() <= 6,
        "{} versions of the secret in 35 s\n{}",
        versions.len(),
        scenario.logs()
    );
    scenario.wait_converged("both replicas serving the latest certificate");
    scenario.assert_apply_is_defaulted_by_the_first_replica();
}
