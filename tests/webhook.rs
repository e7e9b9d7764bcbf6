//! The HTTPS admission webhook, end to end over real TLS on 127.0.0.1: real AdmissionReview JSON
//! in, AdmissionReview out, certificates generated per test.

mod common;

use std::time::Duration;

use common::{admission_review, apply_patch, fixture, Server};
use karpenter_rs::apis::ApiSettings;
use karpenter_rs::certs;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

/// Mutates, applies the patch as the API server would, then validates the result.
async fn admit(server: &Server, object: &Value) -> (Value, Value) {
    let mutated = server.review("/mutate", &admission_review("CREATE", object, None)).await;
    assert_eq!(mutated["allowed"], true, "mutation refused: {mutated}");
    let patched = apply_patch(object, &mutated);
    let validated = server.review("/validate", &admission_review("CREATE", &patched, None)).await;
    (patched, validated)
}

fn requirement_keys(object: &Value) -> Vec<String> {
    object["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn accepts_the_first_write_up_and_defaults_os_and_arch() {
    let server = Server::start("ssungz-cluster").await;
    let provisioner = fixture("first-writeup/provisioner.yaml");
    let (patched, validated) = admit(&server, &provisioner).await;
    assert_eq!(validated["allowed"], true, "{validated}");
    assert_eq!(
        requirement_keys(&patched),
        [
            "node.kubernetes.io/instance-type",
            "topology.kubernetes.io/zone",
            "karpenter.sh/capacity-type",
            "kubernetes.io/os",
            "kubernetes.io/arch"
        ]
    );
    assert_eq!(patched["spec"]["ttlSecondsAfterEmpty"], 30);
    assert_eq!(patched["spec"]["ttlSecondsUntilExpired"], 1209600);

    let template = fixture("first-writeup/awsnodetemplate.yaml");
    let mutated = server.review("/mutate", &admission_review("CREATE", &template, None)).await;
    assert_eq!(mutated["allowed"], true);
    assert!(mutated.get("patch").is_none(), "nothing to default: {mutated}");
    let validated = server.review("/validate", &admission_review("CREATE", &template, None)).await;
    assert_eq!(validated["allowed"], true, "{validated}");
}

#[tokio::test]
async fn accepts_the_second_write_up_with_its_cluster_name() {
    let server = Server::start("your-cluster-name").await;
    let (patched, validated) = admit(&server, &fixture("second-writeup/provisioner-cluster-name.yaml")).await;
    assert_eq!(validated["allowed"], true, "{validated}");
    let provider = &patched["spec"]["provider"];
    assert_eq!(provider["subnetSelector"], json!({"karpenter.sh/discovery": "your-cluster-name"}));
    assert_eq!(
        provider["securityGroupSelector"],
        json!({"karpenter.sh/discovery": "your-cluster-name"})
    );
    assert_eq!(patched["spec"]["ttlSecondsAfterEmpty"], 30);
    assert_eq!(patched["spec"]["ttlSecondsUntilExpired"], 2592000);
    assert!(requirement_keys(&patched).contains(&"karpenter.k8s.aws/instance-category".to_string()));

    for file in [
        "provisioner-selectors.yaml",
        "provisioner-spot-price.yaml",
        "provisioner-instance-types.yaml",
    ] {
        let (patched, validated) = admit(&server, &fixture(&format!("second-writeup/{file}"))).await;
        assert_eq!(validated["allowed"], true, "{file}: {validated}");
        let expected_ttl = if file == "provisioner-instance-types.yaml" { 30 } else { 300 };
        assert_eq!(
            patched["spec"]["ttlSecondsAfterEmpty"], expected_ttl,
            "{file}: explicit TTLs are kept, absent ones defaulted"
        );
    }
}

#[tokio::test]
async fn denies_another_clusters_name() {
    let server = Server::start("ssungz-cluster").await;
    let (_, validated) = admit(&server, &fixture("second-writeup/provisioner-cluster-name.yaml")).await;
    assert_eq!(validated["allowed"], false);
    let message = validated["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.provider.clusterName: invalid value \"your-cluster-name\""),
        "{message}"
    );
    assert!(message.contains("ssungz-cluster"), "{message}");
}

