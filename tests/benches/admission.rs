//! Criterion benchmark of the admission path without the network: decode + default + patch, and
//! decode + validate, for a typical Provisioner and AWSNodeTemplate, plus the whole
//! `admission::review` on the AdmissionReview bytes the API server sends.
//! Run: `cargo bench --bench admission`. Results: tests/benches/results/admission.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use karpenter_rs::apis::v1alpha1::{self, AwsNodeTemplate};
use karpenter_rs::apis::v1alpha5::{self, Provisioner};
use karpenter_rs::apis::ApiSettings;
use karpenter_rs::webhook::admission::{review, Endpoint};
use serde_json::{json, Value};

fn fixture(path: &str) -> Value {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path);
    serde_yaml_ng::from_str(&std::fs::read_to_string(full).expect("fixture exists")).expect("fixture parses")
}

fn provisioner() -> Value {
    fixture("first-writeup/provisioner.yaml")
}

fn template() -> Value {
    fixture("first-writeup/awsnodetemplate.yaml")
}

/// The AdmissionReview bytes for a CREATE of `object`.
pub fn review_bytes(object: &Value) -> Vec<u8> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap();
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": version, "kind": object["kind"]},
            "resource": {"group": group, "version": version, "resource": "provisioners"},
            "name": object["metadata"]["name"], "operation": "CREATE",
            "userInfo": {"username": "admin"}, "object": object, "dryRun": false
        }
    }))
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let settings = ApiSettings::new("ssungz-cluster");
    let p = provisioner();
    let t = template();
    c.bench_function("provisioner/decode+default+validate", |b| {
        b.iter(|| {
            let mut decoded: Provisioner = serde_json::from_value(black_box(p.clone())).unwrap();
            v1alpha5::defaults::set_defaults(&mut decoded.spec, &settings);
            v1alpha5::validation::validate(&decoded, &settings).unwrap();
            decoded
        })
    });
    c.bench_function("awsnodetemplate/decode+default+validate", |b| {
        b.iter(|| {
            let mut decoded: AwsNodeTemplate = serde_json::from_value(black_box(t.clone())).unwrap();
            v1alpha1::defaults::set_defaults(&mut decoded.spec, &settings.cluster_name);
            v1alpha1::validation::validate(&decoded).unwrap();
            decoded
        })
    });
    let p_bytes = review_bytes(&p);
    let t_bytes = review_bytes(&t);
    c.bench_function("review/provisioner/mutate", |b| {
        b.iter(|| review(Endpoint::Mutate, black_box(&p_bytes), &settings))
    });
    c.bench_function("review/provisioner/validate", |b| {
        b.iter(|| review(Endpoint::Validate, black_box(&p_bytes), &settings))
    });
    c.bench_function("review/awsnodetemplate/validate", |b| {
        b.iter(|| review(Endpoint::Validate, black_box(&t_bytes), &settings))
    });
    // Baseline in the same run: only parsing the AdmissionReview bytes into JSON and writing a
    // fixed answer, the floor any webhook pays.
    c.bench_function("baseline/parse-json-only", |b| {
        b.iter(|| {
            let v: Value = serde_json::from_slice(black_box(&p_bytes)).unwrap();
            serde_json::to_vec(&json!({"uid": v["request"]["uid"], "allowed": true})).unwrap()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
