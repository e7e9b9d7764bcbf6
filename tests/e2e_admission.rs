//! End to end through real kubectl against the real kube-apiserver of the local cluster: the
//! API server calls the karpenter-rs webhook (registered with the shipped configurations) for
//! every Provisioner and AWSNodeTemplate write.

mod support;

use std::sync::OnceLock;

use karpenter_rs::apis::v1alpha5::Provisioner;
use kube::Api;
use serde_json::{json, Value};
use support::{cluster, fixture, kubectl, kubectl_ok, unique, AdmissionWebhook, Cluster};

fn setup() -> &'static Cluster {
    static WEBHOOK: OnceLock<AdmissionWebhook> = OnceLock::new();
    let cluster = cluster();
    WEBHOOK.get_or_init(|| AdmissionWebhook::start(cluster));
    cluster
}

/// `kubectl apply -f -` of `object`; returns (success, stdout + stderr).
fn apply(cluster: &Cluster, object: &Value) -> (bool, String) {
    let out = kubectl(cluster, &["apply", "-f", "-"], Some(&object.to_string()));
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

fn get(cluster: &Cluster, kind: &str, name: &str) -> Value {
    serde_json::from_str(&kubectl_ok(cluster, &["get", kind, name, "-o", "json"], None)).unwrap()
}

fn delete(cluster: &Cluster, kind: &str, name: &str) {
    kubectl_ok(cluster, &["delete", kind, name, "--ignore-not-found", "--wait=false"], None);
}

fn named(mut object: Value, name: &str) -> Value {
    object["metadata"]["name"] = json!(name);
    object
}

fn requirement_keys(object: &Value) -> Vec<String> {
    object["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn applies_the_first_write_up_and_shows_the_defaults() {
    let cluster = setup();
    let template_name = unique("service-lt");
    let provisioner_name = unique("service");
    let template = named(fixture("first-writeup/awsnodetemplate.yaml"), &template_name);
    let mut provisioner = named(fixture("first-writeup/provisioner.yaml"), &provisioner_name);
    provisioner["spec"]["providerRef"]["name"] = json!(template_name);

    let (ok, out) = apply(cluster, &template);
    assert!(ok, "{out}");
    let (ok, out) = apply(cluster, &provisioner);
    assert!(ok, "{out}");

    let stored = get(cluster, "provisioner", &provisioner_name);
    assert_eq!(
        requirement_keys(&stored),
        [
            "node.kubernetes.io/instance-type",
            "topology.kubernetes.io/zone",
            "karpenter.sh/capacity-type",
            "kubernetes.io/os",
            "kubernetes.io/arch"
        ]
    );
    assert_eq!(stored["spec"]["ttlSecondsAfterEmpty"], 30);
    assert_eq!(stored["spec"]["ttlSecondsUntilExpired"], 1209600);
    let stored = get(cluster, "awsnodetemplate", &template_name);
    assert_eq!(stored["spec"], template["spec"], "nothing to default on the template");

    // The printer columns show the template.
    let table = kubectl_ok(cluster, &["get", "provisioner", &provisioner_name], None);
    assert!(table.contains("TEMPLATE") && table.contains(&template_name), "{table}");

    delete(cluster, "provisioner", &provisioner_name);
    delete(cluster, "awsnodetemplate", &template_name);
}

#[test]
fn applies_the_second_write_up_with_selectors_and_ttls_defaulted() {
    let cluster = setup();
    // Step 3-7 names its cluster; here the cluster is ssungz-cluster.
    let name = unique("default");
    let mut with_cluster_name = named(fixture("second-writeup/provisioner-cluster-name.yaml"), &name);
    with_cluster_name["spec"]["provider"]["clusterName"] = json!("ssungz-cluster");
    let (ok, out) = apply(cluster, &with_cluster_name);
    assert!(ok, "{out}");
    let stored = get(cluster, "provisioner", &name);
    assert_eq!(
        stored["spec"]["provider"]["subnetSelector"],
        json!({"karpenter.sh/discovery": "ssungz-cluster"})
    );
    assert_eq!(
        stored["spec"]["provider"]["securityGroupSelector"],
        json!({"karpenter.sh/discovery": "ssungz-cluster"})
    );
    assert_eq!(stored["spec"]["ttlSecondsAfterEmpty"], 30);
    assert_eq!(stored["spec"]["ttlSecondsUntilExpired"], 2592000);
    assert!(requirement_keys(&stored).contains(&"karpenter.k8s.aws/instance-generation".to_string()));
    delete(cluster, "provisioner", &name);

    // As written (your-cluster-name), it names another cluster and is refused, saying so.
    let name = unique("default");
    let (ok, out) = apply(cluster, &named(fixture("second-writeup/provisioner-cluster-name.yaml"), &name));
    assert!(!ok);
    assert!(
        out.contains("spec.provider.clusterName: invalid value \"your-cluster-name\""),
        "{out}"
    );
    assert!(out.contains("ssungz-cluster"), "{out}");

    for file in [
        "provisioner-selectors.yaml",
        "provisioner-spot-price.yaml",
        "provisioner-instance-types.yaml",
    ] {
        let name = unique("second");
        let (ok, out) = apply(cluster, &named(fixture(&format!("second-writeup/{file}")), &name));
        assert!(ok, "{file}: {out}");
        let stored = get(cluster, "provisioner", &name);
        assert!(stored["spec"]["ttlSecondsUntilExpired"].is_number(), "{file}");
        delete(cluster, "provisioner", &name);
    }
}

#[test]
fn refuses_invalid_specs_with_a_message_naming_the_field() {
    let cluster = setup();
    let base = fixture("first-writeup/provisioner.yaml");
    let provisioner = |edit: &dyn Fn(&mut Value)| {
        let mut p = named(base.clone(), &unique("invalid"));
        edit(&mut p);
        p
    };
    let template = |spec: Value| json!({"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": unique("invalid-lt")}, "spec": spec});
    let cases: Vec<(Value, &str)> = vec![
        (
            provisioner(&|p| p["spec"]["ttlSecondsAfterEmpty"] = json!(-1)),
            "spec.ttlSecondsAfterEmpty: invalid value -1",
        ),
        (
            provisioner(&|p| p["spec"]["ttlSecondsUntilExpired"] = json!(-30)),
            "spec.ttlSecondsUntilExpired: invalid value -30",
        ),
        (
            // The value that once panicked the deprovisioning controller.
            provisioner(&|p| p["spec"]["ttlSecondsUntilExpired"] = json!(9_000_000_000_000i64)),
            "spec.ttlSecondsUntilExpired: invalid value 9000000000000: must be at most 3153600000 (100 years)",
        ),
        (
            provisioner(&|p| p["spec"]["limits"] = json!({"resources": {"memory": "8Ei"}})),
            "spec.limits.resources[memory]: invalid value \"8Ei\": must be at most 4Ei",
        ),
        (
            provisioner(&|p| p["spec"]["consolidation"] = json!({"enabled": true})),
            "spec.ttlSecondsAfterEmpty: forbidden",
        ),
        (
            provisioner(&|p| p["spec"]["provider"] = json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}})),
            "spec.provider: forbidden",
        ),
        (
            provisioner(&|p| p["spec"]["labels"] = json!({"karpenter.sh/provisioner-name": "x"})),
            "spec.labels[karpenter.sh/provisioner-name]: forbidden",
        ),
        (
            provisioner(&|p| p["spec"]["labels"] = json!({"kubernetes.io/team": "x"})),
            "spec.labels: invalid value \"kubernetes.io/team\"",
        ),
        (
            provisioner(&|p| p["spec"]["labels"] = json!({"node.kubernetes.io/instance-type": "m5.large"})),
            "contradicts spec.requirements[0]",
        ),
        (
            provisioner(&|p| p["spec"]["taints"][0]["effect"] = json!("NoEvict")),
            "spec.taints[0].effect: invalid value \"NoEvict\"",
        ),
        (
            provisioner(&|p| p["spec"]["requirements"][0]["operator"] = json!("within")),
            "spec.requirements[0].operator: invalid value \"within\"",
        ),
        (
            provisioner(&|p| p["spec"]["requirements"][0] = json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt"})),
            "spec.requirements[0].values",
        ),
        (
            provisioner(&|p| p["spec"]["requirements"][0]["values"] = json!([])),
            "spec.requirements[0].values: required value",
        ),
        (
            provisioner(&|p| p["spec"]["kubeletConfiguration"] = json!({"evictionHard": {"memory.available": "110%"}})),
            "spec.kubeletConfiguration.evictionHard[memory.available]",
        ),
        (
            provisioner(&|p| p["metadata"]["name"] = json!(unique("team.gpu"))),
            "metadata.name: invalid value",
        ),
        (
            template(json!({"securityGroupSelector": {"a": "b"}, "subnetSelector": {"aws-ids": "subnet-1,"}})),
            "spec.subnetSelector[aws-ids]",
        ),
        (
            template(json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "amiFamily": "Custom"})),
            "spec.amiSelector: required value",
        ),
        (
            template(json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "tags": {"karpenter.sh/managed-by": "x"}})),
            "spec.tags[karpenter.sh/managed-by]: forbidden",
        ),
        (
            template(
                json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "metadataOptions": {"httpPutResponseHopLimit": 65}}),
            ),
            "spec.metadataOptions.httpPutResponseHopLimit: invalid value 65",
        ),
    ];
    assert!(cases.len() >= 10);
    for (object, want) in cases {
        let (ok, out) = apply(cluster, &object);
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let kind = object["kind"].as_str().unwrap().to_lowercase();
        if ok {
            delete(cluster, &kind, &name);
        }
        assert!(!ok, "kubectl accepted {object}: {out}");
        assert!(out.contains("denied the request") && out.contains(want), "want {want:?} in: {out}");
    }
}