#[tokio::test]
async fn denials_carry_every_field_error() {
    let server = Server::start("ssungz-cluster").await;
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    provisioner["spec"]["ttlSecondsAfterEmpty"] = json!(-1);
    provisioner["spec"]["labels"]["karpenter.sh/custom"] = json!("x");
    provisioner["spec"]["taints"][0]["effect"] = json!("NoEvict");
    let response = server.review("/validate", &admission_review("CREATE", &provisioner, None)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    let message = response["status"]["message"].as_str().unwrap();
    for want in [
        "Provisioner \"service\" is invalid",
        "spec.ttlSecondsAfterEmpty: invalid value -1",
        "spec.labels: invalid value \"karpenter.sh/custom\"",
        "spec.taints[0].effect: invalid value \"NoEvict\"",
    ] {
        assert!(message.contains(want), "want {want:?} in {message}");
    }
}

#[tokio::test]
async fn validates_updates_too() {
    let server = Server::start("ssungz-cluster").await;
    let old = fixture("first-writeup/provisioner.yaml");
    let mut new = old.clone();
    new["spec"]["requirements"][0]["operator"] = json!("Gt");
    let response = server.review("/validate", &admission_review("UPDATE", &new, Some(&old))).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.requirements[0].values"),
        "{response}"
    );
}

#[tokio::test]
async fn update_that_removes_a_ttl_gets_it_defaulted_again() {
    let server = Server::start("ssungz-cluster").await;
    let old = fixture("first-writeup/provisioner.yaml");
    let mut new = old.clone();
    new["spec"].as_object_mut().unwrap().remove("ttlSecondsUntilExpired");
    let response = server.review("/mutate", &admission_review("UPDATE", &new, Some(&old))).await;
    assert_eq!(apply_patch(&new, &response)["spec"]["ttlSecondsUntilExpired"], 2592000);
}

#[tokio::test]
async fn ttl_defaults_follow_settings() {
    let settings = ApiSettings {
        default_ttl_seconds_after_empty: None,
        default_ttl_seconds_until_expired: Some(60),
        ..ApiSettings::new("c")
    };
    let server = Server::start_with(settings, Duration::from_secs(10)).await;
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    let spec = provisioner["spec"].as_object_mut().unwrap();
    spec.remove("ttlSecondsAfterEmpty");
    spec.remove("ttlSecondsUntilExpired");
    let response = server.review("/mutate", &admission_review("CREATE", &provisioner, None)).await;
    let patched = apply_patch(&provisioner, &response);
    assert!(patched["spec"].get("ttlSecondsAfterEmpty").is_none(), "{patched}");
    assert_eq!(patched["spec"]["ttlSecondsUntilExpired"], 60);
}

#[tokio::test]
async fn mutating_gt_without_values_is_a_clean_answer() {
    let server = Server::start("ssungz-cluster").await;
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    provisioner["spec"]["requirements"] = json!([{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt"}]);
    let mutated = server.review("/mutate", &admission_review("CREATE", &provisioner, None)).await;
    assert_eq!(mutated["allowed"], true, "{mutated}");
    let validated = server
        .review("/validate", &admission_review("CREATE", &apply_patch(&provisioner, &mutated), None))
        .await;
    assert_eq!(validated["allowed"], false);
    assert!(
        validated["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.requirements[0].values"),
        "{validated}"
    );
}

#[tokio::test]
async fn unknown_fields_are_named_with_a_hint() {
    let server = Server::start("ssungz-cluster").await;
    let mut provisioner = fixture("second-writeup/provisioner-selectors.yaml");
    let provider = provisioner["spec"]["provider"].as_object_mut().unwrap();
    let selector = provider.remove("securityGroupSelector").unwrap();
    provider.insert("securityGroupSelecter".into(), selector);
    let response = server.review("/validate", &admission_review("CREATE", &provisioner, None)).await;
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.provider.securityGroupSelecter: forbidden: unknown field, did you mean \"securityGroupSelector\"?"),
        "{message}"
    );
}

#[tokio::test]
async fn warns_about_deprecated_keys() {
    let server = Server::start("ssungz-cluster").await;
    let mut provisioner = fixture("first-writeup/provisioner.yaml");
    provisioner["spec"]["requirements"][1]["key"] = json!("failure-domain.beta.kubernetes.io/zone");
    let response = server.review("/validate", &admission_review("CREATE", &provisioner, None)).await;
    assert_eq!(response["allowed"], true);
    let warnings = response["warnings"].as_array().expect("warnings");
    assert!(warnings[0].as_str().unwrap().contains("deprecated"), "{warnings:?}");
}

#[tokio::test]
async fn denies_kinds_it_does_not_serve() {
    let server = Server::start("ssungz-cluster").await;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}});
    for path in ["/mutate", "/validate"] {
        let response = server.review(path, &admission_review("CREATE", &pod, None)).await;
        assert_eq!(response["allowed"], false);
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("does not serve /v1, Kind=Pod"), "{message}");
    }
}

