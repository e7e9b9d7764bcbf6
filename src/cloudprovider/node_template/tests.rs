use super::*;
use crate::apis::v1alpha1::BlockDevice;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const V1_32: KubernetesVersion = KubernetesVersion { major: 1, minor: 32 };
const V1_33: KubernetesVersion = KubernetesVersion { major: 1, minor: 33 };

#[test]
fn defaults_selectors_to_the_discovery_tag_of_the_provider_cluster() {
    let provider = AwsProvider {
        cluster_name: Some("other".into()),
        ..Default::default()
    };
    let t = NodeTemplate::from_provider(&provider, "ssungz-cluster", V1_32).unwrap();
    assert_eq!(t.subnet_selector, discovery_selector("other"));
    assert_eq!(t.security_group_selector, discovery_selector("other"));
    assert_eq!(t.ami_family, AmiFamily::Al2);
    let spec = AwsNodeTemplateSpec {
        launch_template: Some("mine".into()),
        ..Default::default()
    };
    let t = NodeTemplate::from_node_template(&spec, "ssungz-cluster", V1_33).unwrap();
    assert!(t.security_group_selector.is_empty());
}

#[test]
fn rejects_windows_ami_families_naming_the_value() {
    let spec: AwsNodeTemplateSpec = serde_json::from_value(serde_json::json!({"amiFamily": "Windows2019"})).unwrap();
    let err = NodeTemplate::from_node_template(&spec, "ssungz-cluster", V1_33).unwrap_err();
    assert_eq!(err.kind(), "invalid_configuration");
    assert!(err.to_string().contains("\"Windows2019\""), "{err}");
}

#[test]
fn reads_spot_price_caps() {
    let provider = AwsProvider {
        spot_price: Some("0.067".into()),
        ..Default::default()
    };
    assert_eq!(spot_max_price(&provider), Some(0.067));
    assert_eq!(spot_max_price(&AwsProvider::default()), None);
}

#[test]
fn parses_kubernetes_versions_from_flags_and_the_api_server() {
    assert_eq!(KubernetesVersion::parse("1.33"), Ok(V1_33));
    assert_eq!(KubernetesVersion::parse("v1.32.4"), Ok(V1_32));
    for bad in ["1", "1.", "1.33.", "1.x", "one.two", "1.33.2.1", ""] {
        let err = KubernetesVersion::parse(bad).unwrap_err();
        assert!(err.contains(&format!("{bad:?}")), "{err}");
    }
    assert_eq!(KubernetesVersion::from_api_server("1", "33+"), Ok(V1_33));
    assert_eq!(KubernetesVersion::from_api_server("1", "32"), Ok(V1_32));
    assert!(KubernetesVersion::from_api_server("", "33").unwrap_err().contains("major \"\""));
    assert_eq!(V1_33.to_string(), "1.33");
}

#[test]
fn templates_without_an_ami_family_get_al2_up_to_1_32_and_al2023_from_1_33() {
    assert_eq!(default_ami_family(KubernetesVersion { major: 1, minor: 27 }), AmiFamily::Al2);
    assert_eq!(default_ami_family(V1_32), AmiFamily::Al2);
    assert_eq!(default_ami_family(V1_33), AmiFamily::Al2023);
    assert_eq!(default_ami_family(KubernetesVersion { major: 1, minor: 34 }), AmiFamily::Al2023);
    let spec = AwsNodeTemplateSpec::default();
    let t = NodeTemplate::from_node_template(&spec, "c", V1_32).unwrap();
    assert_eq!((t.ami_family, t.kubernetes_version), (AmiFamily::Al2, V1_32));
    let t = NodeTemplate::from_node_template(&spec, "c", V1_33).unwrap();
    assert_eq!(t.ami_family, AmiFamily::Al2023);
    let t = NodeTemplate::from_provider(&AwsProvider::default(), "c", V1_33).unwrap();
    assert_eq!(t.ami_family, AmiFamily::Al2023);
    // A family that is named is kept, whatever the version.
    let al2 = AwsNodeTemplateSpec {
        ami_family: Some("AL2".into()),
        ..Default::default()
    };
    assert_eq!(
        NodeTemplate::from_node_template(&al2, "c", V1_33).unwrap().ami_family,
        AmiFamily::Al2
    );
    let al2023 = AwsNodeTemplateSpec {
        ami_family: Some("AL2023".into()),
        ..Default::default()
    };
    assert_eq!(
        NodeTemplate::from_node_template(&al2023, "c", V1_32).unwrap().ami_family,
        AmiFamily::Al2023
    );
}

fn mapping(device: &str, size: &str) -> BlockDeviceMapping {
    BlockDeviceMapping {
        device_name: Some(device.into()),
        ebs: Some(BlockDevice {
            volume_size: Some(Quantity(size.into())),
            ..Default::default()
        }),
    }
}

#[test]
fn ephemeral_storage_is_the_families_root_volume_or_20gi() {
    let template = |family: &str, mappings: Option<Vec<BlockDeviceMapping>>| {
        let spec = AwsNodeTemplateSpec {
            ami_family: Some(family.into()),
            block_device_mappings: mappings,
            ..Default::default()
        };
        NodeTemplate::from_node_template(&spec, "c", V1_33).unwrap()
    };
    const GI: i64 = 1 << 30;
    let both = || {
        Some(vec![
            mapping("/dev/xvda", "100Gi"),
            mapping("/dev/xvdb", "60Gi"),
            mapping("/dev/sda1", "80Gi"),
        ])
    };
    assert_eq!(template("AL2", None).ephemeral_storage_bytes(), 20 * GI);
    assert_eq!(template("AL2", both()).ephemeral_storage_bytes(), 100 * GI);
    assert_eq!(template("AL2023", both()).ephemeral_storage_bytes(), 100 * GI);
    assert_eq!(template("Bottlerocket", both()).ephemeral_storage_bytes(), 60 * GI);
    assert_eq!(template("Ubuntu", both()).ephemeral_storage_bytes(), 80 * GI);
    assert_eq!(
        template("Custom", both()).ephemeral_storage_bytes(),
        80 * GI,
        "Custom: the last mapping"
    );
    assert_eq!(
        template("AL2", Some(vec![mapping("/dev/xvdb", "100Gi")])).ephemeral_storage_bytes(),
        20 * GI,
        "no mapping of the root device: the default"
    );
    assert_eq!(
        template("AL2", Some(vec![mapping("/dev/xvda", "100G")])).ephemeral_storage_bytes(),
        100_000_000_000
    );
}
