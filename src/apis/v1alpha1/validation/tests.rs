use super::*;
use crate::apis::v1alpha1::AwsNodeTemplateSpec;
use serde_json::json;

fn template(spec: serde_json::Value) -> AwsNodeTemplate {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate",
        "metadata": {"name": "service-lt"}, "spec": spec
    }))
    .expect("test template decodes")
}

fn errors(spec: serde_json::Value) -> String {
    validate(&template(spec)).err().map(|e| e.to_string()).unwrap_or_default()
}

fn base() -> serde_json::Value {
    json!({"subnetSelector": {"karpenter.sh/discovery/ssungz-cluster": "*"}, "securityGroupSelector": {"aws:eks:cluster-name": "ssungz-cluster"}})
}

fn with(field: &str, value: serde_json::Value) -> serde_json::Value {
    let mut spec = base();
    spec[field] = value;
    spec
}

#[test]
fn accepts_the_first_write_up_template() {
    let spec = with("tags", json!({"karpenter.sh/discovery": "ssungz-cluster"}));
    assert_eq!(errors(spec), "");
}

#[test]
fn accepts_every_bootstrapped_ami_family_including_al2023() {
    for family in ["AL2", "AL2023", "Bottlerocket", "Ubuntu"] {
        assert_eq!(errors(with("amiFamily", json!(family))), "", "{family}");
    }
    assert!(errors(with("amiFamily", json!("AL2023 "))).contains("AL2023"));
}

#[test]
fn table_of_denials() {
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (json!({"securityGroupSelector": {"a": "b"}}), "spec.subnetSelector: required value"),
        (json!({"subnetSelector": {"a": "b"}}), "spec.securityGroupSelector: required value"),
        (
            with("subnetSelector", json!({"a": ""})),
            "spec.subnetSelector[a]: invalid value \"\"",
        ),
        (
            with("subnetSelector", json!({"": "x"})),
            "spec.subnetSelector: invalid value \"\": selector keys must not be empty",
        ),
        (with("subnetSelector", json!({"aws-ids": "subnet-1,"})), "\"\" is not an id"),
        (
            with("subnetSelector", json!({"aws-ids": "xsubnet-1"})),
            "\"xsubnet-1\" is not an id",
        ),
        (
            with("subnetSelector", json!({"aws::ids": "subnet-1", "b": "c"})),
            "must be the only key",
        ),
        (
            with("securityGroupSelector", json!({"aws-ids": "subnet-1"})),
            "not an id of the form sg-",
        ),
        (with("launchTemplate", json!("lt")), "spec.securityGroupSelector: forbidden"),
        (
            with("metadataOptions", json!({"httpTokens": "Required"})),
            "spec.metadataOptions.httpTokens: invalid value \"Required\"",
        ),
        (
            with("metadataOptions", json!({"httpPutResponseHopLimit": 65})),
            "httpPutResponseHopLimit: invalid value 65",
        ),
        (with("metadataOptions", json!({"httpEndpoint": "on"})), "httpEndpoint"),
        (with("metadataOptions", json!({"httpProtocolIPv6": "yes"})), "httpProtocolIPv6"),
        (with("amiFamily", json!("al2")), "spec.amiFamily: invalid value \"al2\""),
        (with("amiFamily", json!("Custom")), "spec.amiSelector: required value"),
        (
            with("blockDeviceMappings", json!([{"ebs": {"volumeSize": "20Gi"}}])),
            "spec.blockDeviceMappings[0].deviceName: required",
        ),
        (
            with("blockDeviceMappings", json!([{"deviceName": "/dev/xvda"}])),
            "spec.blockDeviceMappings[0].ebs: required",
        ),
        (
            with(
                "blockDeviceMappings",
                json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "953Mi"}}]),
            ),
            "volumeSize: invalid value \"953Mi\"",
        ),
        (
            with(
                "blockDeviceMappings",
                json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "64Ti"}}]),
            ),
            "volumeSize: invalid value \"64Ti\"",
        ),
        (
            with(
                "blockDeviceMappings",
                json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20"}}]),
            ),
            "volumeSize: invalid value \"20\"",
        ),
        (
            with("blockDeviceMappings", json!([{"deviceName": "/dev/xvda", "ebs": {}}])),
            "volumeSize: required",
        ),
        (
            with(
                "blockDeviceMappings",
                json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20G", "volumeType": "gp4"}}]),
            ),
            "volumeType: invalid value \"gp4\"",
        ),
        (with("tags", json!({"": "x"})), "spec.tags: invalid value \"\""),
        (
            with("tags", json!({"kubernetes.io/cluster/ssungz-cluster": "owned"})),
            "spec.tags[kubernetes.io/cluster/ssungz-cluster]: forbidden",
        ),
        (with("tags", json!({"kubernetes.io/cluster/my.cluster": "owned"})), "forbidden"),
        (with("tags", json!({"karpenter.sh/provisioner-name": "x"})), "forbidden"),
        (with("tags", json!({"karpenter.sh/managed-by": "x"})), "forbidden"),
        (with("tags", json!({"karpenter-rs.sh/managed-by": "x"})), "forbidden"),
        (with("amiSelector", json!({"aws-ids": "ami-1,xami-2"})), "\"xami-2\" is not an id"),
        (
            with("amiSelector", json!({"name": ""})),
            "spec.amiSelector[name]: invalid value \"\"",
        ),
    ];
    for (spec, want) in cases {
        let got = errors(spec.clone());
        assert!(got.contains(want), "spec {spec}: want {want:?} in {got:?}");
    }
}