#[tokio::test]
async fn allows_deletes_without_looking() {
    let server = Server::start("ssungz-cluster").await;
    let mut review = admission_review("DELETE", &fixture("first-writeup/provisioner.yaml"), None);
    review["request"]["oldObject"] = review["request"]["object"].take();
    let response = server.review("/validate", &review).await;
    assert_eq!(response["allowed"], true);
}

#[tokio::test]
async fn malformed_bodies_get_an_invalid_review_never_a_crash() {
    let server = Server::start("ssungz-cluster").await;
    // Not JSON: no uid can be read, so a 400 with an explanation.
    let (status, body) = server.post("/validate", "{not json").await;
    assert_eq!(status, 400);
    assert_eq!(body["response"]["allowed"], false);
    assert!(
        body["response"]["status"]["message"].as_str().unwrap().contains("not JSON"),
        "{body}"
    );
    // JSON without a uid.
    let (status, body) = server
        .post("/mutate", r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
        .await;
    assert_eq!(status, 400);
    assert!(
        body["response"]["status"]["message"].as_str().unwrap().contains("request.uid"),
        "{body}"
    );
    // A uid but the wrong version: the uid is echoed.
    let mut review = admission_review("CREATE", &fixture("first-writeup/provisioner.yaml"), None);
    review["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let (status, body) = server.post("/validate", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(body["response"]["uid"], review["request"]["uid"]);
    assert_eq!(body["response"]["allowed"], false);
    // A uid but a request of the wrong shape.
    let mut review = admission_review("CREATE", &fixture("first-writeup/provisioner.yaml"), None);
    review["request"]["operation"] = json!(42);
    let (status, body) = server.post("/validate", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(status, 200);
    assert!(
        body["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("malformed AdmissionReview"),
        "{body}"
    );
    // An object of the right kind but the wrong shape: denied naming the field.
    let mut review = admission_review("CREATE", &fixture("first-writeup/provisioner.yaml"), None);
    review["request"]["object"]["spec"]["ttlSecondsAfterEmpty"] = json!("thirty");
    let response = server.review("/mutate", &review).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.ttlSecondsAfterEmpty: invalid value \"thirty\""),
        "{response}"
    );
    // Garbage of every kind never takes the server down.
    for body in [
        "",
        "null",
        "[]",
        "\"x\"",
        "{\"request\":{\"uid\":7}}",
        "{\"request\":{\"uid\":\"u\",\"object\":[]}}",
    ] {
        let (status, _) = server.post("/validate", body).await;
        assert!(status == 200 || status == 400, "{body}: {status}");
    }
    let response = server
        .review(
            "/validate",
            &admission_review("CREATE", &fixture("first-writeup/provisioner.yaml"), None),
        )
        .await;
    assert_eq!(response["allowed"], true, "still serving");
}

#[tokio::test]
async fn refuses_bodies_over_three_mebibytes() {
    let server = Server::start("ssungz-cluster").await;
    let big = vec![b' '; 3 * 1024 * 1024 + 1];
    let (status, body) = server.post("/validate", big).await;
    assert_eq!(status, 413, "{body}");
    // Without a Content-Length (streamed), the limit still holds.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..4).map(|_| Ok(vec![b' '; 1024 * 1024])).collect();
    let stream = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let (status, _) = server.post("/validate", stream).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn drops_clients_that_never_finish_the_handshake() {
    let server = Server::start_with(ApiSettings::new("c"), Duration::from_millis(300)).await;
    let mut stream = tokio::net::TcpStream::connect(server.webhook.local_addr).await.unwrap();
    let mut buf = [0u8; 16];
    // The server closes the idle connection; the bound here is only a test deadline.
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
        .await
        .expect("server closed the connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

#[tokio::test]
async fn reloads_the_certificate_without_a_restart() {
    let server = Server::start("ssungz-cluster").await;
    let review = admission_review("CREATE", &fixture("first-writeup/provisioner.yaml"), None);
    // A connection opened before the rotation...
    assert_eq!(server.review("/validate", &review).await["allowed"], true);
    let before = peer_certificate(&server, &server.ca.cert_pem()).await;

    // ...the files change to a certificate from a new CA...
    let new_ca = certs::Ca::generate("rotated CA", Duration::from_secs(3600)).unwrap();
    let rotated = new_ca.issue(&certs::serving_names(&[]), Duration::from_secs(3600)).unwrap();
    certs::write_serving(server.cert_dir.path(), &rotated).unwrap();

    // ...new handshakes get the new certificate (clients trusting the new CA connect)...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let after = loop {
        let got = peer_certificate(&server, &new_ca.cert_pem()).await;
        if got.is_some() || tokio::time::Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        before.is_some() && after.is_some() && before != after,
        "the certificate was reloaded"
    );
    let new_client = common::client_trusting(&new_ca.cert_pem());
    let response = new_client
        .post(format!("{}/validate", server.url))
        .json(&review)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // ...and the connection opened before keeps working.
    assert_eq!(server.review("/validate", &review).await["allowed"], true);
    let metrics = server.metrics.render();
    assert!(
        metrics.contains("karpenter_webhook_certificate_reloads_total{result=\"success\"} 1"),
        "{metrics}"
    );

    // A broken pair is refused (once the reloader has tried it) and the working certificate stays.
    std::fs::write(server.cert_path(), "not a certificate").unwrap();
    // The series appears with the first failed reload (it is not pre-registered); the count
    // then grows every tick while the files stay broken.
    let failed_reload = "karpenter_webhook_certificate_reloads_total{result=\"error\"} ";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !server.metrics.render().contains(failed_reload) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = server.metrics.render();
    assert!(metrics.contains(failed_reload), "{metrics}");
    assert!(peer_certificate(&server, &new_ca.cert_pem()).await.is_some());
}

/// The DER of the certificate a fresh TLS handshake gets, if it verifies against `ca_pem`.
async fn peer_certificate(server: &Server, ca_pem: &str) -> Option<Vec<u8>> {
    use rustls::pki_types::ServerName;
    let mut roots = rustls::RootCertStore::empty();
    for cert in karpenter_rs::webhook::tls::pem_certificates(ca_pem.as_bytes()).unwrap() {
        roots.add(cert).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(server.webhook.local_addr).await.ok()?;
    let tls = connector.connect(ServerName::try_from("127.0.0.1").unwrap(), tcp).await.ok()?;
    tls.get_ref().1.peer_certificates().map(|c| c[0].to_vec())
}

#[tokio::test]
async fn speaks_only_tls_1_2_and_1_3() {
    let server = Server::start("ssungz-cluster").await;
    let response = server.client.get(format!("{}/healthz", server.url)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let old = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(server.ca.cert_pem().as_bytes()).unwrap())
        .min_tls_version(reqwest::tls::Version::TLS_1_3)
        .build()
        .unwrap();
    assert_eq!(
        old.get(format!("{}/healthz", server.url)).send().await.unwrap().status(),
        200,
        "TLS 1.3 works"
    );
    let tls12 = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(server.ca.cert_pem().as_bytes()).unwrap())
        .max_tls_version(reqwest::tls::Version::TLS_1_2)
        .build()
        .unwrap();
    assert_eq!(
        tls12.get(format!("{}/healthz", server.url)).send().await.unwrap().status(),
        200,
        "TLS 1.2 works"
    );
}

#[tokio::test]
async fn counts_requests_by_path_kind_operation_and_result() {
    let server = Server::start("ssungz-cluster").await;
    server
        .review(
            "/mutate",
            &admission_review("CREATE", &fixture("first-writeup/provisioner.yaml"), None),
        )
        .await;
    server
        .review(
            "/validate",
            &admission_review("CREATE", &fixture("first-writeup/awsnodetemplate.yaml"), None),
        )
        .await;
    let metrics = server.metrics.render();
    for want in [
        r#"karpenter_webhook_requests_total{kind="Provisioner",operation="CREATE",path="/mutate",result="patched"} 1"#,
        r#"karpenter_webhook_requests_total{kind="AWSNodeTemplate",operation="CREATE",path="/validate",result="allowed"} 1"#,
        r#"karpenter_webhook_request_duration_seconds_count{kind="Provisioner",path="/mutate"} 1"#,
    ] {
        assert!(metrics.contains(want), "want {want} in\n{metrics}");
    }
}