#[test]
fn an_update_that_removes_a_ttl_gets_it_defaulted_again() {
    let cluster = setup();
    let template_name = unique("service-lt");
    let name = unique("service");
    let mut provisioner = named(fixture("first-writeup/provisioner.yaml"), &name);
    provisioner["spec"]["providerRef"]["name"] = json!(template_name);
    let (ok, out) = apply(cluster, &provisioner);
    assert!(ok, "{out}");
    kubectl_ok(
        cluster,
        &[
            "patch",
            "provisioner",
            &name,
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/spec/ttlSecondsUntilExpired"}]"#,
        ],
        None,
    );
    assert_eq!(get(cluster, "provisioner", &name)["spec"]["ttlSecondsUntilExpired"], 2592000);
    // Removing the defaulted requirements re-adds them too.
    kubectl_ok(
        cluster,
        &[
            "patch",
            "provisioner",
            &name,
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/spec/requirements/4"}]"#,
        ],
        None,
    );
    assert!(requirement_keys(&get(cluster, "provisioner", &name)).contains(&"kubernetes.io/arch".to_string()));
    // An invalid UPDATE is refused like a CREATE.
    let out = kubectl(
        cluster,
        &[
            "patch",
            "provisioner",
            &name,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"ttlSecondsAfterEmpty":-5}}"#,
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.ttlSecondsAfterEmpty: invalid value -5"));
    delete(cluster, "provisioner", &name);
}