#[test]
fn user_data_and_ami_selector_exclude_launch_template() {
    let spec = json!({"subnetSelector": {"a": "b"}, "launchTemplate": "lt", "userData": "x", "amiSelector": {"a": "b"}});
    let got = errors(spec);
    assert!(got.contains("spec.userData: forbidden"), "{got}");
    assert!(got.contains("spec.amiSelector: forbidden"), "{got}");
}

#[test]
fn accepts_edge_values() {
    for spec in [
        with(
            "blockDeviceMappings",
            json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "1G"}}]),
        ),
        with(
            "blockDeviceMappings",
            json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "64T"}}]),
        ),
        with(
            "blockDeviceMappings",
            json!([{"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-1"}}]),
        ),
        with(
            "metadataOptions",
            json!({"httpPutResponseHopLimit": 1, "httpTokens": "required", "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled"}),
        ),
        with("amiSelector", json!({"aws::ids": "ami-123, ami-456"})),
        with(
            "tags",
            json!({"kubernetes.io/role/internal-elb": "1", "karpenter.sh/anything": "x"}),
        ),
        json!({"subnetSelector": {"aws-ids": "subnet-0abc,subnet-1"}, "launchTemplate": "lt"}),
    ] {
        assert_eq!(errors(spec.clone()), "", "{spec}");
    }
}

#[test]
fn denies_bad_names() {
    let mut t = template(base());
    t.metadata.name = Some("1st.template".into());
    let got = validate(&t).unwrap_err().to_string();
    assert!(got.contains("metadata.name: invalid value \"1st.template\""), "{got}");
    let _ = AwsNodeTemplateSpec::default();
}

#[test]
fn checks_cluster_name_and_spot_price() {
    let p: AwsProvider = serde_json::from_value(json!({
        "subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"},
        "clusterName": "other", "spotPrice": "0"
    }))
    .unwrap();
    let got = validate_provider(&p, &Path::new("spec.provider"), "ssungz-cluster")
        .into_result()
        .unwrap_err()
        .to_string();
    assert!(got.contains("spec.provider.clusterName: invalid value \"other\""), "{got}");
    assert!(got.contains("ssungz-cluster"), "{got}");
    assert!(got.contains("spec.provider.spotPrice: invalid value \"0\""), "{got}");
    for bad in ["", "abc", "-1", "0.0", "1e3", ".", "1.2.3", " 1"] {
        assert!(check_spot_price(bad).is_err(), "{bad}");
    }
    for ok in ["0.067", "1", "12.5", ".5"] {
        assert!(check_spot_price(ok).is_ok(), "{ok}");
    }
}
