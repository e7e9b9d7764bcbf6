//! The baseline of the HTTPS load benchmark (tests/benches/https_load.sh): a bare rustls + hyper
//! server that answers every request with one fixed AdmissionReview, with the same TLS settings,
//! the same runtime and the same certificate as the real webhook. What the real webhook adds on
//! top of it (routing, body limits, decoding, rules, patches, metrics, logs) is what the load
//! benchmark measures.
//!
//! Usage: `cargo bench --bench load_server -- --port 9443 --cert-dir DIR` (runs until killed);
//! `-- --print-body` prints the request body the load uses: an AdmissionReview (CREATE) of the
//! first write-up's Provisioner, read from tests/fixtures.
//! Under `cargo test --all-targets` (no `--port`) it only checks that it can start and exits.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use karpenter_rs::webhook::tls::{server_config, CertStore};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

const FIXED: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true,"status":{}}}"#;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    if args.iter().any(|a| a == "--print-body") {
        println!("{}", request_body());
        return;
    }
    let Some(port) = value("--port") else {
        println!("load_server: baseline server for tests/benches/https_load.sh; pass --port and --cert-dir to run it");
        return;
    };
    let cert_dir = PathBuf::from(value("--cert-dir").expect("--cert-dir"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let store = CertStore::load(&cert_dir).expect("certificates");
        let acceptor = TlsAcceptor::from(server_config(store));
        let listener = TcpListener::bind(format!("127.0.0.1:{port}")).await.unwrap();
        let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            let builder = builder.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else { return };
                let service = service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
                    use http_body_util::BodyExt;
                    let _ = request.into_body().collect().await;
                    Ok::<_, std::convert::Infallible>(
                        hyper::Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(FIXED.as_bytes())))
                            .unwrap(),
                    )
                });
                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
            });
        }
    });
}

/// The AdmissionReview the load sends.
fn request_body() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/first-writeup/provisioner.yaml");
    let object: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).expect("fixture exists")).expect("fixture parses");
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"},
            "resource": {"group": "karpenter.sh", "version": "v1alpha5", "resource": "provisioners"},
            "name": object["metadata"]["name"], "operation": "CREATE", "userInfo": {"username": "admin"},
            "object": object, "dryRun": false
        }
    })
    .to_string()
}