#[test]
fn kubectl_shows_warnings_for_deprecated_keys() {
    let cluster = setup();
    let name = unique("beta");
    let mut provisioner = named(fixture("first-writeup/provisioner.yaml"), &name);
    provisioner["spec"]["requirements"][1]["key"] = json!("failure-domain.beta.kubernetes.io/zone");
    let (ok, out) = apply(cluster, &provisioner);
    assert!(ok, "{out}");
    assert!(out.contains("Warning:") && out.contains("deprecated"), "{out}");
    delete(cluster, "provisioner", &name);
}

#[test]
fn kubectl_explain_shows_the_field_docs() {
    let cluster = setup();
    let out = kubectl_ok(cluster, &["explain", "provisioner.spec.ttlSecondsAfterEmpty"], None);
    assert!(out.contains("Seconds a node may stay empty"), "{out}");
    let out = kubectl_ok(cluster, &["explain", "awsnodetemplate.spec.subnetSelector"], None);
    assert!(out.contains("karpenter.sh/discovery"), "{out}");
}

#[tokio::test]
async fn stored_objects_decode_into_the_rust_types() {
    let cluster = setup();
    let name = unique("typed");
    let (ok, out) = apply(cluster, &named(fixture("first-writeup/provisioner.yaml"), &name));
    assert!(ok, "{out}");
    let api: Api<Provisioner> = Api::all(support::client(cluster).await);
    let stored = api.get(&name).await.expect("the stored Provisioner decodes");
    assert_eq!(stored.spec.ttl_seconds_after_empty, Some(30));
    assert_eq!(stored.spec.requirements.as_ref().map(Vec::len), Some(5));
    api.delete(&name, &Default::default()).await.unwrap();
}
