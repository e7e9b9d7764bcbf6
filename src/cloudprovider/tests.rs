use super::*;

#[test]
fn parses_instance_ids_from_provider_ids() {
    assert_eq!(instance_id_from_provider_id("aws:///ap-northeast-2a/i-0abc"), Some("i-0abc"));
    assert_eq!(instance_id_from_provider_id("kwok://x"), None);
    assert_eq!(instance_id_from_provider_id("aws:///ap-northeast-2a/"), None);
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
