use super::*;

#[test]
fn parses_instance_ids_from_provider_ids() {
    assert_eq!(instance_id_from_provider_id("aws:///ap-northeast-2a/i-0abc"), Some("i-0abc"));
    assert_eq!(instance_id_from_provider_id("kwok://x"), None);
    assert_eq!(instance_id_from_provider_id("aws:///ap-northeast-2a/"), None);
}

/// A configured bundle wins; without one, the kube config's CA is trusted; a kube config without
/// one leaves none.
#[test]
fn nodes_trust_the_kube_config_ca_unless_a_bundle_is_configured() {
    let root = [vec![1u8; 3]];
    let mut config = CloudConfig::new("c", "https://k");
    config.trust_kube_config_ca(Some(&root));
    assert_eq!(config.cluster_ca_bundle, Some(ca_bundle_from_der(&root)));
    let mut configured = CloudConfig::new("c", "https://k");
    configured.cluster_ca_bundle = Some("Q0E=".into());
    configured.trust_kube_config_ca(Some(&root));
    assert_eq!(configured.cluster_ca_bundle.as_deref(), Some("Q0E="));
    let mut none = CloudConfig::new("c", "https://k");
    none.trust_kube_config_ca(Some(&[]));
    none.trust_kube_config_ca(None);
    assert_eq!(none.cluster_ca_bundle, None);
}

#[test]
fn encodes_der_certificates_as_an_eks_ca_bundle() {
    let bundle = ca_bundle_from_der(&[vec![0u8; 60], vec![1u8; 3]]);
    let pem = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(bundle).unwrap()).unwrap();
    let zeros = base64::engine::general_purpose::STANDARD.encode([0u8; 60]);
    assert_eq!(
        pem,
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n{}\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nAQEB\n-----END CERTIFICATE-----\n",
            &zeros[..64],
            &zeros[64..]
        )
    );
}
